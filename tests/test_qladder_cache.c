/* Unit tests for the ladder's cache (qladder_cache.c): the keys are the
 * hashes of fixed lines (a rerun of an older tandem finds its files), each
 * input changes them, and a sidecar is trusted only for its own build. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flow/qladder_cache.h"
#include "version.h"

#define SRC "aa11"
#define DATA "bb22"

static void sha_of(const char *text, char out[HASH_SHA256_HEX_LEN + 1]) {
    cr_assert_eq(hash_buffer_sha256(text, strlen(text), out), TANDEM_OK);
}

Test(qladder_cache, the_build_key_hashes_its_line) {
    char *protect[] = {"^cls\\.output\\.weight$=F32", "^cls\\.b$=F16"};
    char key[HASH_SHA256_HEX_LEN + 1], want[HASH_SHA256_HEX_LEN + 1], line[512];
    qladder_cache_build_key(SRC, "Q4_K_M", NULL, protect, 2, key);
    snprintf(line, sizeof line, "build|aa11|Q4_K_M|-|%d|^cls\\.output\\.weight$=F32|^cls\\.b$=F16",
             TANDEM_ENGINE_BUILD);
    sha_of(line, want);
    cr_expect_str_eq(key, want);
    cr_expect_eq(strlen(key), HASH_SHA256_HEX_LEN);
    qladder_cache_build_key(SRC, "Q4_K_M", "cc33", protect, 2, key);
    snprintf(line, sizeof line, "build|aa11|Q4_K_M|cc33|%d|^cls\\.output\\.weight$=F32|^cls\\.b$=F16",
             TANDEM_ENGINE_BUILD);
    sha_of(line, want);
    cr_expect_str_eq(key, want);
}

Test(qladder_cache, every_input_changes_the_build_key) {
    char *protect[] = {"^cls\\.a$=F32"};
    char base[HASH_SHA256_HEX_LEN + 1], k[HASH_SHA256_HEX_LEN + 1];
    qladder_cache_build_key(SRC, "Q4_K_M", NULL, protect, 1, base);
    qladder_cache_build_key("aa12", "Q4_K_M", NULL, protect, 1, k);
    cr_expect_str_neq(k, base);
    qladder_cache_build_key(SRC, "Q4_K_S", NULL, protect, 1, k);
    cr_expect_str_neq(k, base);
    qladder_cache_build_key(SRC, "Q4_K_M", "cc33", protect, 1, k);
    cr_expect_str_neq(k, base);
    qladder_cache_build_key(SRC, "Q4_K_M", NULL, protect, 0, k);
    cr_expect_str_neq(k, base);
    qladder_cache_build_key(SRC, "Q4_K_M", NULL, protect, 1, k);
    cr_expect_str_eq(k, base);
}

Test(qladder_cache, the_judge_key_hashes_its_line_and_each_input) {
    struct qladder_judge_inputs in = {SRC, DATA, 7, 0.5, 3, 0.1};
    char key[HASH_SHA256_HEX_LEN + 1], want[HASH_SHA256_HEX_LEN + 1], line[512];
    qladder_cache_judge_key("dd44", &in, key);
    snprintf(line, sizeof line, "judge|dd44|aa11|bb22|7|0.500000|3|0.100000|%d",
             TANDEM_ENGINE_BUILD);
    sha_of(line, want);
    cr_expect_str_eq(key, want);
    struct qladder_judge_inputs other[] = {
        {SRC, "bb23", 7, 0.5, 3, 0.1}, {SRC, DATA, 8, 0.5, 3, 0.1}, {SRC, DATA, 7, 0, 3, 0.1},
        {SRC, DATA, 7, 0.5, 1, 0.1},   {SRC, DATA, 7, 0.5, 3, 0.2}, {"aa12", DATA, 7, 0.5, 3, 0.1}};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        char k[HASH_SHA256_HEX_LEN + 1];
        qladder_cache_judge_key("dd44", &other[i], k);
        cr_expect_str_neq(k, key, "input set %zu", i);
    }
}

Test(qladder_cache, the_imatrix_key_hashes_its_line) {
    char key[HASH_SHA256_HEX_LEN + 1], want[HASH_SHA256_HEX_LEN + 1], line[256];
    qladder_cache_imatrix_key(SRC, DATA, 0, 0.5, key);
    snprintf(line, sizeof line, "imatrix|aa11|bb22|0|0.500000|%d", TANDEM_ENGINE_BUILD);
    sha_of(line, want);
    cr_expect_str_eq(key, want);
}

Test(qladder_cache, a_sidecar_is_trusted_for_its_own_build_only) {
    char dir[] = "/tmp/qladder-cache-XXXXXX", path[256], side[300], err[512];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/m-Q4_K_M.gguf", dir);
    snprintf(side, sizeof side, "%s.ladder.json", path);
    json_t *j = json_pack("{s:s,s:{s:{s:i}}}", "build", "k1", "judged", "j1", "flips", 2);
    cr_assert_eq(qladder_cache_save(path, j, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_null(qladder_cache_load(path, "k1"), "the built file itself is missing");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fclose(f);
    json_t *back = qladder_cache_load(path, "k1");
    cr_assert(back);
    cr_expect_eq(json_integer_value(json_object_get(
                     json_object_get(json_object_get(back, "judged"), "j1"), "flips")),
                 2);
    cr_expect_null(qladder_cache_load(path, "k2"), "another build");
    json_decref(back);
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no/such/dir/m.gguf", dir);
    cr_expect_eq(qladder_cache_save(missing, j, err, sizeof err), TANDEM_ERR_IO);
    cr_expect(strstr(err, "m.gguf.ladder.json: cannot write the cache ("), "%s", err);
    json_decref(j);
    unlink(side);
    unlink(path);
    rmdir(dir);
}
