/* s1.c: the System One request contract and tandem's error body.
 *
 * Validation walks the parsed body once, in a fixed order (model, state,
 * questions in their key order, images, files), and stops at the first
 * problem: the message names the field path and says what was expected and
 * what was found, so a client can fix its request without reading the
 * engine's log. It checks shape only; token budgets, the loaded model's
 * capabilities and answer semantics belong to the engine. Unknown fields pass
 * through, as the engine ignores them.
 *
 * The error body is one shape for every route, carrying both the OpenAI
 * member ("error") and the TypeSafe member ("detail") so that either kind of
 * client parses it. */
#include "serve/s1.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"

/* The caller's optional message buffer. */
struct out {
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static tandem_err fail(const struct out *o,
                                                             const char *fmt, ...) {
    if (!o->err || !o->errlen)
        return TANDEM_ERR_FORMAT;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->err, o->errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= o->errlen)
        tandem_utf8_trim(o->err, o->errlen - 1);
    return TANDEM_ERR_FORMAT;
}

/* What a value is, for "got ..." (integers and reals are both numbers to a
 * client). */
static const char *kind(const json_t *v) {
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

/* A string, object or array: what instructions, state and descriptions take. */
static bool is_text_like(const json_t *v) {
    return json_is_string(v) || json_is_object(v) || json_is_array(v);
}

#define TEXT_LIKE "a string, object or array"
#define DESCRIPTION "a string, object, array or null"
#define TYPES "\"choice\", \"score\" or \"noul\""

static tandem_err check_choice(const struct out *o, const char *qid, const json_t *crit,
                               unsigned max_options) {
    if (!crit)
        return fail(o, "questions.%s.criteria: missing; a choice question expects an object "
                       "of option -> description", qid);
    if (!json_is_object(crit))
        return fail(o, "questions.%s.criteria: a choice question expects an object of option "
                       "-> description, got %s", qid, kind(crit));
    size_t n = json_object_size(crit);
    if (n == 0)
        return fail(o, "questions.%s.criteria: expected at least 1 option, got an empty object",
                    qid);
    if (n > max_options)
        return fail(o, "questions.%s.criteria: %zu options, this model accepts at most %u", qid,
                    n, max_options);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)crit, key, v) {
        if (!is_text_like(v) && !json_is_null(v))
            return fail(o, "questions.%s.criteria.%s: expected " DESCRIPTION ", got %s", qid,
                        key, kind(v));
    }
    return TANDEM_OK;
}

static tandem_err check_score(const struct out *o, const char *qid, const json_t *crit) {
    if (!crit)
        return fail(o, "questions.%s.criteria: missing; a score question expects an array of "
                       "%u to %u level descriptions, lowest first", qid, S1_MIN_SCORE_LEVELS,
                    S1_MAX_SCORE_LEVELS);
    if (!json_is_array(crit))
        return fail(o, "questions.%s.criteria: a score question expects an array of %u to %u "
                       "level descriptions, lowest first, got %s", qid, S1_MIN_SCORE_LEVELS,
                    S1_MAX_SCORE_LEVELS, kind(crit));
    size_t n = json_array_size(crit);
    if (n < S1_MIN_SCORE_LEVELS || n > S1_MAX_SCORE_LEVELS)
        return fail(o, "questions.%s.criteria: expected %u to %u levels, got %zu", qid,
                    S1_MIN_SCORE_LEVELS, S1_MAX_SCORE_LEVELS, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(crit, i);
        if (!is_text_like(v))
            return fail(o, "questions.%s.criteria[%zu]: expected " TEXT_LIKE ", got %s", qid, i,
                        kind(v));
    }
    return TANDEM_OK;
}

/* A null criteria counts as absent: SDKs serialize an unset optional as null. */
static tandem_err check_noul(const struct out *o, const char *qid, const json_t *crit) {
    if (!crit || json_is_null(crit))
        return TANDEM_OK;
    if (!json_is_object(crit))
        return fail(o, "questions.%s.criteria: a noul question expects an object with keys "
                       "\"true\" and/or \"false\", got %s", qid, kind(crit));
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)crit, key, v) {
        if (strcmp(key, "true") && strcmp(key, "false"))
            return fail(o, "questions.%s.criteria: unexpected key \"%s\"; a noul question takes "
                           "only \"true\" and \"false\"", qid, key);
        if (!is_text_like(v) && !json_is_null(v))
            return fail(o, "questions.%s.criteria.%s: expected " DESCRIPTION ", got %s", qid,
                        key, kind(v));
    }
    return TANDEM_OK;
}

static tandem_err check_question(const struct out *o, const char *qid, const json_t *q,
                                 unsigned max_options) {
    if (!*qid)
        return fail(o, "questions: a question id must be a non-empty string, got \"\"");
    if (!json_is_object(q))
        return fail(o, "questions.%s: expected an object, got %s", qid, kind(q));
    const json_t *type = json_object_get(q, "type");
    const char *t = json_string_value(type);
    if (!type)
        return fail(o, "questions.%s.type: missing; expected " TYPES, qid);
    if (!t)
        return fail(o, "questions.%s.type: expected " TYPES ", got %s", qid, kind(type));
    if (strcmp(t, "choice") && strcmp(t, "score") && strcmp(t, "noul"))
        return fail(o, "questions.%s.type: expected " TYPES ", got \"%s\"", qid, t);
    const json_t *ins = json_object_get(q, "instructions");
    if (!ins)
        return fail(o, "questions.%s.instructions: missing; expected " TEXT_LIKE, qid);
    if (!is_text_like(ins))
        return fail(o, "questions.%s.instructions: expected " TEXT_LIKE ", got %s", qid,
                    kind(ins));
    const json_t *crit = json_object_get(q, "criteria");
    if (!strcmp(t, "choice"))
        return check_choice(o, qid, crit, max_options);
    if (!strcmp(t, "score"))
        return check_score(o, qid, crit);
    return check_noul(o, qid, crit);
}

static tandem_err check_questions(const struct out *o, const json_t *qs, unsigned max_options) {
    if (!qs)
        return fail(o, "questions: missing; expected an object of question id -> question");
    if (!json_is_object(qs))
        return fail(o, "questions: expected an object of question id -> question, got %s",
                    kind(qs));
    if (json_object_size(qs) == 0)
        return fail(o, "questions: expected at least 1 question, got an empty object");
    const char *qid;
    json_t *q;
    json_object_foreach((json_t *)qs, qid, q) {
        tandem_err e = check_question(o, qid, q, max_options);
        if (e)
            return e;
    }
    return TANDEM_OK;
}

/* Checks the optional array of strings body[name] ("images", "files"). */
static tandem_err check_strings(const struct out *o, const json_t *body, const char *name) {
    const json_t *a = json_object_get(body, name);
    if (!a)
        return TANDEM_OK;
    if (!json_is_array(a))
        return fail(o, "%s: expected an array of strings, got %s", name, kind(a));
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_string(json_array_get(a, i)))
            return fail(o, "%s[%zu]: expected a string, got %s", name, i,
                        kind(json_array_get(a, i)));
    return TANDEM_OK;
}

tandem_err s1_validate_request(const json_t *body, unsigned max_options, char *err,
                               size_t errlen) {
    const struct out o = {err, errlen};
    if (!json_is_object(body))
        return fail(&o, "request body: expected a JSON object, got %s", kind(body));
    const json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model))
        return fail(&o, "model: expected a string, got %s", kind(model));
    const json_t *state = json_object_get(body, "state");
    if (!state)
        return fail(&o, "state: missing; expected " TEXT_LIKE);
    if (!is_text_like(state))
        return fail(&o, "state: expected " TEXT_LIKE ", got %s", kind(state));
    tandem_err e = check_questions(&o, json_object_get(body, "questions"), max_options);
    if (!e)
        e = check_strings(&o, body, "images");
    if (!e)
        e = check_strings(&o, body, "files");
    return e;
}

const char *s1_request_model(const json_t *body) {
    return json_string_value(json_object_get(body, "model"));
}

const char *s1_error_type(int status) {
    switch (status) {
    case 400:
    case 422: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed";
    case 413: return "request_too_large";
    case 429: return "queue_full";
    case 500: return "internal_error";
    case 501: return "not_supported_error";
    case 502: return "upstream_error";
    case 503: return "unavailable_error";
    case 504: return "deadline_exceeded";
    }
    return "error";
}

/* A JSON string for s, which always serializes: when s is not valid UTF-8
 * (a caller's truncated buffer, an upstream's bytes), its non-ASCII bytes
 * become '?'. NULL only when out of memory. */
static json_t *text(const char *s) {
    json_t *j = json_string(s);
    if (j)
        return j;
    char *copy = mem_strdup(s);
    if (!copy)
        return NULL;
    for (char *p = copy; *p; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    j = json_string(copy);
    mem_free(copy);
    return j;
}

/* json_object_set_new() steals value even when it fails, and fails on a NULL
 * object or value, so a chain of calls needs one check at the end. */
json_t *s1_error_body(int status, const char *type, const char *message, const char *param) {
    if (!type)
        type = s1_error_type(status);
    if (!message)
        message = "";
    json_t *body = json_object(), *error = json_object(), *detail = json_object();
    int bad = !body;
    bad |= json_object_set_new(error, "code", json_integer(status));
    bad |= json_object_set_new(error, "type", text(type));
    bad |= json_object_set_new(error, "message", text(message));
    if (param)
        bad |= json_object_set_new(error, "param", text(param));
    bad |= json_object_set_new(detail, "error_type", text(type));
    bad |= json_object_set_new(detail, "message", text(message));
    bad |= json_object_set_new(body, "error", error);
    bad |= json_object_set_new(body, "detail", detail);
    if (bad) {
        json_decref(body);
        return NULL;
    }
    return body;
}

/* One serialization attempt; the bytes written, 0 when it did not fit. */
static size_t dump_error(int status, const char *type, const char *message, char *out,
                         size_t cap) {
    json_t *doc = s1_error_body(status, type, message, NULL);
    size_t n = doc ? json_dumpb(doc, out, cap - 1, JSON_COMPACT | JSON_PRESERVE_ORDER) : 0;
    json_decref(doc);
    return n > cap - 1 ? 0 : n;
}

void s1_error_dump(int status, const char *type, const char *message, char *out, size_t cap) {
    size_t n = dump_error(status, type, message, out, cap);
    if (!n)
        n = dump_error(status, type, "refused", out, cap);
    out[n] = '\0';
}

unsigned s1_max_options(const char *decision_type) {
    return !strcmp(decision_type, "openjev") ? S1_OPENJEV_MAX_CHOICE_OPTIONS : S1_MAX_CHOICE_OPTIONS;
}

uint64_t s1_prompt_key(const json_t *body) {
    static const char *const members[] = {"state", "messages", "prompt", "input"};
    const json_t *v = NULL;
    for (size_t i = 0; !v && json_is_object(body) && i < sizeof members / sizeof *members; i++)
        v = json_object_get(body, members[i]);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
    if (!text)
        return 0;
    uint64_t h = 14695981039346656037ull; /* FNV-1a, 64 bits */
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    mem_free(text);
    return h ? h : 1;
}
