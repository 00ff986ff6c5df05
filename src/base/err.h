/* err.h: the project-wide error codes.
 *
 * Every tandem function that can fail returns a tandem_err; results travel
 * through out-parameters. Codes come from one X-macro list so that the enum,
 * tandem_strerror() and tandem_errname() can never disagree.
 * Rule: only append to TANDEM_ERR_MAP; never reorder or renumber. */
#ifndef TANDEM_ERR_H
#define TANDEM_ERR_H

#include <stdarg.h>
#include <stddef.h>

#define TANDEM_ERR_MAP(X)                                            \
    X(OK, "success")                                                 \
    X(NOMEM, "out of memory")                                        \
    X(INVAL, "invalid argument")                                     \
    X(IO, "input/output error")                                      \
    X(NOTFOUND, "not found")                                         \
    X(FORMAT, "malformed input")                                     \
    X(RANGE, "value out of range")                                   \
    X(TOOBIG, "too large")                                           \
    X(UNSUPPORTED, "not supported")                                  \
    X(TIMEOUT, "timed out")                                          \
    X(SPAWN, "could not start a child process")                      \
    X(CHILD, "child process failed")                                 \
    X(ENGINE, "engine is unusable")                                  \
    X(TYPE, "wrong type")                                            \
    X(HTTP, "HTTP request failed")                                   \
    X(REFUSED, "connection refused")                                 \
    X(CANCELLED, "cancelled")

typedef enum {
#define TANDEM_ERR_ENUM(name, msg) TANDEM_ERR_##name,
    TANDEM_ERR_MAP(TANDEM_ERR_ENUM)
#undef TANDEM_ERR_ENUM
    TANDEM_ERR_COUNT_ /* not a code: the number of codes */
} tandem_err;

#define TANDEM_OK TANDEM_ERR_OK

/* Returns a static, human-readable description of err ("out of memory").
 * Unknown values give "unknown error". Never returns NULL. */
const char *tandem_strerror(tandem_err err);

/* Returns the static symbolic name of err without prefix ("NOMEM").
 * Unknown values give "UNKNOWN". Never returns NULL. */
const char *tandem_errname(tandem_err err);

/* Formats a message into the optional caller-owned buffer buf[len], the
 * convention for detail beyond the code: does nothing when buf is NULL or len
 * is 0, truncates to fit otherwise (never inside a UTF-8 sequence). */
void tandem_errmsg(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* tandem_errmsg() with its arguments in ap (which it consumes, as vsnprintf
 * does), for functions that format their own messages. */
void tandem_verrmsg(char *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
