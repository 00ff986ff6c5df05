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

enum route { R_SYSTEMONE, R_CHAT, R_COMPLETIONS, R_EMBEDDINGS, R_PIPELINE, R_MODELS, R_HEALTH,
             R_STATUS, R_METRICS, R_ADMIN, R_PIPELINES, R_OTHER };

static const char *const route_names[] = {"systemone", "chat", "completions", "embeddings",
                                          "pipeline", "models", "health", "status", "metrics",
                                          "admin", "pipelines", "other"};

struct api {
    struct api_params p;
    bool serving;
    char not_serving_why[64];
    uint32_t in_flight;
    struct call *calls; /* in flight, for api_free */
    struct prom_metric *m_requests, *m_latency, *m_queue_wait, *m_gpu_used, *m_gpu_total;
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

static void audit_call(struct call *c, int status, const char *error) {
    struct api *a = c->api;
    if (!a->p.audit)
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
    if (c->job)
        sched_job_done(c->job, status == 200);
    unlink_call(c);
    json_decref(c->request);
    mem_free(c->body);
    mem_free(c->response_copy);
    mem_free(c);
}

static void add_common_headers(struct call *c) {
    http_req_add_header(c->r, "x-typesafe-request-id", c->id);
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
        http_req_add_header(c->r, "Retry-After", "1");
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
    fail_call(c, status, type, message, NULL, extra);
}

static const struct sched_job_ops job_ops = {.start = on_job_start, .fail = on_job_fail};

/* The deadline: X-Tandem-Timeout-Ms, else limits.request_timeout. */
static bool deadline(struct call *c, int64_t *out) {
    const char *h = http_req_header(c->r, "X-Tandem-Timeout-Ms");
    int64_t ms = c->api->p.cfg->request_timeout_ms;
    if (h) {
        char *end;
        long long v = strtoll(h, &end, 10);
        if (!*h || *end || v < 1 || v > MAX_TIMEOUT_MS) {
            fail_call(c, 400, "invalid_request_error",
                      "X-Tandem-Timeout-Ms: expected milliseconds from 1 to 86400000", NULL, NULL);
            return false;
        }
        ms = v;
    }
    *out = ms > 0 ? c->t0 + ms : 0;
    return true;
}

static void submit(struct call *c) {
    int64_t due;
    if (!deadline(c, &due))
        return;
    tandem_err e = sched_submit(c->api->p.sched, c->model->sched_index, due, &job_ops, c, &c->job,
                                &c->position);
    if (e == TANDEM_ERR_TOOBIG)
        fail_call(c, 429, "queue_full", "the admission queue is full (limits.queue_depth); retry later",
                  NULL, NULL);
    else if (e != TANDEM_OK)
        fail_call(c, 503, "unavailable_error",
                  e == TANDEM_ERR_UNSUPPORTED ? "tandem is shutting down" : tandem_strerror(e), NULL,
                  NULL);
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
        http_req_add_header(c->r, "Retry-After", "1");
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
    struct pipeline_env env = {c->api->p.sched, c->api->p.engines};
    char err[1200], param[256];
    int status;
    if (pipeline_run_start(c->api->p.pipelines, &env, c->pipeline, request, c->id, due,
                           on_pipeline_done, c, &c->run, &status, err, sizeof err, param,
                           sizeof param) == TANDEM_OK)
        return;
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
        json_object_set_new(d, "state", json_string(sched_state_name(
                                            sched_model_state(a->p.sched, m->sched_index))));
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

static void handle_metrics(struct call *c) {
    update_gpu_gauges(c->api);
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

static void handle_local(struct call *c) {
    struct api *a = c->api;
    switch (c->route) {
    case R_HEALTH:
        if (!a->serving) {
            fail_call(c, 503, "unavailable_error", a->not_serving_why, NULL, NULL);
            return;
        }
        reply_json(c, 200, json_pack("{ss}", "status", "ok"));
        break;
    case R_MODELS: reply_json(c, 200, models_json(a)); break;
    case R_PIPELINES: reply_json(c, 200, pipeline_set_list_json(a->p.pipelines)); break;
    case R_STATUS: {
        json_t *j = sched_status_json(a->p.sched);
        json_object_set_new(j, "serving", json_boolean(a->serving));
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
        {"/v1/models", R_MODELS}, {"/health", R_HEALTH}, {"/v1/status", R_STATUS},
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

void api_handle(struct http_req *r, void *user) {
    struct api *a = user;
    struct call *c = mem_calloc(1, sizeof *c);
    if (!c) {
        http_req_reply(r, 500, "application/json", "{}", 2);
        return;
    }
    *c = (struct call){.api = a, .r = r, .t0 = host_now_ms(), .input_tokens = -1};
    link_call(a, c);
    const char *id = http_req_header(r, "x-typesafe-request-id");
    if (id && *id && strlen(id) < sizeof c->id && !strpbrk(id, "\r\n"))
        snprintf(c->id, sizeof c->id, "%s", id);
    else
        new_request_id(c->id);
    c->route = route_of(http_req_path(r));
    c->method = http_req_method_name(r);
    http_req_on_gone(r, on_client_gone, c);
    if (http_req_over_connection_limit(r)) {
        fail_call(c, 503, "unavailable_error", "too many connections (limits.max_connections)",
                  NULL, NULL);
    } else if (c->route != R_HEALTH && !authorized(a, r)) {
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
    snprintf(a->not_serving_why, sizeof a->not_serving_why, "starting");
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

void api_set_serving(struct api *a, bool serving, const char *why) {
    a->serving = serving;
    snprintf(a->not_serving_why, sizeof a->not_serving_why, "%s", why ? why : "");
}

uint32_t api_calls_in_flight(const struct api *a) { return a->in_flight; }
