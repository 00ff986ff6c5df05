/* api.h: the routes of `tandem serve`.
 *
 *   POST /v1/systemone                    validated, routed by model, passed through
 *   POST /v1/chat/completions, /v1/completions, /v1/embeddings
 *                                         OpenAI-style passthrough (SSE streamed)
 *   GET  /v1/models                       TypeSafe "models" and OpenAI "data" in one body
 *   POST /v1/pipelines/{name}, GET /v1/pipelines   decide-then-verify pipelines
 *   GET  /health, /livez, /v1/status, /metrics
 *   POST /admin/models/{name}/load, /admin/models/{name}/unload, /admin/cache/clear
 *   GET  /openapi.yaml                    this API's contract (docs/openapi.yaml, built in)
 *   POST /mcp                             the MCP for agents (serve/mcp_http), when mcp.http
 *
 * Every error body has one shape (s1_error_body). The api owns no models: it
 * routes to the scheduler's indices (local models) or the remote set's
 * (upstream: models), and everything it is given is borrowed. The gateway
 * contract (docs/scale-out.md) lives here: honest /health, node gauges on
 * /metrics, retryable statuses with Retry-After, one deadline from the
 * request, the gateway and the config, and x-request-id, x-tandem-node and
 * endpoint-load-metrics on every answer. */
#ifndef TANDEM_API_H
#define TANDEM_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/audit.h"
#include "serve/events.h"
#include "serve/config.h"
#include "serve/dcache.h"
#include "serve/http.h"
#include "serve/mcp_http.h"
#include "base/nvml.h"
#include "serve/pipeline.h"
#include "serve/prom.h"
#include "serve/remote.h"
#include "serve/sched.h"
#include "serve/store.h"
#include "serve/upstream.h"

/* A model as the api routes it. */
struct api_model {
    const struct config_model *cm; /* name, aliases */
    size_t sched_index;            /* a local model's; SIZE_MAX for a remote one */
    size_t remote_index;           /* a remote model's; SIZE_MAX for a local one */
    const char *decision_type;     /* "" for a generative model */
    const char *arch;
    uint32_t n_ctx;                /* context the engine runs with */
    const char *sha256;            /* of the header bytes; "" when unknown */
    const char *file_sha256;       /* of the whole file; "" when not computed */
    int64_t created;               /* Unix seconds: the modification time of the file
                                    * behind the model (the GGUF; the config for a remote
                                    * model); 0 = unknown (/v1/models then omits it) */
};

struct api_params {
    const struct config *cfg;      /* api_keys, limits, default model, log_bodies */
    const struct api_model *models;
    size_t n_models;
    size_t default_model;          /* index into models; SIZE_MAX = none */
    struct sched *sched;
    struct upstream_client *engines;   /* connections to local engines: sched_engine_client */
    struct remote *remote;         /* remote models; NULL when there are none */
    struct prom *metrics;          /* may be NULL */
    struct audit *audit;           /* may be NULL */
    struct nvml *nvml;             /* GPU memory for /metrics; NULL = no GPU */
    const struct pipeline_set *pipelines; /* the config's pipelines (possibly none) */
    struct events *events;         /* GET /v1/events, and where requests and verdicts
                                    * are published; NULL = none */
    struct event_base *base;       /* the daemon's loop (POST /mcp's progress timers,
                                    * a pipeline stage's cache hit) */
    struct dcache *cache;          /* the decision cache (serve/dcache); NULL = none */
    struct store *store;           /* the request store (serve/store); NULL = off */
};

struct api; /* opaque */

/* Returns a new api (caller frees with api_free), NULL on OOM. */
struct api *api_new(const struct api_params *p);

/* Cancels every exchange still in flight and frees the api. NULL is a no-op. */
void api_free(struct api *a);

/* Points the api at new borrowed parameters (a reload). Calls in flight keep
 * the model index they were routed to. */
void api_set_params(struct api *a, const struct api_params *p);

enum api_phase {
    API_STARTING,  /* /health 503 "starting"; requests are admitted */
    API_SERVING,   /* /health 200 while a request could be admitted now */
    API_DRAINING,  /* /health 503 with x-envoy-immediate-health-check-fail; requests
                    * are still admitted (limits.drain_delay) */
    API_STOPPING   /* as draining, and new requests get 503 with Retry-After; the MCP's
                    * subscriptions/listen streams end */
};

/* Moves the api to phase. */
void api_set_phase(struct api *a, enum api_phase phase);

/* One route: its path, where "{name}" stands for a model's or pipeline's
 * name, and the methods it takes, space-separated ("POST", "GET HEAD"). */
struct api_route {
    const char *path;
    const char *methods;
};

/* Copies up to cap of the routes the api answers into out (static strings)
 * and returns how many there are. docs/openapi.yaml documents the same set. */
size_t api_routes(struct api_route *out, size_t cap);

/* The http handler: pass with the api as user. Every request first passes
 * api_check_head (a detached request has had no head check; a refusal there
 * is answered, audited and counted as any error). */
void api_handle(struct http_req *r, void *api);

/* A body[cap] of this many bytes always holds api_check_head's document. */
#define API_CHECK_HEAD_BODY_MAX 2048

/* Decides from a request's head alone whether it may proceed: method, the request-target as
 * received (path and query, still percent-encoded), and the request headers. Returns 0 to admit;
 * else the HTTP status to refuse with (400, 401, 403 or 415) and writes tandem's JSON error
 * document (s1_error_body's shape) into body[cap]. The HTTP server calls it as its head hook
 * (http_head_fn, from tandem serve) before the body is read; api_handle applies it to every
 * request too.
 *
 * In order (the first failure decides):
 *   1. the target: a request-target that is not a URI, or whose decoded path holds a NUL
 *      (%00), is 400;
 *   2. Host: none (RFC 9112 section 3.2), more than one, or one that is not host[:port] is
 *      400; a name that is not the listen address, localhost, 127.0.0.1, [::1], an IP
 *      literal or one of allowed_hosts (whatever the port; "*" admits any) is 403;
 *   3. Origin, when sent: "http://" + the request's own Host (the page is this daemon's, as
 *      the dashboard's), or one of allowed_origins; anything else (another port, "null") is
 *      403;
 *   4. Content-Type: a request with a body (Content-Length above 0, or Transfer-Encoding)
 *      needs one, and any Content-Type sent must be application/json (parameters such as
 *      charset allowed): else 415;
 *   5. the API key (api_keys), on every route but the probes, /openapi.yaml, /ui and
 *      /metrics (unless metrics.require_key), and never on OPTIONS (a preflight carries
 *      none): else 401; the answer should carry WWW-Authenticate: Bearer.
 * Host and Origin are judged before the key, so a browser page is refused with or without
 * one. method and target are borrowed; headers may be NULL (no headers: a 400). body may be
 * NULL when cap is 0; a cap of API_CHECK_HEAD_BODY_MAX always suffices (less may truncate the
 * message to a generic one). Reads the api's config as it is now (a reload applies at once).
 * over_limit (the server's connection cap is full): an otherwise admitted request is refused
 * 503 unavailable_error. A refusal is audited, published and counted as an answer (it never
 * reaches api_handle), under the request id written into id[HTTP_REQUEST_ID_MAX] (the
 * client's x-request-id or x-typesafe-request-id when it is a short token, else a new one;
 * may be NULL). */
int api_check_head(struct api *a, const char *method, const char *target,
                   const struct evkeyvalq *headers, bool over_limit, char *body, size_t cap,
                   char *id);

/* Retries the audit log's waiting lines, if any, and publishes its health
 * (metrics, the stderr lines): the daemon calls it every second, so lines
 * land soon after the disk recovers even when no request comes. */
void api_audit_retry(struct api *a);

/* Parses the read timeout the OpenAI Python SDK announces in its
 * x-stainless-read-timeout header: decimal seconds as Python's str(float)
 * writes them ("600", "30.0", "0.25", "1e-05"), more than 0 and at most
 * 86400. On TANDEM_OK *ms (output) gets them in milliseconds, rounded to the
 * nearest and at least 1; otherwise *ms is left alone and the result is
 * TANDEM_ERR_FORMAT (NULL, empty, a leading sign or space, hex, inf, nan, any other
 * text) or TANDEM_ERR_RANGE (0 or more than a day). value is borrowed. */
tandem_err api_parse_sdk_timeout(const char *value, int64_t *ms);

/* Calls answered or still in flight. */
uint32_t api_calls_in_flight(const struct api *a);

#endif
