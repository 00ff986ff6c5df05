/* Unit tests for api_key: the key file's format (first line that is not
 * empty or a # comment), its mode (refused when group or others may read
 * it), and the environment as the fallback. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/api_key.h"

static char path[] = "/tmp/tandem-key-XXXXXX";

static const char *key_file(const char *text, mode_t mode) {
    strcpy(path, "/tmp/tandem-key-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
    return path;
}

Test(api_key, first_key_line_trimmed) {
    char key[API_KEY_MAX], err[256] = "";
    const char *f = key_file("# the daemon's key\n\n   k-one \t\nk-two\n", 0600);
    cr_expect_eq(api_key_read_file(f, key, sizeof key, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_str_eq(key, "k-one");
    unlink(f);
}

Test(api_key, a_file_others_may_read_is_refused) {
    char key[API_KEY_MAX] = "", err[256] = "";
    const char *f = key_file("k-one\n", 0644);
    cr_expect_eq(api_key_read_file(f, key, sizeof key, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "readable by others (mode 0644)") && strstr(err, "chmod 600"), "%s", err);
    cr_expect_str_eq(key, "");
    chmod(f, 0640);
    cr_expect_eq(api_key_read_file(f, key, sizeof key, err, sizeof err), TANDEM_ERR_INVAL);
    unlink(f);
}

Test(api_key, empty_missing_and_overlong_files_say_so) {
    char key[16], err[256] = "";
    const char *f = key_file("# only a comment\n\n", 0600);
    cr_expect_eq(api_key_read_file(f, key, sizeof key, err, sizeof err), TANDEM_ERR_NOTFOUND);
    cr_expect(strstr(err, "holds no key"), "%s", err);
    unlink(f);
    f = key_file("0123456789abcdefXYZ\n", 0600);
    cr_expect_eq(api_key_read_file(f, key, sizeof key, err, sizeof err), TANDEM_ERR_TOOBIG);
    unlink(f);
    cr_expect_eq(api_key_read_file("/nonexistent/key", key, sizeof key, err, sizeof err),
                 TANDEM_ERR_IO);
    cr_expect(strstr(err, "/nonexistent/key"), "%s", err);
}

Test(api_key, the_file_wins_over_the_environment) {
    char buf[API_KEY_MAX], err[256] = "";
    const char *key = "unset";
    setenv("TANDEM_API_KEY", "k-env", 1);
    cr_expect_eq(api_key_resolve(NULL, buf, sizeof buf, &key, err, sizeof err), TANDEM_OK);
    cr_expect_str_eq(key, "k-env");
    const char *f = key_file("k-file\n", 0600);
    cr_expect_eq(api_key_resolve(f, buf, sizeof buf, &key, err, sizeof err), TANDEM_OK);
    cr_expect_str_eq(key, "k-file");
    unlink(f);
    setenv("TANDEM_API_KEY", "", 1);
    cr_expect_eq(api_key_resolve(NULL, buf, sizeof buf, &key, err, sizeof err), TANDEM_OK);
    cr_expect_null(key);
}
