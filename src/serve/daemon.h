/* daemon.h: the tandem daemon: one config's models served over HTTP until
 * a signal (daemon.c). `tandem serve` parses its arguments and calls it. */
#ifndef TANDEM_DAEMON_H
#define TANDEM_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct daemon;

struct daemon_params {
    const char *config_path;  /* the tandem.yaml (required); borrowed for the daemon's life,
                               * SIGHUP reads it again */
    const char *listen;       /* "ADDR:PORT" in place of the config's listen; NULL = the
                               * config's; borrowed for the daemon's life */
    int64_t drain_delay_ms;   /* in place of limits.drain_delay, ms; < 0 = the config's */
    const char *llama_server; /* the engine to use when the config names none; NULL = the
                               * usual lookup; borrowed for the call */
};

/* The defaults: no config path yet, the config's listen and drain delay,
 * the usual engine lookup. */
struct daemon_params daemon_default_params(void);

/* Does everything that can fail before a port is opened: reads and
 * validates the config, locates the engine, reads every local model's
 * header and chooses the placement on the budget, and compiles the
 * pipelines. What it does and every failure are logged on stderr. Returns
 * TANDEM_OK with the daemon in *out (output; caller frees it with
 * daemon_free()), TANDEM_ERR_INVAL when the configuration is at fault,
 * another code for a runtime failure; *out is NULL then. */
tandem_err daemon_new(const struct daemon_params *p, struct daemon **out);

/* The number of models the config names, local and remote. */
size_t daemon_n_models(const struct daemon *d);

/* Hashes the models pipelines use, opens the logs, the audit log and the
 * listening socket, and serves until a SIGTERM or SIGINT has drained every
 * request and stopped every engine (SIGHUP re-reads the config). Call it
 * once. Returns TANDEM_OK after a clean stop, TANDEM_ERR_INVAL when the
 * listen address is malformed, another code for a runtime failure (logged
 * on stderr). */
tandem_err daemon_run(struct daemon *d);

/* Stops what still runs and releases the daemon; logs the audit lines that
 * could not be written. daemon_free(NULL) is a no-op. */
void daemon_free(struct daemon *d);

#endif
