/* s1.c: the System One request contract and tandem's error body.
 *
 * Validation walks the parsed body once, in a fixed order (model, state,
 * questions in their key order, images, files), and stops at the first
 * problem: the message names the field path and says what was expected and
 * what was found, so a client can fix its request without reading the
 * engine's log. It checks shape only; token budgets, the loaded model's
 * capabilities and answer semantics belong to the engine. Unknown fields pass
 * through, as the engine ignores them. Each question is checked, and its
 * problem worded, by the question contract (proto/s1q.c), which the dataset
 * loader shares; this file checks the body around the questions.
 *
 * The error body is one shape for every route, carrying both the OpenAI
 * member ("error") and the TypeSafe member ("detail") so that either kind of
 * client parses it. */
#include "serve/s1.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "proto/s1q.h"

/* The caller's optional message buffer. */
struct out {
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static tandem_err fail(const struct out *o,
                                                             const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tandem_verrmsg(o->err, o->errlen, fmt, ap);
    va_end(ap);
    return TANDEM_ERR_FORMAT;
}

/* The questions object; each question is the contract's (s1q_check()). */
static tandem_err check_questions(const struct out *o, const json_t *qs, unsigned max_options) {
    if (!qs)
        return fail(o, "questions: missing; expected an object of question id -> question");
    if (!json_is_object(qs))
        return fail(o, "questions: expected an object of question id -> question, got %s",
                    s1q_kind(qs));
    if (json_object_size(qs) == 0)
        return fail(o, "questions: expected at least 1 question, got an empty object");
    const char *qid;
    json_t *q;
    json_object_foreach((json_t *)qs, qid, q) {
        tandem_err e = s1q_check(qid, q, max_options, NULL, o->err, o->errlen);
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
        return fail(o, "%s: expected an array of strings, got %s", name, s1q_kind(a));
    for (size_t i = 0; i < json_array_size(a); i++)
        if (!json_is_string(json_array_get(a, i)))
            return fail(o, "%s[%zu]: expected a string, got %s", name, i,
                        s1q_kind(json_array_get(a, i)));
    return TANDEM_OK;
}

tandem_err s1_validate_request(const json_t *body, unsigned max_options, char *err,
                               size_t errlen) {
    const struct out o = {err, errlen};
    if (!json_is_object(body))
        return fail(&o, "request body: expected a JSON object, got %s", s1q_kind(body));
    const json_t *model = json_object_get(body, "model");
    if (model && !json_is_string(model))
        return fail(&o, "model: expected a string, got %s", s1q_kind(model));
    const json_t *state = json_object_get(body, "state");
    if (!state)
        return fail(&o, "state: missing; expected " S1Q_TEXT_KINDS);
    if (!s1q_is_text(state))
        return fail(&o, "state: expected " S1Q_TEXT_KINDS ", got %s", s1q_kind(state));
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
    case 409: return "conflict";
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
    return !strcmp(decision_type, "openjev") ? S1Q_OPENJEV_MAX_CHOICE_OPTIONS
                                             : S1Q_MAX_CHOICE_OPTIONS;
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
