/* err.c: names and messages for tandem_err, generated from TANDEM_ERR_MAP so
 * that adding a code is a one-line change in err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static const char *const messages[] = {
#define TANDEM_ERR_MSG(name, msg) [TANDEM_ERR_##name] = msg,
    TANDEM_ERR_MAP(TANDEM_ERR_MSG)
#undef TANDEM_ERR_MSG
};

static const char *const names[] = {
#define TANDEM_ERR_NAME(name, msg) [TANDEM_ERR_##name] = #name,
    TANDEM_ERR_MAP(TANDEM_ERR_NAME)
#undef TANDEM_ERR_NAME
};

static int known(tandem_err err) {
    return (unsigned)err < (unsigned)TANDEM_ERR_COUNT_;
}

const char *tandem_strerror(tandem_err err) {
    return known(err) ? messages[err] : "unknown error";
}

const char *tandem_errname(tandem_err err) {
    return known(err) ? names[err] : "UNKNOWN";
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

void tandem_errmsg(char *buf, size_t len, const char *fmt, ...) {
    if (!buf || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= len)
        tandem_utf8_trim(buf, len - 1);
}
