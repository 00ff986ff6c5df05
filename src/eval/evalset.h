/* evalset.h: evaluation datasets, one decision case per JSONL line.
 *
 * The format is documented in docs/eval-format.md. A case carries the state
 * and questions of one POST /v1/systemone request plus optional gold answers;
 * loading validates every line and reports problems as "file:line: reason"
 * naming the field. The loaded set is plain data: public structs, released
 * as a whole by evalset_free(). */
#ifndef TANDEM_EVALSET_H
#define TANDEM_EVALSET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "proto/s1q.h"

/* Hard limits of the loader; inputs beyond them are refused with a message.
 * The question contract's own limits (options, levels) are proto/s1q.h's. */
#define EVALSET_MAX_LINE (4u << 20)    /* bytes in one line */
#define EVALSET_MAX_CASES 1000000u     /* cases in one file */
#define EVALSET_MAX_QUESTIONS 256u     /* questions in one case */
#define EVALSET_MAX_REPORTED_ERRORS 20 /* bad lines listed before the loader stops */

struct evalset_question {
    char *id;               /* the question id, as in the request */
    enum s1q_type type;
    size_t n_options;       /* choice: options (1 or more); score: levels; noul: 2 */
    char **options;         /* answer keys in order: choice option names, score
                               levels "0".."n-1", noul {"true", "false"} */
    bool has_gold;          /* false: sent and compared by drift, not scored by eval */
    size_t gold;            /* index into options (noul: 0 = true, 1 = false) */
    double *target;         /* n_options target probabilities, or NULL (one-hot gold) */
};

struct evalset_case {
    char *id;               /* unique within the file */
    size_t line;            /* 1-based line number in the file */
    json_t *state;          /* owned reference: the request's "state" */
    json_t *questions;      /* owned reference: the request's "questions", as written */
    size_t n_questions;
    struct evalset_question *q; /* in the order of "questions" */
};

struct evalset {
    char *path;             /* as given to evalset_load() */
    size_t n_cases;
    struct evalset_case *cases;
    size_t n_questions;     /* over all cases */
    size_t n_gold;          /* questions with a gold answer */
};

/* Parses and validates one line text[0..len) (no terminator needed) of the
 * file named file (used only in messages) at 1-based number line into *out,
 * which the caller then owns and releases with evalset_case_deinit().
 * On failure *out is left empty, err[errlen] (optional) holds
 * "file:line: reason", and TANDEM_ERR_FORMAT (or TANDEM_ERR_NOMEM) is returned. */
tandem_err evalset_parse_line(const char *file, size_t line, const char *text, size_t len,
                              struct evalset_case *out, char *err, size_t errlen);

/* Releases what *c owns and empties it. NULL and empty cases are no-ops. */
void evalset_case_deinit(struct evalset_case *c);

/* Loads the JSONL file at path into a new set (*out, caller owns; release with
 * evalset_free()). Blank lines are skipped. Every line is validated, ids must
 * be unique, and at least one case is required. On failure nothing is
 * returned and err[errlen] (optional) lists one "file:line: reason" per bad
 * line, newline-separated, up to EVALSET_MAX_REPORTED_ERRORS of them.
 * Returns TANDEM_ERR_IO (cannot read), TANDEM_ERR_FORMAT, TANDEM_ERR_TOOBIG
 * (a limit above) or TANDEM_ERR_NOMEM. */
tandem_err evalset_load(const char *path, struct evalset **out, char *err, size_t errlen);

/* Releases the set and everything in it. evalset_free(NULL) is a no-op. */
void evalset_free(struct evalset *s);

/* Loads the /v1/systemone requests of a tandem audit log (serve/audit.c, kept
 * with logs.bodies on) as a set, like evalset_load(): one case per JSONL line
 * whose "route" is "systemone", whose "status" is 2xx and whose
 * "request_body" holds the request as JSON text; the case's id is the line's
 * "request_id", its state and questions the body's (no gold). Lines of other
 * routes, failed requests, lines without a body, and bodies that do not make
 * a valid case (cut at the log's body limit, say) are skipped and counted in
 * *skipped (output, optional); a later line with an id already used (a
 * retried request) is skipped too. A line that is not a JSON object is an
 * error ("file:line: reason"). At least one case is required: a log with
 * none says why (no bodies: logs.bodies is off). Ownership and errors as
 * evalset_load(). */
tandem_err evalset_load_audit(const char *path, struct evalset **out, size_t *skipped, char *err,
                              size_t errlen);

/* Loads path as evalset_load() does, except that a line that is not a valid
 * case, or repeats an earlier id, is skipped and counted in *skipped (output,
 * optional) instead of failing the load: for sets a program wrote from stored
 * traffic (`--data store:`), where one odd request must not hide the rest. At
 * least one case is required. Ownership and errors as evalset_load(). */
tandem_err evalset_load_lenient(const char *path, struct evalset **out, size_t *skipped,
                                char *err, size_t errlen);

/* Whether the JSONL file at path is an audit log rather than an eval set:
 * its first non-blank line is a JSON object with the keys "request_id" and
 * "route". *is_audit (output) is false for an empty file or a first line
 * that is not an object (evalset_load() then says what is wrong). Returns
 * TANDEM_ERR_IO (err says why) when path cannot be read. */
tandem_err evalset_detect_audit(const char *path, bool *is_audit, char *err, size_t errlen);

/* Loads path as an audit log or an eval set, told apart by
 * evalset_detect_audit(); *skipped (output, optional) counts the audit lines
 * that gave no case (0 for an eval set). Ownership and errors as
 * evalset_load(). */
tandem_err evalset_load_any(const char *path, struct evalset **out, size_t *skipped, char *err,
                            size_t errlen);

/* The seeded split of a set into calibration cases and held-out cases, shared
 * by `tandem imatrix` (which renders only the calibration cases) and the
 * quantization ladder (which judges only the held-out ones), so that no rung
 * is judged on the text that shaped its importance matrix.
 *
 * Case i goes to calibration (calibration[i] = true, an output array of
 * s->n_cases) when u(seed, id) < calibration_share, where u is a uniform
 * number in [0, 1) drawn from the case's id alone: the 64-bit FNV-1a hash of
 * the id's bytes, plus splitmix64(seed), through splitmix64, top 53 bits. So
 * a case's side depends only on (seed, id, share): the split is a pure
 * function, stable when cases are added, removed or reordered, and about
 * calibration_share of the cases go to calibration. A share >= 1 takes every
 * case, <= 0 (or NaN) none. Returns the number of calibration cases. */
size_t evalset_split(const struct evalset *s, uint64_t seed, double calibration_share,
                     bool *calibration);

/* Whether the case id goes to calibration under (seed, calibration_share):
 * the per-case rule of evalset_split(). */
bool evalset_split_case(const char *id, uint64_t seed, double calibration_share);

#endif
