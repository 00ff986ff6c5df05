/* s1gold.c: a question's gold answer resolved against its answer keys.
 *
 * The rules of docs/eval-format.md, "Gold answers", in one place: a plain
 * answer by type, or an object with a target distribution whose keys are the
 * question's answer keys and whose sum is 1. Messages name the value's path
 * (the caller's `where`) and list the valid keys, so a dataset line and a
 * feedback request get the same words for the same mistake. */
#include "proto/s1gold.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static tandem_err fail(char *err, size_t errlen,
                                                             const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return TANDEM_ERR_FORMAT;
}

const char *s1gold_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "?";
}

void s1gold_option_list(const struct s1gold_question *q, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < q->n_options && used + 1 < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", q->options[i]);
        if (n < 0 || (size_t)n >= cap - used) {
            if (cap > 4)
                memcpy(buf + cap - 4, "...", 4);
            return;
        }
        used += (size_t)n;
    }
}

/* Resolves a plain gold answer v of question q to an option index. */
static tandem_err gold_index(const struct s1gold_question *q, const char *where, const json_t *v,
                             size_t *out, char *err, size_t errlen) {
    char opts[256];
    switch (q->type) {
    case S1Q_TYPE_CHOICE:
        if (!json_is_string(v))
            return fail(err, errlen, "%s: a choice answer must be an option name (a string), not %s",
                        where, s1gold_kind(v));
        for (size_t i = 0; i < q->n_options; i++)
            if (!strcmp(q->options[i], json_string_value(v))) {
                *out = i;
                return TANDEM_OK;
            }
        s1gold_option_list(q, opts, sizeof opts);
        return fail(err, errlen, "%s: \"%s\" is not an option of question %s (%s)", where,
                    json_string_value(v), q->id, opts);
    case S1Q_TYPE_NOUL:
        if (!json_is_boolean(v))
            return fail(err, errlen, "%s: a noul answer must be true or false, not %s", where,
                        s1gold_kind(v));
        *out = json_is_true(v) ? 0 : 1;
        return TANDEM_OK;
    case S1Q_TYPE_SCORE:
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (json_int_t)q->n_options)
            return fail(err, errlen, "%s: a score answer must be a level, an integer from 0 to %zu%s%s",
                        where, q->n_options - 1, json_is_integer(v) ? "" : ", not ",
                        json_is_integer(v) ? "" : s1gold_kind(v));
        *out = (size_t)json_integer_value(v);
        return TANDEM_OK;
    }
    return TANDEM_ERR_INVAL;
}

/* Reads the target distribution {key: p} at sub into target[]. */
static tandem_err parse_target(const struct s1gold_question *q, const char *sub,
                               const json_t *t, double *target, char *err, size_t errlen) {
    if (!json_is_object(t) || json_object_size(t) == 0)
        return fail(err, errlen, "%s: must be a non-empty object, option -> probability", sub);
    memset(target, 0, q->n_options * sizeof *target);
    double sum = 0;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)t, key, v) {
        size_t i = 0;
        while (i < q->n_options && strcmp(q->options[i], key))
            i++;
        if (i == q->n_options) {
            char opts[256];
            s1gold_option_list(q, opts, sizeof opts);
            return fail(err, errlen, "%s: \"%s\" is not an answer key of question %s (%s)", sub,
                        key, q->id, opts);
        }
        double p = json_number_value(v);
        if (!json_is_number(v) || !isfinite(p) || p < 0 || p > 1)
            return fail(err, errlen, "%s.%s: must be a probability from 0 to 1", sub, key);
        target[i] = p;
        sum += p;
    }
    if (fabs(sum - 1) > S1GOLD_TARGET_SUM_TOLERANCE)
        return fail(err, errlen, "%s: probabilities sum to %.9g, not 1", sub, sum);
    return TANDEM_OK;
}

/* Reads {"answer": A, "target": {key: p}} (either may be missing, not both). */
static tandem_err parse_object(const struct s1gold_question *q, const char *where,
                               const json_t *g, struct s1gold *out, double *target, char *err,
                               size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)g, key, v) {
        if (strcmp(key, "answer") && strcmp(key, "target"))
            return fail(err, errlen, "%s: unknown field \"%s\" (expected answer, target)", where,
                        key);
    }
    json_t *answer = json_object_get(g, "answer"), *t = json_object_get(g, "target");
    if (!answer && !t)
        return fail(err, errlen, "%s: a gold object needs \"answer\", \"target\" or both", where);
    char sub[320];
    if (t) {
        snprintf(sub, sizeof sub, "%s.target", where);
        tandem_err e = parse_target(q, sub, t, target, err, errlen);
        if (e)
            return e;
        out->has_target = true;
    }
    if (answer) {
        snprintf(sub, sizeof sub, "%s.answer", where);
        return gold_index(q, sub, answer, &out->index, err, errlen);
    }
    /* no answer: the target's most probable key, which must be unique */
    size_t best = 0, ties = 0;
    for (size_t i = 1; i < q->n_options; i++)
        if (target[i] > target[best])
            best = i;
    for (size_t i = 0; i < q->n_options; i++)
        ties += target[i] == target[best];
    if (ties > 1)
        return fail(err, errlen, "%s.target: the most probable answer is tied; give \"answer\" too",
                    where);
    out->index = best;
    return TANDEM_OK;
}

tandem_err s1gold_parse(const struct s1gold_question *q, const json_t *g, const char *where,
                        struct s1gold *out, double *target, char *err, size_t errlen) {
    *out = (struct s1gold){0};
    if (json_is_object(g))
        return parse_object(q, where, g, out, target, err, errlen);
    return gold_index(q, where, g, &out->index, err, errlen);
}
