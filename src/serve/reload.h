/* reload.h: what a SIGHUP may apply in place: the diff between the running
 * config and the one just read (reload.c). */
#ifndef TANDEM_RELOAD_H
#define TANDEM_RELOAD_H

#include <stdbool.h>

#include "serve/config.h"

/* Whether model y serves as model x does: the same name, file or upstreams
 * (URLs, dialect, timeout, key, health path), settings, engine arguments,
 * aliases, pin, keep_alive and device. Both borrowed. */
bool reload_model_same(const struct config_model *x, const struct config_model *y);

/* Whether b keeps a's models: the same ones (reload_model_same) in the same
 * order, and the same placement inputs (scheduling.request_tokens and
 * clients, and cache.max_bytes, which the planner counts as host RAM). Only then can the daemon apply b without a restart: keys,
 * limits, logging and pipelines change in place, and every pipeline of b is
 * compiled anew against the models already planned. Both borrowed. */
bool reload_models_same(const struct config *a, const struct config *b);

/* Whether b keeps a's request store: the same store.path, store.bodies,
 * store.retention and store.max_bytes, which the store's writer was started
 * with (store.quality_window applies in place). Both borrowed. */
bool reload_store_same(const struct config *a, const struct config *b);

#endif
