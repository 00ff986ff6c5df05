/* Unit tests for cli_opts: numeric options in and out of range, and the one
 * message every command gives for a bad value. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>

#include "cli/cli_opts.h"

Test(cli_opts, integers_in_range) {
    unsigned v = 7;
    cr_expect_eq(cli_parse_uint("eval", "--repeat", "1", 1, 10, &v), 0);
    cr_expect_eq(v, 1);
    cr_expect_eq(cli_parse_uint("eval", "--repeat", "10", 1, 10, &v), 0);
    cr_expect_eq(v, 10);
    cr_expect_eq(cli_parse_uint("eval", "--seed", "4294967295", 0, 4294967295u, &v), 0);
    cr_expect_eq(v, 4294967295u);
}

Test(cli_opts, bad_integers_are_refused, .init = cr_redirect_stderr) {
    static const char *const bad[] = {"0", "11", "", "3x", "-1", "99999999999999999999999"};
    unsigned v = 7;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(cli_parse_uint("eval", "--repeat", bad[i], 1, 10, &v), 2, "'%s'", bad[i]);
    cr_expect_eq(v, 7, "a refused value leaves the output alone");
    fflush(stderr);
    cr_expect_stderr_eq_str(
        "tandem eval: --repeat 0: expected an integer from 1 to 10\n"
        "tandem eval: --repeat 11: expected an integer from 1 to 10\n"
        "tandem eval: --repeat : expected an integer from 1 to 10\n"
        "tandem eval: --repeat 3x: expected an integer from 1 to 10\n"
        "tandem eval: --repeat -1: expected an integer from 1 to 10\n"
        "tandem eval: --repeat 99999999999999999999999: expected an integer from 1 to 10\n");
}

Test(cli_opts, numbers_in_range) {
    double v = 0;
    cr_expect_eq(cli_parse_double("drift", "--margin", "0.25", 0, 1, &v), 0);
    cr_expect_eq(v, 0.25);
    cr_expect_eq(cli_parse_double("drift", "--margin", "1e-1", 0, 1, &v), 0);
    cr_expect_eq(v, 0.1);
}

Test(cli_opts, bad_numbers_are_refused, .init = cr_redirect_stderr) {
    static const char *const bad[] = {"1.5", "-0.1", "nan", "0.5s", ""};
    double v = 0.75;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(cli_parse_double("drift", "--margin", bad[i], 0, 1, &v), 2, "'%s'", bad[i]);
    cr_expect_eq(v, 0.75);
    fflush(stderr);
    cr_expect_stderr_eq_str("tandem drift: --margin 1.5: expected a number from 0 to 1\n"
                            "tandem drift: --margin -0.1: expected a number from 0 to 1\n"
                            "tandem drift: --margin nan: expected a number from 0 to 1\n"
                            "tandem drift: --margin 0.5s: expected a number from 0 to 1\n"
                            "tandem drift: --margin : expected a number from 0 to 1\n");
}

Test(cli_opts, progress_line_and_its_erasure, .init = cr_redirect_stderr) {
    cli_progress((void *)"eval", 5, 20, 2.5);
    cli_progress((void *)"eval", 20, 20, 10);
    fflush(stderr);
    cr_expect_stderr_eq_str("\r\033[Keval: 5/20 requests, 2.0/s, ETA 0:08"
                            "\r\033[Keval: 20/20 requests, 2.0/s, ETA 0:00\r\033[K");
}
