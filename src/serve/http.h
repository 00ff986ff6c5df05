/* http.h: the daemon's HTTP server, on libevent.
 *
 * Server side: one listener; each request is handed to the handler as a
 * struct http_req, which the handler answers later (whole or streamed) and
 * which is freed by that answer. The module enforces what libevent 2.1 does
 * not: a connection limit counted from accept (idle keep-alive connections
 * closed first), a check of each request's head before its body is read
 * (the head hook, which can refuse it: it then never reaches the handler),
 * a total deadline to read a request and a separate idle timeout between
 * requests, a pause in accepting when accept() fails (EMFILE), and the
 * detection of a client that hangs up while its answer is pending (libevent
 * stops reading once a request is in; tandem watches the socket itself).
 * A detached request is the same object without a connection: made from a
 * request line, headers and body, answered into a callback (the HTTP fuzz
 * target drives the router this way). The daemon's client of its engines is
 * serve/upstream. */
#ifndef TANDEM_HTTP_H
#define TANDEM_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/err.h"

/* --- server ------------------------------------------------------------------------------ */

struct http_server; /* opaque */
struct http_req;    /* opaque: one request awaiting its answer */

typedef void (*http_handler_fn)(struct http_req *r, void *user);

/* The size of a request id's buffer, its NUL included: the longest client id kept is 63. */
#define HTTP_REQUEST_ID_MAX 64

/* A request's id into out: the client's x-request-id, else its x-typesafe-request-id, when
 * it is printable ASCII without spaces and at most 63 bytes; else a new one, "req_" + 32
 * random hex digits. headers (borrowed) may be NULL: a new id. Every answer carries it as
 * x-request-id, the server's own refusals included. */
void http_request_id(const struct evkeyvalq *headers, char out[HTTP_REQUEST_ID_MAX]);

/* Called once a request's head (request line and headers) is in, before its body is read:
 * return 0 to go on, else the status to refuse with, having written the JSON body into
 * body[cap]; the server then answers that status itself (Connection: close), reads no body
 * and never calls the handler for that request. method is the request line's (one evhttp
 * knows), target its request-target as sent (still percent-encoded), headers the head's in
 * order; all borrowed for the call. over_limit: the connection is past max_connections and
 * no idle one could make room (the hook should refuse it, 503, which gets Retry-After: 1).
 * A 401 gets WWW-Authenticate: Bearer. A refusal may name its request in
 * id[HTTP_REQUEST_ID_MAX] (a token; "" = none), sent as x-request-id. */
typedef int (*http_head_fn)(void *user, const char *method, const char *target,
                            const struct evkeyvalq *headers, bool over_limit, char *body,
                            size_t cap, char *id);

struct http_server_params {
    const char *host;           /* address to bind, e.g. "127.0.0.1" */
    uint16_t port;              /* 0 = any free port (see http_server_port) */
    uint64_t max_body_bytes;    /* bodies are read up to a hard cap of max(8 x this, 8 MiB);
                                 * the handler sees http_req_body_too_big past this */
    int64_t header_timeout_ms;  /* total time to read a new connection's first request */
    int64_t idle_timeout_ms;    /* between requests on a kept-alive connection, where the
                                 * next one must be in within this + header_timeout_ms */
    uint32_t max_connections;   /* open connections, counted from accept; past it the oldest
                                 * idle keep-alive one is closed, and when none is idle the
                                 * new one is answered 503 once its head is in */
    http_head_fn head;          /* checks each head before its body is read; NULL = none */
    void *head_user;            /* head's first argument */
};

/* Binds and starts serving on base (borrowed). Every request goes to fn.
 * Returns TANDEM_ERR_IO when the address cannot be bound (err says which
 * and why), TANDEM_ERR_NOMEM. */
tandem_err http_server_new(struct event_base *base, const struct http_server_params *p,
                           http_handler_fn fn, void *user, struct http_server **out, char *err,
                           size_t errlen);

/* Closes the listener and every connection; requests still pending are
 * freed (their handlers must not answer them afterwards: free the server
 * last). http_server_free(NULL) is a no-op. */
void http_server_free(struct http_server *s);

/* The port actually bound. */
uint16_t http_server_port(const struct http_server *s);

/* Stops accepting new connections (drain); existing ones finish. */
void http_server_stop_accepting(struct http_server *s);

/* Updates the limits (a reload): body size, timeouts, connection limit, and
 * the head hook (p's replaces the old one). */
void http_server_set_limits(struct http_server *s, const struct http_server_params *p);

/* Requests received and not yet answered. */
uint32_t http_server_pending(const struct http_server *s);

/* --- one request ---------------------------------------------------------------------- */

/* The request's method, as libevent's enum and as its name ("GET", ...; "OTHER" for one
 * libevent's enum does not name). */
enum evhttp_cmd_type http_req_method(const struct http_req *r);
const char *http_req_method_name(const struct http_req *r);
/* The path without the query string, decoded; never NULL. */
const char *http_req_path(const struct http_req *r);
/* The full URI as received (path and query). */
const char *http_req_uri(const struct http_req *r);
/* A request header (case-insensitive name), or NULL. Borrowed. */
const char *http_req_header(const struct http_req *r, const char *name);
/* Every request header, in order (an empty list once its connection is
 * gone). Borrowed. */
const struct evkeyvalq *http_req_headers(const struct http_req *r);
/* The body, NUL-terminated for convenience; *len gets its length. Borrowed. */
const char *http_req_body(struct http_req *r, size_t *len);
/* Whether the body exceeded max_body_bytes. */
bool http_req_body_too_big(const struct http_req *r);
/* Whether the client has gone (its answer will be discarded). */
bool http_req_gone(const struct http_req *r);

/* Calls fn(arg) once if the client hangs up before the answer is complete. */
void http_req_on_gone(struct http_req *r, void (*fn)(void *arg), void *arg);

/* Adds a response header (copied). */
void http_req_add_header(struct http_req *r, const char *name, const char *value);

/* Answers with status and body[len] (copied) of content_type; frees r. */
void http_req_reply(struct http_req *r, int status, const char *content_type, const void *body,
                    size_t len);

/* Streaming: starts the answer (chunked), sends chunks (data is drained),
 * and ends it, which frees r. */
void http_req_stream_start(struct http_req *r, int status, const char *content_type);
void http_req_stream_chunk(struct http_req *r, struct evbuffer *data);
void http_req_stream_end(struct http_req *r);

/* Bytes of a started stream queued for the client and not yet taken by its
 * socket: what a client that stops reading makes grow. 0 for a detached
 * request. */
size_t http_req_stream_backlog(const struct http_req *r);

/* Closes r's connection now, discarding what is unsent (a subscriber too slow
 * to keep up). The on_gone callback runs, from inside this call; r itself
 * stays the handler's to answer (the answer frees it and sends nothing). A
 * detached request only becomes gone. */
void http_req_drop(struct http_req *r);

/* --- a request without a connection ---------------------------------------------------- */

/* Receives a detached request's answer, once: status, its headers (Content-Type
 * among them) and body[len], all borrowed for the call. */
typedef void (*http_reply_fn)(void *user, int status, const struct evkeyvalq *headers,
                              const void *body, size_t len);

struct http_detached_params {
    enum evhttp_cmd_type method;
    const char *uri;                 /* the request-target, as on the request line */
    const struct evkeyvalq *headers; /* the request's headers (copied); NULL = none */
    const void *body;                /* body[len] (copied); may be NULL when len is 0 */
    size_t len;
    uint64_t max_body_bytes;         /* as the server's: a longer body is too big
                                      * (http_req_body_too_big) */
    http_reply_fn reply;             /* gets the answer */
    void *user;
};

/* Makes a request that no connection carries, for a handler to answer as it
 * answers the server's (tests/fuzz/fuzz_http.c drives the api this way, with
 * no socket). Every http_req_ function behaves as for the request libevent
 * would have parsed from the same request line, headers and body, except
 * that the answer goes to p->reply (a stream's chunks joined, at its end)
 * instead of a socket, that no head hook judges it, and that it is never
 * gone. Its answer frees it, as on the server. On TANDEM_OK *out is
 * the request; else *out is NULL: TANDEM_ERR_FORMAT when p->uri is not a
 * request-target libevent accepts (it answers 400 before any handler) or a
 * header is one evhttp_add_header refuses (a line break in it),
 * TANDEM_ERR_NOMEM. */
tandem_err http_req_new_detached(const struct http_detached_params *p, struct http_req **out);

#endif
