/* Unit tests for utf8 and jstr: sequence lengths at the edges of RFC 3629,
 * the U+FFFD replacement, one per byte that does not start a valid sequence,
 * and the lossy JSON string built on it. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/jstr.h"
#include "base/mem.h"
#include "base/utf8.h"

static size_t seq(const char *s) { return utf8_seq((const unsigned char *)s, strlen(s)); }

Test(utf8, sequence_lengths) {
    cr_expect_eq(seq("a"), 1);
    cr_expect_eq(seq("\xc3\xa9"), 2);
    cr_expect_eq(seq("\xe8\xb7\xaf"), 3);
    cr_expect_eq(seq("\xf0\x9f\x98\x80"), 4);
    cr_expect_eq(seq("\xf4\x8f\xbf\xbf"), 4); /* U+10FFFF */
}

Test(utf8, invalid_sequences) {
    cr_expect_eq(seq("\xff"), 0);
    cr_expect_eq(seq("\x80"), 0);             /* a stray continuation byte */
    cr_expect_eq(seq("\xc3"), 0);             /* cut */
    cr_expect_eq(seq("\xe2\x98"), 0);         /* cut */
    cr_expect_eq(seq("\xc0\xaf"), 0);         /* overlong '/' */
    cr_expect_eq(seq("\xed\xa0\x80"), 0);     /* a surrogate */
    cr_expect_eq(seq("\xf4\x90\x80\x80"), 0); /* past U+10FFFF */
}

Test(utf8, sanitize_replaces_each_bad_byte) {
    const char in[] = "ok \xff caf\xc3\xa9 \xe2\x98";
    char out[3 * sizeof in];
    size_t len = utf8_sanitize(in, sizeof in - 1, out);
    /* per byte: the cut \xe2\x98 becomes two (Python's decoder would give one) */
    const char want[] = "ok \xef\xbf\xbd caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd";
    cr_expect_eq(len, sizeof want - 1);
    cr_expect_eq(memcmp(out, want, sizeof want), 0);
}

Test(utf8, sanitize_keeps_nul_and_valid_text) {
    const char in[] = "a\0b\xc3\xa9";
    char out[3 * sizeof in];
    size_t len = utf8_sanitize(in, sizeof in - 1, out);
    cr_expect_eq(len, sizeof in - 1);
    cr_expect_eq(memcmp(out, in, sizeof in), 0);
}

Test(utf8, lossy_json_string) {
    json_t *valid = jstr_lossy("caf\xc3\xa9", 5);
    json_t *bad = jstr_lossy("a\xff", 2);
    cr_assert_not_null(valid);
    cr_assert_not_null(bad);
    cr_expect_str_eq(json_string_value(valid), "caf\xc3\xa9");
    cr_expect_str_eq(json_string_value(bad), "a\xef\xbf\xbd");
    json_decref(valid);
    json_decref(bad);
}

Test(utf8, lossy_allocation_failure) {
    mem_fail_after(0);
    json_t *j = jstr_lossy("\xff", 1);
    mem_fail_after(-1);
    cr_expect_null(j);
}

Test(utf8, bad_line_names_the_first_invalid_byte) {
    static const char ok[] = "a: 1\nb: \xc3\xbc\n";
    cr_assert_eq(utf8_bad_line((const unsigned char *)ok, sizeof ok - 1), 0);
    static const char bad[] = "a\nb\n%\xf0\xaf\xbf&";
    cr_assert_eq(utf8_bad_line((const unsigned char *)bad, sizeof bad - 1), 3);
    static const char nul[] = "a\0b";
    cr_assert_eq(utf8_bad_line((const unsigned char *)nul, sizeof nul - 1), 1);
    static const char cut[] = "x\n\n\xe2\x82";
    cr_assert_eq(utf8_bad_line((const unsigned char *)cut, sizeof cut - 1), 3);
}

/* tandem_utf8_trim(s, len): s[0..len) is a message cut to fit; a sequence it
 * cuts is dropped, whole ones are kept. */
Test(utf8, trim_drops_a_cut_sequence) {
    static const char text[] = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\xA6\x86"; /* a é € 🦆 */
    static const size_t kept[] = {0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10};
    for (size_t len = 0; len < sizeof kept / sizeof *kept; len++) {
        char s[sizeof text];
        memcpy(s, text, len);
        s[len] = '\0';
        tandem_utf8_trim(s, len);
        cr_expect_eq(strlen(s), kept[len], "cut at %zu", len);
        cr_expect_eq(utf8_bad_line((const unsigned char *)s, strlen(s)), 0, "cut at %zu", len);
    }
}
