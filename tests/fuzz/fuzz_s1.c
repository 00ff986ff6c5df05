/* libFuzzer target for the System One request checks: arbitrary bytes as a
 * POST /v1/systemone body. What parses as JSON (with and without duplicate
 * keys rejected) is validated against both option limits into a normal and
 * a tiny message buffer; a rejection must carry a non-empty UTF-8 message,
 * the tiny one a whole-character prefix of the normal one, and the message
 * must reach the error body unchanged. The raw bytes themselves, as an error
 * message, must always give a body that serializes. The same bodies, read
 * as a pipeline call (model "pipelines/<name>"), give a pipeline request or
 * a named error, and as a pipeline answer take the System One fields.
 * Seeded by the bodies of tests/data/s1/cases.jsonl. Built by `make fuzz`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/pipeline.h"
#include "serve/s1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static bool utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80 ? 0 : *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : *p >= 0xC0 ? 1 : 4;
        if (n == 4)
            return false;
        for (size_t i = 1; i <= n; i++)
            if ((p[i] & 0xC0) != 0x80)
                return false;
        p += n + 1;
    }
    return true;
}

/* Puts message into an error body and checks it comes back unchanged. */
static void check_error_body(const char *message) {
    json_t *b = s1_error_body(400, NULL, message, "questions");
    if (!b)
        abort();
    const char *got = json_string_value(json_object_get(json_object_get(b, "detail"), "message"));
    if (!got || strcmp(got, message))
        abort();
    char *s = json_dumps(b, 0);
    if (!s)
        abort();
    sink += strlen(s);
    free(s); /* jansson's default allocator */
    json_decref(b);
}

static void validate(const json_t *body, unsigned max_options) {
    char err[1024], small[24];
    memset(err, 0, sizeof err);
    tandem_err e = s1_validate_request(body, max_options, err, sizeof err);
    tandem_err e_small = s1_validate_request(body, max_options, small, sizeof small);
    if (e != e_small || (e != TANDEM_OK && e != TANDEM_ERR_FORMAT))
        abort();
    if (e == TANDEM_OK)
        return;
    size_t len = strlen(err), small_len = strlen(small);
    if (!len || !utf8_valid(err) || !utf8_valid(small) || strncmp(err, small, small_len))
        abort();
    /* The cut drops at most one partial character (3 bytes). */
    if (len >= sizeof small && small_len + 4 < sizeof small)
        abort();
    check_error_body(err);
    check_error_body(small);
    sink += len;
}

/* body as a /v1/systemone call of a pipeline, then as a pipeline's answer. */
static void as_pipeline(const json_t *body) {
    char question[PIPELINE_QUESTION_MAX], err[1024] = "", param[256] = "";
    json_t *req;
    tandem_err e = pipeline_request_from_systemone(body, &req, question, err, sizeof err, param,
                                                   sizeof param);
    if (e == TANDEM_OK) {
        if (!json_is_object(req) || !question[0] || json_object_get(req, "model") ||
            json_object_get(req, "questions"))
            abort();
        json_decref(req);
    } else if (e != TANDEM_ERR_FORMAT || req || !err[0] || !param[0] || !utf8_valid(err)) {
        abort();
    }
    json_t *answer = json_deep_copy(body);
    if (json_is_object(answer)) {
        if (pipeline_answer_to_systemone(answer, "pipelines/p", "q") != TANDEM_OK ||
            !json_is_object(json_object_get(answer, "answers")) ||
            !json_is_string(json_object_get(answer, "model")))
            abort();
        char *s = json_dumps(answer, 0);
        sink += s ? strlen(s) : 0;
        free(s);
    }
    json_decref(answer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const size_t flags[] = {0, JSON_REJECT_DUPLICATES};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        json_error_t je;
        json_t *body = json_loadb((const char *)data, size, flags[i], &je);
        if (!body)
            continue;
        validate(body, S1Q_MAX_CHOICE_OPTIONS);
        validate(body, S1Q_OPENJEV_MAX_CHOICE_OPTIONS);
        if (s1_validate_request(body, S1Q_OPENJEV_MAX_CHOICE_OPTIONS, NULL, 0) == TANDEM_OK &&
            s1_validate_request(body, S1Q_MAX_CHOICE_OPTIONS, NULL, 0) != TANDEM_OK)
            abort(); /* a lower limit can only reject more */
        as_pipeline(body);
        const char *model = s1_request_model(body);
        sink += model ? strlen(model) : 0;
        json_decref(body);
    }
    char *message = malloc(size + 1);
    if (!message)
        return 0;
    memcpy(message, data, size);
    message[size] = '\0';
    json_t *b = s1_error_body(502, NULL, message, message);
    if (!b)
        abort();
    char *s = json_dumps(b, 0);
    if (!s)
        abort();
    sink += strlen(s);
    free(s);
    json_decref(b);
    free(message);
    return 0;
}
