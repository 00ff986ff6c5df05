/* Unit tests for http: a detached request (http_req_new_detached), the
 * socket-free twin of a server request that tests/fuzz/fuzz_http.c drives
 * the router with. It must read like the request libevent would have parsed
 * (method, target, decoded path, headers, body and its limit) and deliver
 * exactly one answer, whole or streamed, with the headers the handler set.
 * The server side is exercised over real sockets by tests/e2e/. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/queue.h>

#include "serve/http.h"

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
    cr_expect_not(http_req_over_connection_limit(r));
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
