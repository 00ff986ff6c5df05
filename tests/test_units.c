/* Unit tests for units: byte formatting at unit boundaries. */
#include <criterion/criterion.h>

#include "units.h"

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
