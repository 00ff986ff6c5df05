/* Unit tests for units: byte formatting at unit boundaries. */
#include <criterion/criterion.h>

#include "base/units.h"

Test(units, formats_binary_units) {
    char b[32];
    cr_expect_str_eq(units_format_bytes(0, b, sizeof b), "0 B");
    cr_expect_str_eq(units_format_bytes(1023, b, sizeof b), "1023 B");
    cr_expect_str_eq(units_format_bytes(1024, b, sizeof b), "1.0 KiB");
    cr_expect_str_eq(units_format_bytes(98362432, b, sizeof b), "93.8 MiB");
    cr_expect_str_eq(units_format_bytes(6ULL << 30, b, sizeof b), "6.0 GiB");
    cr_expect_str_eq(units_format_bytes(UINT64_MAX, b, sizeof b), "16.0 EiB");
}

Test(units, truncates_to_the_buffer) {
    char b[4];
    cr_expect_str_eq(units_format_bytes(6ULL << 30, b, sizeof b), "6.0");
}

Test(units, parses_sizes) {
    uint64_t v = 0;
    cr_expect_eq(units_parse_bytes("6GiB", &v), TANDEM_OK);
    cr_expect_eq(v, 6ULL << 30);
    cr_expect_eq(units_parse_bytes("512MiB", &v), TANDEM_OK);
    cr_expect_eq(v, 512ULL << 20);
    cr_expect_eq(units_parse_bytes("6G", &v), TANDEM_OK);
    cr_expect_eq(v, 6ULL << 30);
    cr_expect_eq(units_parse_bytes("1.5 gb", &v), TANDEM_OK);
    cr_expect_eq(v, 3ULL << 29);
    cr_expect_eq(units_parse_bytes("4096", &v), TANDEM_OK);
    cr_expect_eq(v, 4096);
    cr_expect_eq(units_parse_bytes("10B", &v), TANDEM_OK);
    cr_expect_eq(v, 10);
}

Test(units, rejects_bad_sizes) {
    uint64_t v = 7;
    const char *bad[] = {"", "GiB", "-1G", "6 GiBs", "6X", "6Gx", "1e30T", NULL};
    for (int i = 0; bad[i]; i++)
        cr_expect_neq(units_parse_bytes(bad[i], &v), TANDEM_OK, "accepted '%s'", bad[i]);
    cr_expect_eq(v, 7);
}
