/* events.c: the server-sent event stream behind GET /v1/events.
 *
 * An event is serialised once, at publication, into its whole SSE frame
 * ("id: N\nevent: T\ndata: {...}\n\n", the JSON compact and so on one line),
 * and that frame goes both to every subscriber and into a ring of the last
 * `ring` frames, slot id % ring, which also drops its oldest frames while it
 * holds more than ring_bytes (request bodies can be large). A resume replays
 * the ring from the id after
 * the client's Last-Event-ID; an id older than the ring's oldest, or newer
 * than the last issued (a daemon restarted since), gets a `reset` frame
 * without id, telling the client to refetch /v1/status.
 *
 * Subscribers are a list of streamed requests. After each frame the
 * subscriber's unsent bytes (the connection's output buffer) are checked; past
 * max_backlog it is dropped: its connection is closed, so the memory it held
 * goes at once. A client that hangs up is noticed by the HTTP module, whose
 * on_gone callback removes it. A timer sends a comment line to everyone every
 * heartbeat_ms, which also keeps idle proxies from closing the stream. */
#include "serve/events.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/time.h>

#include "base/mem.h"

struct frame {
    uint64_t id; /* 0 = empty slot */
    char *text;
    size_t len;
};

struct sub {
    struct events *ev;
    struct http_req *r;
    LIST_ENTRY(sub) link;
};

struct events {
    struct events_params p;
    struct frame *ring;
    uint64_t next_id;
    uint64_t oldest;   /* the oldest id the ring holds; next_id when it holds none */
    size_t held_bytes; /* the frames' bytes in the ring */
    LIST_HEAD(, sub) subs;
    uint32_t n_subs;
    uint64_t dropped;
    struct event *heartbeat;
};

static const char HEARTBEAT[] = ": heartbeat\n\n";

struct events_params events_default_params(void) {
    return (struct events_params){.max_clients = 16, .ring = 4096, .ring_bytes = 8u << 20,
                                  .max_backlog = 1u << 20, .heartbeat_ms = 15000};
}

/* --- subscribers --------------------------------------------------------------------------- */

/* The client hung up (or was dropped): end its stream, which frees r. */
static void on_sub_gone(void *arg) {
    struct sub *s = arg;
    LIST_REMOVE(s, link);
    s->ev->n_subs--;
    http_req_stream_end(s->r);
    mem_free(s);
}

/* Sends text[len] to s; drops s when it has fallen too far behind. Returns
 * false when s is gone (freed). */
static bool send_to(struct sub *s, const char *text, size_t len) {
    struct evbuffer *b = evbuffer_new();
    if (b && evbuffer_add(b, text, len) == 0)
        http_req_stream_chunk(s->r, b);
    if (b)
        evbuffer_free(b);
    if (http_req_stream_backlog(s->r) <= s->ev->p.max_backlog)
        return true;
    fprintf(stderr, "tandem: /v1/events: a subscriber fell %zu bytes behind; dropped\n",
            http_req_stream_backlog(s->r));
    s->ev->dropped++;
    http_req_drop(s->r); /* on_sub_gone frees s */
    return false;
}

static void send_all(struct events *ev, const char *text, size_t len) {
    struct sub *s = LIST_FIRST(&ev->subs);
    while (s) {
        struct sub *next = LIST_NEXT(s, link); /* s may be dropped */
        send_to(s, text, len);
        s = next;
    }
}

static void on_heartbeat(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct events *ev = arg;
    send_all(ev, HEARTBEAT, sizeof HEARTBEAT - 1);
}

/* --- lifecycle ------------------------------------------------------------------------------- */

struct events *events_new(struct event_base *base, const struct events_params *p) {
    struct events_params d = events_default_params();
    struct events *ev = mem_calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    ev->p = *p;
    if (!ev->p.ring)
        ev->p.ring = d.ring;
    if (!ev->p.ring_bytes)
        ev->p.ring_bytes = d.ring_bytes;
    if (!ev->p.max_backlog)
        ev->p.max_backlog = d.max_backlog;
    if (ev->p.heartbeat_ms <= 0)
        ev->p.heartbeat_ms = d.heartbeat_ms;
    ev->next_id = ev->oldest = 1;
    LIST_INIT(&ev->subs);
    ev->ring = mem_calloc(ev->p.ring, sizeof *ev->ring);
    ev->heartbeat = event_new(base, -1, EV_PERSIST, on_heartbeat, ev);
    if (!ev->ring || !ev->heartbeat) {
        events_free(ev);
        return NULL;
    }
    struct timeval tv = {(time_t)(ev->p.heartbeat_ms / 1000),
                         (suseconds_t)(ev->p.heartbeat_ms % 1000) * 1000};
    event_add(ev->heartbeat, &tv);
    return ev;
}

void events_close_all(struct events *ev) {
    struct sub *s;
    while (ev && (s = LIST_FIRST(&ev->subs))) {
        http_req_on_gone(s->r, NULL, NULL);
        on_sub_gone(s);
    }
}

void events_free(struct events *ev) {
    if (!ev)
        return;
    events_close_all(ev);
    if (ev->heartbeat)
        event_free(ev->heartbeat);
    for (size_t i = 0; ev->ring && i < ev->p.ring; i++)
        mem_free(ev->ring[i].text);
    mem_free(ev->ring);
    mem_free(ev);
}

void events_set_max_clients(struct events *ev, uint32_t max_clients) {
    ev->p.max_clients = max_clients;
}

uint32_t events_subscribers(const struct events *ev) { return ev->n_subs; }
uint64_t events_dropped(const struct events *ev) { return ev->dropped; }

/* --- publication --------------------------------------------------------------------------- */

static int64_t unix_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* The frame of event id (0 = none) named type with data; NULL on OOM. */
static char *frame_text(uint64_t id, const char *type, const json_t *data, size_t *len) {
    char *json = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!json)
        return NULL;
    size_t cap = strlen(json) + strlen(type) + 64;
    char *text = mem_alloc(cap);
    if (text) {
        int n = id ? snprintf(text, cap, "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n", id, type, json)
                   : snprintf(text, cap, "event: %s\ndata: %s\n\n", type, json);
        *len = (size_t)n;
    }
    free(json);
    return text;
}

static void drop_oldest(struct events *ev) {
    struct frame *f = &ev->ring[ev->oldest++ % ev->p.ring];
    ev->held_bytes -= f->len;
    mem_free(f->text);
    *f = (struct frame){0};
}

uint64_t events_publish(struct events *ev, const char *type, json_t *data) {
    if (!ev || !data) {
        json_decref(data);
        return 0;
    }
    json_object_set_new(data, "time_ms", json_integer(unix_ms()));
    size_t len = 0;
    char *text = frame_text(ev->next_id, type, data, &len);
    json_decref(data);
    if (!text)
        return 0;
    uint64_t id = ev->next_id++;
    if (ev->ring[id % ev->p.ring].text) /* the slot's frame is the oldest held */
        drop_oldest(ev);
    ev->ring[id % ev->p.ring] = (struct frame){.id = id, .text = text, .len = len};
    ev->held_bytes += len;
    while (ev->held_bytes > ev->p.ring_bytes && ev->oldest < id)
        drop_oldest(ev);
    send_all(ev, text, len);
    return id;
}

/* --- subscription ---------------------------------------------------------------------------- */

/* Parses a Last-Event-ID; false when it is not a plain decimal number. */
static bool parse_id(const char *s, uint64_t *out) {
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return false;
    *out = v;
    return true;
}

static bool send_reset(struct sub *s) {
    json_t *data = json_pack("{sIsI}", "oldest_id", (json_int_t)s->ev->oldest, "time_ms",
                             (json_int_t)unix_ms());
    size_t len = 0;
    char *text = data ? frame_text(0, "reset", data, &len) : NULL;
    json_decref(data);
    bool alive = !text || send_to(s, text, len);
    mem_free(text);
    return alive;
}

/* Sends s what it missed after its Last-Event-ID. */
static void replay(struct sub *s, const char *last_event_id) {
    struct events *ev = s->ev;
    uint64_t last, first = ev->oldest;
    if (!last_event_id)
        return;
    bool known = parse_id(last_event_id, &last) && last < ev->next_id;
    if (known && last == 0)
        last = first - 1;
    if (!known || last + 1 < first) {
        send_reset(s);
        return;
    }
    for (uint64_t id = last + 1; id < ev->next_id; id++) {
        const struct frame *f = &ev->ring[id % ev->p.ring];
        if (!send_to(s, f->text, f->len))
            return;
    }
}

int events_subscribe(struct events *ev, struct http_req *r, const char *last_event_id) {
    if (ev->n_subs >= ev->p.max_clients)
        return 429;
    struct sub *s = mem_calloc(1, sizeof *s);
    if (!s)
        return 500;
    *s = (struct sub){.ev = ev, .r = r};
    LIST_INSERT_HEAD(&ev->subs, s, link);
    ev->n_subs++;
    http_req_on_gone(r, on_sub_gone, s);
    http_req_add_header(r, "X-Accel-Buffering", "no");
    http_req_stream_start(r, 200, "text/event-stream");
    static const char hello[] = ": tandem events\n\n";
    if (send_to(s, hello, sizeof hello - 1))
        replay(s, last_event_id);
    return 0;
}
