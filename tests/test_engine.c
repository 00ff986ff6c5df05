/* Unit tests for engine: version parsing, verdicts, locating the binary, the
 * route scan, and `--version` queries against real child processes (small
 * shell scripts stand in for engines too old or too broken to obtain). */
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"

static char dir[64];

static void make_dir(void) {
    strcpy(dir, "/tmp/tandem-engine-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    unsetenv("TANDEM_LLAMA_SERVER");
    setenv("TANDEM_CACHE", dir, 1);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void) {
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Writes len bytes of body to an executable file dir/name; returns its path
 * (valid until the next call). */
static const char *write_bytes(const char *name, const char *body, size_t len) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(body, 1, len, f), len);
    fclose(f);
    chmod(path, 0755);
    return path;
}

static const char *write_exec(const char *name, const char *body) {
    return write_bytes(name, body, strlen(body));
}

Test(engine, parses_current_version_line) {
    struct engine_version v;
    cr_assert_eq(engine_version_parse("version: 0.6.0-dev (build 11434, commit sdist-b0a2feb6)\n"
                                      "built with GNU 12.2.0 for Linux x86_64\n", &v),
                 TANDEM_OK);
    cr_expect_eq(v.build, 11434);
    cr_expect_str_eq(v.commit, "sdist-b0a2feb6");
    cr_expect_str_eq(v.version, "0.6.0-dev");
}

Test(engine, parses_older_version_line) {
    struct engine_version v;
    cr_assert_eq(engine_version_parse("version: 4500 (abc1234)\n", &v), TANDEM_OK);
    cr_expect_eq(v.build, 4500);
    cr_expect_str_eq(v.commit, "abc1234");
}

Test(engine, meaningless_build_numbers_are_unknown) {
    struct engine_version v;
    cr_assert_eq(engine_version_parse("version: 0.5.0-dev (build 1, commit de3ff81)", &v), TANDEM_OK);
    cr_expect_eq(v.build, -1);
    cr_expect_str_eq(v.commit, "de3ff81");
    cr_assert_eq(engine_version_parse("version: 0.5.0-dev\n", &v), TANDEM_OK);
    cr_expect_eq(v.build, -1);
}

Test(engine, rejects_output_without_version) {
    struct engine_version v;
    cr_expect_eq(engine_version_parse("", &v), TANDEM_ERR_FORMAT);
    cr_expect_eq(engine_version_parse("usage: llama-server [options]\n", &v), TANDEM_ERR_FORMAT);
}

Test(engine, verdicts) {
    struct engine_version v = {.build = 11361};
    cr_expect_eq(engine_verdict_of(&v, false), ENGINE_VERDICT_OK);
    v.build = 11360;
    cr_expect_eq(engine_verdict_of(&v, true), ENGINE_VERDICT_TOO_OLD, "a known build wins");
    v.build = -1;
    cr_expect_eq(engine_verdict_of(&v, true), ENGINE_VERDICT_UNVERIFIED);
    cr_expect_eq(engine_verdict_of(&v, false), ENGINE_VERDICT_NO_ROUTE);
}

Test(engine, locate_prefers_flag_then_env_then_cache, .init = make_dir, .fini = remove_dir) {
    char out[256];
    enum engine_source src;
    const char *flag = write_exec("flag-server", "#!/bin/sh\n");
    char flag_path[128];
    strcpy(flag_path, flag);
    const char *env = write_exec("env-server", "#!/bin/sh\n");
    setenv("TANDEM_LLAMA_SERVER", env, 1);

    cr_assert_eq(engine_locate(flag_path, 11434, out, sizeof out, &src), TANDEM_OK);
    cr_expect_eq(src, ENGINE_SOURCE_FLAG);
    cr_expect_str_eq(out, flag_path);
    cr_assert_eq(engine_locate(NULL, 11434, out, sizeof out, &src), TANDEM_OK);
    cr_expect_eq(src, ENGINE_SOURCE_ENV);
    unsetenv("TANDEM_LLAMA_SERVER");
    cr_expect_eq(engine_locate(NULL, 11434, out, sizeof out, &src), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(src, ENGINE_SOURCE_CACHE);
    char want[256];
    snprintf(want, sizeof want, "%s/engine/b11434/bin/llama-server", dir);
    cr_expect_str_eq(out, want, "the missing path is still named");
}

Test(engine, libexec_path_is_beside_the_binarys_folder) {
    char out[128];
    cr_assert_eq(engine_libexec_path("/usr/local/bin/tandem", out, sizeof out), TANDEM_OK);
    cr_expect_str_eq(out, "/usr/local/libexec/tandem/llama-server");
    cr_assert_eq(engine_libexec_path("/tmp/d/usr/bin/tandem", out, sizeof out), TANDEM_OK);
    cr_expect_str_eq(out, "/tmp/d/usr/libexec/tandem/llama-server", "under a DESTDIR");
    cr_assert_eq(engine_libexec_path("/bin/tandem", out, sizeof out), TANDEM_OK);
    cr_expect_str_eq(out, "/libexec/tandem/llama-server");
    cr_assert_eq(engine_libexec_path("/tandem", out, sizeof out), TANDEM_OK);
    cr_expect_str_eq(out, "/libexec/tandem/llama-server", "the root is its own parent");
}

Test(engine, libexec_path_refuses_relative_and_long_paths) {
    char out[40] = "x";
    cr_expect_eq(engine_libexec_path("bin/tandem", out, sizeof out), TANDEM_ERR_INVAL);
    cr_expect_str_eq(out, "");
    cr_expect_eq(engine_libexec_path(NULL, out, sizeof out), TANDEM_ERR_INVAL);
    cr_expect_eq(engine_libexec_path("/a-rather-long-prefix/bin/tandem", out, sizeof out),
                 TANDEM_ERR_TOOBIG);
    cr_expect_str_eq(out, "", "nothing cut is left behind");
}

Test(engine, source_names) {
    cr_expect_str_eq(engine_source_name(ENGINE_SOURCE_FLAG), "--llama-server");
    cr_expect_str_eq(engine_source_name(ENGINE_SOURCE_ENV), "TANDEM_LLAMA_SERVER");
    cr_expect_str_eq(engine_source_name(ENGINE_SOURCE_CACHE), "cache");
    cr_expect_str_eq(engine_source_name(ENGINE_SOURCE_LIBEXEC), "libexec");
}

Test(engine, locate_refuses_non_executables, .init = make_dir, .fini = remove_dir) {
    char out[256], path[128];
    enum engine_source src;
    snprintf(path, sizeof path, "%s/plain", dir);
    FILE *f = fopen(path, "w");
    fclose(f);
    cr_expect_eq(engine_locate(path, 11434, out, sizeof out, &src), TANDEM_ERR_NOTFOUND);
    cr_expect_eq(engine_locate(dir, 11434, out, sizeof out, &src), TANDEM_ERR_NOTFOUND, "a directory");
}

Test(engine, route_scan_finds_the_route_string, .init = make_dir, .fini = remove_dir) {
    bool found = true;
    cr_assert_eq(engine_route_scan(write_bytes("with", "xx\0/v1/systemone\0yy", 19), &found), TANDEM_OK);
    cr_expect(found);
    cr_assert_eq(engine_route_scan(write_exec("without", "/v1/chat/completions"), &found), TANDEM_OK);
    cr_expect_not(found);
    cr_assert_eq(engine_route_scan(write_exec("empty", ""), &found), TANDEM_OK);
    cr_expect_not(found);
    cr_expect_eq(engine_route_scan("/nonexistent/llama-server", &found), TANDEM_ERR_IO);
}

Test(engine, query_reads_version_from_stderr, .init = make_dir, .fini = remove_dir) {
    const char *p = write_exec("ok", "#!/bin/sh\n"
                                     "echo 'version: 0.6.0-dev (build 11434, commit abc)' >&2\n");
    struct engine_version v;
    char err[256] = "";
    cr_assert_eq(engine_version_query(p, 5000, &v, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_eq(v.build, 11434);
    cr_expect_str_eq(v.commit, "abc");
}

Test(engine, query_reports_exit_status_timeout_and_spawn_failure, .init = make_dir, .fini = remove_dir) {
    struct engine_version v;
    char err[256];
    cr_expect_eq(engine_version_query(write_exec("fails", "#!/bin/sh\nexit 3\n"), 5000, &v, err,
                                      sizeof err),
                 TANDEM_ERR_CHILD);
    cr_expect(strstr(err, "exited with status 3"), "%s", err);
    cr_expect_eq(engine_version_query(write_exec("hangs", "#!/bin/sh\nexec sleep 30\n"), 200, &v,
                                      err, sizeof err),
                 TANDEM_ERR_TIMEOUT);
    cr_expect(strstr(err, "no answer within 200 ms"), "%s", err);
    cr_expect_eq(engine_version_query(write_exec("mute", "#!/bin/sh\necho hello\n"), 5000, &v, err,
                                      sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_expect_eq(engine_version_query("/nonexistent/llama-server", 5000, &v, err, sizeof err),
                 TANDEM_ERR_SPAWN);
    cr_expect(strstr(err, "cannot run"), "%s", err);
}

Test(engine, identify_rejects_old_builds_with_a_clear_message, .init = make_dir, .fini = remove_dir) {
    const char *p = write_exec("old", "#!/bin/sh\necho 'version: 0.3.0 (build 9000, commit abc)' >&2\n");
    struct engine_identity id;
    cr_expect_eq(engine_identify(p, 11434, &id), TANDEM_ERR_ENGINE);
    cr_expect_eq(id.verdict, ENGINE_VERDICT_TOO_OLD);
    cr_expect(strstr(id.error, "build 9000, older than b11361"), "%s", id.error);
}
