/* libFuzzer target for the template language. The input is a template text
 * up to its first NUL; what follows the NUL, when it parses as a JSON object,
 * is the values (the members of struct tmpl_values: "state", "instructions",
 * "candidates", "decide_answers", "verify_answers", "choice", "confidence",
 * "probability", "attempt"), otherwise fixed values are used. The text is
 * compiled for a verify scope and for a decide scope; a rejection must carry
 * a non-empty message that a tiny buffer cuts to a prefix of. Whatever
 * compiles is rendered into a buffer capped at 4 KiB and into one capped at
 * 16 bytes: each succeeds or fails with TOOBIG or NOTFOUND, a success leaves
 * exactly one rendering in the buffer, and a literal template renders as its
 * own text. Seeded by the texts of tests/data/tmpl/compile.jsonl. Built by
 * `make fuzz`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/tmpl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static const char *const decide_ids[] = {"urgent", "tone", "choice", NULL};
static const char *const verify_ids[] = {"consistent", "\xc3\xbc", NULL};

static const char fixed_values[] =
    "{\"state\": {\"ticket\": \"charged twice\", \"n\": [1, 2.5, null]},"
    " \"instructions\": \"Route the ticket.\","
    " \"candidates\": {\"billing\": \"Money.\", \"tech\": {\"area\": \"net\"}, \"other\": null},"
    " \"choice\": \"billing\", \"confidence\": 0.8, \"probability\": 0.45, \"attempt\": 2,"
    " \"decide_answers\": {\"urgent\": {\"type\": \"noul\", \"noul\": 0.82},"
    "   \"tone\": {\"type\": \"choice\", \"choice\": \"calm\"}},"
    " \"verify_answers\": {\"consistent\": {\"type\": \"score\", \"score\": 2.28}}}";

static void values_from(const json_t *j, struct tmpl_values *v) {
    *v = (struct tmpl_values){
        .state = json_object_get(j, "state"),
        .instructions = json_object_get(j, "instructions"),
        .candidates = json_object_get(j, "candidates"),
        .choice = json_string_value(json_object_get(j, "choice")),
        .confidence = json_number_value(json_object_get(j, "confidence")),
        .probability = json_number_value(json_object_get(j, "probability")),
        .decide_answers = json_object_get(j, "decide_answers"),
        .verify_answers = json_object_get(j, "verify_answers"),
        .attempt = (unsigned)json_integer_value(json_object_get(j, "attempt")),
    };
}

static void render(const struct tmpl *t, const char *text, const struct tmpl_values *v,
                   size_t max) {
    struct mem_buf b;
    mem_buf_init(&b, max);
    char err[512] = "";
    tandem_err e = tmpl_render(t, v, &b, err, sizeof err);
    if (b.len > max)
        abort();
    if (e != TANDEM_OK && e != TANDEM_ERR_TOOBIG && e != TANDEM_ERR_NOTFOUND)
        abort();
    if (e != TANDEM_OK && !err[0])
        abort();
    if (e == TANDEM_OK && tmpl_is_literal(t) && (b.len != strlen(text) ||
                                                 (b.len && memcmp(b.data, text, b.len))))
        abort();
    if (e == TANDEM_OK && b.data && strlen(b.data) > b.len)
        abort();
    sink += b.len;
    mem_buf_deinit(&b);
}

static void compile(const char *text, const struct tmpl_scope *scope,
                    const struct tmpl_values *v) {
    char err[1024] = "", small[20] = "";
    struct tmpl *t = NULL, *t2 = NULL;
    tandem_err e = tmpl_compile(text, scope, &t, err, sizeof err);
    tandem_err e2 = tmpl_compile(text, scope, &t2, small, sizeof small);
    tmpl_free(t2);
    if (e != e2 || (e != TANDEM_OK && e != TANDEM_ERR_FORMAT))
        abort();
    if (e != TANDEM_OK) {
        if (t || !err[0] || strncmp(err, small, strlen(small)))
            abort();
        return;
    }
    render(t, text, v, 4096);
    render(t, text, v, 16);
    tmpl_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t text_len = strnlen((const char *)data, size);
    char *text = malloc(text_len + 1);
    if (!text)
        return 0;
    memcpy(text, data, text_len);
    text[text_len] = '\0';
    json_t *j = NULL;
    if (text_len < size)
        j = json_loadb((const char *)data + text_len + 1, size - text_len - 1, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        j = json_loads(fixed_values, 0, NULL);
        if (!j)
            abort();
    }
    struct tmpl_values v;
    values_from(j, &v);
    const struct tmpl_scope verify = {.decided = true, .decide_ids = decide_ids,
                                      .verify_ids = verify_ids};
    const struct tmpl_scope decide = {.decide_ids = decide_ids};
    const struct tmpl_scope instructions = {.renders_instructions = true};
    compile(text, &verify, &v);
    compile(text, &decide, &v);
    compile(text, &instructions, &v);
    json_decref(j);
    free(text);
    return 0;
}
