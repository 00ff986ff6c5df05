/* load_progress.h: a model's load progress as one line of text, and a watcher
 * that keeps such a line on a terminal while a command waits on a daemon
 * (`tandem decide`; `tandem ps` prints the same lines). */
#ifndef TANDEM_LOAD_PROGRESS_H
#define TANDEM_LOAD_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Writes "loading NAME: reading weights 45% (1.2 s)" for a model entry of
 * /v1/status (borrowed) into out[cap] and returns true, or returns false
 * (out untouched) when the model is not loading. */
bool load_progress_text(const json_t *model, char *out, size_t cap);

struct load_watch; /* opaque */

/* Starts polling base's /v1/status (with api_key, NULL = none; both copied)
 * every 250 ms on a thread, keeping one line on stderr with the progress of
 * each model that loads. Returns NULL, and watches nothing, when stderr is
 * not a terminal, or on failure. */
struct load_watch *load_watch_start(const char *base, const char *api_key);

/* Stops the watcher and erases its line. NULL is a no-op. */
void load_watch_stop(struct load_watch *w);

#endif
