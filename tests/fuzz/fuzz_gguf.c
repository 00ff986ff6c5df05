/* libFuzzer target for the GGUF reader: parse arbitrary bytes, then walk
 * every accessor a real caller uses (each key/value as JSON, every array
 * element, every tensor's data range). ASan turns any out-of-bounds read into
 * a crash, so "parsed OK" must mean "safe to use". Built by `make fuzz`. */
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "gguf/gguf_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void touch_tensors(const struct gguf *g) {
    for (uint64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const uint8_t *p = gguf_tensor_data(g, t);
        if (t->size) {
            sink ^= p[0];
            sink ^= p[t->size - 1];
        }
        sink ^= gguf_tensor_find(g, "blk.0.attn_q.weight") != NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct gguf *g;
    char err[512];
    if (gguf_open_memory(data, size, "fuzz", &g, err, sizeof err) != TANDEM_OK)
        return 0;
    json_t *all = gguf_json_dump(g);
    json_decref(all);
    uint64_t u;
    struct gguf_str s;
    sink ^= gguf_get_u64(g, "general.alignment", &u) == TANDEM_OK;
    sink ^= gguf_get_str(g, "general.architecture", &s) == TANDEM_OK;
    touch_tensors(g);
    gguf_free(g);
    return 0;
}
