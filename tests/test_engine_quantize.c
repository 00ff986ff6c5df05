/* test_engine_quantize.c: reading llama-quantize's dry run into exact sizes. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/engine_quantize.h"

/* Three tensors as b11434 prints them, with one fallback and the imatrix warning. */
static const char LOG[] =
    "llama_model_loader: - kv   0:                       general.architecture str = llama\n"
    "warning: blk.0.attn_q.weight                  - ncols    576 not divisible by 256 "
    "(required for type    q4_K) -> falling back to    q5_0\n"
    "[   1/   3] output_norm.weight                   - [   576,      1,      1,      1], "
    "type =    f32, size =    0.002 MiB\n"
    "[   2/   3] token_embd.weight                    - [   576,  49152,      1,      1], "
    "type =    f16, size =    54.00 MiB ->    28.69 MiB (q8_0)\n"
    "[   3/   3] blk.0.attn_q.weight                  - [   576,    576,      1,      1], "
    "type =    f16, size =     0.63 MiB ->     0.22 MiB (q5_0)\n"
    "llama_model_quantize_impl: quant size  =    29.13 MiB (8.47 BPW)\n"
    "llama_model_quantize_impl: WARNING: dry run completed successfully, but actually "
    "completing this quantization will require an imatrix!\n";

Test(engine_quantize, sizes_are_recomputed_exactly) {
    struct engine_quant_size s;
    char err[256];
    cr_assert_eq(engine_quant_parse_log(LOG, strlen(LOG), &s, err, sizeof err), TANDEM_OK, "%s",
                 err);
    /* f32: 576 * 4; q8_0: 576/32 blocks of 34 bytes per row; q5_0: 576/32 blocks of 22 */
    cr_assert_eq(s.bytes, 2304u + 612u * 49152u + 396u * 576u);
    cr_assert_eq(s.elements, 576u + 576u * 49152u + 576u * 576u);
    cr_assert_float_eq(s.bpw, 30311424.0 * 8 / 28643904.0, 1e-12);
    cr_assert_eq(s.n_tensors, 3);
    cr_assert(s.needs_imatrix);
    cr_assert_eq(s.n_fallbacks, 1);
    cr_assert_str_eq(s.fallbacks[0].tensor, "blk.0.attn_q.weight");
    cr_assert_str_eq(s.fallbacks[0].wanted, "q4_K");
    cr_assert_str_eq(s.fallbacks[0].got, "q5_0");
    engine_quant_size_free(&s);
    engine_quant_size_free(&s); /* zeroed: a no-op */
}

Test(engine_quantize, unreadable_logs_are_refused_with_the_line) {
    struct engine_quant_size s;
    char err[256];
    const char *bad[] = {
        "[   1/   1] x - [   576,      1], type =    f32, size = 1 MiB\n",          /* shape */
        "[   1/   1] x - [ 576, 1, 1, 1], type =    q9_Z, size = 1 MiB\n",          /* type */
        "[   1/   1] x - [ 577, 1, 1, 1], type = f16, size = 1 MiB -> 1 MiB (q8_0)\n", /* blocks */
        "warning: x - ncols 576 not divisible by 256 -> falling back to q5_0\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(engine_quant_parse_log(bad[i], strlen(bad[i]), &s, err, sizeof err),
                     TANDEM_ERR_FORMAT, "case %zu", i);
        cr_assert(strstr(err, "cannot read the line"), "%s", err);
        cr_assert_null(s.fallbacks);
    }
    cr_assert_eq(engine_quant_parse_log("usage: llama-quantize\n", 22, &s, err, sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_assert_str_eq(err, "llama-quantize --dry-run listed no tensors");
}
