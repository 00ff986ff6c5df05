/* Unit tests for s1: every request case of tests/data/s1/cases.jsonl with its
 * exact result, then the properties that hold for all of them (no message
 * buffer, truncation to any length ends on a whole UTF-8 character, the body
 * is not modified, the message survives the error body), a NULL body, the
 * option limit, s1_request_model, s1_error_type and the error body's shape.
 *
 * cases.jsonl holds one case per line:
 *   {"name": "...", "max_options": 52, "body": <the request body, any JSON>,
 *    "error": "<the exact message>" | null}
 * "max_options" is optional (default S1Q_MAX_CHOICE_OPTIONS); "error": null
 * means the body is valid. `make fuzz` seeds fuzz_s1 with these bodies. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "serve/s1.h"

#define CASES "tests/data/s1/cases.jsonl"
#define MAX_CASES 512

struct s1_case {
    const char *name;
    const json_t *body; /* borrowed from line */
    unsigned max_options;
    const char *error; /* NULL: valid */
    size_t lineno;
    json_t *line;
};

static struct s1_case cases[MAX_CASES];
static size_t n_cases;

/* Loads CASES into cases[]; each test runs in its own process, so every test
 * that needs them loads them once and leaves them to the process's exit. */
static void load_cases(void) {
    FILE *f = fopen(CASES, "r");
    cr_assert_not_null(f, "run the unit tests from the repository root");
    char *buf = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    n_cases = 0;
    while ((len = getline(&buf, &cap, f)) > 0) {
        lineno++;
        if (strspn(buf, " \t\r\n") == (size_t)len)
            continue;
        json_error_t je;
        json_t *line = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        cr_assert_not_null(line, CASES ":%zu: %s", lineno, je.text);
        cr_assert_lt(n_cases, MAX_CASES);
        struct s1_case *c = &cases[n_cases++];
        c->line = line;
        c->lineno = lineno;
        c->name = json_string_value(json_object_get(line, "name"));
        cr_assert_not_null(c->name, CASES ":%zu: no \"name\"", lineno);
        c->body = json_object_get(line, "body");
        cr_assert_not_null(c->body, CASES ":%zu: no \"body\"", lineno);
        const json_t *max = json_object_get(line, "max_options");
        cr_assert(!max || json_is_integer(max), CASES ":%zu: bad \"max_options\"", lineno);
        c->max_options = max ? (unsigned)json_integer_value(max) : S1Q_MAX_CHOICE_OPTIONS;
        const json_t *error = json_object_get(line, "error");
        cr_assert(json_is_string(error) || json_is_null(error),
                  CASES ":%zu: \"error\" must be a string or null", lineno);
        c->error = json_string_value(error);
    }
    free(buf); /* getline's buffer */
    fclose(f);
}

/* Whether s is well-formed UTF-8 (no overlongs, surrogates or code points
 * past U+10FFFF). */
static bool utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        size_t n;
        unsigned cp;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        p += n + 1;
    }
    return true;
}

Test(s1, cases_give_their_exact_result) {
    load_cases();
    size_t n_ok = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const struct s1_case *c = &cases[i];
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(c->name, cases[j].name, CASES ":%zu: name used twice", c->lineno);
        char err[1024] = "untouched";
        tandem_err got = s1_validate_request(c->body, c->max_options, err, sizeof err);
        if (!c->error) {
            n_ok++;
            cr_expect_eq(got, TANDEM_OK, "%s: rejected: %s", c->name, err);
            cr_expect_str_eq(err, "untouched", "%s: a valid body wrote a message", c->name);
        } else {
            cr_expect_eq(got, TANDEM_ERR_FORMAT, "%s: accepted", c->name);
            cr_expect_str_eq(err, c->error, "%s", c->name);
        }
    }
    cr_expect_geq(n_cases, 120);
    cr_expect_geq(n_ok, 25);
}

Test(s1, no_message_buffer_same_result) {
    load_cases();
    for (size_t i = 0; i < n_cases; i++) {
        const struct s1_case *c = &cases[i];
        tandem_err want = c->error ? TANDEM_ERR_FORMAT : TANDEM_OK;
        cr_expect_eq(s1_validate_request(c->body, c->max_options, NULL, 0), want, "%s", c->name);
        cr_expect_eq(s1_validate_request(c->body, c->max_options, NULL, 64), want, "%s", c->name);
        char err[8] = "keep";
        cr_expect_eq(s1_validate_request(c->body, c->max_options, err, 0), want, "%s", c->name);
        cr_expect_str_eq(err, "keep", "%s: errlen 0 wrote to err", c->name);
    }
}

/* Every errlen from 1 to the message's length + 1 gives the longest prefix
 * that fits and ends on a character boundary. */
Test(s1, truncated_messages_end_on_a_character) {
    load_cases();
    size_t n_cut_inside = 0;
    bool saw_multibyte = false;
    for (size_t i = 0; i < n_cases; i++) {
        const struct s1_case *c = &cases[i];
        if (!c->error)
            continue;
        const char *full = c->error;
        size_t len = strlen(full);
        cr_assert(utf8_valid(full), "%s: the expected message is not UTF-8", c->name);
        for (size_t k = 0; k < len; k++)
            saw_multibyte |= (unsigned char)full[k] >= 0x80;
        for (size_t errlen = 1; errlen <= len + 1; errlen++) {
            char err[1024];
            memset(err, 'X', sizeof err);
            cr_assert_eq(s1_validate_request(c->body, c->max_options, err, errlen),
                         TANDEM_ERR_FORMAT);
            size_t want = errlen - 1 < len ? errlen - 1 : len;
            while (want > 0 && want < len && ((unsigned char)full[want] & 0xC0) == 0x80)
                want--;
            n_cut_inside += want < errlen - 1 && want < len;
            cr_expect_eq(strlen(err), want, "%s, errlen %zu: \"%s\"", c->name, errlen, err);
            cr_expect(!strncmp(err, full, want), "%s, errlen %zu: \"%s\"", c->name, errlen, err);
            cr_expect(utf8_valid(err), "%s, errlen %zu: not UTF-8", c->name, errlen);
            cr_expect_eq(err[errlen], 'X', "%s, errlen %zu: wrote past errlen", c->name, errlen);
        }
    }
    cr_expect(saw_multibyte, "no case has a multi-byte character in its message");
    /* café☕🦆 alone cuts inside a character 1 + 2 + 3 times. */
    cr_expect_geq(n_cut_inside, 6);
}

Test(s1, multibyte_option_cut_to_a_tiny_buffer) {
    json_t *body = json_pack("{s:s, s:{s:{s:s, s:s, s:{s:i}}}}", "state", "s", "questions", "q",
                             "type", "choice", "instructions", "Pick.", "criteria",
                             "\xc3\xa9\xe2\x98\x95\xf0\x9f\xa6\x86", 1);
    cr_assert_not_null(body);
    /* "questions.q.criteria." is 21 bytes; then é (2), ☕ (3), 🦆 (4). */
    static const struct {
        size_t errlen;
        const char *want;
    } cuts[] = {
        {22, "questions.q.criteria."},
        {23, "questions.q.criteria."},
        {24, "questions.q.criteria.\xc3\xa9"},
        {25, "questions.q.criteria.\xc3\xa9"},
        {26, "questions.q.criteria.\xc3\xa9"},
        {27, "questions.q.criteria.\xc3\xa9\xe2\x98\x95"},
        {30, "questions.q.criteria.\xc3\xa9\xe2\x98\x95"},
        {31, "questions.q.criteria.\xc3\xa9\xe2\x98\x95\xf0\x9f\xa6\x86"},
        {1, ""},
        {2, "q"},
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char err[64];
        cr_assert_eq(s1_validate_request(body, S1Q_MAX_CHOICE_OPTIONS, err, cuts[i].errlen),
                     TANDEM_ERR_FORMAT);
        cr_expect_str_eq(err, cuts[i].want, "errlen %zu", cuts[i].errlen);
    }
    json_decref(body);
}

Test(s1, null_body) {
    char err[256] = "";
    cr_expect_eq(s1_validate_request(NULL, S1Q_MAX_CHOICE_OPTIONS, err, sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "request body: expected a JSON object, got nothing");
    cr_expect_eq(s1_validate_request(NULL, S1Q_MAX_CHOICE_OPTIONS, NULL, 0), TANDEM_ERR_FORMAT);
}

/* 1 to 60 options against openjev's 52 and a limit of 1. */
Test(s1, option_limit_is_the_models) {
    for (unsigned limit = 1; limit <= S1Q_OPENJEV_MAX_CHOICE_OPTIONS;
         limit += S1Q_OPENJEV_MAX_CHOICE_OPTIONS - 1) {
        json_t *crit = json_object();
        json_t *body = json_pack("{s:s, s:{s:{s:s, s:s, s:o}}}", "state", "s", "questions", "q",
                                 "type", "choice", "instructions", "Pick.", "criteria", crit);
        cr_assert_not_null(body);
        for (unsigned n = 1; n <= 60; n++) {
            char key[16], err[256] = "", want[256];
            snprintf(key, sizeof key, "o%u", n);
            cr_assert_eq(json_object_set_new(crit, key, json_null()), 0);
            tandem_err got = s1_validate_request(body, limit, err, sizeof err);
            if (n <= limit) {
                cr_expect_eq(got, TANDEM_OK, "%u options, limit %u: %s", n, limit, err);
            } else {
                snprintf(want, sizeof want,
                         "questions.q.criteria: %u options, this model accepts at most %u", n,
                         limit);
                cr_expect_eq(got, TANDEM_ERR_FORMAT);
                cr_expect_str_eq(err, want);
            }
        }
        json_decref(body);
    }
}

Test(s1, body_is_borrowed_not_modified) {
    load_cases();
    for (size_t i = 0; i < n_cases; i++) {
        const struct s1_case *c = &cases[i];
        char *before = json_dumps(c->body, JSON_ENCODE_ANY | JSON_COMPACT);
        size_t refs = c->body->refcount;
        char err[256];
        s1_validate_request(c->body, c->max_options, err, sizeof err);
        char *after = json_dumps(c->body, JSON_ENCODE_ANY | JSON_COMPACT);
        cr_assert(before && after);
        cr_expect_str_eq(after, before, "%s", c->name);
        cr_expect_eq(c->body->refcount, refs, "%s", c->name);
        free(before); /* jansson's default allocator */
        free(after);
    }
}

Test(s1, request_model) {
    json_t *body = json_pack("{s:s, s:s}", "model", "openjev", "state", "s");
    cr_expect_str_eq(s1_request_model(body), "openjev");
    cr_expect_eq(s1_request_model(body), json_string_value(json_object_get(body, "model")),
                 "the string is borrowed from body");
    json_object_set_new(body, "model", json_integer(3));
    cr_expect_null(s1_request_model(body));
    json_object_set_new(body, "model", json_null());
    cr_expect_null(s1_request_model(body));
    json_object_del(body, "model");
    cr_expect_null(s1_request_model(body));
    json_decref(body);
    json_t *arr = json_pack("[s]", "model");
    cr_expect_null(s1_request_model(arr));
    json_decref(arr);
    json_t *str = json_string("model");
    cr_expect_null(s1_request_model(str));
    json_decref(str);
    cr_expect_null(s1_request_model(NULL));
}

Test(s1, error_type_for_every_status) {
    static const struct {
        int status;
        const char *type;
    } types[] = {
        {400, "invalid_request_error"}, {422, "invalid_request_error"},
        {401, "authentication_error"},  {403, "permission_error"},
        {404, "not_found_error"},       {405, "method_not_allowed"},
        {413, "request_too_large"},     {429, "queue_full"},
        {500, "internal_error"},        {501, "not_supported_error"},
        {502, "upstream_error"},        {503, "unavailable_error"},
        {504, "deadline_exceeded"},     {200, "error"},
        {402, "error"},                 {529, "error"},
        {0, "error"},                   {-400, "error"},
        {999, "error"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const char *got = s1_error_type(types[i].status);
        cr_assert_not_null(got, "%d", types[i].status);
        cr_expect_str_eq(got, types[i].type, "%d", types[i].status);
    }
}

/* The body, keys sorted, as one compact line. */
static char *dump(const json_t *body) {
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_not_null(s, "json_dumps failed");
    return s;
}

Test(s1, error_body_shape) {
    json_t *b = s1_error_body(400, "invalid_request_error", "questions.q.type: missing",
                              "questions.q.type");
    cr_assert_not_null(b);
    char *s = dump(b);
    cr_expect_str_eq(s, "{\"detail\":{\"error_type\":\"invalid_request_error\",\"message\":"
                        "\"questions.q.type: missing\"},\"error\":{\"code\":400,\"message\":"
                        "\"questions.q.type: missing\",\"param\":\"questions.q.type\",\"type\":"
                        "\"invalid_request_error\"}}");
    cr_expect(json_is_integer(json_object_get(json_object_get(b, "error"), "code")));
    free(s);
    json_decref(b);
}

Test(s1, error_body_defaults) {
    json_t *b = s1_error_body(503, NULL, NULL, NULL);
    cr_assert_not_null(b);
    char *s = dump(b);
    cr_expect_str_eq(s, "{\"detail\":{\"error_type\":\"unavailable_error\",\"message\":\"\"},"
                        "\"error\":{\"code\":503,\"message\":\"\",\"type\":"
                        "\"unavailable_error\"}}");
    cr_expect_null(json_object_get(json_object_get(b, "error"), "param"), "param omitted");
    free(s);
    json_decref(b);
    b = s1_error_body(418, NULL, "teapot", NULL);
    s = dump(b);
    cr_expect_str_eq(s, "{\"detail\":{\"error_type\":\"error\",\"message\":\"teapot\"},"
                        "\"error\":{\"code\":418,\"message\":\"teapot\",\"type\":\"error\"}}");
    free(s);
    json_decref(b);
}

Test(s1, error_body_copies_its_strings) {
    char type[] = "queue_full", message[] = "queue is full", param[] = "model";
    json_t *b = s1_error_body(429, type, message, param);
    memset(type, 'x', sizeof type - 1);
    memset(message, 'x', sizeof message - 1);
    memset(param, 'x', sizeof param - 1);
    const json_t *e = json_object_get(b, "error"), *d = json_object_get(b, "detail");
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "queue_full");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")), "queue is full");
    cr_expect_str_eq(json_string_value(json_object_get(e, "param")), "model");
    cr_expect_str_eq(json_string_value(json_object_get(d, "error_type")), "queue_full");
    cr_expect_str_eq(json_string_value(json_object_get(d, "message")), "queue is full");
    json_decref(b);
}

Test(s1, error_body_keeps_valid_utf8) {
    json_t *b = s1_error_body(400, NULL, "questions.\xe8\xb7\xaf\xe7\x94\xb1: caf\xc3\xa9", NULL);
    const json_t *e = json_object_get(b, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")),
                     "questions.\xe8\xb7\xaf\xe7\x94\xb1: caf\xc3\xa9");
    json_decref(b);
}

Test(s1, error_body_replaces_invalid_utf8) {
    /* A lone 0xff, a cut sequence at the end; valid é loses its bytes too. */
    json_t *b = s1_error_body(502, "up\xffstream", "bad \xff byte, caf\xc3\xa9 \xe2\x98",
                              "q\xc3");
    cr_assert_not_null(b);
    char *s = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
    cr_assert_not_null(s, "the body must serialize");
    cr_expect_str_eq(s, "{\"detail\":{\"error_type\":\"up?stream\",\"message\":"
                        "\"bad ? byte, caf?? ??\"},\"error\":{\"code\":502,\"message\":"
                        "\"bad ? byte, caf?? ??\",\"param\":\"q?\",\"type\":\"up?stream\"}}");
    free(s);
    json_decref(b);
}

Test(s1, error_body_members_can_be_added) {
    json_t *b = s1_error_body(429, NULL, "queue is full", NULL);
    cr_assert_eq(json_object_set_new(json_object_get(b, "error"), "retry_after", json_integer(2)),
                 0);
    char *s = dump(b);
    cr_expect_str_eq(s, "{\"detail\":{\"error_type\":\"queue_full\",\"message\":\"queue is "
                        "full\"},\"error\":{\"code\":429,\"message\":\"queue is full\","
                        "\"retry_after\":2,\"type\":\"queue_full\"}}");
    free(s);
    json_decref(b);
}

/* Only the '?' replacement allocates through mem; a failure there gives NULL
 * and leaks nothing (ASan checks). */
Test(s1, error_body_allocation_failure) {
    for (long n = 0; n < 5; n++) {
        mem_fail_after(n);
        json_t *b = s1_error_body(400, NULL, "bad \xff", "p\xff");
        mem_fail_after(-1);
        if (n < 3) { /* the message, the param, the detail's message */
            cr_expect_null(b, "fail after %ld", n);
        } else {
            cr_assert_not_null(b, "fail after %ld", n);
            cr_expect_str_eq(json_string_value(json_object_get(json_object_get(b, "error"),
                                                               "param")), "p?");
        }
        json_decref(b);
    }
}

/* What api.c does: a validation message, whole or cut short, goes into the
 * error body unchanged. */
Test(s1, validation_messages_survive_the_error_body) {
    load_cases();
    for (size_t i = 0; i < n_cases; i++) {
        const struct s1_case *c = &cases[i];
        if (!c->error)
            continue;
        size_t errlens[] = {1024, 40, 23, 2};
        for (size_t k = 0; k < sizeof errlens / sizeof errlens[0]; k++) {
            char err[1024];
            s1_validate_request(c->body, c->max_options, err, errlens[k]);
            json_t *b = s1_error_body(400, NULL, err, NULL);
            cr_assert_not_null(b);
            cr_expect_str_eq(json_string_value(json_object_get(json_object_get(b, "detail"),
                                                               "message")), err, "%s", c->name);
            char *s = json_dumps(b, 0);
            cr_expect_not_null(s, "%s", c->name);
            free(s);
            json_decref(b);
        }
    }
}

static uint64_t key_of(const char *text) {
    json_t *b = json_loads(text, 0, NULL);
    cr_assert_not_null(b, "%s", text);
    uint64_t k = s1_prompt_key(b);
    json_decref(b);
    return k;
}

/* The repeat key: what an answer depends on, whatever the key order, the
 * model or the other members; distinct states give distinct keys. */
Test(s1, prompt_key_follows_the_state) {
    uint64_t a = key_of("{\"model\":\"m\",\"state\":{\"x\":1,\"y\":[2]},\"questions\":{}}");
    cr_expect_neq(a, 0);
    cr_expect_eq(a, key_of("{\"state\":{\"y\":[2],\"x\":1},\"model\":\"other\"}"));
    cr_expect_neq(a, key_of("{\"state\":{\"x\":1,\"y\":[3]}}"));
    cr_expect_neq(key_of("{\"state\":\"a\"}"), key_of("{\"state\":\"b\"}"));
    /* the OpenAI routes: messages, prompt or input */
    uint64_t m = key_of("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}");
    cr_expect_neq(m, 0);
    cr_expect_eq(m, key_of("{\"max_tokens\":9,\"messages\":[{\"content\":\"hi\",\"role\":\"user\"}]}"));
    cr_expect_neq(key_of("{\"prompt\":\"hi\"}"), 0);
    cr_expect_eq(key_of("{\"input\":\"hi\"}"), key_of("{\"prompt\":\"hi\"}"));
    /* nothing to key on */
    cr_expect_eq(key_of("{\"questions\":{}}"), 0);
    cr_expect_eq(key_of("[1,2]"), 0);
    cr_expect_eq(s1_prompt_key(NULL), 0);
}
