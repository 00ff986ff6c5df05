/* http_head.h: a strict parser of one HTTP/1.x request head (the request
 * line and the header lines, up to the empty line), for the server's check
 * of a request before its body is read (http.c).
 *
 * Lines end where libevent's evhttp ends them (LF, optionally after CR), so
 * that the head seen here is the one evhttp parses. The parser is stricter
 * than evhttp: it takes what evhttp would read the same way and refuses the
 * rest, so a head both accept has the same method, target and headers in
 * both. Refused: a request line other than "METHOD SP target SP HTTP/1.0|1"
 * (single spaces, a method evhttp knows, a target without spaces or control
 * bytes that evhttp's URI parser takes), a header name that is not a token,
 * a folded (continuation) line, and any control byte (NUL included) but a
 * tab in a value. A value is taken as evhttp takes it: leading spaces and
 * trailing spaces and tabs removed. Pure; tests/fuzz/fuzz_head.c fuzzes it. */
#ifndef TANDEM_HTTP_HEAD_H
#define TANDEM_HTTP_HEAD_H

#include <stddef.h>

#include <event2/keyvalq_struct.h>

#include "base/err.h"

/* One parsed head. Caller-allocated: http_head_parse fills it and
 * http_head_deinit releases what it holds. */
struct http_head {
    const char *method;       /* static: "GET", "POST", ...; NULL for an unknown one */
    char *target;             /* the request-target as sent (owned) */
    int minor;                /* HTTP/1.minor: 0 or 1 */
    struct evkeyvalq headers; /* in the order sent, duplicates kept */
};

/* Where the head at the start of buf[len] ends: the offset just past the
 * empty line that closes it, or 0 while that line is not in yet. *scan
 * (start it at 0, keep it between calls on the same growing buffer) is
 * where the next call resumes, so a head read in many pieces is scanned
 * once. */
size_t http_head_end(const char *buf, size_t len, size_t *scan);

/* Parses head[len], a whole head as http_head_end delimits it (the empty
 * line included), into *out, which is always initialised (release it with
 * http_head_deinit, whatever the result). Returns TANDEM_OK;
 * TANDEM_ERR_UNSUPPORTED for a method evhttp does not know (a token: answer 501) in a head
 * that is otherwise good, whose target and headers are then in *out (method NULL), so
 * that the refusal can echo the client's x-request-id; TANDEM_ERR_FORMAT for anything
 * else refused (answer 400), which an unknown method does not hide; TANDEM_ERR_NOMEM.
 * err[errlen] (optional) says what was wrong. */
tandem_err http_head_parse(const char *head, size_t len, struct http_head *out, char *err,
                           size_t errlen);

/* Releases what h holds (not h itself). Safe on a zeroed or deinitialised h. */
void http_head_deinit(struct http_head *h);

#endif
