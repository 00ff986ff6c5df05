/* s1q.c: the System One question contract: types, limits, the check of one
 * question.
 *
 * The check runs in two steps. classify() walks the question once, in the
 * order the header gives, and records the first problem in a struct
 * s1q_problem: which fault, the offending value and the numbers a message
 * needs. word() turns a problem into the contract's message. Keeping the
 * verdict apart from its wording lets serve/s1.c answer with these messages
 * and eval/evalset.c keep its own ("file:line: field: reason") while both
 * reach the same verdict on every question.
 *
 * Only the shape is checked. Token budgets, a model's capabilities beyond
 * its option limit, and what the texts say belong to the engine. */
#include "proto/s1q.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const type_names[S1Q_TYPE_COUNT] = {
    [S1Q_TYPE_CHOICE] = "choice",
    [S1Q_TYPE_SCORE] = "score",
    [S1Q_TYPE_NOUL] = "noul",
};

const char *s1q_type_name(enum s1q_type t) {
    return (unsigned)t < S1Q_TYPE_COUNT ? type_names[t] : "?";
}

bool s1q_type_parse(const char *name, enum s1q_type *out) {
    for (unsigned t = 0; name && t < S1Q_TYPE_COUNT; t++)
        if (!strcmp(name, type_names[t])) {
            *out = (enum s1q_type)t;
            return true;
        }
    return false;
}

bool s1q_field_known(const char *key) {
    return !strcmp(key, "type") || !strcmp(key, "instructions") || !strcmp(key, "criteria");
}

bool s1q_is_text(const json_t *v) {
    return json_is_string(v) || json_is_object(v) || json_is_array(v);
}

const char *s1q_kind(const json_t *v) {
    if (!v)
        return "nothing";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

/* --- the verdict --------------------------------------------------------------- */

/* Records fault f at value v in *p; returns true, so that a check can
 * `return found(...)`. */
static bool found(struct s1q_problem *p, enum s1q_fault f, const json_t *v) {
    p->fault = f;
    p->value = v;
    return true;
}

/* A description of an option or noul key: text or null. */
static bool is_description(const json_t *v) {
    return s1q_is_text(v) || json_is_null(v);
}

/* Records a count outside [min, max]; false when n is inside. */
static bool out_of_range(struct s1q_problem *p, const json_t *crit, size_t n, unsigned min,
                         unsigned max) {
    p->count = n;
    p->min = min;
    p->max = max;
    if (n < min)
        return found(p, S1Q_FAULT_CRITERIA_FEW, crit);
    return n > max && found(p, S1Q_FAULT_CRITERIA_MANY, crit);
}

static bool bad_choice(struct s1q_problem *p, const json_t *crit, unsigned max_options) {
    if (!crit)
        return found(p, S1Q_FAULT_CRITERIA_MISSING, NULL);
    if (!json_is_object(crit))
        return found(p, S1Q_FAULT_CRITERIA_KIND, crit);
    if (out_of_range(p, crit, json_object_size(crit), S1Q_MIN_CHOICE_OPTIONS, max_options))
        return true;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)crit, key, v) {
        p->key = key;
        if (!is_description(v))
            return found(p, S1Q_FAULT_DESCRIPTION_KIND, v);
    }
    p->key = NULL;
    return false;
}

static bool bad_score(struct s1q_problem *p, const json_t *crit) {
    if (!crit)
        return found(p, S1Q_FAULT_CRITERIA_MISSING, NULL);
    if (!json_is_array(crit))
        return found(p, S1Q_FAULT_CRITERIA_KIND, crit);
    size_t n = json_array_size(crit);
    if (out_of_range(p, crit, n, S1Q_MIN_SCORE_LEVELS, S1Q_MAX_SCORE_LEVELS))
        return true;
    for (p->index = 0; p->index < n; p->index++)
        if (!s1q_is_text(json_array_get(crit, p->index)))
            return found(p, S1Q_FAULT_DESCRIPTION_KIND, json_array_get(crit, p->index));
    p->index = 0;
    return false;
}

/* A null criteria counts as absent: SDKs serialize an unset optional as null. */
static bool bad_noul(struct s1q_problem *p, const json_t *crit) {
    if (!crit || json_is_null(crit))
        return false;
    if (!json_is_object(crit))
        return found(p, S1Q_FAULT_CRITERIA_KIND, crit);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)crit, key, v) {
        p->key = key;
        if (strcmp(key, S1Q_NOUL_TRUE) && strcmp(key, S1Q_NOUL_FALSE))
            return found(p, S1Q_FAULT_CRITERIA_KEY, crit);
        if (!is_description(v))
            return found(p, S1Q_FAULT_DESCRIPTION_KIND, v);
    }
    p->key = NULL;
    return false;
}

/* Fills *p with the first problem of question q, or S1Q_FAULT_NONE. */
static void classify(const char *qid, const json_t *q, unsigned max_options,
                     struct s1q_problem *p) {
    *p = (struct s1q_problem){.fault = S1Q_FAULT_NONE, .qid = qid};
    if (!*qid) {
        found(p, S1Q_FAULT_ID_EMPTY, NULL);
        return;
    }
    if (!json_is_object(q)) {
        found(p, S1Q_FAULT_NOT_OBJECT, q);
        return;
    }
    const json_t *type = json_object_get(q, "type");
    const json_t *ins = json_object_get(q, "instructions");
    const json_t *crit = json_object_get(q, "criteria");
    if (!type)
        found(p, S1Q_FAULT_TYPE_MISSING, NULL);
    else if (!json_is_string(type))
        found(p, S1Q_FAULT_TYPE_KIND, type);
    else if (!s1q_type_parse(json_string_value(type), &p->type))
        found(p, S1Q_FAULT_TYPE_UNKNOWN, type);
    else if (!ins)
        found(p, S1Q_FAULT_INSTRUCTIONS_MISSING, NULL);
    else if (!s1q_is_text(ins))
        found(p, S1Q_FAULT_INSTRUCTIONS_KIND, ins);
    else if (p->type == S1Q_TYPE_CHOICE)
        bad_choice(p, crit, max_options);
    else if (p->type == S1Q_TYPE_SCORE)
        bad_score(p, crit);
    else
        bad_noul(p, crit);
}

/* --- the contract's words ------------------------------------------------------ */

#define DESCRIPTION "a string, object, array or null"
#define TYPES "\"choice\", \"score\" or \"noul\""
#define CHOICE_EXPECTS "a choice question expects an object of option -> description"
#define SCORE_EXPECTS "a score question expects an array of %u to %u level descriptions, " \
                      "lowest first"

_Static_assert(S1Q_MIN_CHOICE_OPTIONS == 1, "a choice question's count message says 1");

/* The caller's optional message buffer. */
struct out {
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static void say(const struct out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tandem_verrmsg(o->err, o->errlen, fmt, ap);
    va_end(ap);
}

/* The criteria faults: missing, of the wrong kind, or a count out of range. */
static void word_criteria(const struct out *o, const struct s1q_problem *p) {
    const char *id = p->qid, *got = s1q_kind(p->value);
    unsigned lo = S1Q_MIN_SCORE_LEVELS, hi = S1Q_MAX_SCORE_LEVELS;
    bool choice = p->type == S1Q_TYPE_CHOICE, missing = p->fault == S1Q_FAULT_CRITERIA_MISSING;
    if (p->type == S1Q_TYPE_NOUL)
        say(o, "questions.%s.criteria: a noul question expects an object with keys \"true\" "
               "and/or \"false\", got %s", id, got);
    else if (choice && missing)
        say(o, "questions.%s.criteria: missing; " CHOICE_EXPECTS, id);
    else if (choice && p->fault == S1Q_FAULT_CRITERIA_KIND)
        say(o, "questions.%s.criteria: " CHOICE_EXPECTS ", got %s", id, got);
    else if (choice && p->fault == S1Q_FAULT_CRITERIA_FEW)
        say(o, "questions.%s.criteria: expected at least 1 option, got an empty object", id);
    else if (choice)
        say(o, "questions.%s.criteria: %zu options, this model accepts at most %u", id,
            p->count, p->max);
    else if (missing)
        say(o, "questions.%s.criteria: missing; " SCORE_EXPECTS, id, lo, hi);
    else if (p->fault == S1Q_FAULT_CRITERIA_KIND)
        say(o, "questions.%s.criteria: " SCORE_EXPECTS ", got %s", id, lo, hi, got);
    else
        say(o, "questions.%s.criteria: expected %u to %u levels, got %zu", id, lo, hi, p->count);
}

/* Writes the message of problem p (a fault) to o. */
static void word(const struct out *o, const struct s1q_problem *p) {
    const char *id = p->qid, *got = s1q_kind(p->value);
    switch (p->fault) {
    case S1Q_FAULT_NONE:
        break;
    case S1Q_FAULT_ID_EMPTY:
        say(o, "questions: a question id must be a non-empty string, got \"\"");
        break;
    case S1Q_FAULT_NOT_OBJECT:
        say(o, "questions.%s: expected an object, got %s", id, got);
        break;
    case S1Q_FAULT_TYPE_MISSING:
        say(o, "questions.%s.type: missing; expected " TYPES, id);
        break;
    case S1Q_FAULT_TYPE_KIND:
        say(o, "questions.%s.type: expected " TYPES ", got %s", id, got);
        break;
    case S1Q_FAULT_TYPE_UNKNOWN:
        say(o, "questions.%s.type: expected " TYPES ", got \"%s\"", id,
            json_string_value(p->value));
        break;
    case S1Q_FAULT_INSTRUCTIONS_MISSING:
        say(o, "questions.%s.instructions: missing; expected " S1Q_TEXT_KINDS, id);
        break;
    case S1Q_FAULT_INSTRUCTIONS_KIND:
        say(o, "questions.%s.instructions: expected " S1Q_TEXT_KINDS ", got %s", id, got);
        break;
    case S1Q_FAULT_CRITERIA_MISSING:
    case S1Q_FAULT_CRITERIA_KIND:
    case S1Q_FAULT_CRITERIA_FEW:
    case S1Q_FAULT_CRITERIA_MANY:
        word_criteria(o, p);
        break;
    case S1Q_FAULT_CRITERIA_KEY:
        say(o, "questions.%s.criteria: unexpected key \"%s\"; a noul question takes only "
               "\"true\" and \"false\"", id, p->key);
        break;
    case S1Q_FAULT_DESCRIPTION_KIND:
        if (p->type == S1Q_TYPE_SCORE)
            say(o, "questions.%s.criteria[%zu]: expected " S1Q_TEXT_KINDS ", got %s", id,
                p->index, got);
        else
            say(o, "questions.%s.criteria.%s: expected " DESCRIPTION ", got %s", id, p->key, got);
        break;
    }
}

tandem_err s1q_check(const char *qid, const json_t *q, unsigned max_options,
                     struct s1q_problem *p, char *err, size_t errlen) {
    struct s1q_problem found_here;
    if (!p)
        p = &found_here;
    classify(qid, q, max_options, p);
    if (p->fault == S1Q_FAULT_NONE)
        return TANDEM_OK;
    word(&(struct out){err, errlen}, p);
    return TANDEM_ERR_FORMAT;
}
