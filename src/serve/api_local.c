/* api_local.c: the routes the api answers itself, without an engine: the probes
 * (/health, /livez), /v1/status, /v1/models, /v1/pipelines, /metrics, the admin
 * load/unload, the event stream (/v1/events), the MCP's HTTP transport (/mcp), the
 * dashboard's files (/ui) and the contract (/openapi.yaml).
 *
 * Each handler reads the scheduler, the remote set and the config as they are now (a
 * reload applies at once) and answers through api.c's call functions, so every answer
 * carries the common headers (x-request-id among them) and ends in api_call_finish. The
 * embedded files come from api.c (api_internal.h says why). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/hash.h"
#include "base/mem.h"
#include "serve/api_internal.h"
#include "serve/events.h"

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

/* A model's entry in OpenAI's list: created is its date (omitted when unknown). */
static json_t *openai_model_json(const struct api *a, const struct api_model *m) {
    json_t *aliases = json_array();
    for (size_t k = 0; k < m->cm->n_aliases; k++)
        json_array_append_new(aliases, json_string(m->cm->aliases[k]));
    json_t *d = json_pack("{sssssIsssosss{s[s]s[s]}s{sssIss}}", "id", m->cm->name, "object",
                          "model", "created", (json_int_t)m->created, "owned_by", "tandem",
                          "aliases", aliases, "decision_type", m->decision_type, "architecture",
                          "input_modalities", "text", "output_modalities",
                          m->decision_type[0] ? "decisions" : "text", "meta", "arch", m->arch,
                          "n_ctx", (json_int_t)m->n_ctx, "header_sha256", m->sha256);
    if (m->created <= 0)
        json_object_del(d, "created");
    json_object_set_new(json_object_get(d, "meta"), "sha256",
                        m->file_sha256[0] ? json_string(m->file_sha256) : json_null());
    json_object_set_new(d, "status", json_string(model_status(a, m)));
    json_object_set_new(d, "state", json_string(model_state(a, m)));
    if (m->remote_index != SIZE_MAX && !remote_model_up(a->p.remote, m->remote_index))
        json_object_set_new(d, "down_because", json_string(remote_model_down_cause(
                                                   a->p.remote, m->remote_index)));
    return d;
}

/* Appends model i's entries in TypeSafe's list to models: its own and, for the
 * default model, jev-latest's. release_date is its date in UTC (omitted when
 * unknown). */
static void append_typesafe_models(const struct api *a, size_t i, json_t *models) {
    const struct api_model *m = &a->p.models[i];
    bool decision = m->decision_type[0] != '\0';
    char desc[300], date[16] = "";
    snprintf(desc, sizeof desc, "%s (%s%s%s), served by tandem", m->cm->name, m->arch,
             decision ? ", decision type " : ", generative", m->decision_type);
    time_t t = (time_t)m->created;
    struct tm tm;
    if (m->created > 0 && gmtime_r(&t, &tm))
        strftime(date, sizeof date, "%Y-%m-%d", &tm);
    for (int alias = 0; alias <= (i == a->p.default_model); alias++) {
        json_t *e = json_pack("{ssss}", "name", alias ? "jev-latest" : m->cm->name,
                              "description", desc);
        if (date[0])
            json_object_set_new(e, "release_date", json_string(date));
        if (alias)
            json_object_set_new(e, "alias_of", json_string(m->cm->name));
        json_array_append_new(models, e);
    }
}

static json_t *models_json(const struct api *a) {
    json_t *data = json_array(), *models = json_array();
    for (size_t i = 0; i < a->p.n_models; i++) {
        json_array_append_new(data, openai_model_json(a, &a->p.models[i]));
        append_typesafe_models(a, i, models);
    }
    return json_pack("{sssoso}", "object", "list", "data", data, "models", models);
}

/* --- the decision cache ------------------------------------------------------------------------ */

const char *const api_cache_counter_names[API_CACHE_COUNTERS] = {
    "hits", "misses", "coalesced", "bypasses", "evictions", "invalidations"};

/* st's counters in api_cache_counter_names' order. */
static void cache_counters(const struct dcache_stats *st, uint64_t out[API_CACHE_COUNTERS]) {
    const uint64_t v[API_CACHE_COUNTERS] = {st->hits, st->misses, st->coalesced, st->bypasses,
                                            st->evictions, st->invalidations};
    memcpy(out, v, sizeof v);
}

/* The counts st as JSON, with enabled when it is a model's (enabled >= 0). */
static json_t *cache_stats_json(const struct dcache_stats *st, int enabled) {
    uint64_t v[API_CACHE_COUNTERS];
    cache_counters(st, v);
    json_t *j = json_pack("{sIsI}", "entries", (json_int_t)st->entries, "bytes",
                          (json_int_t)st->bytes);
    for (size_t i = 0; j && i < API_CACHE_COUNTERS; i++)
        json_object_set_new(j, api_cache_counter_names[i], json_integer((json_int_t)v[i]));
    if (j && enabled >= 0)
        json_object_set_new(j, "enabled", json_boolean(enabled));
    return j;
}

/* /v1/status's "cache", and each local model's "cache" in its "models". */
static void add_cache_status(const struct api *a, json_t *status) {
    struct dcache_stats st;
    dcache_stats(a->p.cache, SIZE_MAX, &st);
    json_t *total = cache_stats_json(&st, -1);
    json_object_set_new(total, "max_bytes", json_integer((json_int_t)dcache_max_bytes(a->p.cache)));
    json_object_set_new(status, "cache", total);
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(status, "models"), i, m) {
        const struct api_model *am =
            api_find_model(a, json_string_value(json_object_get(m, "name")));
        if (!am || am->sched_index == SIZE_MAX)
            continue;
        dcache_stats(a->p.cache, am->sched_index, &st);
        json_object_set_new(m, "cache", cache_stats_json(&st, dcache_model_enabled(
                                                                  a->p.cache, am->sched_index)));
    }
}

/* The cache's series on /metrics: counters grow by what happened since the
 * last scrape (a->cache_published), gauges are set. */
static void update_cache_metrics(struct api *a) {
    size_t n = sched_model_count(a->p.sched);
    if (!a->m_cache_bytes || !n ||
        (!a->cache_published && !(a->cache_published = mem_calloc(n, sizeof *a->cache_published))))
        return;
    for (size_t i = 0; i < a->p.n_models; i++) {
        const struct api_model *m = &a->p.models[i];
        if (m->sched_index >= n)
            continue;
        struct dcache_stats st;
        uint64_t now[API_CACHE_COUNTERS], was[API_CACHE_COUNTERS];
        dcache_stats(a->p.cache, m->sched_index, &st);
        cache_counters(&st, now);
        cache_counters(&a->cache_published[m->sched_index], was);
        const char *labels[] = {m->cm->name};
        for (size_t k = 0; k < API_CACHE_COUNTERS; k++)
            prom_add(a->m_cache[k], labels, (double)(now[k] - was[k]));
        prom_set(a->m_cache_entries, labels, (double)st.entries);
        prom_set(a->m_cache_bytes, labels, (double)st.bytes);
        a->cache_published[m->sched_index] = st;
    }
}

/* POST /admin/cache/clear[?model=NAME]: drops the cached decisions of one
 * model, or of all. */
static void handle_cache_clear(struct api_call *c) {
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(http_req_uri(c->r), EVHTTP_URI_NONCONFORMANT);
    const char *query = u ? evhttp_uri_get_query(u) : NULL;
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *name = query && evhttp_parse_query_str(query, &q) == 0
                           ? evhttp_find_header(&q, "model") : NULL;
    c->model = name ? api_find_model(c->api, name) : NULL;
    if (name && (!c->model || c->model->sched_index == SIZE_MAX)) {
        api_call_fail(c, 404, "model_not_found", c->model ? "the model is remote: tandem "
                      "caches only its local models' decisions" : "unknown model", "model", NULL);
    } else {
        uint64_t n = dcache_clear(c->api->p.cache, c->model ? c->model->sched_index : SIZE_MAX);
        api_call_reply_json(c, 200, json_pack("{sIso}", "cleared", (json_int_t)n, "model",
                                              c->model ? json_string(c->model->cm->name)
                                                       : json_null()));
        api_call_finish(c, 200, NULL);
    }
    evhttp_clear_headers(&q);
    evhttp_uri_free(u);
}

static void handle_admin(struct api_call *c) {
    if (!strcmp(http_req_path(c->r), "/admin/cache/clear")) {
        handle_cache_clear(c);
        return;
    }
    const char *path = http_req_path(c->r) + strlen("/admin/models/");
    const char *slash = strrchr(path, '/'); /* the router matched ".../load" or ".../unload" */
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(slash - path), path);
    c->model = api_find_model(c->api, name);
    if (!c->model) {
        api_call_fail(c, 404, "model_not_found", "unknown model", "model", NULL);
        return;
    }
    bool load = !strcmp(slash, "/load");
    size_t i = c->model->sched_index;
    if (c->model->remote_index != SIZE_MAX) {
        api_call_fail(c, 409, "conflict", "the model is remote: tandem does not load it", NULL, NULL);
        return;
    }
    tandem_err e = load ? sched_load(c->api->p.sched, i) : sched_unload(c->api->p.sched, i);
    if (e == TANDEM_ERR_TOOBIG)
        api_call_fail(c, 409, "conflict", "the model does not fit beside the busy or pinned residents",
                  NULL, NULL);
    else if (e == TANDEM_ERR_UNSUPPORTED)
        api_call_fail(c, 409, "conflict",
                  load ? "the model is stopping; retry" : "the model has requests in flight or queued",
                  NULL, NULL);
    else {
        api_call_reply_json(c, 202, json_pack("{ssss}", "model", c->model->cm->name, "state",
                                     sched_state_name(sched_model_state(c->api->p.sched, i))));
        api_call_finish(c, 202, NULL);
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
    struct api_node_load l;
    api_node_load(a, &l);
    char why[400];
    double ratio = api_busy_ratio(&l), ready = !api_cannot_admit(a, why, sizeof why);
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

static void handle_metrics(struct api_call *c) {
    update_gpu_gauges(c->api);
    update_load_gauges(c->api);
    update_cache_metrics(c->api);
    api_store_metrics(c->api);
    struct mem_buf b;
    mem_buf_init(&b, 64u << 20);
    if (!c->api->p.metrics || prom_render(c->api->p.metrics, &b) != TANDEM_OK) {
        mem_buf_deinit(&b);
        api_call_fail(c, 500, NULL, "metrics unavailable", NULL, NULL);
        return;
    }
    api_call_add_headers(c);
    http_req_reply(c->r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    c->answered = true;
    mem_buf_deinit(&b);
    api_call_finish(c, 200, NULL);
}

static json_t *node_json(struct api *a) {
    static const char *const phase[] = {"starting", "serving", "draining", "stopping"};
    struct api_node_load l;
    api_node_load(a, &l);
    char why[400];
    bool refuse = api_cannot_admit(a, why, sizeof why);
    return json_pack("{sssssbsssIsIsIsIsf}", "id", a->p.cfg->node_id, "phase", phase[a->phase],
                     "ready", !refuse, "not_ready_because", refuse ? why : "",
                     "requests_waiting", (json_int_t)l.waiting, "requests_running",
                     (json_int_t)l.running, "slots_busy", (json_int_t)l.busy, "slots",
                     (json_int_t)l.slots, "slots_busy_ratio", api_busy_ratio(&l));
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

/* The audit log's health for /v1/status (retrying its waiting lines first). */
static json_t *audit_json(struct api *a) {
    if (!a->p.audit)
        return json_null();
    audit_flush(a->p.audit);
    api_audit_health(a);
    const struct audit_stats *st = &a->audit_seen;
    return json_pack("{sssssIsIsIso}", "state", st->pending_lines ? "failing" : "ok",
                     "on_error", a->p.cfg->audit_fail ? "fail" : "continue", "pending_lines",
                     (json_int_t)st->pending_lines, "errors", (json_int_t)st->errors, "dropped",
                     (json_int_t)st->dropped, "last_error",
                     st->last_error[0] ? json_string(st->last_error) : json_null());
}

/* GET /v1/events: the event stream takes the request over and the call
 * ends here (its audit line says that a subscriber came). The common headers
 * go on first: the stream's head is sent inside events_subscribe. */
static void handle_events(struct api_call *c) {
    struct api *a = c->api;
    const char *last = http_req_header(c->r, "Last-Event-ID");
    bool off = !a->p.events || !a->p.cfg->max_event_clients;
    api_call_add_headers(c);
    int refused = off ? 503 : events_subscribe(a->p.events, c->r, last);
    if (refused == 429) {
        c->retry_after = 5;
        char msg[200];
        snprintf(msg, sizeof msg, "%u event subscribers are connected, the limit "
                 "(limits.max_event_clients); retry later", a->p.cfg->max_event_clients);
        api_call_fail(c, 429, "too_many_subscribers", msg, NULL, NULL);
        return;
    }
    if (refused) {
        api_call_fail(c, refused, NULL, off ? "the event stream is off (limits.max_event_clients: 0)"
                                        : "out of memory", NULL, NULL);
        return;
    }
    c->answered = true; /* by the stream, later */
    api_call_finish(c, 200, NULL);
}

static json_t *status_for_mcp(void *user) {
    struct api *a = user;
    return sched_status_json(a->p.sched);
}

/* The catalog the MCP's tools come from (caller owns both); subscribers of
 * POST /mcp hear of a change. */
static void mcp_catalog(struct api *a, json_t **pipelines, json_t **models) {
    *pipelines = pipeline_set_list_json(a->p.pipelines);
    *models = models_json(a);
    mcp_http_set_catalog(a->mcp, *pipelines, *models);
}

void api_local_mcp_refresh(struct api *a) {
    if (!a->mcp)
        return;
    json_t *pipelines, *models;
    mcp_catalog(a, &pipelines, &models);
    json_decref(pipelines);
    json_decref(models);
}

/* POST and DELETE /mcp: handed to the MCP's HTTP transport, which answers them. */
static void handle_mcp(struct api_call *c) {
    struct api *a = c->api;
    if (!a->p.cfg->mcp_http) {
        api_call_fail(c, 404, NULL, "POST /mcp is off: set mcp.http: true in the config (docs/mcp.md)",
                  NULL, NULL);
        return;
    }
    if (!a->mcp) {
        struct mcp_http_env env = {.base = a->p.base, .handler = api_handle, .handler_user = a,
                                   .status = status_for_mcp, .status_user = a};
        if (!(a->mcp = mcp_http_new(&env))) {
            api_call_fail(c, 500, NULL, "out of memory", NULL, NULL);
            return;
        }
    }
    if (http_req_method(c->r) != EVHTTP_REQ_DELETE && !api_call_read_body(c)) /* DELETE ends a session */
        return;
    json_t *pipelines, *models;
    mcp_catalog(a, &pipelines, &models);
    api_call_add_headers(c);
    c->answered = true; /* by the transport */
    int status = mcp_http_serve(a->mcp, c->r, c->body, c->body_len, pipelines, models);
    json_decref(pipelines);
    json_decref(models);
    api_call_finish(c, status, NULL);
}

/* The browser fetches nothing but this node, and runs no inline script. */
#define UI_CSP                                                                                    \
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "               \
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

/* One file of the dashboard, embedded at build time. */
struct ui_asset {
    const char *name; /* after "/ui", "" for the page */
    const char *type;
    const struct api_blob *file;
    char etag[24];    /* "\"<16 hex digits of its SHA-256>\"", made at its first request */
};

static struct ui_asset ui_assets[] = {
    {"", "text/html; charset=utf-8", &api_ui_index_html, ""},
    {"/app.css", "text/css; charset=utf-8", &api_ui_app_css, ""},
    {"/app.js", "text/javascript; charset=utf-8", &api_ui_app_js, ""}};

/* GET /ui, /ui/app.css, /ui/app.js: revalidated on every use (Cache-Control:
 * no-cache) against an ETag of the file's bytes, so a new binary's page is
 * never stale and an unchanged one costs a 304. */
static void handle_ui(struct api_call *c) {
    const char *name = http_req_path(c->r) + strlen("/ui");
    for (size_t i = 0; i < sizeof ui_assets / sizeof *ui_assets; i++) {
        struct ui_asset *f = &ui_assets[i];
        if (strcmp(name, f->name))
            continue;
        if (!f->etag[0]) {
            char hex[HASH_SHA256_HEX_LEN + 1];
            hash_buffer_sha256(f->file->data, f->file->len, hex);
            snprintf(f->etag, sizeof f->etag, "\"%.16s\"", hex);
        }
        const char *seen = http_req_header(c->r, "If-None-Match");
        http_req_add_header(c->r, "ETag", f->etag);
        http_req_add_header(c->r, "Cache-Control", "no-cache");
        http_req_add_header(c->r, "X-Content-Type-Options", "nosniff");
        http_req_add_header(c->r, "Content-Security-Policy", UI_CSP);
        bool fresh = seen && strstr(seen, f->etag);
        api_call_add_headers(c);
        http_req_reply(c->r, fresh ? 304 : 200, f->type, fresh ? NULL : f->file->data,
                       fresh ? 0 : f->file->len);
        c->answered = true;
        api_call_finish(c, fresh ? 304 : 200, NULL);
        return;
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no file %s: the dashboard is /ui", http_req_path(c->r));
    api_call_fail(c, 404, NULL, msg, NULL, NULL);
}

void api_local_handle(struct api_call *c) {
    struct api *a = c->api;
    switch (c->route) {
    case API_ROUTE_HEALTH: {
        char why[400];
        if (api_cannot_admit(a, why, sizeof why)) {
            if (a->phase >= API_DRAINING)
                http_req_add_header(c->r, "x-envoy-immediate-health-check-fail", "true");
            api_call_fail(c, 503, "unavailable_error", why, NULL, NULL);
            return;
        }
        api_call_reply_json(c, 200, json_pack("{ss}", "status", "ok"));
        break;
    }
    case API_ROUTE_LIVEZ: api_call_reply_json(c, 200, json_pack("{ss}", "status", "alive")); break;
    case API_ROUTE_MODELS: api_call_reply_json(c, 200, models_json(a)); break;
    case API_ROUTE_PIPELINES: api_call_reply_json(c, 200, pipeline_set_list_json(a->p.pipelines)); break;
    case API_ROUTE_STATUS: {
        json_t *j = sched_status_json(a->p.sched);
        json_object_set_new(j, "serving", json_boolean(a->phase == API_SERVING));
        json_object_set_new(j, "node", node_json(a));
        json_object_set_new(j, "remote", remote_json(a));
        json_object_set_new(j, "calls_in_flight", json_integer(a->in_flight - 1));
        json_object_set_new(j, "audit", audit_json(a));
        add_cache_status(a, j);
        json_object_set_new(j, "store", api_store_status(a));
        json_object_set_new(j, "events", a->p.events ? json_pack("{sisIsi}", "subscribers",
                                                                 events_subscribers(a->p.events),
                                                                 "dropped", (json_int_t)
                                                                 events_dropped(a->p.events),
                                                                 "max", a->p.cfg->max_event_clients)
                                                     : json_null());
        api_call_reply_json(c, 200, j);
        break;
    }
    case API_ROUTE_METRICS: handle_metrics(c); return;
    case API_ROUTE_ADMIN: handle_admin(c); return;
    case API_ROUTE_EVENTS: handle_events(c); return;
    case API_ROUTE_UI: handle_ui(c); return;
    case API_ROUTE_MCP: handle_mcp(c); return;
    case API_ROUTE_FEEDBACK: api_feedback(c); return;
    case API_ROUTE_QUALITY: api_quality(c); return;
    case API_ROUTE_OPENAPI:
        api_call_add_headers(c);
        http_req_reply(c->r, 200, "application/yaml", api_openapi_yaml.data,
                       api_openapi_yaml.len);
        c->answered = true;
        break;
    default: break;
    }
    api_call_finish(c, 200, NULL);
}
