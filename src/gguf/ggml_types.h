/* ggml_types.h: the ggml tensor type table (id, name, block geometry) and
 * overflow-checked tensor byte arithmetic.
 *
 * Ids are ggml's `enum ggml_type` values as stored in GGUF tensor infos. The
 * table mirrors the pinned engine's ggml.c type_traits; tests/test_ggml_types.c
 * checks it against that source so an engine update cannot drift silently. */
#ifndef TANDEM_GGML_TYPES_H
#define TANDEM_GGML_TYPES_H

#include <stdint.h>

#include "base/err.h"

/* One ggml tensor type. All fields are static data. */
struct ggml_type_info {
    const char *name;    /* ggml's enum name without GGML_TYPE_: "Q4_K", "F32" */
    uint32_t block_size; /* elements per block (1 for plain types) */
    uint32_t type_size;  /* bytes per block */
};

/* Returns the static description of type id, or NULL for an id past the
 * table or a retired id (4, 5, 31-33, 36-38). Never allocates. */
const struct ggml_type_info *ggml_type_get(uint32_t id);

/* Returns one past the highest id the table knows (ggml's GGML_TYPE_COUNT). */
uint32_t ggml_type_count(void);

/* Looks up a type by name, ignoring ASCII case ("q4_k" and "Q4_K" both match;
 * ggml itself spells names "q4_K"). On success writes the id to *id (output)
 * and returns TANDEM_OK; returns TANDEM_ERR_NOTFOUND when no valid type has
 * that name. name is borrowed for the call. */
tandem_err ggml_type_find(const char *name, uint32_t *id);

/* Bytes of one row of ne0 elements of type id: (ne0 / block) * type_size.
 * Writes the result to *out (output) and returns TANDEM_OK, or:
 * TANDEM_ERR_NOTFOUND for an unknown or retired id, TANDEM_ERR_RANGE for
 * ne0 < 0 or a product that overflows uint64_t, TANDEM_ERR_FORMAT when ne0
 * is not a multiple of the block size. *out is untouched on failure. */
tandem_err ggml_type_row_bytes(uint32_t id, int64_t ne0, uint64_t *out);

/* Bytes of a tensor of type id whose first n_dims (1..4) sizes are ne[]
 * (entries past n_dims are ignored and count as 1):
 * row_bytes(ne[0]) * ne[1] * ne[2] * ne[3]. ne is borrowed for the call.
 * Returns as ggml_type_row_bytes(), plus TANDEM_ERR_INVAL for n_dims outside
 * 1..4 and TANDEM_ERR_RANGE for any negative size or overflowing product. */
tandem_err ggml_type_tensor_bytes(uint32_t id, const int64_t ne[4], uint32_t n_dims,
                                  uint64_t *out);

#endif
