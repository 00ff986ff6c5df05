/* http.c: libevent's evhttp, with what the daemon needs on top.
 *
 * Server: evhttp reads a whole request and calls us; we wrap it in an
 * http_req that lives until the answer. A detached request
 * (http_req_new_detached) keeps its request line, headers and answer itself
 * instead of in an evhttp request; every accessor and answer function
 * checks for it first, and the rest (body limit, path decoding, freeing) is
 * the same code.
 *
 * Connections are ours from accept: evhttp_set_bevcb is the accept hook
 * (new_conn_bev), where we make the connection's bufferevent, keep a
 * reference to it, count the connection against max_connections and hang
 * an evbuffer callback on its input (on_input). evhttp makes its
 * evhttp_connection just after; conn_bind finds it (the bufferevent's
 * callback argument) on the first input or the next loop turn, and hooks
 * its close callback, which is how we learn a connection is gone.
 *
 * A connection goes through these phases (enum conn_phase):
 *
 *   accept --> HEAD --head admitted (head_check)--> BODY --on_request--> ANSWER
 *               ^  \                                                      |
 *               |   `--head refused (refuse)--> REFUSED                   |
 *               `------------answer written (on_answer_sent)--------------'
 *
 * - HEAD: on_input runs before evhttp's read callback for the same bytes
 *   (evbuffer callbacks run inside the read), and copies what arrives into
 *   the connection's head copy (at most HEAD_MAX + 1 bytes). Once the empty
 *   line is in, http_head.c parses the head strictly and the server's head
 *   hook judges it, before evhttp has parsed it and before any body byte is
 *   buffered for it.
 * - REFUSED: the answer is written to the socket by us (refuse), which then
 *   stops sending; every byte that still arrives is drained at once, for
 *   LINGER_MS, then the socket is shut down and libevent frees the
 *   connection its own way. Nothing of it is buffered, and evhttp never
 *   gets a whole head to dispatch.
 * - BODY: evhttp reads the body (to its own size limit). on_request checks
 *   that the request it dispatches is the head that was admitted (method
 *   and target); any other request (one evhttp would parse where we did
 *   not, or on a connection we could not track) is dropped with its
 *   connection, never handled.
 * - ANSWER: the handler has the request. evhttp reads nothing, except while
 *   it writes, for close detection: more than HEAD_MAX bytes piling up then
 *   close the connection. When the answer has been written
 *   (evhttp_request_set_on_complete_cb) the next head is expected, and what
 *   already came in (a pipelined request) is the start of its copy.
 *
 * Connection cap: every connection counts from accept. Past the cap the
 * oldest idle connection (one in HEAD after an answer with nothing received
 * since) is closed; with none idle, the new connection is answered 503 once
 * its head is in (another connection may have become idle by then).
 *
 * Read deadlines: libevent's timeout restarts with every byte read, so a
 * client dribbling its headers a byte at a time (slowloris) would hold its
 * connection forever. Every connection therefore has a total deadline for
 * reading a request: header_timeout from accept, idle_timeout +
 * header_timeout after an answer; a sweep timer (every SWEEP_MS while there
 * are connections) shuts the socket down once it passes (libevent then
 * reads EOF and frees the connection its own way). Our reference keeps the
 * socket open, so its descriptor cannot be reused under us.
 *
 * libevent 2.1 stops reading a connection once a request is in, so a client
 * that hangs up while waiting is detected by a read watcher of our own on
 * the socket (a zero-byte peek means the peer closed); the connection is
 * then freed, which frees the pending evhttp request too.
 *
 * Accept errors: the listener gets an error callback. On any error (EMFILE
 * at the descriptor limit above all) accepting pauses, 50 ms doubling to
 * 1 s, until an accept succeeds; at EMFILE the oldest idle connection is
 * closed too, to give a descriptor back. One line is logged per episode, at
 * most every ACCEPT_LOG_EVERY_MS. Without this libevent retries accept() in
 * a loop and logs every failure.
 */
#include "serve/http.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/listener.h>

#include "base/host.h"
#include "base/mem.h"
#include "serve/http_head.h"
#include "serve/s1.h"

#define HARD_BODY_FLOOR (8ull << 20)
#define SWEEP_MS 250              /* how often read deadlines are checked */
#define HEAD_MAX (64 * 1024)      /* a request head's bytes (evhttp gets the same limit) */
#define HEAD_COPY_MIN 1024        /* a head copy's first allocation */
#define LINGER_MS 2000            /* a refused connection's bytes are drained this long */
#define REFUSAL_BODY_MAX 2048     /* a refusal's JSON body, as the head hook writes it */
#define ACCEPT_PAUSE_MIN_MS 50
#define ACCEPT_PAUSE_MAX_MS 1000
#define ACCEPT_LOG_EVERY_MS 10000

enum conn_phase {
    PHASE_HEAD,    /* reading a head: its bytes are copied into head */
    PHASE_BODY,    /* the head was admitted; evhttp reads the body */
    PHASE_ANSWER,  /* the handler has the request, until its answer is written */
    PHASE_REFUSED, /* answered by the server itself; what comes in is dropped */
};

struct http_conn {
    struct http_server *server;
    struct bufferevent *bev;             /* a reference of ours, from accept */
    struct evbuffer_cb_entry *input_cb;  /* on_input */
    struct evhttp_connection *evcon;     /* NULL until conn_bind finds it */
    struct event *bind_ev;               /* conn_bind on the loop's next turn */
    struct http_req *pending;            /* the request awaiting its answer, if any */
    enum conn_phase phase;
    char *head;                          /* HEAD: the head's bytes so far */
    size_t head_len, head_cap, head_scan;
    const char *method;                  /* BODY: the admitted head's method (static) */
    char *target;                        /* ... and request-target */
    char *out;                           /* REFUSED: the answer's bytes not yet sent */
    size_t out_len, out_off;
    struct event *out_ev;                /* sends them when the socket takes more */
    uint64_t deadline_ms;                /* monotonic: reading must be over by then; 0 = none */
    uint64_t idle_since;                 /* which answer of the server's was its last */
    bool served;                         /* an answer was written on it */
    bool over;                           /* accepted past max_connections */
    bool freeing;                        /* we free evcon: its requests go with it */
    struct http_conn *next;
};

struct http_server {
    struct event_base *base;
    struct evhttp *evhttp;
    struct evhttp_bound_socket *sock;
    http_handler_fn fn;
    void *user;
    struct http_server_params limits;
    struct http_conn *conns;
    struct event *sweep;  /* checks the read deadlines */
    struct event *resume; /* accepts again after a pause */
    uint32_t n_conns, n_pending;
    uint64_t answers;        /* written so far: orders idle connections by age */
    uint32_t pause_ms;       /* the accept pause now; 0 = accepting */
    uint64_t pauses_unlogged; /* accept pauses since the last line logged */
    int64_t logged_ms;        /* when that line was logged */
    uint16_t port;
    struct http_server *next_server; /* see servers */
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
    bool too_big, gone, streaming;
    void (*on_gone)(void *);
    void *on_gone_arg;
};

/* The live servers. The listener's error callback gets evhttp's pointer,
 * not ours, so it finds its server here by listener. Servers are made and
 * freed on their loop's thread. */
static struct http_server *servers;

/* --- connections --------------------------------------------------------------------- */

static void arm_sweep(struct http_server *s) {
    struct timeval tv = {0, SWEEP_MS * 1000};
    if (s->conns && !evtimer_pending(s->sweep, NULL))
        evtimer_add(s->sweep, &tv);
}

static void drop_head_copy(struct http_conn *c) {
    mem_free(c->head);
    c->head = NULL;
    c->head_len = c->head_cap = c->head_scan = 0;
}

/* Forgets c (libevent has freed, or is freeing, its connection). */
static void conn_free(struct http_conn *c) {
    struct http_server *s = c->server;
    for (struct http_conn **p = &s->conns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            s->n_conns--;
            break;
        }
    evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->input_cb);
    event_free(c->bind_ev);
    if (c->out_ev)
        event_free(c->out_ev);
    bufferevent_decref(c->bev);
    drop_head_copy(c);
    mem_free(c->target);
    mem_free(c->out);
    mem_free(c);
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
    conn_free(c);
}

/* Finds c's evhttp connection (the callback argument evhttp gives c's
 * bufferevent) and hooks its close. Returns false when libevent has freed it
 * already (its callbacks are cleared), having freed c. */
static bool conn_bind(struct http_conn *c) {
    if (c->evcon)
        return true;
    bufferevent_event_cb live;
    void *evcon;
    bufferevent_getcb(c->bev, NULL, NULL, &live, &evcon);
    if (!live) {
        conn_free(c);
        return false;
    }
    c->evcon = evcon;
    evhttp_connection_set_closecb(c->evcon, on_conn_close, c);
    return true;
}

static void on_bind(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    conn_bind(arg);
}

/* The connection evcon belongs to; NULL when it is not one of ours. */
static struct http_conn *conn_of(struct http_server *s, struct evhttp_connection *evcon) {
    struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
    for (struct http_conn *c = s->conns; c; c = c->next)
        if (c->bev == bev)
            return conn_bind(c) && c->evcon == evcon ? c : NULL;
    return NULL;
}

/* Closes the oldest idle connection but keep: one that has written an
 * answer and received nothing since. Returns whether there was one. */
static bool evict_idle(struct http_server *s, const struct http_conn *keep) {
    struct http_conn *oldest = NULL;
    for (struct http_conn *c = s->conns; c; c = c->next)
        if (c != keep && c->evcon && c->phase == PHASE_HEAD && c->served && !c->head_len &&
            (!oldest || c->idle_since < oldest->idle_since))
            oldest = c;
    if (!oldest)
        return false;
    oldest->freeing = true;
    evhttp_connection_free(oldest->evcon); /* on_conn_close frees oldest */
    return true;
}

/* Brings the connections down to max_connections by closing idle ones
 * (never keep). Returns whether they fit. */
static bool make_room(struct http_server *s, const struct http_conn *keep) {
    while (s->n_conns > s->limits.max_connections)
        if (!evict_idle(s, keep))
            return false;
    return true;
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
    evutil_socket_t fd = bufferevent_getfd(r->conn->bev);
    if (fd < 0)
        return;
    r->watch = event_new(r->server->base, fd, EV_READ | EV_PERSIST, on_watch, r);
    if (r->watch)
        event_add(r->watch, NULL);
}

/* Shuts down the sockets past their read deadline. */
static void on_sweep(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct http_server *s = arg;
    uint64_t now = (uint64_t)host_now_ms();
    for (struct http_conn *c = s->conns; c; c = c->next)
        if (c->deadline_ms && now >= c->deadline_ms) {
            shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
            c->deadline_ms = 0;
        }
    arm_sweep(s);
}

/* --- the head check -------------------------------------------------------------------- */

/* A new id, "req_" + 32 hex digits, into out. */
static void new_request_id(char out[HTTP_REQUEST_ID_MAX]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        memset(b, 0, sizeof b);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "req_", 4);
    for (size_t i = 0; i < sizeof b; i++)
        out[4 + 2 * i] = hex[b[i] >> 4], out[5 + 2 * i] = hex[b[i] & 15];
    out[4 + 2 * sizeof b] = '\0';
}

void http_request_id(const struct evkeyvalq *h, char out[HTTP_REQUEST_ID_MAX]) {
    const char *names[] = {"x-request-id", "x-typesafe-request-id"};
    for (size_t i = 0; i < 2; i++) {
        const char *id = h ? evhttp_find_header(h, names[i]) : NULL;
        bool ok = id && *id && strlen(id) < HTTP_REQUEST_ID_MAX;
        for (const char *p = id; ok && *p; p++)
            ok = *p > ' ' && *p < 0x7f;
        if (ok) {
            snprintf(out, HTTP_REQUEST_ID_MAX, "%s", id);
            return;
        }
    }
    new_request_id(out);
}

static const char *reason_phrase(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    }
    return "Refused";
}

/* tandem's error shape (s1_error_dump) for the refusals the server makes
 * itself, into body[cap]; returns status. */
static int error_body(int status, const char *type, const char *message, char *body, size_t cap) {
    s1_error_dump(status, type, message, body, cap);
    return status;
}

/* Sends what is left of c's answer; once all is out (or the socket failed),
 * stops sending. */
static void send_out(struct http_conn *c) {
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    while (c->out_off < c->out_len) {
        ssize_t n = send(fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && c->out_ev) {
            event_add(c->out_ev, NULL);
            return;
        }
        if (n <= 0)
            break;
        c->out_off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
}

static void on_out(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    send_out(arg);
}

/* Answers c with status and body (JSON) itself, writing to the socket (evhttp
 * has nothing queued on it: the head is read only while no answer is being
 * written), and drops whatever c still sends for LINGER_MS (on_input), so
 * that a client busy sending a body reads the answer rather than a reset. */
static void refuse(struct http_conn *c, int status, const char *body, const char *method,
                   const char *id) {
    bool head = method && !strcmp(method, "HEAD");
    size_t blen = strlen(body), cap = 256 + HTTP_REQUEST_ID_MAX + blen;
    c->out = mem_alloc(cap);
    int n = c->out ? snprintf(c->out, cap,
                              "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                              "Content-Length: %zu\r\nConnection: close\r\n%s%s%s%s\r\n%s",
                              status, reason_phrase(status), blen,
                              status == 401   ? "WWW-Authenticate: Bearer\r\n"
                              : status == 503 ? "Retry-After: 1\r\n"
                                              : "",
                              *id ? "x-request-id: " : "", id, *id ? "\r\n" : "",
                              head ? "" : body)
                   : -1;
    c->out_len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    c->out_ev = event_new(c->server->base, bufferevent_getfd(c->bev), EV_WRITE, on_out, c);
    c->phase = PHASE_REFUSED;
    drop_head_copy(c);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    evbuffer_drain(in, evbuffer_get_length(in));
    uint64_t linger = (uint64_t)host_now_ms() + LINGER_MS;
    if (!c->deadline_ms || c->deadline_ms > linger)
        c->deadline_ms = linger;
    arm_sweep(c->server);
    send_out(c);
}

/* The head checked and admitted: evhttp reads its body next. */
static void admit(struct http_conn *c, struct http_head *h) {
    c->phase = PHASE_BODY;
    c->over = false;
    c->method = h->method;
    mem_free(c->target);
    c->target = h->target; /* taken */
    h->target = NULL;
    drop_head_copy(c);
}

/* Judges c's head once it is all in: refused when it is too long or does
 * not parse, when c is past the connection cap and no idle connection can
 * make room, or when the server's head hook says so. */
static void head_check(struct http_conn *c) {
    struct http_server *s = c->server;
    size_t end = http_head_end(c->head, c->head_len, &c->head_scan);
    char body[REFUSAL_BODY_MAX], why[128], id[HTTP_REQUEST_ID_MAX] = "";
    if (!end && c->head_len <= HEAD_MAX)
        return; /* more to come */
    if (!end || end > HEAD_MAX) {
        new_request_id(id);
        refuse(c, error_body(431, "request_too_large", "the request head is over 64 KiB", body,
                             sizeof body),
               body, NULL, id);
        return;
    }
    struct http_head h;
    int status = 0;
    tandem_err e = http_head_parse(c->head, end, &h, why, sizeof why);
    if (e == TANDEM_ERR_NOMEM)
        status = error_body(500, "internal_error", "out of memory", body, sizeof body);
    else if (e == TANDEM_ERR_UNSUPPORTED)
        status = error_body(501, "not_supported_error", why, body, sizeof body);
    else if (e != TANDEM_OK)
        status = error_body(400, "invalid_request_error", why, body, sizeof body);
    else {
        bool over = c->over && !make_room(s, c);
        body[0] = '\0';
        if (s->limits.head)
            status = s->limits.head(s->limits.head_user, h.method, h.target, &h.headers, over,
                                    body, sizeof body, id);
        else if (over)
            status = error_body(503, "unavailable_error",
                                "too many connections (limits.max_connections)", body,
                                sizeof body);
    }
    if (status && !id[0]) /* the server's own refusal: the head hook named none */
        http_request_id(&h.headers, id);
    if (status)
        refuse(c, status, body, h.method, id);
    else
        admit(c, &h);
    http_head_deinit(&h);
}

/* Appends in's bytes from offset from to c's head copy, up to HEAD_MAX + 1
 * bytes in all (one past the limit tells a head too long). */
static bool copy_head(struct http_conn *c, struct evbuffer *in, size_t from) {
    size_t n = evbuffer_get_length(in) - from, room = HEAD_MAX + 1 - c->head_len;
    if (n > room)
        n = room;
    if (!n)
        return true;
    if (c->head_len + n > c->head_cap) {
        size_t cap = c->head_cap ? c->head_cap : HEAD_COPY_MIN;
        while (cap < c->head_len + n)
            cap *= 2;
        cap = cap > HEAD_MAX + 1 ? HEAD_MAX + 1 : cap;
        char *p = mem_realloc(c->head, cap);
        if (!p)
            return false;
        c->head = p;
        c->head_cap = cap;
    }
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(in, &pos, from, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(in, &pos, c->head + c->head_len, n) != (ev_ssize_t)n)
        return false;
    c->head_len += n;
    return true;
}

/* Copies what arrives while a head is expected into c->head, and judges the
 * head once it is in (see the phases above). Runs inside the bufferevent's
 * read, before evhttp's read callback sees the same bytes. */
static void head_input(struct http_conn *c, struct evbuffer *in, size_t from) {
    char body[256], id[HTTP_REQUEST_ID_MAX];
    if (copy_head(c, in, from)) {
        head_check(c);
    } else {
        new_request_id(id);
        refuse(c, error_body(500, "internal_error", "out of memory", body, sizeof body), body,
               NULL, id);
    }
}

static void on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg) {
    struct http_conn *c = arg;
    if (!info->n_added || !conn_bind(c))
        return;
    size_t len = evbuffer_get_length(in);
    switch (c->phase) {
    case PHASE_HEAD:
        head_input(c, in, len - (info->n_added < len ? info->n_added : len));
        break;
    case PHASE_BODY: /* evhttp holds the body to its own limit */
        break;
    case PHASE_ANSWER: /* evhttp reads only to notice a close while it writes */
        if (len > HEAD_MAX) {
            shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
            evbuffer_drain(in, len);
        }
        break;
    case PHASE_REFUSED:
        evbuffer_drain(in, len);
        break;
    }
}

/* The answer to c's request has been written (evhttp's on-complete
 * callback, before it frees the request): the next head is expected, and
 * what already came in is its start. */
static void on_answer_sent(struct evhttp_request *req, void *arg) {
    (void)req;
    struct http_conn *c = arg;
    const struct http_server_params *l = &c->server->limits;
    uint64_t now = (uint64_t)host_now_ms();
    if (c->pending) { /* answered from inside http_req_stream_end: its end is ours */
        c->pending->conn = NULL;
        c->pending = NULL;
    }
    struct timeval tv = {(time_t)(l->idle_timeout_ms / 1000),
                         (suseconds_t)(l->idle_timeout_ms % 1000) * 1000};
    evhttp_connection_set_timeout_tv(c->evcon, &tv);
    c->phase = PHASE_HEAD;
    c->served = true;
    c->idle_since = ++c->server->answers;
    c->deadline_ms = now + (uint64_t)(l->idle_timeout_ms + l->header_timeout_ms);
    arm_sweep(c->server);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    if (evbuffer_get_length(in))
        head_input(c, in, 0);
}

/* evhttp's bufferevent factory, called for each accepted connection: a
 * socket bufferevent that closes its socket when the last reference goes
 * (ours may outlive libevent's), counted and watched from here. NULL lets
 * libevent make its own, whose requests on_request then never hands on (no
 * memory to track it). */
static struct bufferevent *new_conn_bev(struct event_base *base, void *arg) {
    struct http_server *s = arg;
    s->pause_ms = 0; /* an accept succeeded: a pause's back-off starts over */
    struct http_conn *c = mem_calloc(1, sizeof *c);
    struct bufferevent *bev = c ? bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (bev && (c->bind_ev = evtimer_new(base, on_bind, c)) != NULL)
        c->input_cb = evbuffer_add_cb(bufferevent_get_input(bev), on_input, c);
    if (!c || !bev || !c->input_cb) {
        if (c && c->bind_ev)
            event_free(c->bind_ev);
        if (bev)
            bufferevent_free(bev);
        mem_free(c);
        return NULL;
    }
    bufferevent_incref(bev);
    c->server = s;
    c->bev = bev;
    c->phase = PHASE_HEAD;
    c->deadline_ms = (uint64_t)(host_now_ms() + s->limits.header_timeout_ms);
    c->next = s->conns;
    s->conns = c;
    s->n_conns++;
    struct timeval now = {0, 0};
    evtimer_add(c->bind_ev, &now);
    arm_sweep(s);
    c->over = !make_room(s, c);
    return bev;
}

/* --- accepting ------------------------------------------------------------------------- */

static struct http_server *server_of(const struct evconnlistener *lev) {
    for (struct http_server *s = servers; s; s = s->next_server)
        if (s->sock && evhttp_bound_socket_get_listener(s->sock) == lev)
            return s;
    return NULL;
}

/* One line per pause episode (accept failing until one succeeds), at most
 * one every ACCEPT_LOG_EVERY_MS. */
static void log_accept_pause(struct http_server *s, int err) {
    int64_t now = host_now_ms();
    if (s->logged_ms && now - s->logged_ms < ACCEPT_LOG_EVERY_MS) {
        s->pauses_unlogged++;
        return;
    }
    fprintf(stderr,
            "tandem: cannot accept connections: %s%s; accepting pauses (%d ms, doubling to "
            "%d ms) until an accept succeeds (%" PRIu64 " more pause(s) since the last report)\n",
            strerror(err), err == EMFILE ? " (the descriptor limit, RLIMIT_NOFILE)" : "",
            ACCEPT_PAUSE_MIN_MS, ACCEPT_PAUSE_MAX_MS, s->pauses_unlogged);
    s->logged_ms = now;
    s->pauses_unlogged = 0;
}

/* accept() failed (libevent calls this instead of retrying at once): pause
 * accepting, and at the descriptor limit close an idle connection. */
static void on_accept_error(struct evconnlistener *lev, void *arg) {
    (void)arg; /* evhttp's */
    int err = EVUTIL_SOCKET_ERROR();
    evconnlistener_disable(lev);
    struct http_server *s = server_of(lev);
    if (!s)
        return;
    if (err == EMFILE || err == ENFILE)
        evict_idle(s, NULL);
    if (!s->pause_ms)
        log_accept_pause(s, err);
    s->pause_ms = !s->pause_ms                       ? ACCEPT_PAUSE_MIN_MS
                  : s->pause_ms * 2 > ACCEPT_PAUSE_MAX_MS ? ACCEPT_PAUSE_MAX_MS
                                                          : s->pause_ms * 2;
    struct timeval tv = {(time_t)(s->pause_ms / 1000), (suseconds_t)(s->pause_ms % 1000) * 1000};
    evtimer_add(s->resume, &tv);
}

static void on_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct http_server *s = arg;
    if (s->sock)
        evconnlistener_enable(evhttp_bound_socket_get_listener(s->sock));
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

static const char *method_name(enum evhttp_cmd_type m) {
    switch (m) {
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

/* Whether req is the request whose head c admitted. */
static bool was_admitted(const struct http_conn *c, struct evhttp_request *req) {
    return c && c->phase == PHASE_BODY && c->target &&
           !strcmp(c->target, evhttp_request_get_uri(req)) &&
           !strcmp(c->method, method_name(evhttp_request_get_command(req)));
}

static void on_request(struct evhttp_request *req, void *arg) {
    struct http_server *s = arg;
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct http_conn *c = conn_of(s, evcon);
    if (!was_admitted(c, req)) { /* never handled: see the phases above */
        if (c)
            c->freeing = true;
        evhttp_connection_free(evcon);
        return;
    }
    struct http_req *r = mem_calloc(1, sizeof *r);
    if (r)
        r->path = decoded_path(evhttp_request_get_evhttp_uri(req));
    if (!r || !r->path) {
        if (r)
            free(r->path);
        mem_free(r);
        evhttp_send_error(req, 500, "out of memory");
        return;
    }
    c->phase = PHASE_ANSWER;
    c->deadline_ms = 0;
    mem_free(c->target);
    c->target = NULL;
    evhttp_request_set_on_complete_cb(req, on_answer_sent, c);
    r->server = s;
    r->conn = c;
    r->req = req;
    c->pending = r;
    s->n_pending++;
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
    if (r->conn)
        r->conn->pending = NULL;
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

const char *http_req_method_name(const struct http_req *r) { return method_name(http_req_method(r)); }

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

const struct evkeyvalq *http_req_headers(const struct http_req *r) {
    static struct evkeyvalq none = TAILQ_HEAD_INITIALIZER(none);
    const struct evkeyvalq *h = in_headers(r);
    return h ? h : &none;
}

const char *http_req_body(struct http_req *r, size_t *len) {
    *len = r->body_len;
    return r->body ? r->body : "";
}

bool http_req_body_too_big(const struct http_req *r) { return r->too_big; }
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

void http_req_reply(struct http_req *r, int status, const char *content_type, const void *body,
                    size_t len) {
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
 * data for idle_timeout is dropped. on_answer_sent sets both back. */
static void no_read_timeout(struct http_req *r) {
    struct bufferevent *bev = r->conn ? r->conn->bev : NULL;
    int64_t ms = r->server->limits.idle_timeout_ms;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    if (bev)
        bufferevent_set_timeouts(bev, NULL, &tv);
}

void http_req_stream_start(struct http_req *r, int status, const char *content_type) {
    r->streaming = true;
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
    struct bufferevent *bev = r->conn && r->req ? r->conn->bev : NULL;
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
    evhttp_set_max_headers_size(s->evhttp, HEAD_MAX);
    struct timeval tv = {(time_t)(p->header_timeout_ms / 1000),
                         (suseconds_t)(p->header_timeout_ms % 1000) * 1000};
    evhttp_set_timeout_tv(s->evhttp, &tv);
}

tandem_err http_server_new(struct event_base *base, const struct http_server_params *p,
                           http_handler_fn fn, void *user, struct http_server **out, char *err,
                           size_t errlen) {
    *out = NULL;
    struct http_server *s = mem_calloc(1, sizeof *s);
    if (!s || !(s->evhttp = evhttp_new(base)) || !(s->sweep = evtimer_new(base, on_sweep, s)) ||
        !(s->resume = evtimer_new(base, on_resume, s))) {
        if (s && s->evhttp)
            evhttp_free(s->evhttp);
        if (s && s->sweep)
            event_free(s->sweep);
        mem_free(s);
        return TANDEM_ERR_NOMEM;
    }
    s->base = base;
    s->fn = fn;
    s->user = user;
    s->next_server = servers;
    servers = s;
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
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(s->sock), on_accept_error);
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
    for (struct http_server **p = &servers; *p; p = &(*p)->next_server)
        if (*p == s) {
            *p = s->next_server;
            break;
        }
    for (struct http_conn *c = s->conns; c; c = c->next)
        c->freeing = true;
    evhttp_free(s->evhttp); /* frees the connections: on_conn_close frees each bound one */
    while (s->conns)
        conn_free(s->conns);
    event_free(s->sweep);
    event_free(s->resume);
    mem_free(s);
}

uint16_t http_server_port(const struct http_server *s) { return s->port; }

void http_server_stop_accepting(struct http_server *s) {
    if (s->sock) {
        evtimer_del(s->resume);
        evhttp_del_accept_socket(s->evhttp, s->sock);
        s->sock = NULL;
    }
}

void http_server_set_limits(struct http_server *s, const struct http_server_params *p) {
    apply_limits(s, p);
}

uint32_t http_server_pending(const struct http_server *s) { return s->n_pending; }
