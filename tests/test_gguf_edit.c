/* Unit tests for gguf_edit: spec parsing, round trips through the reader,
 * atomic output (nothing at OUT on failure, IN may be OUT), realignment, and
 * allocation failure at every step. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/gguf_edit.h"
#include "base/mem.h"

static char dir[64], in_path[128], out_path[128];

static void put(FILE *f, const void *p, size_t n) { cr_assert_eq(fwrite(p, 1, n, f), n); }
static void put_u32(FILE *f, uint32_t v) { put(f, &v, 4); }
static void put_u64(FILE *f, uint64_t v) { put(f, &v, 8); }
static void put_str(FILE *f, const char *s) { put_u64(f, strlen(s)); put(f, s, strlen(s)); }

/* A small valid GGUF: two keys and one F32 tensor of 8 elements (1..8). */
static void setup(void) {
    strcpy(dir, "/tmp/tandem-edit-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(in_path, sizeof in_path, "%s/in.gguf", dir);
    snprintf(out_path, sizeof out_path, "%s/out.gguf", dir);
    FILE *f = fopen(in_path, "wb");
    put(f, "GGUF", 4);
    put_u32(f, 3);
    put_u64(f, 1);
    put_u64(f, 2);
    put_str(f, "general.architecture");
    put_u32(f, GGUF_TYPE_STRING);
    put_str(f, "llama");
    put_str(f, "llama.block_count");
    put_u32(f, GGUF_TYPE_UINT32);
    put_u32(f, 2);
    put_str(f, "w");
    put_u32(f, 1);
    put_u64(f, 8);
    put_u32(f, 0); /* F32 */
    put_u64(f, 0);
    long pos = ftell(f);
    static const char zeros[32];
    put(f, zeros, (size_t)((32 - pos % 32) % 32));
    for (int i = 1; i <= 8; i++) {
        float v = (float)i;
        put(f, &v, 4);
    }
    fclose(f);
}

static void teardown(void) {
    unlink(in_path);
    unlink(out_path);
    rmdir(dir);
    mem_fail_after(-1);
}

TestSuite(gguf_edit, .init = setup, .fini = teardown);

static struct gguf *open_ok(const char *path) {
    struct gguf *g;
    char err[256];
    cr_assert_eq(gguf_open(path, &g, err, sizeof err), TANDEM_OK, "%s", err);
    return g;
}

/* Applies specs (NULL-terminated) to in_path, writing out; returns the result. */
static tandem_err edit(const char *out, const char *const *specs, char *err, size_t errlen) {
    struct gguf *g = open_ok(in_path);
    struct gguf_edit *e;
    cr_assert_eq(gguf_edit_new(g, &e), TANDEM_OK);
    tandem_err rc = TANDEM_OK;
    for (; rc == TANDEM_OK && *specs; specs++)
        rc = **specs == '-' ? gguf_edit_remove(e, *specs + 1, err, errlen)
                            : gguf_edit_set_spec(e, *specs, err, errlen);
    if (rc == TANDEM_OK)
        rc = gguf_edit_write(e, out, err, errlen);
    gguf_edit_free(e);
    gguf_free(g);
    return rc;
}

Test(gguf_edit, set_changes_in_place_appends_new_keys_and_keeps_tensors) {
    const char *specs[] = {"llama.block_count=u32:7", "x.t=f32:2.35", "x.b=bool:true",
                           "x.a=arr[i16]:[-3,4]", "x.s=str:hi", NULL};
    char err[256] = "";
    cr_assert_eq(edit(out_path, specs, err, sizeof err), TANDEM_OK, "%s", err);
    struct gguf *g = open_ok(out_path);
    cr_expect_eq(gguf_kv_count(g), 6);
    cr_expect(gguf_str_eq(gguf_kv_at(g, 1)->key, "llama.block_count"), "changed key keeps its place");
    uint64_t u;
    double d;
    bool b;
    int64_t i;
    cr_expect_eq(gguf_get_u64(g, "llama.block_count", &u), TANDEM_OK);
    cr_expect_eq(u, 7);
    cr_expect_eq(gguf_get_f64(g, "x.t", &d), TANDEM_OK);
    cr_expect_eq((float)d, 2.35f);
    cr_expect_eq(gguf_get_bool(g, "x.b", &b), TANDEM_OK);
    cr_expect(b);
    cr_expect_eq(gguf_kv_arr_i64(gguf_kv_find(g, "x.a"), 0, &i), TANDEM_OK);
    cr_expect_eq(i, -3);
    const struct gguf_tensor *t = gguf_tensor_find(g, "w");
    cr_assert_not_null(t);
    const float *data = gguf_tensor_data(g, t);
    cr_expect_eq(data[0], 1.0f);
    cr_expect_eq(data[7], 8.0f);
    gguf_free(g);
}

Test(gguf_edit, remove_and_realign) {
    const char *specs[] = {"-llama.block_count", "general.alignment=u32:256", NULL};
    char err[256] = "";
    cr_assert_eq(edit(out_path, specs, err, sizeof err), TANDEM_OK, "%s", err);
    struct gguf *g = open_ok(out_path);
    cr_expect_null(gguf_kv_find(g, "llama.block_count"));
    cr_expect_eq(gguf_alignment(g), 256);
    cr_expect_eq(gguf_data_offset(g) % 256, 0);
    cr_expect_eq(((const float *)gguf_tensor_data(g, gguf_tensor_at(g, 0)))[3], 4.0f);
    gguf_free(g);
}

Test(gguf_edit, output_may_replace_input) {
    const char *specs[] = {"x.new=u8:1", NULL};
    char err[256] = "";
    cr_assert_eq(edit(in_path, specs, err, sizeof err), TANDEM_OK, "%s", err);
    struct gguf *g = open_ok(in_path);
    cr_expect_not_null(gguf_kv_find(g, "x.new"));
    gguf_free(g);
}

Test(gguf_edit, bad_specs_are_refused_by_name) {
    static const struct { const char *spec, *message; } cases[] = {
        {"nokey", "\"nokey\": expected key=type:value"},
        {"=u8:1", "\"=u8:1\": expected key=type:value"},
        {"k=u8", "k: expected type:value after '=', got \"u8\""},
        {"k=u9:1", "k: unknown type \"u9\""},
        {"k=u8:256", "k: 256 does not fit in UINT8"},
        {"k=i8:-129", "k: -129 does not fit in INT8"},
        {"k=u32:12x", "k: expected an integer, got \"12x\""},
        {"k=u32:-1", "k: -1 does not fit in UINT32"},
        {"k=bool:yes", "k: expected true or false, got \"yes\""},
        {"k=f32:", "k: expected a number, got \"\""},
        {"k=arr[u8]:[1,300]", "k: 300 does not fit in UINT8"},
        {"k=arr[str]:[1]", "k: array element 0 is not a STRING"},
        {"k=arr[u8]:{}", "k: expected a JSON array"},
        {"k=file:/nonexistent/t.jinja", "k: cannot read /nonexistent/t.jinja"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *specs[] = {cases[c].spec, NULL};
        char err[256] = "";
        cr_expect_neq(edit(out_path, specs, err, sizeof err), TANDEM_OK, "%s", cases[c].spec);
        cr_expect(strstr(err, cases[c].message), "%s: got \"%s\"", cases[c].spec, err);
        cr_expect_neq(access(out_path, F_OK), 0, "nothing written for %s", cases[c].spec);
    }
}

Test(gguf_edit, bad_alignment_and_missing_key_write_nothing) {
    char err[256] = "";
    const char *align[] = {"general.alignment=u32:48", NULL};
    cr_expect_eq(edit(out_path, align, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "power of two"), "%s", err);
    const char *missing[] = {"-no.such", NULL};
    cr_expect_eq(edit(out_path, missing, err, sizeof err), TANDEM_ERR_NOTFOUND);
    cr_expect_str_eq(err, "no.such: no such key");
    cr_expect_neq(access(out_path, F_OK), 0);
}

Test(gguf_edit, allocation_failure_anywhere_fails_cleanly) {
    const char *specs[] = {"x.a=arr[str]:[\"A\",\"B\"]", "x.n=u64:9", NULL};
    struct gguf *g = open_ok(in_path);
    for (long n = 0;; n++) {
        struct gguf_edit *e = NULL;
        char err[256];
        mem_fail_after(n);
        tandem_err rc = gguf_edit_new(g, &e);
        for (const char *const *s = specs; rc == TANDEM_OK && *s; s++)
            rc = gguf_edit_set_spec(e, *s, err, sizeof err);
        if (rc == TANDEM_OK)
            rc = gguf_edit_write(e, out_path, err, sizeof err);
        mem_fail_after(-1);
        gguf_edit_free(e);
        if (rc == TANDEM_OK)
            break; /* n passed the number of allocations the edit makes */
        cr_assert_eq(rc, TANDEM_ERR_NOMEM, "failure %ld gave %s", n, tandem_errname(rc));
        cr_assert_neq(access(out_path, F_OK), 0);
        cr_assert_lt(n, 1000);
    }
    gguf_free(g);
}

Test(gguf_edit, synthesis_from_nothing_with_copied_appended_keys_and_filled_tensors) {
    struct gguf *src = open_ok(in_path);
    struct gguf_edit *e;
    char err[256] = "";
    cr_assert_eq(gguf_edit_new(NULL, &e), TANDEM_OK);
    cr_assert_eq(gguf_edit_copy_kv(e, gguf_kv_find(src, "general.architecture")), TANDEM_OK);
    cr_assert_eq(gguf_edit_set_spec(e, "t.tokens=arr[str]:[\"a\",\"b\"]", err, sizeof err), TANDEM_OK);
    cr_assert_eq(gguf_edit_append_json(e, "t.tokens", "[\"c\", \"d\"]", err, sizeof err), TANDEM_OK);
    uint64_t n = 0;
    enum gguf_type elem;
    cr_assert_eq(gguf_edit_array_info(e, "t.tokens", &elem, &n), TANDEM_OK);
    cr_expect_eq(n, 4);
    cr_expect_eq(elem, GGUF_TYPE_STRING);
    cr_assert_eq(gguf_edit_truncate(e, "t.tokens", 3), TANDEM_OK);
    cr_assert_eq(gguf_edit_array_info(e, "t.tokens", &elem, &n), TANDEM_OK);
    cr_expect_eq(n, 3);
    cr_expect_eq(gguf_edit_append_json(e, "t.tokens", "[1]", err, sizeof err), TANDEM_ERR_INVAL,
                 "elements must match the array's type");
    cr_expect_eq(gguf_edit_append_json(e, "t.none", "[1]", err, sizeof err), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(gguf_edit_append_json(e, "general.architecture", "[1]", err, sizeof err),
                 TANDEM_ERR_TYPE);

    struct tensor_fill one = {.kind = TENSOR_FILL_CONST, .value = 1.0f};
    struct tensor_fill hole = {.kind = TENSOR_FILL_HOLE};
    int64_t small[4] = {16, 2}, big[4] = {1 << 20, 16};
    cr_assert_eq(gguf_edit_add_tensor(e, "ones", 0, 2, small, &one, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(gguf_edit_add_tensor(e, "hole", 12 /* Q4_K */, 2, big, &hole, err, sizeof err), TANDEM_OK);
    cr_expect_eq(gguf_edit_add_tensor(e, "ones", 0, 2, small, &one, err, sizeof err), TANDEM_ERR_INVAL,
                 "duplicate names are refused");
    cr_expect_eq(gguf_edit_add_tensor(e, "q", 12, 2, small, &hole, err, sizeof err), TANDEM_ERR_INVAL,
                 "16 is not a multiple of Q4_K's 256-element block");
    cr_expect_eq(gguf_edit_add_tensor(e, "c", 12, 2, big, &one, err, sizeof err), TANDEM_ERR_INVAL,
                 "const cannot fill Q4_K");
    cr_assert_eq(gguf_edit_write(e, out_path, err, sizeof err), TANDEM_OK, "%s", err);
    gguf_edit_free(e);
    gguf_free(src);

    struct gguf *g = open_ok(out_path);
    struct gguf_str s;
    cr_expect_eq(gguf_version(g), 3);
    cr_assert_eq(gguf_kv_arr_str(gguf_kv_find(g, "t.tokens"), 2, &s), TANDEM_OK);
    cr_expect(gguf_str_eq(s, "c"));
    const float *ones = gguf_tensor_data(g, gguf_tensor_find(g, "ones"));
    cr_expect_eq(ones[31], 1.0f);
    const struct gguf_tensor *h = gguf_tensor_find(g, "hole");
    cr_expect_eq(h->size, (uint64_t)(1 << 20) / 256 * 144 * 16);
    cr_expect_eq(gguf_file_size(g), gguf_data_offset(g) + h->offset + h->size,
                 "a trailing hole still gives the file its full size");
    struct stat st;
    cr_assert_eq(stat(out_path, &st), 0);
    cr_expect_lt((uint64_t)st.st_blocks * 512, h->size / 4, "the hole takes no disk");
    gguf_free(g);
}

Test(gguf_edit, the_last_tensor_is_padded_as_ggml_reads_it) {
    /* ggml loads the data section as the sum of the padded tensor sizes, the
     * last one's included: an unaligned last tensor must be followed by zeros */
    struct gguf *src = open_ok(in_path);
    struct gguf_edit *e;
    char err[256] = "";
    cr_assert_eq(gguf_edit_new(src, &e), TANDEM_OK);
    struct tensor_fill one = {.kind = TENSOR_FILL_CONST, .value = 1.0f};
    int64_t three[4] = {3};
    cr_assert_eq(gguf_edit_add_tensor(e, "bias", 0, 1, three, &one, err, sizeof err), TANDEM_OK,
                 "%s", err);
    cr_assert_eq(gguf_edit_write(e, out_path, err, sizeof err), TANDEM_OK, "%s", err);
    gguf_edit_free(e);
    gguf_free(src);
    struct gguf *g = open_ok(out_path);
    const struct gguf_tensor *t = gguf_tensor_find(g, "bias");
    cr_assert_not_null(t);
    cr_expect_eq(t->size, 12);
    cr_expect_eq(gguf_file_size(g), gguf_data_offset(g) + t->offset + 32,
                 "12 bytes, then 20 of padding");
    gguf_free(g);
}
