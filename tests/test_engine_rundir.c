/* Unit tests for engine_rundir: the private run folder is 0700, owned by
 * this user, under $XDG_RUNTIME_DIR else $TMPDIR else /tmp; socket paths
 * that would not fit sun_path are refused with a message naming them; a
 * stale socket is removed; freeing removes the folder and what is in it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine_rundir.h"

static struct engine_rundir *make(void) {
    struct engine_rundir *d = NULL;
    char err[512] = "";
    cr_assert_eq(engine_rundir_new(&d, err, sizeof err), TANDEM_OK, "%s", err);
    return d;
}

Test(engine_rundir, the_folder_is_private_and_goes_with_its_contents) {
    setenv("XDG_RUNTIME_DIR", "", 1); /* empty counts as unset */
    setenv("TMPDIR", "/tmp", 1);
    struct engine_rundir *d = make();
    const char *path = engine_rundir_path(d);
    cr_expect(!strncmp(path, "/tmp/tandem-", 12), "%s", path);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_expect(S_ISDIR(st.st_mode));
    cr_expect_eq(st.st_mode & 0777, 0700, "mode %o", st.st_mode & 0777);
    cr_expect_eq(st.st_uid, geteuid());
    char slots[256], sock[256], file[300], err[256];
    cr_assert_eq(engine_rundir_slots(d, 3, slots, sizeof slots, err, sizeof err), TANDEM_OK);
    cr_assert_eq(lstat(slots, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0700);
    snprintf(file, sizeof file, "%s/saved.bin", slots);
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fclose(f);
    cr_assert_eq(engine_rundir_socket(d, 3, sock, sizeof sock, err, sizeof err), TANDEM_OK);
    char want[300];
    snprintf(want, sizeof want, "%s/e3.sock", path);
    cr_expect_str_eq(sock, want);
    char copy[256];
    snprintf(copy, sizeof copy, "%s", path);
    engine_rundir_free(d);
    cr_expect_neq(lstat(copy, &st), 0, "%s is still there", copy);
    engine_rundir_free(NULL);
}

Test(engine_rundir, xdg_runtime_dir_comes_first) {
    char base[] = "/tmp/tandem-xdg-XXXXXX";
    cr_assert(mkdtemp(base));
    setenv("XDG_RUNTIME_DIR", base, 1);
    setenv("TMPDIR", "/nonexistent", 1);
    struct engine_rundir *d = make();
    cr_expect(!strncmp(engine_rundir_path(d), base, strlen(base)), "%s", engine_rundir_path(d));
    engine_rundir_free(d);
    cr_expect_eq(rmdir(base), 0);
}

Test(engine_rundir, a_stale_socket_file_is_replaced) {
    setenv("XDG_RUNTIME_DIR", "/tmp", 1);
    struct engine_rundir *d = make();
    char sock[256], err[256];
    snprintf(sock, sizeof sock, "%s/e0.sock", engine_rundir_path(d));
    FILE *f = fopen(sock, "w"); /* what a dead engine leaves behind */
    cr_assert(f);
    fclose(f);
    cr_assert_eq(engine_rundir_socket(d, 0, sock, sizeof sock, err, sizeof err), TANDEM_OK);
    cr_expect_neq(access(sock, F_OK), 0);
    engine_rundir_free(d);
}

Test(engine_rundir, a_parent_too_long_for_socket_paths_is_refused) {
    char lng[200];
    memset(lng, 'a', sizeof lng - 1);
    lng[0] = '/';
    lng[sizeof lng - 1] = '\0';
    setenv("XDG_RUNTIME_DIR", lng, 1);
    struct engine_rundir *d = NULL;
    char err[512] = "";
    cr_expect_eq(engine_rundir_new(&d, err, sizeof err), TANDEM_ERR_TOOBIG);
    cr_expect_null(d);
    cr_expect(strstr(err, "too long for unix socket paths") && strstr(err, "XDG_RUNTIME_DIR"),
              "%s", err);
}

/* The longest parent that new accepts: every index's socket then fits. */
Test(engine_rundir, every_socket_fits_under_the_longest_parent_accepted) {
    char base[128] = "/tmp/tandem-long-";
    size_t n = strlen(base);
    memset(base + n, 'b', 77 - n);
    base[77] = '\0'; /* 77 bytes: one too many */
    setenv("XDG_RUNTIME_DIR", base, 1);
    struct engine_rundir *d = NULL;
    char sock[256], err[512] = "";
    cr_expect_eq(engine_rundir_new(&d, err, sizeof err), TANDEM_ERR_TOOBIG, "%s", err);
    base[76] = '\0';
    cr_assert(mkdir(base, 0700) == 0);
    setenv("XDG_RUNTIME_DIR", base, 1);
    d = make();
    cr_expect_eq(engine_rundir_socket(d, 4294967295u, sock, sizeof sock, err, sizeof err),
                 TANDEM_OK, "%s", err);
    cr_expect_eq(strlen(sock), 107, "%s", sock);
    cr_expect_eq(engine_rundir_socket(d, 1, sock, 40, err, sizeof err), TANDEM_ERR_TOOBIG);
    cr_expect(strstr(err, "e1.sock is longer than"), "%s", err);
    engine_rundir_free(d);
    cr_expect_eq(rmdir(base), 0);
}

Test(engine_rundir, an_unwritable_parent_is_an_io_error_that_names_it) {
    setenv("XDG_RUNTIME_DIR", "/nonexistent-tandem-parent", 1);
    struct engine_rundir *d = NULL;
    char err[512] = "";
    cr_expect_eq(engine_rundir_new(&d, err, sizeof err), TANDEM_ERR_IO);
    cr_expect(strstr(err, "/nonexistent-tandem-parent"), "%s", err);
}

Test(engine_rundir, a_parent_the_engine_would_split_is_refused) {
    setenv("XDG_RUNTIME_DIR", "/tmp/a,b", 1);
    struct engine_rundir *d = NULL;
    char err[512] = "";
    cr_expect_eq(engine_rundir_new(&d, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "/tmp/a,b") && strstr(err, "comma"), "%s", err);
}
