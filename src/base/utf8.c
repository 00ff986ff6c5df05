/* utf8.c: UTF-8 validation and replacement of invalid bytes by U+FFFD.
 *
 * Decoding follows RFC 3629: a lead byte gives the length, continuation
 * bytes must follow, and overlong forms, surrogates and code points past
 * U+10FFFF are invalid. Replacement is per byte, so a cut sequence of three
 * bytes becomes three U+FFFD; the copy is at most three times the input.
 * Pure: nothing is allocated here (jstr.c holds the copy), so err.c can
 * use the trim without a circle through mem. */
#include "base/utf8.h"

#include <string.h>

size_t utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    unsigned cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        cp = (cp << 6) | (p[i] & 0x3F);
    static const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0; /* overlong, out of range or a surrogate */
    return len;
}

size_t utf8_sanitize(const char *s, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return o;
}

size_t utf8_bad_line(const unsigned char *p, size_t n) {
    size_t line = 1;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] ? utf8_seq(p + i, n - i) : 0;
        if (k == 0)
            return line;
        line += p[i] == '\n';
        i += k;
    }
    return 0;
}

void tandem_utf8_trim(char *s, size_t len) {
    if (!len)
        return;
    size_t i = len - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    unsigned char lead = (unsigned char)s[i];
    size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (i + need > len)
        s[i] = '\0';
}
