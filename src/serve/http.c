/* http.c: libevent's evhttp, with what the daemon needs on top.
 *
 * Server: evhttp reads a whole request and calls us; we wrap it in an
 * http_req that lives until the answer. Connections are tracked (a list;
 * the limit is small) through libevent's close callback, which is also how
 * a request learns its connection died. libevent 2.1 stops reading a
 * connection once a request is in, so a client that hangs up while waiting
 * is detected by a read watcher of our own on the socket (a zero-byte peek
 * means the peer closed); the connection is then freed, which frees the
 * pending evhttp request too. A detached request (http_req_new_detached)
 * keeps its request line, headers and answer itself instead of in an evhttp
 * request; every accessor and answer function checks for it first, and the
 * rest (body limit, path decoding, freeing) is the same code.
 *
 * Read deadlines: libevent's timeout restarts with every byte read, so a
 * client dribbling its headers a byte at a time (slowloris) would hold its
 * connection forever. Every connection therefore gets a total deadline for
 * reading a request: header_timeout from accept, idle_timeout +
 * header_timeout after an answer on a kept-alive connection. We create each
 * connection's bufferevent (evhttp_set_bevcb) and keep a reference to it on
 * a watch list until the request is in; a sweep timer shuts the socket down
 * once the deadline passes (libevent then reads EOF and frees the
 * connection its own way), and drops a watch early when libevent has freed
 * the connection (its event callback is cleared; the read callback is also
 * cleared while an answer is written). The reference keeps the
 * socket open, so the descriptor cannot be reused under a watch; the sweep
 * runs every SWEEP_MS while any watch is on the list.
 *
 * Client: one evhttp_connection per exchange in flight, reused from a per-
 * port idle list afterwards. A connection that failed or was cancelled is
 * freed, never reused (deferred to the loop when inside its own callback). */
#include "serve/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "base/host.h"
#include "base/mem.h"

#define HARD_BODY_FLOOR (8ull << 20)
#define UPSTREAM_TIMEOUT_S 86400 /* the scheduler's deadlines end exchanges, not this */
#define SWEEP_MS 250              /* how often read deadlines are checked */

struct http_conn {
    struct http_server *server;
    struct evhttp_connection *evcon;
    struct http_req *pending; /* the request awaiting its answer, if any */
    bool freeing;             /* we free evcon: its requests go with it */
    struct http_conn *next;
};

/* A connection reading a request, with the time by which it must be in. */
struct read_watch {
    struct bufferevent *bev; /* a reference of ours */
    uint64_t deadline_ms;    /* monotonic */
    struct read_watch *next;
};

struct http_server {
    struct event_base *base;
    struct evhttp *evhttp;
    struct evhttp_bound_socket *sock;
    http_handler_fn fn;
    void *user;
    struct http_server_params limits;
    struct http_conn *conns;
    struct read_watch *watches; /* connections reading a request */
    struct event *sweep;        /* checks the watches' deadlines */
    uint32_t n_conns, n_pending;
    uint16_t port;
};

/* What a detached request (http_req_new_detached) holds in place of
 * libevent's request: its request line and headers, and its answer so far. */
struct http_detached {
    enum evhttp_cmd_type method;
    char *uri;
    struct evkeyvalq in, out;
    int status;              /* a streamed answer's */
    struct evbuffer *stream; /* a streamed answer's body so far */
    http_reply_fn reply;
    void *user;
};

struct http_req {
    struct http_server *server; /* NULL for a detached request */
    struct http_conn *conn;
    struct evhttp_request *req; /* NULL once libevent freed it with its connection */
    struct http_detached *detached; /* set instead of server, conn and req */
    struct event *watch;        /* hang-up detector while the answer is pending */
    char *path;
    char *body;
    size_t body_len;
    bool too_big, over_limit, gone, streaming;
    void (*on_gone)(void *);
    void *on_gone_arg;
};

/* --- connections --------------------------------------------------------------------- */

static void unlink_conn(struct http_server *s, struct http_conn *c) {
    for (struct http_conn **p = &s->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            s->n_conns--;
            return;
        }
}

static void mark_gone(struct http_req *r) {
    if (r->gone)
        return;
    r->gone = true;
    if (r->watch) {
        event_free(r->watch);
        r->watch = NULL;
    }
    if (r->on_gone)
        r->on_gone(r->on_gone_arg);
}

/* libevent is freeing the connection (peer gone, timeout, or us). */
static void on_conn_close(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    struct http_conn *c = arg;
    struct http_req *r = c->pending;
    if (r) {
        r->conn = NULL;
        if (c->freeing)
            r->req = NULL; /* freed with the connection */
        mark_gone(r);
    }
    unlink_conn(c->server, c);
    mem_free(c);
}

static struct http_conn *conn_for(struct http_server *s, struct evhttp_connection *evcon) {
    for (struct http_conn *c = s->conns; c; c = c->next)
        if (c->evcon == evcon)
            return c;
    struct http_conn *c = mem_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = (struct http_conn){.server = s, .evcon = evcon, .next = s->conns};
    s->conns = c;
    s->n_conns++;
    evhttp_connection_set_closecb(evcon, on_conn_close, c);
    return c;
}

void http_req_drop(struct http_req *r) {
    struct http_conn *c = r->conn;
    mark_gone(r);
    if (c) {
        c->freeing = true;
        evhttp_connection_free(c->evcon); /* calls on_conn_close */
    }
}

/* The socket became readable while the answer is pending: a zero-byte peek
 * (or an error) means the client hung up. Data (a pipelined request) is left
 * for libevent after the answer. */
static void on_watch(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct http_req *r = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR)))
        return;
    http_req_drop(r);
}

static void watch_hangup(struct http_req *r) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(r->conn->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0)
        return;
    r->watch = event_new(r->server->base, fd, EV_READ | EV_PERSIST, on_watch, r);
    if (r->watch)
        event_add(r->watch, NULL);
}

/* --- read deadlines -------------------------------------------------------------------- */

static void drop_watch(struct read_watch **p) {
    struct read_watch *w = *p;
    *p = w->next;
    bufferevent_decref(w->bev);
    mem_free(w);
}

static void arm_sweep(struct http_server *s) {
    struct timeval tv = {0, SWEEP_MS * 1000};
    if (s->watches && !evtimer_pending(s->sweep, NULL))
        evtimer_add(s->sweep, &tv);
}

/* Shuts down the connections past their deadline, and forgets those
 * libevent has freed. */
static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct http_server *s = arg;
    uint64_t now = (uint64_t)host_now_ms();
    for (struct read_watch **p = &s->watches; *p;) {
        bufferevent_event_cb live; /* NULL once libevent freed it (bufferevent_free) */
        bufferevent_getcb((*p)->bev, NULL, NULL, &live, NULL);
        if (live && now < (*p)->deadline_ms) {
            p = &(*p)->next;
            continue;
        }
        if (live)
            shutdown(bufferevent_getfd((*p)->bev), SHUT_RDWR);
        drop_watch(p);
    }
    arm_sweep(s);
}

/* Gives bev until timeout_ms from now to deliver a whole request. */
static void watch_read(struct http_server *s, struct bufferevent *bev, int64_t timeout_ms) {
    struct read_watch *w = mem_alloc(sizeof *w);
    if (!w)
        return; /* libevent's own read timeout still applies */
    bufferevent_incref(bev);
    *w = (struct read_watch){bev, (uint64_t)(host_now_ms() + timeout_ms), s->watches};
    s->watches = w;
    arm_sweep(s);
}

/* The request on bev is in: its deadline no longer applies. */
static void unwatch_read(struct http_server *s, struct bufferevent *bev) {
    for (struct read_watch **p = &s->watches; *p; p = &(*p)->next)
        if ((*p)->bev == bev) {
            drop_watch(p);
            return;
        }
}

/* evhttp's bufferevent factory: a socket bufferevent that closes its socket
 * when the last reference goes (ours may outlive libevent's), watched from
 * accept. NULL lets libevent make its own. */
static struct bufferevent *new_conn_bev(struct event_base *base, void *arg) {
    struct http_server *s = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev)
        watch_read(s, bev, s->limits.header_timeout_ms);
    return bev;
}

/* --- requests ------------------------------------------------------------------------- */

/* Copies the body from in, or notes that it is over max bytes. */
static void copy_body(struct http_req *r, struct evbuffer *in, uint64_t max) {
    size_t n = evbuffer_get_length(in);
    r->too_big = n > max;
    r->body = mem_alloc(r->too_big ? 1 : n + 1);
    if (!r->body)
        return;
    if (!r->too_big) {
        evbuffer_copyout(in, r->body, n);
        r->body_len = n;
    }
    r->body[r->body_len] = '\0';
}

/* The decoded path of a parsed request-target ("/" when it has none); NULL on OOM. */
static char *decoded_path(const struct evhttp_uri *u) {
    const char *raw = u ? evhttp_uri_get_path(u) : NULL;
    return evhttp_uridecode(raw && *raw ? raw : "/", 0, NULL);
}

static void on_request(struct evhttp_request *req, void *arg) {
    struct http_server *s = arg;
    struct http_req *r = mem_calloc(1, sizeof *r);
    struct http_conn *c = r ? conn_for(s, evhttp_request_get_connection(req)) : NULL;
    if (r)
        r->path = decoded_path(evhttp_request_get_evhttp_uri(req));
    if (!r || !c || !r->path) {
        if (r)
            free(r->path);
        mem_free(r);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    unwatch_read(s, evhttp_connection_get_bufferevent(c->evcon));
    r->server = s;
    r->conn = c;
    r->req = req;
    c->pending = r;
    s->n_pending++;
    r->over_limit = s->n_conns > s->limits.max_connections;
    copy_body(r, evhttp_request_get_input_buffer(req), s->limits.max_body_bytes);
    watch_hangup(r);
    s->fn(r, s->user);
}

static void detached_free(struct http_detached *d) {
    if (!d)
        return;
    evhttp_clear_headers(&d->in);
    evhttp_clear_headers(&d->out);
    if (d->stream)
        evbuffer_free(d->stream);
    mem_free(d->uri);
    mem_free(d);
}

/* Detaches r from libevent and frees it. */
static void req_finish(struct http_req *r) {
    if (r->watch)
        event_free(r->watch);
    if (r->conn) {
        r->conn->pending = NULL;
        const struct http_server_params *l = &r->server->limits;
        int64_t ms = l->idle_timeout_ms;
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
        evhttp_connection_set_timeout_tv(r->conn->evcon, &tv);
        watch_read(r->server, evhttp_connection_get_bufferevent(r->conn->evcon),
                   l->idle_timeout_ms + l->header_timeout_ms);
    }
    if (r->server)
        r->server->n_pending--;
    detached_free(r->detached);
    free(r->path);
    mem_free(r->body);
    mem_free(r);
}

/* The request's headers; NULL once libevent freed the request. */
static const struct evkeyvalq *in_headers(const struct http_req *r) {
    if (r->detached)
        return &r->detached->in;
    return r->req ? evhttp_request_get_input_headers(r->req) : NULL;
}

/* The answer's headers; NULL once libevent freed the request. */
static struct evkeyvalq *out_headers(struct http_req *r) {
    if (r->detached)
        return &r->detached->out;
    return r->req ? evhttp_request_get_output_headers(r->req) : NULL;
}

enum evhttp_cmd_type http_req_method(const struct http_req *r) {
    if (r->detached)
        return r->detached->method;
    return r->req ? evhttp_request_get_command(r->req) : EVHTTP_REQ_GET;
}

const char *http_req_method_name(const struct http_req *r) {
    switch (http_req_method(r)) {
    case EVHTTP_REQ_GET: return "GET";
    case EVHTTP_REQ_POST: return "POST";
    case EVHTTP_REQ_HEAD: return "HEAD";
    case EVHTTP_REQ_PUT: return "PUT";
    case EVHTTP_REQ_DELETE: return "DELETE";
    case EVHTTP_REQ_OPTIONS: return "OPTIONS";
    case EVHTTP_REQ_PATCH: return "PATCH";
    case EVHTTP_REQ_TRACE: return "TRACE";
    case EVHTTP_REQ_CONNECT: return "CONNECT";
    default: return "OTHER";
    }
}

const char *http_req_path(const struct http_req *r) { return r->path; }

const char *http_req_uri(const struct http_req *r) {
    if (r->detached)
        return r->detached->uri;
    return r->req ? evhttp_request_get_uri(r->req) : r->path;
}

const char *http_req_header(const struct http_req *r, const char *name) {
    const struct evkeyvalq *h = in_headers(r);
    return h ? evhttp_find_header(h, name) : NULL;
}

const struct evkeyvalq *http_req_headers(const struct http_req *r) { return in_headers(r); }

const char *http_req_body(struct http_req *r, size_t *len) {
    *len = r->body_len;
    return r->body ? r->body : "";
}

bool http_req_body_too_big(const struct http_req *r) { return r->too_big; }
bool http_req_over_connection_limit(const struct http_req *r) { return r->over_limit; }
bool http_req_gone(const struct http_req *r) { return r->gone; }

void http_req_on_gone(struct http_req *r, void (*fn)(void *arg), void *arg) {
    r->on_gone = fn;
    r->on_gone_arg = arg;
}

void http_req_add_header(struct http_req *r, const char *name, const char *value) {
    struct evkeyvalq *h = out_headers(r);
    if (h)
        evhttp_add_header(h, name, value);
}

static void set_close_if_over(struct http_req *r) {
    if (r->over_limit)
        http_req_add_header(r, "Connection", "close");
}

void http_req_reply(struct http_req *r, int status, const char *content_type, const void *body,
                    size_t len) {
    set_close_if_over(r);
    if (content_type)
        http_req_add_header(r, "Content-Type", content_type);
    if (r->detached) {
        r->detached->reply(r->detached->user, status, &r->detached->out, len ? body : "", len);
    } else if (r->req) {
        struct evbuffer *b = evbuffer_new();
        if (b && len)
            evbuffer_add(b, body, len);
        evhttp_send_reply(r->req, status, NULL, b); /* frees a detached request */
        if (b)
            evbuffer_free(b);
    }
    req_finish(r);
}

/* While a stream is sent libevent keeps reading the socket, for close
 * detection, under the connection's read timeout: a stream that pauses
 * longer (an engine thinking, or stopped) would be cut. The client sends
 * nothing meanwhile, so only the write timeout stays: a client that takes no
 * data for idle_timeout is dropped. req_finish sets both back. */
static void no_read_timeout(struct http_req *r) {
    struct bufferevent *bev = r->conn ? evhttp_connection_get_bufferevent(r->conn->evcon) : NULL;
    int64_t ms = r->server->limits.idle_timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &tv);
}

void http_req_stream_start(struct http_req *r, int status, const char *content_type) {
    r->streaming = true;
    set_close_if_over(r);
    if (content_type)
        http_req_add_header(r, "Content-Type", content_type);
    http_req_add_header(r, "Cache-Control", "no-cache");
    if (r->detached) {
        r->detached->status = status;
        r->detached->stream = evbuffer_new();
    } else if (r->req) {
        evhttp_send_reply_start(r->req, status, NULL);
        no_read_timeout(r);
    }
}

void http_req_stream_chunk(struct http_req *r, struct evbuffer *data) {
    if (r->detached && r->detached->stream)
        evbuffer_add_buffer(r->detached->stream, data);
    else if (r->req)
        evhttp_send_reply_chunk(r->req, data);
    evbuffer_drain(data, evbuffer_get_length(data));
}

void http_req_stream_end(struct http_req *r) {
    struct http_detached *d = r->detached;
    if (d) {
        size_t len = d->stream ? evbuffer_get_length(d->stream) : 0;
        const void *body = len ? (const void *)evbuffer_pullup(d->stream, -1) : "";
        d->reply(d->user, d->status, &d->out, body, len);
    } else if (r->req) {
        evhttp_send_reply_end(r->req); /* frees a detached request */
    }
    req_finish(r);
}

size_t http_req_stream_backlog(const struct http_req *r) {
    struct bufferevent *bev =
        r->conn && r->req ? evhttp_connection_get_bufferevent(r->conn->evcon) : NULL;
    return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* --- a request without a connection ----------------------------------------------------- */

tandem_err http_req_new_detached(const struct http_detached_params *p, struct http_req **out) {
    *out = NULL;
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(p->uri, EVHTTP_URI_NONCONFORMANT);
    if (!u)
        return TANDEM_ERR_FORMAT; /* libevent refuses such a request line */
    struct http_req *r = mem_calloc(1, sizeof *r);
    struct http_detached *d = r ? mem_calloc(1, sizeof *d) : NULL;
    struct evbuffer *body = evbuffer_new();
    if (d) {
        *d = (struct http_detached){.method = p->method, .uri = mem_strdup(p->uri),
                                    .reply = p->reply, .user = p->user};
        TAILQ_INIT(&d->in);
        TAILQ_INIT(&d->out);
    }
    tandem_err e = d && d->uri && body && (r->path = decoded_path(u)) != NULL &&
                           (!p->len || evbuffer_add(body, p->body, p->len) == 0)
                       ? TANDEM_OK
                       : TANDEM_ERR_NOMEM;
    if (e == TANDEM_OK) {
        r->detached = d;
        copy_body(r, body, p->max_body_bytes);
        e = r->body ? TANDEM_OK : TANDEM_ERR_NOMEM;
    }
    for (const struct evkeyval *h = p->headers ? TAILQ_FIRST(p->headers) : NULL;
         e == TANDEM_OK && h; h = TAILQ_NEXT(h, next))
        if (evhttp_add_header(&d->in, h->key, h->value) != 0)
            e = TANDEM_ERR_FORMAT; /* a line break in it (or OOM) */
    evhttp_uri_free(u);
    if (body)
        evbuffer_free(body);
    if (e != TANDEM_OK) {
        if (r)
            free(r->path);
        mem_free(r ? r->body : NULL);
        detached_free(d);
        mem_free(r);
        return e;
    }
    *out = r;
    return TANDEM_OK;
}

/* --- server lifecycle -------------------------------------------------------------------- */

static void apply_limits(struct http_server *s, const struct http_server_params *p) {
    s->limits = *p;
    uint64_t cap = p->max_body_bytes * 8 > HARD_BODY_FLOOR ? p->max_body_bytes * 8 : HARD_BODY_FLOOR;
    evhttp_set_max_body_size(s->evhttp, (ev_ssize_t)cap);
    evhttp_set_max_headers_size(s->evhttp, 64 * 1024);
    struct timeval tv = {(time_t)(p->header_timeout_ms / 1000),
                         (suseconds_t)(p->header_timeout_ms % 1000) * 1000};
    evhttp_set_timeout_tv(s->evhttp, &tv);
}

tandem_err http_server_new(struct event_base *base, const struct http_server_params *p,
                           http_handler_fn fn, void *user, struct http_server **out, char *err,
                           size_t errlen) {
    *out = NULL;
    struct http_server *s = mem_calloc(1, sizeof *s);
    if (!s || !(s->evhttp = evhttp_new(base)) || !(s->sweep = evtimer_new(base, on_sweep, s))) {
        if (s && s->evhttp)
            evhttp_free(s->evhttp);
        mem_free(s);
        return TANDEM_ERR_NOMEM;
    }
    s->base = base;
    s->fn = fn;
    s->user = user;
    apply_limits(s, p);
    /* every method libevent knows reaches the handler, which answers 405 in
     * tandem's shape (libevent's own answer would be an HTML 501) */
    evhttp_set_allowed_methods(s->evhttp, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                              EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                              EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH |
                                              EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT);
    evhttp_set_gencb(s->evhttp, on_request, s);
    evhttp_set_bevcb(s->evhttp, new_conn_bev, s);
    s->sock = evhttp_bind_socket_with_handle(s->evhttp, p->host, p->port);
    if (!s->sock) {
        tandem_errmsg(err, errlen, "cannot listen on %s:%u: %s", p->host, (unsigned)p->port,
                      strerror(errno));
        http_server_free(s);
        return TANDEM_ERR_IO;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(s->sock);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    *out = s;
    return TANDEM_OK;
}

void http_server_free(struct http_server *s) {
    if (!s)
        return;
    for (struct http_conn *c = s->conns; c; c = c->next)
        c->freeing = true;
    evhttp_free(s->evhttp); /* frees the connections: on_conn_close unlinks each */
    while (s->watches)
        drop_watch(&s->watches);
    event_free(s->sweep);
    mem_free(s);
}

uint16_t http_server_port(const struct http_server *s) { return s->port; }

void http_server_stop_accepting(struct http_server *s) {
    if (s->sock) {
        evhttp_del_accept_socket(s->evhttp, s->sock);
        s->sock = NULL;
    }
}

void http_server_set_limits(struct http_server *s, const struct http_server_params *p) {
    apply_limits(s, p);
}

uint32_t http_server_pending(const struct http_server *s) { return s->n_pending; }

/* --- client ---------------------------------------------------------------------------- */

struct idle_conn {
    struct evhttp_connection *evcon;
    uint16_t port;
    struct idle_conn *next;
};

struct http_client {
    struct event_base *base;
    struct idle_conn *idle;
    struct http_upstream *active; /* in flight, for http_client_free */
};

struct http_upstream {
    struct http_client *client;
    struct evhttp_connection *evcon;
    struct evhttp_request *req;
    const struct http_upstream_ops *ops;
    void *user;
    uint16_t port;
    enum evhttp_request_error error;
    bool have_error, aborted;
    bool streamed; /* the answer is chunked and goes to ops->chunk */
    bool starting; /* inside evhttp_make_request */
    bool failed_early; /* ... whose connection failed there (see http_upstream_start) */
    struct http_upstream *prev, *next;
};

struct http_client *http_client_new(struct event_base *base) {
    struct http_client *c = mem_calloc(1, sizeof *c);
    if (c)
        c->base = base;
    return c;
}

static void unlink_upstream(struct http_upstream *u) {
    if (u->prev)
        u->prev->next = u->next;
    else
        u->client->active = u->next;
    if (u->next)
        u->next->prev = u->prev;
}

void http_client_free(struct http_client *c) {
    if (!c)
        return;
    while (c->active)
        http_upstream_cancel(c->active);
    http_client_drop_port(c, 0);
    mem_free(c);
}

void http_client_drop_port(struct http_client *c, uint16_t port) {
    for (struct idle_conn **p = &c->idle; *p;) {
        struct idle_conn *i = *p;
        if (port && i->port != port) {
            p = &i->next;
            continue;
        }
        *p = i->next;
        evhttp_connection_free(i->evcon);
        mem_free(i);
    }
}

static struct evhttp_connection *take_conn(struct http_client *c, uint16_t port) {
    for (struct idle_conn **p = &c->idle; *p; p = &(*p)->next)
        if ((*p)->port == port) {
            struct idle_conn *i = *p;
            struct evhttp_connection *e = i->evcon;
            *p = i->next;
            mem_free(i);
            return e;
        }
    struct evhttp_connection *e = evhttp_connection_base_new(c->base, NULL, "127.0.0.1", port);
    if (e)
        evhttp_connection_set_timeout(e, UPSTREAM_TIMEOUT_S);
    return e;
}

static void free_conn_later_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    evhttp_connection_free(arg);
}

/* Returns a finished exchange's connection to the pool, or frees it (after
 * libevent is done with it) when it failed. */
static void release_conn(struct http_upstream *u, bool reusable) {
    struct idle_conn *i = reusable ? mem_calloc(1, sizeof *i) : NULL;
    if (i) {
        *i = (struct idle_conn){u->evcon, u->port, u->client->idle};
        u->client->idle = i;
        return;
    }
    struct timeval zero = {0, 0};
    if (event_base_once(u->client->base, -1, EV_TIMEOUT, free_conn_later_cb, u->evcon, &zero))
        evhttp_connection_free_on_completion(u->evcon);
}

static const char *error_text(enum evhttp_request_error e) {
    switch (e) {
    case EVREQ_HTTP_TIMEOUT: return "timed out";
    case EVREQ_HTTP_EOF: return "connection closed by the engine";
    case EVREQ_HTTP_INVALID_HEADER: return "invalid response header from the engine";
    case EVREQ_HTTP_BUFFER_ERROR: return "cannot connect to the engine";
    case EVREQ_HTTP_REQUEST_CANCEL: return "cancelled";
    case EVREQ_HTTP_DATA_TOO_LONG: return "response too long";
    }
    return "failed";
}

static void on_upstream_error(enum evhttp_request_error e, void *arg) {
    struct http_upstream *u = arg;
    u->error = e;
    u->have_error = true;
}

/* Whether an answer's body is chunked: streamed, as llama-server sends
 * server-sent events (its other answers have a Content-Length). */
static bool chunked(struct evhttp_request *req) {
    const char *te = evhttp_find_header(evhttp_request_get_input_headers(req), "Transfer-Encoding");
    return te && strcasestr(te, "chunked");
}

static int on_upstream_headers(struct evhttp_request *req, void *arg) {
    struct http_upstream *u = arg;
    u->streamed = u->ops->chunk && chunked(req);
    if (u->ops->chunk && !u->streamed) /* e.g. an error answer: buffered, whole to done */
        evhttp_request_set_chunked_cb(req, NULL);
    if (!u->ops->headers)
        return 0;
    bool go = u->ops->headers(u->user, evhttp_request_get_response_code(req),
                              evhttp_request_get_input_headers(req));
    u->aborted = !go;
    return go ? 0 : -1;
}

static void on_upstream_chunk(struct evhttp_request *req, void *arg) {
    struct http_upstream *u = arg;
    u->ops->chunk(u->user, evhttp_request_get_input_buffer(req));
}

static void on_upstream_done(struct evhttp_request *req, void *arg) {
    struct http_upstream *u = arg;
    if (u->starting) { /* http_upstream_start fails the exchange itself */
        u->failed_early = true;
        return;
    }
    int status = req ? evhttp_request_get_response_code(req) : 0;
    unlink_upstream(u);
    const struct http_upstream_ops *ops = u->ops;
    void *user = u->user;
    if (status > 0 && !u->have_error && !u->aborted) {
        struct evbuffer *body = u->streamed ? NULL : evhttp_request_get_input_buffer(req);
        /* llama-server closes the connection after a chunked answer without
         * saying so (no "Connection: close"); pooled, it would fail the next
         * request that took it before libevent noticed the close (a 502 for
         * a generation, which is never resent) */
        release_conn(u, !chunked(req));
        mem_free(u);
        ops->done(user, status, body, NULL);
        return;
    }
    const char *why = u->aborted ? "aborted" : error_text(u->have_error ? u->error : EVREQ_HTTP_EOF);
    release_conn(u, false);
    mem_free(u);
    ops->done(user, 0, NULL, why);
}

struct http_upstream *http_upstream_start(struct http_client *c, uint16_t port,
                                          enum evhttp_cmd_type method, const char *uri,
                                          const char *content_type, const void *body, size_t len,
                                          const struct evkeyvalq *from_headers,
                                          const char *const *forward,
                                          const struct http_upstream_ops *ops, void *user) {
    struct http_upstream *u = mem_calloc(1, sizeof *u);
    if (!u)
        return NULL;
    *u = (struct http_upstream){.client = c, .ops = ops, .user = user, .port = port};
    u->evcon = take_conn(c, port);
    u->req = u->evcon ? evhttp_request_new(on_upstream_done, u) : NULL;
    if (!u->req) {
        if (u->evcon)
            evhttp_connection_free(u->evcon);
        mem_free(u);
        return NULL;
    }
    evhttp_request_set_error_cb(u->req, on_upstream_error);
    evhttp_request_set_header_cb(u->req, on_upstream_headers);
    if (ops->chunk)
        evhttp_request_set_chunked_cb(u->req, on_upstream_chunk);
    struct evkeyvalq *h = evhttp_request_get_output_headers(u->req);
    evhttp_add_header(h, "Host", "127.0.0.1");
    if (content_type)
        evhttp_add_header(h, "Content-Type", content_type);
    for (size_t i = 0; forward && forward[i] && from_headers; i++) {
        const char *v = evhttp_find_header(from_headers, forward[i]);
        if (v)
            evhttp_add_header(h, forward[i], v);
    }
    if (body && len)
        evbuffer_add(evhttp_request_get_output_buffer(u->req), body, len);
    u->next = c->active;
    if (c->active)
        c->active->prev = u;
    c->active = u;
    /* A connect that fails at once makes libevent 2.1 run the request's
     * callback from inside evhttp_make_request (evhttp_connection_cb_cleanup),
     * which then still returns 0: on_upstream_done only marks it, so that
     * nothing is called back from inside this call and no freed exchange is
     * returned. */
    u->starting = true;
    int rc = evhttp_make_request(u->evcon, u->req, method, uri);
    u->starting = false;
    if (rc != 0 || u->failed_early) {
        unlink_upstream(u);
        evhttp_connection_free(u->evcon);
        mem_free(u);
        return NULL;
    }
    return u;
}

void http_upstream_cancel(struct http_upstream *u) {
    if (!u)
        return;
    unlink_upstream(u);
    evhttp_cancel_request(u->req);
    evhttp_connection_free(u->evcon);
    mem_free(u);
}
