/* s1gold.h: a question's gold answer, as docs/eval-format.md defines it.
 *
 * One module resolves a gold value against a question's answer keys, so that
 * a dataset's "gold" (eval/evalset.c) and a feedback's "gold" (serve/store.c,
 * POST /v1/feedback) are read by the same rules and refused with the same
 * words. Pure: no I/O, no allocation. */
#ifndef TANDEM_S1GOLD_H
#define TANDEM_S1GOLD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "proto/s1q.h"

/* How far a target distribution's sum may stray from 1. */
#define S1GOLD_TARGET_SUM_TOLERANCE 1e-6

/* A question as gold answers see it: its id, type and answer keys in order
 * (choice: option names; score: "0".."n-1"; noul: "true", "false"). Borrowed. */
struct s1gold_question {
    const char *id;
    enum s1q_type type;
    const char *const *options;
    size_t n_options;
};

/* What a gold value resolved to. */
struct s1gold {
    size_t index;    /* the gold answer: an index into the options */
    bool has_target; /* target[] holds a target distribution (else one-hot) */
};

/* Resolves the gold value g (borrowed) of question q: a plain answer (a
 * choice's option name, a noul's true/false, a score's level 0..n-1) or an
 * object {"answer": A, "target": {key: p}} with either member or both (no
 * answer: the target's unique most probable key). target (caller-owned,
 * q->n_options doubles) receives the target distribution, zero where a key is
 * left out, when there is one. where names the value in messages ("gold.route").
 * Returns TANDEM_OK with *out set, or TANDEM_ERR_FORMAT with err[errlen]
 * (optional) "<where>: <reason>", e.g. `gold.route: "bills" is not an option
 * of question route (billing, shipping)`. */
tandem_err s1gold_parse(const struct s1gold_question *q, const json_t *g, const char *where,
                        struct s1gold *out, double *target, char *err, size_t errlen);

/* The kind of v as these messages name it: "an object", "an array", "a
 * string", "an integer", "a number", "true", "false", "null". */
const char *s1gold_kind(const json_t *v);

/* Writes q's answer keys into buf[cap] as "a, b, c" ("..." at the end when
 * cut). */
void s1gold_option_list(const struct s1gold_question *q, char *buf, size_t cap);

#endif
