/* Unit tests for cache: the root follows TANDEM_CACHE, then XDG_CACHE_HOME,
 * then HOME, the same rule as scripts/lib.sh. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/cache.h"

static void clear_env(void) {
    unsetenv("TANDEM_CACHE");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
}

Test(cache, precedence_is_tandem_then_xdg_then_home, .init = clear_env) {
    char out[256];
    setenv("HOME", "/home/u", 1);
    cr_assert_eq(cache_path(out, sizeof out, "models"), TANDEM_OK);
    cr_expect_str_eq(out, "/home/u/.cache/tandem/models");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    cr_assert_eq(cache_path(out, sizeof out, "models"), TANDEM_OK);
    cr_expect_str_eq(out, "/xdg/tandem/models");
    setenv("TANDEM_CACHE", "/t", 1);
    cr_assert_eq(cache_path(out, sizeof out, NULL), TANDEM_OK);
    cr_expect_str_eq(out, "/t");
}

Test(cache, empty_variables_count_as_unset, .init = clear_env) {
    char out[256];
    setenv("XDG_CACHE_HOME", "", 1);
    setenv("HOME", "/h", 1);
    cr_assert_eq(cache_path(out, sizeof out, ""), TANDEM_OK);
    cr_expect_str_eq(out, "/h/.cache/tandem");
}

Test(cache, no_home_and_too_long, .init = clear_env) {
    char out[16];
    cr_expect_eq(cache_path(out, sizeof out, "x"), TANDEM_ERR_NOTFOUND);
    setenv("HOME", "/a/rather/long/home", 1);
    cr_expect_eq(cache_path(out, sizeof out, "models"), TANDEM_ERR_TOOBIG);
    cr_expect_str_eq(out, "");
}
