/* s1q.h: the System One question contract, one definition for every layer.
 *
 * A question of POST /v1/systemone (shared/reference/systemone-api.md): its
 * types, the limits on its criteria, and the check of one question object.
 * The daemon's request check (serve/s1.c) and the dataset loader
 * (eval/evalset.c) both call s1q_check(), so a question the daemon serves is
 * a question a dataset may hold, and the other way round. The check
 * classifies the first problem it finds (struct s1q_problem), so that each
 * caller can word it for its own readers, and words it too ("<field path>:
 * <what is wrong>"). Pure functions over jansson values; no state, no I/O. */
#ifndef TANDEM_S1Q_H
#define TANDEM_S1Q_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* The API's limits on criteria. A model may accept fewer choice options than
 * the API (openjev: 52); s1q_check() takes the limit that applies. */
#define S1Q_MIN_CHOICE_OPTIONS 1u
#define S1Q_MAX_CHOICE_OPTIONS 255u
#define S1Q_OPENJEV_MAX_CHOICE_OPTIONS 52u
#define S1Q_MIN_SCORE_LEVELS 2u
#define S1Q_MAX_SCORE_LEVELS 10u

/* The keys a noul question's criteria may hold, which are also its answer
 * keys, in this order. */
#define S1Q_NOUL_TRUE "true"
#define S1Q_NOUL_FALSE "false"

/* What the API takes as text (state, instructions, descriptions), for
 * messages. */
#define S1Q_TEXT_KINDS "a string, object or array"

enum s1q_type {
    S1Q_TYPE_CHOICE,
    S1Q_TYPE_SCORE,
    S1Q_TYPE_NOUL,
};
#define S1Q_TYPE_COUNT 3

/* Returns the static API name of t: "choice", "score" or "noul" ("?" for a
 * value outside the enum). */
const char *s1q_type_name(enum s1q_type t);

/* Sets *out (output) to the type named name; returns false, leaving *out
 * alone, when name is NULL or names no type. */
bool s1q_type_parse(const char *name, enum s1q_type *out);

/* Whether key is one of the API's question fields: "type", "instructions",
 * "criteria". A question may carry others (the engine ignores them);
 * callers that refuse them (a dataset's typo guard) ask this. */
bool s1q_field_known(const char *key);

/* Whether v is text to the API: a string, object or array (NULL: false). */
bool s1q_is_text(const json_t *v);

/* The static kind of v as the contract's messages say it after "got": "an
 * object", "an array", "a string", "a number" (integer or real), "a boolean",
 * "null", and "nothing" for NULL. */
const char *s1q_kind(const json_t *v);

/* The first problem of a question, in the order s1q_check() looks. */
enum s1q_fault {
    S1Q_FAULT_NONE,                 /* the question is valid */
    S1Q_FAULT_ID_EMPTY,             /* its id is "" */
    S1Q_FAULT_NOT_OBJECT,           /* the question is not an object */
    S1Q_FAULT_TYPE_MISSING,
    S1Q_FAULT_TYPE_KIND,            /* "type" is not a string */
    S1Q_FAULT_TYPE_UNKNOWN,         /* "type" is a string that names no type */
    S1Q_FAULT_INSTRUCTIONS_MISSING,
    S1Q_FAULT_INSTRUCTIONS_KIND,    /* "instructions" is not text */
    S1Q_FAULT_CRITERIA_MISSING,     /* a choice or score question without "criteria" */
    S1Q_FAULT_CRITERIA_KIND,        /* "criteria" is not what the type takes */
    S1Q_FAULT_CRITERIA_FEW,         /* fewer options or levels than min */
    S1Q_FAULT_CRITERIA_MANY,        /* more options or levels than max */
    S1Q_FAULT_CRITERIA_KEY,         /* noul: a key other than "true" and "false" */
    S1Q_FAULT_DESCRIPTION_KIND,     /* an option's, level's or noul key's description */
};

/* What s1q_check() found. Pointers are borrowed from its arguments and valid
 * while they are. */
struct s1q_problem {
    enum s1q_fault fault;
    const char *qid;     /* the question id, as given */
    enum s1q_type type;  /* the question's type: set when it is valid and for
                            the faults from S1Q_FAULT_CRITERIA_MISSING on */
    const json_t *value; /* the offending value: the question (NOT_OBJECT),
                            "type", "instructions", "criteria" or the
                            description; NULL when it is missing */
    const char *key;     /* CRITERIA_KEY, and DESCRIPTION_KIND of a choice or
                            noul question: the criteria key; else NULL */
    size_t index;        /* DESCRIPTION_KIND of a score question: the level */
    size_t count;        /* the options or levels found (criteria faults) */
    unsigned min, max;   /* the range of options (max is the caller's
                            max_options) or levels (criteria faults) */
};

/* Checks the question q (borrowed, not modified) with id qid against the
 * contract, in this order, stopping at the first problem:
 *   - qid is non-empty, q is an object;
 *   - "type": "choice", "score" or "noul";
 *   - "instructions": text (s1q_is_text());
 *   - "criteria" by type:
 *       choice: an object of S1Q_MIN_CHOICE_OPTIONS to max_options options,
 *               name -> description (text or null), in key order; names are
 *               the caller's, "" included;
 *       score:  an array of S1Q_MIN_SCORE_LEVELS to S1Q_MAX_SCORE_LEVELS
 *               level descriptions (text), lowest first;
 *       noul:   absent or null, or an object whose only keys are
 *               S1Q_NOUL_TRUE and/or S1Q_NOUL_FALSE (text or null).
 * Other fields of q are allowed. max_options is the loaded model's limit:
 * S1Q_MAX_CHOICE_OPTIONS for the API, less for some models.
 * Returns TANDEM_OK, or TANDEM_ERR_FORMAT for a problem. *p (optional
 * output) says what was found: the fault (S1Q_FAULT_NONE when valid) and the
 * type of a valid question. err[errlen] (optional, caller-owned output) gets
 * "<field path>: <what is wrong>", e.g. "questions.route.criteria: expected
 * at least 1 option, got an empty object", cut to fit errlen, never inside a
 * UTF-8 sequence; it is untouched when the question is valid. */
tandem_err s1q_check(const char *qid, const json_t *q, unsigned max_options,
                     struct s1q_problem *p, char *err, size_t errlen);

#endif
