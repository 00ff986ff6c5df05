/* units.h: human-readable quantities for tandem's tables and messages. */
#ifndef TANDEM_UNITS_H
#define TANDEM_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Formats bytes in binary units with one decimal ("93.8 MiB", "512 B") into
 * out[cap]; truncates to fit. Returns out, for use inside printf arguments. */
char *units_format_bytes(uint64_t bytes, char *out, size_t cap);

/* Parses a size such as "6GiB", "512MiB", "6G", "1.5 GiB" or "4096" (bytes)
 * into *out (output). Suffixes are binary whatever their spelling (K, KB,
 * KiB = 1024; M, G, T likewise), case-insensitive, with optional space.
 * Returns TANDEM_ERR_FORMAT for anything else, TANDEM_ERR_RANGE on overflow. */
tandem_err units_parse_bytes(const char *text, uint64_t *out);

/* The longest duration units_parse_ms() accepts: 1e12 ms, about 31 years. */
#define UNITS_MAX_MS 1e12

/* Parses a duration such as "250ms", "30s", "5m", "1h", "7d", "1.5h" or "400"
 * (milliseconds) into *out_ms (output), rounded to the millisecond. Returns
 * TANDEM_ERR_FORMAT for anything else (a negative number, an unknown suffix),
 * TANDEM_ERR_RANGE past UNITS_MAX_MS. */
tandem_err units_parse_ms(const char *text, int64_t *out_ms);

/* Parses "host:port" ("[v6]:port" too) into host[cap] and *port (0 to
 * 65535; 0 = any free port). Returns TANDEM_ERR_FORMAT (no colon, no host,
 * too long) or TANDEM_ERR_RANGE (port out of range). */
tandem_err units_parse_listen(const char *text, char *host, size_t cap, uint16_t *port);

#endif
