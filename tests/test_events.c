/* Unit tests for events: the server-sent event stream over a real HTTP
 * server on a loopback socket, driven one loop turn at a time. Frames come
 * in publication order with increasing ids; a Last-Event-ID resumes from the
 * ring, or gets a reset when the ring no longer holds it; the subscriber cap
 * refuses the next one; a subscriber that never reads is dropped once its
 * backlog passes the bound, and one that hangs up is forgotten. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/events.h"
#include "serve/http.h"

struct fixture {
    struct event_base *base;
    struct http_server *server;
    struct events *ev;
    int refused; /* the last subscription's refusal, or 0 */
};

static void handler(struct http_req *r, void *user) {
    struct fixture *f = user;
    f->refused = events_subscribe(f->ev, r, http_req_header(r, "Last-Event-ID"));
    if (f->refused)
        http_req_reply(r, f->refused, "text/plain", "no", 2);
}

static void setup(struct fixture *f, const struct events_params *p) {
    signal(SIGPIPE, SIG_IGN); /* as tandem serve: a write to a gone client fails instead */
    *f = (struct fixture){.base = event_base_new()};
    cr_assert(f->base);
    f->ev = events_new(f->base, p);
    cr_assert(f->ev);
    struct http_server_params hp = {.host = "127.0.0.1", .max_body_bytes = 1024,
                                    .header_timeout_ms = 5000, .idle_timeout_ms = 5000,
                                    .max_connections = 64};
    char err[256];
    cr_assert_eq(http_server_new(f->base, &hp, handler, f, &f->server, err, sizeof err), TANDEM_OK,
                 "%s", err);
}

static void teardown(struct fixture *f) {
    events_free(f->ev);
    http_server_free(f->server);
    event_base_free(f->base);
}

static void turn(struct fixture *f, int n) {
    for (int i = 0; i < n; i++) {
        event_base_loop(f->base, EVLOOP_NONBLOCK);
        usleep(2000);
    }
}

/* A client that asked for the stream, with last_id as Last-Event-ID (NULL =
 * none); rcvbuf > 0 shrinks its socket buffer. Non-blocking. */
static int subscribe(struct fixture *f, const char *last_id, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(http_server_port(f->server)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char req[256];
    int n = snprintf(req, sizeof req, "GET /v1/events HTTP/1.1\r\nHost: x\r\n%s%s%s\r\n",
                     last_id ? "Last-Event-ID: " : "", last_id ? last_id : "",
                     last_id ? "\r\n" : "");
    cr_assert_eq(write(fd, req, (size_t)n), n);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    turn(f, 20);
    return fd;
}

/* Everything the client has received so far, appended to buf. */
static void drain(int fd, char *buf, size_t cap) {
    size_t len = strlen(buf);
    ssize_t n;
    while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
}

static void publish(struct fixture *f, const char *type, int k) {
    cr_assert_gt(events_publish(f->ev, type, json_pack("{si}", "k", k)), 0);
}

Test(events, frames_come_in_order_with_increasing_ids) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4});
    int fd = subscribe(&f, NULL, 0);
    cr_assert_eq(events_subscribers(f.ev), 1);
    publish(&f, "ready", 1);
    publish(&f, "queue", 2);
    publish(&f, "request", 3);
    turn(&f, 20);
    char buf[8192] = "";
    drain(fd, buf, sizeof buf);
    cr_assert(strstr(buf, "200 OK") && strstr(buf, "text/event-stream"), "%s", buf);
    const char *a = strstr(buf, "id: 1\nevent: ready\ndata: {\"k\":1,\"time_ms\":");
    const char *b = strstr(buf, "id: 2\nevent: queue\ndata: {\"k\":2,");
    const char *c = strstr(buf, "id: 3\nevent: request\ndata: {\"k\":3,");
    cr_assert(a && b && c && a < b && b < c, "%s", buf);
    close(fd);
    teardown(&f);
}

Test(events, a_last_event_id_resumes_after_it) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4});
    for (int k = 1; k <= 5; k++)
        publish(&f, "request", k);
    int fd = subscribe(&f, "2", 0);
    char buf[8192] = "";
    drain(fd, buf, sizeof buf);
    cr_assert_null(strstr(buf, "id: 2\n"), "%s", buf);
    const char *a = strstr(buf, "id: 3\n"), *b = strstr(buf, "id: 4\n"), *c = strstr(buf, "id: 5\n");
    cr_assert(a && b && c && a < b && b < c, "%s", buf);
    cr_assert_null(strstr(buf, "event: reset"));
    close(fd);
    teardown(&f);
}

Test(events, an_id_past_the_ring_gets_a_reset_and_zero_gets_all_it_holds) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4, .ring = 4});
    for (int k = 1; k <= 10; k++)
        publish(&f, "request", k);
    const char *ids[] = {"2", "999", "junk"};
    for (size_t i = 0; i < 3; i++) {
        int fd = subscribe(&f, ids[i], 0);
        char buf[8192] = "";
        drain(fd, buf, sizeof buf);
        cr_assert(strstr(buf, "event: reset\ndata: {\"oldest_id\":7,"), "%s: %s", ids[i], buf);
        cr_assert_null(strstr(buf, "id: "), "%s", buf);
        close(fd);
    }
    int fd = subscribe(&f, "0", 0);
    char buf[8192] = "";
    drain(fd, buf, sizeof buf);
    cr_assert_null(strstr(buf, "id: 6\n"), "%s", buf);
    cr_assert(strstr(buf, "id: 7\n") && strstr(buf, "id: 10\n"), "%s", buf);
    cr_assert_null(strstr(buf, "event: reset"), "%s", buf);
    close(fd);
    teardown(&f);
}

Test(events, the_subscriber_past_the_cap_is_refused) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 2});
    int a = subscribe(&f, NULL, 0), b = subscribe(&f, NULL, 0);
    cr_assert_eq(f.refused, 0);
    int c = subscribe(&f, NULL, 0);
    cr_assert_eq(f.refused, 429);
    char buf[4096] = "";
    drain(c, buf, sizeof buf);
    cr_assert(strstr(buf, "HTTP/1.1 429"), "%s", buf);
    cr_assert_eq(events_subscribers(f.ev), 2);
    close(a);
    turn(&f, 20);
    cr_assert_eq(events_subscribers(f.ev), 1, "a hang-up frees its place");
    int d = subscribe(&f, NULL, 0);
    cr_assert_eq(f.refused, 0);
    close(b), close(c), close(d);
    teardown(&f);
}

Test(events, a_subscriber_that_never_reads_is_dropped_at_the_bound) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4, .max_backlog = 256 << 10});
    int slow = subscribe(&f, NULL, 4096), fast = subscribe(&f, NULL, 0);
    static char big[16 << 10];
    memset(big, 'x', sizeof big - 1);
    char *buf = calloc(1, 8 << 20);
    for (int k = 0; k < 400 && events_subscribers(f.ev) == 2; k++) {
        events_publish(f.ev, "request", json_pack("{ss}", "pad", big));
        turn(&f, 1);
        drain(fast, buf, 8 << 20);
        buf[0] = '\0';
    }
    cr_assert_eq(events_subscribers(f.ev), 1, "the slow one is dropped, the fast one kept");
    cr_assert_eq(events_dropped(f.ev), 1);
    publish(&f, "ready", 1);
    turn(&f, 10);
    drain(fast, buf, 8 << 20);
    cr_assert(strstr(buf, "event: ready"), "the fast subscriber still gets events");
    free(buf);
    close(slow), close(fast);
    teardown(&f);
}

Test(events, close_all_ends_every_stream) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4});
    int a = subscribe(&f, NULL, 0);
    events_close_all(f.ev);
    turn(&f, 20);
    cr_assert_eq(events_subscribers(f.ev), 0);
    char buf[4096] = "";
    drain(a, buf, sizeof buf);
    cr_assert(strstr(buf, "\r\n0\r\n\r\n"), "the chunked stream is ended: %s", buf);
    close(a);
    teardown(&f);
}

Test(events, publishing_without_a_stream_or_data_is_harmless) {
    cr_assert_eq(events_publish(NULL, "ready", json_object()), 0);
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 1});
    cr_assert_eq(events_publish(f.ev, "ready", NULL), 0);
    cr_assert_eq(events_publish(f.ev, "ready", json_object()), 1);
    teardown(&f);
    events_free(NULL);
}

Test(events, the_ring_keeps_to_its_byte_bound) {
    struct fixture f;
    setup(&f, &(struct events_params){.max_clients = 4, .ring = 100, .ring_bytes = 4096});
    static char pad[1000];
    memset(pad, 'p', sizeof pad - 1);
    for (int k = 1; k <= 10; k++) /* about 1100 bytes a frame: 3 fit */
        events_publish(f.ev, "request", json_pack("{ss}", "pad", pad));
    int fd = subscribe(&f, "0", 0);
    char buf[16384] = "";
    drain(fd, buf, sizeof buf);
    cr_assert_null(strstr(buf, "id: 7\n"), "%s", buf);
    cr_assert(strstr(buf, "id: 8\n") && strstr(buf, "id: 10\n"), "%s", buf);
    close(fd);
    fd = subscribe(&f, "6", 0);
    buf[0] = '\0';
    drain(fd, buf, sizeof buf);
    cr_assert(strstr(buf, "event: reset\ndata: {\"oldest_id\":8,"), "%s", buf);
    close(fd);
    teardown(&f);
}
