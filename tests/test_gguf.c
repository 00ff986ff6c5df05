/* Unit tests for gguf: files built in memory by a tiny writer below (every
 * value type, arrays of every element type, v2 and v3, alignment, accessor
 * mismatches), robustness sweeps (every truncation, every corrupted byte,
 * every allocation failure), the malformed corpus in tests/data/gguf (exact
 * messages), a sparse multi-GB file whose data must stay untouched, and the
 * two real test models in the cache.
 *
 * Buffers handed to the reader are exact-size heap copies so that ASan
 * flags any read past the end. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/cache.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "base/mem.h"

#define CORPUS "tests/data/gguf"

/* --- a tiny GGUF writer ------------------------------------------------------ */

static void put(struct mem_buf *b, const void *p, size_t n) {
    cr_assert_eq(mem_buf_append(b, p, n), TANDEM_OK);
}

static void put_le(struct mem_buf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    put(b, tmp, (size_t)bytes);
}

static void put_u32(struct mem_buf *b, uint32_t v) {
    put_le(b, v, 4);
}

static void put_u64(struct mem_buf *b, uint64_t v) {
    put_le(b, v, 8);
}

static void put_str(struct mem_buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_f32(struct mem_buf *b, float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    put_u32(b, bits);
}

static void put_f64(struct mem_buf *b, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    put_u64(b, bits);
}

static void put_header(struct mem_buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static void put_key(struct mem_buf *b, const char *key, enum gguf_type t) {
    put_str(b, key);
    put_u32(b, t);
}

static void put_kv_u32(struct mem_buf *b, const char *key, uint32_t v) {
    put_key(b, key, GGUF_TYPE_UINT32);
    put_u32(b, v);
}

/* One element of type t: integers from iv, floats from fv, strings from sv. */
static void put_elem(struct mem_buf *b, enum gguf_type t, int64_t iv, double fv, const char *sv) {
    switch (t) {
    case GGUF_TYPE_FLOAT32: put_f32(b, (float)fv); break;
    case GGUF_TYPE_FLOAT64: put_f64(b, fv); break;
    case GGUF_TYPE_STRING: put_str(b, sv); break;
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: put_le(b, (uint64_t)iv, 1); break;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: put_le(b, (uint64_t)iv, 2); break;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: put_le(b, (uint64_t)iv, 4); break;
    default: put_le(b, (uint64_t)iv, 8); break;
    }
}

static void pad_to(struct mem_buf *b, size_t a) {
    while (b->len % a)
        put(b, "", 1);
}

static bool is_signed_type(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* Element j (0..2) of the test arrays. */
static const char *const arr_str[3] = {"a", "", "ccc"};
static const double arr_f[3] = {0.5, -1.0, 2.0};
static int64_t arr_int(enum gguf_type t, int j) {
    if (t == GGUF_TYPE_BOOL)
        return j == 0 ? 1 : j == 1 ? 0 : 2;
    return is_signed_type(t) ? j - 1 : j + 1;
}

#define N_SCALARS 12
#define N_ARRAYS 12 /* one per element type but ARRAY */
#define N_TENSORS 3

/* Writes a complete file: 12 scalars, 12 three-element arrays, an empty
 * array, optionally general.alignment, and three tensors with patterned
 * data. alignment 0 = leave the key out (default 32). */
static void build_rich(struct mem_buf *b, uint32_t version, uint32_t alignment) {
    mem_buf_init(b, 1u << 20);
    put_header(b, version, N_TENSORS, N_SCALARS + N_ARRAYS + 1 + (alignment != 0));
    put_key(b, "u8", GGUF_TYPE_UINT8), put_le(b, 200, 1);
    put_key(b, "i8", GGUF_TYPE_INT8), put_le(b, (uint64_t)-5, 1);
    put_key(b, "u16", GGUF_TYPE_UINT16), put_le(b, 65000, 2);
    put_key(b, "i16", GGUF_TYPE_INT16), put_le(b, (uint64_t)-30000, 2);
    put_key(b, "u32", GGUF_TYPE_UINT32), put_u32(b, 4000000000u);
    put_key(b, "i32", GGUF_TYPE_INT32), put_le(b, (uint64_t)-2000000000, 4);
    put_key(b, "f32", GGUF_TYPE_FLOAT32), put_f32(b, 1.5f);
    put_key(b, "bool", GGUF_TYPE_BOOL), put_le(b, 1, 1);
    put_key(b, "str", GGUF_TYPE_STRING), put_str(b, "hello");
    put_key(b, "u64", GGUF_TYPE_UINT64), put_u64(b, UINT64_MAX);
    put_key(b, "i64", GGUF_TYPE_INT64), put_u64(b, (uint64_t)INT64_MIN);
    put_key(b, "f64", GGUF_TYPE_FLOAT64), put_f64(b, 2.25);
    for (int t = 0; t < GGUF_TYPE_COUNT_; t++) {
        if (t == GGUF_TYPE_ARRAY)
            continue;
        char key[32];
        snprintf(key, sizeof key, "arr.%s", gguf_type_name((enum gguf_type)t));
        put_key(b, key, GGUF_TYPE_ARRAY);
        put_u32(b, (uint32_t)t);
        put_u64(b, 3);
        for (int j = 0; j < 3; j++)
            put_elem(b, (enum gguf_type)t, arr_int((enum gguf_type)t, j), arr_f[j], arr_str[j]);
    }
    put_key(b, "arr.empty", GGUF_TYPE_ARRAY), put_u32(b, GGUF_TYPE_UINT32), put_u64(b, 0);
    if (alignment)
        put_kv_u32(b, "general.alignment", alignment);
    uint64_t a = alignment ? alignment : 32;
    uint64_t off_b = (16 + a - 1) / a * a, off_c = (off_b + 72 + a - 1) / a * a;
    put_str(b, "a"), put_u32(b, 1), put_u64(b, 4), put_u32(b, 0), put_u64(b, 0);
    put_str(b, "b.weight"), put_u32(b, 2), put_u64(b, 64), put_u64(b, 2), put_u32(b, 2),
        put_u64(b, off_b);
    put_str(b, "c"), put_u32(b, 4), put_u64(b, 3), put_u64(b, 1), put_u64(b, 1), put_u64(b, 2),
        put_u32(b, 24), put_u64(b, off_c);
    pad_to(b, a);
    size_t data = b->len;
    for (uint64_t i = 0; i < off_c + 6; i++)
        put_le(b, (uint8_t)(i * 7 + 1), 1);
    cr_assert_eq(b->len, data + off_c + 6);
}

/* Returns an exact-size heap copy of b (caller frees with mem_free). */
static uint8_t *exact_copy(const void *p, size_t n) {
    uint8_t *c = mem_alloc(n);
    cr_assert_not_null(c);
    if (n)
        memcpy(c, p, n);
    return c;
}

/* Opens an exact-size copy of b's bytes; *copy must outlive the handle. */
static struct gguf *open_copy(const struct mem_buf *b, uint8_t **copy) {
    char err[512] = "";
    struct gguf *g = NULL;
    *copy = exact_copy(b->data, b->len);
    tandem_err e = gguf_open_memory(*copy, b->len, "mem.gguf", &g, err, sizeof err);
    cr_assert_eq(e, TANDEM_OK, "%s: %s", tandem_errname(e), err);
    cr_assert_not_null(g);
    return g;
}

/* --- well-formed files ------------------------------------------------------ */

Test(gguf, reads_every_scalar_type) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    uint64_t u;
    int64_t i;
    double f;
    bool yes = false;
    struct gguf_str s;
    cr_expect_eq(gguf_version(g), 3);
    cr_expect_eq(gguf_kv_count(g), N_SCALARS + N_ARRAYS + 1);
    cr_expect_eq(gguf_file_size(g), b.len);
    cr_assert_eq(gguf_get_u64(g, "u8", &u), TANDEM_OK); cr_expect_eq(u, 200);
    cr_assert_eq(gguf_get_i64(g, "i8", &i), TANDEM_OK); cr_expect_eq(i, -5);
    cr_assert_eq(gguf_get_u64(g, "u16", &u), TANDEM_OK); cr_expect_eq(u, 65000);
    cr_assert_eq(gguf_get_i64(g, "i16", &i), TANDEM_OK); cr_expect_eq(i, -30000);
    cr_assert_eq(gguf_get_u64(g, "u32", &u), TANDEM_OK); cr_expect_eq(u, 4000000000u);
    cr_assert_eq(gguf_get_i64(g, "i32", &i), TANDEM_OK); cr_expect_eq(i, -2000000000);
    cr_assert_eq(gguf_get_f64(g, "f32", &f), TANDEM_OK); cr_expect_eq(f, 1.5);
    cr_assert_eq(gguf_get_bool(g, "bool", &yes), TANDEM_OK); cr_expect(yes);
    cr_assert_eq(gguf_get_str(g, "str", &s), TANDEM_OK);
    cr_expect(gguf_str_eq(s, "hello"));
    cr_assert_eq(gguf_get_u64(g, "u64", &u), TANDEM_OK); cr_expect_eq(u, UINT64_MAX);
    cr_assert_eq(gguf_get_i64(g, "i64", &i), TANDEM_OK); cr_expect_eq(i, INT64_MIN);
    cr_assert_eq(gguf_get_f64(g, "f64", &f), TANDEM_OK); cr_expect_eq(f, 2.25);
    /* cross-type integer reads */
    cr_assert_eq(gguf_get_i64(g, "u32", &i), TANDEM_OK); cr_expect_eq(i, 4000000000);
    cr_assert_eq(gguf_get_u64(g, "arr.empty", &u), TANDEM_ERR_TYPE);
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, kv_records_file_order_offsets_and_raw_values) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    const struct gguf_kv *kv = gguf_kv_at(g, 0);
    cr_assert_not_null(kv);
    cr_expect(gguf_str_eq(kv->key, "u8"));
    cr_expect_eq(kv->offset, 24);
    cr_expect_eq(kv->type, GGUF_TYPE_UINT8);
    cr_expect_eq(kv->value - copy, 24 + 8 + 2 + 4);
    cr_expect_eq(kv->value_len, 1);
    const struct gguf_kv *str = gguf_kv_find(g, "str");
    cr_assert_not_null(str);
    cr_expect_eq(str->value_len, 8 + 5, "STRING: length field + bytes");
    const struct gguf_kv *arr = gguf_kv_find(g, "arr.UINT16");
    cr_assert_not_null(arr);
    cr_expect_eq(arr->value_len, 12 + 3 * 2, "ARRAY: elem type + count + elements");
    cr_expect_null(gguf_kv_at(g, gguf_kv_count(g)));
    cr_expect_null(gguf_kv_find(g, "absent"));
    cr_expect_null(gguf_kv_find(g, "u"), "prefixes do not match");
    cr_expect_null(gguf_kv_find(g, NULL));
    for (uint64_t k = 0; k < gguf_kv_count(g); k++) {
        const struct gguf_kv *e = gguf_kv_at(g, k);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)e->key.len, e->key.ptr);
        cr_expect_eq(gguf_kv_find(g, key), e, "find(%s)", key);
    }
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

static void check_array(const struct gguf *g, enum gguf_type t) {
    char key[32];
    snprintf(key, sizeof key, "arr.%s", gguf_type_name(t));
    const struct gguf_kv *kv = gguf_kv_find(g, key);
    cr_assert_not_null(kv, "%s", key);
    enum gguf_type et;
    uint64_t n;
    cr_assert_eq(gguf_kv_arr(kv, &et, &n), TANDEM_OK);
    cr_expect_eq(et, t);
    cr_expect_eq(n, 3);
    for (uint64_t j = 0; j < 3; j++) {
        uint64_t u;
        int64_t i;
        double f;
        bool bo;
        struct gguf_str s;
        int64_t want = arr_int(t, (int)j);
        if (t == GGUF_TYPE_STRING) {
            cr_assert_eq(gguf_kv_arr_str(kv, j, &s), TANDEM_OK);
            cr_expect(gguf_str_eq(s, arr_str[j]), "%s[%d]", key, (int)j);
        } else if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
            cr_assert_eq(gguf_kv_arr_f64(kv, j, &f), TANDEM_OK);
            cr_expect_eq(f, arr_f[j]);
        } else if (t == GGUF_TYPE_BOOL) {
            cr_assert_eq(gguf_kv_arr_bool(kv, j, &bo), TANDEM_OK);
            cr_expect_eq(bo, want != 0);
        } else {
            cr_assert_eq(gguf_kv_arr_i64(kv, j, &i), TANDEM_OK);
            cr_expect_eq(i, want, "%s[%d]", key, (int)j);
            cr_expect_eq(gguf_kv_arr_u64(kv, j, &u), want < 0 ? TANDEM_ERR_RANGE : TANDEM_OK);
        }
    }
    uint64_t u;
    cr_expect_eq(gguf_kv_arr_u64(kv, 3, &u),
                 t == GGUF_TYPE_STRING || t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64 ||
                         t == GGUF_TYPE_BOOL
                     ? TANDEM_ERR_TYPE
                     : TANDEM_ERR_RANGE);
}

Test(gguf, reads_arrays_of_every_element_type) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    for (int t = 0; t < GGUF_TYPE_COUNT_; t++)
        if (t != GGUF_TYPE_ARRAY)
            check_array(g, (enum gguf_type)t);
    enum gguf_type et;
    uint64_t n = 9;
    cr_assert_eq(gguf_get_arr(g, "arr.empty", &et, &n), TANDEM_OK);
    cr_expect_eq(n, 0);
    cr_expect_eq(et, GGUF_TYPE_UINT32);
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, string_elements_of_a_hand_built_kv_are_walked) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    struct gguf_kv kv = *gguf_kv_find(g, "arr.STRING");
    cr_expect_not_null(kv.str_index, "the reader indexes string arrays");
    kv.str_index = NULL;
    struct gguf_str s;
    for (uint64_t j = 0; j < 3; j++) {
        cr_assert_eq(gguf_kv_arr_str(&kv, j, &s), TANDEM_OK);
        cr_expect(gguf_str_eq(s, arr_str[j]));
    }
    kv.value_len = 12 + 9 + 8 + 5; /* cut inside element 2 */
    cr_expect_eq(gguf_kv_arr_str(&kv, 2, &s), TANDEM_ERR_FORMAT);
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, typed_accessors_report_mismatches) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    uint64_t u = 42;
    int64_t i = 42;
    double f = 42;
    bool yes = false;
    struct gguf_str s = {NULL, 42};
    enum gguf_type et;
    cr_expect_eq(gguf_get_u64(g, "missing", &u), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(gguf_get_str(g, "missing", &s), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(gguf_get_arr(g, "missing", &et, &u), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(gguf_get_u64(g, "str", &u), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_u64(g, "f32", &u), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_u64(g, "bool", &u), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_u64(g, "i8", &u), TANDEM_ERR_RANGE, "negative into unsigned");
    cr_expect_eq(gguf_get_i64(g, "u64", &i), TANDEM_ERR_RANGE, "UINT64_MAX into int64");
    cr_expect_eq(gguf_get_f64(g, "u32", &f), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_bool(g, "u8", &yes), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_str(g, "arr.STRING", &s), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_get_arr(g, "str", &et, &u), TANDEM_ERR_TYPE);
    const struct gguf_kv *farr = gguf_kv_find(g, "arr.FLOAT32");
    cr_expect_eq(gguf_kv_arr_u64(farr, 0, &u), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_kv_arr_str(farr, 0, &s), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_kv_arr_f64(farr, 3, &f), TANDEM_ERR_RANGE);
    cr_expect_eq(gguf_kv_arr_f64(gguf_kv_find(g, "f32"), 0, &f), TANDEM_ERR_TYPE);
    cr_expect_eq(gguf_kv_arr_str(gguf_kv_find(g, "arr.STRING"), 3, &s), TANDEM_ERR_RANGE);
    cr_expect_eq(gguf_kv_u64(NULL, &u), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(gguf_kv_arr_i64(NULL, 0, &i), TANDEM_ERR_NOTFOUND);
    cr_expect(u == 42 && i == 42 && f == 42 && !yes && s.len == 42, "failures write nothing");
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, tensors_have_shapes_sizes_and_data) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 3, 0);
    struct gguf *g = open_copy(&b, &copy);
    cr_assert_eq(gguf_tensor_count(g), N_TENSORS);
    cr_expect_eq(gguf_alignment(g), 32);
    cr_expect_eq(gguf_data_offset(g) % 32, 0);
    const struct gguf_tensor *a = gguf_tensor_at(g, 0), *w = gguf_tensor_find(g, "b.weight");
    const struct gguf_tensor *c = gguf_tensor_find(g, "c");
    cr_assert(a && w && c);
    cr_expect(gguf_str_eq(a->name, "a"));
    cr_expect_eq(a->n_dims, 1);
    cr_expect(a->ne[0] == 4 && a->ne[1] == 1 && a->ne[2] == 1 && a->ne[3] == 1);
    cr_expect_eq(a->size, 16);
    cr_expect_eq(w->type, 2);
    cr_expect_eq(w->size, 72);
    cr_expect_eq(w->offset, 32);
    cr_expect_eq(c->n_dims, 4);
    cr_expect(c->ne[0] == 3 && c->ne[3] == 2);
    cr_expect_eq(c->size, 6);
    cr_expect_eq(c->offset, 128);
    const uint8_t *d = gguf_tensor_data(g, c);
    cr_expect_eq(d, copy + gguf_data_offset(g) + 128);
    cr_expect_eq(d[0], (uint8_t)(128 * 7 + 1));
    cr_expect_eq(gguf_tensor_at(g, 1), w);
    cr_expect_null(gguf_tensor_at(g, 3));
    cr_expect_null(gguf_tensor_find(g, "b"));
    cr_expect_null(gguf_tensor_data(g, NULL));
    cr_expect_eq(a->info_offset + 8, (uint64_t)((const uint8_t *)a->name.ptr - copy));
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, version_2_and_a_larger_alignment) {
    struct mem_buf b;
    uint8_t *copy;
    build_rich(&b, 2, 64);
    struct gguf *g = open_copy(&b, &copy);
    cr_expect_eq(gguf_version(g), 2);
    cr_expect_eq(gguf_alignment(g), 64);
    cr_expect_eq(gguf_data_offset(g) % 64, 0);
    cr_expect_eq(gguf_tensor_find(g, "b.weight")->offset, 64);
    uint64_t u;
    cr_assert_eq(gguf_get_u64(g, "general.alignment", &u), TANDEM_OK);
    cr_expect_eq(u, 64);
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, header_only_file_has_no_padding) {
    struct mem_buf b;
    uint8_t *copy;
    mem_buf_init(&b, 1024);
    put_header(&b, 3, 0, 0);
    struct gguf *g = open_copy(&b, &copy);
    cr_expect_eq(gguf_kv_count(g), 0);
    cr_expect_eq(gguf_tensor_count(g), 0);
    cr_expect_eq(gguf_data_offset(g), 24, "as ggml: no tensors, no padding");
    cr_expect_null(gguf_kv_find(g, "x"));
    cr_expect_null(gguf_tensor_find(g, "x"));
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, bool_reads_any_nonzero_byte_as_true_like_ggml) {
    struct mem_buf b;
    uint8_t *copy;
    mem_buf_init(&b, 1024);
    put_header(&b, 3, 0, 1);
    put_key(&b, "flag", GGUF_TYPE_BOOL);
    put_le(&b, 2, 1);
    struct gguf *g = open_copy(&b, &copy);
    bool yes = false;
    cr_assert_eq(gguf_get_bool(g, "flag", &yes), TANDEM_OK);
    cr_expect(yes);
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, many_keys_and_tensors_grow_the_tables) {
    struct mem_buf b;
    uint8_t *copy;
    enum { N = 1000 };
    mem_buf_init(&b, 1u << 20);
    put_header(&b, 3, N, N);
    char name[32];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "key.%d", i);
        put_kv_u32(&b, name, (uint32_t)i);
    }
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof name, "t.%d", i);
        put_str(&b, name), put_u32(&b, 1), put_u64(&b, 8), put_u32(&b, 0);
        put_u64(&b, (uint64_t)i * 32);
    }
    pad_to(&b, 32);
    for (int i = 0; i < N * 32; i++)
        put(&b, "", 1);
    struct gguf *g = open_copy(&b, &copy);
    for (int i = 0; i < N; i += 37) {
        uint64_t u;
        snprintf(name, sizeof name, "key.%d", i);
        cr_assert_eq(gguf_get_u64(g, name, &u), TANDEM_OK);
        cr_expect_eq(u, (uint64_t)i);
        snprintf(name, sizeof name, "t.%d", i);
        cr_assert_not_null(gguf_tensor_find(g, name));
        cr_expect_eq(gguf_tensor_find(g, name)->offset, (uint64_t)i * 32);
    }
    gguf_free(g);
    mem_free(copy);
    mem_buf_deinit(&b);
}

/* --- robustness sweeps --------------------------------------------------------- */

/* A failure must leave *out NULL and write one line starting "<name>: ". */
static void expect_clean_failure(tandem_err e, const struct gguf *g, const char *err,
                                 size_t at) {
    cr_expect_neq(e, TANDEM_OK, "prefix/variant %zu parsed", at);
    cr_expect_null(g);
    cr_expect_eq(strncmp(err, "mem.gguf: offset ", 17), 0, "%zu: %s", at, err);
    cr_expect_null(strchr(err, '\n'), "%zu: one line", at);
}

Test(gguf, every_truncation_fails_cleanly) {
    struct mem_buf b;
    build_rich(&b, 3, 0);
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *copy = exact_copy(b.data, n);
        struct gguf *g = (struct gguf *)1;
        char err[512] = "";
        tandem_err e = gguf_open_memory(n ? copy : NULL, n, "mem.gguf", &g, err, sizeof err);
        expect_clean_failure(e, g, err, n);
        mem_free(copy);
    }
    mem_buf_deinit(&b);
}

Test(gguf, every_corrupted_byte_is_handled) {
    struct mem_buf b;
    build_rich(&b, 3, 0);
    static const uint8_t patterns[] = {0xff, 0x80, 0x00, 0x41};
    size_t header_end = b.len - 134; /* the data section is 128 + 6 bytes */
    for (size_t at = 0; at < header_end; at++) {
        for (size_t k = 0; k < sizeof patterns; k++) {
            uint8_t *copy = exact_copy(b.data, b.len);
            if (copy[at] == patterns[k]) {
                mem_free(copy);
                continue;
            }
            copy[at] = patterns[k];
            struct gguf *g = NULL;
            char err[512] = "";
            tandem_err e = gguf_open_memory(copy, b.len, "mem.gguf", &g, err, sizeof err);
            if (e)
                expect_clean_failure(e, g, err, at);
            gguf_free(g);
            mem_free(copy);
        }
    }
    mem_buf_deinit(&b);
}

static void disarm(void) {
    mem_fail_after(-1);
}

Test(gguf, every_allocation_failure_is_reported, .fini = disarm) {
    struct mem_buf b;
    build_rich(&b, 3, 0);
    uint8_t *copy = exact_copy(b.data, b.len);
    int failures = 0;
    for (long n = 0; n < 1000; n++) {
        struct gguf *g = NULL;
        char err[512] = "";
        mem_fail_after(n);
        tandem_err e = gguf_open_memory(copy, b.len, "mem.gguf", &g, err, sizeof err);
        disarm();
        if (e == TANDEM_OK) {
            gguf_free(g);
            break;
        }
        cr_expect_eq(e, TANDEM_ERR_NOMEM, "allocation %ld: %s", n, err);
        cr_expect_null(g);
        cr_expect_eq(strncmp(err, "mem.gguf: ", 10), 0, "%s", err);
        failures++;
    }
    cr_expect_gt(failures, 3, "the reader allocates handle, tables and indexes");
    cr_expect_lt(failures, 1000);
    mem_free(copy);
    mem_buf_deinit(&b);
}

Test(gguf, huge_counts_allocate_nothing_big) {
    /* A count that passes the bytes-left bound but lies must not allocate
     * for the whole claim: arrays grow with what is actually parsed. */
    struct mem_buf b;
    mem_buf_init(&b, 1u << 20);
    put_header(&b, 3, 0, 50000);
    put_kv_u32(&b, "only.one", 1);
    for (int i = 0; i < 700000; i++)
        put(&b, "", 1);
    struct mem_stats before, after;
    mem_stats_get(&before);
    uint8_t *copy = exact_copy(b.data, b.len);
    struct gguf *g = NULL;
    char err[512];
    cr_expect_eq(gguf_open_memory(copy, b.len, "mem.gguf", &g, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "mem.gguf: offset 48: key 1: expected a non-empty key, found length 0");
    mem_stats_get(&after);
    cr_expect_lt(after.allocs - before.allocs, 10);
    mem_free(copy);
    mem_buf_deinit(&b);
}

/* --- the malformed corpus ------------------------------------------------------ */

static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    struct mem_buf b;
    mem_buf_init(&b, 16u << 20);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        cr_assert_eq(mem_buf_append(&b, chunk, n), TANDEM_OK);
    fclose(f);
    *len = b.len;
    if (!b.data)
        return (char *)exact_copy("", 1); /* empty file: data stays NULL */
    return b.data;
}

static void replay(const char *stem) {
    char path[512], exp_path[512], err[1024] = "", err2[1024] = "";
    snprintf(path, sizeof path, CORPUS "/%s.gguf", stem);
    snprintf(exp_path, sizeof exp_path, CORPUS "/%s.expected", stem);
    size_t elen, flen;
    char *expected = read_text(exp_path, &elen);
    while (elen && (expected[elen - 1] == '\n' || expected[elen - 1] == '\r'))
        expected[--elen] = '\0';
    struct gguf *g = NULL;
    tandem_err e = gguf_open(path, &g, err, sizeof err);
    cr_expect_neq(e, TANDEM_OK, "%s parsed", path);
    cr_expect_null(g);
    cr_expect(strcmp(err, expected) == 0, "%s:\n  got:  %s\n  want: %s", stem, err, expected);
    gguf_free(g);
    /* the same bytes through the memory entry point give the same line */
    char *bytes = read_text(path, &flen);
    uint8_t *copy = exact_copy(bytes, flen);
    e = gguf_open_memory(flen ? copy : NULL, flen, path, &g, err2, sizeof err2);
    cr_expect_neq(e, TANDEM_OK);
    cr_expect(strcmp(err2, err) == 0, "%s via memory:\n  got:  %s\n  file: %s", stem, err2, err);
    mem_free(copy);
    mem_free(bytes);
    mem_free(expected);
}

Test(gguf, malformed_corpus_gives_the_expected_messages) {
    DIR *d = opendir(CORPUS);
    cr_assert_not_null(d, "cannot open %s (unit tests run from the repository root)", CORPUS);
    int n = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        size_t len = strlen(ent->d_name);
        if (len <= 5 || strcmp(ent->d_name + len - 5, ".gguf"))
            continue;
        char stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(len - 5), ent->d_name);
        replay(stem);
        n++;
    }
    closedir(d);
    cr_assert_gt(n, 0, "no *.gguf cases in %s: run tests/data/gguf/make_malformed.py", CORPUS);
    cr_expect_geq(n, 40, "corpus shrank to %d cases", n);
}

Test(gguf, open_reports_io_errors_on_one_line) {
    struct gguf *g = (struct gguf *)1;
    char err[512];
    cr_expect_eq(gguf_open(CORPUS "/no-such-file.gguf", &g, err, sizeof err), TANDEM_ERR_IO);
    cr_expect_null(g);
    cr_expect_str_eq(err, CORPUS "/no-such-file.gguf: cannot open: No such file or directory");
    cr_expect_eq(gguf_open(CORPUS, &g, err, sizeof err), TANDEM_ERR_IO);
    cr_expect_str_eq(err, CORPUS ": cannot read: is a directory");
    cr_expect_eq(gguf_open(CORPUS "/version_4.gguf", &g, NULL, 0), TANDEM_ERR_UNSUPPORTED,
                 "no message buffer is fine");
    gguf_free(NULL);
}

/* --- a sparse multi-GB file: the data is never touched --------------------------- */

Test(gguf, opening_touches_only_the_header) {
    char path[] = "/tmp/tandem-gguf-sparse.XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    struct mem_buf b;
    mem_buf_init(&b, 4096);
    put_header(&b, 3, 1, 1);
    put_key(&b, "general.architecture", GGUF_TYPE_STRING), put_str(&b, "llama");
    put_str(&b, "big"), put_u32(&b, 2), put_u64(&b, 1u << 16), put_u64(&b, 1u << 16);
    put_u32(&b, 0), put_u64(&b, 0); /* F32 65536 x 65536: 16 GiB */
    pad_to(&b, 32);
    cr_assert_eq(write(fd, b.data, b.len), (ssize_t)b.len);
    uint64_t total = b.len + (16ull << 30);
    cr_assert_eq(ftruncate(fd, (off_t)total), 0, "sparse file");
    close(fd);
    struct gguf *g = NULL;
    char err[512] = "";
    tandem_err e = gguf_open(path, &g, err, sizeof err);
    unlink(path);
    cr_assert_eq(e, TANDEM_OK, "%s", err);
    const struct gguf_tensor *t = gguf_tensor_find(g, "big");
    cr_assert_not_null(t);
    cr_expect_eq(t->size, 16ull << 30);
    /* count resident pages of the data past the first 64 MiB (room for the
     * kernel's readahead around the header pages): none */
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t from = ((uintptr_t)gguf_tensor_data(g, t) + (64u << 20) + (uintptr_t)page - 1) &
                     ~((uintptr_t)page - 1);
    size_t span = 1u << 30, pages = span / (size_t)page, resident = 0;
    unsigned char *vec = mem_alloc(pages);
    cr_assert_not_null(vec);
    cr_assert_eq(mincore((void *)from, span, vec), 0);
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    cr_expect_eq(resident, 0, "%zu data pages were faulted in", resident);
    mem_free(vec);
    gguf_free(g);
    mem_buf_deinit(&b);
}

/* --- the real test models ---------------------------------------------------------- */

static struct gguf *open_model(const char *file) {
    char path[4096], err[1024] = "";
    char sub[256];
    snprintf(sub, sizeof sub, "models/%s", file);
    cr_assert_eq(cache_path(path, sizeof path, sub), TANDEM_OK);
    struct gguf *g = NULL;
    tandem_err e = gguf_open(path, &g, err, sizeof err);
    cr_assert_eq(e, TANDEM_OK, "%s (run `make deps` to fetch the test models)", err);
    return g;
}

static void expect_str(const struct gguf *g, const char *key, const char *want) {
    struct gguf_str s;
    cr_assert_eq(gguf_get_str(g, key, &s), TANDEM_OK, "%s", key);
    cr_expect(gguf_str_eq(s, want), "%s = %.*s, want %s", key, (int)s.len, s.ptr, want);
}

static void expect_u64(const struct gguf *g, const char *key, uint64_t want) {
    uint64_t u = 0;
    cr_assert_eq(gguf_get_u64(g, key, &u), TANDEM_OK, "%s", key);
    cr_expect_eq(u, want, "%s", key);
}

/* Every tensor ends inside the file; sizes agree with ggml_types. */
static void expect_tensors_in_file(const struct gguf *g) {
    for (uint64_t i = 0; i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        uint64_t bytes;
        cr_assert_eq(ggml_type_tensor_bytes(t->type, t->ne, t->n_dims, &bytes), TANDEM_OK);
        cr_expect_eq(bytes, t->size);
        cr_expect_leq(gguf_data_offset(g) + t->offset + t->size, gguf_file_size(g));
    }
}

Test(gguf, reads_smollm2) {
    struct gguf *g = open_model("smollm2-135m-instruct-q4_1.gguf");
    cr_expect_eq(gguf_version(g), 3);
    cr_expect_eq(gguf_kv_count(g), 33);
    cr_expect_eq(gguf_tensor_count(g), 272);
    cr_expect_eq(gguf_alignment(g), 32, "no general.alignment key: the default");
    cr_expect_null(gguf_kv_find(g, "general.alignment"));
    cr_expect_eq(gguf_data_offset(g), 1785664);
    expect_str(g, "general.architecture", "llama");
    expect_str(g, "tokenizer.ggml.model", "gpt2");
    expect_u64(g, "llama.block_count", 30);
    expect_u64(g, "llama.embedding_length", 576);
    expect_u64(g, "llama.attention.head_count_kv", 3);
    expect_u64(g, "general.file_type", 3);
    double base = 0;
    cr_assert_eq(gguf_get_f64(g, "llama.rope.freq_base", &base), TANDEM_OK);
    cr_expect_eq(base, 100000.0);
    const struct gguf_kv *tok = gguf_kv_find(g, "tokenizer.ggml.tokens");
    struct gguf_str s;
    cr_assert_not_null(tok);
    cr_expect_eq(tok->arr_count, 49152);
    cr_assert_eq(gguf_kv_arr_str(tok, 1, &s), TANDEM_OK);
    cr_expect(gguf_str_eq(s, "<|im_start|>"));
    const struct gguf_tensor *emb = gguf_tensor_find(g, "token_embd.weight");
    cr_assert_not_null(emb);
    cr_expect_eq(emb->type, 8, "Q8_0");
    cr_expect(emb->ne[0] == 576 && emb->ne[1] == 49152);
    cr_expect_eq(emb->offset, 0);
    cr_expect_eq(emb->size, 30081024);
    expect_tensors_in_file(g);
    gguf_free(g);
}

Test(gguf, reads_gemma3) {
    struct gguf *g = open_model("gemma-3-270m-q4_k_m.gguf");
    cr_expect_eq(gguf_kv_count(g), 33);
    cr_expect_eq(gguf_tensor_count(g), 236);
    cr_expect_eq(gguf_alignment(g), 32);
    cr_expect_eq(gguf_data_offset(g), 6525120, "6525112 padded to 32");
    expect_str(g, "general.architecture", "gemma3");
    expect_u64(g, "gemma3.block_count", 18);
    expect_u64(g, "gemma3.attention.sliding_window", 512);
    expect_u64(g, "gemma3.attention.key_length", 256);
    expect_u64(g, "general.file_type", 15);
    bool add_bos = false;
    cr_assert_eq(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), TANDEM_OK);
    cr_expect(add_bos);
    /* all 262144 tokens through the index: O(1) each */
    const struct gguf_kv *tok = gguf_kv_find(g, "tokenizer.ggml.tokens");
    cr_assert_not_null(tok);
    cr_assert_eq(tok->arr_count, 262144);
    struct gguf_str s;
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < tok->arr_count; i++) {
        cr_assert_eq(gguf_kv_arr_str(tok, i, &s), TANDEM_OK);
        bytes += s.len;
    }
    cr_expect_gt(bytes, 262144);
    cr_assert_eq(gguf_kv_arr_str(tok, 2, &s), TANDEM_OK);
    cr_expect(gguf_str_eq(s, "<bos>"));
    double score = 0;
    cr_assert_eq(gguf_kv_arr_f64(gguf_kv_find(g, "tokenizer.ggml.scores"), 0, &score), TANDEM_OK);
    cr_expect_eq(score, -1000.0);
    const struct gguf_tensor *k = gguf_tensor_find(g, "blk.0.attn_k.weight");
    cr_assert_not_null(k);
    cr_expect_eq(k->type, 6, "Q5_0");
    expect_tensors_in_file(g);
    gguf_free(g);
}
