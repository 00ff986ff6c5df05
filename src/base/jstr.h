/* jstr.h: JSON strings from outside text (GGUF strings, request bodies,
 * engine messages) that may not be valid UTF-8. */
#ifndef TANDEM_JSTR_H
#define TANDEM_JSTR_H

#include <jansson.h>
#include <stddef.h>

/* A new JSON string of s[0..n): the text itself when it is valid UTF-8,
 * otherwise a copy in which each byte that does not start a valid sequence
 * is U+FFFD (utf8_sanitize). NUL bytes are kept. The caller owns the
 * reference. NULL on allocation failure. */
json_t *jstr_lossy(const char *s, size_t n);

#endif
