/* Unit tests for err: the X-macro list, its names and messages, and the
 * optional message buffer convention. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/err.h"

Test(err, codes_are_stable) {
    /* Codes are part of the ABI of logs and exit reports: never renumber. */
    cr_expect_eq(TANDEM_OK, 0);
    cr_expect_eq(TANDEM_ERR_NOMEM, 1);
    cr_expect_eq(TANDEM_ERR_INVAL, 2);
    cr_expect_eq(TANDEM_ERR_FORMAT, 5);
    cr_expect_eq(TANDEM_ERR_ENGINE, 12);
}

Test(err, every_code_has_distinct_name_and_message) {
    for (int i = 0; i < TANDEM_ERR_COUNT_; i++) {
        const char *name = tandem_errname((tandem_err)i);
        const char *msg = tandem_strerror((tandem_err)i);
        cr_assert(name && *name && msg && *msg, "code %d", i);
        for (int j = 0; j < i; j++) {
            cr_expect_str_neq(name, tandem_errname((tandem_err)j));
            cr_expect_str_neq(msg, tandem_strerror((tandem_err)j));
        }
    }
    cr_expect_str_eq(tandem_errname(TANDEM_ERR_NOMEM), "NOMEM");
    cr_expect_str_eq(tandem_strerror(TANDEM_ERR_NOMEM), "out of memory");
}

Test(err, unknown_codes_are_named_not_crashed) {
    cr_expect_str_eq(tandem_strerror((tandem_err)TANDEM_ERR_COUNT_), "unknown error");
    cr_expect_str_eq(tandem_strerror((tandem_err)-1), "unknown error");
    cr_expect_str_eq(tandem_errname((tandem_err)9999), "UNKNOWN");
}

Test(err, errmsg_formats_truncates_and_tolerates_null) {
    char buf[8];
    tandem_errmsg(buf, sizeof buf, "offset %d: %s", 4137, "bad");
    cr_expect_str_eq(buf, "offset ");
    tandem_errmsg(NULL, 10, "x%d", 1); /* no buffer: nothing happens */
    char one[1] = {'z'};
    tandem_errmsg(one, 0, "x"); /* zero length: untouched */
    cr_expect_eq(one[0], 'z');
}
