/* model_endpoint.h: the model a measuring command (eval, drift, calibrate)
 * talks to, named three ways:
 *   http://HOST:PORT or https://...   a running /v1/systemone server;
 *   config:MODEL                      a model of the command's --config, served
 *                                     by a private daemon on that config;
 *   file:PATH                         a GGUF file, served by a private daemon on
 *                                     a config of its own.
 * The private daemons start the models as `tandem serve` does (its engine, its
 * settings, the CPU or the GPU, one budget), and stop with their engines when
 * the command frees them. All file: models of one command share one daemon, so
 * that a reference and a candidate rotate within the budget instead of both
 * claiming it. */
#ifndef TANDEM_MODEL_ENDPOINT_H
#define TANDEM_MODEL_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* One endpoint to resolve. spec and model are the caller's (borrowed); url
 * and model are set on success, valid until model_endpoints_free. */
struct model_endpoint {
    const char *flag;  /* for messages: "--ref" */
    const char *spec;  /* what the user gave */
    const char *url;   /* out: the base URL to send to */
    const char *model; /* in: --model's value or NULL; out: the request's "model" */
};

struct model_endpoints_params {
    const char *command;      /* for messages: "tandem drift" */
    const char *config;       /* --config, needed by config:MODEL; NULL = none */
    bool no_config;           /* the command has no --config: config:MODEL is refused */
    const char *llama_server; /* for the private daemons; NULL = the usual lookup */
    bool verbose;             /* their logs on stderr */
};

struct model_endpoints; /* opaque: the private daemons started */

/* Resolves eps[n], starting the private daemons they need. On TANDEM_OK,
 * *out holds them (free with model_endpoints_free; NULL when none was
 * needed). On failure *out is NULL and the message, prefixed by p->command,
 * is on stderr (a daemon's log is part of it, as for private_daemon_start).
 * Returns TANDEM_ERR_INVAL for a spec that is none of the three forms, a
 * config: without --config or naming no model of it, a file: that cannot be
 * read (the user's mistake: a command exits 2); TANDEM_ERR_NOMEM; or
 * TANDEM_ERR_SPAWN when a daemon cannot start. */
tandem_err model_endpoints_start(const struct model_endpoints_params *p,
                                 struct model_endpoint *eps, size_t n,
                                 struct model_endpoints **out);

/* The API key the config's daemon wants (its first api_keys entry), or NULL. */
const char *model_endpoints_api_key(const struct model_endpoints *e);

/* Stops the daemons and their engines, removes what file: models needed, and
 * frees e. NULL is a no-op. */
void model_endpoints_free(struct model_endpoints *e);

#endif
