/* cli_daemon.h: how the client commands (ps, load, unload, feedback) reach a
 * running daemon: its address and one JSON exchange. */
#ifndef TANDEM_CLI_DAEMON_H
#define TANDEM_CLI_DAEMON_H

#include <stddef.h>

#include <jansson.h>

/* The daemon's address when neither --url nor --config names one. */
#define CLI_DAEMON_DEFAULT_URL "http://127.0.0.1:8090"

/* The daemon's base URL into out[cap]: url when given, else config's listen
 * address, else CLI_DAEMON_DEFAULT_URL. Returns 0, or 2 (usage) after
 * printing "tandem CMD: why" (config unreadable, or listening on port 0). */
int cli_daemon_url(const char *url, const char *config, const char *cmd, char *out, size_t cap);

/* One exchange with the daemon at base: GET path when body is NULL, else POST
 * body (JSON text), with $TANDEM_API_KEY as the key and headers (more "Name:
 * value" lines, NULL-terminated; NULL = none). Returns the parsed answer of a
 * 2xx (caller owns), or NULL after printing why ("tandem CMD: ...": the daemon
 * unreachable, or its status and error message). */
json_t *cli_daemon_call(const char *cmd, const char *base, const char *path, const char *body,
                        const char *const *headers);

#endif
