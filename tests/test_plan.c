/* Unit tests for plan and fit: each engine rule on small synthetic models
 * whose bytes can be worked out by hand, and malformed hyperparameters.
 * (docs/planner-accuracy.md checks the same code against the real engine.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "plan/fit.h"
#include "gguf/gguf_edit.h"
#include "plan/plan.h"
#include "test_helpers.h"

#define F32 0
#define Q8_0 8

static struct plan_settings cpu(uint32_t ctx, uint32_t np) {
    struct plan_settings s = plan_default_settings();
    s.gpu = false;
    s.ctx = ctx;
    s.parallel = np;
    return s;
}

#define LAYER_BYTES (N_EMBD * N_EMBD * 2ull)
#define EMBD_BYTES (N_EMBD * N_VOCAB * 2ull)
/* per cell per attention layer: K and V rows of 2 heads x 64 at f16 */
#define KV_ROW (2ull * (2 * 64 * 2))

Test(plan, kv_cells_are_padded_and_split_per_slot) {
    struct spec sp = {"llama", {NULL}, true};
    struct plan_model *m = open_model(&sp);
    struct plan_footprint f;
    struct plan_settings s = cpu(1000, 1);
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.n_ctx, 1024);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4 * KV_ROW * 1024);
    s = cpu(1024, 3); /* PAD(1024 / 3, 256) = 512 cells per slot */
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.n_ctx, 1536);
    cr_expect_eq(f.n_ctx_slot, 512);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4 * KV_ROW * 1536);
    s.kv_unified = true; /* one pool of PAD(1024) cells */
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4 * KV_ROW * 1024);
    s = cpu(1024, 1);
    s.type_k = s.type_v = Q8_0; /* 128 elements = 4 blocks of 34 bytes */
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4ull * 2 * 4 * 34 * 1024);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_OUTPUT], N_VOCAB * 4ull);
    cr_expect_eq(plan_footprint_device_total(&f, PLAN_DEVICE_GPU), 0);
    plan_model_free(m);
}

Test(plan, gpu_layers_follow_ngl) {
    struct spec sp = {"llama", {NULL}, true};
    struct plan_model *m = open_model(&sp);
    struct plan_settings s = cpu(1024, 1);
    s.gpu = true;
    s.overhead = 0;
    struct plan_footprint f;
    for (int ngl = 0; ngl <= 4 + 1 + 1; ngl++) {
        s.ngl = ngl;
        cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
        /* -ngl 1 is the output layer alone; each more is one repeating layer */
        int layers = ngl <= 1 ? 0 : ngl - 1 > 4 ? 4 : ngl - 1;
        uint64_t want = ngl == 0 ? 0 : EMBD_BYTES + (uint64_t)layers * LAYER_BYTES;
        cr_expect_eq(f.bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS], want, "ngl %d", ngl);
        cr_expect_eq(f.n_layer_gpu, (uint32_t)layers);
        /* token embeddings always stay on the host */
        cr_expect_geq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], EMBD_BYTES);
        cr_expect_eq(f.bytes[PLAN_DEVICE_GPU][PLAN_PART_KV], KV_ROW * 1024 * f.n_layer_gpu);
    }
    cr_expect_eq(f.ngl, 5); /* capped at n_layer + 1 */
    plan_model_free(m);
}

Test(plan, tied_output_is_copied_to_the_gpu) {
    struct spec sp = {"llama", {NULL}, false};
    struct plan_model *m = open_model(&sp);
    struct plan_settings s = cpu(1024, 1);
    struct plan_footprint f;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], EMBD_BYTES + 4 * LAYER_BYTES);
    s.gpu = true;
    s.ngl = 5;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS], EMBD_BYTES + 4 * LAYER_BYTES);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], EMBD_BYTES);
    cr_expect_eq(f.bytes[PLAN_DEVICE_GPU][PLAN_PART_OVERHEAD], PLAN_GPU_OVERHEAD_BYTES);
    plan_model_free(m);
}

Test(plan, sliding_window_layers_hold_the_window) {
    /* gemma3: 5 of every 6 layers slide; with 4 layers all 4 do */
    struct spec sp = {"gemma3", {"gemma3.attention.sliding_window=u32:100", NULL}, true};
    struct plan_model *m = open_model(&sp);
    struct plan_settings s = cpu(4096, 1);
    struct plan_footprint f;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    /* PAD(min(4096, 100 + 512 ubatch), 256) = 768 cells */
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4 * KV_ROW * 768);
    s.swa_full = true;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 4 * KV_ROW * 4096);
    plan_model_free(m);
}

Test(plan, hybrid_recurrent_layers_hold_state_per_slot) {
    struct spec sp = {"qwen35",
                      {"qwen35.ssm.conv_kernel=u32:4", "qwen35.ssm.inner_size=u32:128",
                       "qwen35.ssm.state_size=u32:16", "qwen35.ssm.group_count=u32:2",
                       "qwen35.full_attention_interval=u32:4", NULL},
                      true};
    struct plan_model *m = open_model(&sp);
    struct plan_settings s = cpu(1024, 2);
    struct plan_footprint f;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    /* layers 0-2 recurrent, layer 3 attention */
    uint64_t per_layer = (3ull * (128 + 2 * 2 * 16) + 16ull * 128) * 4;
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_RECURRENT], 3 * per_layer * 2);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], KV_ROW * 1024);
    plan_model_free(m);
}

Test(plan, encoders_have_no_kv_and_run_their_window) {
    struct spec sp = {"modern-bert", {NULL}, false};
    struct plan_model *m = open_model(&sp);
    cr_expect(plan_model_is_encoder(m));
    struct plan_settings s = cpu(0, 1), r;
    plan_model_resolve(m, &s, &r);
    cr_expect_eq(r.ctx, 1024);
    cr_expect_eq(r.batch, 1024);
    cr_expect_eq(r.ubatch, 1024);
    struct plan_footprint f;
    cr_assert_eq(plan_model_footprint(m, &s, &f), TANDEM_OK);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_KV], 0);
    cr_expect_eq(f.bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS], EMBD_BYTES + 4 * LAYER_BYTES);
    plan_model_free(m);
}

Test(plan, header_hash_names_the_model) {
    struct spec a = {"llama", {NULL}, true}, b = {"llama", {"llama.rope.freq_base=f32:1"}, true};
    struct plan_model *ma = open_model(&a), *ma2 = open_model(&a), *mb = open_model(&b);
    cr_expect_str_eq(plan_model_header_sha256(ma), plan_model_header_sha256(ma2));
    cr_expect_str_neq(plan_model_header_sha256(ma), plan_model_header_sha256(mb));
    cr_expect_eq(strlen(plan_model_header_sha256(ma)), 64);
    plan_model_free(ma);
    plan_model_free(ma2);
    plan_model_free(mb);
}

static void expect_open_error(const struct spec *sp, tandem_err want, const char *needle) {
    struct plan_model *m = NULL;
    char err[256] = "";
    const char *path = write_model(sp);
    cr_expect_eq(plan_model_open(path, &m, err, sizeof err), want, "%s", err);
    cr_expect(strstr(err, needle) != NULL, "'%s' lacks '%s'", err, needle);
    cr_expect_null(m);
    unlink(path);
}

Test(plan, malformed_hyperparameters_name_the_key) {
    struct spec wrong_len = {"llama", {"llama.attention.head_count_kv=arr[u32]:[2,2]", NULL}, true};
    expect_open_error(&wrong_len, TANDEM_ERR_FORMAT, "llama.attention.head_count_kv");
    struct spec zero = {"llama", {"llama.block_count=u32:0", NULL}, true};
    expect_open_error(&zero, TANDEM_ERR_FORMAT, "llama.block_count");
    struct spec huge = {"llama", {"llama.block_count=u32:100000", NULL}, true};
    expect_open_error(&huge, TANDEM_ERR_FORMAT, "implausible");
    struct spec text = {"llama", {"llama.context_length=str:8k", NULL}, true};
    expect_open_error(&text, TANDEM_ERR_FORMAT, "llama.context_length");
    struct spec hybrid = {"qwen35", {"qwen35.full_attention_interval=u32:0", NULL}, true};
    expect_open_error(&hybrid, TANDEM_ERR_FORMAT, "full_attention_interval");
    cr_expect_eq(plan_model_open("/nonexistent.gguf", &(struct plan_model *){NULL}, NULL, 0),
                 TANDEM_ERR_IO);
}

Test(plan, footprint_rejects_unresolved_settings) {
    struct spec sp = {"llama", {NULL}, true};
    struct plan_model *m = open_model(&sp);
    struct plan_settings s = plan_default_settings(); /* ngl auto on a GPU */
    struct plan_footprint f;
    cr_expect_eq(plan_model_footprint(m, &s, &f), TANDEM_ERR_INVAL);
    plan_model_free(m);
}

/* --- fit ----------------------------------------------------------------------- */

static tandem_err plain(const struct plan_model *m, const struct plan_settings *s,
                        struct plan_footprint *out, void *user) {
    (void)user;
    return plan_model_footprint(m, s, out);
}

Test(fit, verdicts_follow_the_budget) {
    struct spec sp = {"llama", {NULL}, true};
    struct plan_model *a = open_model(&sp), *b = open_model(&sp);
    struct plan_settings s = cpu(1024, 1);
    s.gpu = true;
    s.ngl = PLAN_NGL_AUTO;
    s.overhead = 1 << 20;
    struct fit_model fm[2] = {{"a", a, s, false}, {"b", b, s, false}};
    struct fit_model_result r[2];
    struct fit_result res;
    struct plan_footprint one;
    struct plan_settings full = s;
    full.ngl = 5;
    cr_assert_eq(plan_model_footprint(a, &full, &one), TANDEM_OK);
    uint64_t alone = plan_footprint_device_total(&one, PLAN_DEVICE_GPU);
    struct fit_budget budget = {true, 2 * alone, 1ull << 40};
    cr_assert_eq(fit_models(fm, 2, &budget, plain, NULL, r, &res), TANDEM_OK);
    cr_expect_eq(res.verdict, FIT_CO_RESIDENT, "%s", res.reason);
    cr_expect_eq(res.need_gpu, 2 * alone);
    budget.gpu_bytes = 2 * alone - 1;
    cr_assert_eq(fit_models(fm, 2, &budget, plain, NULL, r, &res), TANDEM_OK);
    cr_expect_eq(res.verdict, FIT_ROTATE, "%s", res.reason);
    cr_expect(res.alternative[0]);
    budget.gpu_bytes = alone - 1;
    cr_assert_eq(fit_models(fm, 2, &budget, plain, NULL, r, &res), TANDEM_OK);
    cr_expect_eq(res.verdict, FIT_PARTIAL, "%s", res.reason);
    cr_expect_lt(r[0].ngl, 5);
    cr_expect_geq(r[0].ngl, 1);
    budget.gpu_bytes = 1; /* not even the overhead */
    budget.host_bytes = 1;
    cr_assert_eq(fit_models(fm, 2, &budget, plain, NULL, r, &res), TANDEM_OK);
    cr_expect_eq(res.verdict, FIT_NO_FIT, "%s", res.reason);
    cr_expect(strstr(res.reason, "a does not fit"), "%s", res.reason);
    plan_model_free(a);
    plan_model_free(b);
}

Test(fit, largest_context_fits_exactly) {
    struct spec sp = {"llama", {NULL}, true};
    struct plan_model *a = open_model(&sp);
    struct plan_settings s = cpu(512, 1);
    s.flash_attn = true;
    struct fit_model fm = {"a", a, s, false};
    struct plan_footprint at;
    s.ctx = 768;
    cr_assert_eq(plan_model_footprint(a, &s, &at), TANDEM_OK);
    struct fit_budget budget = {false, 0, plan_footprint_total(&at)};
    struct fit_model_result r;
    struct fit_result res;
    cr_assert_eq(fit_models(&fm, 1, &budget, plain, NULL, &r, &res), TANDEM_OK);
    cr_expect_eq(res.verdict, FIT_CO_RESIDENT);
    cr_expect_eq(r.max_ctx, 768);
    plan_model_free(a);
}
