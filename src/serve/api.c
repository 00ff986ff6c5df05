/* api.c: routes, validation and passthrough for `tandem serve`.
 *
 * A request becomes a call: authenticated (bearer keys compared as SHA-256
 * digests with CRYPTO_memcmp, so neither content nor length leaks through
 * timing), its body decoded (identity or zstd) and checked against the size
 * limit, parsed, validated (System One requests against the contract, so an
 * error names the field before any engine is involved), routed to a model,
 * and submitted to the scheduler with its deadline. When the scheduler
 * hands it an engine port the original body is forwarded unchanged; the
 * answer is passed through unchanged on success (server-sent events chunk by
 * chunk, as they arrive), and engine errors are rewritten into tandem's one
 * error shape with the engine's status and message. Every call ends in
 * exactly one place, finish(), which writes the audit line and the metrics. */
#include "serve/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <zstd.h>

#include "base/hash.h"
#include "base/host.h"
#include "base/mem.h"
#include "serve/s1.h"

#define MAX_TIMEOUT_MS 86400000LL
#define AUDIT_BODY_MAX (256u << 10)
/* the TypeSafe SDK requires a YYYY-MM-DD release date; a local file has none */
#define RELEASE_DATE_UNKNOWN "1970-01-01"

#define RUN_MS_UNKNOWN 1000.0 /* a request's expected running time before one is seen */

enum route { R_SYSTEMONE, R_CHAT, R_COMPLETIONS, R_EMBEDDINGS, R_PIPELINE, R_MODELS, R_HEALTH,
             R_LIVEZ, R_STATUS, R_METRICS, R_ADMIN, R_PIPELINES, R_OTHER };

static const char *const route_names[] = {"systemone", "chat", "completions", "embeddings",
                                          "pipeline", "models", "health", "livez", "status",
                                          "metrics", "admin", "pipelines", "other"};

/* The node gauges (docs/scale-out.md): one unlabeled series each, and their
 * vLLM-named twins with metrics.compat: vllm. */
struct node_gauges {
    struct prom_metric *waiting, *running, *busy_ratio, *capacity, *ready;
    struct prom_metric *vllm_waiting, *vllm_running, *vllm_kv;
};

struct api {
    struct api_params p;
    enum api_phase phase;
    uint32_t in_flight;
    double run_ms;      /* running time of an answered request, moving average */
    struct call *calls; /* in flight, for api_free */
    struct prom_metric *m_requests, *m_latency, *m_queue_wait, *m_gpu_used, *m_gpu_total;
    struct prom_metric *m_rejections, *m_model_waiting, *m_model_running;
    struct node_gauges g;
};

struct call {
    struct api *api;
    struct http_req *r;
    enum route route;
    const char *method; /* static; the request is gone once answered */
    char id[64];
    const struct api_model *model;
    struct sched_job *job;
    struct http_upstream *up;
    struct remote_call *rcall;  /* a remote model's call in flight */
    char upstream[256];         /* the upstream that answered it ("" = local) */
    unsigned attempts;          /* upstreams tried */
    struct pipeline_run *run; /* a pipeline in flight */
    char pipeline[128];       /* its name ("" = not a pipeline call) */
    char question[PIPELINE_QUESTION_MAX]; /* a pipeline called on /v1/systemone: the
                                           * question its answer goes under, else "" */
    char verdict[16];         /* its verdict, for the audit line */
    char *body;          /* decoded request body (owned) */
    size_t body_len;
    json_t *request;     /* parsed body */
    int64_t t0;
    struct sched_timing timing;
    uint32_t position;
    bool streaming, answered;
    const char *reject;  /* why tandem refused it (tandem_rejections_total), else NULL */
    long input_tokens;
    char *response_copy; /* for the audit log with logs.bodies */
    struct call *prev, *next;
};

/* --- calls ---------------------------------------------------------------------------------- */

static void new_request_id(char out[64]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        memset(b, 0, sizeof b);
    static const char hex[] = "0123456789abcdef";
    memcpy(out, "req_", 4);
    for (size_t i = 0; i < sizeof b; i++)
        out[4 + 2 * i] = hex[b[i] >> 4], out[5 + 2 * i] = hex[b[i] & 15];
    out[4 + 2 * sizeof b] = '\0';
}

static void iso_time(char out[40]) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 40 - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void link_call(struct api *a, struct call *c) {
    c->next = a->calls;
    if (a->calls)
        a->calls->prev = c;
    a->calls = c;
    a->in_flight++;
}

static void unlink_call(struct call *c) {
    struct api *a = c->api;
    if (c->prev)
        c->prev->next = c->next;
    else
        a->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    a->in_flight--;
}

/* Probes and scrapes (/health, /livez, /metrics) are not audited: gateways
 * and endpoint pickers send them many times a second. */
static void audit_call(struct call *c, int status, const char *error) {
    struct api *a = c->api;
    if (!a->p.audit || c->route == R_HEALTH || c->route == R_LIVEZ || c->route == R_METRICS)
        return;
    char when[40];
    iso_time(when);
    struct sched_timing *t = &c->timing;
    json_t *rec = json_pack("{sssssssssisIsIsIsI}", "time", when, "request_id", c->id, "route",
                            route_names[c->route], "method", c->method,
                            "status", status, "queue_ms", (json_int_t)t->queued_ms, "load_ms",
                            (json_int_t)t->loading_ms, "run_ms", (json_int_t)t->running_ms,
                            "total_ms", (json_int_t)(host_now_ms() - c->t0));
    if (!rec)
        return;
    json_object_set_new(rec, "model", c->model ? json_string(c->model->cm->name) : json_null());
    json_object_set_new(rec, "input_tokens",
                        c->input_tokens >= 0 ? json_integer(c->input_tokens) : json_null());
    if (c->pipeline[0]) {
        json_object_set_new(rec, "pipeline", json_string(c->pipeline));
        json_object_set_new(rec, "verdict", c->verdict[0] ? json_string(c->verdict) : json_null());
    }
    if (c->attempts) {
        json_object_set_new(rec, "upstream", c->upstream[0] ? json_string(c->upstream) : json_null());
        json_object_set_new(rec, "attempts", json_integer(c->attempts));
    }
    if (error)
        json_object_set_new(rec, "error", json_string(error));
    if (a->p.cfg->log_bodies) {
        size_t n = c->body_len < AUDIT_BODY_MAX ? c->body_len : AUDIT_BODY_MAX;
        json_object_set_new(rec, "request_body", json_stringn_nocheck(c->body ? c->body : "", n));
        if (c->response_copy)
            json_object_set_new(rec, "response_body", json_string_nocheck(c->response_copy));
    }
    if (audit_write(a->p.audit, rec) != TANDEM_OK)
        fprintf(stderr, "tandem: audit log write failed\n");
    json_decref(rec);
}

static void count_call(struct call *c, int status) {
    struct api *a = c->api;
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    const char *labels[] = {c->model ? c->model->cm->name : "", route_names[c->route], code};
    const char *route[] = {route_names[c->route]};
    if (a->m_requests)
        prom_add(a->m_requests, labels, 1);
    if (a->m_latency)
        prom_observe(a->m_latency, route, (double)(host_now_ms() - c->t0) / 1000.0);
    if (a->m_queue_wait && (c->model || c->pipeline[0]))
        prom_observe(a->m_queue_wait, route,
                     (double)(c->timing.queued_ms + c->timing.loading_ms) / 1000.0);
    const char *rejected[] = {c->model ? c->model->cm->name : c->pipeline, c->reject};
    if (a->m_rejections && c->reject)
        prom_add(a->m_rejections, rejected, 1);
    if (status == 200 && c->timing.running_ms > 0) /* for Retry-After: see retry_after_s */
        a->run_ms = a->run_ms > 0 ? 0.8 * a->run_ms + 0.2 * (double)c->timing.running_ms
                                  : (double)c->timing.running_ms;
}

/* The one exit of a call: logs it and frees it. The answer was sent (or the
 * client is gone) before this. */
static void finish(struct call *c, int status, const char *error) {
    if (c->job)
        sched_job_timing(c->job, &c->timing);
    audit_call(c, status, error);
    count_call(c, status);
    pipeline_run_cancel(c->run);
    if (c->up)
        http_upstream_cancel(c->up);
    if (c->rcall)
        remote_call_cancel(c->rcall);
    if (c->job)
        sched_job_done(c->job, status == 200);
    unlink_call(c);
    json_decref(c->request);
    mem_free(c->body);
    mem_free(c->response_copy);
    mem_free(c);
}

/* --- load, as gateways read it ------------------------------------------------------------------ */

struct node_load {
    uint32_t waiting, running; /* admitted and not dispatched; dispatched, not answered */
    uint32_t busy, slots;      /* engine slots of the resident models */
};

static void node_load(const struct api *a, struct node_load *l) {
    *l = (struct node_load){0};
    for (size_t i = 0; i < sched_model_count(a->p.sched); i++) {
        struct sched_counts n;
        sched_model_counts(a->p.sched, i, &n);
        l->waiting += n.waiting;
        l->running += n.running;
    }
    for (size_t i = 0; a->p.remote && i < a->p.n_models; i++)
        if (a->p.models[i].remote_index != SIZE_MAX)
            l->running += remote_model_running(a->p.remote, a->p.models[i].remote_index);
    sched_slots(a->p.sched, &l->busy, &l->slots);
}

static double busy_ratio(const struct node_load *l) {
    return !l->slots ? 0.0 : l->busy >= l->slots ? 1.0 : (double)l->busy / l->slots;
}

/* Seconds until a refused request would likely be admitted: the work ahead
 * of it over the slots, at the recent running time per request; at least 1. */
static long retry_after_s(const struct api *a) {
    struct node_load l;
    node_load(a, &l);
    double per = a->run_ms > 0 ? a->run_ms : RUN_MS_UNKNOWN;
    double s = (double)(l.waiting + l.running) * per / (l.slots ? l.slots : 1) / 1000.0;
    long whole = (long)s + (s > (double)(long)s);
    return whole < 1 ? 1 : whole > 3600 ? 3600 : whole;
}

/* Why no request could be admitted now (into why[cap]), or false when one could. */
static bool cannot_admit(const struct api *a, char *why, size_t cap) {
    static const char *const phase[] = {"starting", "", "draining", "draining"};
    if (a->phase != API_SERVING)
        return snprintf(why, cap, "%s", phase[a->phase]), true;
    struct node_load l;
    node_load(a, &l);
    if (l.waiting >= a->p.cfg->queue_depth)
        return snprintf(why, cap, "the admission queue is full (limits.queue_depth %u)",
                        a->p.cfg->queue_depth), true;
    for (size_t i = 0; i < a->p.n_models; i++) {
        const struct api_model *m = &a->p.models[i];
        if (m->remote_index != SIZE_MAX ? remote_model_up(a->p.remote, m->remote_index)
                                        : sched_model_state(a->p.sched, m->sched_index) !=
                                              SCHED_FAILED)
            return false;
    }
    return snprintf(why, cap, "no model can be served now (every engine failed or every "
                              "upstream is down; see /v1/status)"), true;
}

static void add_load_headers(struct call *c) {
    struct node_load l;
    node_load(c->api, &l);
    char orca[160];
    snprintf(orca, sizeof orca, "TEXT application_utilization=%.4g, named_metrics.requests_waiting=%u",
             busy_ratio(&l), l.waiting);
    http_req_add_header(c->r, "endpoint-load-metrics", orca);
    http_req_add_header(c->r, "x-tandem-node", c->api->p.cfg->node_id);
}

static void add_common_headers(struct call *c) {
    http_req_add_header(c->r, "x-request-id", c->id);
    http_req_add_header(c->r, "x-typesafe-request-id", c->id);
    add_load_headers(c);
    if (c->model) {
        char pos[16];
        snprintf(pos, sizeof pos, "%u", c->position);
        http_req_add_header(c->r, "X-Tandem-Model", c->model->cm->name);
        http_req_add_header(c->r, "X-Tandem-Queue-Position", pos);
    }
}

static void reply_json(struct call *c, int status, json_t *body) {
    char *text = body ? json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    add_common_headers(c);
    http_req_reply(c->r, status, "application/json", text ? text : "{}", text ? strlen(text) : 2);
    c->answered = true;
    free(text);
    json_decref(body);
}

/* Why tandem refused a request with status (message from the scheduler or a
 * pipeline), for tandem_rejections_total; NULL when it is not a refusal. A
 * 503 is "draining" while the node drains, "no_upstream" when a remote
 * model's upstreams were all down, else "no_memory" (the model cannot be
 * loaded now). */
static const char *rejection(const struct api *a, int status, const char *message) {
    if (status == 429)
        return "queue_full";
    if (status == 504)
        return "deadline";
    if (status != 503)
        return NULL;
    if (a->phase >= API_DRAINING) /* the scheduler shuts down only after this */
        return "draining";
    return message && strstr(message, "upstream") ? "no_upstream" : "no_memory";
}

static void add_retry_after(struct call *c) {
    char v[24];
    snprintf(v, sizeof v, "%ld", retry_after_s(c->api));
    http_req_add_header(c->r, "Retry-After", v);
}

/* Answers with tandem's error shape; extra (stolen, may be NULL) is merged
 * into the "error" object. Ends the call. */
static void fail_call(struct call *c, int status, const char *type, const char *message,
                      const char *param, json_t *extra) {
    if (c->streaming) { /* headers are out: all we can do is end the stream */
        http_req_stream_end(c->r);
        c->answered = true;
        json_decref(extra);
        finish(c, status, message);
        return;
    }
    json_t *body = s1_error_body(status, type ? type : s1_error_type(status), message, param);
    if (extra && body)
        json_object_update(json_object_get(body, "error"), extra);
    json_decref(extra);
    if (status == 429 || status == 503)
        add_retry_after(c);
    if (status == 401)
        http_req_add_header(c->r, "WWW-Authenticate", "Bearer");
    reply_json(c, status, body);
    finish(c, status, message);
}

static void on_client_gone(void *arg) {
    struct call *c = arg;
    if (c->answered)
        return;
    http_req_reply(c->r, 499, NULL, NULL, 0); /* frees the request; nothing is sent */
    c->answered = true;
    finish(c, 499, "client closed the connection");
}

/* --- authentication and body --------------------------------------------------------------- */

static bool authorized(const struct api *a, const struct http_req *r) {
    const struct config *cfg = a->p.cfg;
    if (!cfg->n_api_keys)
        return true;
    const char *h = http_req_header(r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return false;
    char given[HASH_SHA256_HEX_LEN + 1], want[HASH_SHA256_HEX_LEN + 1];
    hash_buffer_sha256(h + 7, strlen(h + 7), given);
    int ok = 0;
    for (size_t i = 0; i < cfg->n_api_keys; i++) { /* no early exit: every key is compared */
        hash_buffer_sha256(cfg->api_keys[i], strlen(cfg->api_keys[i]), want);
        ok |= CRYPTO_memcmp(given, want, HASH_SHA256_HEX_LEN) == 0;
    }
    return ok;
}

/* Decodes a zstd body into c->body, refusing more than max bytes. Returns
 * 0, or the HTTP status to fail with (400 corrupt, 413 too big). */
static int unzstd(struct call *c, const char *in, size_t len, uint64_t max) {
    ZSTD_DCtx *z = ZSTD_createDCtx();
    size_t cap = 64 * 1024, used = 0;
    char *out = mem_alloc(cap + 1);
    ZSTD_inBuffer src = {in, len, 0};
    int status = z && out ? 0 : 500;
    while (!status) {
        ZSTD_outBuffer dst = {out + used, cap - used, 0};
        size_t rc = ZSTD_decompressStream(z, &dst, &src);
        used += dst.pos;
        if (ZSTD_isError(rc))
            status = 400;
        else if (used > max)
            status = 413;
        else if (rc == 0 && src.pos == src.size)
            break;
        else if (src.pos == src.size && dst.pos < dst.size)
            status = 400; /* truncated frame */
        else if (used == cap) {
            char *grown = mem_realloc(out, cap * 2 + 1);
            status = grown ? 0 : 500;
            out = grown ? grown : out;
            cap *= 2;
        }
    }
    ZSTD_freeDCtx(z);
    if (status) {
        mem_free(out);
        return status;
    }
    out[used] = '\0';
    c->body = out;
    c->body_len = used;
    return 0;
}

/* Takes the body out of the request. Returns false after failing the call. */
static bool read_body(struct call *c) {
    uint64_t max = c->api->p.cfg->max_body_bytes;
    char msg[160];
    snprintf(msg, sizeof msg, "the request body is larger than the %llu-byte limit (limits.max_body)",
             (unsigned long long)max);
    if (http_req_body_too_big(c->r)) {
        fail_call(c, 413, NULL, msg, NULL, NULL);
        return false;
    }
    size_t len;
    const char *raw = http_req_body(c->r, &len);
    const char *enc = http_req_header(c->r, "Content-Encoding");
    if (enc && !strcasecmp(enc, "zstd")) {
        int st = unzstd(c, raw, len, max);
        if (st)
            fail_call(c, st, NULL, st == 413 ? msg : "the zstd request body cannot be decoded",
                      NULL, NULL);
        return st == 0;
    }
    if (enc && strcasecmp(enc, "identity")) {
        fail_call(c, 415, "invalid_request_error",
                  "unsupported Content-Encoding (tandem accepts identity and zstd)", NULL, NULL);
        return false;
    }
    c->body = mem_strndup(raw, len);
    c->body_len = len;
    return c->body != NULL;
}

static bool parse_json_body(struct call *c) {
    json_error_t e;
    c->request = json_loadb(c->body, c->body_len, JSON_REJECT_DUPLICATES, &e);
    if (!c->request) {
        char msg[300];
        snprintf(msg, sizeof msg, "request body is not valid JSON: %s at line %d, column %d",
                 e.text, e.line, e.column);
        fail_call(c, 400, "invalid_request_error", msg, NULL, NULL);
        return false;
    }
    if (!json_is_object(c->request)) {
        fail_call(c, 400, "invalid_request_error", "request body: expected a JSON object", NULL,
                  NULL);
        return false;
    }
    return true;
}

/* --- routing to a model ----------------------------------------------------------------------- */

static const struct api_model *find_model(const struct api *a, const char *name) {
    if (!name || !strcmp(name, "jev-latest"))
        return a->p.default_model < a->p.n_models ? &a->p.models[a->p.default_model] : NULL;
    const struct config_model *cm = config_find_model(a->p.cfg, name);
    for (size_t i = 0; cm && i < a->p.n_models; i++)
        if (a->p.models[i].cm == cm)
            return &a->p.models[i];
    return NULL;
}

static bool route_model(struct call *c) {
    json_t *jm = json_object_get(c->request, "model");
    if (jm && !json_is_string(jm)) {
        fail_call(c, 400, "invalid_request_error", "model: expected a string", "model", NULL);
        return false;
    }
    const char *name = jm ? json_string_value(jm) : NULL;
    c->model = find_model(c->api, name);
    if (c->model)
        return true;
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "%s%s%s; models:", name ? "unknown model \"" : "no model given and no default model",
                     name ? name : "", name ? "\"" : "");
    for (size_t i = 0; i < c->api->p.n_models && n > 0 && (size_t)n < sizeof msg; i++)
        n += snprintf(msg + n, sizeof msg - (size_t)n, " %s", c->api->p.models[i].cm->name);
    fail_call(c, 400, name ? "model_not_found" : "invalid_request_error", msg,
              "model", NULL);
    return false;
}

/* --- the engine exchange ---------------------------------------------------------------------- */

static const char *const forward_headers[] = {"Accept", NULL};

static long usage_input_tokens(const json_t *resp) {
    json_t *u = json_object_get(resp, "usage");
    json_t *t = json_object_get(u, "input_tokens");
    if (!t)
        t = json_object_get(u, "prompt_tokens");
    return json_is_integer(t) ? (long)json_integer_value(t) : -1;
}

/* An engine error answer, in tandem's shape, keeping the engine's status and
 * message; the encoders' "input too large" (a 500) is the client's error. */
static void engine_error(struct call *c, int status, const char *text, size_t len) {
    json_t *j = json_loadb(text, len, 0, NULL);
    json_t *err = json_object_get(j, "error");
    const char *msg = json_string_value(json_object_get(err, "message"));
    const char *type = json_string_value(json_object_get(err, "type"));
    char buf[1200];
    if (!msg) {
        snprintf(buf, sizeof buf, "model %s: engine answered %d: %.200s", c->model->cm->name,
                 status, len ? text : "(empty body)");
        msg = buf;
        type = "upstream_error";
        status = status >= 500 ? 502 : status;
    } else if (status == 500 && strstr(msg, "too large to process")) {
        snprintf(buf, sizeof buf, "model %s: the request does not fit the model's window: %s",
                 c->model->cm->name, msg);
        msg = buf;
        status = 400;
        type = "invalid_request_error";
    }
    fail_call(c, status, type, msg, NULL, NULL);
    json_decref(j);
}

static bool on_engine_headers(void *user, int status, const struct evkeyvalq *h) {
    struct call *c = user;
    const char *ct = evhttp_find_header(h, "Content-Type");
    if (c->route != R_SYSTEMONE && status == 200 && ct && strstr(ct, "text/event-stream")) {
        add_common_headers(c);
        http_req_stream_start(c->r, 200, ct);
        c->streaming = true;
    }
    return true;
}

static void on_engine_chunk(void *user, struct evbuffer *data) {
    struct call *c = user;
    if (c->streaming)
        http_req_stream_chunk(c->r, data);
    /* a buffered answer accumulates in the request's buffer: see on_engine_done */
}

static void on_engine_done(void *user, int status, struct evbuffer *body, const char *error) {
    struct call *c = user;
    c->up = NULL;
    if (status == 0) {
        sched_job_upstream_failed(c->job, error); /* the scheduler fails the call */
        return;
    }
    if (c->streaming) {
        http_req_stream_end(c->r);
        c->answered = true;
        finish(c, status, NULL);
        return;
    }
    size_t len = body ? evbuffer_get_length(body) : 0;
    const char *text = len ? (const char *)evbuffer_pullup(body, (ev_ssize_t)len) : "";
    if (status != 200) {
        engine_error(c, status, text, len);
        return;
    }
    json_t *resp = json_loadb(text, len, 0, NULL);
    c->input_tokens = usage_input_tokens(resp);
    json_decref(resp);
    if (c->route == R_SYSTEMONE && c->input_tokens > 0)
        sched_job_tokens(c->job, c->input_tokens); /* a decision's cost per prompt token */
    if (c->api->p.cfg->log_bodies)
        c->response_copy = mem_strndup(text, len < AUDIT_BODY_MAX ? len : AUDIT_BODY_MAX);
    add_common_headers(c);
    http_req_reply(c->r, 200, "application/json", text, len);
    c->answered = true;
    finish(c, 200, NULL);
}

static const struct http_upstream_ops engine_ops = {
    .headers = on_engine_headers, .done = on_engine_done};
static const struct http_upstream_ops engine_stream_ops = {
    .headers = on_engine_headers, .chunk = on_engine_chunk, .done = on_engine_done};

static void on_job_start(struct sched_job *job, uint16_t port, void *user) {
    (void)job;
    struct call *c = user;
    bool stream = json_is_true(json_object_get(c->request, "stream"));
    c->up = http_upstream_start(c->api->p.engines, port, EVHTTP_REQ_POST, http_req_uri(c->r),
                                "application/json", c->body, c->body_len, NULL, forward_headers,
                                stream ? &engine_stream_ops : &engine_ops, c);
    if (!c->up)
        sched_job_upstream_failed(c->job, "cannot connect to the engine");
}

static void on_job_fail(struct sched_job *job, int status, const char *type, const char *message,
                        void *user) {
    struct call *c = user;
    sched_job_timing(job, &c->timing);
    c->job = NULL; /* freed by the scheduler after this returns */
    json_t *extra = json_pack("{s{sIsIsI}}", "timing", "queued_ms", (json_int_t)c->timing.queued_ms,
                              "loading_ms", (json_int_t)c->timing.loading_ms, "running_ms",
                              (json_int_t)c->timing.running_ms);
    json_object_set_new(extra, "model", json_string(c->model->cm->name));
    c->reject = rejection(c->api, status, message);
    fail_call(c, status, type, message, NULL, extra);
}

static const struct sched_job_ops job_ops = {.start = on_job_start, .fail = on_job_fail};

/* Reads header name as milliseconds (1 to 86400000) into *ms, leaving it
 * alone when the header is absent. False (the call failed with 400) when the
 * value is bad. */
static bool header_ms(struct call *c, const char *name, int64_t *ms) {
    const char *h = http_req_header(c->r, name);
    if (!h)
        return true;
    char *end;
    long long v = strtoll(h, &end, 10);
    if (!*h || *end || v < 1 || v > MAX_TIMEOUT_MS) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: expected milliseconds from 1 to 86400000", name);
        fail_call(c, 400, "invalid_request_error", msg, NULL, NULL);
        return false;
    }
    *ms = v;
    return true;
}

/* The deadline: the smallest of the request's own X-Tandem-Timeout-Ms, the
 * gateway's x-envoy-expected-rq-timeout-ms and limits.request_timeout. */
static bool deadline(struct call *c, int64_t *out) {
    int64_t own = 0, gateway = 0, ms = c->api->p.cfg->request_timeout_ms;
    if (!header_ms(c, "X-Tandem-Timeout-Ms", &own) ||
        !header_ms(c, "x-envoy-expected-rq-timeout-ms", &gateway))
        return false;
    if (own > 0 && (ms <= 0 || own < ms))
        ms = own;
    if (gateway > 0 && (ms <= 0 || gateway < ms))
        ms = gateway;
    *out = ms > 0 ? c->t0 + ms : 0;
    return true;
}

static void on_remote_done(void *user, const struct remote_result *res) {
    struct call *c = user;
    c->rcall = NULL;
    c->attempts = res->attempts;
    snprintf(c->upstream, sizeof c->upstream, "%s", res->upstream ? res->upstream : "");
    c->timing.running_ms = host_now_ms() - c->t0;
    if (!res->from_upstream) {
        c->reject = rejection(c->api, res->status, res->error);
        fail_call(c, res->status, res->status == 504 ? "deadline_exceeded" : "upstream_error",
                  res->error, NULL, json_pack("{ss}", "model", c->model->cm->name));
        return;
    }
    json_t *resp = json_loadb(res->body, res->len, 0, NULL);
    c->input_tokens = usage_input_tokens(resp);
    json_decref(resp);
    if (c->api->p.cfg->log_bodies)
        c->response_copy = mem_strndup(res->body, res->len < AUDIT_BODY_MAX ? res->len
                                                                          : AUDIT_BODY_MAX);
    char attempts[16];
    snprintf(attempts, sizeof attempts, "%u", res->attempts);
    add_common_headers(c);
    http_req_add_header(c->r, "x-tandem-upstream", c->upstream);
    http_req_add_header(c->r, "x-tandem-attempts", attempts);
    if (res->status == 429 || res->status == 503)
        add_retry_after(c);
    http_req_reply(c->r, res->status, "application/json", res->body, res->len);
    c->answered = true;
    char error[64];
    snprintf(error, sizeof error, "upstream answered %d", res->status);
    finish(c, res->status, res->status == 200 ? NULL : error);
}

/* A remote model is known upstream by its configured name: a request that
 * named it by an alias, as jev-latest or not at all gets that name (the body
 * is re-serialized then; otherwise it goes as it came). False on OOM. */
static bool name_upstream_model(struct call *c) {
    const char *name = c->model->cm->name;
    const char *asked = json_string_value(json_object_get(c->request, "model"));
    if (asked && !strcmp(asked, name))
        return true;
    char *text = json_object_set_new(c->request, "model", json_string(name)) == 0
                     ? json_dumps(c->request, JSON_COMPACT | JSON_PRESERVE_ORDER)
                     : NULL;
    if (!text)
        return false;
    mem_free(c->body);
    c->body = mem_strdup(text);
    c->body_len = c->body ? strlen(c->body) : 0;
    free(text);
    return c->body != NULL;
}

/* Sends the call to its remote model's upstreams. */
static void submit_remote(struct call *c, int64_t due) {
    if (json_is_true(json_object_get(c->request, "stream"))) {
        char msg[300];
        snprintf(msg, sizeof msg, "model %s is remote: streamed answers are not proxied; send "
                 "stream: false", c->model->cm->name);
        fail_call(c, 400, "invalid_request_error", msg, "stream", NULL);
        return;
    }
    if (!name_upstream_model(c)) {
        fail_call(c, 500, "internal_error", "out of memory", NULL, NULL);
        return;
    }
    c->rcall = remote_call_start(c->api->p.remote, c->model->remote_index, http_req_path(c->r),
                                 c->body, c->body_len, c->id, due, on_remote_done, c);
    if (!c->rcall)
        fail_call(c, 500, "internal_error", "out of memory", NULL, NULL);
}

static void submit(struct call *c) {
    int64_t due;
    if (!deadline(c, &due))
        return;
    if (c->model->remote_index != SIZE_MAX) {
        submit_remote(c, due);
        return;
    }
    tandem_err e = sched_submit(c->api->p.sched, c->model->sched_index, due, &job_ops, c, &c->job,
                                &c->position);
    if (e == TANDEM_ERR_TOOBIG) {
        c->reject = "queue_full";
        fail_call(c, 429, "queue_full", "the admission queue is full (limits.queue_depth); retry later",
                  NULL, NULL);
    } else if (e == TANDEM_ERR_TIMEOUT) {
        char msg[300];
        snprintf(msg, sizeof msg, "model %s must load first, and its expected load time ends "
                 "after the deadline (%lld ms)", c->model->cm->name, (long long)(due - c->t0));
        c->reject = "deadline";
        fail_call(c, 504, "deadline_exceeded", msg, NULL, NULL);
    } else if (e != TANDEM_OK) {
        c->reject = e == TANDEM_ERR_UNSUPPORTED ? "draining" : NULL;
        fail_call(c, 503, "unavailable_error",
                  e == TANDEM_ERR_UNSUPPORTED ? "tandem is shutting down" : tandem_strerror(e), NULL,
                  NULL);
    }
}

static void handle_systemone_pipeline(struct call *c, const char *name);

static void handle_systemone(struct call *c) {
    if (!read_body(c) || !parse_json_body(c))
        return;
    const char *m = json_string_value(json_object_get(c->request, "model"));
    if (m && !strncmp(m, CONFIG_PIPELINE_MODEL_PREFIX, strlen(CONFIG_PIPELINE_MODEL_PREFIX))) {
        handle_systemone_pipeline(c, m + strlen(CONFIG_PIPELINE_MODEL_PREFIX));
        return;
    }
    if (!route_model(c))
        return;
    char err[512];
    if (!c->model->decision_type[0]) {
        snprintf(err, sizeof err, "model %s is not a decision model (it has no decision head)",
                 c->model->cm->name);
        fail_call(c, 501, "not_supported_error", err, "model", NULL);
        return;
    }
    if (s1_validate_request(c->request, s1_max_options(c->model->decision_type), err, sizeof err) != TANDEM_OK) {
        size_t flen = strcspn(err, ":");
        char param[256];
        snprintf(param, sizeof param, "%.*s", (int)(flen < 255 ? flen : 255), err);
        fail_call(c, 400, "invalid_request_error", err, param, NULL);
        return;
    }
    submit(c);
}

static void on_pipeline_done(void *user, struct pipeline_outcome *o) {
    struct call *c = user;
    c->run = NULL;
    char model[sizeof CONFIG_PIPELINE_MODEL_PREFIX + sizeof c->pipeline];
    snprintf(model, sizeof model, CONFIG_PIPELINE_MODEL_PREFIX "%s", c->pipeline);
    if (o->status == 200 && c->question[0] &&
        pipeline_answer_to_systemone(o->body, model, c->question) != TANDEM_OK) {
        json_decref(o->body);
        fail_call(c, 500, "internal_error", "out of memory", NULL, NULL);
        return;
    }
    c->timing = o->sum;
    c->input_tokens = o->input_tokens;
    snprintf(c->verdict, sizeof c->verdict, "%s", o->verdict ? o->verdict : "");
    const char *msg = json_string_value(json_object_get(json_object_get(o->body, "error"), "message"));
    char error[600];
    snprintf(error, sizeof error, "%s", msg ? msg : "");
    if (o->status == 429 || o->status == 503)
        add_retry_after(c);
    c->reject = rejection(c->api, o->status, msg);
    reply_json(c, o->status, o->body);
    finish(c, o->status, msg ? error : NULL);
}

/* Where a pipeline request's field came from on /v1/systemone: param (in
 * place) and err (prefixed) name the System One field. */
static void name_systemone_field(const struct call *c, char *param, size_t paramlen, char *err,
                                 size_t errlen) {
    char field[sizeof c->question + 32];
    if (!strcmp(param, "pipeline"))
        snprintf(field, sizeof field, "model");
    else if (!strcmp(param, "candidates"))
        snprintf(field, sizeof field, "questions.%s.criteria", c->question);
    else if (!strcmp(param, "instructions"))
        snprintf(field, sizeof field, "questions.%s.instructions", c->question);
    else
        return;
    char was[1200];
    snprintf(was, sizeof was, "%s", err);
    tandem_errmsg(err, errlen, "%s: %s", field, was);
    snprintf(param, paramlen, "%s", field);
}

/* Runs pipeline name (copied) on request (borrowed) for c. */
static void start_pipeline(struct call *c, const char *name, const json_t *request) {
    snprintf(c->pipeline, sizeof c->pipeline, "%s", name);
    int64_t due;
    if (!deadline(c, &due))
        return;
    struct pipeline_env env = {c->api->p.sched, c->api->p.engines, c->api->p.remote};
    char err[1200], param[256];
    int status;
    if (pipeline_run_start(c->api->p.pipelines, &env, c->pipeline, request, c->id, due,
                           on_pipeline_done, c, &c->run, &status, err, sizeof err, param,
                           sizeof param) == TANDEM_OK)
        return;
    c->reject = rejection(c->api, status, err);
    if (c->question[0])
        name_systemone_field(c, param, sizeof param, err, sizeof err);
    fail_call(c, status, status == 404 ? "not_found_error" : NULL, err, param[0] ? param : NULL,
              NULL);
}

static void handle_pipeline(struct call *c) {
    if (read_body(c) && parse_json_body(c))
        start_pipeline(c, http_req_path(c->r) + strlen("/v1/pipelines/"), c->request);
}

/* POST /v1/systemone with model "pipelines/<name>" (name borrowed from
 * c->request): the pipeline, asked and answered in System One's shape. */
static void handle_systemone_pipeline(struct call *c, const char *name) {
    json_t *request;
    char err[1200], param[256];
    tandem_err e = pipeline_request_from_systemone(c->request, &request, c->question, err,
                                                   sizeof err, param, sizeof param);
    if (e == TANDEM_ERR_NOMEM)
        fail_call(c, 500, "internal_error", "out of memory", NULL, NULL);
    else if (e != TANDEM_OK)
        fail_call(c, 400, "invalid_request_error", err, param, NULL);
    else
        start_pipeline(c, name, request);
    json_decref(request);
}

static void handle_passthrough(struct call *c) {
    if (!read_body(c) || !parse_json_body(c) || !route_model(c))
        return;
    submit(c);
}

/* --- local routes ------------------------------------------------------------------------------ */

/* A model's status for gateways: "resident", "loadable" or "remote". */
static const char *model_status(const struct api *a, const struct api_model *m) {
    if (m->remote_index != SIZE_MAX)
        return "remote";
    return sched_model_state(a->p.sched, m->sched_index) == SCHED_RESIDENT ? "resident"
                                                                          : "loadable";
}

/* Its state in detail: the scheduler's, or "up"/"down" for a remote model. */
static const char *model_state(const struct api *a, const struct api_model *m) {
    if (m->remote_index != SIZE_MAX)
        return remote_model_up(a->p.remote, m->remote_index) ? "up" : "down";
    return sched_state_name(sched_model_state(a->p.sched, m->sched_index));
}

static json_t *models_json(const struct api *a) {
    json_t *data = json_array(), *models = json_array();
    for (size_t i = 0; i < a->p.n_models; i++) {
        const struct api_model *m = &a->p.models[i];
        bool decision = m->decision_type[0] != '\0';
        json_t *aliases = json_array();
        for (size_t k = 0; k < m->cm->n_aliases; k++)
            json_array_append_new(aliases, json_string(m->cm->aliases[k]));
        json_t *d = json_pack("{sssssIsssosss{s[s]s[s]}s{sssIss}}", "id", m->cm->name, "object",
                              "model", "created", (json_int_t)0, "owned_by", "tandem", "aliases",
                              aliases, "decision_type", m->decision_type, "architecture",
                              "input_modalities", "text", "output_modalities",
                              decision ? "decisions" : "text", "meta", "arch", m->arch, "n_ctx",
                              (json_int_t)m->n_ctx, "header_sha256", m->sha256);
        json_object_set_new(json_object_get(d, "meta"), "sha256",
                            m->file_sha256[0] ? json_string(m->file_sha256) : json_null());
        json_object_set_new(d, "status", json_string(model_status(a, m)));
        json_object_set_new(d, "state", json_string(model_state(a, m)));
        if (m->remote_index != SIZE_MAX && !remote_model_up(a->p.remote, m->remote_index))
            json_object_set_new(d, "down_because", json_string(remote_model_down_cause(
                                                       a->p.remote, m->remote_index)));
        json_array_append_new(data, d);
        char desc[300];
        snprintf(desc, sizeof desc, "%s (%s%s%s), served by tandem", m->cm->name, m->arch,
                 decision ? ", decision type " : ", generative", m->decision_type);
        json_array_append_new(models, json_pack("{ssssss}", "name", m->cm->name, "description",
                                                desc, "release_date", RELEASE_DATE_UNKNOWN));
        if (i == a->p.default_model)
            json_array_append_new(models, json_pack("{ssssssss}", "name", "jev-latest",
                                                    "description", desc, "release_date",
                                                    RELEASE_DATE_UNKNOWN, "alias_of", m->cm->name));
    }
    return json_pack("{sssoso}", "object", "list", "data", data, "models", models);
}

static void handle_admin(struct call *c) {
    const char *path = http_req_path(c->r) + strlen("/admin/models/");
    const char *slash = strrchr(path, '/');
    if (!slash || http_req_method(c->r) != EVHTTP_REQ_POST ||
        (strcmp(slash, "/load") && strcmp(slash, "/unload"))) {
        fail_call(c, 404, NULL, "admin routes: POST /admin/models/{name}/load or /unload", NULL,
                  NULL);
        return;
    }
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(slash - path), path);
    c->model = find_model(c->api, name);
    if (!c->model) {
        fail_call(c, 404, "model_not_found", "unknown model", "model", NULL);
        return;
    }
    bool load = !strcmp(slash, "/load");
    size_t i = c->model->sched_index;
    if (c->model->remote_index != SIZE_MAX) {
        fail_call(c, 409, "conflict", "the model is remote: tandem does not load it", NULL, NULL);
        return;
    }
    tandem_err e = load ? sched_load(c->api->p.sched, i) : sched_unload(c->api->p.sched, i);
    if (e == TANDEM_ERR_TOOBIG)
        fail_call(c, 409, "conflict", "the model does not fit beside the busy or pinned residents",
                  NULL, NULL);
    else if (e == TANDEM_ERR_UNSUPPORTED)
        fail_call(c, 409, "conflict",
                  load ? "the model is stopping; retry" : "the model has requests in flight or queued",
                  NULL, NULL);
    else {
        reply_json(c, 202, json_pack("{ssss}", "model", c->model->cm->name, "state",
                                     sched_state_name(sched_model_state(c->api->p.sched, i))));
        finish(c, 202, NULL);
    }
}

/* The GPUs' memory as NVML sees it, read at scrape time. */
static void update_gpu_gauges(struct api *a) {
    unsigned n = a->p.nvml && a->m_gpu_used ? nvml_device_count(a->p.nvml) : 0;
    for (unsigned i = 0; i < n; i++) {
        struct nvml_device d;
        char index[12];
        snprintf(index, sizeof index, "%u", i);
        const char *labels[] = {index};
        if (nvml_device_get(a->p.nvml, i, &d) != TANDEM_OK)
            continue;
        prom_set(a->m_gpu_used, labels, (double)d.used_bytes);
        prom_set(a->m_gpu_total, labels, (double)d.total_bytes);
    }
}

/* The node gauges and per-model request gauges, read at scrape time. */
static void update_load_gauges(struct api *a) {
    struct node_load l;
    node_load(a, &l);
    char why[160];
    double ratio = busy_ratio(&l), ready = !cannot_admit(a, why, sizeof why);
    struct { struct prom_metric *m; double v; } set[] = {
        {a->g.waiting, l.waiting},         {a->g.running, l.running},
        {a->g.busy_ratio, ratio},          {a->g.capacity, a->p.cfg->queue_depth},
        {a->g.ready, ready},               {a->g.vllm_waiting, l.waiting},
        {a->g.vllm_running, l.running},    {a->g.vllm_kv, ratio}};
    for (size_t i = 0; i < sizeof set / sizeof *set; i++)
        if (set[i].m)
            prom_set(set[i].m, NULL, set[i].v);
    for (size_t i = 0; a->m_model_waiting && i < a->p.n_models; i++) {
        const struct api_model *m = &a->p.models[i];
        struct sched_counts n = {0};
        if (m->remote_index != SIZE_MAX)
            n.running = remote_model_running(a->p.remote, m->remote_index);
        else
            sched_model_counts(a->p.sched, m->sched_index, &n);
        const char *labels[] = {m->cm->name};
        prom_set(a->m_model_waiting, labels, n.waiting);
        prom_set(a->m_model_running, labels, n.running);
    }
}

static void handle_metrics(struct call *c) {
    update_gpu_gauges(c->api);
    update_load_gauges(c->api);
    struct mem_buf b;
    mem_buf_init(&b, 64u << 20);
    if (!c->api->p.metrics || prom_render(c->api->p.metrics, &b) != TANDEM_OK) {
        mem_buf_deinit(&b);
        fail_call(c, 500, NULL, "metrics unavailable", NULL, NULL);
        return;
    }
    add_common_headers(c);
    http_req_reply(c->r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    c->answered = true;
    mem_buf_deinit(&b);
    finish(c, 200, NULL);
}

static json_t *node_json(const struct api *a) {
    static const char *const phase[] = {"starting", "serving", "draining", "stopping"};
    struct node_load l;
    node_load(a, &l);
    char why[160];
    bool refuse = cannot_admit(a, why, sizeof why);
    return json_pack("{sssssbsssIsIsIsIsf}", "id", a->p.cfg->node_id, "phase", phase[a->phase],
                     "ready", !refuse, "not_ready_because", refuse ? why : "",
                     "requests_waiting", (json_int_t)l.waiting, "requests_running",
                     (json_int_t)l.running, "slots_busy", (json_int_t)l.busy, "slots",
                     (json_int_t)l.slots, "slots_busy_ratio", busy_ratio(&l));
}

/* Every remote model with its upstreams. */
static json_t *remote_json(const struct api *a) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && a->p.remote && i < a->p.n_models; i++) {
        const struct api_model *m = &a->p.models[i];
        if (m->remote_index == SIZE_MAX)
            continue;
        json_t *r = remote_status_json(a->p.remote, m->remote_index);
        json_object_set_new(r, "name", json_string(m->cm->name));
        json_array_append_new(arr, r);
    }
    return arr;
}

static void handle_local(struct call *c) {
    struct api *a = c->api;
    switch (c->route) {
    case R_HEALTH: {
        char why[160];
        if (cannot_admit(a, why, sizeof why)) {
            if (a->phase >= API_DRAINING)
                http_req_add_header(c->r, "x-envoy-immediate-health-check-fail", "true");
            fail_call(c, 503, "unavailable_error", why, NULL, NULL);
            return;
        }
        reply_json(c, 200, json_pack("{ss}", "status", "ok"));
        break;
    }
    case R_LIVEZ: reply_json(c, 200, json_pack("{ss}", "status", "alive")); break;
    case R_MODELS: reply_json(c, 200, models_json(a)); break;
    case R_PIPELINES: reply_json(c, 200, pipeline_set_list_json(a->p.pipelines)); break;
    case R_STATUS: {
        json_t *j = sched_status_json(a->p.sched);
        json_object_set_new(j, "serving", json_boolean(a->phase == API_SERVING));
        json_object_set_new(j, "node", node_json(a));
        json_object_set_new(j, "remote", remote_json(a));
        json_object_set_new(j, "calls_in_flight", json_integer(a->in_flight - 1));
        reply_json(c, 200, j);
        break;
    }
    case R_METRICS: handle_metrics(c); return;
    case R_ADMIN: handle_admin(c); return;
    default: break;
    }
    finish(c, 200, NULL);
}

/* --- dispatch ---------------------------------------------------------------------------------- */

static enum route route_of(const char *path) {
    static const struct { const char *path; enum route r; } table[] = {
        {"/v1/systemone", R_SYSTEMONE}, {"/v1/chat/completions", R_CHAT},
        {"/v1/completions", R_COMPLETIONS}, {"/v1/embeddings", R_EMBEDDINGS},
        {"/v1/models", R_MODELS}, {"/health", R_HEALTH}, {"/livez", R_LIVEZ},
        {"/v1/status", R_STATUS},
        {"/metrics", R_METRICS}, {"/v1/pipelines", R_PIPELINES}};
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (!strcmp(path, table[i].path))
            return table[i].r;
    if (!strncmp(path, "/v1/pipelines/", 14) && path[14] && !strchr(path + 14, '/'))
        return R_PIPELINE;
    return strncmp(path, "/admin/models/", 14) ? R_OTHER : R_ADMIN;
}

static bool method_ok(enum route r, enum evhttp_cmd_type m) {
    switch (r) {
    case R_SYSTEMONE: case R_CHAT: case R_COMPLETIONS: case R_EMBEDDINGS: case R_ADMIN:
    case R_PIPELINE:
        return m == EVHTTP_REQ_POST;
    case R_OTHER: return true;
    default: return m == EVHTTP_REQ_GET || m == EVHTTP_REQ_HEAD;
    }
}

/* Whether route needs an API key: all but the probes, and /metrics unless
 * metrics.require_key. */
static bool needs_key(const struct api *a, enum route r) {
    return r != R_HEALTH && r != R_LIVEZ && (r != R_METRICS || a->p.cfg->metrics_require_key);
}

/* The call's id: the client's x-request-id (or x-typesafe-request-id) when
 * it is printable and short, else a new one. */
static void request_id(const struct http_req *r, char out[64]) {
    const char *names[] = {"x-request-id", "x-typesafe-request-id"};
    for (size_t i = 0; i < 2; i++) {
        const char *id = http_req_header(r, names[i]);
        bool ok = id && *id && strlen(id) < 64;
        for (const char *p = id; ok && *p; p++)
            ok = *p > ' ' && *p < 0x7f;
        if (ok) {
            snprintf(out, 64, "%s", id);
            return;
        }
    }
    new_request_id(out);
}

void api_handle(struct http_req *r, void *user) {
    struct api *a = user;
    struct call *c = mem_calloc(1, sizeof *c);
    if (!c) {
        http_req_reply(r, 500, "application/json", "{}", 2);
        return;
    }
    *c = (struct call){.api = a, .r = r, .t0 = host_now_ms(), .input_tokens = -1};
    link_call(a, c);
    request_id(r, c->id);
    c->route = route_of(http_req_path(r));
    c->method = http_req_method_name(r);
    http_req_on_gone(r, on_client_gone, c);
    if (http_req_over_connection_limit(r)) {
        fail_call(c, 503, "unavailable_error", "too many connections (limits.max_connections)",
                  NULL, NULL);
    } else if (needs_key(a, c->route) && !authorized(a, r)) {
        fail_call(c, 401, NULL, "a valid API key is required: Authorization: Bearer <key>", NULL,
                  NULL);
    } else if (c->route == R_OTHER) {
        char msg[300];
        snprintf(msg, sizeof msg, "no route %s %s", http_req_method_name(r), http_req_path(r));
        fail_call(c, 404, NULL, msg, NULL, NULL);
    } else if (!method_ok(c->route, http_req_method(r))) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s does not take %s", http_req_path(r), http_req_method_name(r));
        fail_call(c, 405, NULL, msg, NULL, NULL);
    } else if (c->route <= R_PIPELINE && a->phase == API_STOPPING) {
        c->reject = "draining";
        fail_call(c, 503, "unavailable_error", "this node is draining: send the request to "
                  "another node", NULL, NULL);
    } else if (c->route == R_SYSTEMONE) {
        handle_systemone(c);
    } else if (c->route <= R_EMBEDDINGS) {
        handle_passthrough(c);
    } else if (c->route == R_PIPELINE) {
        handle_pipeline(c);
    } else {
        handle_local(c);
    }
}

/* --- lifecycle ---------------------------------------------------------------------------------- */

/* The node gauges (unlabeled, one series each: gateways read them), the
 * per-model request gauges and the rejections. */
static void register_load_metrics(struct api *a) {
    struct prom *p = a->p.metrics;
    static const char *const model[] = {"model", NULL}, *const reason[] = {"model", "reason", NULL};
    a->g.waiting = prom_register(p, PROM_GAUGE, "tandem_requests_waiting",
                                 "Requests admitted and not yet dispatched, all models", NULL, NULL, 0);
    a->g.running = prom_register(p, PROM_GAUGE, "tandem_requests_running",
                                 "Requests dispatched to an engine or upstream, not yet answered",
                                 NULL, NULL, 0);
    a->g.busy_ratio = prom_register(p, PROM_GAUGE, "tandem_slots_busy_ratio",
                                    "Busy engine slots over all slots of resident engines (0-1)",
                                    NULL, NULL, 0);
    a->g.capacity = prom_register(p, PROM_GAUGE, "tandem_queue_capacity",
                                  "Requests that may wait before 429 (limits.queue_depth)", NULL,
                                  NULL, 0);
    a->g.ready = prom_register(p, PROM_GAUGE, "tandem_ready",
                               "1 when /health would answer 200", NULL, NULL, 0);
    a->m_model_waiting = prom_register(p, PROM_GAUGE, "tandem_model_requests_waiting",
                                       "Requests admitted for the model, not yet dispatched", model,
                                       NULL, 0);
    a->m_model_running = prom_register(p, PROM_GAUGE, "tandem_model_requests_running",
                                       "Requests of the model dispatched, not yet answered", model,
                                       NULL, 0);
    a->m_rejections = prom_register(p, PROM_COUNTER, "tandem_rejections_total",
                                    "Requests tandem refused, by model and reason", reason, NULL, 0);
    if (!a->p.cfg->metrics_vllm)
        return;
    a->g.vllm_waiting = prom_register(p, PROM_GAUGE, "vllm:num_requests_waiting",
                                      "tandem_requests_waiting (metrics.compat: vllm)", NULL, NULL, 0);
    a->g.vllm_running = prom_register(p, PROM_GAUGE, "vllm:num_requests_running",
                                      "tandem_requests_running (metrics.compat: vllm)", NULL, NULL, 0);
    a->g.vllm_kv = prom_register(p, PROM_GAUGE, "vllm:kv_cache_usage_perc",
                                 "tandem_slots_busy_ratio, a fraction (metrics.compat: vllm)", NULL,
                                 NULL, 0);
}

static void register_metrics(struct api *a) {
    struct prom *p = a->p.metrics;
    static const char *const req_labels[] = {"model", "route", "status", NULL};
    static const char *const route[] = {"route", NULL};
    static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    size_t nb = sizeof bounds / sizeof *bounds;
    if (!p)
        return;
    a->m_requests = prom_register(p, PROM_COUNTER, "tandem_requests_total",
                                  "Requests answered, by model, route and status", req_labels,
                                  NULL, 0);
    a->m_latency = prom_register(p, PROM_HISTOGRAM, "tandem_request_duration_seconds",
                                 "Arrival to answer", route, bounds, nb);
    a->m_queue_wait = prom_register(p, PROM_HISTOGRAM, "tandem_queue_wait_seconds",
                                    "Arrival to engine (queued and loading)", route, bounds, nb);
    register_load_metrics(a);
    if (!a->p.nvml)
        return;
    static const char *const device[] = {"device", NULL};
    a->m_gpu_used = prom_register(p, PROM_GAUGE, "tandem_gpu_memory_used_bytes",
                                  "GPU memory in use on the device (NVML)", device, NULL, 0);
    a->m_gpu_total = prom_register(p, PROM_GAUGE, "tandem_gpu_memory_total_bytes",
                                   "GPU memory on the device (NVML)", device, NULL, 0);
}

struct api *api_new(const struct api_params *p) {
    struct api *a = mem_calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->p = *p;
    a->phase = API_STARTING;
    register_metrics(a);
    return a;
}

void api_free(struct api *a) {
    if (!a)
        return;
    while (a->calls) {
        struct call *c = a->calls;
        if (c->up)
            http_upstream_cancel(c->up);
        c->up = NULL;
        c->job = NULL; /* the scheduler frees its jobs */
        if (c->rcall)
            remote_call_cancel(c->rcall);
        pipeline_run_cancel(c->run);
        if (!c->answered)
            http_req_reply(c->r, 503, NULL, NULL, 0);
        unlink_call(c);
        json_decref(c->request);
        mem_free(c->body);
        mem_free(c->response_copy);
        mem_free(c);
    }
    mem_free(a);
}

void api_set_params(struct api *a, const struct api_params *p) {
    a->p = *p; /* the metrics stay registered: the registry is the same */
}

void api_set_phase(struct api *a, enum api_phase phase) { a->phase = phase; }

uint32_t api_calls_in_flight(const struct api *a) { return a->in_flight; }
