/* api_internal.h: what api.c, api_proxy.c and api_local.c share. INTERNAL: no other
 * module includes it; serve/api.h is the api's interface.
 *
 * The api is one module in three files, cut along its seams:
 *   api.c        a request becomes a call: dispatch, the head check and the key, the
 *                body (identity or zstd), the answer's common headers, and the call's one
 *                exit (api_call_finish: the audit line, the `request` event, the metrics);
 *   api_proxy.c  the exchanges that leave the node's own code: a local engine (passed
 *                through, server-sent events chunk by chunk), a remote model's upstreams,
 *                and the pipelines;
 *   api_local.c  the routes the api answers itself: health, status, models, pipelines,
 *                metrics, admin, events, the MCP, the dashboard and the contract.
 * A call is owned by api.c from api_handle to api_call_finish; the other two files answer
 * it through the functions below and never free it. */
#ifndef TANDEM_API_INTERNAL_H
#define TANDEM_API_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <jansson.h>

#include "serve/api.h"

#define API_AUDIT_BODY_MAX (256u << 10) /* bytes of a body the audit log and events show */

/* The decision cache's counters on /metrics and /v1/status, by name: "hits", "misses",
 * "coalesced", "bypasses", "evictions", "invalidations" (api_local.c). */
#define API_CACHE_COUNTERS 6
extern const char *const api_cache_counter_names[API_CACHE_COUNTERS];

/* The routes, in the router's order of kinds: everything up to API_ROUTE_PIPELINE is
 * work for a model or a pipeline (admission limits, `request` events), the rest is
 * answered locally. api_route_names[] holds their names for metrics and the audit log. */
enum api_route_id {
    API_ROUTE_SYSTEMONE, API_ROUTE_CHAT, API_ROUTE_COMPLETIONS, API_ROUTE_EMBEDDINGS,
    API_ROUTE_PIPELINE, API_ROUTE_MODELS, API_ROUTE_HEALTH, API_ROUTE_LIVEZ, API_ROUTE_STATUS,
    API_ROUTE_METRICS, API_ROUTE_ADMIN, API_ROUTE_PIPELINES, API_ROUTE_OPENAPI,
    API_ROUTE_EVENTS, API_ROUTE_UI, API_ROUTE_MCP, API_ROUTE_FEEDBACK, API_ROUTE_QUALITY,
    API_ROUTE_OTHER
};

extern const char *const api_route_names[];

/* The request store's counters on /metrics (api_outcomes.c): records, errors, dropped,
 * expired; and the quality series by model and question: count, accuracy, nll, ece. */
#define API_STORE_COUNTERS 4
#define API_QUALITY_SERIES 4

/* The node gauges (docs/scale-out.md): one unlabeled series each, and their
 * vLLM-named twins with metrics.compat: vllm. */
struct api_node_gauges {
    struct prom_metric *waiting, *running, *busy_ratio, *capacity, *ready;
    struct prom_metric *vllm_waiting, *vllm_running, *vllm_kv;
};

struct api {
    struct api_params p;
    enum api_phase phase;
    uint32_t in_flight;
    double run_ms;      /* running time of an answered request, moving average */
    TAILQ_HEAD(, api_call) calls; /* in flight, for api_free */
    struct prom_metric *m_requests, *m_latency, *m_queue_wait, *m_gpu_used, *m_gpu_total;
    struct prom_metric *m_rejections, *m_model_waiting, *m_model_running;
    struct prom_metric *m_audit_errors, *m_audit_dropped;
    struct prom_metric *m_cache[API_CACHE_COUNTERS], *m_cache_entries, *m_cache_bytes;
    struct dcache_stats *cache_published; /* per local model: the counts on /metrics */
    struct api_node_gauges g;
    struct mcp_http *mcp;          /* POST /mcp, made at its first request */
    struct audit_stats audit_seen; /* the counts last published, and whether it failed */
    int64_t audit_logged_at;       /* the last stderr line about a failing audit log */
    bool audit_said_failing;       /* that line was printed; no "recovered" since */
    bool closing;                  /* api_free is ending every call */
    struct prom_metric *m_store[API_STORE_COUNTERS], *m_store_queue, *m_store_failed;
    struct prom_metric *m_feedback, *m_quality[API_QUALITY_SERIES];
    struct prom_metric *m_pipeline_count, *m_pipeline_precision;
    struct store_stats store_published; /* the store's counts last on /metrics */
    struct event *quality_ev;      /* refreshes the quality series */
    bool quality_dirty, quality_asked; /* labels came since; a report is on its way */
};

struct api_call {
    struct api *api;
    struct http_req *r;
    enum api_route_id route;
    const char *method; /* static; the request is gone once answered */
    char id[HTTP_REQUEST_ID_MAX];
    const struct api_model *model;
    struct sched_job *job;
    struct upstream_call *up;
    struct remote_call *rcall;  /* a remote model's call in flight */
    char upstream[256];         /* the upstream that answered it ("" = local) */
    unsigned attempts;          /* sends: to an engine (a resend after its failure
                                 * makes 2), or upstreams tried */
    struct pipeline_run *run; /* a pipeline in flight */
    char pipeline[128];       /* its name ("" = not a pipeline call) */
    char question[PIPELINE_QUESTION_MAX]; /* a pipeline called on /v1/systemone: the
                                           * question its answer goes under, else "" */
    char verdict[16];         /* its verdict, for the audit line */
    char *body;          /* decoded request body (owned) */
    size_t body_len;
    json_t *request;     /* parsed body */
    int64_t t0;
    int64_t deadline_ms; /* the deadline, in ms from t0 (0 = none, or not computed) */
    struct sched_timing timing;
    uint32_t position;
    bool streaming, answered;
    bool headers_added;  /* the common headers are on the answer (api_call_add_headers) */
    bool cors;           /* from a foreign origin of allowed_origins (CORS answers) */
    const char *reject;  /* why tandem refused it (tandem_rejections_total), else NULL */
    long retry_after;    /* Retry-After seconds when known (a failed model's back-off);
                          * 0 = estimate from the load */
    long input_tokens;
    char *response_copy; /* for the audit log with logs.bodies */
    struct dcache_ticket *ticket; /* its part in a decision-cache flight, or NULL */
    struct event *relook_ev; /* looks up again on the loop's next turn: the identical
                              * request it waited for went away without an answer */
    bool store_wait;     /* waits for the store's reply (feedback, quality) */
    const char *cache;   /* what the decision cache did: "hit", "miss", "coalesced",
                          * "bypass", "partial" (a pipeline), or NULL (not cached) */
    TAILQ_ENTRY(api_call) link; /* on api->calls */
};

/* --- api.c: the call's answer and its end ---------------------------------------------- */

/* The one exit of a call: writes its audit line, publishes its `request` event, counts
 * it, cancels what it still has in flight and frees it. The answer was sent (or the
 * client is gone) before this; c is invalid after. */
void api_call_finish(struct api_call *c, int status, const char *error);

/* Answers c with tandem's error shape (s1_error_body; type NULL = s1_error_type(status))
 * and ends it (api_call_finish). extra (stolen, may be NULL) is merged into "error". On a
 * stream whose headers are out, ends the stream instead. */
void api_call_fail(struct api_call *c, int status, const char *type, const char *message,
                   const char *param, json_t *extra);

/* Answers c with body (stolen; NULL = "{}") as JSON, with the common headers. Does not
 * end the call. */
void api_call_reply_json(struct api_call *c, int status, json_t *body);

/* Adds the headers every answer carries (x-request-id, x-typesafe-request-id, the load
 * headers, x-tandem-node; the model and queue position once routed). Idempotent: a
 * second call adds nothing. */
void api_call_add_headers(struct api_call *c);

/* Whether c's request carries the cache directive (lowercase: "no-cache", "no-store") in
 * Cache-Control or Pragma, as a comma-separated token in any case. */
bool api_call_directive(const struct api_call *c, const char *directive);

/* Adds Retry-After: c->retry_after, else an estimate from the load. */
void api_call_add_retry_after(struct api_call *c);

/* Why tandem refused a request with status (message from the scheduler or a pipeline),
 * for tandem_rejections_total; NULL when it is not a refusal. A static string. */
const char *api_rejection(const struct api *a, int status, const char *message);

/* Takes the body out of c's request into c->body (decoded: identity or zstd, within
 * limits.max_body). Returns false after failing the call. */
bool api_call_read_body(struct api_call *c);

/* Parses c->body into c->request, a JSON object. Returns false after failing the call. */
bool api_call_parse_json(struct api_call *c);

/* The model name (NULL or "jev-latest" = the default) names, or NULL. Borrowed from a. */
const struct api_model *api_find_model(const struct api *a, const char *name);

/* Sets c->model from the request's "model". Returns false after failing the call. */
bool api_call_route_model(struct api_call *c);

/* The node's load, as gateways read it. */
struct api_node_load {
    uint32_t waiting, running; /* admitted and not dispatched; dispatched, not answered */
    uint32_t busy, slots;      /* engine slots of the resident models */
};

/* Fills *l (output) with the load now. */
void api_node_load(const struct api *a, struct api_node_load *l);

/* Busy slots over all slots (0 to 1; 0 when there are none). */
double api_busy_ratio(const struct api_node_load *l);

/* Why no request could be admitted now (into why[cap]), or false when one could. */
bool api_cannot_admit(struct api *a, char *why, size_t cap);

/* Publishes the audit log's new failures as metrics and stderr lines (a->audit_seen). */
void api_audit_health(struct api *a);

/* A file the binary serves, embedded at build time (api.c holds them: the Makefile makes
 * their generated headers prerequisites of api.o). */
struct api_blob {
    const unsigned char *data;
    size_t len;
};

extern const struct api_blob api_openapi_yaml, api_ui_index_html, api_ui_app_css,
    api_ui_app_js;

/* --- api_proxy.c: the exchanges -------------------------------------------------------- */

/* POST /v1/systemone: validated against the contract, then sent to its model's engine
 * or upstreams, or run as the pipeline "pipelines/<name>" it names. Ends the call. */
void api_proxy_systemone(struct api_call *c);

/* POST /v1/chat/completions, /v1/completions, /v1/embeddings: routed by model and passed
 * through (streamed answers chunk by chunk). Ends the call. */
void api_proxy_passthrough(struct api_call *c);

/* POST /v1/pipelines/{name}. Ends the call. */
void api_proxy_pipeline(struct api_call *c);

/* --- api_outcomes.c: the request store's records and routes ---------------------------- */

/* Hands c's request and text[len], its 200 answer, to the store (when there is one and
 * the request does not say no-store). Call it before the answer is sent: the request's
 * headers are gone after. */
void api_store_answer(struct api_call *c, const char *text, size_t len);

/* POST /v1/feedback and GET /v1/quality: answered when the store replies. Ends the call. */
void api_feedback(struct api_call *c);
void api_quality(struct api_call *c);

/* The store's part of /v1/status ({"state": "off"} without one). */
json_t *api_store_status(struct api *a);

/* Publishes the store's counters on /metrics (before a render). */
void api_store_metrics(struct api *a);

/* Registers the store's and the quality series and starts their refresh; frees them. */
void api_outcomes_init(struct api *a);
void api_outcomes_free(struct api *a);

/* --- api_local.c: the routes answered here ----------------------------------------------- */

/* Answers a local route (c->route past API_ROUTE_PIPELINE) and ends the call. */
void api_local_handle(struct api_call *c);

/* Tells the MCP transport, when there is one, the catalog now (a reload). */
void api_local_mcp_refresh(struct api *a);

#endif
