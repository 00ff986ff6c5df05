/* Unit tests for gguf_facts: the facts of a synthetic model (test_helpers'
 * write_model): counts and sums computed from its tensors, architecture keys
 * read under its own prefix, absent keys as null, and the decision,
 * calibration and provenance members. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_facts.h"
#include "test_helpers.h"

static json_t *facts_of(const struct spec *sp) {
    const char *path = write_model(sp);
    struct gguf *g;
    char err[256];
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), TANDEM_OK, "%s", err);
    json_t *f = gguf_facts_json(g, "model.gguf");
    gguf_free(g);
    unlink(path);
    cr_assert_not_null(f);
    return f;
}

static json_int_t int_at(const json_t *o, const char *key) {
    return json_integer_value(json_object_get(o, key));
}

Test(gguf_facts, sizes_and_architecture_keys) {
    struct spec sp = {.arch = "qwen3", .output = true};
    json_t *f = facts_of(&sp);
    cr_expect_str_eq(json_string_value(json_object_get(f, "architecture")), "qwen3");
    cr_expect_str_eq(json_string_value(json_object_get(f, "file")), "model.gguf");
    cr_expect_eq(int_at(f, "tensor_count"), 6);
    /* embeddings and output 256 x 1000, four 256 x 256 layers */
    cr_expect_eq(int_at(f, "parameters"), 2 * N_EMBD * N_VOCAB + 4 * N_EMBD * N_EMBD);
    json_t *f16 = json_object_get(json_object_get(f, "tensor_bytes_by_type"), "F16");
    cr_expect_eq(int_at(f16, "count"), 6);
    cr_expect_eq(int_at(f16, "bytes"), 2 * int_at(f, "parameters"));
    cr_expect_eq(int_at(f, "layers"), 4);
    cr_expect_eq(int_at(f, "vocab_size"), N_VOCAB);
    cr_expect_eq(int_at(json_object_get(f, "attention"), "head_count_kv"), 2);
    cr_expect(json_is_null(json_object_get(json_object_get(f, "attention"), "sliding_window")));
    cr_expect(json_is_null(json_object_get(f, "decision")));
    cr_expect(json_is_null(json_object_get(f, "calibration")));
    cr_expect(json_is_null(json_object_get(f, "provenance")));
    cr_expect(json_is_null(json_object_get(f, "sha256")));
    json_decref(f);
}

Test(gguf_facts, decision_calibration_and_provenance) {
    struct spec sp = {.arch = "kev",
                      .extra = {"kev.decision.type=str:pointer",
                                "kev.decision.temperature.choice=f32:1.5",
                                "tandem.calibration.metrics=str:{\"ece\": 0.25}",
                                "tandem.quantize.rung=str:Q4_K_M",
                                "quantize.imatrix.chunks_count=u32:7", NULL}};
    json_t *f = facts_of(&sp);
    json_t *d = json_object_get(f, "decision");
    cr_expect_str_eq(json_string_value(json_object_get(d, "type")), "pointer");
    cr_expect_float_eq(json_real_value(json_object_get(json_object_get(d, "temperatures"),
                                                       "choice")), 1.5, 1e-6);
    json_t *metrics = json_object_get(json_object_get(f, "calibration"), "metrics");
    cr_expect_float_eq(json_real_value(json_object_get(metrics, "ece")), 0.25, 1e-12);
    json_t *prov = json_object_get(f, "provenance");
    cr_expect_str_eq(json_string_value(json_object_get(prov, "rung")), "Q4_K_M");
    cr_expect_eq(int_at(json_object_get(prov, "imatrix"), "chunks_count"), 7);
    json_decref(f);
}
