/* err.c: names and messages for tandem_err, generated from TANDEM_ERR_MAP so
 * that adding a code is a one-line change in err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "base/utf8.h"

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

void tandem_verrmsg(char *buf, size_t len, const char *fmt, va_list ap) {
    if (!buf || !len)
        return;
    int n = vsnprintf(buf, len, fmt, ap);
    if (n >= 0 && (size_t)n >= len)
        tandem_utf8_trim(buf, len - 1);
}

void tandem_errmsg(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tandem_verrmsg(buf, len, fmt, ap);
    va_end(ap);
}
