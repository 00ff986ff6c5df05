/* synth.c: `tandem gguf synth`, models from JSON specs.
 *
 * A spec (format in docs/inspect.md) is applied to an empty gguf_edit in a
 * fixed order: copy keys from other GGUFs, set keys, edit arrays (append,
 * truncate, pad_to), add tensors (with per-layer name patterns). Every field
 * is validated, so a typo is an error naming the spec, the entry and the
 * problem. Tensor contents come from tensor_fill, so output is deterministic. */
#include "gguf/synth.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/gguf_edit.h"
#include "base/mem.h"

#define SPEC_STRING_MAX ((size_t)1 << 30)

#define SPEC_STRING_MAX ((size_t)1 << 30)

struct synth {
    const char *spec_path;
    char *out_err;            /* the caller's message buffer */
    size_t out_errlen;
    char dir[PATH_MAX];      /* the spec's folder: relative paths start there */
    struct gguf_edit *edit;
    char err[1024];
};

/* Expands ${VAR} from the environment; a relative path (for "from" and file:
 * values) is taken from the spec's folder. Returns a mem_alloc'ed string, or
 * NULL when out of memory. */
static char *expand(const struct synth *sy, const char *text, int is_path) {
    struct mem_buf out;
    mem_buf_init(&out, SPEC_STRING_MAX);
    tandem_err e = TANDEM_OK;
    if (is_path && text[0] != '/' && strncmp(text, "${", 2)) {
        e = mem_buf_append(&out, sy->dir, strlen(sy->dir));
        if (e == TANDEM_OK)
            e = mem_buf_append(&out, "/", 1);
    }
    for (const char *p = text; *p && e == TANDEM_OK;) {
        const char *end = !strncmp(p, "${", 2) ? strchr(p, '}') : NULL;
        if (end) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(end - p - 2), p + 2);
            const char *v = getenv(name);
            e = mem_buf_append(&out, v ? v : "", v ? strlen(v) : 0);
            p = end + 1;
        } else {
            size_t n = strcspn(p + 1, "$") + 1;
            e = mem_buf_append(&out, p, n);
            p += n;
        }
    }
    char *result = e == TANDEM_OK ? mem_strdup(out.data ? out.data : "") : NULL;
    mem_buf_deinit(&out);
    return result;
}

static int fail(struct synth *sy, const char *where, const char *what) {
    tandem_errmsg(sy->out_err, sy->out_errlen, "%s: %s: %s", sy->spec_path, where, what);
    return 1;
}

static int copy_keys(struct synth *sy, const json_t *entry, size_t i) {
    char where[64];
    snprintf(where, sizeof where, "copy[%zu]", i);
    const char *from = json_string_value(json_object_get(entry, "from"));
    const char *prefix = json_string_value(json_object_get(entry, "prefix"));
    if (!from || !prefix)
        return fail(sy, where, "expected {\"from\": FILE, \"prefix\": KEY-PREFIX}");
    char *path = expand(sy, from, 1);
    struct gguf *g = NULL;
    tandem_err e = path ? gguf_open(path, &g, sy->err, sizeof sy->err) : TANDEM_ERR_NOMEM;
    mem_free(path);
    if (e != TANDEM_OK)
        return fail(sy, where, e == TANDEM_ERR_NOMEM ? "out of memory" : sy->err);
    size_t plen = strlen(prefix), copied = 0;
    for (uint64_t k = 0; e == TANDEM_OK && k < gguf_kv_count(g); k++) {
        const struct gguf_kv *kv = gguf_kv_at(g, k);
        if (kv->key.len >= plen && !memcmp(kv->key.ptr, prefix, plen)) {
            e = gguf_edit_copy_kv(sy->edit, kv); /* copies the bytes: g may close after */
            copied++;
        }
    }
    gguf_free(g);
    if (e != TANDEM_OK)
        return fail(sy, where, "out of memory");
    return copied ? 0 : fail(sy, where, "no key in that file has this prefix");
}

/* One "set" entry: KEY=TYPE:VALUE with ${VAR} expanded, file: paths from the spec folder. */
static int set_key(struct synth *sy, const char *spec, size_t i) {
    char where[64];
    snprintf(where, sizeof where, "set[%zu]", i);
    const char *file = strstr(spec, "=file:");
    char *expanded = NULL;
    if (file) {
        char *path = expand(sy, file + 6, 1);
        size_t klen = (size_t)(file - spec);
        expanded = path ? mem_alloc(klen + strlen(path) + 7) : NULL;
        if (expanded)
            sprintf(expanded, "%.*s=file:%s", (int)klen, spec, path);
        mem_free(path);
    } else {
        expanded = expand(sy, spec, 0);
    }
    tandem_err e = expanded ? gguf_edit_set_spec(sy->edit, expanded, sy->err, sizeof sy->err)
                            : TANDEM_ERR_NOMEM;
    mem_free(expanded);
    return e == TANDEM_OK ? 0 : fail(sy, where, e == TANDEM_ERR_NOMEM ? "out of memory" : sy->err);
}

static int parse_fill(struct synth *sy, const json_t *t, const char *name, struct tensor_fill *f,
                      uint64_t seed) {
    const char *kind = json_string_value(json_object_get(t, "fill"));
    *f = (struct tensor_fill){.kind = TENSOR_FILL_HOLE};
    if (!kind || !strcmp(kind, "hole"))
        return 0;
    if (!strcmp(kind, "const")) {
        f->kind = TENSOR_FILL_CONST;
        f->value = (float)json_number_value(json_object_get(t, "value"));
        return 0;
    }
    if (!strcmp(kind, "normal")) {
        f->kind = TENSOR_FILL_NORMAL;
        f->mean = (float)json_number_value(json_object_get(t, "mean"));
        f->std = (float)json_number_value(json_object_get(t, "std"));
        f->seed = tensor_fill_seed(seed, name);
        return 0;
    }
    return fail(sy, name, "fill must be \"hole\", \"const\" or \"normal\"");
}

/* Reads a shape: integers, or "vocab" for the length of tokenizer.ggml.tokens. */
static int parse_shape(struct synth *sy, const json_t *shape, const char *name, int64_t ne[4],
                       uint32_t *n_dims) {
    size_t n = json_array_size(shape);
    if (!json_is_array(shape) || n < 1 || n > 4)
        return fail(sy, name, "shape must be an array of 1 to 4 dimensions");
    for (size_t d = 0; d < n; d++) {
        const json_t *v = json_array_get(shape, d);
        enum gguf_type elem;
        uint64_t count;
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            ne[d] = json_integer_value(v);
        else if (json_is_string(v) && !strcmp(json_string_value(v), "vocab") &&
                 gguf_edit_array_info(sy->edit, "tokenizer.ggml.tokens", &elem, &count) == TANDEM_OK)
            ne[d] = (int64_t)count;
        else
            return fail(sy, name, "a dimension must be a non-negative integer or \"vocab\" "
                                  "(with tokenizer.ggml.tokens defined)");
    }
    *n_dims = (uint32_t)n;
    return 0;
}

/* Writes name with every "{i}" replaced by layer into out[cap]. */
static void layer_name(char *out, size_t cap, const char *pattern, long layer) {
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < cap;) {
        if (!strncmp(p, "{i}", 3)) {
            o += (size_t)snprintf(out + o, cap - o, "%ld", layer);
            p += 3;
        } else {
            out[o++] = *p++;
        }
    }
    out[o < cap ? o : cap - 1] = '\0';
}

static int add_tensor(struct synth *sy, const json_t *t, const char *name, uint64_t seed) {
    uint32_t type, n_dims;
    int64_t ne[4];
    struct tensor_fill fill;
    const char *type_name = json_string_value(json_object_get(t, "type"));
    if (!type_name || ggml_type_find(type_name, &type) != TANDEM_OK)
        return fail(sy, name, "type must name a ggml type (F32, F16, Q8_0, Q4_K, ...)");
    if (parse_shape(sy, json_object_get(t, "shape"), name, ne, &n_dims) ||
        parse_fill(sy, t, name, &fill, seed))
        return 1;
    tandem_err e = gguf_edit_add_tensor(sy->edit, name, type, n_dims, ne, &fill, sy->err,
                                        sizeof sy->err);
    return e == TANDEM_OK ? 0 : fail(sy, name, sy->err);
}

static int add_tensors(struct synth *sy, const json_t *tensors, uint64_t seed) {
    size_t i;
    const json_t *t;
    json_array_foreach(tensors, i, t) {
        const char *pattern = json_string_value(json_object_get(t, "name"));
        const json_t *layers = json_object_get(t, "layers");
        if (!pattern)
            return fail(sy, "tensors", "every tensor needs a \"name\"");
        if (!layers) {
            if (add_tensor(sy, t, pattern, seed))
                return 1;
            continue;
        }
        size_t j;
        const json_t *layer;
        if (!json_is_array(layers))
            return fail(sy, pattern, "\"layers\" must be an array of layer numbers");
        json_array_foreach(layers, j, layer) {
            char name[128];
            if (!json_is_integer(layer) || json_integer_value(layer) < 0)
                return fail(sy, pattern, "\"layers\" must be an array of layer numbers");
            layer_name(name, sizeof name, pattern, (long)json_integer_value(layer));
            if (add_tensor(sy, t, name, seed))
                return 1;
        }
    }
    return 0;
}

/* Padding elements for pad_to: fill is a number, or a string where {k} counts
 * from 0 within the padding and {n} is the element's index in the array. */
static char *padding_json(const json_t *fill, uint64_t from, uint64_t to) {
    json_t *arr = json_array();
    for (uint64_t n = from; arr && n < to; n++) {
        json_t *item;
        if (json_is_string(fill)) {
            char k[24], idx[24], text[256];
            snprintf(k, sizeof k, "%llu", (unsigned long long)(n - from));
            snprintf(idx, sizeof idx, "%llu", (unsigned long long)n);
            size_t o = 0;
            for (const char *p = json_string_value(fill); *p && o + 24 < sizeof text;) {
                const char *sub = !strncmp(p, "{k}", 3) ? k : !strncmp(p, "{n}", 3) ? idx : NULL;
                if (sub) {
                    o += (size_t)snprintf(text + o, sizeof text - o, "%s", sub);
                    p += 3;
                } else {
                    text[o++] = *p++;
                }
            }
            text[o] = '\0';
            item = json_string(text);
        } else {
            item = json_deep_copy(fill);
        }
        if (json_array_append_new(arr, item)) {
            json_decref(arr);
            return NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return text;
}

/* One "arrays" entry: {"key", "append": [...]} | {"key", "truncate": N} |
 * {"key", "pad_to": N, "fill": VALUE}, applied in order. */
static int array_op(struct synth *sy, const json_t *op, size_t i) {
    char where[64];
    snprintf(where, sizeof where, "arrays[%zu]", i);
    const char *key = json_string_value(json_object_get(op, "key"));
    const json_t *append = json_object_get(op, "append"), *trunc = json_object_get(op, "truncate"),
                 *pad = json_object_get(op, "pad_to");
    enum gguf_type elem;
    uint64_t count;
    if (!key || gguf_edit_array_info(sy->edit, key, &elem, &count) != TANDEM_OK)
        return fail(sy, where, "\"key\" must name an array defined by copy or set");
    char *text = NULL;
    tandem_err e = TANDEM_OK;
    if (json_is_array(append))
        text = json_dumps(append, JSON_COMPACT);
    else if (json_is_integer(trunc) && json_integer_value(trunc) >= 0)
        e = gguf_edit_truncate(sy->edit, key, (uint64_t)json_integer_value(trunc));
    else if (json_is_integer(pad) && json_object_get(op, "fill"))
        text = padding_json(json_object_get(op, "fill"), count, (uint64_t)json_integer_value(pad));
    else
        return fail(sy, where, "expected \"append\": [...], \"truncate\": N, or \"pad_to\": N with \"fill\"");
    if (e == TANDEM_OK && (json_is_array(append) || json_is_integer(pad)))
        e = text ? gguf_edit_append_json(sy->edit, key, text, sy->err, sizeof sy->err)
                 : TANDEM_ERR_NOMEM;
    free(text);
    if (e == TANDEM_ERR_NOMEM)
        return fail(sy, where, "out of memory");
    return e == TANDEM_OK ? 0 : fail(sy, where, sy->err);
}

/* Refuses keys outside allowed (NULL-terminated), so that a typo is an error. */
static int known_keys(struct synth *sy, const json_t *obj, const char *where,
                      const char *const *allowed) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        const char *const *a = allowed;
        while (*a && strcmp(*a, key))
            a++;
        if (!*a) {
            char what[160];
            snprintf(what, sizeof what, "unknown field \"%s\"", key);
            return fail(sy, where, what);
        }
    }
    return 0;
}

static int check_fields(struct synth *sy, const json_t *spec) {
    static const char *const top[] = {"description", "seed", "copy", "set", "arrays", "tensors", NULL};
    static const char *const tensor[] = {"name", "layers", "shape", "type", "fill", "value", "mean",
                                         "std", NULL};
    if (known_keys(sy, spec, "spec", top))
        return 1;
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(spec, "tensors"), i, t) {
        char where[64];
        snprintf(where, sizeof where, "tensors[%zu]", i);
        if (!json_is_object(t))
            return fail(sy, where, "expected an object");
        if (known_keys(sy, t, where, tensor))
            return 1;
    }
    return 0;
}

static int apply_spec(struct synth *sy, const json_t *spec) {
    size_t i;
    const json_t *v;
    if (check_fields(sy, spec))
        return 1;
    json_array_foreach(json_object_get(spec, "copy"), i, v)
        if (copy_keys(sy, v, i))
            return 1;
    json_array_foreach(json_object_get(spec, "set"), i, v)
        if (!json_is_string(v) || set_key(sy, json_string_value(v), i))
            return json_is_string(v) ? 1 : fail(sy, "set", "entries must be strings");
    json_array_foreach(json_object_get(spec, "arrays"), i, v)
        if (array_op(sy, v, i))
            return 1;
    uint64_t seed = (uint64_t)json_integer_value(json_object_get(spec, "seed"));
    return add_tensors(sy, json_object_get(spec, "tensors"), seed);
}

tandem_err synth_write(const char *spec_path, const char *out_path, char *err, size_t errlen) {
    struct synth sy = {.spec_path = spec_path, .out_err = err, .out_errlen = errlen};
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", spec_path);
    snprintf(sy.dir, sizeof sy.dir, "%s", dirname(copy));
    json_error_t jerr;
    json_t *spec = json_load_file(spec_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!spec || !json_is_object(spec)) {
        tandem_errmsg(err, errlen, "%s:%d:%d: %s", spec_path, jerr.line, jerr.column,
                      spec ? "expected a JSON object" : jerr.text);
        json_decref(spec);
        return TANDEM_ERR_FORMAT;
    }
    tandem_err e = gguf_edit_new(NULL, &sy.edit);
    if (e != TANDEM_OK)
        fail(&sy, "synth", "out of memory");
    else if (apply_spec(&sy, spec))
        e = TANDEM_ERR_INVAL;
    else if ((e = gguf_edit_write(sy.edit, out_path, sy.err, sizeof sy.err)) != TANDEM_OK)
        fail(&sy, out_path, sy.err);
    gguf_edit_free(sy.edit);
    json_decref(spec);
    return e;
}
