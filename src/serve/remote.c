/* remote.c: models served by remote endpoints, on libcurl's multi interface
 * driven by the daemon's libevent loop.
 *
 * One curl_loop per set (serve/curl_loop: a CURLM on the daemon's libevent
 * loop) shares the connection cache (keep-alive) and the DNS cache between
 * every model, call and health probe; it hands each finished transfer to
 * xfer_done, which passes it on to probe_done or attempt_done. Nothing
 * blocks.
 *
 * A call is a sequence of attempts, one URL each (choose: up, untried, the
 * fewest outstanding, list order breaks ties):
 *
 *   remote_call_start --choose--> attempt_start --(libcurl)--> attempt_done
 *     | no URL up, deadline gone                                 | 429/502/503, connect
 *     v                                                          | failure, reset, attempt
 *   defer --(zero-delay event)--> deliver <-- finish/all_failed  | timeout: failover, which
 *                                                                v starts the next attempt
 * done runs only from deliver, which is always reached from a libevent
 * callback, never from inside remote_call_start. Invariants: a call has at
 * most one transfer (c->x); u->outstanding counts the transfers of calls on
 * u; every call not yet delivered is on r->calls, so remote_free can end it.
 *
 * Health: with a health path each URL's timer starts a probe (GET, capped at
 * min(interval, 2 s)) and the answer sets up/down; the next probe is due one
 * interval after the last one started. Without a health path a URL is up until
 * an attempt cannot connect to it; its timer brings it back after one
 * interval. A connect failure marks a URL down either way. The API key goes
 * only into request headers, never into messages, logs or status. */
#include "serve/remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include "base/host.h"
#include "base/mem.h"
#include "serve/curl_loop.h"
#include "version.h"

#define DEFAULT_INTERVAL_MS 1000
#define PROBE_CAP_MS 2000
#define DEFAULT_MAX_BYTES (64u << 20)     /* max_response_bytes 0 */
#define MSG_MAX 65536                      /* an error message, at most */
#define CAUSE_MAX (CURL_ERROR_SIZE + 64)  /* one URL's cause */

struct xfer;

struct upstream {
    struct remote_model *m;
    size_t idx;                  /* in m->u */
    char *url;                   /* the base URL as configured */
    char *health_url;            /* url + health path; NULL = no polling */
    bool up;
    uint32_t outstanding;        /* transfers of calls on this URL */
    uint64_t requests;           /* attempts sent here */
    char last_error[CAUSE_MAX];  /* "" = none */
    int64_t checked_ms;          /* host_now_ms() of the last check or mark; -1 = never */
    struct event *timer;         /* next probe, or the end of a down mark */
    struct xfer *probe;          /* health probe in flight */
};

struct remote_model {
    struct remote *r;
    char *name;
    char *auth;                  /* "Authorization: Bearer <key>" or NULL */
    int64_t timeout_ms;          /* one attempt's cap; 0 = the deadline only */
    size_t n;
    struct upstream u[REMOTE_MAX_URLS];
};

struct remote {
    struct event_base *base;
    struct curl_loop *loop;
    int64_t interval_ms;
    uint64_t max_bytes;
    struct prom_metric *m_up, *m_requests, *m_duration;
    struct remote_model **models;
    size_t n_models, cap_models;
    TAILQ_HEAD(, remote_call) calls; /* not yet delivered, for remote_free */
    bool started;
};

struct xfer {                    /* one transfer: an attempt of a call, or a probe */
    CURL *easy;
    struct upstream *u;
    struct remote_call *call;    /* NULL for a health probe */
    struct curl_slist *headers;
    struct mem_buf body;
    bool added, too_big, deadline_bound;
    int64_t t0, timeout_ms;
    char err[CURL_ERROR_SIZE];
};

struct remote_call {
    struct remote *r;
    struct remote_model *m;
    TAILQ_ENTRY(remote_call) link; /* on r->calls */
    char *route, *body, *request_id;
    size_t len;
    int64_t deadline_ms;         /* <= 0: none */
    remote_done_fn done;
    void *user;
    bool tried[REMOTE_MAX_URLS];
    unsigned attempts;
    struct xfer *x;              /* the attempt in flight */
    struct upstream *last;       /* the last URL tried */
    struct mem_buf why;          /* "url: cause; ..." of failed attempts */
    struct mem_buf kept;         /* the latest 429/502/503 answer with a JSON body */
    int kept_status;
    struct upstream *kept_from;
    struct event *later;         /* deferred delivery of an error */
    int later_status;
    struct mem_buf msg;          /* the error message being delivered */
};

/* --- small helpers ------------------------------------------------------------------------ */

/* Appends printf-style text to b; a message cut short by OOM or MSG_MAX stays as is. */
static void bprintf(struct mem_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct mem_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? mem_alloc((size_t)n + 1) : NULL;
    if (!s)
        return;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    if (mem_buf_append(b, s, (size_t)n) == TANDEM_ERR_TOOBIG && b->len < b->max)
        mem_buf_append(b, s, b->max - b->len);
    mem_free(s);
}

/* base + route with exactly one '/' between them. Caller frees. */
static char *join_url(const char *base, const char *route) {
    size_t bn = strlen(base);
    while (bn && base[bn - 1] == '/')
        bn--;
    while (*route == '/')
        route++;
    size_t rn = strlen(route);
    char *s = mem_alloc(bn + rn + 2);
    if (!s)
        return NULL;
    memcpy(s, base, bn);
    s[bn] = '/';
    memcpy(s + bn + 1, route, rn + 1);
    return s;
}

static int64_t time_left(const struct remote_call *c) {
    return c->deadline_ms > 0 ? c->deadline_ms - host_now_ms() : INT64_MAX;
}

static const char *cause_of(const struct upstream *u) {
    if (u->last_error[0])
        return u->last_error;
    return u->checked_ms < 0 ? "not checked yet" : "down";
}

/* --- metrics ------------------------------------------------------------------------------ */

static tandem_err register_metrics(struct remote *r, struct prom *p) {
    static const char *const l2[] = {"model", "upstream", NULL};
    static const char *const l3[] = {"model", "upstream", "code", NULL};
    static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                    1,     2.5,  5,     10,   30,  60};
    r->m_up = prom_register(p, PROM_GAUGE, "tandem_upstream_up",
                            "1 when the upstream URL of a remote model is up", l2, NULL, 0);
    r->m_requests = prom_register(p, PROM_COUNTER, "tandem_upstream_requests_total",
                                  "Attempts sent to an upstream URL, by HTTP status (or error)",
                                  l3, NULL, 0);
    r->m_duration = prom_register(p, PROM_HISTOGRAM, "tandem_upstream_request_duration_seconds",
                                  "Duration of one attempt on an upstream URL", l2, bounds,
                                  sizeof bounds / sizeof *bounds);
    return r->m_up && r->m_requests && r->m_duration ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

static void metric_up(const struct upstream *u) {
    if (u->m->r->m_up)
        prom_set(u->m->r->m_up, (const char *[]){u->m->name, u->url}, u->up ? 1 : 0);
}

static void metric_attempt(const struct upstream *u, long code, int64_t ms) {
    const struct remote *r = u->m->r;
    if (!r->m_requests)
        return;
    char c[24];
    snprintf(c, sizeof c, "%ld", code);
    prom_add(r->m_requests, (const char *[]){u->m->name, u->url, code > 0 ? c : "error"}, 1);
    prom_observe(r->m_duration, (const char *[]){u->m->name, u->url}, (double)ms / 1000.0);
}

/* Records a health result or a passive mark. cause is "" when up. */
static void set_state(struct upstream *u, bool up, const char *cause) {
    u->up = up;
    snprintf(u->last_error, sizeof u->last_error, "%s", cause);
    u->checked_ms = host_now_ms();
    metric_up(u);
}

static void arm(struct event *ev, int64_t ms) {
    if (ms < 0)
        ms = 0;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

/* --- transfers ---------------------------------------------------------------------------- */

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
    struct xfer *x = user;
    size_t n = size * nmemb;
    if (!x->call)
        return n; /* a probe's body is not needed */
    tandem_err e = mem_buf_append(&x->body, ptr, n);
    if (e == TANDEM_ERR_TOOBIG)
        x->too_big = true;
    return e == TANDEM_OK ? n : 0; /* 0 makes libcurl fail with CURLE_WRITE_ERROR */
}

static void xfer_free(struct xfer *x) {
    if (!x)
        return;
    if (x->easy) {
        if (x->added)
            curl_loop_remove(x->u->m->r->loop, x->easy);
        curl_easy_cleanup(x->easy);
    }
    curl_slist_free_all(x->headers);
    mem_buf_deinit(&x->body);
    mem_free(x);
}

static bool add_header(struct xfer *x, const char *line) {
    struct curl_slist *h = curl_slist_append(x->headers, line);
    if (h)
        x->headers = h;
    return h != NULL;
}

/* Options every transfer shares. False on OOM. */
static bool set_common(struct xfer *x, const char *url) {
    CURL *e = x->easy;
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->err);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)x);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "tandem/" TANDEM_VERSION);
    if (x->timeout_ms > 0) {
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)x->timeout_ms);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)x->timeout_ms);
    }
    if (x->u->m->auth && !add_header(x, x->u->m->auth))
        return false;
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
#if LIBCURL_VERSION_NUM >= 0x075500 /* 7.85: CURLOPT_PROTOCOLS_STR */
    if (curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK)
        return false;
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    return curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK;
}

static struct xfer *xfer_new(struct upstream *u, struct remote_call *c, int64_t timeout_ms) {
    struct xfer *x = mem_calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->u = u;
    x->call = c;
    x->timeout_ms = timeout_ms;
    x->t0 = host_now_ms();
    mem_buf_init(&x->body, (size_t)(u->m->r->max_bytes < SIZE_MAX ? u->m->r->max_bytes : SIZE_MAX));
    if (!(x->easy = curl_easy_init())) {
        mem_free(x);
        return NULL;
    }
    return x;
}

static bool xfer_add(struct xfer *x) {
    x->added = curl_loop_add(x->u->m->r->loop, x->easy);
    return x->added;
}

/* One line for a failed transfer, into out[n]. */
static void describe(CURLcode rc, const struct xfer *x, char *out, size_t n) {
    const char *text = x->err[0] ? x->err : curl_easy_strerror(rc);
    long os = 0;
    if (rc == CURLE_COULDNT_CONNECT)
        curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &os);
    if (os == ECONNREFUSED)
        snprintf(out, n, "connection refused");
    else if (os)
        snprintf(out, n, "cannot connect: %s", strerror((int)os));
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        snprintf(out, n, "no answer within %" PRId64 " ms", x->timeout_ms);
    else if (rc == CURLE_GOT_NOTHING)
        snprintf(out, n, "connection closed without an answer");
    else
        snprintf(out, n, "%s", text);
}

/* Errors after which another URL may do better. */
static bool retryable(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_OPERATION_TIMEDOUT:
        return true;
    default:
        return false;
    }
}

/* --- health ------------------------------------------------------------------------------- */

static void probe_start(struct upstream *u) {
    struct remote *r = u->m->r;
    int64_t t = r->interval_ms < PROBE_CAP_MS ? r->interval_ms : PROBE_CAP_MS;
    struct xfer *x = xfer_new(u, NULL, t);
    if (!x || !set_common(x, u->health_url) || !xfer_add(x)) {
        xfer_free(x);
        set_state(u, false, "out of memory");
        arm(u->timer, r->interval_ms);
        return;
    }
    u->probe = x;
}

static void probe_done(struct xfer *x, CURLcode rc) {
    struct upstream *u = x->u;
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    char cause[CAUSE_MAX] = "";
    if (rc != CURLE_OK)
        describe(rc, x, cause, sizeof cause);
    else if (code != 200)
        snprintf(cause, sizeof cause, "HTTP %ld", code);
    set_state(u, !cause[0], cause);
    u->probe = NULL;
    arm(u->timer, u->m->r->interval_ms - (host_now_ms() - x->t0));
    xfer_free(x);
}

/* The URL's timer: the next probe, or the end of a down mark without polling. */
static void on_url_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct upstream *u = arg;
    if (u->health_url)
        probe_start(u);
    else
        set_state(u, true, "");
}

/* An attempt could not connect: down until the next good poll (or one interval). */
static void mark_down(struct upstream *u, const char *cause) {
    set_state(u, false, cause);
    if (!u->health_url)
        arm(u->timer, u->m->r->interval_ms);
}

/* --- calls -------------------------------------------------------------------------------- */

static void call_drop_xfer(struct remote_call *c) {
    if (!c->x)
        return;
    c->x->u->outstanding--;
    xfer_free(c->x);
    c->x = NULL;
}

static void call_free(struct remote_call *c) {
    struct remote *r = c->r;
    TAILQ_REMOVE(&r->calls, c, link);
    call_drop_xfer(c);
    if (c->later)
        event_free(c->later);
    mem_buf_deinit(&c->why);
    mem_buf_deinit(&c->kept);
    mem_buf_deinit(&c->msg);
    mem_free(c->route);
    mem_free(c->body);
    mem_free(c->request_id);
    mem_free(c);
}

/* Ends the call: done, then free. res's strings may point into c. */
static void deliver(struct remote_call *c, const struct remote_result *res) {
    c->done(c->user, res);
    call_free(c);
}

static void deliver_error(struct remote_call *c, int status) {
    struct remote_result res = {.status = status, .upstream = c->last ? c->last->url : NULL,
                                .attempts = c->attempts,
                                .error = c->msg.data ? c->msg.data : "out of memory"};
    deliver(c, &res);
}

static void deliver_answer(struct remote_call *c, int status, const struct mem_buf *b,
                           const struct upstream *from) {
    struct remote_result res = {.status = status, .from_upstream = true,
                                .body = b->data ? b->data : "", .len = b->len,
                                .upstream = from->url, .attempts = c->attempts};
    deliver(c, &res);
}

static void on_later(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct remote_call *c = arg;
    deliver_error(c, c->later_status);
}

/* Delivers c->msg with status from a zero-delay event. False on OOM. */
static bool defer(struct remote_call *c, int status) {
    if (!(c->later = evtimer_new(c->r->base, on_later, c)))
        return false;
    c->later_status = status;
    event_active(c->later, EV_TIMEOUT, 1);
    return true;
}

/* The up, untried URL with the fewest outstanding calls; NULL when none. */
static struct upstream *choose(struct remote_call *c) {
    struct upstream *best = NULL;
    for (size_t i = 0; i < c->m->n; i++) {
        struct upstream *u = &c->m->u[i];
        if (u->up && !c->tried[i] && (!best || u->outstanding < best->outstanding))
            best = u;
    }
    return best;
}

/* The headers of one attempt; the key is added by set_common. False on OOM. */
static bool call_headers(struct xfer *x, const struct remote_call *c, int64_t left) {
    char line[96];
    if (!add_header(x, "Content-Type: application/json") ||
        !add_header(x, "Accept: application/json") || !add_header(x, "Expect:"))
        return false;
    if (c->deadline_ms > 0) {
        snprintf(line, sizeof line, "x-envoy-expected-rq-timeout-ms: %" PRId64, left);
        if (!add_header(x, line))
            return false;
    }
    if (!c->request_id)
        return true;
    char *id = mem_alloc(strlen(c->request_id) + sizeof "x-request-id: ");
    bool ok = id != NULL;
    if (ok) {
        sprintf(id, "x-request-id: %s", c->request_id);
        ok = add_header(x, id);
    }
    mem_free(id);
    return ok;
}

/* Sends c to u. False on OOM (nothing started). */
static bool attempt_start(struct remote_call *c, struct upstream *u) {
    int64_t left = time_left(c), t = c->m->timeout_ms;
    bool bound = c->deadline_ms > 0 && (t <= 0 || left <= t);
    if (bound)
        t = left > 1 ? left : 1;
    struct xfer *x = xfer_new(u, c, t);
    char *url = join_url(u->url, c->route);
    bool ok = x && url && call_headers(x, c, left) && set_common(x, url);
    mem_free(url);
    if (ok) {
        x->deadline_bound = bound;
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->len);
        ok = xfer_add(x);
    }
    if (!ok) {
        xfer_free(x);
        return false;
    }
    c->x = x;
    c->tried[u->idx] = true;
    c->attempts++;
    c->last = u;
    u->outstanding++;
    u->requests++;
    return true;
}

/* Every URL tried failed (or none is left, or time ran out). */
static void all_failed(struct remote_call *c) {
    if (c->kept_from) {
        deliver_answer(c, c->kept_status, &c->kept, c->kept_from);
        return;
    }
    bprintf(&c->msg, "no upstream of model %s answered: %s", c->m->name,
            c->why.data ? c->why.data : "");
    deliver_error(c, 503);
}

/* u failed with cause: the next URL if time and one remain, else all_failed. */
static void failover(struct remote_call *c, struct upstream *u, const char *cause) {
    bprintf(&c->why, "%s%s: %s", c->why.len ? "; " : "", u->url, cause);
    struct upstream *next = time_left(c) > 0 ? choose(c) : NULL;
    if (next && attempt_start(c, next))
        return;
    all_failed(c);
}

static void finish_error(struct remote_call *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void finish_error(struct remote_call *c, int status, const char *fmt, ...) {
    char line[CAUSE_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    bprintf(&c->msg, "%s", line);
    deliver_error(c, status);
}

static bool is_json(const struct mem_buf *b) {
    json_t *j = b->len ? json_loadb(b->data, b->len, JSON_DECODE_ANY, NULL) : NULL;
    json_decref(j);
    return j != NULL;
}

/* An attempt that got a whole HTTP answer. */
static void answered(struct remote_call *c, struct xfer *x, long code) {
    struct upstream *u = x->u;
    if (code >= 300 && code < 400) {
        finish_error(c, 502, "upstream %s answered HTTP %ld: redirect not followed", u->url, code);
        return;
    }
    bool json = is_json(&x->body);
    if (code == 429 || code == 502 || code == 503) {
        if (json) {
            struct mem_buf t = c->kept;
            c->kept = x->body;
            x->body = t;
            c->kept_status = (int)code;
            c->kept_from = u;
        }
        char cause[32];
        snprintf(cause, sizeof cause, "HTTP %ld", code);
        failover(c, u, cause);
    } else if (!json) {
        finish_error(c, 502, "upstream %s answered HTTP %ld with a body that is not JSON", u->url,
                     code);
    } else {
        deliver_answer(c, (int)code, &x->body, u);
    }
}

static void attempt_done(struct xfer *x, CURLcode rc) {
    struct remote_call *c = x->call;
    struct upstream *u = x->u;
    c->x = NULL;
    u->outstanding--;
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    metric_attempt(u, code, host_now_ms() - x->t0);
    char cause[CAUSE_MAX];
    describe(rc, x, cause, sizeof cause);
    if (rc == CURLE_OK)
        answered(c, x, code);
    else if (rc == CURLE_WRITE_ERROR && x->too_big)
        finish_error(c, 502, "upstream %s: answer larger than %" PRIu64 " bytes", u->url,
                     c->r->max_bytes);
    else if (rc == CURLE_OPERATION_TIMEDOUT && (x->deadline_bound || time_left(c) <= 0))
        finish_error(c, 504, "upstream %s: no answer before the deadline (%" PRId64 " ms)",
                     u->url, x->timeout_ms);
    else if (retryable(rc)) {
        if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)
            mark_down(u, cause);
        failover(c, u, cause);
    } else
        finish_error(c, 502, "upstream %s: %s", u->url, cause);
    xfer_free(x);
}

/* curl_loop's done: hands a finished transfer to its owner. */
static void xfer_done(CURL *e, CURLcode rc, void *user) {
    (void)user;
    char *p = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, &p);
    struct xfer *x = (struct xfer *)p;
    x->added = false;
    if (x->call)
        attempt_done(x, rc);
    else
        probe_done(x, rc);
}

/* --- URL check ---------------------------------------------------------------------------- */

/* The port text of authority a[0..n) (after the last ':' outside brackets), or "". */
static void port_text(const char *a, size_t n, char *out, size_t cap) {
    const char *end = a + n, *p = a;
    if (*p == '[')
        while (p < end && *p != ']')
            p++;
    const char *colon = NULL;
    for (; p < end; p++)
        if (*p == ':')
            colon = p;
    size_t k = colon ? (size_t)(end - colon - 1) : 0;
    snprintf(out, cap, "%.*s", (int)k, colon ? colon + 1 : "");
}

/* What curl_url makes of url: TANDEM_OK or the message. */
static tandem_err check_parsed(CURLU *h, const char *url, const char *auth, size_t alen,
                               char *err, size_t errlen) {
    char port[32];
    port_text(auth, alen, port, sizeof port);
    CURLUcode uc = curl_url_set(h, CURLUPART_URL, url, 0);
    if (uc == CURLUE_OUT_OF_MEMORY)
        return TANDEM_ERR_NOMEM;
    if (uc == CURLUE_BAD_PORT_NUMBER) {
        tandem_errmsg(err, errlen, "bad port %s", port);
        return TANDEM_ERR_FORMAT;
    }
    if (uc != CURLUE_OK) {
        tandem_errmsg(err, errlen, "%s", uc == CURLUE_NO_HOST ? "no host" : curl_url_strerror(uc));
        return TANDEM_ERR_FORMAT;
    }
    char *host = NULL, *p = NULL;
    bool has_host = curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK && host && host[0];
    curl_free(host);
    if (!has_host) {
        tandem_errmsg(err, errlen, "no host");
        return TANDEM_ERR_FORMAT;
    }
    if (curl_url_get(h, CURLUPART_PORT, &p, 0) == CURLUE_OK) {
        long v = strtol(p, NULL, 10);
        curl_free(p);
        if (v < 1 || v > 65535) {
            tandem_errmsg(err, errlen, "bad port %s", port);
            return TANDEM_ERR_FORMAT;
        }
    }
    return TANDEM_OK;
}

tandem_err remote_url_check(const char *url, char *err, size_t errlen) {
    const char *why = NULL;
    if (!url || (strncasecmp(url, "http://", 7) && strncasecmp(url, "https://", 8)))
        why = "expected http:// or https://";
    else if (strchr(url, '?'))
        why = "query strings are not allowed";
    else if (strchr(url, '#'))
        why = "fragments are not allowed";
    const char *auth = url && !why ? strstr(url, "://") + 3 : NULL;
    size_t alen = auth ? strcspn(auth, "/") : 0;
    if (auth && !alen)
        why = "no host";
    else if (auth && memchr(auth, '@', alen))
        why = "user info is not allowed";
    if (why) {
        tandem_errmsg(err, errlen, "%s", why);
        return TANDEM_ERR_FORMAT;
    }
    CURLU *h = curl_url();
    if (!h)
        return TANDEM_ERR_NOMEM;
    tandem_err e = check_parsed(h, url, auth, alen, err, errlen);
    curl_url_cleanup(h);
    if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(err, errlen, "out of memory");
    return e;
}

/* --- the set ------------------------------------------------------------------------------ */

struct remote *remote_new(struct event_base *base, const struct remote_params *p) {
    if (!base || !p)
        return NULL;
    struct remote *r = mem_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->base = base;
    TAILQ_INIT(&r->calls);
    r->interval_ms = p->health_interval_ms > 0 ? p->health_interval_ms : DEFAULT_INTERVAL_MS;
    r->max_bytes = p->max_response_bytes ? p->max_response_bytes : DEFAULT_MAX_BYTES;
    r->loop = curl_loop_new(base, xfer_done, r);
    if (!r->loop || (p->metrics && register_metrics(r, p->metrics) != TANDEM_OK)) {
        remote_free(r);
        return NULL;
    }
    return r;
}

static void model_free(struct remote_model *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        struct upstream *u = &m->u[i];
        xfer_free(u->probe);
        if (u->timer)
            event_free(u->timer);
        mem_free(u->url);
        mem_free(u->health_url);
    }
    mem_free(m->name);
    mem_free(m->auth);
    mem_free(m);
}

void remote_free(struct remote *r) {
    if (!r)
        return;
    while (!TAILQ_EMPTY(&r->calls))
        remote_call_cancel(TAILQ_FIRST(&r->calls));
    for (size_t i = 0; i < r->n_models; i++)
        model_free(r->models[i]);
    mem_free(r->models);
    curl_loop_free(r->loop); /* closes the cached connections */
    mem_free(r);
}

/* Starts watching u: the first probe now, or up at once without polling. */
static void url_start(struct upstream *u) {
    if (u->health_url)
        probe_start(u);
    else
        metric_up(u);
}

static tandem_err url_init(struct remote_model *m, size_t i, const char *url, const char *health) {
    struct upstream *u = &m->u[i];
    u->m = m;
    u->idx = i;
    u->checked_ms = -1;
    u->up = health == NULL;
    if (!(u->url = mem_strdup(url)) || (health && !(u->health_url = join_url(url, health))) ||
        !(u->timer = evtimer_new(m->r->base, on_url_timer, u)))
        return TANDEM_ERR_NOMEM;
    metric_up(u);
    return TANDEM_OK;
}

static tandem_err model_init(struct remote_model *m, const struct remote_model_spec *s) {
    const char *health = s->health_path && s->health_path[0] ? s->health_path : NULL;
    if (!(m->name = mem_strdup(s->name)))
        return TANDEM_ERR_NOMEM;
    m->timeout_ms = s->timeout_ms > 0 ? s->timeout_ms : 0;
    if (s->api_key) {
        size_t n = strlen(s->api_key) + sizeof "Authorization: Bearer ";
        if (!(m->auth = mem_alloc(n)))
            return TANDEM_ERR_NOMEM;
        snprintf(m->auth, n, "Authorization: Bearer %s", s->api_key);
    }
    for (size_t i = 0; i < s->n_urls; i++, m->n++)
        if (url_init(m, i, s->urls[i], health) != TANDEM_OK) {
            m->n++; /* so model_free releases the partial one */
            return TANDEM_ERR_NOMEM;
        }
    return TANDEM_OK;
}

tandem_err remote_add_model(struct remote *r, const struct remote_model_spec *spec,
                            size_t *index) {
    if (!r || !spec || !spec->name || !spec->urls || !spec->n_urls ||
        spec->n_urls > REMOTE_MAX_URLS)
        return TANDEM_ERR_INVAL;
    for (size_t i = 0; i < spec->n_urls; i++)
        if (remote_url_check(spec->urls[i], NULL, 0) != TANDEM_OK)
            return TANDEM_ERR_INVAL;
    if (mem_array_grow((void **)&r->models, &r->cap_models, r->n_models + 1, sizeof *r->models,
                       SIZE_MAX) != TANDEM_OK)
        return TANDEM_ERR_NOMEM;
    struct remote_model *m = mem_calloc(1, sizeof *m);
    if (!m)
        return TANDEM_ERR_NOMEM;
    m->r = r;
    if (model_init(m, spec) != TANDEM_OK) {
        model_free(m);
        return TANDEM_ERR_NOMEM;
    }
    r->models[r->n_models] = m;
    if (index)
        *index = r->n_models;
    r->n_models++;
    for (size_t i = 0; r->started && i < m->n; i++)
        url_start(&m->u[i]);
    return TANDEM_OK;
}

void remote_start(struct remote *r) {
    if (!r || r->started)
        return;
    r->started = true;
    for (size_t k = 0; k < r->n_models; k++)
        for (size_t i = 0; i < r->models[k]->n; i++)
            url_start(&r->models[k]->u[i]);
}

/* --- calls: the public side --------------------------------------------------------------- */

/* The all-down message: "no healthy upstream for model M: url: cause; ...". */
static void no_healthy(struct remote_call *c) {
    bprintf(&c->msg, "no healthy upstream for model %s: ", c->m->name);
    for (size_t i = 0; i < c->m->n; i++)
        bprintf(&c->msg, "%s%s: %s", i ? "; " : "", c->m->u[i].url, cause_of(&c->m->u[i]));
}

/* Copies the inputs into c. False on OOM. */
static bool call_copy(struct remote_call *c, const char *route, const char *body, size_t len,
                      const char *request_id) {
    bool id_ok = request_id && request_id[0];
    for (const char *p = request_id; id_ok && *p; p++)
        id_ok = (unsigned char)*p >= 0x20 && *p != 0x7f; /* no header injection */
    c->len = len;
    return (c->route = mem_strdup(route ? route : "")) &&
           (c->body = len ? mem_strndup(body, len) : mem_strdup("")) &&
           (!id_ok || (c->request_id = mem_strdup(request_id)));
}

struct remote_call *remote_call_start(struct remote *r, size_t index, const char *route,
                                      const char *body, size_t len, const char *request_id,
                                      int64_t deadline_ms, remote_done_fn done, void *user) {
    if (!r || index >= r->n_models || !done || (len && !body))
        return NULL;
    struct remote_call *c = mem_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = (struct remote_call){.r = r, .m = r->models[index], .done = done, .user = user,
                              .deadline_ms = deadline_ms > 0 ? deadline_ms : 0};
    mem_buf_init(&c->why, MSG_MAX);
    mem_buf_init(&c->msg, MSG_MAX);
    mem_buf_init(&c->kept, r->max_bytes < SIZE_MAX ? (size_t)r->max_bytes : SIZE_MAX);
    TAILQ_INSERT_HEAD(&r->calls, c, link);
    bool ok = call_copy(c, route, body, len, request_id);
    struct upstream *u = ok ? choose(c) : NULL;
    if (ok && c->deadline_ms > 0 && time_left(c) <= 0) {
        bprintf(&c->msg, "the deadline passed before model %s was tried", c->m->name);
        ok = defer(c, 504);
    } else if (ok && !u) {
        no_healthy(c);
        ok = defer(c, 503);
    } else if (ok) {
        ok = attempt_start(c, u);
    }
    if (!ok) {
        call_free(c);
        return NULL;
    }
    return c;
}

void remote_call_cancel(struct remote_call *c) {
    if (c)
        call_free(c);
}

/* --- queries ------------------------------------------------------------------------------ */

static const struct remote_model *model_at(const struct remote *r, size_t index) {
    return r && index < r->n_models ? r->models[index] : NULL;
}

bool remote_model_up(const struct remote *r, size_t index) {
    const struct remote_model *m = model_at(r, index);
    for (size_t i = 0; m && i < m->n; i++)
        if (m->u[i].up)
            return true;
    return false;
}

uint32_t remote_model_running(const struct remote *r, size_t index) {
    const struct remote_model *m = model_at(r, index);
    uint32_t n = 0;
    for (size_t i = 0; m && i < m->n; i++)
        n += m->u[i].outstanding;
    return n;
}

const char *remote_model_down_cause(const struct remote *r, size_t index) {
    const struct remote_model *m = model_at(r, index);
    if (!m || remote_model_up(r, index))
        return "";
    return cause_of(&m->u[0]);
}

static json_t *url_json(const struct upstream *u, int64_t now) {
    return json_pack("{sssbsIsIsoso}", "url", u->url, "up", u->up, "outstanding",
                     (json_int_t)u->outstanding, "requests", (json_int_t)u->requests,
                     "last_error", u->last_error[0] ? json_string(u->last_error) : json_null(),
                     "checked_ms_ago",
                     u->checked_ms < 0 ? json_null() : json_integer(now - u->checked_ms));
}

json_t *remote_status_json(const struct remote *r, size_t index) {
    const struct remote_model *m = model_at(r, index);
    json_t *list = m ? json_array() : NULL;
    if (!list)
        return NULL;
    int64_t now = host_now_ms();
    for (size_t i = 0; i < m->n; i++)
        if (json_array_append_new(list, url_json(&m->u[i], now))) {
            json_decref(list);
            return NULL;
        }
    return json_pack("{sbso}", "up", remote_model_up(r, index), "upstreams", list);
}
