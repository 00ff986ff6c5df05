/* tmpl.h: the pipeline template language (docs/pipelines.md, "Templates").
 *
 * A template is text with holes: {{ reference }}. Whitespace inside the
 * braces is ignored. There is no code, no loop, no condition and no escape
 * sequence: a template can only copy values of the request and of earlier
 * answers into text. References (the grammar is exactly this list):
 *
 *   state                    the request's state (a string as is; an object or
 *                            array as compact JSON)
 *   instructions             the decide question's instructions (not inside the
 *                            default instructions themselves)
 *   candidates               every candidate, one "- option: description" line
 *                            each, in request order
 *   candidates[decide.choice] the description of the candidate under
 *                            verification
 *   decide.choice            the candidate under verification (its option name)
 *   decide.confidence        the decide answer's confidence, "%.2f"
 *   decide.probability       the decide probability of the candidate under
 *                            verification, "%.2f"
 *   decide.<id>              the answer to the decide stage's extra question <id>
 *   verify.<id>              the answer to question <id> of an earlier verify stage
 *   attempt                  the attempt number, 1 for the most probable candidate
 *
 * An answer renders as its choice (choice), "%.2f" of its noul (noul) or of its
 * score (score). A description that is not a string renders as compact JSON,
 * null as "". Every reference is checked when the template is compiled, so a
 * missing or misspelt one is a configuration error, never a request-time one. */
#ifndef TANDEM_TMPL_H
#define TANDEM_TMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "base/mem.h"

struct tmpl; /* opaque: a compiled template */

/* What a template may reference where it is used. */
struct tmpl_scope {
    bool decided;                  /* decide.* and candidates[decide.choice] exist (true in
                                    * verify stages, false in the decide stage) */
    const char *const *decide_ids; /* the decide stage's extra question ids; NULL-terminated,
                                    * NULL = none; usable only when decided */
    const char *const *verify_ids; /* question ids of the earlier verify stages; NULL-terminated,
                                    * NULL = none */
    bool renders_instructions;     /* this template is the default instructions itself, so
                                    * {{instructions}} would refer to itself */
};

/* Compiles text (borrowed) for scope (borrowed for the call). On success *out
 * is a new template (caller frees with tmpl_free). Returns TANDEM_ERR_FORMAT
 * with err[errlen] (optional output) saying what is wrong and where, e.g.
 * "unknown reference {{decide.choise}} at column 12 (known: state,
 * instructions, candidates, ...)", "{{ at column 3 is never closed",
 * "empty reference {{}} at column 5", "decide.urgent: no such decide question",
 * "verify.consistent: not answered before this stage", "decide.choice is
 * only known in verify stages", "{{instructions}} at column 7 refers to
 * itself ..."; TANDEM_ERR_NOMEM. Columns are 1-based byte
 * offsets into text. */
tandem_err tmpl_compile(const char *text, const struct tmpl_scope *scope, struct tmpl **out,
                        char *err, size_t errlen);

/* Releases t. tmpl_free(NULL) is a no-op. */
void tmpl_free(struct tmpl *t);

/* Whether t has no reference at all (its text renders as is). */
bool tmpl_is_literal(const struct tmpl *t);

/* The values a render reads; every pointer is borrowed for the call. */
struct tmpl_values {
    const json_t *state;          /* the request's state */
    const json_t *instructions;   /* the decide instructions (string, object or array) */
    const json_t *candidates;     /* object option -> description, in request order */
    const char *choice;           /* the candidate under verification; NULL in decide */
    double confidence;            /* the decide answer's confidence */
    double probability;           /* the decide probability of choice */
    const json_t *decide_answers; /* the decide stage's "answers" object, or NULL */
    const json_t *verify_answers; /* id -> answer of earlier verify stages, or NULL */
    unsigned attempt;             /* 1-based */
};

/* Appends t rendered with v to out (its hard maximum applies). Returns
 * TANDEM_ERR_TOOBIG past out's maximum, TANDEM_ERR_NOMEM, or
 * TANDEM_ERR_NOTFOUND when a referenced answer or candidate is missing from
 * v (a value compiled as known but absent at run time: an engine answer
 * without that question), with err[errlen] (optional) naming the reference.
 * On failure out may hold part of the rendering. */
tandem_err tmpl_render(const struct tmpl *t, const struct tmpl_values *v, struct mem_buf *out,
                       char *err, size_t errlen);

#endif
