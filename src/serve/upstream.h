/* upstream.h: the daemon's client of its engines, over their unix sockets.
 *
 * Each engine listens only on a unix socket in tandem's private run folder
 * (engine/engine_rundir), so no other local user can reach it. libevent
 * 2.1's evhttp client cannot connect to a unix socket; this client is
 * libcurl (CURLOPT_UNIX_SOCKET_PATH) on the daemon's event loop
 * (serve/curl_loop). Connections are kept alive and reused per socket by
 * libcurl's connection cache; an answer's body is either buffered or
 * streamed chunk by chunk. */
#ifndef TANDEM_UPSTREAM_H
#define TANDEM_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

struct upstream_client; /* opaque: the connections to every engine */
struct upstream_call;   /* opaque: one request in flight */

struct upstream_ops {
    /* optional: the response status and headers arrived; return false to abort
     * (done is then called with an error) */
    bool (*headers)(void *user, int status, const struct evkeyvalq *headers);
    /* optional: when set, a chunked answer's body is streamed here (data is
     * drained after); an answer with a length is still buffered for done */
    void (*chunk)(void *user, struct evbuffer *data);
    /* the exchange ended: status > 0 and body (NULL when streamed to chunk;
     * borrowed for the call) on success; status 0 and error (borrowed) on
     * failure ("cannot connect to the engine", "connection closed by the
     * engine", "aborted", ...). Called once, from the event loop. */
    void (*done)(void *user, int status, struct evbuffer *body, const char *error);
};

/* Returns a new client on base (borrowed; must outlive the client), NULL on
 * OOM or when libcurl cannot start. */
struct upstream_client *upstream_client_new(struct event_base *base);

/* Cancels every request in flight without callbacks and closes every
 * connection. upstream_client_free(NULL) is a no-op. */
void upstream_client_free(struct upstream_client *c);

/* Sends method uri (the request-target, sent as is: no dot segments are
 * removed) to the engine listening on the unix socket at socket_path
 * (copied), with body[len] (copied; NULL = none) of content_type (NULL =
 * no Content-Type), plus the request headers named in forward
 * (NULL-terminated, copied from from_headers when present). Never sends
 * "Expect: 100-continue". ops (borrowed; must outlive the call) and user
 * get the answer: ops->done is called later, from the event loop, never
 * from inside this call, also when the engine cannot be reached. Returns
 * NULL only on OOM; nothing is called back then. */
struct upstream_call *upstream_start(struct upstream_client *c, const char *socket_path,
                                     enum evhttp_cmd_type method, const char *uri,
                                     const char *content_type, const void *body, size_t len,
                                     const struct evkeyvalq *from_headers,
                                     const char *const *forward, const struct upstream_ops *ops,
                                     void *user);

/* Cancels an exchange in flight: no callback follows, its connection is
 * closed (so the engine sees the hang-up) and u is freed. May be called from
 * any callback of any call, chunk included (the close then happens once
 * that callback has returned). upstream_cancel(NULL) is a no-op. */
void upstream_cancel(struct upstream_call *u);

#endif
