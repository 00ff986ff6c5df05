/* cmd_mcp.c: `tandem mcp`, an MCP server on stdio for agents (docs/mcp.md).
 *
 * One JSON-RPC message per line in on stdin, one per line out on stdout, and
 * nothing else on stdout: logs go to stderr. The protocol is serve/mcp; this
 * file is its stdio transport. Every tool call runs as one request to the
 * daemon's HTTP API in a thread of its own (libcurl), so a slow pipeline
 * never holds up a ping, a second call or a cancel. A watcher thread polls
 * the daemon's GET /v1/status every 250 ms while a call wants progress
 * (queued, loading, running), as `tandem decide` does. A follower thread
 * holds the daemon's event stream (GET /v1/events) open and, on each reload
 * event (and on each reconnection), has the watcher read GET /v1/pipelines
 * and /v1/models again, so that a reloaded config changes the tools and the
 * client is told (notifications/tools/list_changed, or on a
 * subscriptions/listen stream). Without the stream (events off, a daemon not
 * up yet) the catalog is read every CATALOG_POLL_MS instead. One lock guards
 * the protocol state, the calls in flight, the subscriptions and stdout.
 *
 * The daemon is --url, else --config's listen address, else
 * http://127.0.0.1:8090. With --config and nothing listening there, mcp
 * starts a private daemon on that config (cli/private_daemon) and stops it
 * when stdin ends. */
#include "cli/cmd_mcp.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/host.h"
#include "base/mem.h"
#include "flow/private_daemon.h"
#include "eval/s1client.h"
#include "serve/config.h"
#include "serve/mcp.h"

#define DEFAULT_URL "http://127.0.0.1:8090"
#define MAX_MESSAGE (4u << 20)   /* bytes in one line; a longer one is refused */
#define STATUS_POLL_MS 250
#define CATALOG_POLL_MS 5000
#define RECONNECT_MS 1000
#define CALL_TIMEOUT_MS 3600000L /* the daemon's deadline ends a call first */

struct call {
    struct mcp_call mc;
    struct server *srv;
    bool cancelled;
    struct mcp_progress_state progress;
    struct call *next;
};

/* A subscriptions/listen request of the current revision, open until cancelled. */
struct listener {
    json_t *id;
    struct listener *next;
};

struct server {
    struct mcp *mcp;
    char url[300];
    const char *api_key;
    pthread_mutex_t lock; /* everything below, and stdout */
    pthread_cond_t wake;  /* the watcher's sleep; a call's end */
    struct call *calls;
    struct listener *listeners;
    unsigned workers;     /* call threads still running */
    bool stopping;
    bool reread;          /* the catalog may have changed: read it again */
    bool following;       /* the event stream is open */
};

static volatile sig_atomic_t got_signal;

static void on_signal(int sig) { got_signal = sig; }

/* --- output ------------------------------------------------------------------------------- */

/* Writes msg (stolen) as one line; the lock is held. */
static void send_locked(json_t *msg) {
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    free(text);
    json_decref(msg);
}

static void send_msg(struct server *s, json_t *msg) {
    pthread_mutex_lock(&s->lock);
    send_locked(msg);
    pthread_mutex_unlock(&s->lock);
}

/* --- the daemon --------------------------------------------------------------------------- */

/* GET path's JSON body, or NULL. */
static json_t *get_json(const struct server *s, const char *path) {
    struct s1client_params p = s1client_default_params();
    p.endpoint = s->url;
    p.path = path;
    p.api_key = s->api_key;
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

/* Rebuilds the tools from the daemon's catalog; tells the client on a change.
 * Returns whether the daemon answered. */
static bool refresh_catalog(struct server *s) {
    json_t *pipelines = get_json(s, "/v1/pipelines");
    json_t *models = pipelines ? get_json(s, "/v1/models") : NULL;
    if (models) {
        pthread_mutex_lock(&s->lock);
        if (mcp_set_catalog(s->mcp, pipelines, models)) {
            if (mcp_initialized(s->mcp))
                send_locked(mcp_list_changed());
            for (struct listener *l = s->listeners; l; l = l->next)
                send_locked(mcp_listen_changed(l->id));
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

static void unlink_call(struct server *s, struct call *c) {
    for (struct call **p = &s->calls; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
}

/* Sends c's request to the daemon. Returns the tool's response, or NULL
 * when the call was cancelled. */
static json_t *exchange(struct call *c) {
    struct server *s = c->srv;
    char deadline[64], err[512];
    const char *const headers[] = {deadline, NULL};
    snprintf(deadline, sizeof deadline, "X-Tandem-Timeout-Ms: %ld", c->mc.timeout_ms);
    struct s1client_params p = s1client_default_params();
    p.endpoint = s->url;
    p.path = c->mc.path;
    p.api_key = s->api_key;
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
    free(body);
    char *text = answer ? json_dumps(answer, JSON_COMPACT) : NULL;
    json_decref(answer);
    json_t *msg = NULL;
    if (e == TANDEM_OK) /* an answer; err quotes it when it is not JSON */
        msg = mcp_call_result(&c->mc, (int)status, text ? text : err, strlen(text ? text : err),
                              retry);
    else if (e != TANDEM_ERR_CANCELLED)
        msg = mcp_call_result(&c->mc, 0, err, strlen(err), -1);
    free(text);
    return msg;
}

/* A call's thread: runs it and answers, unless it was cancelled meanwhile. */
static void *run_call(void *arg) {
    struct call *c = arg;
    struct server *s = c->srv;
    json_t *msg = exchange(c);
    pthread_mutex_lock(&s->lock);
    if (!c->cancelled)
        send_locked(msg);
    else
        json_decref(msg);
    unlink_call(s, c);
    s->workers--;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    mcp_call_clear(&c->mc);
    mem_free(c);
    return NULL;
}

/* Starts a thread for out's call (taken); the lock is held. */
static void start_call_locked(struct server *s, struct mcp_out *out) {
    struct call *c = mem_calloc(1, sizeof *c);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (c) {
        c->mc = out->call;
        c->srv = s;
        c->next = s->calls;
        s->calls = c;
        s->workers++;
        if (c->mc.progress_token) /* "queued" at once; the watcher reports what follows */
            send_locked(mcp_progress_next(&c->progress, c->mc.progress_token, NULL, NULL));
    }
    if (!c || pthread_create(&t, &attr, run_call, c)) {
        const char *why = "tandem mcp cannot start a thread for the call";
        json_t *msg = mcp_call_result(&out->call, 0, why, strlen(why), -1);
        if (c) {
            unlink_call(s, c);
            s->workers--;
            mem_free(c);
        }
        mcp_call_clear(&out->call);
        send_locked(msg);
    }
    pthread_attr_destroy(&attr);
}

/* Cancels the call, or ends the subscription, with that id. */
static void cancel_locked(struct server *s, const json_t *id) {
    for (struct call *c = s->calls; c; c = c->next)
        if (json_equal(c->mc.id, (json_t *)id))
            c->cancelled = true;
    for (struct listener **p = &s->listeners; *p; p = &(*p)->next)
        if (json_equal((*p)->id, (json_t *)id)) {
            struct listener *l = *p;
            *p = l->next;
            json_decref(l->id);
            mem_free(l);
            break;
        }
}

/* Acknowledges a subscription (out's message) and keeps it; the lock is held. */
static void listen_locked(struct server *s, struct mcp_out *out) {
    struct listener *l = mem_calloc(1, sizeof *l);
    if (!l) {
        json_decref(out->msg);
        send_locked(mcp_error(out->id, MCP_INVALID_REQUEST, "out of memory"));
        json_decref(out->id);
        return;
    }
    l->id = out->id;
    l->next = s->listeners;
    s->listeners = l;
    send_locked(out->msg);
}

/* --- the watcher -------------------------------------------------------------------------- */

/* Sends a progress notification to each call whose phase changed. */
static void report_progress(struct server *s) {
    pthread_mutex_lock(&s->lock);
    bool wanted = false;
    for (struct call *c = s->calls; c; c = c->next)
        wanted |= c->mc.progress_token && !c->cancelled;
    pthread_mutex_unlock(&s->lock);
    json_t *status = wanted ? get_json(s, "/v1/status") : NULL;
    if (!status)
        return;
    pthread_mutex_lock(&s->lock);
    for (struct call *c = s->calls; c; c = c->next)
        if (c->mc.progress_token && !c->cancelled) /* NULL: nothing new to send */
            send_locked(mcp_progress_next(&c->progress, c->mc.progress_token, status,
                                          c->mc.models));
    pthread_mutex_unlock(&s->lock);
    json_decref(status);
}

static void *watch(void *arg) {
    struct server *s = arg;
    int64_t next_catalog = host_now_ms() + CATALOG_POLL_MS;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        bool reread = s->reread || (!s->following && host_now_ms() >= next_catalog);
        s->reread = false;
        if (reread) {
            pthread_mutex_unlock(&s->lock);
            refresh_catalog(s);
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
    struct server *s = user;
    pthread_mutex_lock(&s->lock);
    bool yes = s->stopping;
    pthread_mutex_unlock(&s->lock);
    return yes;
}

/* Asks the watcher to read the catalog again (the lock is not held). */
static void ask_reread(struct server *s) {
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
    struct server *s = arg;
    struct s1client_params p = s1client_default_params();
    p.endpoint = s->url;
    p.path = "/v1/events";
    p.api_key = s->api_key;
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

/* --- stdin -------------------------------------------------------------------------------- */

static void handle_line(struct server *s, const char *line, size_t len) {
    struct mcp_out out;
    pthread_mutex_lock(&s->lock);
    mcp_handle(s->mcp, line, len, &out);
    if (out.action == MCP_SEND)
        send_locked(out.msg);
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

static void refuse_long_line(struct server *s, size_t len) {
    char text[160];
    snprintf(text, sizeof text, "a message of more than %u bytes (%zu read so far): "
             "tandem mcp reads at most %u MiB per line", MAX_MESSAGE, len, MAX_MESSAGE >> 20);
    send_msg(s, mcp_error(NULL, MCP_INVALID_REQUEST, text));
}

/* Reads lines until stdin ends or a signal comes. */
static void serve_stdin(struct server *s) {
    size_t cap = 1 << 16, len = 0;
    char *buf = mem_alloc(cap);
    bool skipping = false; /* inside a line already refused as too long */
    while (buf && !got_signal) {
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
        ssize_t n = read(STDIN_FILENO, buf + len, cap - len);
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
    if (len && !skipping && !got_signal)
        handle_line(s, buf, len); /* a last line without its newline */
    mem_free(buf);
}

/* --- the command -------------------------------------------------------------------------- */

struct mcp_opts {
    const char *url, *config, *llama_server;
    bool verbose;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem mcp [--url URL | --config FILE] [--verbose]\n"
            "\n"
            "An MCP server on stdio (JSON-RPC, one message per line) for AI agents: tandem's\n"
            "pipelines as decide_<pipeline> tools, its decision models as the systemone tool,\n"
            "and status. Tool calls go to a running daemon; with --config and no daemon\n"
            "listening at its address, mcp starts a private one and stops it on exit.\n"
            "Only protocol messages go to stdout; logs go to stderr. docs/mcp.md has the\n"
            "agent configuration and the tools' results.\n"
            "\n"
            "  --url URL      the daemon (default: --config's listen address, else %s)\n"
            "  --config FILE  the tandem.yaml: its address, and a private daemon when none listens\n"
            "  --verbose      the private daemon's log on stderr\n"
            "\n"
            "The API key, if the daemon wants one, is read from $TANDEM_API_KEY (else the\n"
            "config's first api_keys entry).\n",
            DEFAULT_URL);
}

static int parse_args(int argc, char **argv, struct mcp_opts *o) {
    static const struct option longs[] = {{"url", required_argument, NULL, 'u'},
                                          {"config", required_argument, NULL, 'c'},
                                          {"verbose", no_argument, NULL, 'v'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        switch (ch) {
        case 'u': o->url = optarg; break;
        case 'c': o->config = optarg; break;
        case 'v': o->verbose = true; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tandem mcp: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return 0;
}

static void install_signals(void) {
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: read() returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Serves until stdin ends: cancels what is in flight and waits for it. */
static void run_server(struct server *s) {
    pthread_t watcher, follower;
    bool watching = !pthread_create(&watcher, NULL, watch, s);
    bool following = !pthread_create(&follower, NULL, follow, s);
    serve_stdin(s);
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    for (struct call *c = s->calls; c; c = c->next)
        c->cancelled = true;
    pthread_cond_broadcast(&s->wake);
    while (s->workers)
        pthread_cond_wait(&s->wake, &s->lock);
    pthread_mutex_unlock(&s->lock);
    if (watching)
        pthread_join(watcher, NULL);
    if (following)
        pthread_join(follower, NULL);
    while (s->listeners) {
        struct listener *l = s->listeners;
        s->listeners = l->next;
        json_decref(l->id);
        mem_free(l);
    }
}

int cmd_mcp_main(int argc, char **argv, const char *llama_server) {
    struct mcp_opts o = {.llama_server = llama_server};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    struct server s = {.api_key = getenv("TANDEM_API_KEY")};
    struct config *cfg = NULL;
    char err[1024];
    if (o.config && config_load(o.config, &cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem mcp: %s\n", err);
        return 2;
    }
    if (!s.api_key && cfg && cfg->n_api_keys)
        s.api_key = cfg->api_keys[0];
    if (o.url)
        snprintf(s.url, sizeof s.url, "%s", o.url);
    else if (cfg)
        config_listen_url(cfg, s.url, sizeof s.url);
    if (!s.url[0])
        snprintf(s.url, sizeof s.url, "%s", o.config ? "" : DEFAULT_URL);
    s.mcp = mcp_new();
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.wake, NULL);
    install_signals();
    struct private_daemon *d = NULL;
    bool up = s.mcp && s.url[0] && refresh_catalog(&s);
    if (s.mcp && !up && o.config && !o.url) {
        struct private_daemon_params p = {.command = "tandem mcp", .config = o.config,
                                          .llama_server = o.llama_server, .verbose = o.verbose};
        if (private_daemon_start(&p, &d) == TANDEM_OK) {
            snprintf(s.url, sizeof s.url, "%s", private_daemon_url(d));
            up = refresh_catalog(&s);
        }
    }
    if (!s.mcp) {
        fprintf(stderr, "tandem mcp: out of memory\n");
        rc = 1;
    } else if (o.config && !o.url && !d && !up) {
        rc = 1; /* the private daemon's failure is on stderr */
    } else {
        if (!up)
            fprintf(stderr, "tandem mcp: no daemon answers at %s yet; the tools appear when "
                            "one does (notifications/tools/list_changed)\n", s.url);
        else
            fprintf(stderr, "tandem mcp: serving MCP on stdio for the daemon at %s\n", s.url);
        run_server(&s);
    }
    private_daemon_stop(d, false);
    mcp_free(s.mcp);
    pthread_cond_destroy(&s.wake);
    pthread_mutex_destroy(&s.lock);
    config_free(cfg);
    return rc;
}
