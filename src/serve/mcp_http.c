/* mcp_http.c: POST /mcp on the daemon.
 *
 * Design: stateless per POST. Each message gets a fresh protocol session
 * (serve/mcp) with the catalog of the moment and the revision from the
 * MCP-Protocol-Version header, so a reload changes the very next answer and
 * nothing is kept per client but the calls in flight. A call is an
 * exchange: the client's request, the detached request that runs the tool
 * through the api, and, while it streams, a timer that turns the
 * scheduler's status into progress notifications. Exchanges are listed, so
 * that a cancel (by session and id) and mcp_http_free find them.
 *
 * Sessions (the handshake revisions, streamable HTTP from 2025-03-26): the
 * ids initialize hands out are recorded in a bounded table (SESSIONS_MAX,
 * each forgotten after SESSION_IDLE_MS without a request; a new one takes
 * the least recently used slot when all are live, and that client's next
 * request gets 404 and initializes again, as the transport prescribes).
 * Every later request must carry a recorded id: none is 400, an unknown or
 * expired one 404, and DELETE /mcp ends one. A cancel reaches only the calls
 * of the caller's own session and key (the Authorization header): the
 * current revision is stateless, and its calls share the empty session, so
 * there the key is what keeps clients apart. */
#include "serve/mcp_http.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/random.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/host.h"
#include "base/mem.h"
#include "serve/mcp.h"

#define PROGRESS_MS 100
#define SESSION_HEADER "Mcp-Session-Id"
#define DEFAULT_VERSION "2025-03-26" /* the revision a client without the header speaks */
#define SESSIONS_MAX 1024
#define SESSION_IDLE_MS (30 * 60 * 1000)

struct exchange {
    struct mcp_http *h;
    struct http_req *client;   /* the POST /mcp */
    struct http_req *inner;    /* the tool's request, until answered */
    struct mcp_call call;
    char session[MCP_SESSION_ID_MAX + 1];
    char *auth;                /* the call's Authorization header; owned; NULL = none */
    struct event *timer;       /* progress, while streaming */
    struct mcp_progress_state progress;
    bool streaming, cancelled;
    bool stopping;             /* cancelled because the daemon stops */
    struct exchange *next;
};

/* A subscriptions/listen request: a stream held open for list_changed. */
struct listener {
    struct mcp_http *h;
    struct http_req *client;
    json_t *id;
    struct listener *next;
};

struct mcp_http {
    struct mcp_http_env env;
    struct exchange *exchanges;
    struct listener *listeners;
    struct mcp *catalog; /* the tools as last seen, to tell a change */
    struct mcp_sessions *sessions; /* the ids initialize issued */
};

static void stream_msg(struct http_req *r, json_t *msg);

struct mcp_http *mcp_http_new(const struct mcp_http_env *env) {
    struct mcp_http *h = mem_calloc(1, sizeof *h);
    if (h && !(h->sessions = mcp_sessions_new(SESSIONS_MAX, SESSION_IDLE_MS))) {
        mem_free(h);
        return NULL;
    }
    if (h)
        h->env = *env;
    return h;
}

static void exchange_free(struct exchange *x) {
    for (struct exchange **p = &x->h->exchanges; *p; p = &(*p)->next)
        if (*p == x) {
            *p = x->next;
            break;
        }
    if (x->timer)
        event_free(x->timer);
    mcp_call_clear(&x->call);
    mem_free(x->auth);
    mem_free(x);
}

static void listener_free(struct listener *l) {
    for (struct listener **p = &l->h->listeners; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    json_decref(l->id);
    mem_free(l);
}

void mcp_http_end_listeners(struct mcp_http *h) {
    while (h && h->listeners) {
        struct listener *l = h->listeners;
        http_req_on_gone(l->client, NULL, NULL);
        stream_msg(l->client, mcp_listen_close(l->id));
        http_req_stream_end(l->client);
        listener_free(l);
    }
}

void mcp_http_free(struct mcp_http *h) {
    if (!h)
        return;
    mcp_http_end_listeners(h);
    mcp_free(h->catalog);
    mcp_sessions_free(h->sessions);
    while (h->exchanges) {
        struct exchange *x = h->exchanges;
        http_req_on_gone(x->client, NULL, NULL);
        x->cancelled = x->stopping = true;
        if (x->inner)
            http_req_drop(x->inner); /* its answer comes back at once and is dropped */
        else
            exchange_free(x);
    }
    mem_free(h);
}

/* --- answers ------------------------------------------------------------------------------- */

static void reply_msg(struct http_req *r, int status, json_t *msg) {
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    http_req_reply(r, status, "application/json", text ? text : "", text ? strlen(text) : 0);
    free(text);
    json_decref(msg);
}

/* One server-sent event carrying msg (stolen). */
static void stream_msg(struct http_req *r, json_t *msg) {
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    struct evbuffer *b = evbuffer_new();
    if (text && b) {
        evbuffer_add_printf(b, "event: message\ndata: %s\n\n", text);
        http_req_stream_chunk(r, b);
    }
    if (b)
        evbuffer_free(b);
    free(text);
    json_decref(msg);
}

static void on_progress_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct exchange *x = arg;
    json_t *status = x->h->env.status(x->h->env.status_user);
    json_t *msg = mcp_progress_next(&x->progress, x->call.progress_token, status, x->call.models);
    json_decref(status);
    if (msg)
        stream_msg(x->client, msg);
    struct timeval tv = {0, PROGRESS_MS * 1000};
    evtimer_add(x->timer, &tv);
}

/* Ends a cancelled call's POST: with nothing when its client is gone or
 * cancelled it, with an error when the daemon stops. */
static void end_cancelled(struct exchange *x) {
    json_t *why = x->stopping ? mcp_error(x->call.id, MCP_INVALID_REQUEST,
                                          "tandem is stopping: the call was abandoned")
                              : NULL;
    if (x->streaming) {
        if (why)
            stream_msg(x->client, why);
        http_req_stream_end(x->client);
    } else if (why) {
        reply_msg(x->client, 503, why);
    } else {
        http_req_reply(x->client, http_req_gone(x->client) ? 499 : 202, NULL, NULL, 0);
    }
}

/* The tool's request is answered: the client gets the result. */
static void on_inner_reply(void *user, int status, const struct evkeyvalq *headers,
                           const void *body, size_t len) {
    struct exchange *x = user;
    x->inner = NULL;
    if (x->cancelled) {
        end_cancelled(x);
        exchange_free(x);
        return;
    }
    const char *retry = evhttp_find_header(headers, "Retry-After");
    json_t *msg = mcp_call_result(&x->call, status, body, len, retry ? atol(retry) : -1);
    if (x->streaming) {
        stream_msg(x->client, msg);
        http_req_stream_end(x->client);
    } else {
        reply_msg(x->client, 200, msg);
    }
    exchange_free(x);
}

static void on_client_gone(void *arg) {
    struct exchange *x = arg;
    x->cancelled = true;
    if (x->inner)
        http_req_drop(x->inner); /* the api answers 499 at once: on_inner_reply */
}

/* --- calls --------------------------------------------------------------------------------- */

static bool wants_stream(struct http_req *r) {
    const char *accept = http_req_header(r, "Accept");
    return accept && strstr(accept, "text/event-stream");
}

/* Starts x's tool request through the api. */
static void start_inner(struct exchange *x) {
    struct evkeyvalq headers;
    TAILQ_INIT(&headers);
    const char *auth = http_req_header(x->client, "Authorization");
    const char *host = http_req_header(x->client, "Host");
    char deadline[32];
    evhttp_add_header(&headers, "Content-Type", "application/json");
    if (host) /* the api's head check judges the tool's request as it judged the POST */
        evhttp_add_header(&headers, "Host", host);
    if (auth)
        evhttp_add_header(&headers, "Authorization", auth);
    if (x->call.timeout_ms > 0) {
        snprintf(deadline, sizeof deadline, "%ld", x->call.timeout_ms);
        evhttp_add_header(&headers, "X-Tandem-Timeout-Ms", deadline);
    }
    char *body = x->call.body ? json_dumps(x->call.body, JSON_COMPACT) : NULL;
    struct http_detached_params p = {
        .method = x->call.body ? EVHTTP_REQ_POST : EVHTTP_REQ_GET, .uri = x->call.path,
        .headers = &headers, .body = body, .len = body ? strlen(body) : 0,
        .max_body_bytes = UINT64_MAX, /* its arguments came in a POST already held to
                                       * limits.max_body */
        .reply = on_inner_reply, .user = x};
    struct http_req *inner = NULL;
    tandem_err e = http_req_new_detached(&p, &inner);
    evhttp_clear_headers(&headers);
    free(body);
    if (e != TANDEM_OK) {
        const char *why = "the tool's request could not be made (out of memory)";
        reply_msg(x->client, 200, mcp_call_result(&x->call, 0, why, strlen(why), -1));
        exchange_free(x);
        return;
    }
    x->inner = inner;
    x->h->env.handler(inner, x->h->env.handler_user); /* may answer at once */
}

static void start_call(struct mcp_http *h, struct http_req *r, struct mcp_out *out) {
    struct exchange *x = mem_calloc(1, sizeof *x);
    if (!x) {
        const char *why = "out of memory";
        reply_msg(r, 200, mcp_call_result(&out->call, 0, why, strlen(why), -1));
        mcp_call_clear(&out->call);
        return;
    }
    *x = (struct exchange){.h = h, .client = r, .call = out->call, .next = h->exchanges};
    h->exchanges = x;
    snprintf(x->session, sizeof x->session, "%s", http_req_header(r, SESSION_HEADER) ?: "");
    const char *auth = http_req_header(r, "Authorization");
    x->auth = auth ? mem_strdup(auth) : NULL;
    http_req_on_gone(r, on_client_gone, x);
    if (x->call.progress_token && wants_stream(r) &&
        (x->timer = evtimer_new(h->env.base, on_progress_timer, x))) {
        x->streaming = true;
        http_req_add_header(r, "Cache-Control", "no-cache");
        http_req_stream_start(r, 200, "text/event-stream");
        on_progress_timer(-1, 0, x); /* "queued" at once, then every PROGRESS_MS */
    }
    start_inner(x);
}

static bool same_auth(const char *a, const char *b) { return a && b ? !strcmp(a, b) : a == b; }

/* notifications/cancelled: the call with that id in the same session, made
 * with the same key. */
static void cancel(struct mcp_http *h, const char *session, const char *auth, const json_t *id) {
    for (struct exchange *x = h->exchanges; x; x = x->next)
        if (!x->cancelled && !strcmp(x->session, session) && same_auth(x->auth, auth) &&
            json_equal(x->call.id, (json_t *)id)) {
            x->cancelled = true;
            if (x->inner)
                http_req_drop(x->inner);
            return; /* x may be freed */
        }
}

/* --- subscriptions ------------------------------------------------------------------------- */

static void on_listener_gone(void *arg) {
    struct listener *l = arg;
    http_req_reply(l->client, 499, NULL, NULL, 0); /* frees it; nothing is sent */
    listener_free(l);
}

/* Holds r open as a stream for the subscription out.id (taken). Returns the
 * HTTP status. */
static int start_listen(struct mcp_http *h, struct http_req *r, struct mcp_out *out) {
    struct listener *l = wants_stream(r) ? mem_calloc(1, sizeof *l) : NULL;
    if (!l) {
        int status = wants_stream(r) ? 500 : 406;
        reply_msg(r, status, mcp_error(out->id, MCP_INVALID_REQUEST, status == 500 ? "out of memory"
                  : "subscriptions/listen answers as a stream: send Accept: text/event-stream"));
        json_decref(out->msg);
        json_decref(out->id);
        return status;
    }
    *l = (struct listener){.h = h, .client = r, .id = out->id, .next = h->listeners};
    h->listeners = l;
    http_req_on_gone(r, on_listener_gone, l);
    http_req_add_header(r, "Cache-Control", "no-cache");
    http_req_stream_start(r, 200, "text/event-stream");
    stream_msg(r, out->msg);
    return 200;
}

void mcp_http_set_catalog(struct mcp_http *h, const json_t *pipelines, const json_t *models) {
    if (!h->catalog && !(h->catalog = mcp_new()))
        return;
    if (!mcp_set_catalog(h->catalog, pipelines, models))
        return;
    for (struct listener *l = h->listeners; l; l = l->next)
        stream_msg(l->client, mcp_listen_changed(l->id));
}

/* --- POST /mcp ----------------------------------------------------------------------------- */

static void new_session(struct mcp_http *h, struct http_req *r) {
    unsigned char raw[16];
    char id[33];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return;
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(id + 2 * i, 3, "%02x", raw[i]);
    mcp_sessions_add(h->sessions, id, host_now_ms());
    http_req_add_header(r, SESSION_HEADER, id);
}

/* The session rules before a message is read: an id that is sent must be
 * live (404: initialize again), and a handshake-revision message other than
 * initialize must send one (400). DELETE ends the session it names (204).
 * Returns the status answered, or 0 to go on. */
static int check_session(struct mcp_http *h, struct http_req *r, const char *body, size_t len,
                         const char *version) {
    const char *id = http_req_header(r, SESSION_HEADER);
    bool delete = http_req_method(r) == EVHTTP_REQ_DELETE;
    if (id && (delete ? mcp_sessions_end(h->sessions, id, host_now_ms())
                      : mcp_sessions_use(h->sessions, id, host_now_ms()))) {
        if (delete)
            http_req_reply(r, 204, NULL, NULL, 0);
        return delete ? 204 : 0;
    }
    if (id) {
        reply_msg(r, 404, mcp_error(NULL, MCP_INVALID_REQUEST, "unknown or expired "
                  SESSION_HEADER ": send initialize again for a new session"));
        return 404;
    }
    if (delete || mcp_needs_session(body, len, version)) {
        reply_msg(r, 400, mcp_error(NULL, MCP_INVALID_REQUEST, SESSION_HEADER " is required: "
                  "send the id that initialize returned (or speak the stateless 2026-07-28)"));
        return 400;
    }
    return 0;
}

int mcp_http_serve(struct mcp_http *h, struct http_req *r, const char *body, size_t len,
                    const json_t *pipelines, const json_t *models) {
    const char *version = http_req_header(r, "MCP-Protocol-Version");
    bool current = version && !strcmp(version, MCP_MODERN_VERSION);
    char text[400];
    int status = check_session(h, r, body, len, version);
    if (status)
        return status;
    struct mcp *m = mcp_new();
    if (m)
        mcp_set_catalog(m, pipelines, models);
    if (!m || (!current && !mcp_set_version(m, version ? version : DEFAULT_VERSION))) {
        snprintf(text, sizeof text, m ? "MCP-Protocol-Version %.40s is not one tandem speaks "
                                        "(2024-11-05 to 2026-07-28)" : "out of memory", version);
        reply_msg(r, m ? 400 : 500, mcp_error(NULL, MCP_INVALID_REQUEST, text));
        mcp_free(m);
        return m ? 400 : 500;
    }
    struct mcp_out out;
    status = 200;
    mcp_expect_headers(m, version, http_req_header(r, "Mcp-Method"));
    mcp_handle(m, body, len, &out);
    mcp_free(m);
    if (out.action == MCP_SEND) {
        if (out.handshake)
            new_session(h, r);
        status = out.modern ? mcp_http_status(out.msg) : 200;
        reply_msg(r, status, out.msg);
    } else if (out.action == MCP_CALL) {
        start_call(h, r, &out);
    } else if (out.action == MCP_LISTEN) {
        status = start_listen(h, r, &out);
    } else {
        if (out.action == MCP_CANCEL)
            cancel(h, http_req_header(r, SESSION_HEADER) ?: "", http_req_header(r, "Authorization"),
                   out.id);
        json_decref(out.id);
        http_req_reply(r, 202, NULL, NULL, 0);
        status = 202;
    }
    return status;
}
