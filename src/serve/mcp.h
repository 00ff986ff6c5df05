/* mcp.h: the Model Context Protocol (MCP) for agents: tandem's models and
 * pipelines as tools (docs/mcp.md).
 *
 * This is the protocol alone, with no transport and no I/O: a message in,
 * what to do about it out. `tandem mcp` carries it on stdio and the daemon on
 * POST /mcp; both run a tool call as one request to tandem's own HTTP API and
 * give the answer back here to be made a tool result, so that a tool does
 * exactly what the route does.
 *
 * Tools come from the daemon's catalog (GET /v1/pipelines and GET
 * /v1/models): decide_<pipeline> per pipeline, systemone for any decision
 * model, and status. Two eras of the protocol are spoken:
 * - the current, stateless revision MCP_MODERN_VERSION (2026-07-28): each
 *   request carries its revision in params._meta, server/discover replaces
 *   the handshake, and list_changed is delivered on a subscriptions/listen
 *   request;
 * - the handshake revisions MCP_PROTOCOL_VERSIONS (initialize, then
 *   notifications/initialized), for clients that do not speak the current
 *   one.
 * A session that started in one era stays in it. An mcp is not thread-safe:
 * callers on several threads lock. */
#ifndef TANDEM_MCP_H
#define TANDEM_MCP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The revisions the handshake accepts, newest first, NULL-terminated. */
extern const char *const MCP_PROTOCOL_VERSIONS[];

/* The current revision: stateless, negotiated per request. */
#define MCP_MODERN_VERSION "2026-07-28"

/* JSON-RPC error codes. */
enum {
    MCP_PARSE_ERROR = -32700,
    MCP_INVALID_REQUEST = -32600,
    MCP_METHOD_NOT_FOUND = -32601,
    MCP_INVALID_PARAMS = -32602,
    MCP_HEADER_MISMATCH = -32020,  /* an HTTP header disagrees with the body */
    MCP_UNSUPPORTED_VERSION = -32022,
};

enum mcp_tool_kind { MCP_TOOL_PIPELINE, MCP_TOOL_SYSTEMONE, MCP_TOOL_STATUS, MCP_TOOL_FEEDBACK };

/* A tool call to run: one request to tandem's HTTP API. */
struct mcp_call {
    json_t *id;              /* the JSON-RPC id, echoed in the result */
    json_t *progress_token;  /* the client's, or NULL: no progress wanted */
    enum mcp_tool_kind kind;
    char tool[160];          /* the tool's name */
    char version[16];        /* the revision the result is shaped for */
    const char *method;      /* "POST" or "GET" (static) */
    char path[200];          /* the route, e.g. "/v1/pipelines/decide" */
    json_t *body;            /* the request body; NULL for a GET */
    long timeout_ms;         /* the call's deadline (X-Tandem-Timeout-Ms); 0 = the daemon's */
    json_t *models;          /* names of the models the call needs, for progress */
};

/* Releases what c holds (id, token, body, models) and zeroes it. */
void mcp_call_clear(struct mcp_call *c);

/* What the caller does with a message. */
enum mcp_action {
    MCP_NOTHING, /* a notification or a response: nothing to send */
    MCP_SEND,    /* send out.msg, the response */
    MCP_CALL,    /* run out.call, then send mcp_call_result(...) */
    MCP_CANCEL,  /* cancel the call (or end the subscription) whose id is out.id; send
                  * nothing for it */
    MCP_LISTEN,  /* send out.msg, the acknowledgement, and keep the subscription out.id:
                  * mcp_listen_changed on each tool list change, mcp_listen_close at
                  * the end */
};

struct mcp_out {
    enum mcp_action action;
    json_t *msg;          /* MCP_SEND, MCP_LISTEN: the caller owns it */
    struct mcp_call call; /* MCP_CALL: the caller owns it (mcp_call_clear) */
    json_t *id;           /* MCP_CANCEL, MCP_LISTEN: the caller owns it */
    bool modern;          /* the message was a request of the current revision (HTTP
                           * answers its errors with a status: mcp_http_status) */
    bool handshake;       /* MCP_SEND: msg accepts an initialize (a handshake began) */
};

struct mcp; /* opaque: one client's session */

/* Returns a new session with no tools but status (caller frees with
 * mcp_free), NULL on OOM. */
struct mcp *mcp_new(void);

/* Frees m. NULL is a no-op. */
void mcp_free(struct mcp *m);

/* Builds the tools from the daemon's catalog: pipelines is GET /v1/pipelines'
 * body, models GET /v1/models' (both borrowed; NULL or a wrong shape counts
 * as empty). Returns true when the tool list changed since the last call. */
bool mcp_set_catalog(struct mcp *m, const json_t *pipelines, const json_t *models);

/* Whether the client has finished the handshake (initialize, then
 * notifications/initialized): only then is list_changed worth sending. */
bool mcp_initialized(const struct mcp *m);

/* Sets the revision for a client that skipped the handshake (an HTTP client
 * names it in MCP-Protocol-Version). Returns false, changing nothing, for a
 * revision not in MCP_PROTOCOL_VERSIONS. */
bool mcp_set_version(struct mcp *m, const char *version);

/* The HTTP headers MCP-Protocol-Version and Mcp-Method of the message about
 * to be handled (copied; NULL = absent): a request of the current revision
 * must agree with them (else -32020). Stdio sets none. */
void mcp_expect_headers(struct mcp *m, const char *version, const char *method);

/* Handles one message, msg[len] (one line of stdio, one POST body). On return
 * *out says what to do; every message gets an out. A malformed message,
 * a batch, an unknown method, an unknown tool and bad parameters are answered
 * with a JSON-RPC error naming what was wrong. Arguments that break a route's
 * contract are left to the route, whose 400 becomes the tool's error. */
void mcp_handle(struct mcp *m, const char *msg, size_t len, struct mcp_out *out);

/* The response for call, given the route's answer: status (0 = no answer;
 * then body is the transport's error text), body[len], and Retry-After in
 * seconds (-1 = none). A 2xx becomes the tool's result: structuredContent and
 * a one-line summary; anything else a result with isError and a message an
 * agent can act on (which argument, which deadline, how long to wait).
 * Returns a new message (caller owns), NULL on OOM. */
json_t *mcp_call_result(const struct mcp_call *call, int status, const char *body, size_t len,
                        long retry_after_s);

/* A notifications/progress message for token: progress (strictly increasing
 * per token) and message. Returns a new message (caller owns). */
json_t *mcp_progress(const json_t *token, unsigned progress, const char *message);

/* The phase of a call that needs models (names) according to the daemon's
 * status (GET /v1/status's body): "loading" while one of them loads,
 * "running" while one runs a request, else "queued"; detail[cap] gets a
 * line for the agent ("loading decider: reading weights"). */
const char *mcp_phase(const json_t *status, const json_t *models, char *detail, size_t cap);

/* Where one call's progress reports stand. Start zeroed. */
struct mcp_progress_state {
    char phase[160]; /* the last message sent; "" before the first */
    unsigned sent;   /* messages sent */
};

/* The call's phase in status (mcp_phase; NULL status = "queued") as a
 * notifications/progress message for token, or NULL when the message is the
 * one *st says was sent last. On a message, *st records it. Returns a new
 * message (caller owns). */
json_t *mcp_progress_next(struct mcp_progress_state *st, const json_t *token,
                          const json_t *status, const json_t *models);

/* notifications/tools/list_changed. Returns a new message (caller owns). */
json_t *mcp_list_changed(void);

/* The same for the subscription id (a subscriptions/listen request's id,
 * borrowed), stamped with it. Returns a new message (caller owns). */
json_t *mcp_listen_changed(const json_t *id);

/* The response that ends the subscription id (borrowed). Returns a new
 * message (caller owns). */
json_t *mcp_listen_close(const json_t *id);

/* The HTTP status for an answer of the current revision: 200 for a result,
 * 404 for an unknown method, 400 for the other errors. */
int mcp_http_status(const json_t *msg);

/* A JSON-RPC error response with id (borrowed; NULL = null), for the
 * transport's own errors (a message too long to read). Caller owns it. */
json_t *mcp_error(const json_t *id, int code, const char *message);

/* --- sessions ------------------------------------------------------------
 * Over HTTP, the handshake revisions (2025-03-26 on) tie a client's messages
 * together with the Mcp-Session-Id that initialize hands out. The transport
 * records the ids it issued here and refuses the rest; the current revision
 * is stateless and has none. */

#define MCP_SESSION_ID_MAX 64 /* the longest id recorded */

/* Whether the message msg[len] (borrowed; version: the MCP-Protocol-Version
 * header, NULL = none) must carry a session: a handshake-revision message
 * other than initialize. False for the current revision, for initialize and
 * server/discover, and for what is not a JSON-RPC message with a method
 * (the protocol answers that itself). */
bool mcp_needs_session(const char *msg, size_t len, const char *version);

struct mcp_sessions; /* opaque: a bounded table of issued ids */

/* Returns a table of at most cap sessions, each forgotten after idle_ms
 * without a request (free with mcp_sessions_free), NULL on OOM or cap 0. */
struct mcp_sessions *mcp_sessions_new(size_t cap, int64_t idle_ms);
void mcp_sessions_free(struct mcp_sessions *s);

/* Records id (copied; at most MCP_SESSION_ID_MAX bytes) as issued at now_ms,
 * in a free or expired slot, else in place of the least recently used. */
void mcp_sessions_add(struct mcp_sessions *s, const char *id, int64_t now_ms);

/* Whether id (NULL = none) is a live session; if so, it was used at now_ms. */
bool mcp_sessions_use(struct mcp_sessions *s, const char *id, int64_t now_ms);

/* Forgets the live session id (DELETE /mcp). Returns whether there was one. */
bool mcp_sessions_end(struct mcp_sessions *s, const char *id, int64_t now_ms);

#endif
