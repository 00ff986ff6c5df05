/* gguf.h: a validating, zero-copy reader for GGUF v2/v3 model files.
 *
 * gguf_open() maps the file read-only and checks the whole header (key/value
 * pairs and tensor infos) before it returns; tensor data is never read. After
 * a successful open every accessor below is safe on any input: the header has
 * been proven well-formed, in bounds and free of duplicates.
 *
 * Lifetime: every pointer handed out (strings, struct gguf_kv, struct
 * gguf_tensor, tensor data) points into the handle or its mapping and stays
 * valid until gguf_free(). Strings are NOT NUL-terminated.
 *
 * Errors: the functions return a tandem_err. Open failures also write ONE line
 * into the optional caller buffer err[errlen]:
 *   "<path>: offset <N>: <what was expected>, <what was found>"
 * where N is the byte offset in the file of the offending field. */
#ifndef TANDEM_GGUF_H
#define TANDEM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* GGUF metadata value types, as encoded in the file. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7, /* one byte; ggml reads any nonzero byte as true */
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT_ /* not a type: the number of types */
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 64                      /* ggml's GGML_MAX_NAME: names are < 64 bytes */
#define GGUF_MAX_STRING_LENGTH (1024u * 1024u * 1024u) /* as ggml's gguf.cpp */
#define GGUF_MAX_ARRAY_ELEMENTS (1024u * 1024u * 1024u) /* as ggml's gguf.cpp */

/* A length-delimited string inside the mapping; not NUL-terminated. */
struct gguf_str {
    const char *ptr; /* borrowed from the handle; NULL only when len == 0 */
    uint64_t len;    /* bytes */
};

/* One metadata key/value pair, as laid out in the file. */
struct gguf_kv {
    struct gguf_str key;
    enum gguf_type type;
    uint64_t offset;      /* file offset of the key (its length field) */
    const uint8_t *value; /* encoded value: the bytes after the uint32 type field.
                           * Scalars: the little-endian value. STRING: uint64 length
                           * + bytes. ARRAY: uint32 elem type + uint64 count +
                           * elements. Copying value_len bytes reproduces the value. */
    uint64_t value_len;   /* bytes at value */
    enum gguf_type arr_type; /* ARRAY only: element type (never ARRAY) */
    uint64_t arr_count;      /* ARRAY only: number of elements */
    const uint64_t *str_index; /* reader-owned, ARRAY of STRING only: offset of each
                                * element's length field, relative to value. NULL
                                * in a hand-built kv; element access is then O(i). */
};

/* One tensor info. Sizes follow ggml: ne[0] is the fastest-moving dimension. */
struct gguf_tensor {
    struct gguf_str name;
    uint32_t n_dims;      /* 1..4 */
    int64_t ne[4];        /* elements per dimension; unused dimensions are 1 */
    uint32_t type;        /* ggml type id, valid in ggml_type_get() */
    uint64_t offset;      /* data offset relative to gguf_data_offset() */
    uint64_t size;        /* data bytes (without alignment padding) */
    uint64_t info_offset; /* file offset of this tensor info (its name length) */
};

struct gguf; /* opaque handle: one parsed file */

/* Maps the file at path read-only and validates its header. On success
 * writes a new handle to *out (output; the caller owns it and releases it
 * with gguf_free()). path is borrowed for the call; messages start with it.
 * Returns TANDEM_ERR_IO when the file cannot be opened, stat'ed or mapped
 * (or is not a regular file), TANDEM_ERR_FORMAT for a malformed file,
 * TANDEM_ERR_UNSUPPORTED for GGUF versions other than 2 and 3,
 * TANDEM_ERR_NOMEM on allocation failure. *out is NULL on failure. */
tandem_err gguf_open(const char *path, struct gguf **out, char *err, size_t errlen);

/* Like gguf_open() but parses the caller-owned buffer data[len]. The buffer is
 * borrowed: it must stay valid and unchanged until gguf_free() of the handle.
 * data may be NULL when len is 0. name (borrowed for the call) is the message
 * prefix. Returns as gguf_open(), never TANDEM_ERR_IO. */
tandem_err gguf_open_memory(const void *data, size_t len, const char *name, struct gguf **out,
                            char *err, size_t errlen);

/* Releases the handle and unmaps the file. gguf_free(NULL) is a no-op. */
void gguf_free(struct gguf *g);

/* Header facts of an open handle. */
uint32_t gguf_version(const struct gguf *g);     /* 2 or 3 */
uint64_t gguf_file_size(const struct gguf *g);   /* bytes of file or buffer */
uint64_t gguf_alignment(const struct gguf *g);   /* general.alignment or 32 */
uint64_t gguf_data_offset(const struct gguf *g); /* file offset of the data section */
uint64_t gguf_kv_count(const struct gguf *g);
uint64_t gguf_tensor_count(const struct gguf *g);

/* Returns the encoded size in bytes of one scalar of type t (BOOL: 1);
 * 0 for STRING, ARRAY and invalid types. */
uint64_t gguf_type_size(enum gguf_type t);

/* Returns the static upper-case name of t ("UINT32"), "unknown" if invalid. */
const char *gguf_type_name(enum gguf_type t);

/* True when s holds exactly the bytes of the NUL-terminated cstr. */
bool gguf_str_eq(struct gguf_str s, const char *cstr);

/* Returns the i-th key/value pair in file order, NULL when i >= kv_count.
 * The pointer is owned by g (valid until gguf_free()). */
const struct gguf_kv *gguf_kv_at(const struct gguf *g, uint64_t i);

/* Returns the pair whose key equals the NUL-terminated key (borrowed), or
 * NULL if absent. O(1) on average. Owned by g. */
const struct gguf_kv *gguf_kv_find(const struct gguf *g, const char *key);

/* Scalar readers for one pair. Each writes *out (output) and returns
 * TANDEM_OK; TANDEM_ERR_NOTFOUND when kv is NULL (so gguf_kv_find() results
 * chain directly); TANDEM_ERR_TYPE when the pair has another type;
 * TANDEM_ERR_RANGE when the value does not fit the output. Never abort.
 * - u64: any unsigned integer type; signed ones when the value is >= 0.
 * - i64: any signed integer type; unsigned ones up to INT64_MAX.
 * - f64: FLOAT32 or FLOAT64.
 * - bool: BOOL (nonzero byte = true, as ggml).
 * - str: STRING; the string points into the mapping. */
tandem_err gguf_kv_u64(const struct gguf_kv *kv, uint64_t *out);
tandem_err gguf_kv_i64(const struct gguf_kv *kv, int64_t *out);
tandem_err gguf_kv_f64(const struct gguf_kv *kv, double *out);
tandem_err gguf_kv_bool(const struct gguf_kv *kv, bool *out);
tandem_err gguf_kv_str(const struct gguf_kv *kv, struct gguf_str *out);

/* For an ARRAY pair writes its element type and count (outputs). Returns
 * TANDEM_ERR_NOTFOUND for NULL kv, TANDEM_ERR_TYPE for a non-array. */
tandem_err gguf_kv_arr(const struct gguf_kv *kv, enum gguf_type *elem, uint64_t *count);

/* Element i of an ARRAY pair, converted under the same rules as the scalar
 * readers above. Returns TANDEM_ERR_NOTFOUND for NULL kv, TANDEM_ERR_TYPE
 * when kv is not an array or its elements have another type, TANDEM_ERR_RANGE
 * when i >= count or the value does not fit, TANDEM_ERR_FORMAT if a
 * hand-built kv's value bytes are inconsistent. String elements are O(1) for
 * pairs from the reader (indexed at open). */
tandem_err gguf_kv_arr_u64(const struct gguf_kv *kv, uint64_t i, uint64_t *out);
tandem_err gguf_kv_arr_i64(const struct gguf_kv *kv, uint64_t i, int64_t *out);
tandem_err gguf_kv_arr_f64(const struct gguf_kv *kv, uint64_t i, double *out);
tandem_err gguf_kv_arr_bool(const struct gguf_kv *kv, uint64_t i, bool *out);
tandem_err gguf_kv_arr_str(const struct gguf_kv *kv, uint64_t i, struct gguf_str *out);

/* Lookup + scalar read in one call: gguf_kv_X(gguf_kv_find(g, key), out).
 * TANDEM_ERR_NOTFOUND when the key is absent. */
tandem_err gguf_get_u64(const struct gguf *g, const char *key, uint64_t *out);
tandem_err gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
tandem_err gguf_get_f64(const struct gguf *g, const char *key, double *out);
tandem_err gguf_get_bool(const struct gguf *g, const char *key, bool *out);
tandem_err gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
tandem_err gguf_get_arr(const struct gguf *g, const char *key, enum gguf_type *elem,
                        uint64_t *count);

/* Returns the first byte of the file (or buffer); the header occupies
 * [0, min(gguf_data_offset(), gguf_file_size())). NULL for an empty buffer.
 * Valid until gguf_free(). */
const uint8_t *gguf_header_bytes(const struct gguf *g);

/* Returns the i-th tensor info in file order, NULL when i >= tensor_count.
 * Owned by g. */
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, uint64_t i);

/* Returns the tensor named by the NUL-terminated name (borrowed), or NULL.
 * O(1) on average. Owned by g. */
const struct gguf_tensor *gguf_tensor_find(const struct gguf *g, const char *name);

/* Returns a pointer to t's size bytes inside the mapping (validated to lie
 * within the file at open), or NULL when t is NULL. Nothing is read here:
 * touching the bytes faults them in, which is the caller's choice. Valid
 * until gguf_free(); t must come from g. */
const void *gguf_tensor_data(const struct gguf *g, const struct gguf_tensor *t);

#endif
