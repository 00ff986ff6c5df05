/* Unit tests for tensor_fill: exact F16 rounding, Q8_0 block layout,
 * determinism of seeded streams, and the kind/type support matrix. */
#include <criterion/criterion.h>
#include <string.h>

#include "gguf/tensor_fill.h"

static uint16_t f16_of(float v) {
    struct tensor_fill f = {.kind = TENSOR_FILL_CONST, .value = v};
    struct tensor_fill_stream s;
    uint16_t h;
    tensor_fill_begin(&s, &f);
    cr_assert_eq(tensor_fill_row(&s, 1 /* F16 */, 1, (uint8_t *)&h), TANDEM_OK);
    return h;
}

Test(tensor_fill, f16_rounds_to_nearest_even) {
    cr_expect_eq(f16_of(1.0f), 0x3C00);
    cr_expect_eq(f16_of(-2.0f), 0xC000);
    cr_expect_eq(f16_of(0.0f), 0x0000);
    cr_expect_eq(f16_of(65504.0f), 0x7BFF);
    cr_expect_eq(f16_of(65520.0f), 0x7C00, "rounds up to infinity");
    cr_expect_eq(f16_of(1.0f + 1.0f / 2048), 0x3C00, "tie goes to even");
    cr_expect_eq(f16_of(1.0f + 3.0f / 2048), 0x3C02, "tie goes to even");
    cr_expect_eq(f16_of(5.9604645e-8f), 0x0001, "smallest subnormal");
    cr_expect_eq(f16_of(6.1035156e-5f), 0x0400, "smallest normal");
    cr_expect_eq(f16_of(1e-9f), 0x0000);
}

Test(tensor_fill, normal_streams_are_deterministic_and_plausible) {
    struct tensor_fill f = {.kind = TENSOR_FILL_NORMAL, .std = 0.5f,
                            .seed = tensor_fill_seed(7, "blk.0.ffn_up.weight")};
    float a[4096], b[4096];
    struct tensor_fill_stream s;
    tensor_fill_begin(&s, &f);
    cr_assert_eq(tensor_fill_row(&s, 0, 4096, (uint8_t *)a), TANDEM_OK);
    tensor_fill_begin(&s, &f);
    cr_assert_eq(tensor_fill_row(&s, 0, 4096, (uint8_t *)b), TANDEM_OK);
    cr_expect(!memcmp(a, b, sizeof a), "same seed, same values");
    double sum = 0, sq = 0;
    for (int i = 0; i < 4096; i++) {
        sum += a[i];
        sq += (double)a[i] * a[i];
    }
    double mean = sum / 4096, var = sq / 4096 - mean * mean;
    cr_expect(mean > -0.05 && mean < 0.05, "mean %f", mean);
    cr_expect(var > 0.2 && var < 0.3, "variance %f (want 0.25)", var);
    cr_expect_neq(tensor_fill_seed(7, "a"), tensor_fill_seed(7, "b"));
    cr_expect_neq(tensor_fill_seed(7, "a"), tensor_fill_seed(8, "a"));
}

Test(tensor_fill, q8_0_blocks_hold_scale_and_codes) {
    struct tensor_fill f = {.kind = TENSOR_FILL_CONST, .value = 1.0f};
    struct tensor_fill_stream s;
    uint8_t row[2 * 34];
    tensor_fill_begin(&s, &f);
    cr_expect_eq(tensor_fill_row(&s, 8 /* Q8_0 */, 64, row), TANDEM_ERR_UNSUPPORTED,
                 "const cannot produce Q8_0");
    f.kind = TENSOR_FILL_NORMAL;
    f.std = 1.0f;
    tensor_fill_begin(&s, &f);
    cr_assert_eq(tensor_fill_row(&s, 8, 64, row), TANDEM_OK);
    int saw_127 = 0;
    for (int i = 0; i < 32; i++)
        saw_127 |= (int8_t)row[2 + i] == 127 || (int8_t)row[2 + i] == -127;
    cr_expect(saw_127, "the largest magnitude maps to +-127");
    cr_expect_neq(row[0] | row[1], 0, "a non-zero f16 scale");
    cr_expect_eq(tensor_fill_row(&s, 8, 33, row), TANDEM_ERR_FORMAT, "ne0 not a block multiple");
}

Test(tensor_fill, support_matrix) {
    cr_expect(tensor_fill_supports(TENSOR_FILL_HOLE, 12 /* Q4_K */));
    cr_expect_not(tensor_fill_supports(TENSOR_FILL_HOLE, 4 /* retired */));
    cr_expect(tensor_fill_supports(TENSOR_FILL_CONST, 0));
    cr_expect_not(tensor_fill_supports(TENSOR_FILL_NORMAL, 12));
    uint8_t row[144];
    struct tensor_fill f = {.kind = TENSOR_FILL_HOLE};
    struct tensor_fill_stream s;
    memset(row, 0xAB, sizeof row);
    tensor_fill_begin(&s, &f);
    cr_assert_eq(tensor_fill_row(&s, 12, 256, row), TANDEM_OK);
    for (size_t i = 0; i < sizeof row; i++)
        cr_assert_eq(row[i], 0);
}
