/* cli_opts.c: numeric options and the progress line, shared by the commands.
 *
 * strtoul and strtod do the parsing; the checks around them refuse what they
 * would accept silently: an empty value, trailing text, a sign on an
 * unsigned value, an overflow (errno), and NaN (it fails every range test). */
#include "cli/cli_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_parse_uint(const char *cmd, const char *flag, const char *s, unsigned lo, unsigned hi,
                   unsigned *out) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v < lo || v > hi) {
        fprintf(stderr, "tandem %s: %s %s: expected an integer from %u to %u\n", cmd, flag, s,
                lo, hi);
        return 2;
    }
    *out = (unsigned)v;
    return 0;
}

int cli_parse_double(const char *cmd, const char *flag, const char *s, double lo, double hi,
                     double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "tandem %s: %s %s: expected a number from %g to %g\n", cmd, flag, s, lo,
                hi);
        return 2;
    }
    *out = v;
    return 0;
}

void cli_progress(void *user, size_t done, size_t total, double elapsed_s) {
    const char *label = user;
    double rate = elapsed_s > 0 ? (double)done / elapsed_s : 0;
    char eta[32] = "?";
    if (rate > 0) {
        long s = (long)((double)(total - done) / rate + 0.5);
        snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    fprintf(stderr, "\r\033[K%s: %zu/%zu requests, %.1f/s, ETA %s", label, done, total, rate,
            eta);
    if (done == total)
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
}
