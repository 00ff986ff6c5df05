/* libFuzzer target for the configuration loader: arbitrary bytes as a
 * tandem.yaml. A load may fail, but only with a message, never a crash, an
 * out-of-bounds read (ASan) or a leak; a successful load is walked fully.
 * The same bytes then go through config_edit (what `tandem eval --apply`
 * does to a config): an edit of pipeline "decide" fails with a message or
 * returns a text that holds the new values, never a crash. Seeded by
 * tests/data/config/ and examples/. Built by `make fuzz`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "serve/config.h"
#include "serve/config_edit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static void edit(const char *text, size_t size) {
    static const struct config_edit_value values[] = {
        {"thresholds", "consistent", "\">= 0.8734\""},
        {"thresholds", "fuzz_new", "\"<= 0.25\""},
        {NULL, "min_confidence", "0.123"},
    };
    char *out = NULL, err[512] = "";
    size_t len = 0;
    if (config_edit_verdict("fuzz.yaml", text, size, "decide", values, 3, &out, &len, err,
                            sizeof err) != TANDEM_OK) {
        if (!err[0])
            abort(); /* a refusal always says why */
        return;
    }
    if (!memmem(out, len, "\"<= 0.25\"", 9) || !memmem(out, len, "0.123", 5))
        abort();
    mem_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct config *c;
    char err[1024];
    edit((const char *)data, size);
    if (config_load_buffer("/tmp/fuzz.yaml", (const char *)data, size, &c, err, sizeof err) !=
        TANDEM_OK) {
        sink += strlen(err);
        return 0;
    }
    for (size_t i = 0; i < c->n_models; i++)
        sink += config_find_model(c, c->models[i].name) != NULL;
    config_free(c);
    return 0;
}
