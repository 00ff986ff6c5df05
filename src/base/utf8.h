/* utf8.h: UTF-8 checks for text from outside (GGUF strings, request
 * bodies) on its way into JSON, which jansson writes only when valid, and
 * the trim that keeps a truncated message valid. */
#ifndef TANDEM_UTF8_H
#define TANDEM_UTF8_H

#include <stddef.h>

/* The length (1 to 4) of the valid UTF-8 sequence at p, with n bytes left;
 * 0 when the bytes there are not one (a stray continuation byte, a cut,
 * overlong or surrogate sequence, a code point past U+10FFFF). */
size_t utf8_seq(const unsigned char *p, size_t n);

/* Writes to out a NUL-terminated copy of s[0..n) in which every byte that
 * does not start a valid sequence is replaced by U+FFFD, as Python's
 * decode(errors="replace") does; NUL bytes are kept. out holds at least
 * 3 * n + 1 bytes. Returns the copy's length. */
size_t utf8_sanitize(const char *s, size_t n, char *out);

/* Returns the 1-based line of the first byte of p[0..n) that is NUL or does
 * not start a valid UTF-8 sequence, or 0 when the whole text is valid: the
 * check a text passes before a parser (libfyaml) that may misbehave on such
 * bytes sees it. */
size_t utf8_bad_line(const unsigned char *p, size_t n);

/* Cuts the NUL-terminated s[0..len) back so that it does not end inside a
 * UTF-8 sequence (for messages truncated to fit a buffer). */
void tandem_utf8_trim(char *s, size_t len);

#endif
