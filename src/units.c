/* units.c: formatting of byte counts. Binary prefixes (KiB, MiB, GiB) throughout,
 * because VRAM budgets and the engine's own logs are in MiB. */
#include "units.h"

#include <stdio.h>

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
