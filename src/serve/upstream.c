/* upstream.c: requests to the engines over unix sockets, on libcurl.
 *
 * Every request is one easy handle on the client's curl_loop, with
 * CURLOPT_UNIX_SOCKET_PATH set to its engine's socket; libcurl's connection
 * cache keeps connections alive and reuses one only for the same socket
 * (and retries on a fresh one when a reused connection turns out closed
 * before any answer, as llama-server closes after a chunked answer without
 * saying so).
 *
 * The answer is assembled from libcurl's callbacks: on_header collects the
 * status line and header lines into an evkeyvalq and, at the blank line
 * ending a final (non-1xx) answer, decides whether the body is streamed
 * (ops->chunk set and a chunked answer) and asks ops->headers; on_body
 * streams or buffers the body (libcurl has already removed the chunked
 * framing). call_done runs from curl_loop's drain, outside every libcurl
 * callback, unlinks and frees the call and then calls ops->done.
 *
 * Cancelling: a transfer may not leave the multi handle from inside a
 * libcurl callback. A cancel that comes while the client is inside one
 * (c->depth > 0: an ops->headers or ops->chunk running) only marks the call
 * and wakes c->reap, a zero-delay event that removes and frees the marked
 * calls from the loop; the marked call's own callbacks refuse further data
 * meanwhile. Invariant: every call not yet done or reaped is on c->calls. */
#include "serve/upstream.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include "base/mem.h"
#include "serve/curl_loop.h"

struct upstream_client {
    struct curl_loop *loop;
    struct event *reap;          /* removes cancelled calls, from the loop */
    struct upstream_call *calls; /* in flight */
    unsigned depth;              /* inside a user callback run from libcurl's */
};

struct upstream_call {
    struct upstream_client *c;
    CURL *easy;
    struct curl_slist *headers;
    const struct upstream_ops *ops;
    void *user;
    struct evkeyvalq resp;  /* the answer's headers */
    struct evbuffer *body;  /* buffered body, or the chunk being handed on */
    int status;
    bool streamed, aborted, cancelled;
    char err[CURL_ERROR_SIZE];
    struct upstream_call *prev, *next;
};

static void unlink_call(struct upstream_call *u) {
    if (u->prev)
        u->prev->next = u->next;
    else
        u->c->calls = u->next;
    if (u->next)
        u->next->prev = u->prev;
    u->prev = u->next = NULL;
}

static void call_free(struct upstream_call *u) {
    if (u->easy)
        curl_easy_cleanup(u->easy);
    curl_slist_free_all(u->headers);
    evhttp_clear_headers(&u->resp);
    if (u->body)
        evbuffer_free(u->body);
    mem_free(u);
}

/* --- the answer, from libcurl's callbacks ------------------------------------------------ */

/* Whether the answer's body is chunked: llama-server streams server-sent
 * events so; its other answers have a Content-Length. */
static bool chunked(const struct evkeyvalq *h) {
    const char *te = evhttp_find_header(h, "Transfer-Encoding");
    return te && strcasestr(te, "chunked");
}

/* The headers are in: streamed or buffered, and the owner's verdict. */
static bool headers_done(struct upstream_call *u) {
    u->streamed = u->ops->chunk && chunked(&u->resp);
    if (!u->ops->headers)
        return true;
    u->c->depth++;
    bool go = u->ops->headers(u->user, u->status, &u->resp);
    u->c->depth--;
    u->aborted = !go;
    return go && !u->cancelled;
}

/* Trims spaces and tabs from both ends of s[0..*n); returns the new start. */
static char *trim(char *s, size_t *n) {
    while (*n && (*s == ' ' || *s == '\t'))
        s++, (*n)--;
    while (*n && (s[*n - 1] == ' ' || s[*n - 1] == '\t'))
        (*n)--;
    return s;
}

/* CURLOPT_HEADERFUNCTION: one line of the answer's head (status line, a
 * header, or the blank line that ends it), with its CRLF. */
static size_t on_header(char *line, size_t size, size_t nmemb, void *arg) {
    struct upstream_call *u = arg;
    size_t n = size * nmemb, len = n;
    if (u->cancelled)
        return 0;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    if (len >= 5 && !strncmp(line, "HTTP/", 5)) { /* a new answer (after a 1xx too) */
        evhttp_clear_headers(&u->resp);
        char head[32];
        snprintf(head, sizeof head, "%.*s", (int)(len < 31 ? len : 31), line);
        u->status = 0;
        sscanf(head, "HTTP/%*s %d", &u->status);
        return n;
    }
    if (len == 0)
        return u->status < 200 || headers_done(u) ? n : 0;
    char *colon = memchr(line, ':', len);
    if (!colon)
        return n; /* not a header (an obsolete continuation line): ignored */
    size_t kn = (size_t)(colon - line), vn = len - kn - 1;
    char *k = trim(line, &kn), *v = trim(colon + 1, &vn);
    char *key = mem_strndup(k, kn), *val = mem_strndup(v, vn);
    bool ok = key && val && evhttp_add_header(&u->resp, key, val) == 0;
    mem_free(key);
    mem_free(val);
    return ok ? n : 0;
}

/* CURLOPT_WRITEFUNCTION: body bytes (without chunked framing). */
static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
    struct upstream_call *u = arg;
    size_t n = size * nmemb;
    if (u->cancelled || evbuffer_add(u->body, data, n) != 0)
        return 0;
    if (u->streamed) {
        u->c->depth++;
        u->ops->chunk(u->user, u->body);
        u->c->depth--;
        evbuffer_drain(u->body, evbuffer_get_length(u->body));
    }
    return u->cancelled ? 0 : n;
}

/* --- ends ----------------------------------------------------------------------------------- */

static const char *error_text(const struct upstream_call *u, CURLcode rc) {
    if (u->aborted)
        return "aborted";
    switch (rc) {
    case CURLE_COULDNT_CONNECT: return "cannot connect to the engine";
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE: return "connection closed by the engine";
    case CURLE_OPERATION_TIMEDOUT: return "timed out";
    case CURLE_OUT_OF_MEMORY: return "out of memory";
    case CURLE_WEIRD_SERVER_REPLY: return "invalid response from the engine";
    default: return u->err[0] ? u->err : curl_easy_strerror(rc);
    }
}

/* curl_loop's done: the exchange is over; the owner hears it last. */
static void call_done(CURL *easy, CURLcode rc, void *arg) {
    (void)arg;
    char *p = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &p);
    struct upstream_call *u = (struct upstream_call *)p;
    unlink_call(u);
    if (u->cancelled) {
        call_free(u);
        return;
    }
    const struct upstream_ops *ops = u->ops;
    void *user = u->user;
    char why[CURL_ERROR_SIZE];
    snprintf(why, sizeof why, "%s", rc == CURLE_OK ? "" : error_text(u, rc));
    int status = rc == CURLE_OK ? u->status : 0;
    struct evbuffer *body = status > 0 && !u->streamed ? u->body : NULL;
    if (body)
        u->body = NULL; /* the body outlives u for done */
    call_free(u);
    ops->done(user, status, body, status > 0 ? NULL : why);
    if (body)
        evbuffer_free(body);
}

static void on_reap(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct upstream_client *c = arg;
    for (struct upstream_call *u = c->calls, *next; u; u = next) {
        next = u->next;
        if (u->cancelled) {
            unlink_call(u);
            curl_loop_remove(c->loop, u->easy);
            call_free(u);
        }
    }
}

/* --- the client ----------------------------------------------------------------------------- */

struct upstream_client *upstream_client_new(struct event_base *base) {
    struct upstream_client *c = mem_calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->loop = curl_loop_new(base, call_done, c);
    c->reap = event_new(base, -1, 0, on_reap, c);
    if (!c->loop || !c->reap) {
        upstream_client_free(c);
        return NULL;
    }
    return c;
}

void upstream_client_free(struct upstream_client *c) {
    if (!c)
        return;
    while (c->calls) {
        struct upstream_call *u = c->calls;
        unlink_call(u);
        curl_loop_remove(c->loop, u->easy);
        call_free(u);
    }
    curl_loop_free(c->loop);
    if (c->reap)
        event_free(c->reap);
    mem_free(c);
}

/* a, b and c joined in a new string (mem_free it), or NULL on OOM. */
static char *join3(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = mem_calloc(1, n);
    if (s)
        snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static bool add_line(struct upstream_call *u, const char *name, const char *value) {
    char *line = join3(name, value[0] ? ": " : ":", value);
    struct curl_slist *h = line ? curl_slist_append(u->headers, line) : NULL;
    mem_free(line);
    if (h)
        u->headers = h;
    return h != NULL;
}

static bool set_method(CURL *e, enum evhttp_cmd_type method, const void *body, size_t len) {
    static const struct { enum evhttp_cmd_type m; const char *name; } names[] = {
        {EVHTTP_REQ_GET, "GET"}, {EVHTTP_REQ_POST, "POST"}, {EVHTTP_REQ_PUT, "PUT"},
        {EVHTTP_REQ_DELETE, "DELETE"}, {EVHTTP_REQ_PATCH, "PATCH"}, {EVHTTP_REQ_HEAD, "HEAD"},
        {EVHTTP_REQ_OPTIONS, "OPTIONS"}};
    const char *name = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].m == method)
            name = names[i].name;
    if (!name)
        return false;
    if (method == EVHTTP_REQ_HEAD)
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    if (body || method == EVHTTP_REQ_POST || method == EVHTTP_REQ_PUT ||
        method == EVHTTP_REQ_PATCH) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
        if (curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, body ? body : "") != CURLE_OK)
            return false;
    }
    return curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, name) == CURLE_OK;
}

/* The request's headers: Content-Type as given (or none), no Expect, the
 * forwarded ones. False on OOM. */
static bool set_headers(struct upstream_call *u, const char *content_type,
                        const struct evkeyvalq *from, const char *const *forward) {
    bool ok = add_line(u, "Expect", "") && add_line(u, "Content-Type", content_type ? content_type : "");
    for (size_t i = 0; ok && forward && forward[i] && from; i++) {
        const char *v = evhttp_find_header(from, forward[i]);
        if (v)
            ok = add_line(u, forward[i], v);
    }
    return ok && curl_easy_setopt(u->easy, CURLOPT_HTTPHEADER, u->headers) == CURLE_OK;
}

static bool set_options(struct upstream_call *u, const char *socket_path, const char *uri) {
    CURL *e = u->easy;
    char *url = join3("http://localhost", uri[0] == '/' ? "" : "/", uri);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, u);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, u);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, u->err);
    curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)u);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "tandem");
    bool ok = url && curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http") == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, socket_path) == CURLE_OK &&
              curl_easy_setopt(e, CURLOPT_URL, url) == CURLE_OK;
    mem_free(url);
    return ok;
}

struct upstream_call *upstream_start(struct upstream_client *c, const char *socket_path,
                                     enum evhttp_cmd_type method, const char *uri,
                                     const char *content_type, const void *body, size_t len,
                                     const struct evkeyvalq *from_headers,
                                     const char *const *forward, const struct upstream_ops *ops,
                                     void *user) {
    struct upstream_call *u = mem_calloc(1, sizeof *u);
    if (!u)
        return NULL;
    *u = (struct upstream_call){.c = c, .ops = ops, .user = user};
    TAILQ_INIT(&u->resp);
    u->body = evbuffer_new();
    u->easy = curl_easy_init();
    if (!u->body || !u->easy || !set_options(u, socket_path, uri) ||
        !set_method(u->easy, method, body, len) ||
        !set_headers(u, content_type, from_headers, forward) || !curl_loop_add(c->loop, u->easy)) {
        call_free(u);
        return NULL;
    }
    u->next = c->calls;
    if (c->calls)
        c->calls->prev = u;
    c->calls = u;
    return u;
}

void upstream_cancel(struct upstream_call *u) {
    if (!u || u->cancelled)
        return;
    struct upstream_client *c = u->c;
    if (c->depth) { /* inside a libcurl callback: on_reap removes it */
        u->cancelled = true;
        event_active(c->reap, 0, 0);
        return;
    }
    unlink_call(u);
    curl_loop_remove(c->loop, u->easy);
    call_free(u);
}
