/* config_walk.c: typed reads over a libfyaml tree, for tandem.yaml's schema.
 *
 * Every reader takes the node and the key path it was found at, and on a bad
 * value records "<file>:<line>: <path>: <what>" in the walk; only the first
 * error is kept, and the walk stops at it. A table of fields (config_walk.h)
 * drives the walk: config_walk_section looks each key up in its table (an
 * unknown key is an error that suggests the closest known one) and
 * config_walk_apply reads the value by the field's kind into the member at
 * the field's offset. The scalar kinds (numbers, sizes, durations, booleans,
 * words) parse text, so a field's default is written as the YAML would say it
 * and parsed by the same code at load (config_walk_defaults). */
#include "serve/config_walk.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/units.h"
#include "gguf/ggml_types.h"

#define MSG 512
#define TEXT_MAX 16384

int config_walk_line(struct fy_node *n) {
    void *it = NULL;
    if (n && fy_node_is_mapping(n)) {
        struct fy_node_pair *p = fy_node_mapping_iterate(n, &it);
        return p ? config_walk_line(fy_node_pair_key(p)) : 0;
    }
    if (n && fy_node_is_sequence(n))
        return config_walk_line(fy_node_sequence_iterate(n, &it));
    struct fy_token *t = n ? fy_node_get_scalar_token(n) : NULL;
    const struct fy_mark *m = t ? fy_token_start_mark(t) : NULL;
    return m ? m->line + 1 : 0;
}

bool config_walk_fail(struct config_walk *w, tandem_err e, struct fy_node *at, const char *path,
                      const char *fmt, ...) {
    if (w->e != TANDEM_OK)
        return false;
    char what[MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int line = w->line ? w->line : config_walk_line(at);
    tandem_errmsg(w->err, w->errlen, "%s:%d: %s: %s", w->file, line, path, what);
    w->e = e;
    return false;
}

bool config_walk_scalar(struct config_walk *w, struct fy_node *n, const char *path, char *buf,
                        size_t cap) {
    size_t len;
    const char *s = n && fy_node_is_scalar(n) ? fy_node_get_scalar(n, &len) : NULL;
    if (!s)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected a value, got a %s",
                                n && fy_node_is_mapping(n) ? "mapping" : n ? "list" : "nothing");
    if (len >= cap)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "value too long (%zu bytes)", len);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return true;
}

/* --- the scalar kinds: text v, from node n (NULL for a default), into at --------- */

static bool u64_text(struct config_walk *w, struct fy_node *n, const char *path, const char *v,
                     uint64_t min, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!v[0] || *end || v[0] == '-' || errno)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected an integer, got \"%s\"",
                                v);
    if (x < min || x > max)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "%llu is out of range (%llu to %llu)", x, (unsigned long long)min,
                                (unsigned long long)max);
    *out = x;
    return true;
}

bool config_walk_u64(struct config_walk *w, struct fy_node *n, const char *path, uint64_t min,
                     uint64_t max, uint64_t *out) {
    char v[64];
    return config_walk_scalar(w, n, path, v, sizeof v) && u64_text(w, n, path, v, min, max, out);
}

static bool parse_uint(struct config_walk *w, struct fy_node *n, const char *path,
                       const struct config_field *f, const char *v, void *at) {
    uint64_t x;
    if (!u64_text(w, n, path, v, (uint64_t)f->min, (uint64_t)f->max, &x))
        return false;
    *(uint32_t *)at = (uint32_t)x;
    return true;
}

static bool parse_int(struct config_walk *w, struct fy_node *n, const char *path,
                      const struct config_field *f, const char *v, void *at) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || x < f->min || x > f->max)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "expected an integer from %lld to %lld, got \"%s\"",
                                (long long)f->min, (long long)f->max, v);
    *(int32_t *)at = (int32_t)x;
    return true;
}

static bool parse_double(struct config_walk *w, struct fy_node *n, const char *path,
                         const struct config_field *f, const char *v, void *at) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || x < f->min || x > f->max)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "expected a number from %g to %g, got \"%s\"", f->min, f->max, v);
    *(double *)at = x;
    return true;
}

static bool parse_bool(struct config_walk *w, struct fy_node *n, const char *path,
                       const struct config_field *f, const char *v, void *at) {
    (void)f;
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"))
        return *(bool *)at = true, true;
    if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off"))
        return *(bool *)at = false, true;
    return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected true or false, got \"%s\"", v);
}

static bool parse_size(struct config_walk *w, struct fy_node *n, const char *path,
                       const struct config_field *f, const char *v, void *at) {
    (void)f;
    if (units_parse_bytes(v, at) != TANDEM_OK)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "expected a size like 6GiB, got \"%s\"", v);
    return true;
}

/* "250ms", "30s", "5m", "1h", "7d" or an integer (ms); "forever" when allowed. */
static bool parse_duration(struct config_walk *w, struct fy_node *n, const char *path,
                           const struct config_field *f, const char *v, void *at) {
    int64_t *out = at;
    if (f->forever && !strcmp(v, "forever"))
        return *out = CONFIG_KEEP_ALIVE_FOREVER, true;
    if (units_parse_ms(v, out) != TANDEM_OK)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "expected a duration like 30s, 5m%s, got \"%s\"",
                                f->forever ? " or forever" : "", v);
    if (*out < f->min)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "must be at least %lldms",
                                (long long)f->min);
    return true;
}

/* One of the field's words; the message lists them: "expected a, b or c". */
static bool parse_enum(struct config_walk *w, struct fy_node *n, const char *path,
                       const struct config_field *f, const char *v, void *at) {
    size_t count = 0;
    for (const struct config_choice *c = f->choices; c->word; c++, count++) {
        if (strcmp(v, c->word))
            continue;
        if (f->size == sizeof(bool))
            *(bool *)at = c->value != 0;
        else
            *(int *)at = c->value;
        return true;
    }
    char words[MSG] = "";
    for (size_t i = 0; i < count; i++) {
        size_t used = strlen(words);
        snprintf(words + used, sizeof words - used, "%s%s",
                 i == 0 ? "" : i + 1 < count ? ", " : " or ",
                 f->choices[i].word);
    }
    return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected %s, got \"%s\"", words, v);
}

static bool parse_cache_type(struct config_walk *w, struct fy_node *n, const char *path,
                             const struct config_field *f, const char *v, void *at) {
    (void)f;
    if (ggml_type_find(v, at) != TANDEM_OK)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                "unknown cache type \"%s\" (e.g. f16, q8_0)", v);
    return true;
}

typedef bool (*parse_fn)(struct config_walk *w, struct fy_node *n, const char *path,
                         const struct config_field *f, const char *v, void *at);

/* The scalar kinds: the parser and the longest value read + 1. */
static const struct {
    parse_fn parse;
    size_t cap;
} SCALARS[] = {
    [CONFIG_KIND_BOOL] = {parse_bool, 16},       [CONFIG_KIND_UINT] = {parse_uint, 64},
    [CONFIG_KIND_INT] = {parse_int, 32},         [CONFIG_KIND_DOUBLE] = {parse_double, 64},
    [CONFIG_KIND_SIZE] = {parse_size, 64},       [CONFIG_KIND_DURATION] = {parse_duration, 64},
    [CONFIG_KIND_ENUM] = {parse_enum, 32},       [CONFIG_KIND_CACHE_TYPE] = {parse_cache_type, 32},
};
#define SCALAR_BUF 64 /* the largest cap above */

static bool is_scalar_kind(enum config_kind k) {
    return (size_t)k < sizeof SCALARS / sizeof SCALARS[0] && SCALARS[k].parse;
}

/* --- strings and paths ------------------------------------------------------------ */

bool config_walk_string(struct config_walk *w, struct fy_node *n, const char *path, char **out) {
    char v[PATH_MAX];
    if (!config_walk_scalar(w, n, path, v, sizeof v))
        return false;
    mem_free(*out);
    if (!(*out = mem_strdup(v)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    return true;
}

/* Expands a leading ~ and $VAR / ${VAR}; XDG_CACHE_HOME defaults to ~/.cache. */
static bool expand(struct config_walk *w, struct fy_node *n, const char *path, const char *in,
                   char *out, size_t cap) {
    size_t o = 0;
    const char *home = getenv("HOME");
    if (in[0] == '~' && (in[1] == '/' || !in[1])) {
        if (!home)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "~ used but HOME is not set");
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
            return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                    "bad variable reference in \"%s\"", in);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)len, s);
        const char *val = getenv(name);
        char xdg[PATH_MAX];
        if (!val && !strcmp(name, "XDG_CACHE_HOME") && home) {
            snprintf(xdg, sizeof xdg, "%s/.cache", home);
            val = xdg;
        }
        if (!val)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path,
                                    "environment variable %s is not set", name);
        o += (size_t)snprintf(out + o, cap - o, "%s", val);
        in = s + len + brace;
    }
    if (o >= cap)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "path too long");
    out[o] = '\0';
    return true;
}

bool config_walk_path(struct config_walk *w, struct fy_node *n, const char *path, char **out) {
    char raw[PATH_MAX], exp[PATH_MAX], full[2 * PATH_MAX + 2];
    if (!config_walk_scalar(w, n, path, raw, sizeof raw) ||
        !expand(w, n, path, raw, exp, sizeof exp))
        return false;
    if (exp[0] != '/')
        snprintf(full, sizeof full, "%s/%s", w->dir, exp);
    else
        snprintf(full, sizeof full, "%s", exp);
    if (strlen(full) >= PATH_MAX)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "path too long");
    mem_free(*out);
    if (!(*out = mem_strdup(full)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    return true;
}

bool config_walk_text(struct config_walk *w, struct fy_node *n, const char *path,
                      struct config_text *out) {
    char v[TEXT_MAX];
    if (!config_walk_scalar(w, n, path, v, sizeof v))
        return false;
    mem_free(out->text);
    if (!(out->text = mem_strdup(v)))
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    out->line = (uint32_t)config_walk_line(n);
    return true;
}

bool config_walk_list(struct config_walk *w, struct fy_node *n, const char *path, char ***out,
                      size_t *count) {
    if (!fy_node_is_sequence(n))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, n, path, "expected a list");
    int len = fy_node_sequence_item_count(n);
    char **v = mem_calloc((size_t)len + 1, sizeof *v);
    if (!v)
        return config_walk_fail(w, TANDEM_ERR_NOMEM, n, path, "out of memory");
    *out = v;
    *count = 0;
    void *it = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(n, &it))) {
        char p[256];
        snprintf(p, sizeof p, "%s[%zu]", path, *count);
        if (!config_walk_string(w, item, p, &v[*count]))
            return false;
        ++*count;
    }
    return true;
}

void config_walk_list_free(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++)
        mem_free(v[i]);
    mem_free(v);
}

/* --- fields and sections ------------------------------------------------------------ */

bool config_walk_apply(struct config_walk *w, struct fy_node *v, const char *path,
                       const struct config_field *f, void *target) {
    if (f->via && !(target = f->via(w, v, path, target)))
        return false;
    char *at = (char *)target + f->off;
    switch (f->kind) {
    case CONFIG_KIND_SECTION:
        return config_walk_section(w, v, path, f->sub, target);
    case CONFIG_KIND_CUSTOM:
        return f->fn(w, v, path, target);
    case CONFIG_KIND_STRING:
        return config_walk_string(w, v, path, (char **)at);
    case CONFIG_KIND_PATH:
        return config_walk_path(w, v, path, (char **)at);
    case CONFIG_KIND_TEXT:
        return config_walk_text(w, v, path, (struct config_text *)at);
    case CONFIG_KIND_LIST:
        return config_walk_list(w, v, path, (char ***)at,
                                (size_t *)((char *)target + f->count_off));
    default: {
        char s[SCALAR_BUF];
        size_t cap = f->cap ? f->cap : SCALARS[f->kind].cap;
        return config_walk_scalar(w, v, path, s, cap) &&
               SCALARS[f->kind].parse(w, v, path, f, s, at);
    }
    }
}

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

struct section {
    const struct config_field *fields;
    void *target;
};

/* One key of a section: its field's value, or why the key is refused. */
static bool section_key(struct config_walk *w, struct fy_node *k, struct fy_node *v,
                        const char *name, const char *sub, void *ctx) {
    const struct section *s = ctx;
    const struct config_field *hit = NULL, *near = NULL;
    for (const struct config_field *f = s->fields; f->name; f++) {
        if (!strcmp(f->name, name))
            hit = f;
        else if (edit_distance(f->name, name) <= 2)
            near = f;
    }
    if (!hit) {
        if (near)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "unknown key (did you mean %s?)",
                                    near->name);
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "unknown key");
    }
    if (!v)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "has no value");
    return config_walk_apply(w, v, sub, hit, s->target);
}

bool config_walk_section(struct config_walk *w, struct fy_node *m, const char *path,
                         const struct config_field *fields, void *target) {
    if (!fy_node_is_mapping(m))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, m, path[0] ? path : "(root)",
                                "expected a mapping of keys");
    struct section s = {fields, target};
    return config_walk_map_each(w, m, path, 128, 384, section_key, &s);
}

bool config_walk_defaults(struct config_walk *w, const struct config_field *fields, void *target) {
    for (const struct config_field *f = fields; f->name; f++) {
        if (f->kind == CONFIG_KIND_SECTION && !config_walk_defaults(w, f->sub, target))
            return false;
        if (!f->def)
            continue;
        if (!is_scalar_kind(f->kind) || f->via)
            return config_walk_fail(w, TANDEM_ERR_INVAL, NULL, f->name,
                                    "this field takes no default");
        if (!SCALARS[f->kind].parse(w, NULL, f->name, f, f->def, (char *)target + f->off))
            return false;
    }
    return true;
}

/* --- mappings of named entries ------------------------------------------------------------ */

void *config_walk_map_new(struct config_walk *w, struct fy_node *v, const char *path,
                          const char *what, size_t size) {
    if (!fy_node_is_mapping(v) || fy_node_mapping_item_count(v) < 1) {
        config_walk_fail(w, TANDEM_ERR_FORMAT, v, path, "expected a mapping of at least one %s",
                         what);
        return NULL;
    }
    void *items = mem_calloc((size_t)fy_node_mapping_item_count(v), size);
    if (!items)
        config_walk_fail(w, TANDEM_ERR_NOMEM, v, path, "out of memory");
    return items;
}

bool config_walk_map_each(struct config_walk *w, struct fy_node *m, const char *path,
                          size_t name_cap, size_t path_cap, config_walk_entry_fn fn, void *ctx) {
    char name[256], sub[1024];
    if (name_cap > sizeof name || path_cap > sizeof sub)
        return config_walk_fail(w, TANDEM_ERR_INVAL, m, path, "key or path cap too large");
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(m, &it))) {
        struct fy_node *k = fy_node_pair_key(pair);
        if (!config_walk_scalar(w, k, path, name, name_cap))
            return false;
        snprintf(sub, path_cap, "%s%s%s", path, path[0] ? "." : "", name);
        if (!fn(w, k, fy_node_pair_value(pair), name, sub, ctx))
            return false;
    }
    return true;
}
