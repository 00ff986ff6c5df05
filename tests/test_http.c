/* Unit tests for http: a detached request (http_req_new_detached), the
 * socket-free twin of a server request that tests/fuzz/fuzz_http.c drives
 * the router with. It must read like the request libevent would have parsed
 * (method, target, decoded path, headers, body and its limit) and deliver
 * exactly one answer, whole or streamed, with the headers the handler set.
 *
 * Then the server over real loopback sockets, the client and the server's
 * loop in one process (the loop is run for a while between the client's
 * writes and reads): the head parser (http_head.c), the head hook (admit,
 * refuse before the body, malformed and oversized heads, pipelined
 * requests), the connection cap counted at accept with idle connections
 * closed first, and the accept pause at the descriptor limit (in a child
 * with a low RLIMIT_NOFILE). The daemon's own wiring is tests/e2e/
 * test_security_limits.py. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "serve/http.h"
#include "serve/http_head.h"

struct answer {
    int calls, status;
    char body[256];
    size_t len;
    char content_type[64], extra[64];
};

static void on_reply(void *user, int status, const struct evkeyvalq *headers, const void *body,
                     size_t len) {
    struct answer *a = user;
    const char *ct = evhttp_find_header(headers, "Content-Type");
    const char *extra = evhttp_find_header(headers, "X-Extra");
    a->calls++;
    a->status = status;
    cr_assert_lt(len, sizeof a->body);
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
    snprintf(a->content_type, sizeof a->content_type, "%s", ct ? ct : "");
    snprintf(a->extra, sizeof a->extra, "%s", extra ? extra : "");
}

/* A detached request of method on uri with one header and body. */
static tandem_err make(enum evhttp_cmd_type method, const char *uri, const char *hname,
                       const char *hvalue, const char *body, uint64_t max, struct answer *a,
                       struct http_req **r) {
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    if (hname)
        cr_assert_eq(evhttp_add_header(&h, hname, hvalue), 0);
    struct http_detached_params p = {.method = method, .uri = uri, .headers = &h, .body = body,
                                     .len = body ? strlen(body) : 0, .max_body_bytes = max,
                                     .reply = on_reply, .user = a};
    tandem_err e = http_req_new_detached(&p, r);
    evhttp_clear_headers(&h);
    return e;
}

Test(http, a_detached_request_reads_as_libevent_would_have_parsed_it) {
    struct answer a = {0};
    struct http_req *r;
    cr_assert_eq(make(EVHTTP_REQ_POST, "/v1/%73ystemone?x=1", "X-Request-Id", "abc", "{\"a\":1}",
                      100, &a, &r),
                 TANDEM_OK);
    size_t len;
    cr_expect_eq(http_req_method(r), EVHTTP_REQ_POST);
    cr_expect_str_eq(http_req_method_name(r), "POST");
    cr_expect_str_eq(http_req_uri(r), "/v1/%73ystemone?x=1");
    cr_expect_str_eq(http_req_path(r), "/v1/systemone", "the path is decoded, without the query");
    cr_expect_str_eq(http_req_header(r, "x-request-id"), "abc", "header names are case-blind");
    cr_expect_null(http_req_header(r, "Authorization"));
    cr_expect_str_eq(http_req_body(r, &len), "{\"a\":1}");
    cr_expect_eq(len, 7);
    cr_expect_not(http_req_body_too_big(r));
    cr_expect_not(http_req_gone(r));
    http_req_add_header(r, "X-Extra", "yes");
    http_req_reply(r, 201, "application/json", "{}", 2);
    cr_expect_eq(a.calls, 1, "the answer is delivered once");
    cr_expect_eq(a.status, 201);
    cr_expect_str_eq(a.body, "{}");
    cr_expect_str_eq(a.content_type, "application/json");
    cr_expect_str_eq(a.extra, "yes");
}

Test(http, a_body_over_the_limit_is_too_big_and_not_kept) {
    struct answer a = {0};
    struct http_req *r;
    cr_assert_eq(make(EVHTTP_REQ_POST, "/", NULL, NULL, "12345678901", 10, &a, &r), TANDEM_OK);
    size_t len;
    cr_expect(http_req_body_too_big(r));
    cr_expect_str_eq(http_req_body(r, &len), "");
    cr_expect_eq(len, 0);
    http_req_reply(r, 413, NULL, NULL, 0);
    cr_expect_eq(a.calls, 1);
    cr_expect_eq(a.len, 0);
}

Test(http, a_streamed_answer_arrives_joined_at_its_end) {
    struct answer a = {0};
    struct http_req *r;
    cr_assert_eq(make(EVHTTP_REQ_GET, "/stream", NULL, NULL, NULL, 10, &a, &r), TANDEM_OK);
    http_req_stream_start(r, 200, "text/event-stream");
    struct evbuffer *b = evbuffer_new();
    cr_assert_not_null(b);
    static const char *const chunks[] = {"data: 1\n\n", "data: 2\n\n"};
    for (size_t i = 0; i < 2; i++) {
        evbuffer_add(b, chunks[i], strlen(chunks[i]));
        http_req_stream_chunk(r, b);
        cr_expect_eq(evbuffer_get_length(b), 0, "a chunk is drained");
        cr_expect_eq(a.calls, 0, "nothing is delivered before the end");
    }
    evbuffer_free(b);
    http_req_stream_end(r);
    cr_expect_eq(a.calls, 1);
    cr_expect_eq(a.status, 200);
    cr_expect_str_eq(a.body, "data: 1\n\ndata: 2\n\n");
    cr_expect_str_eq(a.content_type, "text/event-stream");
}

Test(http, what_libevent_refuses_is_not_made) {
    struct answer a = {0};
    struct http_req *r = (struct http_req *)&a;
    cr_expect_eq(make(EVHTTP_REQ_GET, "http://[::1/", NULL, NULL, NULL, 10, &a, &r),
                 TANDEM_ERR_FORMAT, "a request-target that does not parse");
    cr_expect_null(r);
    cr_expect_eq(a.calls, 0);
}

/* --- the head parser -------------------------------------------------------------------- */

static tandem_err parse(const char *head, struct http_head *h) {
    size_t scan = 0, end = http_head_end(head, strlen(head), &scan);
    cr_assert_gt(end, 0, "the head's end is found: %s", head);
    return http_head_parse(head, end, h, NULL, 0);
}

Test(http_head, a_head_parses_as_evhttp_reads_it) {
    struct http_head h;
    cr_assert_eq(parse("POST /v1/x?a=1 HTTP/1.1\r\nHost: a\r\nX-A:  v w \t\r\nx-a: 2\r\n\r\n", &h),
                 TANDEM_OK);
    cr_expect_str_eq(h.method, "POST");
    cr_expect_str_eq(h.target, "/v1/x?a=1");
    cr_expect_eq(h.minor, 1);
    cr_expect_str_eq(evhttp_find_header(&h.headers, "x-a"), "v w",
                     "leading spaces and trailing blanks go; the first of duplicates wins");
    cr_expect_str_eq(evhttp_find_header(&h.headers, "HOST"), "a");
    http_head_deinit(&h);
    cr_assert_eq(parse("GET / HTTP/1.0\nAuthorization: Bearer k\n\n", &h), TANDEM_OK,
                 "lines may end in a bare LF, as evhttp takes them");
    cr_expect_eq(h.minor, 0);
    cr_expect_str_eq(evhttp_find_header(&h.headers, "Authorization"), "Bearer k");
    http_head_deinit(&h);
}

Test(http_head, what_is_ambiguous_is_refused) {
    static const char *const bad[] = {
        "\r\n",                                         /* no request line */
        "GET  / HTTP/1.1\r\n\r\n",                       /* two spaces */
        "GET / HTTP/1.1 \r\n\r\n",                       /* a trailing space */
        "GET /a b HTTP/1.1\r\n\r\n",                     /* a space in the target */
        "GET / HTTP/2.0\r\n\r\n",                        /* a version evhttp reads otherwise */
        "GET / HTTP/1.1\r\nBad Header\r\n\r\n",          /* no colon */
        "GET / HTTP/1.1\r\nA B: c\r\n\r\n",              /* a space in the name */
        "GET / HTTP/1.1\r\n: c\r\n\r\n",                 /* no name */
        "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",          /* a folded line */
        "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",             /* a lone CR */
        "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",            /* a control byte */
        "GET http://[::1/ HTTP/1.1\r\n\r\n",             /* a target evhttp cannot parse */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct http_head h;
        cr_expect_eq(parse(bad[i], &h), TANDEM_ERR_FORMAT, "refused: %s", bad[i]);
        http_head_deinit(&h);
    }
    struct http_head h;
    cr_expect_eq(parse("BREW / HTTP/1.1\r\n\r\n", &h), TANDEM_ERR_UNSUPPORTED);
    http_head_deinit(&h);
    static const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
    size_t scan = 0, end = http_head_end(nul, sizeof nul - 1, &scan);
    cr_expect_eq(http_head_parse(nul, end, &h, NULL, 0), TANDEM_ERR_FORMAT, "a NUL in a value");
    http_head_deinit(&h);
}

Test(http_head, an_unknown_method_keeps_its_head_for_the_refusal) {
    struct http_head h;
    char err[64] = "";
    static const char query[] = "QUERY /v1/x HTTP/1.1\r\nHost: a\r\nx-request-id: q-1\r\n\r\n";
    size_t scan = 0, end = http_head_end(query, sizeof query - 1, &scan);
    cr_assert_eq(http_head_parse(query, end, &h, err, sizeof err), TANDEM_ERR_UNSUPPORTED);
    cr_expect_str_eq(err, "unknown method");
    cr_expect_null(h.method);
    cr_expect_str_eq(h.target, "/v1/x");
    cr_expect_str_eq(evhttp_find_header(&h.headers, "x-request-id"), "q-1");
    http_head_deinit(&h);
    /* what is wrong with the rest of the head decides first */
    cr_expect_eq(parse("QUERY / HTTP/2.0\r\n\r\n", &h), TANDEM_ERR_FORMAT);
    http_head_deinit(&h);
    cr_expect_eq(parse("QUERY / HTTP/1.1\r\nA b\r\n\r\n", &h), TANDEM_ERR_FORMAT);
    http_head_deinit(&h);
    cr_expect_eq(parse("QU(ERY / HTTP/1.1\r\n\r\n", &h), TANDEM_ERR_FORMAT);
    http_head_deinit(&h);
}

Test(http, a_request_id_is_the_clients_when_it_is_a_short_token) {
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    char id[HTTP_REQUEST_ID_MAX];
    http_request_id(NULL, id);
    cr_expect_eq(strlen(id), 36);
    cr_expect_eq(strncmp(id, "req_", 4), 0);
    cr_expect_eq(strspn(id + 4, "0123456789abcdef"), 32, "%s", id);
    evhttp_add_header(&h, "x-typesafe-request-id", "ts-1");
    http_request_id(&h, id);
    cr_expect_str_eq(id, "ts-1");
    evhttp_add_header(&h, "x-request-id", "has space");
    http_request_id(&h, id);
    cr_expect_str_eq(id, "ts-1", "an x-request-id that is not a token is passed over");
    evhttp_clear_headers(&h);
    evhttp_add_header(&h, "x-request-id", "r-1");
    evhttp_add_header(&h, "x-typesafe-request-id", "ts-1");
    http_request_id(&h, id);
    cr_expect_str_eq(id, "r-1");
    evhttp_clear_headers(&h);
}

Test(http_head, the_end_is_found_across_pieces) {
    const char *head = "GET / HTTP/1.1\r\nA: b\r\n\r\nBODY";
    size_t scan = 0;
    for (size_t n = 0; n < 24; n++)
        cr_expect_eq(http_head_end(head, n, &scan), 0, "not in with %zu bytes", n);
    cr_expect_eq(http_head_end(head, strlen(head), &scan), 24);
    scan = 0;
    cr_expect_eq(http_head_end("A\n\r\nX", 5, &scan), 4, "a CRLF empty line after LF lines");
}

/* --- the server, over sockets ----------------------------------------------------------- */

struct server_fixture {
    struct event_base *base;
    struct http_server *s;
    int heads, handled;
    char method[16], target[256], x_test[64];
};

/* Refuses targets under /deny with 401, admits the rest. */
static int test_head(void *user, const char *method, const char *target,
                     const struct evkeyvalq *headers, bool over_limit, char *body, size_t cap,
                     char *id) {
    (void)id;
    struct server_fixture *f = user;
    const char *x = evhttp_find_header(headers, "X-Test");
    f->heads++;
    snprintf(f->method, sizeof f->method, "%s", method);
    snprintf(f->target, sizeof f->target, "%s", target);
    snprintf(f->x_test, sizeof f->x_test, "%s", x ? x : "");
    if (over_limit) {
        snprintf(body, cap, "{\"error\":{\"type\":\"unavailable_error\",\"message\":"
                 "\"too many connections (limits.max_connections)\"}}");
        return 503;
    }
    if (strncmp(target, "/deny", 5))
        return 0;
    snprintf(body, cap, "{\"error\":\"no\"}");
    return 401;
}

static void test_handler(struct http_req *r, void *user) {
    struct server_fixture *f = user;
    f->handled++;
    size_t len;
    http_req_body(r, &len);
    char text[64];
    int n = snprintf(text, sizeof text, "ok %s %zu", http_req_path(r), len);
    http_req_reply(r, 200, "text/plain", text, (size_t)n);
}

static void start(struct server_fixture *f, uint32_t max_connections, int64_t header_timeout_ms) {
    signal(SIGPIPE, SIG_IGN);
    *f = (struct server_fixture){.base = event_base_new()};
    cr_assert_not_null(f->base);
    struct http_server_params p = {.host = "127.0.0.1", .max_body_bytes = 1 << 20,
                                   .header_timeout_ms = header_timeout_ms,
                                   .idle_timeout_ms = 10000, .max_connections = max_connections,
                                   .head = test_head, .head_user = f};
    char err[256];
    cr_assert_eq(http_server_new(f->base, &p, test_handler, f, &f->s, err, sizeof err), TANDEM_OK,
                 "%s", err);
}

static void stop(struct server_fixture *f) {
    http_server_free(f->s);
    event_base_free(f->base);
}

/* Runs the server's loop for ms. */
static void pump(struct server_fixture *f, int ms) {
    struct timeval tv = {0, ms * 1000};
    event_base_loopexit(f->base, &tv);
    event_base_dispatch(f->base);
}

static int client(const struct server_fixture *f) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(f->s)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void say(int fd, const char *text) {
    cr_assert_eq(send(fd, text, strlen(text), MSG_NOSIGNAL), (ssize_t)strlen(text));
}

/* What fd has received so far (NUL-terminated in out[cap]); *closed tells
 * whether the server ended the connection. */
static size_t heard(int fd, char *out, size_t cap, bool *closed) {
    size_t n = 0;
    *closed = false;
    for (;;) {
        ssize_t got = recv(fd, out + n, cap - 1 - n, 0);
        if (got > 0 && (n += (size_t)got) < cap - 1)
            continue;
        *closed = got == 0 || (got < 0 && errno != EAGAIN);
        break;
    }
    out[n] = '\0';
    return n;
}

static unsigned count(const char *hay, const char *needle) {
    unsigned n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

Test(http_server, an_admitted_head_reaches_the_handler) {
    struct server_fixture f;
    start(&f, 8, 5000);
    int fd = client(&f);
    say(fd, "POST /ok HTTP/1.1\r\nX-Test: yes\r\nContent-Length: 3\r\n\r\nabc");
    pump(&f, 100);
    char out[4096];
    bool closed;
    heard(fd, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 200") == out, "%s", out);
    cr_expect(strstr(out, "ok /ok 3"), "%s", out);
    cr_expect_not(closed, "kept alive");
    cr_expect_eq(f.heads, 1);
    cr_expect_eq(f.handled, 1);
    cr_expect_str_eq(f.method, "POST");
    cr_expect_str_eq(f.target, "/ok");
    cr_expect_str_eq(f.x_test, "yes");
    close(fd);
    stop(&f);
}

Test(http_server, a_refused_head_is_answered_before_its_body_and_never_handled) {
    struct server_fixture f;
    start(&f, 8, 5000);
    int fd = client(&f);
    say(fd, "POST /deny HTTP/1.1\r\nContent-Length: 7340032\r\n\r\n");
    pump(&f, 100);
    char out[4096];
    bool closed;
    heard(fd, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 401 Unauthorized\r\n") == out, "%s", out);
    cr_expect(strstr(out, "\r\nWWW-Authenticate: Bearer\r\n"), "%s", out);
    cr_expect(strstr(out, "\r\nConnection: close\r\n"), "%s", out);
    cr_expect(strstr(out, "\r\n\r\n{\"error\":\"no\"}"), "the hook's body: %s", out);
    cr_expect(closed, "the server stops sending after the answer");
    /* the body the client still sends is read and dropped, never handled */
    static char chunk[16384];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 64; i++) {
        (void)!send(fd, chunk, sizeof chunk, MSG_NOSIGNAL);
        pump(&f, 2);
    }
    pump(&f, 50);
    cr_expect_eq(f.handled, 0);
    cr_expect_eq(f.heads, 1);
    close(fd);
    stop(&f);
}

Test(http_server, malformed_and_oversized_heads_are_refused_without_the_hook) {
    struct server_fixture f;
    start(&f, 8, 5000);
    int bad = client(&f), nul = client(&f), big = client(&f);
    say(bad, "GET /ok HTTP/1.1\r\nBad Header\r\n\r\n");
    static const char with_nul[] = "GET /ok HTTP/1.1\r\nX-Test: a\0b\r\n\r\n";
    cr_assert_eq(send(nul, with_nul, sizeof with_nul - 1, 0), (ssize_t)sizeof with_nul - 1);
    say(big, "GET /ok HTTP/1.1\r\n");
    char line[1024];
    memset(line, 'a', sizeof line);
    memcpy(line, "X-Pad: ", 7);
    memcpy(line + sizeof line - 2, "\r\n", 2);
    for (int i = 0; i < 70; i++) { /* 70 KiB of header lines, no end */
        cr_assert_eq(send(big, line, sizeof line, MSG_NOSIGNAL), (ssize_t)sizeof line);
        pump(&f, 2);
    }
    pump(&f, 100);
    char out[4096];
    bool closed;
    heard(bad, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 400 Bad Request\r\n") == out, "%s", out);
    cr_expect(strstr(out, "\"type\":\"invalid_request_error\""), "tandem's shape: %s", out);
    cr_expect(closed);
    heard(nul, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 400 ") == out, "a NUL: %s", out);
    heard(big, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 431 ") == out, "%s", out);
    cr_expect_eq(f.heads, 0);
    cr_expect_eq(f.handled, 0);
    close(bad);
    close(nul);
    close(big);
    stop(&f);
}

Test(http_server, pipelined_requests_are_each_checked) {
    struct server_fixture f;
    start(&f, 8, 5000);
    int fd = client(&f);
    say(fd, "GET /ok HTTP/1.1\r\n\r\nGET /ok2 HTTP/1.1\r\n\r\n"
            "POST /deny HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
            "GET /ok3 HTTP/1.1\r\n\r\n");
    pump(&f, 200);
    char out[8192];
    bool closed;
    heard(fd, out, sizeof out, &closed);
    cr_expect_eq(count(out, "HTTP/1.1 200"), 2, "%s", out);
    cr_expect(strstr(out, "ok /ok2 0"), "%s", out);
    char *deny = strstr(out, "HTTP/1.1 401");
    cr_expect(deny && deny > strstr(out, "ok /ok2"), "the refusal comes after the answers: %s",
              out);
    cr_expect_eq(f.handled, 2, "the refused request and what follows it are never handled");
    cr_expect_eq(f.heads, 3);
    cr_expect(closed);
    close(fd);
    stop(&f);
}

Test(http_server, the_cap_closes_idle_connections_first) {
    struct server_fixture f;
    start(&f, 2, 5000);
    int a = client(&f), b = client(&f);
    say(a, "GET /a HTTP/1.1\r\n\r\n");
    pump(&f, 50);
    say(b, "GET /b HTTP/1.1\r\n\r\n");
    pump(&f, 50);
    char out[4096];
    bool closed;
    heard(a, out, sizeof out, &closed);
    heard(b, out, sizeof out, &closed);
    int c = client(&f); /* a and b are idle: a, the older, makes room */
    say(c, "GET /c HTTP/1.1\r\n\r\n");
    pump(&f, 100);
    heard(c, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 200") == out, "%s", out);
    heard(a, out, sizeof out, &closed);
    cr_expect(closed, "the oldest idle connection was closed");
    heard(b, out, sizeof out, &closed);
    cr_expect_not(closed, "the newer idle one stays");
    cr_expect_eq(f.handled, 3);
    close(a);
    close(b);
    close(c);
    stop(&f);
}

Test(http_server, past_the_cap_with_none_idle_a_connection_gets_503_unhandled) {
    struct server_fixture f;
    start(&f, 2, 5000);
    int a = client(&f), b = client(&f); /* reading a head: busy, not idle */
    say(a, "GET /a HTTP/1.1\r\n");
    pump(&f, 50);
    int c = client(&f);
    say(c, "GET /c HTTP/1.1\r\n\r\n");
    pump(&f, 100);
    char out[4096];
    bool closed;
    heard(c, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 503 Service Unavailable\r\n") == out, "%s", out);
    cr_expect(strstr(out, "\r\nConnection: close\r\n"), "%s", out);
    cr_expect(strstr(out, "limits.max_connections"), "%s", out);
    cr_expect(closed);
    cr_expect_eq(f.heads, 1, "the hook judges it, told it is over the limit");
    say(a, "\r\n"); /* a and b still work */
    say(b, "GET /b HTTP/1.1\r\n\r\n");
    pump(&f, 100);
    heard(a, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 200") == out, "%s", out);
    heard(b, out, sizeof out, &closed);
    cr_expect(strstr(out, "HTTP/1.1 200") == out, "%s", out);
    cr_expect_eq(f.handled, 2);
    close(a);
    close(b);
    close(c);
    stop(&f);
}

/* The child's side of the descriptor test: serves for 1.5 s with a
 * descriptor limit just above what it holds, under a backlog of
 * connections, and reports its CPU time (ms) through out. */
static void serve_at_the_limit(int report, int log_fd) {
    struct server_fixture f;
    start(&f, 1000, 300);
    uint16_t port = http_server_port(f.s);
    dup2(log_fd, 2);
    int next = dup(0);
    close(next);
    struct rlimit rl = {(rlim_t)next + 2, (rlim_t)next + 2}; /* two connections, then EMFILE */
    setrlimit(RLIMIT_NOFILE, &rl);
    (void)!write(report, &port, sizeof port);
    struct rusage r0, r1;
    pump(&f, 200); /* the client connects meanwhile */
    getrusage(RUSAGE_SELF, &r0);
    pump(&f, 1500);
    getrusage(RUSAGE_SELF, &r1);
    long ms = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) *
                  1000 +
              (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
               r0.ru_stime.tv_usec) / 1000;
    (void)!write(report, &ms, sizeof ms);
    (void)!write(report, &f.handled, sizeof f.handled);
    _exit(0);
}

Test(http_server, at_the_descriptor_limit_accepting_pauses_instead_of_spinning) {
    int report[2];
    cr_assert_eq(pipe(report), 0);
    FILE *log = tmpfile();
    cr_assert_not_null(log);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (!pid)
        serve_at_the_limit(report[1], fileno(log));
    uint16_t port;
    cr_assert_eq(read(report[0], &port, sizeof port), (ssize_t)sizeof port);
    int fds[20];
    for (int i = 0; i < 20; i++) { /* they wait in the listen backlog */
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(fds[i], (struct sockaddr *)&a, sizeof a), 0);
        say(fds[i], "GET /x HTTP/1.1\r\n\r\n");
    }
    long cpu_ms;
    int handled;
    cr_assert_eq(read(report[0], &cpu_ms, sizeof cpu_ms), (ssize_t)sizeof cpu_ms);
    cr_assert_eq(read(report[0], &handled, sizeof handled), (ssize_t)sizeof handled);
    waitpid(pid, NULL, 0);
    cr_expect_lt(cpu_ms, 300, "CPU over 1.5 s at the limit: %ld ms", cpu_ms);
    cr_expect_geq(handled, 2, "it served what it could accept");
    fflush(log);
    rewind(log);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, log);
    text[n] = '\0';
    cr_expect_leq(count(text, "\n"), 2, "one line per episode: %s", text);
    cr_expect(strstr(text, "Too many open files"), "the cause is logged: %s", text);
    for (int i = 0; i < 20; i++)
        close(fds[i]);
}
