/* units.c: byte counts and durations, formatted and parsed. Binary prefixes (KiB, MiB, GiB) throughout,
 * because VRAM budgets and the engine's own logs are in MiB; parsing accepts
 * "GB" as a GiB too, since nobody sizes a GPU budget in powers of ten. */
#include "base/units.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

char *units_format_bytes(uint64_t bytes, char *out, size_t cap) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    size_t i = 0;
    while (v >= 1024.0 && i + 1 < sizeof unit / sizeof unit[0]) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(out, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(out, cap, "%.1f %s", v, unit[i]);
    return out;
}

tandem_err units_parse_bytes(const char *text, uint64_t *out) {
    static const char *const prefixes = "KMGT";
    char *end;
    errno = 0;
    if (!text || !isdigit((unsigned char)text[0]))
        return TANDEM_ERR_FORMAT;
    double v = strtod(text, &end);
    if (errno || end == text)
        return TANDEM_ERR_FORMAT;
    while (*end == ' ')
        end++;
    double scale = 1;
    if (*end) {
        const char *p = strchr(prefixes, toupper((unsigned char)*end));
        if (!p && strcasecmp(end, "B"))
            return TANDEM_ERR_FORMAT;
        if (p) {
            for (const char *q = prefixes; q <= p; q++)
                scale *= 1024;
            const char *rest = end + 1;
            if (strcasecmp(rest, "") && strcasecmp(rest, "B") && strcasecmp(rest, "iB"))
                return TANDEM_ERR_FORMAT;
        }
    }
    double bytes = v * scale;
    if (bytes >= 18446744073709551615.0)
        return TANDEM_ERR_RANGE;
    *out = (uint64_t)(bytes + 0.5);
    return TANDEM_OK;
}

tandem_err units_parse_listen(const char *text, char *host, size_t cap, uint16_t *port) {
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return TANDEM_ERR_FORMAT;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return TANDEM_ERR_RANGE;
    const char *h = text;
    size_t n = (size_t)(colon - text);
    if (h[0] == '[' && colon[-1] == ']')
        h++, n -= 2;
    if (n == 0 || n >= cap)
        return TANDEM_ERR_FORMAT;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (uint16_t)p;
    return TANDEM_OK;
}

tandem_err units_parse_ms(const char *text, int64_t *out_ms) {
    static const struct {
        const char *suffix;
        double ms;
    } scales[] = {{"", 1}, {"ms", 1}, {"s", 1e3}, {"m", 6e4}, {"h", 3.6e6}, {"d", 8.64e7}};
    char *end;
    errno = 0;
    if (!text || !(isdigit((unsigned char)text[0]) || text[0] == '.'))
        return TANDEM_ERR_FORMAT;
    double x = strtod(text, &end);
    if (end == text || errno || !(x >= 0))
        return TANDEM_ERR_FORMAT;
    for (size_t i = 0; i < sizeof scales / sizeof *scales; i++)
        if (!strcmp(end, scales[i].suffix)) {
            if (x * scales[i].ms > UNITS_MAX_MS)
                return TANDEM_ERR_RANGE;
            *out_ms = (int64_t)(x * scales[i].ms + 0.5);
            return TANDEM_OK;
        }
    return TANDEM_ERR_FORMAT;
}
