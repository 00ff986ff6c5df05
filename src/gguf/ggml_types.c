/* ggml_types.c: the ggml type table and tensor size arithmetic.
 *
 * The table is indexed by ggml type id; a retired id has a NULL name and is
 * never returned. Values are copied from the pinned engine's ggml.c
 * type_traits (names as in ggml.h's enum, upper case); the unit test
 * recompiles the engine's own definitions and compares every entry.
 *
 * Invariant: every valid entry has block_size >= 1 and type_size >= 1, so
 * the size functions never divide by zero. Every multiplication is checked
 * against UINT64_MAX before it is done. */
#include "gguf/ggml_types.h"

#include <stddef.h>

#define TYPE_COUNT 43

static const struct ggml_type_info types[TYPE_COUNT] = {
    [0] = {"F32", 1, 4},
    [1] = {"F16", 1, 2},
    [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},
    /* 4 Q4_2 and 5 Q4_3: retired */
    [6] = {"Q5_0", 32, 22},
    [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},
    [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},
    [12] = {"Q4_K", 256, 144},
    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},
    [15] = {"Q8_K", 256, 292},
    [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},
    [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},
    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136},
    [24] = {"I8", 1, 1},
    [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},
    [27] = {"I64", 1, 8},
    [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},
    /* 31-33 Q4_0_4_4, Q4_0_4_8, Q4_0_8_8: retired (runtime repacking) */
    [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},
    /* 36-38 IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8: retired */
    [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
    [42] = {"Q2_0", 64, 18},
};

const struct ggml_type_info *ggml_type_get(uint32_t id) {
    if (id >= TYPE_COUNT || !types[id].name)
        return NULL;
    return &types[id];
}

uint32_t ggml_type_count(void) {
    return TYPE_COUNT;
}

static char ascii_upper(char c) {
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

static int name_eq_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (ascii_upper(*a) != ascii_upper(*b))
            return 0;
    return *a == *b;
}

tandem_err ggml_type_find(const char *name, uint32_t *id) {
    if (!name)
        return TANDEM_ERR_NOTFOUND;
    for (uint32_t i = 0; i < TYPE_COUNT; i++) {
        if (types[i].name && name_eq_nocase(types[i].name, name)) {
            *id = i;
            return TANDEM_OK;
        }
    }
    return TANDEM_ERR_NOTFOUND;
}

/* *acc *= n, failing with TANDEM_ERR_RANGE instead of wrapping. */
static tandem_err mul_checked(uint64_t *acc, uint64_t n) {
    if (n && *acc > UINT64_MAX / n)
        return TANDEM_ERR_RANGE;
    *acc *= n;
    return TANDEM_OK;
}

tandem_err ggml_type_row_bytes(uint32_t id, int64_t ne0, uint64_t *out) {
    const struct ggml_type_info *t = ggml_type_get(id);
    if (!t)
        return TANDEM_ERR_NOTFOUND;
    if (ne0 < 0)
        return TANDEM_ERR_RANGE;
    if ((uint64_t)ne0 % t->block_size)
        return TANDEM_ERR_FORMAT;
    uint64_t bytes = (uint64_t)ne0 / t->block_size;
    tandem_err e = mul_checked(&bytes, t->type_size);
    if (e)
        return e;
    *out = bytes;
    return TANDEM_OK;
}

tandem_err ggml_type_tensor_bytes(uint32_t id, const int64_t ne[4], uint32_t n_dims,
                                  uint64_t *out) {
    if (n_dims < 1 || n_dims > 4)
        return TANDEM_ERR_INVAL;
    for (uint32_t i = 1; i < n_dims; i++)
        if (ne[i] < 0)
            return TANDEM_ERR_RANGE;
    uint64_t bytes;
    tandem_err e = ggml_type_row_bytes(id, ne[0], &bytes);
    for (uint32_t i = 1; !e && i < n_dims; i++)
        e = mul_checked(&bytes, (uint64_t)ne[i]);
    if (e)
        return e;
    *out = bytes;
    return TANDEM_OK;
}
