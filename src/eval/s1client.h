/* s1client.h: a client of POST /v1/systemone (or another JSON route, such as
 * /v1/pipelines/NAME, or GET /v1/status) on any endpoint.
 *
 * The blocking client of the commands and the evaluator, on libcurl's easy
 * interface (the daemon's own clients, serve/upstream and serve/remote, run
 * on libcurl's multi interface in its event loop; see serve/curl_loop.h).
 * One handle holds one connection (kept alive between requests) and must be
 * used by one thread at a time; run K handles for K requests in flight.
 * tandem's evaluation talks to tandem, a bare llama-server or a hosted API
 * through this same contract (shared/reference/systemone-api.md). */
#ifndef TANDEM_S1CLIENT_H
#define TANDEM_S1CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

/* The most response bytes one request may return. */
#define S1CLIENT_MAX_RESPONSE (16u << 20)

struct s1client;

struct s1client_params {
    const char *endpoint; /* base URL, "http://host:port" (a trailing "/v1/systemone" or "/"
                             is accepted); copied */
    const char *api_key;  /* sent as "Authorization: Bearer KEY"; NULL = no header; copied */
    long timeout_ms;      /* whole-request limit in milliseconds; 0 = 60000 */
    const char *path;     /* the route to POST to; NULL = "/v1/systemone"; copied */
    const char *unix_socket; /* connect to this unix socket instead of the endpoint's
                              * host and port (an engine in tandem's private run folder;
                              * the endpoint is then "http://localhost"); NULL = TCP;
                              * copied */
    const char *const *headers; /* more "Name: value" request headers, NULL-terminated;
                                 * NULL = none; copied */
    bool (*cancelled)(void *user); /* asked at least once a second during an exchange
                                    * (libcurl's progress callback): true abandons it
                                    * (TANDEM_ERR_CANCELLED); NULL = never */
    void *cancel_user;
};

/* Returns the defaults: no endpoint, no key, 60 s timeout. */
struct s1client_params s1client_default_params(void);

/* Creates a client for params->endpoint into *out (caller owns; release with
 * s1client_free()). Initialises libcurl once per process, thread-safely.
 * Returns TANDEM_ERR_INVAL when the endpoint is not an http:// or https:// URL,
 * TANDEM_ERR_NOMEM, or TANDEM_ERR_HTTP when libcurl cannot start; err[errlen]
 * (optional) says why. */
tandem_err s1client_new(const struct s1client_params *params, struct s1client **out, char *err,
                        size_t errlen);

/* Releases the client and its connection. s1client_free(NULL) is a no-op. */
void s1client_free(struct s1client *c);

/* Returns the full request URL ("<endpoint><path>"), valid until
 * s1client_free(). */
const char *s1client_url(const struct s1client *c);

/* POSTs the JSON text body[0..len) and waits for the answer. On a completed
 * exchange returns TANDEM_OK with *status the HTTP status and *response the
 * parsed body (caller owns: json_decref()), or NULL when the body is not JSON,
 * in which case err[errlen] (optional) quotes the start of the body. Returns
 * TANDEM_ERR_TIMEOUT, TANDEM_ERR_TOOBIG (response over S1CLIENT_MAX_RESPONSE),
 * TANDEM_ERR_CANCELLED (params.cancelled said so),
 * TANDEM_ERR_REFUSED (nothing listens at the endpoint) or TANDEM_ERR_HTTP
 * (another connection failure) with err[errlen] (optional) saying why;
 * *response is NULL then. */
tandem_err s1client_post(struct s1client *c, const char *body, size_t len, long *status,
                         json_t **response, char *err, size_t errlen);

/* GETs the client's path (a status route) and waits for the answer; returns
 * as s1client_post. A later s1client_post sets the method back to POST. */
tandem_err s1client_get(struct s1client *c, long *status, json_t **response, char *err,
                        size_t errlen);

/* Receives one line of a stream (without its line break; borrowed for the
 * call). Returns false to end the stream. */
typedef bool (*s1client_line_fn)(void *user, const char *line, size_t len);

/* GETs the client's path as a stream (server-sent events): on_line gets each
 * line until the server ends the answer, on_line returns false, or
 * params.cancelled says so; no timeout applies. Returns TANDEM_OK (*status
 * the HTTP status: check it before trusting the lines),
 * TANDEM_ERR_CANCELLED, or TANDEM_ERR_REFUSED / TANDEM_ERR_HTTP with
 * err[errlen] saying why. */
tandem_err s1client_get_lines(struct s1client *c, s1client_line_fn on_line, void *user,
                              long *status, char *err, size_t errlen);

/* The last answer's Retry-After in seconds (the delay form), -1 when it had
 * none or no exchange completed. */
long s1client_retry_after(const struct s1client *c);

#endif
