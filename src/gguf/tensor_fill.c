/* tensor_fill.c: seeded tensor contents for `tandem gguf synth`.
 *
 * Random values come from splitmix64; a normal deviate is the Irwin-Hall sum
 * of 12 uniforms minus 6 (mean 0, variance 1, tails cut at +-6), which needs
 * no libm and so is bit-reproducible everywhere. F16 conversion rounds to
 * nearest even; Q8_0 blocks are quantized as ggml does (d = amax / 127). */
#include "gguf/tensor_fill.h"

#include <string.h>

#include "gguf/ggml_types.h"

#define TYPE_F32 0
#define TYPE_F16 1
#define TYPE_Q8_0 8
#define Q8_0_BLOCK 32

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t tensor_fill_seed(uint64_t file_seed, const char *name) {
    uint64_t h = 1469598103934665603ULL ^ file_seed; /* FNV-1a over the name */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return splitmix64(&h);
}

static float next_normal(struct tensor_fill_stream *s) {
    double sum = 0;
    for (int i = 0; i < 12; i++)
        sum += (double)(splitmix64(&s->state) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(s->fill.mean + s->fill.std * (sum - 6.0));
}

static float next_value(struct tensor_fill_stream *s) {
    switch (s->fill.kind) {
    case TENSOR_FILL_CONST: return s->fill.value;
    case TENSOR_FILL_NORMAL: return next_normal(s);
    default: return 0.0f;
    }
}

/* IEEE binary16 from binary32, round to nearest even; overflow saturates to inf. */
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000, mag = x & 0x7FFFFFFF;
    if (mag >= 0x7F800000) /* inf or nan */
        return (uint16_t)(sign | 0x7C00 | (mag > 0x7F800000 ? 0x200 : 0));
    if (mag >= 0x477FF000) /* rounds past the largest half */
        return (uint16_t)(sign | 0x7C00);
    if (mag < 0x38800000) { /* subnormal half (or zero) */
        uint32_t shift = 113 - (mag >> 23);
        if (shift > 24)
            return (uint16_t)sign;
        uint32_t m = (mag & 0x7FFFFF) | 0x800000;
        uint32_t h = m >> (shift + 13), rem = m & ((1u << (shift + 13)) - 1),
                 half = 1u << (shift + 12);
        if (rem > half || (rem == half && (h & 1)))
            h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((mag - 0x38000000) >> 13), rem = mag & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

bool tensor_fill_supports(enum tensor_fill_kind kind, uint32_t type) {
    if (!ggml_type_get(type))
        return false;
    switch (kind) {
    case TENSOR_FILL_HOLE: return true;
    case TENSOR_FILL_CONST: return type == TYPE_F32 || type == TYPE_F16;
    case TENSOR_FILL_NORMAL: return type == TYPE_F32 || type == TYPE_F16 || type == TYPE_Q8_0;
    }
    return false;
}

void tensor_fill_begin(struct tensor_fill_stream *s, const struct tensor_fill *fill) {
    s->fill = *fill;
    s->state = fill->seed;
}

static void q8_0_block(struct tensor_fill_stream *s, uint8_t *out) {
    float x[Q8_0_BLOCK], amax = 0;
    for (int i = 0; i < Q8_0_BLOCK; i++) {
        x[i] = next_value(s);
        float a = x[i] < 0 ? -x[i] : x[i];
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    uint16_t dh = f32_to_f16(d);
    memcpy(out, &dh, 2);
    for (int i = 0; i < Q8_0_BLOCK; i++) {
        float v = x[i] * id;
        out[2 + i] = (uint8_t)(int8_t)(v < 0 ? (int)(v - 0.5f) : (int)(v + 0.5f));
    }
}

tandem_err tensor_fill_row(struct tensor_fill_stream *s, uint32_t type, int64_t ne0, uint8_t *out) {
    uint64_t bytes;
    tandem_err e = ggml_type_row_bytes(type, ne0, &bytes);
    if (e != TANDEM_OK)
        return e;
    if (!tensor_fill_supports(s->fill.kind, type))
        return TANDEM_ERR_UNSUPPORTED;
    if (s->fill.kind == TENSOR_FILL_HOLE) {
        memset(out, 0, (size_t)bytes);
        return TANDEM_OK;
    }
    for (int64_t i = 0; type == TYPE_F32 && i < ne0; i++) {
        float v = next_value(s);
        memcpy(out + 4 * i, &v, 4);
    }
    for (int64_t i = 0; type == TYPE_F16 && i < ne0; i++) {
        uint16_t h = f32_to_f16(next_value(s));
        memcpy(out + 2 * i, &h, 2);
    }
    for (int64_t b = 0; type == TYPE_Q8_0 && b < ne0 / Q8_0_BLOCK; b++)
        q8_0_block(s, out + 34 * b);
    return TANDEM_OK;
}
