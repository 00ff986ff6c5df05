/* remote.h: models served by remote endpoints (a model's `upstream:` list).
 *
 * A remote model is an ordered list of base URLs (another tandem, a
 * llama-server, SGLang or vLLM, a hosted TypeSafe endpoint). The module polls
 * each URL's health on an interval, sends each call to the healthy URL with
 * the fewest of tandem's own outstanding calls (list order breaks ties), and
 * fails over to the next healthy URL on a connect failure, a reset, 429, 502
 * or 503 while the deadline allows; never on any other status. Transfers run
 * on libcurl's multi interface driven by the daemon's libevent loop, so a
 * slow upstream never blocks it. Redirects are not followed; TLS is verified
 * (libcurl's defaults). Remote models take no memory in the plan. */
#ifndef TANDEM_REMOTE_H
#define TANDEM_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "base/err.h"
#include "serve/prom.h"

#define REMOTE_MAX_URLS 16

/* Checks one upstream base URL: http:// or https://, a host, an optional
 * port, an optional path prefix (no trailing "/" needed), and nothing else
 * (no user info, query or fragment). Returns TANDEM_OK, or TANDEM_ERR_FORMAT
 * with err[errlen] saying what is wrong ("expected http:// or https://",
 * "no host", "bad port 99999", "query strings are not allowed"). */
tandem_err remote_url_check(const char *url, char *err, size_t errlen);

struct remote;      /* opaque: every remote model of one config */
struct remote_call; /* opaque: one call in flight */

struct remote_params {
    int64_t health_interval_ms;   /* between health polls of each URL; 0 = 1000 */
    uint64_t max_response_bytes;  /* a larger answer is a 502 naming the upstream;
                                   * 0 = 64 MiB */
    struct prom *metrics;         /* borrowed; NULL = none. Registers
                                   * tandem_upstream_up{model,upstream} (gauge),
                                   * tandem_upstream_requests_total{model,upstream,code}
                                   * (counter; code "error" when no status came back)
                                   * and tandem_upstream_request_duration_seconds
                                   * {model,upstream} (histogram) */
};

/* One remote model. Strings are copied. */
struct remote_model_spec {
    const char *name;             /* the config's model name (metrics, messages) */
    const char *const *urls;      /* n_urls base URLs, checked by remote_url_check */
    size_t n_urls;
    const char *api_key;          /* sent as "Authorization: Bearer <key>"; NULL = none;
                                   * never logged or shown */
    int64_t timeout_ms;           /* cap on one attempt; 0 = the deadline only */
    const char *health_path;      /* e.g. "/health"; NULL = no polling (a URL is up
                                   * unless its last attempt failed to connect, and
                                   * such a mark expires after one interval) */
};

/* Creates the set on base (borrowed). NULL on OOM or when libcurl cannot
 * start. */
struct remote *remote_new(struct event_base *base, const struct remote_params *p);

/* Cancels every call (no callbacks) and health poll, frees everything.
 * remote_free(NULL) is a no-op. */
void remote_free(struct remote *r);

/* Adds a model; *index is its index in this set. TANDEM_ERR_INVAL for a bad
 * URL or none; TANDEM_ERR_NOMEM. */
tandem_err remote_add_model(struct remote *r, const struct remote_model_spec *spec,
                            size_t *index);

/* Starts health polling of every URL of every model (the first poll at once).
 * Until a URL's first poll answers it counts as down. */
void remote_start(struct remote *r);

/* How a call ended. Everything is borrowed for the callback's duration. */
struct remote_result {
    int status;                   /* what tandem should answer: the upstream's own
                                   * status when an upstream answered with a JSON
                                   * body (200, 4xx, 5xx, passed through), 502 when
                                   * its answer was not JSON, too large or a redirect,
                                   * 503 when no URL was up or every one refused,
                                   * 504 when the deadline passed first */
    bool from_upstream;           /* body is the upstream's answer, unchanged */
    const char *body;             /* the upstream's body (from_upstream), else NULL */
    size_t len;
    const char *upstream;         /* the URL that answered, or the last one tried;
                                   * NULL when none was tried */
    unsigned attempts;            /* URLs tried (0 when none was up) */
    const char *error;            /* when !from_upstream: one line naming the
                                   * upstream(s) and the cause, e.g. "http://10.0.0.5:8090:
                                   * connection refused" or "no healthy upstream
                                   * (http://a: HTTP 503 at last check)" */
};

typedef void (*remote_done_fn)(void *user, const struct remote_result *res);

/* Starts a call: POST <url><route> with body[len] (copied) as
 * application/json, headers x-request-id: request_id (may be NULL) and
 * x-envoy-expected-rq-timeout-ms: <ms left until deadline_ms> (absolute,
 * host_now_ms() based; <= 0 = none), and the model's key. done is called
 * exactly once, later, never from inside this call, unless the call is
 * cancelled. Returns NULL on OOM or a bad index (nothing is called back). */
struct remote_call *remote_call_start(struct remote *r, size_t index, const char *route,
                                      const char *body, size_t len, const char *request_id,
                                      int64_t deadline_ms, remote_done_fn done, void *user);

/* Abandons a call in flight (its client went away): the transfer is stopped
 * and no callback follows. */
void remote_call_cancel(struct remote_call *c);

/* Whether at least one URL of model index is up now. */
bool remote_model_up(const struct remote *r, size_t index);

/* Calls in flight to any URL of model index (0 for a bad index). */
uint32_t remote_model_running(const struct remote *r, size_t index);

/* Why model index is down: the first URL's last error, or "" when up.
 * Borrowed until the next poll. */
const char *remote_model_down_cause(const struct remote *r, size_t index);

/* Status of model index (new reference; NULL on OOM or bad index):
 * {"up": bool, "upstreams": [{"url", "up", "outstanding", "requests",
 * "last_error" (or null), "checked_ms_ago" (or null)}]}. Keys never appear. */
json_t *remote_status_json(const struct remote *r, size_t index);

#endif
