/* Unit tests for ggml_types: the table, the checked size arithmetic, and a
 * drift check against the pinned engine's own source.
 *
 * The drift check reads the type_traits table in the engine's ggml/src/ggml.c,
 * writes a small C program that evaluates each entry's designator, blck_size
 * and type_size expressions with the engine's headers (ggml.h for the enum,
 * ggml-common.h for the QK_* macros and block_* structs), compiles it with the
 * system compiler and compares every line with our table. So a change of any
 * type's id, name, block size or byte size in a new engine build fails here. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cache.h"
#include "gguf/ggml_types.h"
#include "base/mem.h"
#include "version.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define ENGINE_SRC "engine/b" STR(TANDEM_ENGINE_BUILD) "/src"

Test(ggml_types, knows_the_documented_geometry) {
    static const struct {
        uint32_t id;
        const char *name;
        uint32_t block, size;
    } want[] = {
        {0, "F32", 1, 4},        {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
        {3, "Q4_1", 32, 20},     {8, "Q8_0", 32, 34},    {12, "Q4_K", 256, 144},
        {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292}, {23, "IQ4_XS", 256, 136},
        {28, "F64", 1, 8},       {30, "BF16", 1, 2},     {35, "TQ2_0", 256, 66},
        {39, "MXFP4", 32, 17},   {40, "NVFP4", 64, 36},  {42, "Q2_0", 64, 18},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct ggml_type_info *t = ggml_type_get(want[i].id);
        cr_assert_not_null(t, "id %u", want[i].id);
        cr_expect_str_eq(t->name, want[i].name);
        cr_expect_eq(t->block_size, want[i].block);
        cr_expect_eq(t->type_size, want[i].size);
    }
    cr_expect_eq(ggml_type_count(), 43);
}

Test(ggml_types, retired_and_unknown_ids_are_null) {
    static const uint32_t retired[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++)
        cr_expect_null(ggml_type_get(retired[i]), "id %u", retired[i]);
    cr_expect_null(ggml_type_get(43));
    cr_expect_null(ggml_type_get(UINT32_MAX));
    uint32_t valid = 0;
    for (uint32_t i = 0; i < ggml_type_count(); i++)
        valid += ggml_type_get(i) != NULL;
    cr_expect_eq(valid, 43 - 8);
}

Test(ggml_types, finds_names_ignoring_case) {
    uint32_t id = 99;
    cr_assert_eq(ggml_type_find("q4_K", &id), TANDEM_OK);
    cr_expect_eq(id, 12);
    cr_assert_eq(ggml_type_find("bf16", &id), TANDEM_OK);
    cr_expect_eq(id, 30);
    cr_expect_eq(ggml_type_find("Q4_2", &id), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(ggml_type_find("", &id), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(ggml_type_find(NULL, &id), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(id, 30, "failures leave the output alone");
}

Test(ggml_types, row_and_tensor_bytes) {
    uint64_t n = 0;
    cr_assert_eq(ggml_type_row_bytes(12, 4096, &n), TANDEM_OK);
    cr_expect_eq(n, 16 * 144);
    cr_assert_eq(ggml_type_row_bytes(0, 0, &n), TANDEM_OK);
    cr_expect_eq(n, 0);
    int64_t ne[4] = {576, 49152, 99, 99};
    cr_assert_eq(ggml_type_tensor_bytes(8, ne, 2, &n), TANDEM_OK);
    cr_expect_eq(n, 30081024, "SmolLM2's token_embd.weight; dims past n_dims ignored");
    int64_t ne4[4] = {64, 3, 5, 7};
    cr_assert_eq(ggml_type_tensor_bytes(1, ne4, 4, &n), TANDEM_OK);
    cr_expect_eq(n, 64 * 2 * 3 * 5 * 7);
}

Test(ggml_types, size_errors_are_reported_not_wrapped) {
    uint64_t n = 7;
    cr_expect_eq(ggml_type_row_bytes(12, 100, &n), TANDEM_ERR_FORMAT);
    cr_expect_eq(ggml_type_row_bytes(0, -1, &n), TANDEM_ERR_RANGE);
    cr_expect_eq(ggml_type_row_bytes(4, 32, &n), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(ggml_type_row_bytes(99, 32, &n), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(ggml_type_row_bytes(28, INT64_MAX, &n), TANDEM_ERR_RANGE, "F64: 8 * 2^63");
    int64_t neg[4] = {32, -2, 1, 1};
    cr_expect_eq(ggml_type_tensor_bytes(0, neg, 2, &n), TANDEM_ERR_RANGE);
    int64_t big[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
    cr_expect_eq(ggml_type_tensor_bytes(0, big, 4, &n), TANDEM_ERR_RANGE);
    int64_t ok[4] = {1, 1, 1, 1};
    cr_expect_eq(ggml_type_tensor_bytes(0, ok, 0, &n), TANDEM_ERR_INVAL);
    cr_expect_eq(ggml_type_tensor_bytes(0, ok, 5, &n), TANDEM_ERR_INVAL);
    cr_expect_eq(n, 7, "failures leave the output alone");
}

/* --- drift check against the engine source ------------------------------- */

static char tmpdir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmpdir(void) {
    if (tmpdir[0])
        nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Reads a whole file into a NUL-terminated buffer (caller frees), or NULL. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct mem_buf b;
    mem_buf_init(&b, 64u << 20);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (mem_buf_append(&b, chunk, n)) {
            mem_buf_deinit(&b);
            fclose(f);
            return NULL;
        }
    fclose(f);
    return b.data;
}

/* Copies the text after "<field> =" up to the line's last ',' into out. */
static int field_expr(const char *entry, const char *end, const char *field, char *out,
                      size_t cap) {
    const char *p = strstr(entry, field);
    if (!p || p > end || !(p = strchr(p, '=')))
        return 0;
    p++;
    while (*p == ' ')
        p++;
    const char *e = strchr(p, '\n');
    if (!e || e > end)
        return 0;
    while (e > p && (e[-1] == ',' || e[-1] == ' '))
        e--;
    if ((size_t)(e - p) >= cap)
        return 0;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 1;
}

/* Appends to prog one printf per type_traits entry of ggml.c; returns the
 * number of entries. */
static int emit_entries(const char *ggml_c, struct mem_buf *prog) {
    const char *p = strstr(ggml_c, "type_traits[GGML_TYPE_COUNT] = {");
    cr_assert_not_null(p, "ggml.c has no type_traits table");
    const char *table_end = strstr(p, "\n};");
    cr_assert_not_null(table_end);
    int n = 0;
    while ((p = strstr(p, "\n    [")) && p < table_end) {
        const char *d = p + 6, *close = strchr(d, ']');
        const char *end = strstr(d, "\n    },");
        cr_assert(close && end && end <= table_end, "unparsable entry near %.40s", d);
        char desig[64], name[128], blck[64], size[64], line[512];
        cr_assert_lt((size_t)(close - d), sizeof desig);
        memcpy(desig, d, (size_t)(close - d));
        desig[close - d] = '\0';
        cr_assert(field_expr(d, end, ".type_name", name, sizeof name), "%s: type_name", desig);
        cr_assert(field_expr(d, end, ".blck_size", blck, sizeof blck), "%s: blck_size", desig);
        cr_assert(field_expr(d, end, ".type_size", size, sizeof size), "%s: type_size", desig);
        int len = snprintf(line, sizeof line,
                           "    printf(\"%%d %%zu %%zu %%s %%s\\n\", (int)(%s), (size_t)(%s),"
                           " (size_t)(%s), \"%s\", %s);\n",
                           desig, blck, size, desig, name);
        cr_assert(len > 0 && (size_t)len < sizeof line);
        cr_assert_eq(mem_buf_append(prog, line, (size_t)len), TANDEM_OK);
        n++;
        p = end;
    }
    return n;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
}

static char ascii_upper(char c) {
    return c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
}

/* Compares one line "id blck size designator name" with our table (the
 * names of retired entries contain spaces, hence last). */
static void check_line(const char *line, int *seen) {
    int id;
    char name[128], desig[64];
    size_t blck, size;
    cr_assert_eq(sscanf(line, "%d %zu %zu %63s %127[^\n]", &id, &blck, &size, desig, name), 5,
                 "bad helper output: %s", line);
    cr_assert(id >= 0 && id < 64, "id %d", id);
    seen[id] = 1;
    const struct ggml_type_info *t = ggml_type_get((uint32_t)id);
    if (blck == 0) {
        cr_expect_null(t, "engine retired type %d (%s) but the table still has it", id, desig);
        return;
    }
    cr_assert_not_null(t, "engine type %d (%s) missing from the table", id, name);
    for (char *c = name; *c; c++)
        *c = ascii_upper(*c);
    cr_expect_str_eq(t->name, name, "type %d", id);
    cr_assert_eq(strncmp(desig, "GGML_TYPE_", 10), 0, "type %d: designator %s", id, desig);
    cr_expect_str_eq(desig + 10, t->name, "type %d: enum name", id);
    cr_expect_eq(t->block_size, blck, "type %d (%s): block size", id, t->name);
    cr_expect_eq(t->type_size, size, "type %d (%s): type size", id, t->name);
}

Test(ggml_types, matches_the_pinned_engine_source, .fini = remove_tmpdir) {
    char src[4096], path[4200], cmd[16384];
    cr_assert_eq(cache_path(src, sizeof src, ENGINE_SRC), TANDEM_OK);
    snprintf(path, sizeof path, "%s/ggml/src/ggml.c", src);
    char *ggml_c = slurp(path);
    cr_assert_not_null(ggml_c, "cannot read %s: run `make deps` to fetch the pinned engine", path);

    struct mem_buf prog;
    mem_buf_init(&prog, 1u << 20);
    const char *head = "#include <stdio.h>\n#include \"ggml.h\"\n#define GGML_COMMON_DECL_C\n"
                       "#include \"ggml-common.h\"\nint main(void) {\n";
    cr_assert_eq(mem_buf_append(&prog, head, strlen(head)), TANDEM_OK);
    int entries = emit_entries(ggml_c, &prog);
    mem_free(ggml_c);
    const char *tail = "    printf(\"count %d\\n\", (int)GGML_TYPE_COUNT);\n    return 0;\n}\n";
    cr_assert_eq(mem_buf_append(&prog, tail, strlen(tail)), TANDEM_OK);
    cr_assert_gt(entries, 30, "parsed only %d type_traits entries", entries);

    strcpy(tmpdir, "/tmp/tandem-ggml-types.XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    snprintf(path, sizeof path, "%s/traits.c", tmpdir);
    write_file(path, prog.data);
    mem_buf_deinit(&prog);
    snprintf(cmd, sizeof cmd, "cc -std=c11 -w -I'%s/ggml/include' -I'%s/ggml/src' -o '%s/traits' '%s' 2>&1 && '%s/traits'",
             src, src, tmpdir, path, tmpdir);
    FILE *out = popen(cmd, "r");
    cr_assert_not_null(out);
    char line[512];
    int seen[64] = {0}, lines = 0, count = -1;
    while (fgets(line, sizeof line, out)) {
        if (sscanf(line, "count %d", &count) == 1)
            continue;
        check_line(line, seen);
        lines++;
    }
    cr_assert_eq(pclose(out), 0, "helper program failed to build or run");
    cr_expect_eq(lines, entries);
    cr_assert_eq(count, (int)ggml_type_count(), "GGML_TYPE_COUNT changed");
    for (int id = 0; id < count; id++)
        if (!seen[id])
            cr_expect_null(ggml_type_get((uint32_t)id), "type %d absent from the engine", id);
}
