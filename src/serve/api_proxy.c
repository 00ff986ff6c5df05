/* api_proxy.c: the api's exchanges with what answers a call for it: a local model's
 * engine, a remote model's upstreams, and the pipelines.
 *
 * A routed call is submitted to the scheduler with its deadline (the smallest of the
 * request's own, the gateway's and limits.request_timeout). When the scheduler hands it
 * an engine port the original body is forwarded unchanged, to the route's own path
 * (never the raw request-target); the answer is passed through unchanged on success
 * (server-sent events chunk by chunk, as they arrive), and engine errors are rewritten
 * into tandem's one error shape with the engine's status, message and every other member
 * of its error object. Decisions and embeddings are resent once after an engine failure
 * before their answer; generations and streams never are. A remote model's call goes to
 * its upstreams (serve/remote), under its configured name; a pipeline runs through
 * serve/pipeline and publishes a `verdict` event. A local decision is looked up in the
 * decision cache (serve/dcache) first: a hit is answered from memory, an identical
 * decision in flight is waited for, and the engine's answer goes back to the cache for
 * the requests that waited. Each exchange ends its call through api_call_fail or
 * api_call_finish (api.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <jansson.h>

#include "base/host.h"
#include "base/mem.h"
#include "serve/api_internal.h"
#include "serve/events.h"
#include "serve/s1.h"

#define MAX_TIMEOUT_MS 86400000LL

/* --- the engine exchange ---------------------------------------------------------------------- */

static const char *const forward_headers[] = {"Accept", NULL};

static long usage_input_tokens(const json_t *resp) {
    json_t *u = json_object_get(resp, "usage");
    json_t *t = json_object_get(u, "input_tokens");
    if (!t)
        t = json_object_get(u, "prompt_tokens");
    return json_is_integer(t) ? (long)json_integer_value(t) : -1;
}

/* Whether an engine's error answer is the encoders' "input too large" (a
 * 500 that is the client's error: never resent). */
static bool too_large(const char *text, size_t len) {
    return memmem(text, len, "too large to process", strlen("too large to process")) != NULL;
}

/* The members of an engine's error object (borrowed) that tandem's shape
 * does not set itself, e.g. exceed_context_size_error's n_prompt_tokens and
 * n_ctx: a new object (NULL when err is not an object), for api_call_fail. */
static json_t *engine_error_fields(json_t *err) {
    json_t *own = json_is_object(err) ? json_copy(err) : NULL;
    static const char *const set[] = {"code", "type", "message"};
    for (size_t i = 0; own && i < sizeof set / sizeof *set; i++)
        json_object_del(own, set[i]);
    return own;
}

/* An engine error answer, in tandem's shape, keeping the engine's status,
 * message and every other member of its error object; the encoders' "input
 * too large" (a 500) is the client's error, and any other server error but
 * the engine's 501 (not supported) and 503 (unavailable) is a 502
 * upstream_error with its message (docs/serve.md). */
static void engine_error(struct api_call *c, int status, const char *text, size_t len) {
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
    } else if (status == 500 && too_large(msg, strlen(msg))) {
        snprintf(buf, sizeof buf, "model %s: the request does not fit the model's window: %s",
                 c->model->cm->name, msg);
        msg = buf;
        status = 400;
        type = "invalid_request_error";
    } else if (status >= 500 && status != 501 && status != 503) {
        snprintf(buf, sizeof buf, "model %s: engine answered %d: %s", c->model->cm->name, status,
                 msg);
        msg = buf;
        status = 502;
        type = "upstream_error";
    }
    api_call_fail(c, status, type, msg, NULL, engine_error_fields(err));
    json_decref(j);
}

static bool on_engine_headers(void *user, int status, const struct evkeyvalq *h) {
    struct api_call *c = user;
    const char *ct = evhttp_find_header(h, "Content-Type");
    if (c->route != API_ROUTE_SYSTEMONE && status == 200 && ct && strstr(ct, "text/event-stream")) {
        api_call_add_headers(c);
        http_req_stream_start(c->r, 200, ct);
        c->streaming = true;
    }
    return true;
}

static void on_engine_chunk(void *user, struct evbuffer *data) {
    struct api_call *c = user;
    if (c->streaming)
        http_req_stream_chunk(c->r, data);
    /* a buffered answer accumulates in the request's buffer: see on_engine_done */
}

/* Answers c with an engine's 200, text[len], sent as out[out_len] (the same
 * bytes, or the decision cache's copy marked as such), and ends it. */
static void reply_engine_200(struct api_call *c, const char *text, size_t len, const char *out,
                             size_t out_len) {
    json_t *resp = json_loadb(text, len, 0, NULL);
    c->input_tokens = usage_input_tokens(resp);
    json_decref(resp);
    if (c->job && c->route == API_ROUTE_SYSTEMONE && c->input_tokens > 0)
        sched_job_tokens(c->job, c->input_tokens); /* a decision's cost per prompt token */
    if (c->api->p.cfg->log_bodies)
        c->response_copy = mem_strndup(text, len < API_AUDIT_BODY_MAX ? len : API_AUDIT_BODY_MAX);
    if (c->route == API_ROUTE_SYSTEMONE)
        api_store_answer(c, text, len);
    api_call_add_headers(c);
    http_req_reply(c->r, 200, "application/json", out, out_len);
    c->answered = true;
    api_call_finish(c, 200, NULL);
}

/* Answers c with its engine's final answer (status, text[len]: the engine's, or,
 * for a request that waited in the decision cache, an identical request's) and
 * ends it. */
static void answer_from_engine(struct api_call *c, int status, const char *text, size_t len) {
    if (status == 200)
        reply_engine_200(c, text, len, text, len);
    else
        engine_error(c, status, text, len);
}

static void on_engine_done(void *user, int status, struct evbuffer *body, const char *error) {
    struct api_call *c = user;
    c->up = NULL;
    if (status == 0) {
        sched_job_upstream_failed(c->job, error); /* the scheduler fails the call */
        return;
    }
    if (c->streaming) {
        http_req_stream_end(c->r);
        c->answered = true;
        api_call_finish(c, status, NULL);
        return;
    }
    size_t len = body ? evbuffer_get_length(body) : 0;
    const char *text = len ? (const char *)evbuffer_pullup(body, (ev_ssize_t)len) : "";
    /* a 501 (the engine cannot do this: no embeddings) is an answer, not a failure */
    if (status >= 500 && status != 501 && !too_large(text, len) &&
        sched_job_engine_error(c->job, status, text)) /* resent: on_job_start follows */
        return;
    struct dcache_ticket *t = c->ticket; /* identical requests waiting get the same */
    c->ticket = NULL;
    dcache_ticket_done(t, &(struct dcache_answer){status, text, len});
    answer_from_engine(c, status, text, len);
}

static const struct upstream_ops engine_ops = {
    .headers = on_engine_headers, .done = on_engine_done};
static const struct upstream_ops engine_stream_ops = {
    .headers = on_engine_headers, .chunk = on_engine_chunk, .done = on_engine_done};

/* The request-target an engine gets (caller frees with mem_free; NULL on OOM): the route's
 * own path, as routed (decoded; the head check refused one with a NUL), and the query, if
 * any, decoded and encoded again pair by pair, so what the engine parses is what tandem
 * routed. A query that is not key=value pairs is dropped: no passthrough route takes one. */
static char *forward_target(const struct http_req *r) {
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(http_req_uri(r), EVHTTP_URI_NONCONFORMANT);
    const char *query = u ? evhttp_uri_get_query(u) : NULL;
    struct evkeyvalq pairs;
    TAILQ_INIT(&pairs);
    struct evbuffer *b = evbuffer_new();
    bool ok = b && evbuffer_add_printf(b, "%s", http_req_path(r)) >= 0;
    if (ok && query && *query && evhttp_parse_query_str(query, &pairs) == 0) {
        char sep = '?';
        for (struct evkeyval *kv = TAILQ_FIRST(&pairs); ok && kv; kv = TAILQ_NEXT(kv, next)) {
            char *k = evhttp_encode_uri(kv->key), *v = evhttp_encode_uri(kv->value);
            ok = k && v && evbuffer_add_printf(b, "%c%s=%s", sep, k, v) >= 0;
            sep = '&';
            free(k);
            free(v);
        }
    }
    evhttp_clear_headers(&pairs);
    evhttp_uri_free(u);
    size_t n = b ? evbuffer_get_length(b) : 0;
    char *out = ok ? mem_alloc(n + 1) : NULL;
    if (out) {
        evbuffer_remove(b, out, n);
        out[n] = '\0';
    }
    if (b)
        evbuffer_free(b);
    return out;
}

static void on_job_start(struct sched_job *job, const char *socket_path, void *user) {
    (void)job;
    struct api_call *c = user;
    c->attempts++;
    bool stream = json_is_true(json_object_get(c->request, "stream"));
    char *target = forward_target(c->r);
    c->up = !target ? NULL
                    : upstream_start(c->api->p.engines, socket_path, EVHTTP_REQ_POST, target,
                                     "application/json", c->body, c->body_len, NULL,
                                     forward_headers, stream ? &engine_stream_ops : &engine_ops, c);
    mem_free(target);
    if (!c->up)
        sched_job_upstream_failed(c->job, "cannot connect to the engine");
}

/* Notes that c is refused because its model is failed (a crash loop):
 * Retry-After then points at the end of the back-off, backoff_ms away. */
static void refused_failed(struct api_call *c, int64_t backoff_ms) {
    c->reject = "model_failed";
    c->retry_after = (long)((backoff_ms + 999) / 1000);
}

static void on_job_fail(struct sched_job *job, int status, const char *type, const char *message,
                        void *user) {
    struct api_call *c = user;
    sched_job_timing(job, &c->timing);
    int64_t backoff;
    bool failed = sched_model_failure(c->api->p.sched, sched_job_model(job), &backoff) != NULL;
    c->job = NULL; /* freed by the scheduler after this returns */
    json_t *extra = json_pack("{s{sIsIsI}}", "timing", "queued_ms", (json_int_t)c->timing.queued_ms,
                              "loading_ms", (json_int_t)c->timing.loading_ms, "running_ms",
                              (json_int_t)c->timing.running_ms);
    json_object_set_new(extra, "model", json_string(c->model->cm->name));
    if (failed)
        refused_failed(c, backoff);
    else
        c->reject = api_rejection(c->api, status, message);
    api_call_fail(c, status, type, message, NULL, extra);
}

/* The engine failed before anything was sent: forget its request; the
 * scheduler starts the job again (an idempotent call: see idempotent_ops). */
static void on_job_retry(struct sched_job *job, void *user) {
    (void)job;
    struct api_call *c = user;
    upstream_cancel(c->up);
    c->up = NULL;
}

/* Decisions and embeddings are read-only and deterministic: an engine
 * failure before their answer resends them once. Generations are not
 * resent (a second sample is a different answer), nor is anything
 * streamed. */
static const struct sched_job_ops job_ops = {.start = on_job_start, .fail = on_job_fail};
static const struct sched_job_ops idempotent_ops = {
    .start = on_job_start, .fail = on_job_fail, .retry = on_job_retry};

/* Reads header name as milliseconds (1 to 86400000) into *ms, leaving it
 * alone when the header is absent. False (the call failed with 400) when the
 * value is bad. */
static bool header_ms(struct api_call *c, const char *name, int64_t *ms) {
    const char *h = http_req_header(c->r, name);
    if (!h)
        return true;
    char *end;
    long long v = strtoll(h, &end, 10);
    if (!*h || *end || v < 1 || v > MAX_TIMEOUT_MS) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: expected milliseconds from 1 to 86400000", name);
        api_call_fail(c, 400, "invalid_request_error", msg, NULL, NULL);
        return false;
    }
    *ms = v;
    return true;
}

tandem_err api_parse_sdk_timeout(const char *value, int64_t *ms) {
    if (!value || (!(*value >= '0' && *value <= '9') && *value != '.') ||
        strspn(value, "0123456789.eE+-") != strlen(value))
        return TANDEM_ERR_FORMAT;
    char *end;
    double s = strtod(value, &end);
    if (end == value || *end || !isfinite(s))
        return TANDEM_ERR_FORMAT;
    if (s <= 0 || s > MAX_TIMEOUT_MS / 1000)
        return TANDEM_ERR_RANGE;
    long long v = llround(s * 1000.0);
    *ms = v < 1 ? 1 : v;
    return TANDEM_OK;
}

/* The read timeout the OpenAI SDK announces on an OpenAI route, in ms; 0 when
 * there is none or it is invalid (ignored, never a 400: the SDK sends it
 * unasked), and for a streamed answer, where it bounds the wait between
 * chunks, not the whole answer. */
static int64_t sdk_timeout_ms(const struct api_call *c) {
    int64_t ms = 0;
    if (c->route >= API_ROUTE_CHAT && c->route <= API_ROUTE_EMBEDDINGS &&
        !json_is_true(json_object_get(c->request, "stream")))
        (void)api_parse_sdk_timeout(http_req_header(c->r, "x-stainless-read-timeout"), &ms);
    return ms;
}

/* The deadline: the smallest of the request's own timeout (X-Tandem-Timeout-Ms,
 * else the OpenAI SDK's: sdk_timeout_ms), the gateway's
 * x-envoy-expected-rq-timeout-ms and limits.request_timeout. */
static bool deadline(struct api_call *c, int64_t *out) {
    int64_t own = 0, gateway = 0, ms = c->api->p.cfg->request_timeout_ms;
    if (!header_ms(c, "X-Tandem-Timeout-Ms", &own) ||
        !header_ms(c, "x-envoy-expected-rq-timeout-ms", &gateway))
        return false;
    if (!own)
        own = sdk_timeout_ms(c);
    if (own > 0 && (ms <= 0 || own < ms))
        ms = own;
    if (gateway > 0 && (ms <= 0 || gateway < ms))
        ms = gateway;
    c->deadline_ms = ms > 0 ? ms : 0;
    *out = ms > 0 ? c->t0 + ms : 0;
    return true;
}

static void on_remote_done(void *user, const struct remote_result *res) {
    struct api_call *c = user;
    c->rcall = NULL;
    c->attempts = res->attempts;
    snprintf(c->upstream, sizeof c->upstream, "%s", res->upstream ? res->upstream : "");
    c->timing.running_ms = host_now_ms() - c->t0;
    if (!res->from_upstream) {
        c->reject = api_rejection(c->api, res->status, res->error);
        api_call_fail(c, res->status, res->status == 504 ? "deadline_exceeded" : "upstream_error",
                  res->error, NULL, json_pack("{ss}", "model", c->model->cm->name));
        return;
    }
    json_t *resp = json_loadb(res->body, res->len, 0, NULL);
    c->input_tokens = usage_input_tokens(resp);
    json_decref(resp);
    if (c->api->p.cfg->log_bodies)
        c->response_copy = mem_strndup(res->body, res->len < API_AUDIT_BODY_MAX ? res->len
                                                                          : API_AUDIT_BODY_MAX);
    if (res->status == 200 && c->route == API_ROUTE_SYSTEMONE)
        api_store_answer(c, res->body, res->len);
    char attempts[16];
    snprintf(attempts, sizeof attempts, "%u", res->attempts);
    api_call_add_headers(c);
    http_req_add_header(c->r, "x-tandem-upstream", c->upstream);
    http_req_add_header(c->r, "x-tandem-attempts", attempts);
    if (res->status == 429 || res->status == 503)
        api_call_add_retry_after(c);
    http_req_reply(c->r, res->status, "application/json", res->body, res->len);
    c->answered = true;
    char error[64];
    snprintf(error, sizeof error, "upstream answered %d", res->status);
    api_call_finish(c, res->status, res->status == 200 ? NULL : error);
}

/* A remote model is known upstream by its configured name: a request that
 * named it by an alias, as jev-latest or not at all gets that name (the body
 * is re-serialized then; otherwise it goes as it came). False on OOM. */
static bool name_upstream_model(struct api_call *c) {
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
static void submit_remote(struct api_call *c, int64_t due) {
    if (json_is_true(json_object_get(c->request, "stream"))) {
        char msg[300];
        snprintf(msg, sizeof msg, "model %s is remote: streamed answers are not proxied; send "
                 "stream: false", c->model->cm->name);
        api_call_fail(c, 400, "invalid_request_error", msg, "stream", NULL);
        return;
    }
    if (!name_upstream_model(c)) {
        api_call_fail(c, 500, "internal_error", "out of memory", NULL, NULL);
        return;
    }
    c->rcall = remote_call_start(c->api->p.remote, c->model->remote_index, http_req_path(c->r),
                                 c->body, c->body_len, c->id, due, on_remote_done, c);
    if (!c->rcall)
        api_call_fail(c, 500, "internal_error", "out of memory", NULL, NULL);
}

/* Refuses a call to a failed model (a crash loop) with 503, the cause and
 * Retry-After at the end of its back-off. */
static void fail_model_failed(struct api_call *c) {
    int64_t backoff = 0;
    const char *cause = sched_model_failure(c->api->p.sched, c->model->sched_index, &backoff);
    refused_failed(c, backoff);
    api_call_fail(c, 503, "unavailable_error", cause ? cause : "the model's engine failed", NULL,
              NULL);
}

/* Submits c to its local model's scheduler queue, due at due. */
static void submit_job(struct api_call *c, int64_t due) {
    bool idempotent = (c->route == API_ROUTE_SYSTEMONE || c->route == API_ROUTE_EMBEDDINGS) &&
                      !json_is_true(json_object_get(c->request, "stream"));
    tandem_err e = sched_submit(c->api->p.sched, c->model->sched_index, due,
                                s1_prompt_key(c->request), idempotent ? &idempotent_ops : &job_ops,
                                c, &c->job, &c->position);
    if (e == TANDEM_ERR_TOOBIG) {
        c->reject = "queue_full";
        api_call_fail(c, 429, "queue_full", "the admission queue is full (limits.queue_depth); retry later",
                  NULL, NULL);
    } else if (e == TANDEM_ERR_TIMEOUT) {
        char msg[300];
        snprintf(msg, sizeof msg, "model %s must load first, and its expected load time ends "
                 "after the deadline (%lld ms)", c->model->cm->name, (long long)(due - c->t0));
        c->reject = "deadline";
        api_call_fail(c, 504, "deadline_exceeded", msg, NULL, NULL);
    } else if (e == TANDEM_ERR_ENGINE) {
        fail_model_failed(c);
    } else if (e != TANDEM_OK) {
        c->reject = e == TANDEM_ERR_UNSUPPORTED ? "draining" : NULL;
        api_call_fail(c, 503, "unavailable_error",
                  e == TANDEM_ERR_UNSUPPORTED ? "tandem is shutting down" : tandem_strerror(e), NULL,
                  NULL);
    }
}

/* --- the decision cache ------------------------------------------------------------------------ */

/* Answers c with a cached answer (body[len], an engine's 200 of exactly this
 * request), marked "cached": true, and ends it. */
static void answer_hit(struct api_call *c, const char *body, size_t len) {
    static const char mark[] = "{\"cached\":true,";
    bool object = len > 2 && body[0] == '{' && body[1] == '"';
    char *text = object ? mem_alloc(len + sizeof mark - 2) : NULL;
    if (text) {
        memcpy(text, mark, sizeof mark - 1);
        memcpy(text + sizeof mark - 1, body + 1, len - 1);
    }
    reply_engine_200(c, body, len, text ? text : body, text ? len + sizeof mark - 2 : len);
    mem_free(text);
}

static bool look_up(struct api_call *c, int64_t due);

/* Looks c up again, or submits it: the identical request it waited for went
 * away without an answer. */
static void on_relook(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct api_call *c = arg;
    int64_t due = c->deadline_ms ? c->t0 + c->deadline_ms : 0;
    if (!look_up(c, due))
        submit_job(c, due);
}

/* The identical request c waited for ended: its answer is c's. Without one
 * (it went away), c looks up again on the loop's next turn, outside whatever
 * ended the other request (a scheduler callback, a call's end). */
static void on_cache_wake(void *user, const struct dcache_answer *a) {
    struct api_call *c = user;
    c->ticket = NULL;
    if (c->api->closing)
        return;
    if (a) {
        answer_from_engine(c, a->status, a->body, a->len);
        return;
    }
    struct timeval now = {0, 0};
    if (!c->relook_ev && !(c->relook_ev = evtimer_new(c->api->p.base, on_relook, c)))
        api_call_fail(c, 500, "internal_error", "out of memory", NULL, NULL);
    else
        evtimer_add(c->relook_ev, &now);
}

/* Looks a decision up in the cache: a hit is answered, an identical request
 * in flight is waited for. Returns true when c needs no job of its own. */
static bool look_up(struct api_call *c, int64_t due) {
    char *text = json_dumps(c->request, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text)
        return false;
    struct dcache_request rq = {.model = c->model->sched_index, .text = text,
                                .len = strlen(text), .deadline_ms = due,
                                .no_lookup = api_call_directive(c, "no-cache"),
                                .no_store = api_call_directive(c, "no-store"),
                                .wake = on_cache_wake, .user = c};
    struct dcache_answer hit;
    enum dcache_outcome o = dcache_lookup(c->api->p.cache, &rq, &c->ticket, &hit);
    free(text);
    c->cache = dcache_outcome_name(o);
    if (o == DCACHE_HIT)
        answer_hit(c, hit.body, hit.len);
    return o == DCACHE_HIT || o == DCACHE_WAIT;
}

static void submit(struct api_call *c) {
    int64_t due;
    if (!deadline(c, &due))
        return;
    if (c->model->remote_index != SIZE_MAX)
        submit_remote(c, due);
    else if (c->route != API_ROUTE_SYSTEMONE || !look_up(c, due))
        submit_job(c, due);
}

static void handle_systemone_pipeline(struct api_call *c, const char *name);

void api_proxy_systemone(struct api_call *c) {
    if (!api_call_read_body(c) || !api_call_parse_json(c))
        return;
    const char *m = json_string_value(json_object_get(c->request, "model"));
    if (m && !strncmp(m, CONFIG_PIPELINE_MODEL_PREFIX, strlen(CONFIG_PIPELINE_MODEL_PREFIX))) {
        handle_systemone_pipeline(c, m + strlen(CONFIG_PIPELINE_MODEL_PREFIX));
        return;
    }
    if (!api_call_route_model(c))
        return;
    char err[512];
    if (!c->model->decision_type[0]) {
        snprintf(err, sizeof err, "model %s is not a decision model (it has no decision head)",
                 c->model->cm->name);
        api_call_fail(c, 501, "not_supported_error", err, "model", NULL);
        return;
    }
    if (s1_validate_request(c->request, s1_max_options(c->model->decision_type), err, sizeof err) != TANDEM_OK) {
        size_t flen = strcspn(err, ":");
        char param[256];
        snprintf(param, sizeof param, "%.*s", (int)(flen < 255 ? flen : 255), err);
        api_call_fail(c, 400, "invalid_request_error", err, param, NULL);
        return;
    }
    submit(c);
}

/* A `verdict` event: the pipeline's answer without its usage and models. */
static void publish_verdict(struct api *a, const json_t *answer) {
    if (!a->p.events)
        return;
    json_t *e = json_deep_copy(answer);
    json_object_del(e, "usage");
    json_object_del(e, "models");
    events_publish(a->p.events, "verdict", e);
}

static void on_pipeline_done(void *user, struct pipeline_outcome *o) {
    struct api_call *c = user;
    c->run = NULL;
    if (o->status == 200)
        publish_verdict(c->api, o->body);
    char model[sizeof CONFIG_PIPELINE_MODEL_PREFIX + sizeof c->pipeline];
    snprintf(model, sizeof model, CONFIG_PIPELINE_MODEL_PREFIX "%s", c->pipeline);
    if (o->status == 200 && c->question[0] &&
        pipeline_answer_to_systemone(o->body, model, c->question) != TANDEM_OK) {
        json_decref(o->body);
        api_call_fail(c, 500, "internal_error", "out of memory", NULL, NULL);
        return;
    }
    c->timing = o->sum;
    c->input_tokens = o->input_tokens;
    c->attempts = 1 + o->resends;
    c->cache = !o->looked ? NULL : o->cached == o->looked ? "hit" : o->cached ? "partial" : "miss";
    snprintf(c->verdict, sizeof c->verdict, "%s", o->verdict ? o->verdict : "");
    const char *msg = json_string_value(json_object_get(json_object_get(o->body, "error"), "message"));
    char error[600];
    snprintf(error, sizeof error, "%s", msg ? msg : "");
    if (o->status == 429 || o->status == 503)
        api_call_add_retry_after(c);
    c->reject = api_rejection(c->api, o->status, msg);
    if (o->status == 200 && c->api->p.store) {
        char *text = json_dumps(o->body, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (text)
            api_store_answer(c, text, strlen(text));
        free(text);
    }
    api_call_reply_json(c, o->status, o->body);
    api_call_finish(c, o->status, msg ? error : NULL);
}

/* Where a pipeline request's field came from on /v1/systemone: param (in
 * place) and err (prefixed) name the System One field. */
static void name_systemone_field(const struct api_call *c, char *param, size_t paramlen, char *err,
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
static void start_pipeline(struct api_call *c, const char *name, const json_t *request) {
    snprintf(c->pipeline, sizeof c->pipeline, "%s", name);
    int64_t due;
    if (!deadline(c, &due))
        return;
    struct pipeline_env env = {.sched = c->api->p.sched, .engines = c->api->p.engines,
                               .remote = c->api->p.remote, .cache = c->api->p.cache,
                               .no_lookup = api_call_directive(c, "no-cache"),
                               .no_store = api_call_directive(c, "no-store"), .base = c->api->p.base};
    char err[1200], param[256];
    int status;
    if (pipeline_run_start(c->api->p.pipelines, &env, c->pipeline, request, c->id, due,
                           on_pipeline_done, c, &c->run, &status, err, sizeof err, param,
                           sizeof param) == TANDEM_OK)
        return;
    c->reject = api_rejection(c->api, status, err);
    if (c->question[0])
        name_systemone_field(c, param, sizeof param, err, sizeof err);
    api_call_fail(c, status, status == 404 ? "not_found_error" : NULL, err, param[0] ? param : NULL,
              NULL);
}

void api_proxy_pipeline(struct api_call *c) {
    if (api_call_read_body(c) && api_call_parse_json(c))
        start_pipeline(c, http_req_path(c->r) + strlen("/v1/pipelines/"), c->request);
}

/* POST /v1/systemone with model "pipelines/<name>" (name borrowed from
 * c->request): the pipeline, asked and answered in System One's shape. */
static void handle_systemone_pipeline(struct api_call *c, const char *name) {
    json_t *request;
    char err[1200], param[256];
    tandem_err e = pipeline_request_from_systemone(c->request, &request, c->question, err,
                                                   sizeof err, param, sizeof param);
    if (e == TANDEM_ERR_NOMEM)
        api_call_fail(c, 500, "internal_error", "out of memory", NULL, NULL);
    else if (e != TANDEM_OK)
        api_call_fail(c, 400, "invalid_request_error", err, param, NULL);
    else
        start_pipeline(c, name, request);
    json_decref(request);
}

void api_proxy_passthrough(struct api_call *c) {
    if (!api_call_read_body(c) || !api_call_parse_json(c) || !api_call_route_model(c))
        return;
    submit(c);
}
