/* private_daemon.h: a private `tandem serve` for one command (decide, mcp).
 *
 * When no daemon listens where the config says, a command starts the same
 * binary as `tandem serve --config F --listen 127.0.0.1:0` in a child, waits
 * for it to report readiness and its URL over the sd_notify protocol (a
 * datagram socket in $NOTIFY_SOCKET: "READY=1", "STATUS=serving on URL",
 * what it would tell systemd), uses it, and stops it. The child dies with its
 * parent (PDEATHSIG), its stdin and stdout are /dev/null, and its log goes to
 * a private file (shown on failure) or, verbose, to the parent's stderr. */
#ifndef TANDEM_PRIVATE_DAEMON_H
#define TANDEM_PRIVATE_DAEMON_H

#include <stdbool.h>

#include "base/err.h"

struct private_daemon; /* opaque */

struct private_daemon_params {
    const char *command;      /* for messages: "tandem decide" */
    const char *config;       /* the config file the daemon serves */
    const char *llama_server; /* --llama-server for the child; NULL = the usual lookup */
    bool verbose;             /* the child's log on our stderr instead of a file */
};

/* Starts a daemon and waits until it serves (at most 120 s); *out holds it
 * (stop with private_daemon_stop). On failure *out is NULL and the message,
 * prefixed by p->command, is on stderr: the child's log is the message, so
 * it is not folded into a buffer. Returns TANDEM_OK, TANDEM_ERR_NOMEM, or
 * TANDEM_ERR_SPAWN when the daemon could not start or did not get ready. */
tandem_err private_daemon_start(const struct private_daemon_params *p, struct private_daemon **out);

/* The daemon's base URL, "http://127.0.0.1:PORT". */
const char *private_daemon_url(const struct private_daemon *d);

/* SIGTERM, then waits for the daemon to drain and stop its engines (SIGKILL
 * after 60 s); shows its log on stderr when show_log; frees d. NULL is a
 * no-op. */
void private_daemon_stop(struct private_daemon *d, bool show_log);

#endif
