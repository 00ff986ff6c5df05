/* mcp_stdio.h: the MCP (serve/mcp) on a line stream, bridged to a daemon's
 * HTTP API: what `tandem mcp` serves on stdin and stdout (docs/mcp.md).
 *
 * A bridge reads one JSON-RPC message per line from a file descriptor and
 * writes one per line to a stream, and nothing else; every tool call becomes
 * one request to the daemon at its url, in a thread of its own. Usage:
 * mcp_stdio_new, then mcp_stdio_refresh_catalog to learn whether a daemon
 * answers (and mcp_stdio_set_url to point at another, e.g. a private one),
 * then mcp_stdio_run until the input ends, then mcp_stdio_free. */
#ifndef TANDEM_MCP_STDIO_H
#define TANDEM_MCP_STDIO_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

/* A line longer than this many bytes is refused with a JSON-RPC error
 * (-32600, id null) and skipped; the bridge reads on. */
#define MCP_STDIO_MAX_MESSAGE (4u << 20)

struct mcp_stdio_params {
    const char *url;             /* the daemon's base URL ("http://127.0.0.1:8090"); copied,
                                  * at most 299 bytes kept; NULL or "" = none yet */
    const char *api_key;         /* sent as a bearer token; copied; NULL = none */
    volatile sig_atomic_t *stop; /* nonzero stops mcp_stdio_run as if the input ended (a
                                  * signal handler sets it; the read must then fail with
                                  * EINTR); borrowed, must outlive the bridge; NULL = none */
};

/* All fields NULL. */
struct mcp_stdio_params mcp_stdio_default_params(void);

struct mcp_stdio; /* opaque: one client's session and its daemon */

/* Returns a new bridge with no tools but status (free with mcp_stdio_free),
 * NULL on OOM. p is copied as its fields say. Starts no thread and sends
 * nothing. */
struct mcp_stdio *mcp_stdio_new(const struct mcp_stdio_params *p);

/* Frees s (after mcp_stdio_run has returned, if it ran). NULL is a no-op. */
void mcp_stdio_free(struct mcp_stdio *s);

/* Points s at the daemon at url (copied, as the params' url); call it before
 * mcp_stdio_run. */
void mcp_stdio_set_url(struct mcp_stdio *s, const char *url);

/* The daemon's base URL ("" = none), valid until the next mcp_stdio_set_url
 * or mcp_stdio_free. */
const char *mcp_stdio_url(const struct mcp_stdio *s);

/* Reads the daemon's catalog (GET /v1/pipelines and GET /v1/models) and
 * rebuilds the tools from it; while serving, tells the client when they
 * changed. Returns whether the daemon answered both. */
bool mcp_stdio_refresh_catalog(struct mcp_stdio *s);

/* Serves: reads messages from in_fd (borrowed; blocking reads), answers them
 * on out (borrowed; flushed after each line), runs tool calls, reports their
 * progress and follows the daemon's reloads, until in_fd ends, a read fails
 * or *stop is set. Then cancels the calls in flight, waits for their threads
 * and returns. Call it at most once per bridge. */
void mcp_stdio_run(struct mcp_stdio *s, int in_fd, FILE *out);

#endif
