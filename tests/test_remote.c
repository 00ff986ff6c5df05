/* Unit tests for remote: real libevent evhttp servers on 127.0.0.1 ephemeral
 * ports share the test's event_base with the module, so every transfer,
 * failover and health poll goes over real sockets. Each server answers per
 * its mode (200 JSON, 503, 429, 400, 504, not JSON, a huge body, a redirect,
 * a delayed answer) and records what it received; a port with nothing
 * listening stands for a dead upstream. The loop runs until the callback (or
 * a condition) holds, under a safety timeout so no test can hang. */
#include <criterion/criterion.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "serve/prom.h"
#include "serve/remote.h"

enum mode { M_OK, M_503, M_503_TEXT, M_429, M_400, M_504, M_NOTJSON, M_HUGE, M_REDIRECT, M_SLOW };

#define HUGE_BYTES 100000

struct srv {
    struct evhttp *http;
    uint16_t port;
    char url[64];
    enum mode mode;
    int health;               /* what /health answers */
    int delay_ms;             /* M_SLOW */
    char location[128];       /* M_REDIRECT */
    int hits, health_hits;    /* requests other than /health, and /health */
    char path[128], request_id[64], auth[128], envoy[32], ctype[64], body[256];
    uint16_t peer_ports[8];   /* client ports of the first requests */
    struct slow {
        struct srv *s;
        struct event *ev;
        struct evhttp_request *req;
    } slow[8];                /* delayed answers, one timer each */
    int n_slow;
};

struct got {
    int n;
    int status;
    bool from_upstream;
    char body[512];
    size_t len;
    bool upstream_null;
    char upstream[128];
    unsigned attempts;
    char error[2048];
};

static struct event_base *base;
static struct remote *rem;
static struct srv *servers[8];
static size_t n_servers;

/* --- servers ------------------------------------------------------------------------------ */

static void reply(struct evhttp_request *req, int code, const char *ctype, const char *body,
                  size_t len) {
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, body, len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, "x", b);
    evbuffer_free(b);
}

static void reply_json(struct evhttp_request *req, int code, const char *body) {
    reply(req, code, "application/json", body, strlen(body));
}

static void add_ms(struct event *ev, int ms) {
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

static void on_slow(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct slow *w = arg;
    reply_json(w->req, 200, "{\"slow\":true}");
    w->req = NULL;
}

static void answer_later(struct srv *s, struct evhttp_request *req) {
    cr_assert_lt(s->n_slow, 8);
    struct slow *w = &s->slow[s->n_slow++];
    *w = (struct slow){.s = s, .req = req, .ev = evtimer_new(base, on_slow, w)};
    add_ms(w->ev, s->delay_ms);
}

static void copy_header(struct evhttp_request *req, const char *name, char *out, size_t n) {
    const char *v = evhttp_find_header(evhttp_request_get_input_headers(req), name);
    snprintf(out, n, "%s", v ? v : "");
}

static void record(struct srv *s, struct evhttp_request *req) {
    snprintf(s->path, sizeof s->path, "%s", evhttp_request_get_uri(req));
    copy_header(req, "x-request-id", s->request_id, sizeof s->request_id);
    copy_header(req, "Authorization", s->auth, sizeof s->auth);
    copy_header(req, "x-envoy-expected-rq-timeout-ms", s->envoy, sizeof s->envoy);
    copy_header(req, "Content-Type", s->ctype, sizeof s->ctype);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t n = evbuffer_get_length(in) < sizeof s->body - 1 ? evbuffer_get_length(in)
                                                             : sizeof s->body - 1;
    evbuffer_copyout(in, s->body, n);
    s->body[n] = '\0';
    char *addr;
    uint16_t port;
    evhttp_connection_get_peer(evhttp_request_get_connection(req), &addr, &port);
    if (s->hits < 8)
        s->peer_ports[s->hits] = port;
    s->hits++;
}

static void answer_huge(struct evhttp_request *req) {
    char *big = malloc(HUGE_BYTES + 16);
    memset(big, 'x', HUGE_BYTES + 16);
    memcpy(big, "{\"x\":\"", 6);
    memcpy(big + HUGE_BYTES + 14, "\"}", 2);
    reply(req, 200, "application/json", big, HUGE_BYTES + 16);
    free(big);
}

static void handle(struct evhttp_request *req, void *arg) {
    struct srv *s = arg;
    if (!strcmp(evhttp_request_get_uri(req), "/health")) {
        s->health_hits++;
        reply_json(req, s->health, "{\"status\":\"?\"}");
        return;
    }
    record(s, req);
    switch (s->mode) {
    case M_OK: reply_json(req, 200, "{\"answers\":[]}"); break;
    case M_503: reply_json(req, 503, "{\"error\":\"busy\"}"); break;
    case M_503_TEXT: reply(req, 503, "text/html", "<h1>down</h1>", 13); break;
    case M_429: reply_json(req, 429, "{\"error\":\"slow down\"}"); break;
    case M_400: reply_json(req, 400, "{\"error\":\"bad\"}"); break;
    case M_504: reply_json(req, 504, "{\"error\":\"late\"}"); break;
    case M_NOTJSON: reply(req, 200, "text/plain", "hello", 5); break;
    case M_HUGE: answer_huge(req); break;
    case M_REDIRECT:
        evhttp_add_header(evhttp_request_get_output_headers(req), "Location", s->location);
        reply_json(req, 302, "{}");
        break;
    case M_SLOW:
        answer_later(s, req);
        break;
    }
}

static uint16_t fd_port(int fd) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static struct srv *srv_new(enum mode mode) {
    struct srv *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->mode = mode;
    s->health = 200;
    s->delay_ms = 3000;
    s->http = evhttp_new(base);
    evhttp_set_gencb(s->http, handle, s);
    struct evhttp_bound_socket *h = evhttp_bind_socket_with_handle(s->http, "127.0.0.1", 0);
    cr_assert_not_null(h);
    s->port = fd_port(evhttp_bound_socket_get_fd(h));
    snprintf(s->url, sizeof s->url, "http://127.0.0.1:%u", s->port);
    servers[n_servers++] = s;
    return s;
}

/* A URL where nothing listens: a port bound, then released. */
static const char *dead_url(void) {
    static char url[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%u", fd_port(fd));
    close(fd);
    return url;
}

/* --- the loop ----------------------------------------------------------------------------- */

static void setup(void) {
    signal(SIGPIPE, SIG_IGN);
    base = event_base_new();
    cr_assert_not_null(base);
}

static void teardown(void) {
    remote_free(rem);
    rem = NULL;
    for (size_t i = 0; i < n_servers; i++) {
        for (int k = 0; k < servers[i]->n_slow; k++)
            event_free(servers[i]->slow[k].ev);
        evhttp_free(servers[i]->http);
        free(servers[i]);
    }
    n_servers = 0;
    event_base_free(base);
}

TestSuite(remote, .init = setup, .fini = teardown, .timeout = 30);

static void on_expire(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    *(bool *)arg = true;
}

/* Runs the loop until cond(arg) holds or ms pass; returns cond(arg). */
static bool spin_until(bool (*cond)(const void *), const void *arg, int ms) {
    bool expired = false;
    struct event *t = evtimer_new(base, on_expire, &expired);
    add_ms(t, ms);
    while (!(cond && cond(arg)) && !expired)
        event_base_loop(base, EVLOOP_ONCE);
    event_free(t);
    return cond && cond(arg);
}

static void spin(int ms) { spin_until(NULL, NULL, ms); }

static bool got_done(const void *arg) { return ((const struct got *)arg)->n > 0; }

static void on_done(void *user, const struct remote_result *res) {
    struct got *g = user;
    g->n++;
    g->status = res->status;
    g->from_upstream = res->from_upstream;
    g->len = res->len;
    if (res->body)
        snprintf(g->body, sizeof g->body, "%.*s", (int)res->len, res->body);
    g->upstream_null = res->upstream == NULL;
    snprintf(g->upstream, sizeof g->upstream, "%s", res->upstream ? res->upstream : "");
    g->attempts = res->attempts;
    snprintf(g->error, sizeof g->error, "%s", res->error ? res->error : "");
}

/* --- the module --------------------------------------------------------------------------- */

struct model_opts {
    const char *key;
    int64_t timeout_ms;
    const char *health;
    int64_t interval_ms;
    uint64_t max_bytes;
    struct prom *metrics;
};

static size_t open_model(const char *const *urls, size_t n, struct model_opts o) {
    if (!rem) {
        struct remote_params p = {.health_interval_ms = o.interval_ms ? o.interval_ms : 1000,
                                  .max_response_bytes = o.max_bytes ? o.max_bytes : 1 << 20,
                                  .metrics = o.metrics};
        rem = remote_new(base, &p);
        cr_assert_not_null(rem);
    }
    struct remote_model_spec spec = {.name = "m", .urls = urls, .n_urls = n, .api_key = o.key,
                                     .timeout_ms = o.timeout_ms, .health_path = o.health};
    size_t idx = 99;
    cr_assert_eq(remote_add_model(rem, &spec, &idx), TANDEM_OK);
    return idx;
}

static const char *BODY = "{\"model\":\"m\",\"questions\":[]}";

static struct remote_call *start(size_t idx, struct got *g, int64_t deadline, const char *id) {
    struct remote_call *c = remote_call_start(rem, idx, "/v1/systemone", BODY, strlen(BODY), id,
                                              deadline, on_done, g);
    cr_assert_not_null(c);
    return c;
}

/* One call, run to its end. */
static void call(size_t idx, struct got *g, int64_t deadline) {
    start(idx, g, deadline, NULL);
    cr_assert_eq(g->n, 0, "done must not run inside remote_call_start");
    cr_assert(spin_until(got_done, g, 10000), "no callback");
    spin(20);
    cr_assert_eq(g->n, 1, "done ran %d times", g->n);
}

static json_t *url_status(size_t idx, size_t i) {
    json_t *st = remote_status_json(rem, idx);
    cr_assert_not_null(st);
    json_t *u = json_incref(json_array_get(json_object_get(st, "upstreams"), i));
    json_decref(st);
    cr_assert_not_null(u);
    return u;
}

/* --- URL checks --------------------------------------------------------------------------- */

Test(remote, url_check_accepts) {
    const char *ok[] = {"http://127.0.0.1:8090", "https://gpu-box.internal:8090/tandem",
                        "http://host/", "http://host/a/b/", "https://[::1]:443", "HTTP://Host",
                        "http://h:1", "http://h:65535"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char err[200] = "";
        cr_expect_eq(remote_url_check(ok[i], err, sizeof err), TANDEM_OK, "%s: %s", ok[i], err);
    }
}

Test(remote, url_check_rejects_with_reasons) {
    struct {
        const char *url, *why;
    } bad[] = {
        {"ftp://host", "expected http:// or https://"},
        {"host:8090", "expected http:// or https://"},
        {"", "expected http:// or https://"},
        {"http://", "no host"},
        {"http:///path", "no host"},
        {"http://h:99999", "bad port 99999"},
        {"http://h:0", "bad port 0"},
        {"http://h:abc", "bad port abc"},
        {"http://user:pw@h", "user info is not allowed"},
        {"http://user@h/x", "user info is not allowed"},
        {"http://h/x?a=1", "query strings are not allowed"},
        {"http://h/x#top", "fragments are not allowed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[200] = "";
        cr_expect_eq(remote_url_check(bad[i].url, err, sizeof err), TANDEM_ERR_FORMAT, "%s",
                     bad[i].url);
        cr_expect_str_eq(err, bad[i].why, "%s", bad[i].url);
    }
    cr_expect_eq(remote_url_check(NULL, NULL, 0), TANDEM_ERR_FORMAT);
}

Test(remote, add_model_refuses_bad_specs) {
    struct remote_params p = {.health_interval_ms = 1000, .max_response_bytes = 1000};
    rem = remote_new(base, &p);
    cr_assert_not_null(rem);
    const char *urls[] = {"http://127.0.0.1:1", "ftp://x"};
    struct remote_model_spec s = {.name = "m", .urls = urls, .n_urls = 2};
    size_t idx;
    cr_expect_eq(remote_add_model(rem, &s, &idx), TANDEM_ERR_INVAL);
    s.n_urls = 0;
    cr_expect_eq(remote_add_model(rem, &s, &idx), TANDEM_ERR_INVAL);
    s.n_urls = 1;
    cr_expect_eq(remote_add_model(rem, &s, &idx), TANDEM_OK);
    cr_expect_eq(idx, 0);
    cr_expect_eq(remote_add_model(rem, &s, &idx), TANDEM_OK);
    cr_expect_eq(idx, 1);
    cr_expect_null(remote_call_start(rem, 2, "/", "{}", 2, NULL, 0, on_done, NULL));
    cr_expect_null(remote_status_json(rem, 2));
    cr_expect_eq(remote_model_running(rem, 2), 0);
    cr_expect_not(remote_model_up(rem, 2));
}

/* --- what goes upstream ------------------------------------------------------------------- */

Test(remote, path_prefix_headers_and_body_reach_the_server) {
    struct srv *a = srv_new(M_OK);
    char base_url[96];
    snprintf(base_url, sizeof base_url, "%s/tandem/", a->url);
    const char *urls[] = {base_url};
    size_t idx = open_model(urls, 1, (struct model_opts){.key = "sekret-key-123"});
    struct got g = {0};
    int64_t deadline = host_now_ms() + 5000;
    start(idx, &g, deadline, "req-42");
    cr_assert(spin_until(got_done, &g, 10000));
    cr_expect_eq(g.status, 200);
    cr_expect(g.from_upstream);
    cr_expect_str_eq(g.body, "{\"answers\":[]}");
    cr_expect_str_eq(g.upstream, base_url);
    cr_expect_eq(g.attempts, 1);
    cr_expect_str_eq(a->path, "/tandem/v1/systemone");
    cr_expect_str_eq(a->request_id, "req-42");
    cr_expect_str_eq(a->auth, "Bearer sekret-key-123");
    cr_expect_str_eq(a->ctype, "application/json");
    cr_expect_str_eq(a->body, BODY);
    long ms = atol(a->envoy);
    cr_expect(ms > 4000 && ms <= 5000, "x-envoy-expected-rq-timeout-ms: \"%s\"", a->envoy);
}

Test(remote, no_deadline_or_id_sends_neither_header) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 200);
    cr_expect_str_eq(a->path, "/v1/systemone");
    cr_expect_str_eq(a->envoy, "");
    cr_expect_str_eq(a->request_id, "");
    cr_expect_str_eq(a->auth, "");
}

Test(remote, connections_are_kept_alive) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){0});
    for (int i = 0; i < 3; i++) {
        struct got g = {0};
        call(idx, &g, 0);
        cr_assert_eq(g.status, 200);
    }
    cr_assert_eq(a->hits, 3);
    cr_expect_neq(a->peer_ports[0], 0);
    cr_expect_eq(a->peer_ports[1], a->peer_ports[0], "a new connection for the second call");
    cr_expect_eq(a->peer_ports[2], a->peer_ports[0], "a new connection for the third call");
}

/* --- choice -------------------------------------------------------------------------------- */

Test(remote, choice_goes_to_fewest_outstanding_then_list_order) {
    struct srv *a = srv_new(M_SLOW), *b = srv_new(M_SLOW);
    a->delay_ms = b->delay_ms = 200;
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g[3] = {{0}};
    for (int i = 0; i < 3; i++)
        start(idx, &g[i], 0, NULL);
    cr_expect_eq(remote_model_running(rem, idx), 3);
    for (int i = 0; i < 3; i++)
        cr_assert(spin_until(got_done, &g[i], 10000));
    cr_expect_str_eq(g[0].upstream, a->url, "a tie goes to the first URL");
    cr_expect_str_eq(g[1].upstream, b->url, "the first URL has one outstanding");
    cr_expect_str_eq(g[2].upstream, a->url, "one each: list order again");
    cr_expect_eq(a->hits, 2);
    cr_expect_eq(b->hits, 1);
    cr_expect_eq(remote_model_running(rem, idx), 0);
    struct got h = {0};
    call(idx, &h, 0);
    cr_expect_str_eq(h.upstream, a->url, "idle again: the preferred URL");
}

/* --- failover ----------------------------------------------------------------------------- */

static void expect_failover(enum mode first) {
    struct srv *a = srv_new(first), *b = srv_new(M_OK);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, host_now_ms() + 5000);
    cr_expect_eq(g.status, 200);
    cr_expect(g.from_upstream);
    cr_expect_eq(g.attempts, 2);
    cr_expect_str_eq(g.upstream, b->url);
    cr_expect_eq(a->hits, 1);
    cr_expect_eq(b->hits, 1);
}

Test(remote, failover_on_503) { expect_failover(M_503); }
Test(remote, failover_on_503_without_json) { expect_failover(M_503_TEXT); }
Test(remote, failover_on_429) { expect_failover(M_429); }

Test(remote, failover_on_connect_refused_marks_the_url_down) {
    struct srv *b = srv_new(M_OK);
    char dead[64];
    snprintf(dead, sizeof dead, "%s", dead_url());
    const char *urls[] = {dead, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){.interval_ms = 300});
    struct got g = {0};
    call(idx, &g, host_now_ms() + 5000);
    cr_expect_eq(g.status, 200);
    cr_expect_eq(g.attempts, 2);
    cr_expect_str_eq(g.upstream, b->url);
    json_t *u = url_status(idx, 0);
    cr_expect(json_is_false(json_object_get(u, "up")));
    cr_expect_str_eq(json_string_value(json_object_get(u, "last_error")), "connection refused");
    json_decref(u);
    cr_expect(remote_model_up(rem, idx), "the second URL is still up");
    struct got h = {0};
    call(idx, &h, 0);
    cr_expect_eq(h.attempts, 1, "the down URL is skipped");
    cr_expect_str_eq(h.upstream, b->url);
    spin(450); /* without a health path the mark lasts one interval */
    u = url_status(idx, 0);
    cr_expect(json_is_true(json_object_get(u, "up")), "the mark did not expire");
    json_decref(u);
}

Test(remote, attempt_timeout_fails_over_while_time_remains) {
    struct srv *a = srv_new(M_SLOW), *b = srv_new(M_OK);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){.timeout_ms = 200});
    struct got g = {0};
    int64_t t0 = host_now_ms();
    call(idx, &g, t0 + 5000);
    cr_expect_eq(g.status, 200);
    cr_expect_eq(g.attempts, 2);
    cr_expect_str_eq(g.upstream, b->url);
    cr_expect_lt(host_now_ms() - t0, 2000);
}

static void expect_no_failover(enum mode first, int status) {
    struct srv *a = srv_new(first), *b = srv_new(M_OK);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, host_now_ms() + 5000);
    cr_expect_eq(g.status, status);
    cr_expect(g.from_upstream, "the upstream's answer passes through");
    cr_expect_eq(g.attempts, 1);
    cr_expect_str_eq(g.upstream, a->url);
    cr_expect_eq(b->hits, 0, "no failover on %d", status);
}

Test(remote, no_failover_on_400) { expect_no_failover(M_400, 400); }
Test(remote, no_failover_on_504) { expect_no_failover(M_504, 504); }

Test(remote, all_failing_passes_the_last_json_answer) {
    struct srv *a = srv_new(M_503), *b = srv_new(M_429);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 429);
    cr_expect(g.from_upstream);
    cr_expect_str_eq(g.body, "{\"error\":\"slow down\"}");
    cr_expect_eq(g.attempts, 2);
    cr_expect_str_eq(g.upstream, b->url);
}

Test(remote, all_failing_without_json_is_503_naming_each) {
    struct srv *a = srv_new(M_503_TEXT);
    char dead[64];
    snprintf(dead, sizeof dead, "%s", dead_url());
    const char *urls[] = {a->url, dead};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 503);
    cr_expect_not(g.from_upstream);
    cr_expect_eq(g.attempts, 2);
    cr_expect_str_eq(g.upstream, dead);
    char want[300];
    snprintf(want, sizeof want,
             "no upstream of model m answered: %s: HTTP 503; %s: connection refused", a->url, dead);
    cr_expect_str_eq(g.error, want);
}

/* --- bad answers -------------------------------------------------------------------------- */

Test(remote, not_json_is_502_naming_the_upstream) {
    struct srv *a = srv_new(M_NOTJSON), *b = srv_new(M_OK);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 502);
    cr_expect_not(g.from_upstream);
    cr_expect_null(g.body[0] ? g.body : NULL);
    char want[200];
    snprintf(want, sizeof want, "upstream %s answered HTTP 200 with a body that is not JSON",
             a->url);
    cr_expect_str_eq(g.error, want);
    cr_expect_eq(b->hits, 0);
}

Test(remote, oversized_answer_is_502) {
    struct srv *a = srv_new(M_HUGE);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.max_bytes = 1000});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 502);
    cr_expect_not(g.from_upstream);
    cr_expect(strstr(g.error, a->url), "%s", g.error);
    cr_expect(strstr(g.error, "answer larger than 1000 bytes"), "%s", g.error);
}

Test(remote, big_answer_under_the_cap_passes) {
    struct srv *a = srv_new(M_HUGE);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.max_bytes = HUGE_BYTES + 16});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 200);
    cr_expect_eq(g.len, HUGE_BYTES + 16);
}

Test(remote, redirect_is_502_and_not_followed) {
    struct srv *a = srv_new(M_REDIRECT), *b = srv_new(M_OK);
    snprintf(a->location, sizeof a->location, "%s/v1/systemone", b->url);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 502);
    cr_expect_not(g.from_upstream);
    char want[200];
    snprintf(want, sizeof want, "upstream %s answered HTTP 302: redirect not followed", a->url);
    cr_expect_str_eq(g.error, want);
    cr_expect_eq(b->hits, 0);
}

/* --- deadlines ---------------------------------------------------------------------------- */

Test(remote, deadline_passing_during_a_slow_answer_is_504) {
    struct srv *a = srv_new(M_SLOW), *b = srv_new(M_OK);
    const char *urls[] = {a->url, b->url};
    size_t idx = open_model(urls, 2, (struct model_opts){.timeout_ms = 10000});
    struct got g = {0};
    int64_t t0 = host_now_ms();
    call(idx, &g, t0 + 300);
    int64_t took = host_now_ms() - t0;
    cr_expect_eq(g.status, 504);
    cr_expect_not(g.from_upstream);
    cr_expect_eq(g.attempts, 1);
    cr_expect_str_eq(g.upstream, a->url);
    cr_expect(strstr(g.error, a->url), "%s", g.error);
    cr_expect(took >= 250 && took < 1500, "took %ld ms", (long)took);
    cr_expect_eq(b->hits, 0);
}

Test(remote, deadline_already_passed_is_504_later) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){0});
    struct got g = {0};
    call(idx, &g, host_now_ms() - 1);
    cr_expect_eq(g.status, 504);
    cr_expect_eq(g.attempts, 0);
    cr_expect(g.upstream_null);
    cr_expect_eq(a->hits, 0);
}

/* --- health ------------------------------------------------------------------------------- */

static size_t status_idx;
static bool both_checked(const void *arg) {
    (void)arg;
    json_t *st = remote_status_json(rem, status_idx);
    bool ok = true;
    for (size_t i = 0; i < json_array_size(json_object_get(st, "upstreams")); i++)
        ok = ok && json_is_integer(json_object_get(
                       json_array_get(json_object_get(st, "upstreams"), i), "checked_ms_ago"));
    json_decref(st);
    return ok;
}

Test(remote, all_down_is_503_naming_the_causes_delivered_later) {
    struct srv *a = srv_new(M_OK);
    a->health = 503;
    char dead[64];
    snprintf(dead, sizeof dead, "%s", dead_url());
    const char *urls[] = {a->url, dead};
    status_idx = open_model(urls, 2, (struct model_opts){.health = "/health", .interval_ms = 5000});
    remote_start(rem);
    cr_assert(spin_until(both_checked, NULL, 5000));
    cr_expect_not(remote_model_up(rem, status_idx));
    cr_expect_str_eq(remote_model_down_cause(rem, status_idx), "HTTP 503");
    struct got g = {0};
    start(status_idx, &g, 0, NULL);
    cr_expect_eq(g.n, 0, "called back from inside remote_call_start");
    cr_assert(spin_until(got_done, &g, 5000));
    cr_expect_eq(g.status, 503);
    cr_expect_not(g.from_upstream);
    cr_expect_eq(g.attempts, 0);
    cr_expect(g.upstream_null);
    char want[300];
    snprintf(want, sizeof want,
             "no healthy upstream for model m: %s: HTTP 503; %s: connection refused", a->url, dead);
    cr_expect_str_eq(g.error, want);
    cr_expect_eq(a->hits, 0);
}

Test(remote, urls_count_as_down_until_their_first_poll) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.health = "/health"});
    cr_expect_not(remote_model_up(rem, idx));
    cr_expect_str_eq(remote_model_down_cause(rem, idx), "not checked yet");
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 503);
    cr_expect(strstr(g.error, "not checked yet"), "%s", g.error);
}

static bool model_up(const void *arg) { return remote_model_up(rem, *(const size_t *)arg); }
static bool model_down(const void *arg) { return !remote_model_up(rem, *(const size_t *)arg); }

Test(remote, health_poll_marks_up_and_down) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.health = "/health", .interval_ms = 100});
    remote_start(rem);
    cr_assert(spin_until(model_up, &idx, 3000), "never up");
    cr_expect_str_eq(remote_model_down_cause(rem, idx), "");
    a->health = 503;
    cr_assert(spin_until(model_down, &idx, 3000), "never down");
    cr_expect_str_eq(remote_model_down_cause(rem, idx), "HTTP 503");
    json_t *u = url_status(idx, 0);
    cr_expect_str_eq(json_string_value(json_object_get(u, "last_error")), "HTTP 503");
    json_decref(u);
    a->health = 200;
    cr_assert(spin_until(model_up, &idx, 3000), "never up again");
    cr_expect_str_eq(remote_model_down_cause(rem, idx), "");
    cr_expect_geq(a->health_hits, 3);
    cr_expect_eq(a->hits, 0, "polls are not calls");
}

Test(remote, connect_failure_marks_a_polled_url_down) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.health = "/health", .interval_ms = 100});
    remote_start(rem);
    cr_assert(spin_until(model_up, &idx, 3000));
    /* the server goes away: the next call cannot connect */
    evhttp_free(a->http);
    a->http = evhttp_new(base);
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 503);
    cr_expect(strstr(g.error, "connection refused"), "%s", g.error);
    cr_expect_not(remote_model_up(rem, idx));
    cr_expect_str_eq(remote_model_down_cause(rem, idx), "connection refused");
}

/* --- cancel, status, metrics, free --------------------------------------------------------- */

Test(remote, cancel_calls_back_nothing) {
    struct srv *a = srv_new(M_SLOW);
    a->delay_ms = 200;
    char dead[64];
    snprintf(dead, sizeof dead, "%s", dead_url());
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){0});
    const char *durls[] = {dead};
    size_t didx = open_model(durls, 1, (struct model_opts){.health = "/health"});
    struct got g = {0}, h = {0};
    struct remote_call *c = start(idx, &g, 0, NULL);
    struct remote_call *d = start(didx, &h, 0, NULL); /* all down: its answer is pending */
    spin(50);
    cr_expect_eq(remote_model_running(rem, idx), 1);
    remote_call_cancel(c);
    cr_expect_eq(h.n, 1, "the all-down answer was not delivered");
    (void)d;
    cr_expect_eq(remote_model_running(rem, idx), 0);
    struct got k = {0};
    struct remote_call *e = start(didx, &k, 0, NULL);
    remote_call_cancel(e);
    spin(500);
    cr_expect_eq(g.n, 0);
    cr_expect_eq(k.n, 0);
    cr_expect_eq(a->hits, 1);
}

Test(remote, status_json_shape_without_the_key) {
    struct srv *a = srv_new(M_OK);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.key = "sekret-key-123"});
    struct got g = {0};
    call(idx, &g, 0);
    json_t *st = remote_status_json(rem, idx);
    cr_assert_not_null(st);
    char *text = json_dumps(st, JSON_COMPACT);
    cr_expect_null(strstr(text, "sekret"), "%s", text);
    cr_expect(json_is_true(json_object_get(st, "up")));
    json_t *u = json_array_get(json_object_get(st, "upstreams"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(u, "url")), a->url);
    cr_expect(json_is_true(json_object_get(u, "up")));
    cr_expect_eq(json_integer_value(json_object_get(u, "outstanding")), 0);
    cr_expect_eq(json_integer_value(json_object_get(u, "requests")), 1);
    cr_expect(json_is_null(json_object_get(u, "last_error")));
    cr_expect(json_is_null(json_object_get(u, "checked_ms_ago")), "never polled");
    free(text);
    json_decref(st);
}

#define REQS "tandem_upstream_requests_total{model=\"m\",upstream=\"%s\","

Test(remote, metrics_count_attempts_and_health) {
    struct prom *p = prom_new();
    struct srv *a = srv_new(M_503), *b = srv_new(M_OK);
    char dead[64];
    snprintf(dead, sizeof dead, "%s", dead_url());
    const char *urls[] = {dead, a->url, b->url};
    size_t idx = open_model(urls, 3, (struct model_opts){.metrics = p, .key = "sekret"});
    struct got g = {0};
    call(idx, &g, 0);
    cr_expect_eq(g.status, 200);
    cr_expect_eq(g.attempts, 3);
    struct mem_buf out;
    mem_buf_init(&out, 1 << 20);
    cr_assert_eq(prom_render(p, &out), TANDEM_OK);
    char line[300];
    snprintf(line, sizeof line, REQS "code=\"error\"} 1\n", dead);
    cr_expect(strstr(out.data, line), "%s", out.data);
    snprintf(line, sizeof line, REQS "code=\"503\"} 1\n", a->url);
    cr_expect(strstr(out.data, line), "%s", out.data);
    snprintf(line, sizeof line, REQS "code=\"200\"} 1\n", b->url);
    cr_expect(strstr(out.data, line), "%s", out.data);
    snprintf(line, sizeof line, "tandem_upstream_up{model=\"m\",upstream=\"%s\"} 0\n", dead);
    cr_expect(strstr(out.data, line), "%s", out.data);
    snprintf(line, sizeof line, "tandem_upstream_up{model=\"m\",upstream=\"%s\"} 1\n", b->url);
    cr_expect(strstr(out.data, line), "%s", out.data);
    snprintf(line, sizeof line,
             "tandem_upstream_request_duration_seconds_count{model=\"m\",upstream=\"%s\"} 1\n",
             b->url);
    cr_expect(strstr(out.data, line), "%s", out.data);
    cr_expect_null(strstr(out.data, "sekret"));
    mem_buf_deinit(&out);
    remote_free(rem); /* before the registry it borrows */
    rem = NULL;
    prom_free(p);
}

Test(remote, free_with_calls_and_polls_in_flight) {
    struct srv *a = srv_new(M_SLOW);
    const char *urls[] = {a->url};
    size_t idx = open_model(urls, 1, (struct model_opts){.health = "/health", .interval_ms = 100});
    remote_start(rem);
    cr_assert(spin_until(model_up, &idx, 3000));
    struct got g[3] = {{0}};
    for (int i = 0; i < 3; i++)
        start(idx, &g[i], 0, NULL);
    spin(50);
    cr_expect_eq(remote_model_running(rem, idx), 3);
    remote_free(rem);
    rem = NULL;
    spin(200);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(g[i].n, 0);
}
