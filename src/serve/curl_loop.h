/* curl_loop.h: libcurl's multi interface driven by the daemon's libevent loop.
 *
 * One CURLM whose sockets and timeout are libevent events on a base: a
 * transfer added here runs without blocking the loop, and each finished one
 * is handed to the loop's done callback. Used by every libcurl client inside
 * the daemon (remote.c for remote endpoints, upstream.c for the engines), so
 * that the glue between the two libraries exists once. */
#ifndef TANDEM_CURL_LOOP_H
#define TANDEM_CURL_LOOP_H

#include <stdbool.h>

#include <curl/curl.h>
#include <event2/event.h>

struct curl_loop; /* opaque */

/* Called from a libevent callback (never from inside curl_loop_add) for a
 * transfer that ended, with libcurl's result; easy has already left the
 * loop, so the callback may clean it up or add it again. */
typedef void (*curl_loop_done_fn)(CURL *easy, CURLcode rc, void *user);

/* A new loop on base (borrowed; must outlive the loop); done(easy, rc, user)
 * gets every finished transfer. Initialises libcurl (reference counted).
 * NULL on OOM or when libcurl cannot start. Free with curl_loop_free. */
struct curl_loop *curl_loop_new(struct event_base *base, curl_loop_done_fn done, void *user);

/* Closes every cached connection and frees the loop. Transfers still added
 * must have been removed (curl_loop_remove) by their owners first.
 * curl_loop_free(NULL) is a no-op. */
void curl_loop_free(struct curl_loop *l);

/* Starts easy (borrowed: the caller keeps it until it is done or removed).
 * The transfer makes progress from the loop; done follows once. False when
 * libcurl refuses it (OOM): nothing follows then. */
bool curl_loop_add(struct curl_loop *l, CURL *easy);

/* Takes easy out of the loop before it is done: no done follows. A transfer
 * cut short this way closes its connection (libcurl never reuses a
 * connection left mid-answer), so the peer sees the hang-up. */
void curl_loop_remove(struct curl_loop *l, CURL *easy);

#endif
