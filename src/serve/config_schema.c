/* config_schema.c: tandem.yaml's keys, as tables of fields.
 *
 * Each mapping of the file has a table (config_walk.h): a row per key gives
 * the kind of its value, the member it fills (offsetof), its range or words,
 * and its default as the YAML would say it. A key with more to check than
 * its kind (a model path that must exist, an upstream's URLs, a pipeline's
 * stages) has a handler here; the mappings of named entries (models,
 * pipelines, questions, thresholds, criteria) go through
 * config_walk_map_each. The order of a table's rows is the order in which
 * "did you mean" looks for a near key, so rows are only ever appended.
 * Checks that need more than one section (names, pipelines against models)
 * are config.c's, after the walk. */
#include "serve/config_schema.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/mem.h"
#include "base/units.h"
#include "base/utf8.h"
#include "serve/remote.h"

#define MSG 512

#define CFG(t) ((struct config *)(t))
#define MODEL(t) ((struct config_model *)(t))

/* --- the top-level sections ------------------------------------------------------------ */

static bool k_listen(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char s[250];
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    tandem_err e = units_parse_listen(s, CFG(t)->listen_host, sizeof CFG(t)->listen_host,
                                      &CFG(t)->listen_port);
    if (e == TANDEM_ERR_RANGE)
        return config_walk_fail(w, e, v, p, "port must be 0 (any free port) to 65535, got \"%s\"",
                                strrchr(s, ':') + 1);
    if (e != TANDEM_OK)
        return config_walk_fail(w, e, v, p, "expected host:port, got \"%s\"", s);
    return true;
}

static bool k_audit(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    size_t len = 0;
    const char *s = fy_node_is_scalar(v) ? fy_node_get_scalar(v, &len) : NULL;
    if (s && len == 3 && !memcmp(s, "off", 3)) { /* a path may be longer than "off" */
        mem_free(CFG(t)->audit_path);
        CFG(t)->audit_path = mem_strdup("off");
        return CFG(t)->audit_path != NULL;
    }
    return config_walk_path(w, v, p, &CFG(t)->audit_path);
}

static bool k_store_path(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    size_t len = 0;
    const char *s = fy_node_is_scalar(v) ? fy_node_get_scalar(v, &len) : NULL;
    if (s && len == 3 && !memcmp(s, "off", 3)) {
        mem_free(CFG(t)->store_path);
        CFG(t)->store_path = mem_strdup("off");
        return CFG(t)->store_path != NULL;
    }
    return config_walk_path(w, v, p, &CFG(t)->store_path);
}

static bool k_node_id(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char s[sizeof CFG(t)->node_id];
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    for (const char *c = s; *c; c++)
        if (*c <= ' ' || *c == 0x7f || (unsigned char)*c >= 0x80)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "a node id is printable ASCII "
                                    "without spaces (it is sent in a header), got \"%s\"", s);
    if (!s[0])
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "must not be empty");
    memcpy(CFG(t)->node_id, s, sizeof s);
    return true;
}

static const struct config_choice AUDIT_ON_ERROR[] = {
    {"fail", true}, {"continue", false}, {NULL, 0}};
static const struct config_choice METRICS_COMPAT[] = {{"vllm", true}, {"none", false}, {NULL, 0}};

static const struct config_field BUDGET[] = {
    {"vram", CONFIG_SIZE(struct config, vram)},
    {"reserve", CONFIG_SIZE(struct config, reserve), .def = "512MiB"},
    {"ram", CONFIG_SIZE(struct config, ram)},
    {0}};
static const struct config_field ENGINE[] = {
    {"path", CONFIG_PATH(struct config, llama_server)}, {0}};
static const struct config_field DEFAULTS[] = {
    {"model", CONFIG_STRING(struct config, default_model)}, {0}};
static const struct config_field LIMITS[] = {
    {"max_body", CONFIG_SIZE(struct config, max_body_bytes), .def = "1MiB"},
    {"queue_depth", CONFIG_UINT(struct config, queue_depth, 1, UINT32_MAX), .def = "64"},
    {"request_timeout", CONFIG_DURATION(struct config, request_timeout_ms), .def = "60s"},
    {"header_timeout", CONFIG_DURATION(struct config, header_timeout_ms), .def = "10s"},
    {"idle_timeout", CONFIG_DURATION(struct config, idle_timeout_ms), .def = "60s"},
    {"max_connections", CONFIG_UINT(struct config, max_connections, 1, UINT32_MAX), .def = "256"},
    {"drain_delay", CONFIG_DURATION(struct config, drain_delay_ms), .def = "5s"},
    {"health_interval", CONFIG_DURATION(struct config, health_interval_ms), .min = 100,
     .def = "1s"},
    {"max_restarts", CONFIG_UINT(struct config, max_restarts, 1, 1000), .def = "5"},
    {"max_event_clients", CONFIG_UINT(struct config, max_event_clients, 0, 1024), .def = "16"},
    {0}};
static const struct config_field SCHEDULING[] = {
    {"group_limit", CONFIG_UINT(struct config, group_limit, 1, UINT32_MAX), .def = "16"},
    {"max_wait", CONFIG_DURATION(struct config, starvation_ms), .def = "30s"},
    {"request_tokens", CONFIG_UINT(struct config, request_tokens, 1, UINT32_MAX), .def = "256"},
    {"clients", CONFIG_UINT(struct config, clients, 1, UINT32_MAX), .def = "1"},
    {0}};
static const struct config_field SHUTDOWN[] = {
    {"grace", CONFIG_DURATION(struct config, drain_grace_ms), .def = "30s"},
    {"engine_grace", CONFIG_DURATION(struct config, stop_grace_ms), .def = "10s"},
    {0}};
static const struct config_field NODE[] = {{"id", CONFIG_CUSTOM(k_node_id)}, {0}};
static const struct config_field METRICS[] = {
    {"compat", CONFIG_ENUM(struct config, metrics_vllm, METRICS_COMPAT), .def = "none"},
    {"require_key", CONFIG_BOOL(struct config, metrics_require_key)},
    {0}};
static const struct config_field CACHE[] = {
    {"max_bytes", CONFIG_SIZE(struct config, cache_max_bytes), .def = "64MiB"}, {0}};
static const struct config_field STORE[] = {
    {"path", CONFIG_CUSTOM(k_store_path)},
    {"bodies", CONFIG_BOOL(struct config, store_bodies)},
    {"retention", CONFIG_DURATION(struct config, store_retention_ms), .min = 1000, .def = "30d"},
    {"max_bytes", CONFIG_SIZE(struct config, store_max_bytes), .def = "1GiB"},
    {"quality_window", CONFIG_DURATION(struct config, store_window_ms), .min = 1000, .def = "7d"},
    {0}};
static const struct config_field LOGS[] = {
    {"dir", CONFIG_PATH(struct config, log_dir)},
    {"audit", CONFIG_CUSTOM(k_audit)},
    {"bodies", CONFIG_BOOL(struct config, log_bodies)},
    {"audit_max", CONFIG_SIZE(struct config, audit_max_bytes), .def = "64MiB"},
    {"audit_keep", CONFIG_UINT(struct config, audit_keep, 0, UINT32_MAX), .def = "5"},
    {"audit_on_error", CONFIG_ENUM(struct config, audit_fail, AUDIT_ON_ERROR), .def = "continue"},
    {0}};

/* --- models ------------------------------------------------------------ */

static bool k_m_path(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    if (!config_walk_path(w, v, p, &MODEL(t)->path))
        return false;
    struct stat st;
    if (stat(MODEL(t)->path, &st) != 0 || !S_ISREG(st.st_mode))
        return config_walk_fail(w, TANDEM_ERR_NOTFOUND, v, p, "%s: no such file", MODEL(t)->path);
    return true;
}

static bool k_m_ngl(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char s[16];
    if (fy_node_is_scalar(v) && config_walk_scalar(w, v, p, s, sizeof s) && !strcmp(s, "auto"))
        return MODEL(t)->settings.ngl = PLAN_NGL_AUTO, true;
    uint64_t n;
    if (!config_walk_u64(w, v, p, 0, 100000, &n))
        return false;
    MODEL(t)->settings.ngl = (int32_t)n;
    return true;
}

static bool k_m_device(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char s[32];
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    if (place_want_parse(s, &MODEL(t)->device, &MODEL(t)->gpu) != TANDEM_OK)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected auto, gpu, gpu:N or cpu, got \"%s\"", s);
    MODEL(t)->device_line = (uint32_t)config_walk_line(v);
    return true;
}

/* Flags tandem derives from the plan: setting them by hand would break it. */
static const char *const OWNED_FLAGS[] = {
    "-m", "--model", "--host", "--port", "-c", "--ctx-size", "-ngl", "--n-gpu-layers",
    "--gpu-layers", "-np", "--parallel", "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
    "-fa", "--flash-attn", "-b", "--batch-size", "-ub", "--ubatch-size", "-fit", "--fit",
    "-lv", "--log-verbosity", "--embeddings", "--embedding", "--pooling", "--reranking",
    "--alias", "-a", "--api-key", "--kv-unified", "-kvu", "-t", "--threads", "-tb",
    "--threads-batch", "-dev", "--device", "-cram", "--cache-ram", "--slot-save-path",
    "--cors-origins", "--cors-credentials", "--no-cors-credentials", NULL};

static bool k_m_extra(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    if (!config_walk_list(w, v, p, &MODEL(t)->extra_args, &MODEL(t)->n_extra_args))
        return false;
    for (size_t i = 0; i < MODEL(t)->n_extra_args; i++)
        for (const char *const *f = OWNED_FLAGS; *f; f++)
            if (!strcmp(MODEL(t)->extra_args[i], *f))
                return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "%s is set by tandem from "
                                        "the plan; use the model's own key", *f);
    return true;
}

/* Checks the URLs config_walk_list read from list v (urls[i] from its item i)
 * with remote_url_check; an origin (allowed_origins) also ends at host[:port]. */
static bool check_urls(struct config_walk *w, struct fy_node *v, const char *p, char *const *urls,
                       bool origin) {
    size_t i = 0;
    void *it = NULL;
    struct fy_node *item;
    for (; (item = fy_node_sequence_iterate(v, &it)); i++) {
        char why[MSG], sub[300];
        snprintf(sub, sizeof sub, "%s[%zu]", p, i);
        if (remote_url_check(urls[i], why, sizeof why) != TANDEM_OK)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, item, sub, "\"%s\": %s", urls[i], why);
        const char *auth = strstr(urls[i], "://") + 3;
        if (origin && auth[strcspn(auth, "/")])
            return config_walk_fail(w, TANDEM_ERR_FORMAT, item, sub, "\"%s\": an origin is "
                                    "http(s)://host[:port], with nothing after the host or port",
                                    urls[i]);
    }
    return true;
}

/* remote model keys (docs/scale-out.md): their fields write the model's
 * upstream, created by the first of them (with health: /health) */
static void *upstream_of(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_model *m = MODEL(t);
    if (!m->upstream && (m->upstream = mem_calloc(1, sizeof *m->upstream)))
        m->upstream->health = mem_strdup("/health");
    if (!m->upstream || !m->upstream->health) {
        config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
        return NULL;
    }
    return m->upstream;
}

#define UPSTREAM(t) ((struct config_upstream *)(t))

static bool k_u_urls(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = UPSTREAM(t);
    if (!config_walk_list(w, v, p, &u->urls, &u->n_urls))
        return false;
    if (!u->n_urls || u->n_urls > REMOTE_MAX_URLS)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "expected 1 to %d base URLs, got %zu",
                                REMOTE_MAX_URLS, u->n_urls);
    return check_urls(w, v, p, u->urls, false);
}

static bool k_u_api_key_env(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = UPSTREAM(t);
    if (!config_walk_string(w, v, p, &u->api_key_env))
        return false;
    const char *key = getenv(u->api_key_env);
    if (!key || !*key)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "the environment variable %s is not set", u->api_key_env);
    mem_free(u->api_key);
    if (!(u->api_key = mem_strdup(key)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}

static bool k_u_health(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = UPSTREAM(t);
    char s[256];
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    mem_free(u->health);
    u->health = NULL;
    if (!strcmp(s, "none"))
        return true;
    if (s[0] != '/' || strpbrk(s, "?# \t"))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected a path like /health, or none, got \"%s\"", s);
    if (!(u->health = mem_strdup(s)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}

static const struct config_choice DETERMINISM[] = {{"strict", false}, {"relaxed", true}, {NULL, 0}};
static const struct config_choice DIALECTS[] = {
    {"systemone", CONFIG_DIALECT_SYSTEMONE}, {"openai", CONFIG_DIALECT_OPENAI}, {NULL, 0}};

/* The settings' defaults are plan_default_settings()'s, stored before these. */
static const struct config_field MODEL_FIELDS[] = {
    {"path", CONFIG_CUSTOM(k_m_path)},
    {"aliases", CONFIG_LIST(struct config_model, aliases, n_aliases)},
    {"ctx", CONFIG_UINT(struct config_model, settings.ctx, 1, UINT32_MAX)},
    {"ngl", CONFIG_CUSTOM(k_m_ngl)},
    {"parallel", CONFIG_UINT(struct config_model, settings.parallel, 1, UINT32_MAX)},
    {"cache_type_k", CONFIG_CACHE_TYPE(struct config_model, settings.type_k)},
    {"cache_type_v", CONFIG_CACHE_TYPE(struct config_model, settings.type_v)},
    {"flash_attn", CONFIG_BOOL(struct config_model, settings.flash_attn)},
    {"batch", CONFIG_UINT(struct config_model, settings.batch, 1, UINT32_MAX)},
    {"ubatch", CONFIG_UINT(struct config_model, settings.ubatch, 1, UINT32_MAX)},
    {"keep_alive", CONFIG_DURATION(struct config_model, keep_alive_ms), .forever = true,
     .def = "5m"},
    {"pin", CONFIG_BOOL(struct config_model, pin)},
    {"priority", CONFIG_INT(struct config_model, priority, -1000, 1000)},
    {"load_timeout", CONFIG_DURATION(struct config_model, load_timeout_ms), .def = "2m"},
    {"extra_args", CONFIG_CUSTOM(k_m_extra)},
    {"device", CONFIG_CUSTOM(k_m_device)},
    {"threads", CONFIG_UINT(struct config_model, settings.threads, 1, UINT32_MAX)},
    {"upstream", CONFIG_CUSTOM(k_u_urls), .via = upstream_of},
    {"determinism", CONFIG_ENUM(struct config_model, relaxed, DETERMINISM), .cap = 16,
     .def = "strict"},
    {"dialect", CONFIG_ENUM(struct config_upstream, dialect, DIALECTS), .via = upstream_of},
    {"api_key_env", CONFIG_CUSTOM(k_u_api_key_env), .via = upstream_of},
    {"timeout", CONFIG_DURATION(struct config_upstream, timeout_ms), .via = upstream_of},
    {"health", CONFIG_CUSTOM(k_u_health), .via = upstream_of},
    {"cache", CONFIG_BOOL(struct config_model, cache), .def = "true"},
    {0}};

/* Keys that configure a local engine, refused beside upstream:. */
static const char *const LOCAL_ONLY_KEYS[] = {
    "ctx", "ngl", "parallel", "cache_type_k", "cache_type_v", "flash_attn", "batch", "ubatch",
    "keep_alive", "pin", "priority", "load_timeout", "extra_args", "device", "threads",
    "determinism", "cache", NULL};
static const char *const REMOTE_ONLY_KEYS[] = {"dialect", "api_key_env", "timeout", "health",
                                               NULL};

/* A model has exactly one of path and upstream, and only the keys of its kind. */
static bool check_model_kind(struct config_walk *w, struct fy_node *k, struct fy_node *mv,
                             const char *sub, const struct config_model *m) {
    char at[300];
    bool remote = !m->path;
    if (!m->path && !m->upstream) {
        snprintf(at, sizeof at, "%s.path", sub);
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, at,
                                "is required (or upstream: for a remote model)");
    }
    if (m->path && m->upstream && m->upstream->n_urls) {
        snprintf(at, sizeof at, "%s.upstream", sub);
        return config_walk_fail(w, TANDEM_ERR_FORMAT,
                                fy_node_mapping_lookup_by_string(mv, "upstream", -1), at,
                                "a model has either path (local) or upstream (remote), not both");
    }
    if (remote && !m->upstream->n_urls) {
        snprintf(at, sizeof at, "%s.upstream", sub);
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, at,
                                "is required (a model without path is remote)");
    }
    for (const char *const *key = remote ? LOCAL_ONLY_KEYS : REMOTE_ONLY_KEYS; *key; key++) {
        struct fy_node *n = fy_node_mapping_lookup_by_string(mv, *key, -1);
        if (!n)
            continue;
        snprintf(at, sizeof at, "%s.%s", sub, *key);
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, at,
                                remote
                                    ? "configures a local engine; a remote model (upstream:) takes "
                                      "only aliases, dialect, api_key_env, timeout and health"
                                    : "is for a remote model (upstream:), not a local one (path:)");
    }
    return true;
}

/* strict (the default) runs one slot: more would answer the same request
 * with other bytes under concurrent load. relaxed runs CONFIG_RELAXED_SLOTS
 * unless parallel says otherwise. */
static bool check_determinism(struct config_walk *w, struct fy_node *mv, const char *sub,
                              struct config_model *m) {
    struct fy_node *n = fy_node_mapping_lookup_by_string(mv, "parallel", -1);
    if (m->relaxed && !n)
        m->settings.parallel = CONFIG_RELAXED_SLOTS;
    if (m->relaxed || m->settings.parallel == 1)
        return true;
    char at[300];
    snprintf(at, sizeof at, "%s.parallel", sub);
    return config_walk_fail(w, TANDEM_ERR_FORMAT, n, at,
                            "%u slots need determinism: relaxed (with more than one slot, the same "
                            "request gets other bytes under concurrent load; docs/serve.md, "
                            "Determinism)",
                            m->settings.parallel);
}

/* One entry of models: (ctx is the config). */
static bool model_entry(struct config_walk *w, struct fy_node *k, struct fy_node *mv,
                        const char *name, const char *sub, void *ctx) {
    struct config *c = ctx;
    struct config_model *m = &c->models[c->n_models++];
    m->settings = plan_default_settings();
    m->gpu = PLACE_ANY_GPU;
    m->line = (uint32_t)config_walk_line(k);
    if (!config_walk_defaults(w, MODEL_FIELDS, m))
        return false;
    if (!(m->name = mem_strdup(name)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
    if (!mv || !config_walk_section(w, mv, sub, MODEL_FIELDS, m))
        return mv ? false : config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
    if (!check_model_kind(w, k, mv, sub, m) || !check_determinism(w, mv, sub, m))
        return false;
    if (m->device == PLACE_WANT_CPU && m->settings.ngl != PLAN_NGL_AUTO) {
        char at[300];
        snprintf(at, sizeof at, "%s.device", sub);
        return config_walk_fail(w, TANDEM_ERR_FORMAT,
                                fy_node_mapping_lookup_by_string(mv, "device", -1), at,
                                "cpu contradicts ngl: %d (ngl counts layers on a GPU); drop one "
                                "of the two",
                                m->settings.ngl);
    }
    return true;
}

static bool k_models(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!(c->models = config_walk_map_new(w, v, p, "model", sizeof *c->models)))
        return false;
    return config_walk_map_each(w, v, p, 128, 256, model_entry, c);
}

/* --- browsers (docs/serve.md, "Hosts and origins") and mcp (docs/mcp.md) ------------- */

static void lowercase(char *s) {
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

/* A Host name as allowed_hosts takes it: a DNS name (letters, digits, '-', '.',
 * '_'), an IPv4 address or a bracketed IPv6 one, with no scheme, port or path. */
static bool host_name_ok(const char *h) {
    size_t n = strlen(h);
    if (h[0] == '[')
        return n > 2 && h[n - 1] == ']' && strspn(h + 1, "0123456789abcdefABCDEF:.") == n - 2;
    return n && n <= 253 && h[0] != '.' && h[0] != '-' &&
           strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") == n;
}

static bool k_allowed_hosts(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!config_walk_list(w, v, p, &c->allowed_hosts, &c->n_allowed_hosts))
        return false;
    void *it = NULL;
    struct fy_node *item;
    for (size_t i = 0; (item = fy_node_sequence_iterate(v, &it)); i++) {
        char *h = c->allowed_hosts[i];
        char sub[300];
        snprintf(sub, sizeof sub, "%s[%zu]", p, i);
        if (strcmp(h, "*") && !host_name_ok(h))
            return config_walk_fail(w, TANDEM_ERR_FORMAT, item, sub,
                                    "\"%s\": expected a host name without scheme, port or "
                                    "path (\"tandem.example\", \"10.0.0.5\", \"[fd00::1]\"), "
                                    "or \"*\" for any",
                                    h);
        lowercase(h); /* DNS names are case-insensitive */
    }
    return true;
}

/* Reads the list of origins at v and appends it to the config's allowed_origins. */
static bool k_allowed_origins(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    char **list = NULL;
    size_t n = 0;
    if (!config_walk_list(w, v, p, &list, &n) || !check_urls(w, v, p, list, true)) {
        config_walk_list_free(list, n);
        return false;
    }
    char **all = mem_realloc(c->allowed_origins, (c->n_allowed_origins + n + 1) * sizeof *all);
    if (!all) {
        config_walk_list_free(list, n);
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        lowercase(list[i]); /* scheme and host are case-insensitive */
        all[c->n_allowed_origins++] = list[i];
    }
    all[c->n_allowed_origins] = NULL;
    c->allowed_origins = all;
    mem_free(list);
    return true;
}

static bool k_mcp_origins(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    char line[MSG];
    snprintf(line, sizeof line, "%s:%d: %s: deprecated: use the top-level allowed_origins, "
             "which every route checks (these origins are added to it)", w->file,
             config_walk_line(v), p);
    char *copy = mem_strdup(line);
    char **more = copy ? mem_realloc(c->warnings, (c->n_warnings + 1) * sizeof *more) : NULL;
    if (!more) {
        mem_free(copy);
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    }
    c->warnings = more;
    c->warnings[c->n_warnings++] = copy;
    return k_allowed_origins(w, v, p, c);
}

static const struct config_field MCP[] = {
    {"http", CONFIG_BOOL(struct config, mcp_http)},
    {"allowed_origins", CONFIG_CUSTOM(k_mcp_origins)},
    {0}};

/* --- pipelines (docs/pipelines.md): stages, questions, the verdict rule --------------- */

#define PIPE(t) ((struct config_pipeline *)(t))
#define STAGE(t) ((struct config_stage *)(t))

/* One entry of a choice or noul question's criteria: its key and its text. */
static bool criterion_entry(struct config_walk *w, struct fy_node *k, struct fy_node *v,
                            const char *key, const char *sub, void *ctx) {
    struct config_question *q = ctx;
    for (size_t i = 0; i < q->n_criteria; i++)
        if (!strcmp(q->keys[i], key))
            return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "duplicate key");
    if (q->type == S1Q_TYPE_NOUL && strcmp(key, "true") && strcmp(key, "false"))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub,
                                "noul criteria take only true and false");
    if (!(q->keys[q->n_criteria] = mem_strdup(key)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
    if (!v || !config_walk_text(w, v, sub, &q->criteria[q->n_criteria++]))
        return v ? false : config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
    return true;
}

/* The keys of mapping n as strings and their values as texts. */
static bool text_map(struct config_walk *w, struct fy_node *n, const char *path,
                     struct config_question *q) {
    int count = fy_node_mapping_item_count(n);
    q->keys = mem_calloc((size_t)count + 1, sizeof *q->keys);
    q->criteria = mem_calloc((size_t)count + 1, sizeof *q->criteria);
    if (!q->keys || !q->criteria)
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    return config_walk_map_each(w, n, path, 256, 1024, criterion_entry, q);
}

static bool text_list(struct config_walk *w, struct fy_node *n, const char *path,
                      struct config_question *q) {
    int count = fy_node_sequence_item_count(n);
    if (count < 2 || count > 10)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected 2 to 10 levels, got %d",
                                count);
    if (!(q->criteria = mem_calloc((size_t)count, sizeof *q->criteria)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        char sub[640];
        snprintf(sub, sizeof sub, "%s[%zu]", path, q->n_criteria);
        if (!config_walk_text(w, item, sub, &q->criteria[q->n_criteria++]))
            return false;
    }
    return true;
}

/* A question's walk state: criteria are read once the type is known. */
struct qwalk {
    struct config_question *q;
    struct fy_node *criteria;
    char criteria_path[512];
    bool have_type;
};
#define QW(t) ((struct qwalk *)(t))

static void *question_of(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    (void)w, (void)v, (void)p;
    return QW(t)->q;
}

static const struct config_choice QUESTION_TYPES[] = {
    {"choice", S1Q_TYPE_CHOICE}, {"score", S1Q_TYPE_SCORE}, {"noul", S1Q_TYPE_NOUL}, {NULL, 0}};
/* type is read by hand (k_q_type), which notes that it was given. */
static const struct config_field QUESTION_TYPE[] = {
    {"type", CONFIG_ENUM(struct config_question, type, QUESTION_TYPES), .cap = 16,
     .via = question_of},
    {0}};

static bool k_q_type(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    if (!config_walk_apply(w, v, p, &QUESTION_TYPE[0], t))
        return false;
    QW(t)->have_type = true;
    return true;
}

static bool k_q_criteria(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    (void)w;
    QW(t)->criteria = v;
    snprintf(QW(t)->criteria_path, sizeof QW(t)->criteria_path, "%s", p);
    return true;
}

static bool question_criteria(struct config_walk *w, struct qwalk *qw) {
    struct config_question *q = qw->q;
    struct fy_node *c = qw->criteria;
    const char *p = qw->criteria_path;
    if (!c) {
        if (q->type == S1Q_TYPE_NOUL)
            return true;
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p, "is required for a %s question",
                                q->type == S1Q_TYPE_CHOICE ? "choice" : "score");
    }
    if (q->type == S1Q_TYPE_SCORE)
        return fy_node_is_sequence(c)
                   ? text_list(w, c, p, q)
                   : config_walk_fail(w, TANDEM_ERR_FORMAT, c, p, "expected a list of levels");
    if (!fy_node_is_mapping(c))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, c, p, "expected a mapping of %s",
                                q->type == S1Q_TYPE_CHOICE ? "option -> description"
                                                           : "true/false -> description");
    if (!text_map(w, c, p, q))
        return false;
    if (q->type == S1Q_TYPE_CHOICE && q->n_criteria < 2)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, c, p, "expected at least 2 options");
    return true;
}

static const struct config_field QUESTION_FIELDS[] = {
    {"type", CONFIG_CUSTOM(k_q_type)},
    {"instructions", CONFIG_TEXT(struct config_question, instructions), .via = question_of},
    {"criteria", CONFIG_CUSTOM(k_q_criteria)},
    {0}};

/* One entry of a stage's questions: (ctx is the stage). */
static bool question_entry(struct config_walk *w, struct fy_node *k, struct fy_node *qv,
                           const char *id, const char *sub, void *ctx) {
    struct config_stage *st = ctx;
    struct config_question *q = &st->questions[st->n_questions++];
    q->line = (uint32_t)config_walk_line(k);
    if (!(q->id = mem_strdup(id)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
    struct qwalk qw = {.q = q};
    snprintf(qw.criteria_path, sizeof qw.criteria_path, "%s.criteria", sub);
    if (!qv)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
    if (!config_walk_section(w, qv, sub, QUESTION_FIELDS, &qw))
        return false;
    w->line = (int)q->line;
    if (!qw.have_type)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, sub,
                                "type is required (choice, score or noul)");
    if (!q->instructions.text)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, sub, "instructions is required");
    w->line = 0;
    return question_criteria(w, &qw);
}

static bool k_questions(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_stage *st = STAGE(t);
    if (!(st->questions = config_walk_map_new(w, v, p, "question", sizeof *st->questions)))
        return false;
    return config_walk_map_each(w, v, p, 128, 384, question_entry, st);
}

static bool k_s_model(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    STAGE(t)->model_line = (uint32_t)config_walk_line(v);
    return config_walk_string(w, v, p, &STAGE(t)->model);
}

static const struct config_field DECIDE_FIELDS[] = {
    {"model", CONFIG_CUSTOM(k_s_model)},
    {"instructions", CONFIG_TEXT(struct config_stage, instructions)},
    {"questions", CONFIG_CUSTOM(k_questions)},
    {0}};
static const struct config_field VERIFY_FIELDS[] = {
    {"model", CONFIG_CUSTOM(k_s_model)}, {"questions", CONFIG_CUSTOM(k_questions)}, {0}};

/* A stage mapping; the model is required. */
static bool stage(struct config_walk *w, struct fy_node *v, const char *p,
                  const struct config_field *fields, struct config_stage *st) {
    st->line = (uint32_t)config_walk_line(v);
    if (!config_walk_section(w, v, p, fields, st))
        return false;
    if (!st->model) {
        char at[512];
        snprintf(at, sizeof at, "%s.model", p);
        w->line = (int)st->line;
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, at, "is required");
    }
    return true;
}

static bool k_p_decide(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    return stage(w, v, p, DECIDE_FIELDS, &PIPE(t)->decide);
}

static bool k_p_verify(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_pipeline *pl = PIPE(t);
    if (!fy_node_is_sequence(v) || fy_node_sequence_item_count(v) < 1)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected a list of at least one stage");
    pl->verify = mem_calloc((size_t)fy_node_sequence_item_count(v), sizeof *pl->verify);
    if (!pl->verify)
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(v, &it))) {
        char sub[384];
        snprintf(sub, sizeof sub, "%s[%zu]", p, pl->n_verify);
        struct config_stage *st = &pl->verify[pl->n_verify++];
        if (!stage(w, item, sub, VERIFY_FIELDS, st))
            return false;
        if (!st->n_questions) {
            w->line = (int)st->line;
            return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, sub, "questions is required");
        }
    }
    return true;
}

/* "OP VALUE": ">= 0.7", "< 2", "== yes". */
static bool parse_threshold(struct config_walk *w, struct fy_node *v, const char *p,
                            struct config_threshold *th) {
    char s[300], *end;
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    const char *ops[] = {">=", "<=", "==", ">", "<"};
    const char *rest = NULL;
    for (size_t i = 0; i < 5 && !rest; i++)
        if (!strncmp(s, ops[i], strlen(ops[i]))) {
            snprintf(th->op, sizeof th->op, "%s", ops[i]);
            rest = s + strlen(ops[i]);
        }
    while (rest && *rest == ' ')
        rest++;
    if (!rest || !*rest)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected \"OP VALUE\" with OP one of >=, >, <=, <, ==, "
                                "got \"%s\"",
                                s);
    th->line = (uint32_t)config_walk_line(v);
    if (!strcmp(th->op, "==")) {
        if (!(th->option = mem_strdup(rest)))
            return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
        return true;
    }
    errno = 0;
    th->value = strtod(rest, &end);
    if (end == rest || *end || errno)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected a number after %s, got \"%s\"", th->op, rest);
    return true;
}

/* One entry of verdict.thresholds: (ctx is the pipeline). */
static bool threshold_entry(struct config_walk *w, struct fy_node *k, struct fy_node *tv,
                            const char *id, const char *sub, void *ctx) {
    struct config_pipeline *pl = ctx;
    struct config_threshold *th = &pl->thresholds[pl->n_thresholds++];
    if (!(th->question = mem_strdup(id)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
    if (!tv || !parse_threshold(w, tv, sub, th))
        return tv ? false : config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
    return true;
}

static bool k_v_thresholds(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_pipeline *pl = PIPE(t);
    if (!fy_node_is_mapping(v))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected a mapping question -> \"OP VALUE\"");
    pl->thresholds = mem_calloc((size_t)fy_node_mapping_item_count(v) + 1, sizeof *pl->thresholds);
    if (!pl->thresholds)
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return config_walk_map_each(w, v, p, 128, 384, threshold_entry, pl);
}

static const struct config_field ESCALATE_FIELDS[] = {
    {"pipeline", CONFIG_STRING(struct config_pipeline, escalate_pipeline)},
    {"model", CONFIG_STRING(struct config_pipeline, escalate_model)},
    {0}};

static bool k_v_escalate(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    if (!config_walk_section(w, v, p, ESCALATE_FIELDS, t))
        return false;
    if (!PIPE(t)->escalate_pipeline == !PIPE(t)->escalate_model)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected exactly one of pipeline or model");
    return true;
}

static const struct config_choice ON_REJECT[] = {{"next_best", CONFIG_ON_REJECT_NEXT_BEST},
                                                 {"reject", CONFIG_ON_REJECT_REJECT},
                                                 {"escalate", CONFIG_ON_REJECT_ESCALATE},
                                                 {NULL, 0}};

static const struct config_field VERDICT_FIELDS[] = {
    {"thresholds", CONFIG_CUSTOM(k_v_thresholds)},
    {"min_confidence", CONFIG_DOUBLE(struct config_pipeline, min_confidence, 0, 1)},
    {"on_reject", CONFIG_ENUM(struct config_pipeline, on_reject, ON_REJECT), .def = "next_best"},
    {"max_attempts", CONFIG_UINT(struct config_pipeline, max_attempts, 1, 64), .def = "3"},
    {"escalate", CONFIG_CUSTOM(k_v_escalate)},
    {0}};

static bool k_p_verdict(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    PIPE(t)->verdict_line = (uint32_t)config_walk_line(v);
    return config_walk_section(w, v, p, VERDICT_FIELDS, t);
}

/* Read by agents as the MCP tool's description: text, not markup, and short. */
static bool k_p_description(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char d[CONFIG_DESCRIPTION_MAX + 1];
    size_t len = 0;
    const char *s = fy_node_is_scalar(v) ? fy_node_get_scalar(v, &len) : NULL;
    if (s && len > CONFIG_DESCRIPTION_MAX)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "at most %d bytes, got %zu",
                                CONFIG_DESCRIPTION_MAX, len);
    if (!config_walk_scalar(w, v, p, d, sizeof d))
        return false;
    if (utf8_bad_line((const unsigned char *)s, len)) /* a "\0" or "\ud800" escape */
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p,
                                "expected UTF-8 text without NUL bytes");
    if (strspn(d, " \t\r\n") == len)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, v, p, "must not be empty");
    mem_free(PIPE(t)->description);
    if (!(PIPE(t)->description = mem_strdup(d)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}

static const struct config_field PIPELINE_FIELDS[] = {
    {"description", CONFIG_CUSTOM(k_p_description)},
    {"decide", CONFIG_CUSTOM(k_p_decide)},
    {"verify", CONFIG_CUSTOM(k_p_verify)},
    {"verdict", CONFIG_CUSTOM(k_p_verdict)},
    {0}};

/* One entry of pipelines: (ctx is the config). */
static bool pipeline_entry(struct config_walk *w, struct fy_node *k, struct fy_node *pv,
                           const char *name, const char *sub, void *ctx) {
    struct config *c = ctx;
    struct config_pipeline *pl = &c->pipelines[c->n_pipelines++];
    pl->line = (uint32_t)config_walk_line(k);
    if (!config_walk_defaults(w, VERDICT_FIELDS, pl))
        return false;
    if (!(pl->name = mem_strdup(name)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
    if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
        strlen(name))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub,
                                "a pipeline name is letters, digits, '_', '.' and '-' "
                                "(it is a URL path)");
    if (!pv || !config_walk_section(w, pv, sub, PIPELINE_FIELDS, pl))
        return pv ? false : config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
    w->line = (int)pl->line;
    if (!pl->decide.model)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, sub, "decide is required");
    if (!pl->n_verify)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, sub, "verify is required");
    w->line = 0;
    return true;
}

static bool k_pipelines(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!(c->pipelines = config_walk_map_new(w, v, p, "pipeline", sizeof *c->pipelines)))
        return false;
    return config_walk_map_each(w, v, p, 128, 256, pipeline_entry, c);
}

/* --- the root ------------------------------------------------------------ */

static const struct config_field ROOT[] = {
    {"listen", CONFIG_CUSTOM(k_listen)},
    {"api_keys", CONFIG_LIST(struct config, api_keys, n_api_keys)},
    {"budget", CONFIG_SECTION(BUDGET)},
    {"engine", CONFIG_SECTION(ENGINE)},
    {"defaults", CONFIG_SECTION(DEFAULTS)},
    {"limits", CONFIG_SECTION(LIMITS)},
    {"scheduling", CONFIG_SECTION(SCHEDULING)},
    {"shutdown", CONFIG_SECTION(SHUTDOWN)},
    {"logs", CONFIG_SECTION(LOGS)},
    {"models", CONFIG_CUSTOM(k_models)},
    {"pipelines", CONFIG_CUSTOM(k_pipelines)},
    {"node", CONFIG_SECTION(NODE)},
    {"metrics", CONFIG_SECTION(METRICS)},
    {"mcp", CONFIG_SECTION(MCP)},
    {"allowed_hosts", CONFIG_CUSTOM(k_allowed_hosts)},
    {"allowed_origins", CONFIG_CUSTOM(k_allowed_origins)},
    {"cache", CONFIG_SECTION(CACHE)},
    {"store", CONFIG_SECTION(STORE)},
    {0}};

bool config_schema_defaults(struct config_walk *w, struct config *c) {
    return config_walk_defaults(w, ROOT, c);
}

bool config_schema_walk(struct config_walk *w, struct fy_node *root, struct config *c) {
    return config_walk_section(w, root, "", ROOT, c);
}

const struct config_field *const *config_schema_tables(void) {
    static const struct config_field *const tables[] = {
        ROOT, BUDGET, ENGINE, DEFAULTS, LIMITS, SCHEDULING, SHUTDOWN, NODE, METRICS, LOGS, MCP, CACHE, STORE,
        MODEL_FIELDS, QUESTION_FIELDS, QUESTION_TYPE, DECIDE_FIELDS, VERIFY_FIELDS,
        VERDICT_FIELDS, ESCALATE_FIELDS, PIPELINE_FIELDS, NULL};
    return tables;
}
