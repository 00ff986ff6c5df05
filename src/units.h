/* units.h: human-readable quantities for tandem's tables and messages. */
#ifndef TANDEM_UNITS_H
#define TANDEM_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* Formats bytes in binary units with one decimal ("93.8 MiB", "512 B") into
 * out[cap]; truncates to fit. Returns out, for use inside printf arguments. */
char *units_format_bytes(uint64_t bytes, char *out, size_t cap);

#endif
