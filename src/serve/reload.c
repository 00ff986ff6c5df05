/* reload.c: the config-reload diff.
 *
 * On SIGHUP the daemon reads its config again. Models are planned, placed
 * and started once, at start-up, so a new config applies in place only when
 * nothing that planning read has changed: the models, in the same order,
 * with the same files or upstreams, settings, devices and engine arguments,
 * and the same placement inputs. Everything else (API keys, allowed hosts
 * and origins, limits, the default model, logging, pipelines) is applied by
 * the daemon without a restart. Pure comparisons over two parsed configs. */
#include "serve/reload.h"

#include <string.h>

static bool same_string(const char *a, const char *b) {
    return a == b || (a && b && !strcmp(a, b));
}

/* Whether a[n] and b[n] hold the same strings in the same order. */
static bool same_strings(char *const *a, char *const *b, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (strcmp(a[k], b[k]))
            return false;
    return true;
}

static bool same_upstream(const struct config_upstream *a, const struct config_upstream *b) {
    if (!a || !b)
        return a == b;
    if (a->n_urls != b->n_urls || a->dialect != b->dialect || a->timeout_ms != b->timeout_ms ||
        !same_string(a->api_key, b->api_key) || !same_string(a->health, b->health))
        return false;
    return same_strings(a->urls, b->urls, a->n_urls);
}

bool reload_model_same(const struct config_model *x, const struct config_model *y) {
    if (strcmp(x->name, y->name) || !same_string(x->path, y->path) ||
        !same_upstream(x->upstream, y->upstream) ||
        !plan_settings_equal(&x->settings, &y->settings) ||
        x->n_extra_args != y->n_extra_args || x->n_aliases != y->n_aliases ||
        x->pin != y->pin || x->keep_alive_ms != y->keep_alive_ms || x->device != y->device ||
        x->gpu != y->gpu)
        return false;
    return same_strings(x->extra_args, y->extra_args, x->n_extra_args) &&
           same_strings(x->aliases, y->aliases, x->n_aliases);
}

bool reload_store_same(const struct config *a, const struct config *b) {
    return same_string(a->store_path, b->store_path) && a->store_bodies == b->store_bodies &&
           a->store_retention_ms == b->store_retention_ms &&
           a->store_max_bytes == b->store_max_bytes;
}

bool reload_models_same(const struct config *a, const struct config *b) {
    if (a->n_models != b->n_models || a->request_tokens != b->request_tokens ||
        a->clients != b->clients || a->cache_max_bytes != b->cache_max_bytes)
        return false;
    for (size_t i = 0; i < a->n_models; i++)
        if (!reload_model_same(&a->models[i], &b->models[i]))
            return false;
    return true;
}
