/* libFuzzer target for the configuration loader: arbitrary bytes as a
 * tandem.yaml. A load may fail, but only with a message, never a crash, an
 * out-of-bounds read (ASan) or a leak; a successful load is walked fully.
 * Seeded by tests/data/config/ and examples/. Built by `make fuzz`. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "serve/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct config *c;
    char err[1024];
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
