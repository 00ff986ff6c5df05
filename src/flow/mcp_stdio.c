/* mcp_stdio.c: the MCP on a line stream, bridged to a daemon's HTTP API
 * (`tandem mcp`, docs/mcp.md).
 *
 * One JSON-RPC message per line in on in_fd, one per line out on the output
 * stream, and nothing else on it: the caller's logs go to stderr. The
 * protocol is serve/mcp; this file is its stdio transport. Every tool call
 * runs as one request to the daemon's HTTP API in a thread of its own
 * (libcurl, through eval/s1client), so a slow pipeline never holds up a ping,
 * a second call or a cancel. A watcher thread polls the daemon's GET
 * /v1/status every 250 ms while a call wants progress (queued, loading,
 * running), as `tandem decide` does. A follower thread holds the daemon's
 * event stream (GET /v1/events) open and, on each reload event (and on each
 * reconnection), has the watcher read GET /v1/pipelines and /v1/models again,
 * so that a reloaded config changes the tools and the client is told
 * (notifications/tools/list_changed, or on a subscriptions/listen stream).
 * Without the stream (events off, a daemon not up yet) the catalog is read
 * every CATALOG_POLL_MS instead. One lock guards the protocol state, the
 * calls in flight, the subscriptions and the output.
 *
 * Lifetime: mcp_stdio_run starts the watcher and the follower, reads input
 * on the caller's thread until it ends, then sets stopping, cancels every
 * call, waits until no call thread is left (workers == 0) and joins both.
 * A call is on s->calls from its start until its thread has answered (or
 * dropped its answer, cancelled); its thread frees it. Nothing is written
 * before mcp_stdio_run names the output (s->out is NULL until then); a
 * catalog read before it has no initialized client or subscription to tell. */
#include "flow/mcp_stdio.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/s1client.h"
#include "serve/mcp.h"

#define MAX_MESSAGE MCP_STDIO_MAX_MESSAGE
#define STATUS_POLL_MS 250
#define CATALOG_POLL_MS 5000
#define RECONNECT_MS 1000
#define CALL_TIMEOUT_MS 3600000L /* the daemon's deadline ends a call first */

struct call {
    struct mcp_call mc;
    struct mcp_stdio *srv;
    bool cancelled;
    struct mcp_progress_state progress;
    TAILQ_ENTRY(call) link; /* on srv->calls */
};

/* A subscriptions/listen request of the current revision, open until cancelled. */
struct listener {
    json_t *id;
    TAILQ_ENTRY(listener) link; /* on srv->listeners */
};

struct mcp_stdio {
    struct mcp *mcp;
    char url[300];
    char *api_key;                 /* NULL = none */
    volatile sig_atomic_t *stop;   /* the caller's; NULL = none */
    FILE *out;                     /* set by mcp_stdio_run; NULL = nothing to write to yet */
    pthread_mutex_t lock;          /* everything below, and out */
    pthread_cond_t wake;           /* the watcher's sleep; a call's end */
    TAILQ_HEAD(, call) calls;      /* newest first */
    TAILQ_HEAD(, listener) listeners; /* newest first */
    unsigned workers;              /* call threads still running */
    bool stopping;
    bool reread;                   /* the catalog may have changed: read it again */
    bool following;                /* the event stream is open */
};

static bool stop_requested(const struct mcp_stdio *s) { return s->stop && *s->stop; }

/* --- output ------------------------------------------------------------------------------- */

/* Writes msg (stolen) as one line; the lock is held. */
static void send_locked(struct mcp_stdio *s, json_t *msg) {
    char *text = msg && s->out ? json_dumps(msg, JSON_COMPACT) : NULL;
    if (text) {
        fputs(text, s->out);
        fputc('\n', s->out);
        fflush(s->out);
    }
    free(text); /* jansson's allocation */
    json_decref(msg);
}

static void send_msg(struct mcp_stdio *s, json_t *msg) {
    pthread_mutex_lock(&s->lock);
    send_locked(s, msg);
    pthread_mutex_unlock(&s->lock);
}

/* --- the daemon --------------------------------------------------------------------------- */

/* The request to path on the daemon, for s1client_new. */
static struct s1client_params daemon_params(const struct mcp_stdio *s, const char *path) {
    struct s1client_params p = s1client_default_params();
    p.endpoint = s->url;
    p.path = path;
    p.api_key = s->api_key;
    return p;
}

/* GET path's JSON body, or NULL. */
static json_t *get_json(const struct mcp_stdio *s, const char *path) {
    struct s1client_params p = daemon_params(s, path);
    p.timeout_ms = 5000;
    struct s1client *c = NULL;
    long status = 0;
    json_t *body = NULL;
    char err[256];
    if (s1client_new(&p, &c, err, sizeof err) == TANDEM_OK &&
        s1client_get(c, &status, &body, err, sizeof err) == TANDEM_OK && status != 200) {
        json_decref(body);
        body = NULL;
    }
    s1client_free(c);
    return body;
}

bool mcp_stdio_refresh_catalog(struct mcp_stdio *s) {
    json_t *pipelines = get_json(s, "/v1/pipelines");
    json_t *models = pipelines ? get_json(s, "/v1/models") : NULL;
    if (models) {
        pthread_mutex_lock(&s->lock);
        if (mcp_set_catalog(s->mcp, pipelines, models)) {
            if (mcp_initialized(s->mcp))
                send_locked(s, mcp_list_changed());
            struct listener *l;
            TAILQ_FOREACH(l, &s->listeners, link)
                send_locked(s, mcp_listen_changed(l->id));
        }
        pthread_mutex_unlock(&s->lock);
    }
    json_decref(pipelines);
    json_decref(models);
    return models != NULL;
}

/* --- calls -------------------------------------------------------------------------------- */

static bool call_cancelled(void *user) {
    struct call *c = user;
    pthread_mutex_lock(&c->srv->lock);
    bool yes = c->cancelled;
    pthread_mutex_unlock(&c->srv->lock);
    return yes;
}

/* Sends c's request to the daemon. Returns the tool's response, or NULL
 * when the call was cancelled. */
static json_t *exchange(struct call *c) {
    struct mcp_stdio *s = c->srv;
    char deadline[64], err[512];
    const char *const headers[] = {deadline, NULL};
    snprintf(deadline, sizeof deadline, "X-Tandem-Timeout-Ms: %ld", c->mc.timeout_ms);
    struct s1client_params p = daemon_params(s, c->mc.path);
    p.timeout_ms = c->mc.timeout_ms > 0 ? c->mc.timeout_ms + 5000 : CALL_TIMEOUT_MS;
    p.headers = c->mc.timeout_ms > 0 ? headers : NULL;
    p.cancelled = call_cancelled;
    p.cancel_user = c;
    struct s1client *cl = NULL;
    long status = 0;
    json_t *answer = NULL;
    char *body = c->mc.body ? json_dumps(c->mc.body, JSON_COMPACT) : NULL;
    tandem_err e = s1client_new(&p, &cl, err, sizeof err);
    if (e == TANDEM_OK)
        e = body ? s1client_post(cl, body, strlen(body), &status, &answer, err, sizeof err)
                 : s1client_get(cl, &status, &answer, err, sizeof err);
    long retry = cl ? s1client_retry_after(cl) : -1;
    s1client_free(cl);
    free(body); /* jansson's allocation */
    char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
    json_decref(answer);
    json_t *msg = NULL;
    if (e == TANDEM_OK) /* an answer; err quotes it when it is not JSON */
        msg = mcp_call_result(&c->mc, (int)status, text ? text : err, strlen(text ? text : err),
                              retry);
    else if (e != TANDEM_ERR_CANCELLED)
        msg = mcp_call_result(&c->mc, 0, err, strlen(err), -1);
    free(text); /* jansson's allocation */
    return msg;
}

/* A call's thread: runs it and answers, unless it was cancelled meanwhile. */
static void *run_call(void *arg) {
    struct call *c = arg;
    struct mcp_stdio *s = c->srv;
    json_t *msg = exchange(c);
    pthread_mutex_lock(&s->lock);
    if (!c->cancelled)
        send_locked(s, msg);
    else
        json_decref(msg);
    TAILQ_REMOVE(&s->calls, c, link);
    s->workers--;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    mcp_call_clear(&c->mc);
    mem_free(c);
    return NULL;
}

/* Starts a thread for out's call (taken); the lock is held. */
static void start_call_locked(struct mcp_stdio *s, struct mcp_out *out) {
    struct call *c = mem_calloc(1, sizeof *c);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (c) {
        c->mc = out->call;
        c->srv = s;
        TAILQ_INSERT_HEAD(&s->calls, c, link);
        s->workers++;
        if (c->mc.progress_token) /* "queued" at once; the watcher reports what follows */
            send_locked(s, mcp_progress_next(&c->progress, c->mc.progress_token, NULL, NULL));
    }
    if (!c || pthread_create(&t, &attr, run_call, c)) {
        const char *why = "tandem mcp cannot start a thread for the call";
        json_t *msg = mcp_call_result(&out->call, 0, why, strlen(why), -1);
        if (c) {
            TAILQ_REMOVE(&s->calls, c, link);
            s->workers--;
            mem_free(c);
        }
        mcp_call_clear(&out->call);
        send_locked(s, msg);
    }
    pthread_attr_destroy(&attr);
}

/* Cancels the call, or ends the subscription, with that id; the lock is held. */
static void cancel_locked(struct mcp_stdio *s, const json_t *id) {
    struct call *c;
    TAILQ_FOREACH(c, &s->calls, link)
        if (json_equal(c->mc.id, (json_t *)id))
            c->cancelled = true;
    struct listener *l;
    TAILQ_FOREACH(l, &s->listeners, link)
        if (json_equal(l->id, (json_t *)id)) {
            TAILQ_REMOVE(&s->listeners, l, link);
            json_decref(l->id);
            mem_free(l);
            break;
        }
}

/* Acknowledges a subscription (out's message) and keeps it; the lock is held. */
static void listen_locked(struct mcp_stdio *s, struct mcp_out *out) {
    struct listener *l = mem_calloc(1, sizeof *l);
    if (!l) {
        json_decref(out->msg);
        send_locked(s, mcp_error(out->id, MCP_INVALID_REQUEST, "out of memory"));
        json_decref(out->id);
        return;
    }
    l->id = out->id;
    TAILQ_INSERT_HEAD(&s->listeners, l, link);
    send_locked(s, out->msg);
}

/* --- the watcher -------------------------------------------------------------------------- */

/* Sends a progress notification to each call whose phase changed. */
static void report_progress(struct mcp_stdio *s) {
    pthread_mutex_lock(&s->lock);
    bool wanted = false;
    struct call *c;
    TAILQ_FOREACH(c, &s->calls, link)
        wanted |= c->mc.progress_token && !c->cancelled;
    pthread_mutex_unlock(&s->lock);
    json_t *status = wanted ? get_json(s, "/v1/status") : NULL;
    if (!status)
        return;
    pthread_mutex_lock(&s->lock);
    TAILQ_FOREACH(c, &s->calls, link)
        if (c->mc.progress_token && !c->cancelled) /* NULL: nothing new to send */
            send_locked(s, mcp_progress_next(&c->progress, c->mc.progress_token, status,
                                             c->mc.models));
    pthread_mutex_unlock(&s->lock);
    json_decref(status);
}

static void *watch(void *arg) {
    struct mcp_stdio *s = arg;
    int64_t next_catalog = host_now_ms() + CATALOG_POLL_MS;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        bool reread = s->reread || (!s->following && host_now_ms() >= next_catalog);
        s->reread = false;
        if (reread) {
            pthread_mutex_unlock(&s->lock);
            mcp_stdio_refresh_catalog(s);
            next_catalog = host_now_ms() + CATALOG_POLL_MS;
            pthread_mutex_lock(&s->lock);
        }
        struct timespec until = host_wall_after_ms(STATUS_POLL_MS);
        pthread_cond_timedwait(&s->wake, &s->lock, &until);
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->lock);
        report_progress(s);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* --- the event stream ---------------------------------------------------------------------- */

static bool stopping(void *user) {
    struct mcp_stdio *s = user;
    pthread_mutex_lock(&s->lock);
    bool yes = s->stopping;
    pthread_mutex_unlock(&s->lock);
    return yes;
}

/* Asks the watcher to read the catalog again (the lock is not held). */
static void ask_reread(struct mcp_stdio *s) {
    pthread_mutex_lock(&s->lock);
    s->reread = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

static bool on_event_line(void *user, const char *line, size_t len) {
    static const char reload[] = "event: reload";
    if (len == sizeof reload - 1 && !memcmp(line, reload, len))
        ask_reread(user);
    return true;
}

/* Follows GET /v1/events until stopped, reconnecting after a drop. */
static void *follow(void *arg) {
    struct mcp_stdio *s = arg;
    struct s1client_params p = daemon_params(s, "/v1/events");
    p.cancelled = stopping;
    p.cancel_user = s;
    struct s1client *c = NULL;
    char err[256];
    while (!stopping(s)) {
        long status = 0;
        if (!c && s1client_new(&p, &c, err, sizeof err) != TANDEM_OK)
            break;
        pthread_mutex_lock(&s->lock);
        s->following = true;
        pthread_mutex_unlock(&s->lock);
        ask_reread(s); /* a reload may have come while no stream was open */
        tandem_err e = s1client_get_lines(c, on_event_line, s, &status, err, sizeof err);
        pthread_mutex_lock(&s->lock);
        s->following = false; /* the watcher polls meanwhile */
        if (e != TANDEM_ERR_CANCELLED && !s->stopping) {
            struct timespec until = host_wall_after_ms(RECONNECT_MS * (status == 200 ? 1 : 5));
            pthread_cond_timedwait(&s->wake, &s->lock, &until);
        }
        pthread_mutex_unlock(&s->lock);
    }
    s1client_free(c);
    return NULL;
}

/* --- input -------------------------------------------------------------------------------- */

static void handle_line(struct mcp_stdio *s, const char *line, size_t len) {
    struct mcp_out out;
    pthread_mutex_lock(&s->lock);
    mcp_handle(s->mcp, line, len, &out);
    if (out.action == MCP_SEND)
        send_locked(s, out.msg);
    else if (out.action == MCP_CALL)
        start_call_locked(s, &out);
    else if (out.action == MCP_LISTEN)
        listen_locked(s, &out);
    if (out.action == MCP_CANCEL) {
        cancel_locked(s, out.id);
        json_decref(out.id);
    }
    pthread_mutex_unlock(&s->lock);
}

static void refuse_long_line(struct mcp_stdio *s, size_t len) {
    char text[160];
    snprintf(text, sizeof text, "a message of more than %u bytes (%zu read so far): "
             "tandem mcp reads at most %u MiB per line", MAX_MESSAGE, len, MAX_MESSAGE >> 20);
    send_msg(s, mcp_error(NULL, MCP_INVALID_REQUEST, text));
}

/* Reads lines until in_fd ends or a stop is asked for. */
static void serve_input(struct mcp_stdio *s, int in_fd) {
    size_t cap = 1 << 16, len = 0;
    char *buf = mem_alloc(cap);
    bool skipping = false; /* inside a line already refused as too long */
    while (buf && !stop_requested(s)) {
        if (len == cap) {
            if (cap >= MAX_MESSAGE) {
                if (!skipping)
                    refuse_long_line(s, len);
                skipping = true;
                len = 0;
            } else {
                char *b = mem_realloc(buf, cap * 2);
                if (!b)
                    break;
                buf = b, cap *= 2;
            }
        }
        ssize_t n = read(in_fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t start = 0, end = len + (size_t)n;
        for (size_t i = len; i < end; i++) {
            if (buf[i] != '\n')
                continue;
            size_t l = i - start;
            if (l && buf[start + l - 1] == '\r')
                l--;
            if (!skipping && l)
                handle_line(s, buf + start, l);
            skipping = false;
            start = i + 1;
        }
        memmove(buf, buf + start, end - start);
        len = end - start;
    }
    if (len && !skipping && !stop_requested(s))
        handle_line(s, buf, len); /* a last line without its newline */
    mem_free(buf);
}

/* --- the bridge --------------------------------------------------------------------------- */

struct mcp_stdio_params mcp_stdio_default_params(void) {
    return (struct mcp_stdio_params){0};
}

struct mcp_stdio *mcp_stdio_new(const struct mcp_stdio_params *p) {
    struct mcp_stdio *s = mem_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->mcp = mcp_new();
    s->api_key = p->api_key ? mem_strdup(p->api_key) : NULL;
    if (!s->mcp || (p->api_key && !s->api_key)) {
        mcp_free(s->mcp);
        mem_free(s->api_key);
        mem_free(s);
        return NULL;
    }
    s->stop = p->stop;
    TAILQ_INIT(&s->calls);
    TAILQ_INIT(&s->listeners);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    mcp_stdio_set_url(s, p->url);
    return s;
}

void mcp_stdio_free(struct mcp_stdio *s) {
    if (!s)
        return;
    struct listener *l;
    while ((l = TAILQ_FIRST(&s->listeners))) {
        TAILQ_REMOVE(&s->listeners, l, link);
        json_decref(l->id);
        mem_free(l);
    }
    mcp_free(s->mcp);
    mem_free(s->api_key);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    mem_free(s);
}

void mcp_stdio_set_url(struct mcp_stdio *s, const char *url) {
    snprintf(s->url, sizeof s->url, "%s", url ? url : "");
}

const char *mcp_stdio_url(const struct mcp_stdio *s) { return s->url; }

void mcp_stdio_run(struct mcp_stdio *s, int in_fd, FILE *out) {
    pthread_mutex_lock(&s->lock);
    s->out = out;
    pthread_mutex_unlock(&s->lock);
    pthread_t watcher, follower;
    bool watching = !pthread_create(&watcher, NULL, watch, s);
    bool following = !pthread_create(&follower, NULL, follow, s);
    serve_input(s, in_fd);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    struct call *c;
    TAILQ_FOREACH(c, &s->calls, link)
        c->cancelled = true;
    pthread_cond_broadcast(&s->wake);
    while (s->workers)
        pthread_cond_wait(&s->wake, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (watching)
        pthread_join(watcher, NULL);
    if (following)
        pthread_join(follower, NULL);
}
