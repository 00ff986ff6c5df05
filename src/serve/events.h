/* events.h: the daemon's event stream, GET /v1/events (server-sent events).
 *
 * The scheduler, the routes and the pipelines publish what happens (a model
 * loads, is ready, is evicted or crashes; the queue changes; a request or a
 * pipeline verdict is done; a memory sample); every subscriber gets each
 * event as one SSE frame with an id. The last events are kept in a bounded
 * ring, so that a client reconnecting with Last-Event-ID gets what it
 * missed; one whose id is no longer there gets a `reset` event instead. A
 * subscriber that stops reading is dropped once its unsent bytes pass a
 * bound, so that it can neither stall the daemon nor grow its memory. */
#ifndef TANDEM_EVENTS_H
#define TANDEM_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "serve/http.h"

struct events; /* opaque */

struct events_params {
    uint32_t max_clients; /* subscribers at once; the next one is refused (429) */
    size_t ring;          /* events kept for resumes (Last-Event-ID); 0 = 4096 */
    size_t ring_bytes;    /* ... and their bytes at most (the oldest go first); 0 = 8 MiB */
    size_t max_backlog;   /* unsent bytes past which a subscriber is dropped; 0 = 1 MiB */
    int64_t heartbeat_ms; /* a comment line to every subscriber this often; 0 = 15000 */
};

/* Returns the defaults: 16 clients, 4096 events of 8 MiB in all, 1 MiB, 15 s. */
struct events_params events_default_params(void);

/* Creates the stream on base (borrowed). Returns NULL on OOM. */
struct events *events_new(struct event_base *base, const struct events_params *p);

/* Ends every subscriber's stream and frees the stream. Must come before the
 * HTTP server that carries the subscribers is freed. NULL is a no-op. */
void events_free(struct events *ev);

/* Sets the subscriber limit (a reload); those over it stay connected. */
void events_set_max_clients(struct events *ev, uint32_t max_clients);

/* Publishes an event named type (a static string) with data, a JSON object
 * (stolen: the stream owns it, whatever happens; NULL is ignored), to every
 * subscriber and into the ring. Adds "time_ms" (Unix time) to data. Returns
 * the event's id (from 1, in publication order), or 0 when it could not be
 * made (OOM). ev may be NULL: nothing is published. */
uint64_t events_publish(struct events *ev, const char *type, json_t *data);

/* Makes r a subscriber: on 0 the stream owns r from now on. last_event_id
 * is the client's Last-Event-ID header or NULL: the events after it that the
 * ring still holds are sent first; an id the ring no longer covers (or one it
 * never issued) gets a `reset` event instead; "0" asks for all the ring
 * holds. Returns 0, or the HTTP status to refuse with, r untouched and still
 * the caller's: 429 when max_clients are subscribed, 500 on OOM. */
int events_subscribe(struct events *ev, struct http_req *r, const char *last_event_id);

/* Ends every subscriber's stream now (the daemon stops admitting). */
void events_close_all(struct events *ev);

/* Subscribers now. */
uint32_t events_subscribers(const struct events *ev);

/* Subscribers dropped so far for not reading. */
uint64_t events_dropped(const struct events *ev);

#endif
