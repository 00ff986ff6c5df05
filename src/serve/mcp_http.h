/* mcp_http.h: POST /mcp, the MCP's streamable HTTP transport on the daemon
 * (docs/mcp.md).
 *
 * Each POST carries one JSON-RPC message (serve/mcp). A request the protocol
 * answers at once gets application/json; a notification gets 202. A
 * subscriptions/listen request (the current revision) is held open as a
 * stream that carries list_changed after each reload. A tool
 * call runs as a detached request through the api's own handler, so it is
 * routed, scheduled, audited and metered exactly as the same request on its
 * route would be. A call whose client sent a progress token and accepts
 * text/event-stream is answered as a stream: progress notifications (queued,
 * loading, running) while it waits, then its result. A client that hangs up
 * cancels its call; so does notifications/cancelled in the same
 * Mcp-Session-Id with the same key. Sessions (the handshake revisions):
 * initialize hands out an id, which every later request must carry (400
 * without, 404 when unknown or expired); DELETE /mcp ends it; the table is
 * bounded (1024 sessions, 30 min idle). The api checks the request's head
 * (Host, Origin, Content-Type and the API key: api_check_head) and whether
 * mcp.http is on before it hands a request here; a tool call's request
 * carries the POST's Host and Authorization, so the same check admits it. */
#ifndef TANDEM_MCP_HTTP_H
#define TANDEM_MCP_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "serve/http.h"

struct mcp_http_env {
    struct event_base *base;
    http_handler_fn handler;        /* runs a tool call's request (the api's handler) */
    void *handler_user;
    json_t *(*status)(void *user);  /* GET /v1/status's body now (new reference) */
    void *status_user;
};

struct mcp_http; /* opaque */

/* Returns a new transport (free with mcp_http_free), NULL on OOM. env is
 * copied; what it points to is borrowed and must outlive the transport. */
struct mcp_http *mcp_http_new(const struct mcp_http_env *env);

/* Ends every subscriptions/listen stream with its closing result (the
 * daemon stops admitting). NULL is a no-op. */
void mcp_http_end_listeners(struct mcp_http *h);

/* Abandons the calls in flight (their clients' requests are left to the HTTP
 * server, which frees them) and frees h. NULL is a no-op. */
void mcp_http_free(struct mcp_http *h);

/* Tells the subscribers (subscriptions/listen) when the tools built from
 * this catalog (borrowed) differ from the last ones: a reload. */
void mcp_http_set_catalog(struct mcp_http *h, const json_t *pipelines, const json_t *models);

/* Serves POST /mcp (or DELETE /mcp: ends the session) on r, which it takes
 * (answers now or later): body[len] is
 * its message (decoded; borrowed for the call), pipelines and models the
 * catalog (GET /v1/pipelines' and GET /v1/models' bodies, borrowed for the
 * call). Returns the HTTP status it answered with, 200 for a stream or an
 * answer still to come. */
int mcp_http_serve(struct mcp_http *h, struct http_req *r, const char *body, size_t len,
                    const json_t *pipelines, const json_t *models);

#endif
