/* tensor_fill.h: deterministic tensor contents for synthesized models.
 *
 * A fill describes what a tensor holds: a hole (no bytes written; the file is
 * sparse and reads back as zeros), a constant, or seeded pseudo-random normal
 * values. Generation is pure integer and float arithmetic (no libm), so the
 * same fill gives the same bytes on every machine. */
#ifndef TANDEM_TENSOR_FILL_H
#define TANDEM_TENSOR_FILL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum tensor_fill_kind {
    TENSOR_FILL_HOLE,   /* unwritten: zeros, costing no disk (any ggml type) */
    TENSOR_FILL_CONST,  /* every element = value (F32, F16) */
    TENSOR_FILL_NORMAL, /* approximately N(mean, std^2), seeded (F32, F16, Q8_0) */
};

struct tensor_fill {
    enum tensor_fill_kind kind;
    float value;   /* CONST */
    float mean;    /* NORMAL */
    float std;     /* NORMAL: standard deviation, >= 0 */
    uint64_t seed; /* NORMAL: the stream; derive it per tensor (tensor_fill_seed()) */
};

/* Returns a seed for the tensor called name under the file-wide seed. */
uint64_t tensor_fill_seed(uint64_t file_seed, const char *name);

/* True when fill kind can produce ggml type id (HOLE: any valid type). */
bool tensor_fill_supports(enum tensor_fill_kind kind, uint32_t type);

/* The state of one tensor's generation, row after row. Caller-allocated. */
struct tensor_fill_stream {
    struct tensor_fill fill;
    uint64_t state;
};

/* Starts generating fill. */
void tensor_fill_begin(struct tensor_fill_stream *s, const struct tensor_fill *fill);

/* Writes the next row of ne0 elements of ggml type id into out (exactly
 * ggml_type_row_bytes(type, ne0) bytes). Returns TANDEM_ERR_UNSUPPORTED for a
 * kind/type pair tensor_fill_supports() refuses, TANDEM_ERR_FORMAT when ne0
 * does not divide into blocks. HOLE rows are zeros. */
tandem_err tensor_fill_row(struct tensor_fill_stream *s, uint32_t type, int64_t ne0, uint8_t *out);

#endif
