/* Unit tests for upstream, the daemon's client of its engines: a real
 * libevent HTTP server listening on a unix socket in a private folder
 * stands in for llama-server, on the same event loop as the client. Each
 * test checks a point of the contract in upstream.h: the headers callback
 * (status, headers, abort), buffered and streamed (chunked) bodies, done
 * called once and never from inside upstream_start, no "Expect:" even for
 * a large body, Content-Type as given, forwarded headers, keep-alive reuse,
 * a cancel that closes the connection (also from inside a chunk callback),
 * and an engine that cannot be reached. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "serve/upstream.h"

/* --- the stand-in engine -------------------------------------------------------------------- */

struct engine {
    struct event_base *base;
    struct evhttp *http;
    char dir[64], sock[96];
    int requests, closes;
    struct evhttp_connection *last_conn;
    struct evhttp_request *held; /* a request left unanswered (GET /hold) */
    char seen_ct[64], seen_expect[64], seen_fwd[64];
    size_t seen_len;
};

static void on_conn_close(struct evhttp_connection *c, void *arg) {
    (void)c;
    ((struct engine *)arg)->closes++;
}

static void copy_header(struct evhttp_request *req, const char *name, char *out, size_t cap) {
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), name);
    snprintf(out, cap, "%s", v ? v : "(none)");
}

static void on_stream_tick(evutil_socket_t fd, short what, void *arg);

/* GET /hello: 200 "hello" with X-Test; POST /echo: the body back; GET /stream:
 * three chunks; GET /hold: no answer until the client goes. */
static void on_request(struct evhttp_request *req, void *arg) {
    struct engine *e = arg;
    e->requests++;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    e->last_conn = conn;
    evhttp_connection_set_closecb(conn, on_conn_close, e);
    const char *uri = evhttp_request_get_uri(req);
    struct evbuffer *out = evbuffer_new();
    copy_header(req, "Content-Type", e->seen_ct, sizeof e->seen_ct);
    copy_header(req, "Expect", e->seen_expect, sizeof e->seen_expect);
    copy_header(req, "X-Forward-Me", e->seen_fwd, sizeof e->seen_fwd);
    if (!strcmp(uri, "/hello")) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "X-Test", "1");
        evbuffer_add_printf(out, "hello");
        evhttp_send_reply(req, 200, "OK", out);
    } else if (!strcmp(uri, "/echo")) {
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        e->seen_len = evbuffer_get_length(in);
        evbuffer_add_buffer(out, in);
        evhttp_send_reply(req, 201, "Created", out);
    } else if (!strcmp(uri, "/stream")) {
        evhttp_send_reply_start(req, 200, "OK");
        evbuffer_add_printf(out, "data: 1\n\n");
        evhttp_send_reply_chunk(req, out);
        event_base_once(e->base, -1, EV_TIMEOUT, on_stream_tick, req, &(struct timeval){0, 20000});
    } else if (!strcmp(uri, "/hold")) {
        e->held = req;
    } else {
        evhttp_send_reply(req, 404, "Not Found", out);
    }
    evbuffer_free(out);
}

static int ticks;
static void on_stream_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct evhttp_request *req = arg;
    struct evbuffer *out = evbuffer_new();
    evbuffer_add_printf(out, "data: %d\n\n", ++ticks + 1);
    evhttp_send_reply_chunk(req, out);
    evbuffer_free(out);
    evhttp_send_reply_end(req);
}

static void engine_start(struct engine *e, struct event_base *base) {
    memset(e, 0, sizeof *e);
    e->base = base;
    snprintf(e->dir, sizeof e->dir, "/tmp/tandem-upstream-XXXXXX");
    cr_assert(mkdtemp(e->dir));
    snprintf(e->sock, sizeof e->sock, "%s/e0.sock", e->dir);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", e->sock);
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0);
    e->http = evhttp_new(base);
    evhttp_set_gencb(e->http, on_request, e);
    cr_assert_eq(evhttp_accept_socket(e->http, fd), 0);
}

static void engine_stop(struct engine *e) {
    evhttp_free(e->http);
    unlink(e->sock);
    rmdir(e->dir);
}

/* --- the client's side ---------------------------------------------------------------------- */

struct result {
    struct event_base *base;
    int dones, status, header_status, chunks;
    size_t body_len;
    char body[4096], streamed[256], error[128], x_test[16];
    bool abort_headers, cancel_in_chunk;
    struct upstream_call *call;
};

static bool on_headers(void *user, int status, const struct evkeyvalq *h) {
    struct result *r = user;
    r->header_status = status;
    const char *v = evhttp_find_header(h, "X-Test");
    snprintf(r->x_test, sizeof r->x_test, "%s", v ? v : "");
    return !r->abort_headers;
}

static void on_chunk(void *user, struct evbuffer *data) {
    struct result *r = user;
    r->chunks++;
    size_t n = strlen(r->streamed), len = evbuffer_get_length(data);
    if (n + len < sizeof r->streamed)
        evbuffer_copyout(data, r->streamed + n, len);
    if (r->cancel_in_chunk) {
        upstream_cancel(r->call);
        r->call = NULL;
        event_base_loopexit(r->base, &(struct timeval){0, 200000});
    }
}

static void on_done(void *user, int status, struct evbuffer *body, const char *error) {
    struct result *r = user;
    r->dones++;
    r->status = status;
    r->call = NULL;
    if (body) {
        r->body_len = evbuffer_get_length(body);
        evbuffer_copyout(body, r->body, sizeof r->body - 1);
    }
    snprintf(r->error, sizeof r->error, "%s", error ? error : "");
    event_base_loopexit(r->base, NULL);
}

static const struct upstream_ops ops = {.headers = on_headers, .done = on_done};
static const struct upstream_ops stream_ops = {.headers = on_headers, .chunk = on_chunk,
                                               .done = on_done};

struct fixture {
    struct event_base *base;
    struct engine engine;
    struct upstream_client *client;
};

static void setup(struct fixture *f) {
    f->base = event_base_new();
    engine_start(&f->engine, f->base);
    f->client = upstream_client_new(f->base);
    cr_assert(f->client);
}

static void teardown(struct fixture *f) {
    upstream_client_free(f->client);
    engine_stop(&f->engine);
    event_base_free(f->base);
}

static void run(struct fixture *f) {
    event_base_loopexit(f->base, &(struct timeval){5, 0}); /* a hung test fails, not hangs */
    event_base_dispatch(f->base);
}

static struct upstream_call *get(struct fixture *f, const char *uri,
                                 const struct upstream_ops *o, struct result *r) {
    r->base = f->base;
    r->call = upstream_start(f->client, f->engine.sock, EVHTTP_REQ_GET, uri, NULL, NULL, 0, NULL,
                             NULL, o, r);
    return r->call;
}

Test(upstream, a_buffered_answer_reaches_done_once_and_never_from_start) {
    struct fixture f;
    setup(&f);
    struct result r = {0};
    cr_assert(get(&f, "/hello", &ops, &r));
    cr_expect_eq(r.dones, 0, "done ran inside upstream_start");
    run(&f);
    cr_expect_eq(r.dones, 1);
    cr_expect_eq(r.status, 200);
    cr_expect_eq(r.header_status, 200);
    cr_expect_str_eq(r.x_test, "1");
    cr_expect_str_eq(r.body, "hello");
    cr_expect_str_eq(r.error, "");
    teardown(&f);
}

Test(upstream, a_post_sends_its_body_type_and_forwarded_headers_and_no_expect) {
    struct fixture f;
    setup(&f);
    size_t len = 2u << 20; /* libcurl would ask for 100-continue on a body this large */
    char *body = malloc(len);
    memset(body, 'x', len);
    struct evkeyvalq from;
    TAILQ_INIT(&from);
    evhttp_add_header(&from, "X-Forward-Me", "yes");
    evhttp_add_header(&from, "X-Not-Me", "no");
    const char *forward[] = {"X-Forward-Me", NULL};
    struct result r = {.base = f.base};
    r.call = upstream_start(f.client, f.engine.sock, EVHTTP_REQ_POST, "/echo", "application/json",
                            body, len, &from, forward, &ops, &r);
    cr_assert(r.call);
    free(body); /* copied */
    evhttp_clear_headers(&from);
    run(&f);
    cr_expect_eq(r.status, 201);
    cr_expect_eq(f.engine.seen_len, len);
    cr_expect_eq(r.body_len, len);
    cr_expect_str_eq(f.engine.seen_ct, "application/json");
    cr_expect_str_eq(f.engine.seen_expect, "(none)");
    cr_expect_str_eq(f.engine.seen_fwd, "yes");
    teardown(&f);
}

Test(upstream, a_post_without_a_type_sends_none) {
    struct fixture f;
    setup(&f);
    struct result r = {.base = f.base};
    r.call = upstream_start(f.client, f.engine.sock, EVHTTP_REQ_POST, "/echo", NULL, "{}", 2, NULL,
                            NULL, &ops, &r);
    run(&f);
    cr_expect_eq(r.status, 201);
    cr_expect_str_eq(r.body, "{}");
    cr_expect_str_eq(f.engine.seen_ct, "(none)");
    teardown(&f);
}

Test(upstream, a_chunked_answer_is_streamed_to_chunk) {
    struct fixture f;
    setup(&f);
    struct result r = {0};
    cr_assert(get(&f, "/stream", &stream_ops, &r));
    run(&f);
    cr_expect_eq(r.status, 200);
    cr_expect_geq(r.chunks, 2);
    cr_expect_str_eq(r.streamed, "data: 1\n\ndata: 2\n\n");
    cr_expect_str_eq(r.body, "", "a streamed body also reached done");
    teardown(&f);
}

Test(upstream, an_answer_with_a_length_is_buffered_even_with_a_chunk_callback) {
    struct fixture f;
    setup(&f);
    struct result r = {0};
    cr_assert(get(&f, "/hello", &stream_ops, &r));
    run(&f);
    cr_expect_eq(r.chunks, 0);
    cr_expect_str_eq(r.body, "hello");
    teardown(&f);
}

Test(upstream, headers_can_abort_the_exchange) {
    struct fixture f;
    setup(&f);
    struct result r = {.abort_headers = true};
    cr_assert(get(&f, "/hello", &ops, &r));
    run(&f);
    cr_expect_eq(r.dones, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.error, "aborted");
    teardown(&f);
}

Test(upstream, connections_are_kept_alive_and_reused) {
    struct fixture f;
    setup(&f);
    struct result r1 = {0}, r2 = {0};
    get(&f, "/hello", &ops, &r1);
    run(&f);
    struct evhttp_connection *first = f.engine.last_conn;
    get(&f, "/hello", &ops, &r2);
    run(&f);
    cr_expect_eq(r2.status, 200);
    cr_expect_eq(f.engine.requests, 2);
    cr_expect_eq(f.engine.closes, 0, "the first connection was closed");
    cr_expect_eq(f.engine.last_conn, first, "the second request came on a new connection");
    teardown(&f);
}

Test(upstream, cancel_closes_the_connection_and_calls_nothing_back) {
    struct fixture f;
    setup(&f);
    struct result r = {0};
    cr_assert(get(&f, "/hold", &ops, &r));
    for (int i = 0; i < 100 && !f.engine.held; i++)
        event_base_loop(f.base, EVLOOP_ONCE);
    cr_assert(f.engine.held, "the request never arrived");
    /* libevent's server stops reading once a request is in, so the engine's
     * side of the socket is watched here: readable with nothing to read =
     * the peer closed */
    int fd = bufferevent_getfd(evhttp_connection_get_bufferevent(f.engine.last_conn));
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char byte;
    cr_expect_eq(poll(&p, 1, 200), 0, "readable before the cancel");
    upstream_cancel(r.call);
    cr_expect_eq(poll(&p, 1, 5000), 1, "the engine did not see the hang-up");
    cr_expect_eq(recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT), 0);
    event_base_loop(f.base, EVLOOP_NONBLOCK);
    cr_expect_eq(r.dones, 0);
    teardown(&f);
}

Test(upstream, cancel_from_inside_a_chunk_callback) {
    struct fixture f;
    setup(&f);
    struct result r = {.cancel_in_chunk = true};
    cr_assert(get(&f, "/stream", &stream_ops, &r));
    run(&f);
    cr_expect_eq(r.chunks, 1);
    cr_expect_eq(r.dones, 0);
    teardown(&f);
}

Test(upstream, an_engine_that_is_not_there_fails_in_done) {
    struct fixture f;
    setup(&f);
    struct result r = {.base = f.base};
    r.call = upstream_start(f.client, "/tmp/tandem-upstream-none/e9.sock", EVHTTP_REQ_GET,
                            "/health", NULL, NULL, 0, NULL, NULL, &ops, &r);
    cr_assert(r.call);
    cr_expect_eq(r.dones, 0);
    run(&f);
    cr_expect_eq(r.dones, 1);
    cr_expect_eq(r.status, 0);
    cr_expect_str_eq(r.error, "cannot connect to the engine");
    teardown(&f);
}

Test(upstream, freeing_the_client_ends_calls_in_flight_without_callbacks) {
    struct fixture f;
    setup(&f);
    struct result r = {0};
    cr_assert(get(&f, "/hold", &ops, &r));
    for (int i = 0; i < 100 && !f.engine.held; i++)
        event_base_loop(f.base, EVLOOP_ONCE);
    upstream_client_free(f.client);
    f.client = NULL;
    cr_expect_eq(r.dones, 0);
    teardown(&f);
}
