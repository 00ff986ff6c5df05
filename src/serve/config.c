/* config.c: tandem.yaml into struct config, validated in full.
 *
 * libfyaml builds the document (its diagnostics are collected, not printed,
 * and become "<file>:<line>: <message>"). The tree is then walked once: each
 * section is a table of known keys with a parser per value, so an unknown key
 * is always an error (with the closest known key as a suggestion) and every
 * error names the key path and the line of the offending node. Nothing is
 * applied piecemeal: on any error the partial config is freed. */
#include "serve/config.h"

#include <ctype.h>
#include <errno.h>
#include <libfyaml.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cache.h"
#include "gguf/ggml_types.h"
#include "base/mem.h"
#include "base/units.h"
#include "base/utf8.h"
#include "serve/remote.h"

#define MSG 512

struct walk {
    const char *file;
    char dir[PATH_MAX];
    char *err;
    size_t errlen;
    tandem_err e;
    int line; /* when set, the line errors report (for checks after the walk) */
};

/* 1-based line of a node: a scalar's own token; a collection's first entry. */
static int line_of(struct fy_node *n) {
    void *it = NULL;
    if (n && fy_node_is_mapping(n)) {
        struct fy_node_pair *p = fy_node_mapping_iterate(n, &it);
        return p ? line_of(fy_node_pair_key(p)) : 0;
    }
    if (n && fy_node_is_sequence(n))
        return line_of(fy_node_sequence_iterate(n, &it));
    struct fy_token *t = n ? fy_node_get_scalar_token(n) : NULL;
    const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
    return m ? m->line + 1 : 0;
}

/* Records the first error: "<file>:<line>: <path>: <what>". */
__attribute__((format(printf, 5, 6))) static bool fail(struct walk *w, tandem_err e,
                                                       struct fy_node *at, const char *path,
                                                       const char *fmt, ...) {
    if (w->e != TANDEM_OK)
        return false;
    char what[MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line = w->line ? w->line : line_of(at);
    tandem_errmsg(w->err, w->errlen, "%s:%d: %s: %s", w->file, line, path, what);
    w->e = e;
    return false;
}

/* The scalar text of n as a NUL-terminated copy in buf, or false. */
static bool scalar(struct walk *w, struct fy_node *n, const char *path, char *buf, size_t cap) {
    size_t len;
    const char *s = n && fy_node_is_scalar(n) ? fy_node_get_scalar(n, &len) : NULL;
    if (!s)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected a value, got a %s",
                    n && fy_node_is_mapping(n) ? "mapping" : n ? "list" : "nothing");
    if (len >= cap)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "value too long (%zu bytes)", len);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return true;
}

static bool get_u64(struct walk *w, struct fy_node *n, const char *path, uint64_t max,
                    uint64_t min, uint64_t *out) {
    char v[64], *end;
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!v[0] || *end || v[0] == '-' || errno)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected an integer, got \"%s\"", v);
    if (x < min || x > max)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "%llu is out of range (%llu to %llu)", x,
                    (unsigned long long)min, (unsigned long long)max);
    *out = x;
    return true;
}

static bool get_u32(struct walk *w, struct fy_node *n, const char *path, uint32_t min,
                    uint32_t *out) {
    uint64_t v;
    if (!get_u64(w, n, path, UINT32_MAX, min, &v))
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool get_bool(struct walk *w, struct fy_node *n, const char *path, bool *out) {
    char v[16];
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        return *out = true, true;
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        return *out = false, true;
    return fail(w, TANDEM_ERR_FORMAT, n, path, "expected true or false, got \"%s\"", v);
}

/* One of two words: *out is whether it is yes (the other is no). */
static bool get_either(struct walk *w, struct fy_node *n, const char *path, const char *yes,
                       const char *no, bool *out) {
    char v[32];
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    if (strcmp(v, yes) && strcmp(v, no))
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected %s or %s, got \"%s\"", yes, no, v);
    *out = !strcmp(v, yes);
    return true;
}

static bool get_size(struct walk *w, struct fy_node *n, const char *path, uint64_t *out) {
    char v[64];
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    if (units_parse_bytes(v, out) != TANDEM_OK)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected a size like 6GiB, got \"%s\"", v);
    return true;
}

/* "250ms", "30s", "5m", "1h" or an integer (ms); "forever" when allowed. */
static bool get_duration(struct walk *w, struct fy_node *n, const char *path, bool forever,
                         int64_t *out) {
    char v[64], *end;
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    if (forever && !strcmp(v, "forever"))
        return *out = CONFIG_KEEP_ALIVE_FOREVER, true;
    errno = 0;
    double x = strtod(v, &end);
    double scale = !*end ? 1 : !strcmp(end, "ms") ? 1 : !strcmp(end, "s") ? 1e3
                 : !strcmp(end, "m") ? 6e4 : !strcmp(end, "h") ? 3.6e6 : -1;
    if (end == v || errno || scale < 0 || x < 0 || x * scale > 1e12)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected a duration like 30s, 5m%s, got \"%s\"",
                    forever ? " or forever" : "", v);
    *out = (int64_t)(x * scale + 0.5);
    return true;
}

/* --- strings and paths ------------------------------------------------------------ */

static bool get_string(struct walk *w, struct fy_node *n, const char *path, char **out) {
    char v[PATH_MAX];
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    mem_free(*out);
    if (!(*out = mem_strdup(v)))
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    return true;
}

/* Expands a leading ~ and $VAR / ${VAR}; XDG_CACHE_HOME defaults to ~/.cache. */
static bool expand(struct walk *w, struct fy_node *n, const char *path, const char *in,
                   char *out, size_t cap) {
    size_t o = 0;
    const char *home = getenv("HOME");
    if (in[0] == '~' && (in[1] == '/' || !in[1])) {
        if (!home)
            return fail(w, TANDEM_ERR_FORMAT, n, path, "~ used but HOME is not set");
        o = (size_t)snprintf(out, cap, "%s", home);
        in++;
    }
    while (*in && o < cap) {
        if (*in != '$') {
            out[o++] = *in++;
            continue;
        }
        bool brace = in[1] == '{';
        const char *s = in + 1 + brace;
        size_t len = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
        if (!len || (brace && s[len] != '}'))
            return fail(w, TANDEM_ERR_FORMAT, n, path, "bad variable reference in \"%s\"", in);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)len, s);
        const char *val = getenv(name);
        char xdg[PATH_MAX];
        if (!val && !strcmp(name, "XDG_CACHE_HOME") && home) {
            snprintf(xdg, sizeof xdg, "%s/.cache", home);
            val = xdg;
        }
        if (!val)
            return fail(w, TANDEM_ERR_FORMAT, n, path, "environment variable %s is not set", name);
        o += (size_t)snprintf(out + o, cap - o, "%s", val);
        in = s + len + brace;
    }
    if (o >= cap)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "path too long");
    out[o] = '\0';
    return true;
}

static bool get_path(struct walk *w, struct fy_node *n, const char *path, char **out) {
    char raw[PATH_MAX], exp[PATH_MAX], full[2 * PATH_MAX + 2];
    if (!scalar(w, n, path, raw, sizeof raw) || !expand(w, n, path, raw, exp, sizeof exp))
        return false;
    if (exp[0] != '/')
        snprintf(full, sizeof full, "%s/%s", w->dir, exp);
    else
        snprintf(full, sizeof full, "%s", exp);
    if (strlen(full) >= PATH_MAX)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "path too long");
    mem_free(*out);
    if (!(*out = mem_strdup(full)))
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    return true;
}

static bool get_list(struct walk *w, struct fy_node *n, const char *path, char ***out,
                     size_t *count) {
    if (!fy_node_is_sequence(n))
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected a list");
    int len = fy_node_sequence_item_count(n);
    char **v = mem_calloc((size_t)len + 1, sizeof *v);
    if (!v)
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    *out = v;
    *count = 0;
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        char p[256];
        snprintf(p, sizeof p, "%s[%zu]", path, *count);
        if (!get_string(w, item, p, &v[*count]))
            return false;
        ++*count;
    }
    return true;
}

/* --- sections ------------------------------------------------------------------ */

typedef bool (*key_fn)(struct walk *w, struct fy_node *v, const char *path, void *target);

struct key {
    const char *name;
    key_fn fn;
};

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), d[64];
    if (la > 62 || lb > 62)
        return 99;
    for (size_t j = 0; j <= lb; j++)
        d[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = d[0];
        d[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = d[j];
            size_t best = prev + (a[i - 1] != b[j - 1]);
            if (d[j] + 1 < best)
                best = d[j] + 1;
            if (d[j - 1] + 1 < best)
                best = d[j - 1] + 1;
            d[j] = best;
            prev = cur;
        }
    }
    return d[lb];
}

/* Walks mapping m under path, calling each known key's parser with target. */
static bool walk_section(struct walk *w, struct fy_node *m, const char *path,
                         const struct key *keys, void *target) {
    if (!fy_node_is_mapping(m))
        return fail(w, TANDEM_ERR_FORMAT, m, path[0] ? path : "(root)", "expected a mapping of keys");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(m, &it))) {
        struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
        char name[128], sub[384];
        if (!scalar(w, k, path, name, sizeof name))
            return false;
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", name);
        const struct key *hit = NULL, *near = NULL;
        for (const struct key *kk = keys; kk->name; kk++) {
            if (!strcmp(kk->name, name))
                hit = kk;
            else if (edit_distance(kk->name, name) <= 2)
                near = kk;
        }
        if (!hit) {
            if (near)
                return fail(w, TANDEM_ERR_FORMAT, k, sub, "unknown key (did you mean %s?)",
                            near->name);
            return fail(w, TANDEM_ERR_FORMAT, k, sub, "unknown key");
        }
        if (!v)
            return fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
        if (!hit->fn(w, v, sub, target))
            return false;
    }
    return true;
}

#define CFG(t) ((struct config *)(t))
#define MODEL(t) ((struct config_model *)(t))

static bool k_listen(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[250];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    tandem_err e = units_parse_listen(s, CFG(t)->listen_host, sizeof CFG(t)->listen_host,
                                      &CFG(t)->listen_port);
    if (e == TANDEM_ERR_RANGE)
        return fail(w, e, v, p, "port must be 0 (any free port) to 65535, got \"%s\"",
                    strrchr(s, ':') + 1);
    if (e != TANDEM_OK)
        return fail(w, e, v, p, "expected host:port, got \"%s\"", s);
    return true;
}

static bool k_api_keys(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_list(w, v, p, &CFG(t)->api_keys, &CFG(t)->n_api_keys);
}
static bool k_vram(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_size(w, v, p, &CFG(t)->vram);
}
static bool k_reserve(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_size(w, v, p, &CFG(t)->reserve);
}
static bool k_ram(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_size(w, v, p, &CFG(t)->ram);
}
static bool k_engine_path(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_path(w, v, p, &CFG(t)->llama_server);
}
static bool k_default_model(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_string(w, v, p, &CFG(t)->default_model);
}
static bool k_max_body(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_size(w, v, p, &CFG(t)->max_body_bytes);
}
static bool k_queue_depth(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &CFG(t)->queue_depth);
}
static bool k_request_timeout(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->request_timeout_ms);
}
static bool k_header_timeout(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->header_timeout_ms);
}
static bool k_idle_timeout(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->idle_timeout_ms);
}
static bool k_max_connections(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &CFG(t)->max_connections);
}
static bool k_group_limit(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &CFG(t)->group_limit);
}
static bool k_request_tokens(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &CFG(t)->request_tokens);
}
static bool k_clients(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &CFG(t)->clients);
}
static bool k_max_wait(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->starvation_ms);
}
static bool k_grace(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->drain_grace_ms);
}
static bool k_engine_grace(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->stop_grace_ms);
}
static bool k_log_dir(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_path(w, v, p, &CFG(t)->log_dir);
}
static bool k_audit(struct walk *w, struct fy_node *v, const char *p, void *t) {
    size_t len = 0;
    const char *s = fy_node_is_scalar(v) ? fy_node_get_scalar(v, &len) : NULL;
    if (s && len == 3 && !memcmp(s, "off", 3)) { /* a path may be longer than "off" */
        mem_free(CFG(t)->audit_path);
        CFG(t)->audit_path = mem_strdup("off");
        return CFG(t)->audit_path != NULL;
    }
    return get_path(w, v, p, &CFG(t)->audit_path);
}
static bool k_bodies(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_bool(w, v, p, &CFG(t)->log_bodies);
}
static bool k_audit_max(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_size(w, v, p, &CFG(t)->audit_max_bytes);
}
static bool k_audit_on_error(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_either(w, v, p, "fail", "continue", &CFG(t)->audit_fail);
}
static bool k_audit_keep(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 0, &CFG(t)->audit_keep);
}

static bool k_drain_delay(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &CFG(t)->drain_delay_ms);
}
static bool k_max_restarts(struct walk *w, struct fy_node *v, const char *p, void *t) {
    uint64_t n;
    if (!get_u64(w, v, p, 1000, 1, &n))
        return false;
    CFG(t)->max_restarts = (uint32_t)n;
    return true;
}
static bool k_max_event_clients(struct walk *w, struct fy_node *v, const char *p, void *t) {
    uint64_t n;
    if (!get_u64(w, v, p, 1024, 0, &n))
        return false;
    CFG(t)->max_event_clients = (uint32_t)n;
    return true;
}
static bool k_health_interval(struct walk *w, struct fy_node *v, const char *p, void *t) {
    if (!get_duration(w, v, p, false, &CFG(t)->health_interval_ms))
        return false;
    if (CFG(t)->health_interval_ms < 100)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "must be at least 100ms");
    return true;
}
static bool k_node_id(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[sizeof CFG(t)->node_id];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    for (const char *c = s; *c; c++)
        if (*c <= ' ' || *c == 0x7f || (unsigned char)*c >= 0x80)
            return fail(w, TANDEM_ERR_FORMAT, v, p, "a node id is printable ASCII without spaces "
                        "(it is sent in a header), got \"%s\"", s);
    if (!s[0])
        return fail(w, TANDEM_ERR_FORMAT, v, p, "must not be empty");
    memcpy(CFG(t)->node_id, s, sizeof s);
    return true;
}
static bool k_metrics_compat(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_either(w, v, p, "vllm", "none", &CFG(t)->metrics_vllm);
}
static bool k_metrics_require_key(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_bool(w, v, p, &CFG(t)->metrics_require_key);
}

/* model keys */
static bool k_m_path(struct walk *w, struct fy_node *v, const char *p, void *t) {
    if (!get_path(w, v, p, &MODEL(t)->path))
        return false;
    struct stat st;
    if (stat(MODEL(t)->path, &st) != 0 || !S_ISREG(st.st_mode))
        return fail(w, TANDEM_ERR_NOTFOUND, v, p, "%s: no such file", MODEL(t)->path);
    return true;
}
static bool k_m_aliases(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_list(w, v, p, &MODEL(t)->aliases, &MODEL(t)->n_aliases);
}
static bool k_m_ctx(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &MODEL(t)->settings.ctx);
}
static bool k_m_ngl(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[16];
    if (fy_node_is_scalar(v) && scalar(w, v, p, s, sizeof s) && !strcmp(s, "auto"))
        return MODEL(t)->settings.ngl = PLAN_NGL_AUTO, true;
    uint64_t n;
    if (!get_u64(w, v, p, 100000, 0, &n))
        return false;
    MODEL(t)->settings.ngl = (int32_t)n;
    return true;
}
static bool k_m_device(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[32];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    if (place_want_parse(s, &MODEL(t)->device, &MODEL(t)->gpu) != TANDEM_OK)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected auto, gpu, gpu:N or cpu, got \"%s\"", s);
    MODEL(t)->device_line = (uint32_t)line_of(v);
    return true;
}
static bool k_m_threads(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &MODEL(t)->settings.threads);
}
static bool k_m_parallel(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &MODEL(t)->settings.parallel);
}
static bool k_m_determinism(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[16];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    if (strcmp(s, "strict") && strcmp(s, "relaxed"))
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected strict or relaxed, got \"%s\"", s);
    MODEL(t)->relaxed = !strcmp(s, "relaxed");
    return true;
}
static bool cache_type(struct walk *w, struct fy_node *v, const char *p, uint32_t *out) {
    char s[32];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    if (ggml_type_find(s, out) != TANDEM_OK)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "unknown cache type \"%s\" (e.g. f16, q8_0)", s);
    return true;
}
static bool k_m_ctk(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return cache_type(w, v, p, &MODEL(t)->settings.type_k);
}
static bool k_m_ctv(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return cache_type(w, v, p, &MODEL(t)->settings.type_v);
}
static bool k_m_fa(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_bool(w, v, p, &MODEL(t)->settings.flash_attn);
}
static bool k_m_batch(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &MODEL(t)->settings.batch);
}
static bool k_m_ubatch(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_u32(w, v, p, 1, &MODEL(t)->settings.ubatch);
}
static bool k_m_keep_alive(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, true, &MODEL(t)->keep_alive_ms);
}
static bool k_m_pin(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_bool(w, v, p, &MODEL(t)->pin);
}
static bool k_m_priority(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[32], *end;
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    long n = strtol(s, &end, 10);
    if (!s[0] || *end || n < -1000 || n > 1000)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected an integer from -1000 to 1000, got \"%s\"", s);
    MODEL(t)->priority = (int32_t)n;
    return true;
}
static bool k_m_load_timeout(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_duration(w, v, p, false, &MODEL(t)->load_timeout_ms);
}
/* Checks the URLs get_list read from list v (urls[i] from its item i) with
 * remote_url_check; an origin (allowed_origins) also ends at host[:port]. */
static bool check_urls(struct walk *w, struct fy_node *v, const char *p, char *const *urls,
                       bool origin) {
    size_t i = 0;
    void *it = NULL;
    struct fy_node *item;
    for (; (item = fy_node_sequence_iterate(v, &it)); i++) {
        char why[MSG], sub[300];
        snprintf(sub, sizeof sub, "%s[%zu]", p, i);
        if (remote_url_check(urls[i], why, sizeof why) != TANDEM_OK)
            return fail(w, TANDEM_ERR_FORMAT, item, sub, "\"%s\": %s", urls[i], why);
        const char *auth = strstr(urls[i], "://") + 3;
        if (origin && auth[strcspn(auth, "/")])
            return fail(w, TANDEM_ERR_FORMAT, item, sub, "\"%s\": an origin is "
                        "http(s)://host[:port], with nothing after the host or port", urls[i]);
    }
    return true;
}

/* remote model keys (docs/scale-out.md) */
static struct config_upstream *upstream_of(struct walk *w, struct fy_node *v, const char *p,
                                           struct config_model *m) {
    if (!m->upstream && (m->upstream = mem_calloc(1, sizeof *m->upstream)))
        m->upstream->health = mem_strdup("/health");
    if (!m->upstream || !m->upstream->health) {
        fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
        return NULL;
    }
    return m->upstream;
}
static bool k_m_upstream(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = upstream_of(w, v, p, MODEL(t));
    if (!u || !get_list(w, v, p, &u->urls, &u->n_urls))
        return false;
    if (!u->n_urls || u->n_urls > REMOTE_MAX_URLS)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected 1 to %d base URLs, got %zu",
                    REMOTE_MAX_URLS, u->n_urls);
    return check_urls(w, v, p, u->urls, false);
}
static bool k_m_dialect(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = upstream_of(w, v, p, MODEL(t));
    char s[32];
    if (!u || !scalar(w, v, p, s, sizeof s))
        return false;
    if (!strcmp(s, "systemone") || !strcmp(s, "openai"))
        return u->dialect = s[0] == 's' ? CONFIG_DIALECT_SYSTEMONE : CONFIG_DIALECT_OPENAI, true;
    return fail(w, TANDEM_ERR_FORMAT, v, p, "expected systemone or openai, got \"%s\"", s);
}
static bool k_m_api_key_env(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = upstream_of(w, v, p, MODEL(t));
    if (!u || !get_string(w, v, p, &u->api_key_env))
        return false;
    const char *key = getenv(u->api_key_env);
    if (!key || !*key)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "the environment variable %s is not set",
                    u->api_key_env);
    mem_free(u->api_key);
    if (!(u->api_key = mem_strdup(key)))
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}
static bool k_m_timeout(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = upstream_of(w, v, p, MODEL(t));
    return u && get_duration(w, v, p, false, &u->timeout_ms);
}
static bool k_m_health(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_upstream *u = upstream_of(w, v, p, MODEL(t));
    char s[256];
    if (!u || !scalar(w, v, p, s, sizeof s))
        return false;
    mem_free(u->health);
    u->health = NULL;
    if (!strcmp(s, "none"))
        return true;
    if (s[0] != '/' || strpbrk(s, "?# \t"))
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a path like /health, or none, got \"%s\"",
                    s);
    if (!(u->health = mem_strdup(s)))
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}
/* Keys that configure a local engine, refused beside upstream:. */
static const char *const LOCAL_ONLY_KEYS[] = {
    "ctx", "ngl", "parallel", "cache_type_k", "cache_type_v", "flash_attn", "batch", "ubatch",
    "keep_alive", "pin", "priority", "load_timeout", "extra_args", "device", "threads",
    "determinism", NULL};
static const char *const REMOTE_ONLY_KEYS[] = {"dialect", "api_key_env", "timeout", "health",
                                               NULL};

/* A model has exactly one of path and upstream, and only the keys of its kind. */
static bool check_model_kind(struct walk *w, struct fy_node *k, struct fy_node *mv,
                             const char *sub, const struct config_model *m) {
    char at[300];
    bool remote = !m->path;
    if (!m->path && !m->upstream) {
        snprintf(at, sizeof at, "%s.path", sub);
        return fail(w, TANDEM_ERR_FORMAT, k, at, "is required (or upstream: for a remote model)");
    }
    if (m->path && m->upstream && m->upstream->n_urls) {
        snprintf(at, sizeof at, "%s.upstream", sub);
        return fail(w, TANDEM_ERR_FORMAT, fy_node_mapping_lookup_by_string(mv, "upstream", -1),
                    at, "a model has either path (local) or upstream (remote), not both");
    }
    if (remote && !m->upstream->n_urls) {
        snprintf(at, sizeof at, "%s.upstream", sub);
        return fail(w, TANDEM_ERR_FORMAT, k, at, "is required (a model without path is remote)");
    }
    for (const char *const *key = remote ? LOCAL_ONLY_KEYS : REMOTE_ONLY_KEYS; *key; key++) {
        struct fy_node *n = fy_node_mapping_lookup_by_string(mv, *key, -1);
        if (!n)
            continue;
        snprintf(at, sizeof at, "%s.%s", sub, *key);
        return fail(w, TANDEM_ERR_FORMAT, n, at, remote
                    ? "configures a local engine; a remote model (upstream:) takes only aliases, "
                      "dialect, api_key_env, timeout and health"
                    : "is for a remote model (upstream:), not a local one (path:)");
    }
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
static bool k_m_extra(struct walk *w, struct fy_node *v, const char *p, void *t) {
    if (!get_list(w, v, p, &MODEL(t)->extra_args, &MODEL(t)->n_extra_args))
        return false;
    for (size_t i = 0; i < MODEL(t)->n_extra_args; i++)
        for (const char *const *f = OWNED_FLAGS; *f; f++)
            if (!strcmp(MODEL(t)->extra_args[i], *f))
                return fail(w, TANDEM_ERR_FORMAT, v, p,
                            "%s is set by tandem from the plan; use the model's own key", *f);
    return true;
}

/* strict (the default) runs one slot: more would answer the same request
 * with other bytes under concurrent load. relaxed runs CONFIG_RELAXED_SLOTS
 * unless parallel says otherwise. */
static bool check_determinism(struct walk *w, struct fy_node *mv, const char *sub,
                              struct config_model *m) {
    struct fy_node *n = fy_node_mapping_lookup_by_string(mv, "parallel", -1);
    if (m->relaxed && !n)
        m->settings.parallel = CONFIG_RELAXED_SLOTS;
    if (m->relaxed || m->settings.parallel == 1)
        return true;
    char at[300];
    snprintf(at, sizeof at, "%s.parallel", sub);
    return fail(w, TANDEM_ERR_FORMAT, n, at,
                "%u slots need determinism: relaxed (with more than one slot, the same request "
                "gets other bytes under concurrent load; docs/serve.md, Determinism)",
                m->settings.parallel);
}

static const struct key MODEL_KEYS[] = {
    {"path", k_m_path},           {"aliases", k_m_aliases},
    {"ctx", k_m_ctx},             {"ngl", k_m_ngl},
    {"parallel", k_m_parallel},   {"cache_type_k", k_m_ctk},
    {"cache_type_v", k_m_ctv},    {"flash_attn", k_m_fa},
    {"batch", k_m_batch},         {"ubatch", k_m_ubatch},
    {"keep_alive", k_m_keep_alive}, {"pin", k_m_pin},
    {"priority", k_m_priority},   {"load_timeout", k_m_load_timeout},
    {"extra_args", k_m_extra},    {"device", k_m_device},
    {"threads", k_m_threads},     {"upstream", k_m_upstream},
    {"determinism", k_m_determinism},
    {"dialect", k_m_dialect},     {"api_key_env", k_m_api_key_env},
    {"timeout", k_m_timeout},     {"health", k_m_health},
    {NULL, NULL}};

static bool k_models(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!fy_node_is_mapping(v) || fy_node_mapping_item_count(v) < 1)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a mapping of at least one model");
    c->models = mem_calloc((size_t)fy_node_mapping_item_count(v), sizeof *c->models);
    if (!c->models)
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(v, &it))) {
        struct config_model *m = &c->models[c->n_models++];
        struct fy_node *k = fy_node_pair_key(pair), *mv = fy_node_pair_value(pair);
        char name[128], sub[256];
        if (!scalar(w, k, p, name, sizeof name))
            return false;
        snprintf(sub, sizeof sub, "%s.%s", p, name);
        m->settings = plan_default_settings();
        m->keep_alive_ms = 300000;
        m->gpu = PLACE_ANY_GPU;
        m->load_timeout_ms = 120000;
        m->line = (uint32_t)line_of(k);
        if (!(m->name = mem_strdup(name)))
            return fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
        if (!mv || !walk_section(w, mv, sub, MODEL_KEYS, m))
            return mv ? false : fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
        if (!check_model_kind(w, k, mv, sub, m) || !check_determinism(w, mv, sub, m))
            return false;
        if (m->device == PLACE_WANT_CPU && m->settings.ngl != PLAN_NGL_AUTO) {
            char at[300];
            snprintf(at, sizeof at, "%s.device", sub);
            return fail(w, TANDEM_ERR_FORMAT, fy_node_mapping_lookup_by_string(mv, "device", -1),
                        at, "cpu contradicts ngl: %d (ngl counts layers on a GPU); drop one of the two",
                        m->settings.ngl);
        }
    }
    return true;
}

static bool k_budget(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"vram", k_vram}, {"reserve", k_reserve}, {"ram", k_ram}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_engine(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {{"path", k_engine_path}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_defaults(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {{"model", k_default_model}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_limits(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"max_body", k_max_body},           {"queue_depth", k_queue_depth},
        {"request_timeout", k_request_timeout}, {"header_timeout", k_header_timeout},
        {"idle_timeout", k_idle_timeout},   {"max_connections", k_max_connections},
        {"drain_delay", k_drain_delay},     {"health_interval", k_health_interval},
        {"max_restarts", k_max_restarts},   {"max_event_clients", k_max_event_clients},
        {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_scheduling(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"group_limit", k_group_limit}, {"max_wait", k_max_wait},
        {"request_tokens", k_request_tokens}, {"clients", k_clients}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_shutdown(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"grace", k_grace}, {"engine_grace", k_engine_grace}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_node(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {{"id", k_node_id}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_metrics(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"compat", k_metrics_compat}, {"require_key", k_metrics_require_key}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}
static bool k_logs(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"dir", k_log_dir},           {"audit", k_audit},           {"bodies", k_bodies},
        {"audit_max", k_audit_max},   {"audit_keep", k_audit_keep},
        {"audit_on_error", k_audit_on_error}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}

/* browsers (docs/serve.md, "Hosts and origins") */
static void free_list(char **v, size_t n);

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

static bool k_allowed_hosts(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!get_list(w, v, p, &c->allowed_hosts, &c->n_allowed_hosts))
        return false;
    void *it = NULL;
    struct fy_node *item;
    for (size_t i = 0; (item = fy_node_sequence_iterate(v, &it)); i++) {
        char *h = c->allowed_hosts[i];
        char sub[300];
        snprintf(sub, sizeof sub, "%s[%zu]", p, i);
        if (strcmp(h, "*") && !host_name_ok(h))
            return fail(w, TANDEM_ERR_FORMAT, item, sub, "\"%s\": expected a host name without "
                        "scheme, port or path (\"tandem.example\", \"10.0.0.5\", \"[fd00::1]\"), "
                        "or \"*\" for any", h);
        lowercase(h); /* DNS names are case-insensitive */
    }
    return true;
}

/* Reads the list of origins at v and appends it to c->allowed_origins. */
static bool add_origins(struct walk *w, struct fy_node *v, const char *p, struct config *c) {
    char **list = NULL;
    size_t n = 0;
    if (!get_list(w, v, p, &list, &n) || !check_urls(w, v, p, list, true)) {
        free_list(list, n);
        return false;
    }
    char **all = mem_realloc(c->allowed_origins, (c->n_allowed_origins + n + 1) * sizeof *all);
    if (!all) {
        free_list(list, n);
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
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

static bool k_allowed_origins(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return add_origins(w, v, p, CFG(t));
}

/* mcp (docs/mcp.md) */
static bool k_mcp_http(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_bool(w, v, p, &CFG(t)->mcp_http);
}
static bool k_mcp_origins(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    char line[MSG];
    snprintf(line, sizeof line, "%s:%d: %s: deprecated: use the top-level allowed_origins, "
             "which every route checks (these origins are added to it)", w->file, line_of(v), p);
    char *copy = mem_strdup(line);
    char **more = copy ? mem_realloc(c->warnings, (c->n_warnings + 1) * sizeof *more) : NULL;
    if (!more) {
        mem_free(copy);
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    }
    c->warnings = more;
    c->warnings[c->n_warnings++] = copy;
    return add_origins(w, v, p, c);
}
static bool k_mcp(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"http", k_mcp_http}, {"allowed_origins", k_mcp_origins}, {NULL, NULL}};
    return walk_section(w, v, p, keys, t);
}

/* pipelines (docs/pipelines.md): stages, questions, the verdict rule */
#define PIPE(t) ((struct config_pipeline *)(t))
#define STAGE(t) ((struct config_stage *)(t))
#define TEXT_MAX 16384

static bool get_text(struct walk *w, struct fy_node *n, const char *path, struct config_text *out) {
    char v[TEXT_MAX];
    if (!scalar(w, n, path, v, sizeof v))
        return false;
    mem_free(out->text);
    if (!(out->text = mem_strdup(v)))
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    out->line = (uint32_t)line_of(n);
    return true;
}

/* The keys of mapping n as strings and their values as texts. */
static bool text_map(struct walk *w, struct fy_node *n, const char *path,
                     struct config_question *q) {
    int count = fy_node_mapping_item_count(n);
    q->keys = mem_calloc((size_t)count + 1, sizeof *q->keys);
    q->criteria = mem_calloc((size_t)count + 1, sizeof *q->criteria);
    if (!q->keys || !q->criteria)
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(n, &it))) {
        char key[256], sub[1024];
        struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
        if (!scalar(w, k, path, key, sizeof key))
            return false;
        snprintf(sub, sizeof sub, "%s.%s", path, key);
        for (size_t i = 0; i < q->n_criteria; i++)
            if (!strcmp(q->keys[i], key))
                return fail(w, TANDEM_ERR_FORMAT, k, sub, "duplicate key");
        if (q->type == CONFIG_Q_NOUL && strcmp(key, "true") && strcmp(key, "false"))
            return fail(w, TANDEM_ERR_FORMAT, k, sub, "noul criteria take only true and false");
        if (!(q->keys[q->n_criteria] = mem_strdup(key)))
            return fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
        if (!v || !get_text(w, v, sub, &q->criteria[q->n_criteria++]))
            return v ? false : fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
    }
    return true;
}

static bool text_list(struct walk *w, struct fy_node *n, const char *path,
                      struct config_question *q) {
    int count = fy_node_sequence_item_count(n);
    if (count < 2 || count > 10)
        return fail(w, TANDEM_ERR_FORMAT, n, path, "expected 2 to 10 levels, got %d", count);
    if (!(q->criteria = mem_calloc((size_t)count, sizeof *q->criteria)))
        return fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        char sub[640];
        snprintf(sub, sizeof sub, "%s[%zu]", path, q->n_criteria);
        if (!get_text(w, item, sub, &q->criteria[q->n_criteria++]))
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

static bool k_q_type(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[16];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    enum config_qtype *type = &QW(t)->q->type;
    if (!strcmp(s, "choice"))
        *type = CONFIG_Q_CHOICE;
    else if (!strcmp(s, "score"))
        *type = CONFIG_Q_SCORE;
    else if (!strcmp(s, "noul"))
        *type = CONFIG_Q_NOUL;
    else
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected choice, score or noul, got \"%s\"", s);
    QW(t)->have_type = true;
    return true;
}
static bool k_q_instructions(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_text(w, v, p, &QW(t)->q->instructions);
}
static bool k_q_criteria(struct walk *w, struct fy_node *v, const char *p, void *t) {
    (void)w;
    QW(t)->criteria = v;
    snprintf(QW(t)->criteria_path, sizeof QW(t)->criteria_path, "%s", p);
    return true;
}

static bool question_criteria(struct walk *w, struct qwalk *qw) {
    struct config_question *q = qw->q;
    struct fy_node *c = qw->criteria;
    const char *p = qw->criteria_path;
    if (!c) {
        if (q->type == CONFIG_Q_NOUL)
            return true;
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "is required for a %s question",
                    q->type == CONFIG_Q_CHOICE ? "choice" : "score");
    }
    if (q->type == CONFIG_Q_SCORE)
        return fy_node_is_sequence(c) ? text_list(w, c, p, q)
                                      : fail(w, TANDEM_ERR_FORMAT, c, p, "expected a list of levels");
    if (!fy_node_is_mapping(c))
        return fail(w, TANDEM_ERR_FORMAT, c, p, "expected a mapping of %s",
                    q->type == CONFIG_Q_CHOICE ? "option -> description" : "true/false -> description");
    if (!text_map(w, c, p, q))
        return false;
    if (q->type == CONFIG_Q_CHOICE && q->n_criteria < 2)
        return fail(w, TANDEM_ERR_FORMAT, c, p, "expected at least 2 options");
    return true;
}

static const struct key QUESTION_KEYS[] = {
    {"type", k_q_type}, {"instructions", k_q_instructions}, {"criteria", k_q_criteria},
    {NULL, NULL}};

static bool k_questions(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_stage *st = STAGE(t);
    if (!fy_node_is_mapping(v) || fy_node_mapping_item_count(v) < 1)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a mapping of at least one question");
    st->questions = mem_calloc((size_t)fy_node_mapping_item_count(v), sizeof *st->questions);
    if (!st->questions)
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(v, &it))) {
        struct config_question *q = &st->questions[st->n_questions++];
        struct fy_node *k = fy_node_pair_key(pair), *qv = fy_node_pair_value(pair);
        char id[128], sub[384];
        if (!scalar(w, k, p, id, sizeof id))
            return false;
        snprintf(sub, sizeof sub, "%s.%s", p, id);
        q->line = (uint32_t)line_of(k);
        if (!(q->id = mem_strdup(id)))
            return fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
        struct qwalk qw = {.q = q};
        snprintf(qw.criteria_path, sizeof qw.criteria_path, "%s.criteria", sub);
        if (!qv)
            return fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
        if (!walk_section(w, qv, sub, QUESTION_KEYS, &qw))
            return false;
        w->line = (int)q->line;
        if (!qw.have_type)
            return fail(w, TANDEM_ERR_FORMAT, NULL, sub, "type is required (choice, score or noul)");
        if (!q->instructions.text)
            return fail(w, TANDEM_ERR_FORMAT, NULL, sub, "instructions is required");
        w->line = 0;
        if (!question_criteria(w, &qw))
            return false;
    }
    return true;
}

static bool k_s_model(struct walk *w, struct fy_node *v, const char *p, void *t) {
    STAGE(t)->model_line = (uint32_t)line_of(v);
    return get_string(w, v, p, &STAGE(t)->model);
}
static bool k_s_instructions(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_text(w, v, p, &STAGE(t)->instructions);
}

/* A stage mapping; the model is required. */
static bool stage(struct walk *w, struct fy_node *v, const char *p, const struct key *keys,
                  struct config_stage *st) {
    st->line = (uint32_t)line_of(v);
    if (!walk_section(w, v, p, keys, st))
        return false;
    if (!st->model) {
        char at[512];
        snprintf(at, sizeof at, "%s.model", p);
        w->line = (int)st->line;
        return fail(w, TANDEM_ERR_FORMAT, NULL, at, "is required");
    }
    return true;
}

static bool k_p_decide(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {{"model", k_s_model},
                                      {"instructions", k_s_instructions},
                                      {"questions", k_questions},
                                      {NULL, NULL}};
    return stage(w, v, p, keys, &PIPE(t)->decide);
}

static bool k_p_verify(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"model", k_s_model}, {"questions", k_questions}, {NULL, NULL}};
    struct config_pipeline *pl = PIPE(t);
    if (!fy_node_is_sequence(v) || fy_node_sequence_item_count(v) < 1)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a list of at least one stage");
    pl->verify = mem_calloc((size_t)fy_node_sequence_item_count(v), sizeof *pl->verify);
    if (!pl->verify)
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(v, &it))) {
        char sub[384];
        snprintf(sub, sizeof sub, "%s[%zu]", p, pl->n_verify);
        struct config_stage *st = &pl->verify[pl->n_verify++];
        if (!stage(w, item, sub, keys, st))
            return false;
        if (!st->n_questions) {
            w->line = (int)st->line;
            return fail(w, TANDEM_ERR_FORMAT, NULL, sub, "questions is required");
        }
    }
    return true;
}

/* "OP VALUE": ">= 0.7", "< 2", "== yes". */
static bool parse_threshold(struct walk *w, struct fy_node *v, const char *p,
                            struct config_threshold *th) {
    char s[300], *end;
    if (!scalar(w, v, p, s, sizeof s))
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
        return fail(w, TANDEM_ERR_FORMAT, v, p,
                    "expected \"OP VALUE\" with OP one of >=, >, <=, <, ==, got \"%s\"", s);
    th->line = (uint32_t)line_of(v);
    if (!strcmp(th->op, "==")) {
        if (!(th->option = mem_strdup(rest)))
            return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
        return true;
    }
    errno = 0;
    th->value = strtod(rest, &end);
    if (end == rest || *end || errno)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a number after %s, got \"%s\"", th->op,
                    rest);
    return true;
}

static bool k_v_thresholds(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config_pipeline *pl = PIPE(t);
    if (!fy_node_is_mapping(v))
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a mapping question -> \"OP VALUE\"");
    pl->thresholds = mem_calloc((size_t)fy_node_mapping_item_count(v) + 1, sizeof *pl->thresholds);
    if (!pl->thresholds)
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(v, &it))) {
        struct config_threshold *th = &pl->thresholds[pl->n_thresholds++];
        struct fy_node *k = fy_node_pair_key(pair), *tv = fy_node_pair_value(pair);
        char id[128], sub[384];
        if (!scalar(w, k, p, id, sizeof id))
            return false;
        snprintf(sub, sizeof sub, "%s.%s", p, id);
        if (!(th->question = mem_strdup(id)))
            return fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
        if (!tv || !parse_threshold(w, tv, sub, th))
            return tv ? false : fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
    }
    return true;
}
static bool k_v_min_confidence(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[64], *end;
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno || x < 0 || x > 1)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a number from 0 to 1, got \"%s\"", s);
    PIPE(t)->min_confidence = x;
    return true;
}
static bool k_v_on_reject(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char s[32];
    if (!scalar(w, v, p, s, sizeof s))
        return false;
    if (!strcmp(s, "next_best"))
        PIPE(t)->on_reject = CONFIG_ON_REJECT_NEXT_BEST;
    else if (!strcmp(s, "reject"))
        PIPE(t)->on_reject = CONFIG_ON_REJECT_REJECT;
    else if (!strcmp(s, "escalate"))
        PIPE(t)->on_reject = CONFIG_ON_REJECT_ESCALATE;
    else
        return fail(w, TANDEM_ERR_FORMAT, v, p,
                    "expected next_best, reject or escalate, got \"%s\"", s);
    return true;
}
static bool k_v_max_attempts(struct walk *w, struct fy_node *v, const char *p, void *t) {
    uint64_t n;
    if (!get_u64(w, v, p, 64, 1, &n))
        return false;
    PIPE(t)->max_attempts = (uint32_t)n;
    return true;
}
static bool k_e_pipeline(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_string(w, v, p, &PIPE(t)->escalate_pipeline);
}
static bool k_e_model(struct walk *w, struct fy_node *v, const char *p, void *t) {
    return get_string(w, v, p, &PIPE(t)->escalate_model);
}
static bool k_v_escalate(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"pipeline", k_e_pipeline}, {"model", k_e_model}, {NULL, NULL}};
    if (!walk_section(w, v, p, keys, t))
        return false;
    if (!PIPE(t)->escalate_pipeline == !PIPE(t)->escalate_model)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected exactly one of pipeline or model");
    return true;
}
static bool k_p_verdict(struct walk *w, struct fy_node *v, const char *p, void *t) {
    static const struct key keys[] = {
        {"thresholds", k_v_thresholds}, {"min_confidence", k_v_min_confidence},
        {"on_reject", k_v_on_reject},   {"max_attempts", k_v_max_attempts},
        {"escalate", k_v_escalate},     {NULL, NULL}};
    PIPE(t)->verdict_line = (uint32_t)line_of(v);
    return walk_section(w, v, p, keys, t);
}

/* Read by agents as the MCP tool's description: text, not markup, and short. */
static bool k_p_description(struct walk *w, struct fy_node *v, const char *p, void *t) {
    char d[CONFIG_DESCRIPTION_MAX + 1];
    size_t len = 0;
    const char *s = fy_node_is_scalar(v) ? fy_node_get_scalar(v, &len) : NULL;
    if (s && len > CONFIG_DESCRIPTION_MAX)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "at most %d bytes, got %zu",
                    CONFIG_DESCRIPTION_MAX, len);
    if (!scalar(w, v, p, d, sizeof d))
        return false;
    if (utf8_bad_line((const unsigned char *)s, len)) /* a "\0" or "\ud800" escape */
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected UTF-8 text without NUL bytes");
    if (strspn(d, " \t\r\n") == len)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "must not be empty");
    mem_free(PIPE(t)->description);
    if (!(PIPE(t)->description = mem_strdup(d)))
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return true;
}

static const struct key PIPELINE_KEYS[] = {
    {"description", k_p_description}, {"decide", k_p_decide}, {"verify", k_p_verify},
    {"verdict", k_p_verdict}, {NULL, NULL}};

static bool k_pipelines(struct walk *w, struct fy_node *v, const char *p, void *t) {
    struct config *c = CFG(t);
    if (!fy_node_is_mapping(v) || fy_node_mapping_item_count(v) < 1)
        return fail(w, TANDEM_ERR_FORMAT, v, p, "expected a mapping of at least one pipeline");
    c->pipelines = mem_calloc((size_t)fy_node_mapping_item_count(v), sizeof *c->pipelines);
    if (!c->pipelines)
        return fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(v, &it))) {
        struct config_pipeline *pl = &c->pipelines[c->n_pipelines++];
        struct fy_node *k = fy_node_pair_key(pair), *pv = fy_node_pair_value(pair);
        char name[128], sub[256];
        if (!scalar(w, k, p, name, sizeof name))
            return false;
        snprintf(sub, sizeof sub, "%s.%s", p, name);
        pl->line = (uint32_t)line_of(k);
        pl->max_attempts = 3;
        if (!(pl->name = mem_strdup(name)))
            return fail(w, TANDEM_ERR_NOMEM, k, sub, "out of memory");
        if (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
            strlen(name))
            return fail(w, TANDEM_ERR_FORMAT, k, sub,
                        "a pipeline name is letters, digits, '_', '.' and '-' (it is a URL path)");
        if (!pv || !walk_section(w, pv, sub, PIPELINE_KEYS, pl))
            return pv ? false : fail(w, TANDEM_ERR_FORMAT, k, sub, "has no settings");
        w->line = (int)pl->line;
        if (!pl->decide.model)
            return fail(w, TANDEM_ERR_FORMAT, NULL, sub, "decide is required");
        if (!pl->n_verify)
            return fail(w, TANDEM_ERR_FORMAT, NULL, sub, "verify is required");
        w->line = 0;
    }
    return true;
}

static const struct key ROOT_KEYS[] = {
    {"listen", k_listen},   {"api_keys", k_api_keys},     {"budget", k_budget},
    {"engine", k_engine},   {"defaults", k_defaults},     {"limits", k_limits},
    {"scheduling", k_scheduling}, {"shutdown", k_shutdown}, {"logs", k_logs},
    {"models", k_models},   {"pipelines", k_pipelines},   {"node", k_node},
    {"metrics", k_metrics}, {"mcp", k_mcp},
    {"allowed_hosts", k_allowed_hosts}, {"allowed_origins", k_allowed_origins}, {NULL, NULL}};

/* --- cross-checks, defaults, entry points ----------------------------------------------------- */

/* How many names (model names and aliases) equal name. */
static size_t name_count(const struct config *c, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < c->n_models; i++) {
        n += !strcmp(c->models[i].name, name);
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            n += !strcmp(c->models[i].aliases[a], name);
    }
    return n;
}

static bool reserved_name(const char *name) {
    return !strncmp(name, CONFIG_PIPELINE_MODEL_PREFIX, strlen(CONFIG_PIPELINE_MODEL_PREFIX));
}

static bool check_names(struct walk *w, struct config *c, struct fy_node *root) {
    for (size_t i = 0; i < c->n_models; i++) {
        const struct config_model *m = &c->models[i];
        char p[300];
        if (reserved_name(m->name)) {
            snprintf(p, sizeof p, "models.%s", m->name);
            w->line = (int)m->line;
            return fail(w, TANDEM_ERR_FORMAT, NULL, p, "a model name may not begin with \""
                        CONFIG_PIPELINE_MODEL_PREFIX "\" (that calls a pipeline)");
        }
        for (size_t a = 0; a < m->n_aliases; a++) {
            const char *alias = m->aliases[a];
            bool reserved = reserved_name(alias);
            if (!reserved && name_count(c, alias) == 1)
                continue;
            snprintf(p, sizeof p, "models.%s.aliases[%zu]", m->name, a);
            w->line = (int)m->line;
            return fail(w, TANDEM_ERR_FORMAT, NULL, p,
                        reserved ? "\"%s\" may not begin with \"" CONFIG_PIPELINE_MODEL_PREFIX
                                   "\" (that calls a pipeline)"
                                 : "\"%s\" already names another model or alias",
                        alias);
        }
    }
    if (c->default_model && !config_find_model(c, c->default_model))
        return fail(w, TANDEM_ERR_FORMAT, root, "defaults.model",
                    "\"%s\" is not a model or alias", c->default_model);
    return true;
}

const struct config_question *config_find_verify_question(const struct config_pipeline *pl,
                                                         const char *id) {
    for (size_t s = 0; s < pl->n_verify; s++)
        for (size_t q = 0; q < pl->verify[s].n_questions; q++)
            if (!strcmp(pl->verify[s].questions[q].id, id))
                return &pl->verify[s].questions[q];
    return NULL;
}

/* Checks a pipeline against the models and itself: stage models exist, verify
 * question ids are unique, thresholds name a verify question and suit its
 * type, an escalation names something that exists. */
static bool check_stage_model(struct walk *w, const struct config *c, const struct config_stage *st,
                              const char *path) {
    if (config_find_model(c, st->model))
        return true;
    w->line = (int)st->model_line;
    return fail(w, TANDEM_ERR_FORMAT, NULL, path, "\"%s\" is not a model or alias", st->model);
}

static bool check_threshold(struct walk *w, const struct config_pipeline *pl,
                            const struct config_threshold *th) {
    char p[400];
    snprintf(p, sizeof p, "pipelines.%s.verdict.thresholds.%s", pl->name, th->question);
    w->line = (int)th->line;
    const struct config_question *q = config_find_verify_question(pl, th->question);
    if (!q)
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "no verify question has this id");
    bool eq = !strcmp(th->op, "==");
    if (q->type == CONFIG_Q_CHOICE && !eq)
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "a choice question takes \"== OPTION\"");
    if (q->type != CONFIG_Q_CHOICE && eq)
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "a %s question takes >=, >, <= or <",
                    q->type == CONFIG_Q_NOUL ? "noul" : "score");
    if (eq) {
        for (size_t i = 0; i < q->n_criteria; i++)
            if (!strcmp(q->keys[i], th->option))
                return true;
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "\"%s\" is not an option of %s", th->option,
                    q->id);
    }
    if (q->type == CONFIG_Q_NOUL && (th->value < 0 || th->value > 1))
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "a noul is a probability: 0 to 1, got %g",
                    th->value);
    return true;
}

/* Follows escalate.pipeline from pl; a chain that comes back is a cycle. */
static bool check_escalation(struct walk *w, const struct config *c,
                             const struct config_pipeline *pl) {
    char p[300];
    snprintf(p, sizeof p, "pipelines.%s.verdict.escalate", pl->name);
    w->line = (int)pl->verdict_line;
    if (pl->on_reject == CONFIG_ON_REJECT_ESCALATE && !pl->escalate_pipeline && !pl->escalate_model)
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "is required with on_reject: escalate");
    if (pl->escalate_model && !config_find_model(c, pl->escalate_model))
        return fail(w, TANDEM_ERR_FORMAT, NULL, p, "model \"%s\" is not a model or alias",
                    pl->escalate_model);
    const struct config_pipeline *next = pl;
    for (size_t hops = 0; next && next->escalate_pipeline; hops++) {
        const char *to = next->escalate_pipeline;
        if (!(next = config_find_pipeline(c, to)))
            return fail(w, TANDEM_ERR_FORMAT, NULL, p, "pipeline \"%s\" does not exist", to);
        if (next == pl || hops > c->n_pipelines)
            return fail(w, TANDEM_ERR_FORMAT, NULL, p, "escalation comes back to %s (a cycle)",
                        pl->name);
    }
    return true;
}

static bool check_pipeline(struct walk *w, const struct config *c,
                           const struct config_pipeline *pl) {
    char p[400];
    snprintf(p, sizeof p, "pipelines.%s.decide.model", pl->name);
    if (!check_stage_model(w, c, &pl->decide, p))
        return false;
    for (size_t q = 0; q < pl->decide.n_questions; q++)
        if (!strcmp(pl->decide.questions[q].id, CONFIG_DECIDE_CHOICE_ID)) {
            w->line = (int)pl->decide.questions[q].line;
            snprintf(p, sizeof p, "pipelines.%s.decide.questions.%s", pl->name, CONFIG_DECIDE_CHOICE_ID);
            return fail(w, TANDEM_ERR_FORMAT, NULL, p, "this id is the decision itself; choose another");
        }
    for (size_t s = 0; s < pl->n_verify; s++) {
        snprintf(p, sizeof p, "pipelines.%s.verify[%zu].model", pl->name, s);
        if (!check_stage_model(w, c, &pl->verify[s], p))
            return false;
        for (size_t q = 0; q < pl->verify[s].n_questions; q++) {
            const struct config_question *qq = &pl->verify[s].questions[q];
            if (config_find_verify_question(pl, qq->id) != qq) {
                w->line = (int)qq->line;
                snprintf(p, sizeof p, "pipelines.%s.verify[%zu].questions.%s", pl->name, s, qq->id);
                return fail(w, TANDEM_ERR_FORMAT, NULL, p,
                            "an earlier verify stage has a question with this id");
            }
        }
    }
    for (size_t i = 0; i < pl->n_thresholds; i++)
        if (!check_threshold(w, pl, &pl->thresholds[i]))
            return false;
    return check_escalation(w, c, pl);
}

static tandem_err set_defaults(struct config *c) {
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 8090;
    c->reserve = 512ull << 20;
    c->max_body_bytes = 1ull << 20;
    c->queue_depth = 64;
    c->request_timeout_ms = 60000;
    c->header_timeout_ms = 10000;
    c->idle_timeout_ms = 60000;
    c->max_connections = 256;
    c->drain_delay_ms = 5000;
    c->health_interval_ms = 1000;
    c->max_restarts = 5;
    c->max_event_clients = 16;
    if (gethostname(c->node_id, sizeof c->node_id) != 0 || !c->node_id[0])
        snprintf(c->node_id, sizeof c->node_id, "tandem");
    c->node_id[sizeof c->node_id - 1] = '\0';
    c->group_limit = 16;
    c->request_tokens = 256;
    c->clients = 1;
    c->starvation_ms = 30000;
    c->drain_grace_ms = 30000;
    c->stop_grace_ms = 10000;
    c->audit_max_bytes = 64ull << 20;
    c->audit_keep = 5;
    return TANDEM_OK;
}

static tandem_err finish_logs(struct config *c) {
    if (!c->log_dir) {
        char dir[PATH_MAX];
        if (cache_path(dir, sizeof dir, "logs") != TANDEM_OK || !(c->log_dir = mem_strdup(dir)))
            return TANDEM_ERR_NOMEM;
    }
    if (c->audit_path && !strcmp(c->audit_path, "off")) {
        mem_free(c->audit_path);
        c->audit_path = NULL;
    } else if (!c->audit_path) {
        size_t n = strlen(c->log_dir) + sizeof "/audit.jsonl";
        if (!(c->audit_path = mem_alloc(n)))
            return TANDEM_ERR_NOMEM;
        snprintf(c->audit_path, n, "%s/audit.jsonl", c->log_dir);
    }
    return TANDEM_OK;
}

/* libfyaml's diagnostics, captured instead of printed: the first one wins. */
struct yaml_diag {
    char text[384];
};

static void capture_diag(struct fy_diag *diag, void *user, const char *buf, size_t len) {
    (void)diag;
    struct yaml_diag *d = user;
    if (d->text[0])
        return;
    size_t n = len < sizeof d->text - 1 ? len : sizeof d->text - 1;
    memcpy(d->text, buf, n);
    d->text[n] = '\0';
    d->text[strcspn(d->text, "\n")] = '\0';
}

/* libfyaml prints "<input>:<line>:<col>: error: <message>", 1-based. */
static void yaml_error(struct walk *w, const struct yaml_diag *d) {
    int line = 0, col = 0, used = 0;
    const char *msg = d->text[0] ? d->text : "cannot parse";
    const char *pos = d->text[0] == '<' ? strstr(d->text, ">:") : NULL;
    pos = pos ? pos + 2 : d->text;
    if (sscanf(pos, "%d:%d: %n", &line, &col, &used) == 2 && used > 0)
        msg = pos + used;
    if (!strncmp(msg, "error: ", 7))
        msg += 7;
    tandem_errmsg(w->err, w->errlen, "%s:%d: YAML: %s", w->file, line, msg);
    w->e = TANDEM_ERR_FORMAT;
}

tandem_err config_load_buffer(const char *name, const char *data, size_t len, struct config **out,
                              char *err, size_t errlen) {
    *out = NULL;
    struct walk w = {.file = name, .err = err, .errlen = errlen, .e = TANDEM_OK};
    const char *slash = strrchr(name, '/');
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%.*s", slash ? (int)(slash - name) : 1, slash ? name : ".");
    if (!realpath(rel[0] ? rel : "/", w.dir)) /* relative model paths become absolute */
        snprintf(w.dir, sizeof w.dir, "%s", rel);
    struct config *c = mem_calloc(1, sizeof *c);
    if (!c || !(c->path = mem_strdup(name))) {
        mem_free(c);
        return TANDEM_ERR_NOMEM;
    }
    set_defaults(c);
    struct yaml_diag captured = {""};
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = capture_diag;
    dcfg.user = &captured;
    dcfg.colorize = false;
    dcfg.show_source = false;
    dcfg.show_type = true;
    dcfg.show_module = false;
    dcfg.show_position = true;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_DEFAULT_PARSE, .diag = diag};
    /* YAML must be UTF-8, and libfyaml 0.7.12 can loop forever on some invalid
     * sequences (found by fuzzing): such text is refused before it parses */
    int bad = (int)utf8_bad_line((const unsigned char *)data, len);
    struct fy_document *doc = len && !bad ? fy_document_build_from_string(&pcfg, data, len) : NULL;
    struct fy_node *root = doc ? fy_document_root(doc) : NULL;
    if (bad && (w.line = bad))
        fail(&w, TANDEM_ERR_FORMAT, NULL, "(text)", "not valid UTF-8 (or a NUL byte)");
    else if (len && !doc)
        yaml_error(&w, &captured);
    else if (!root)
        fail(&w, TANDEM_ERR_FORMAT, NULL, "(root)", "the file is empty: at least models: is needed");
    else if (walk_section(&w, root, "", ROOT_KEYS, c) && !c->n_models)
        fail(&w, TANDEM_ERR_FORMAT, root, "models", "is required: at least one model");
    if (w.e == TANDEM_OK)
        check_names(&w, c, root);
    for (size_t i = 0; w.e == TANDEM_OK && i < c->n_pipelines; i++)
        check_pipeline(&w, c, &c->pipelines[i]);
    if (w.e == TANDEM_OK)
        w.e = finish_logs(c);
    fy_document_destroy(doc);
    if (diag)
        fy_diag_unref(diag);
    if (w.e != TANDEM_OK) {
        config_free(c);
        return w.e;
    }
    *out = c;
    return TANDEM_OK;
}

tandem_err config_load(const char *path, struct config **out, char *err, size_t errlen) {
    *out = NULL;
    struct mem_buf b;
    mem_buf_init(&b, 16u << 20);
    tandem_err e = mem_buf_append_file(&b, path);
    if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: %s", path,
                      e == TANDEM_ERR_IO      ? strerror(errno)
                      : e == TANDEM_ERR_TOOBIG ? "larger than 16 MiB"
                                               : tandem_strerror(e));
    else
        e = config_load_buffer(path, b.data, b.len, out, err, errlen);
    mem_buf_deinit(&b);
    return e;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        mem_free(v[i]);
    mem_free(v);
}

static void free_stage(struct config_stage *st) {
    for (size_t q = 0; st->questions && q < st->n_questions; q++) {
        struct config_question *qq = &st->questions[q];
        mem_free(qq->id);
        mem_free(qq->instructions.text);
        for (size_t i = 0; i < qq->n_criteria; i++)
            mem_free(qq->criteria[i].text);
        mem_free(qq->criteria);
        free_list(qq->keys, qq->keys ? qq->n_criteria : 0);
    }
    mem_free(st->questions);
    mem_free(st->model);
    mem_free(st->instructions.text);
}

static void free_pipeline(struct config_pipeline *pl) {
    mem_free(pl->name);
    mem_free(pl->description);
    free_stage(&pl->decide);
    for (size_t s = 0; pl->verify && s < pl->n_verify; s++)
        free_stage(&pl->verify[s]);
    mem_free(pl->verify);
    for (size_t i = 0; pl->thresholds && i < pl->n_thresholds; i++) {
        mem_free(pl->thresholds[i].question);
        mem_free(pl->thresholds[i].option);
    }
    mem_free(pl->thresholds);
    mem_free(pl->escalate_pipeline);
    mem_free(pl->escalate_model);
}

static void free_upstream(struct config_upstream *u) {
    if (!u)
        return;
    free_list(u->urls, u->n_urls);
    mem_free(u->api_key_env);
    if (u->api_key)
        explicit_bzero(u->api_key, strlen(u->api_key));
    mem_free(u->api_key);
    mem_free(u->health);
    mem_free(u);
}

/* The config's listen address as a URL a client can reach ("" for port 0). */
void config_listen_url(const struct config *cfg, char *out, size_t cap) {
    const char *h = cfg->listen_host;
    if (!strcmp(h, "0.0.0.0"))
        h = "127.0.0.1";
    else if (!strcmp(h, "::"))
        h = "::1";
    bool v6 = strchr(h, ':') != NULL;
    if (cfg->listen_port)
        snprintf(out, cap, "http://%s%s%s:%u", v6 ? "[" : "", h, v6 ? "]" : "",
                 (unsigned)cfg->listen_port);
    else
        out[0] = '\0';
}

void config_free(struct config *c) {
    if (!c)
        return;
    for (size_t i = 0; c->pipelines && i < c->n_pipelines; i++)
        free_pipeline(&c->pipelines[i]);
    mem_free(c->pipelines);
    for (size_t i = 0; c->models && i < c->n_models; i++) {
        struct config_model *m = &c->models[i];
        mem_free(m->name);
        mem_free(m->path);
        free_upstream(m->upstream);
        free_list(m->aliases, m->n_aliases);
        free_list(m->extra_args, m->n_extra_args);
    }
    mem_free(c->models);
    free_list(c->api_keys, c->n_api_keys);
    free_list(c->allowed_hosts, c->n_allowed_hosts);
    free_list(c->allowed_origins, c->n_allowed_origins);
    free_list(c->warnings, c->n_warnings);
    mem_free(c->path);
    mem_free(c->default_model);
    mem_free(c->log_dir);
    mem_free(c->audit_path);
    mem_free(c->llama_server);
    mem_free(c);
}

const struct config_model *config_find_model(const struct config *c, const char *name) {
    for (size_t i = 0; i < c->n_models; i++) {
        if (!strcmp(c->models[i].name, name))
            return &c->models[i];
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            if (!strcmp(c->models[i].aliases[a], name))
                return &c->models[i];
    }
    return NULL;
}

const struct config_pipeline *config_find_pipeline(const struct config *c, const char *name) {
    for (size_t i = 0; i < c->n_pipelines; i++)
        if (!strcmp(c->pipelines[i].name, name))
            return &c->pipelines[i];
    return NULL;
}
