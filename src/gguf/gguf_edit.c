/* gguf_edit.c: the GGUF writer behind `tandem gguf set|rm|synth`.
 *
 * A change is a key plus either a removal mark or its new value, already
 * encoded as GGUF bytes (u32 type, then the value). Writing never re-encodes
 * untouched source values: their raw bytes are copied from the mapping, so a
 * key/value that was not edited reads back bit-identical. Output tensors are
 * the source's (streamed from its mapping) followed by added ones (generated
 * row by row by tensor_fill; holes are skipped with a seek, so they stay
 * sparse), each placed at the next multiple of the output's alignment. With
 * no source, the edit starts from an empty GGUF v3. */
#include "gguf/gguf_edit.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/ggml_types.h"
#include "base/mem.h"

#define VALUE_MAX ((size_t)1 << 30) /* largest value one spec may produce */
#define WRITE_BUFFER ((size_t)1 << 20)

struct change {
    char *key;
    int remove;
    struct mem_buf value; /* u32 type + encoded value; empty when remove */
};

struct added_tensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[4]; /* unused dimensions are 1 */
    uint64_t size; /* bytes */
    struct tensor_fill fill;
};

struct gguf_edit {
    const struct gguf *src; /* NULL: synthesis from nothing */
    struct change *changes;
    size_t n, cap;
    struct added_tensor *added;
    size_t n_added, cap_added;
};


tandem_err gguf_edit_new(const struct gguf *src, struct gguf_edit **out) {
    *out = mem_calloc(1, sizeof **out);
    if (!*out)
        return TANDEM_ERR_NOMEM;
    (*out)->src = src;
    return TANDEM_OK;
}

void gguf_edit_free(struct gguf_edit *edit) {
    if (!edit)
        return;
    for (size_t i = 0; i < edit->n; i++) {
        mem_free(edit->changes[i].key);
        mem_buf_deinit(&edit->changes[i].value);
    }
    for (size_t i = 0; i < edit->n_added; i++)
        mem_free(edit->added[i].name);
    mem_free(edit->changes);
    mem_free(edit->added);
    mem_free(edit);
}

static struct change *find_change(const struct gguf_edit *edit, const char *key, size_t klen) {
    for (size_t i = 0; i < edit->n; i++)
        if (strlen(edit->changes[i].key) == klen && !memcmp(edit->changes[i].key, key, klen))
            return &edit->changes[i];
    return NULL;
}

/* Returns the change for key, creating an empty one (value reset) if needed. */
static struct change *fresh_change(struct gguf_edit *edit, const char *key) {
    struct change *c = find_change(edit, key, strlen(key));
    if (c) {
        mem_buf_deinit(&c->value);
    } else {
        if (mem_array_grow((void **)&edit->changes, &edit->cap, edit->n + 1, sizeof *edit->changes,
                           SIZE_MAX) != TANDEM_OK)
            return NULL;
        char *k = mem_strdup(key);
        if (!k)
            return NULL;
        c = &edit->changes[edit->n++];
        c->key = k;
    }
    c->remove = 0;
    mem_buf_init(&c->value, VALUE_MAX);
    return c;
}

/* --- encoding --------------------------------------------------------------- */

static tandem_err put(struct mem_buf *b, const void *p, size_t n) {
    return mem_buf_append(b, p, n);
}

static tandem_err put_u32(struct mem_buf *b, uint32_t v) { return put(b, &v, sizeof v); }
static tandem_err put_u64(struct mem_buf *b, uint64_t v) { return put(b, &v, sizeof v); }

static tandem_err put_str(struct mem_buf *b, const char *s, size_t n) {
    tandem_err e = put_u64(b, n);
    return e == TANDEM_OK ? put(b, s, n) : e;
}

struct type_name {
    const char *name;
    enum gguf_type type;
};

static const struct type_name type_names[] = {
    {"u8", GGUF_TYPE_UINT8},   {"i8", GGUF_TYPE_INT8},     {"u16", GGUF_TYPE_UINT16},
    {"i16", GGUF_TYPE_INT16},  {"u32", GGUF_TYPE_UINT32},  {"i32", GGUF_TYPE_INT32},
    {"u64", GGUF_TYPE_UINT64}, {"i64", GGUF_TYPE_INT64},   {"f32", GGUF_TYPE_FLOAT32},
    {"f64", GGUF_TYPE_FLOAT64}, {"bool", GGUF_TYPE_BOOL},  {"str", GGUF_TYPE_STRING},
};

static int type_from_name(const char *name, size_t len, enum gguf_type *out) {
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (strlen(type_names[i].name) == len && !strncmp(type_names[i].name, name, len)) {
            *out = type_names[i].type;
            return 1;
        }
    return 0;
}

/* Bytes of an integer type, 0 for every other type. */
static size_t int_width(enum gguf_type t) {
    int is_int = t <= GGUF_TYPE_INT32 || t == GGUF_TYPE_UINT64 || t == GGUF_TYPE_INT64;
    return is_int ? (size_t)gguf_type_size(t) : 0;
}

static int is_signed(enum gguf_type t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 ||
           t == GGUF_TYPE_INT64;
}

/* Encodes an integer of type t (little-endian, as this host is), range-checked. */
static tandem_err put_int(struct mem_buf *b, enum gguf_type t, int negative, uint64_t mag,
                          char *err, size_t errlen) {
    size_t w = int_width(t);
    uint64_t umax = w == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * w)) - 1;
    uint64_t pos_max = is_signed(t) ? umax >> 1 : umax, neg_max = is_signed(t) ? (umax >> 1) + 1 : 0;
    if ((negative && mag > neg_max) || (!negative && mag > pos_max)) {
        tandem_errmsg(err, errlen, "%s%llu does not fit in %s", negative ? "-" : "",
                      (unsigned long long)mag, gguf_type_name(t));
        return TANDEM_ERR_INVAL;
    }
    uint64_t bits = negative ? (uint64_t)0 - mag : mag;
    return put(b, &bits, w); /* the low w bytes on a little-endian host */
}

static tandem_err parse_int_text(const char *text, int *negative, uint64_t *mag) {
    const char *p = text;
    *negative = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    if (*p < '0' || *p > '9')
        return TANDEM_ERR_INVAL;
    char *end;
    errno = 0;
    *mag = strtoull(p, &end, 10);
    return errno || *end ? TANDEM_ERR_INVAL : TANDEM_OK;
}

static tandem_err put_float(struct mem_buf *b, enum gguf_type t, double v) {
    if (t == GGUF_TYPE_FLOAT32) {
        float f = (float)v;
        return put(b, &f, sizeof f);
    }
    return put(b, &v, sizeof v);
}

/* Encodes the scalar text for type t (not ARRAY). */
static tandem_err put_scalar_text(struct mem_buf *b, enum gguf_type t, const char *text, char *err,
                                  size_t errlen) {
    if (t == GGUF_TYPE_STRING)
        return put_str(b, text, strlen(text));
    if (t == GGUF_TYPE_BOOL) {
        int v = !strcmp(text, "true") || !strcmp(text, "1");
        if (!v && strcmp(text, "false") && strcmp(text, "0")) {
            tandem_errmsg(err, errlen, "expected true or false, got \"%s\"", text);
            return TANDEM_ERR_INVAL;
        }
        uint8_t byte = (uint8_t)v;
        return put(b, &byte, 1);
    }
    if (t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) {
        char *end;
        double v = strtod(text, &end);
        if (!*text || *end) {
            tandem_errmsg(err, errlen, "expected a number, got \"%s\"", text);
            return TANDEM_ERR_INVAL;
        }
        return put_float(b, t, v);
    }
    int negative;
    uint64_t mag;
    if (parse_int_text(text, &negative, &mag) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "expected an integer, got \"%s\"", text);
        return TANDEM_ERR_INVAL;
    }
    return put_int(b, t, negative, mag, err, errlen);
}

/* Encodes one JSON array element as type t. */
static tandem_err put_json(struct mem_buf *b, enum gguf_type t, const json_t *v, size_t i,
                           char *err, size_t errlen) {
    if (t == GGUF_TYPE_STRING && json_is_string(v))
        return put_str(b, json_string_value(v), json_string_length(v));
    if (t == GGUF_TYPE_BOOL && json_is_boolean(v)) {
        uint8_t byte = json_is_true(v);
        return put(b, &byte, 1);
    }
    if ((t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64) && json_is_number(v))
        return put_float(b, t, json_number_value(v));
    if (int_width(t) && json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        return put_int(b, t, n < 0, n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n, err, errlen);
    }
    tandem_errmsg(err, errlen, "array element %zu is not a %s", i, gguf_type_name(t));
    return TANDEM_ERR_INVAL;
}

static tandem_err put_array_json(struct mem_buf *b, enum gguf_type elem, const char *text,
                                 char *err, size_t errlen) {
    json_error_t jerr;
    json_t *arr = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!arr || !json_is_array(arr)) {
        tandem_errmsg(err, errlen, "expected a JSON array%s%s", arr ? "" : ": ", arr ? "" : jerr.text);
        json_decref(arr);
        return TANDEM_ERR_INVAL;
    }
    tandem_err e = put_u32(b, GGUF_TYPE_ARRAY);
    if (e == TANDEM_OK) e = put_u32(b, elem);
    if (e == TANDEM_OK) e = put_u64(b, json_array_size(arr));
    for (size_t i = 0; e == TANDEM_OK && i < json_array_size(arr); i++)
        e = put_json(b, elem, json_array_get(arr, i), i, err, errlen);
    json_decref(arr);
    return e;
}

static tandem_err put_file(struct mem_buf *b, const char *path, char *err, size_t errlen) {
    struct mem_buf text;
    mem_buf_init(&text, VALUE_MAX - 16);
    tandem_err e = mem_buf_append_file(&text, path);
    if (e == TANDEM_ERR_IO) {
        tandem_errmsg(err, errlen, "cannot read %s: %s", path, strerror(errno));
        mem_buf_deinit(&text);
        return e;
    }
    if (e == TANDEM_OK)
        e = put_u32(b, GGUF_TYPE_STRING);
    if (e == TANDEM_OK)
        e = put_str(b, text.data ? text.data : "", text.len);
    if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: %s", path, tandem_strerror(e));
    mem_buf_deinit(&text);
    return e;
}

/* Encodes "type:value" into b. */
static tandem_err encode_typed(struct mem_buf *b, const char *typed, char *err, size_t errlen) {
    const char *colon = strchr(typed, ':');
    if (!colon) {
        tandem_errmsg(err, errlen, "expected type:value after '=', got \"%s\"", typed);
        return TANDEM_ERR_INVAL;
    }
    const char *value = colon + 1;
    size_t tlen = (size_t)(colon - typed);
    enum gguf_type t;
    if (tlen == 4 && !strncmp(typed, "file", 4))
        return put_file(b, value, err, errlen);
    if (tlen > 5 && !strncmp(typed, "arr[", 4) && typed[tlen - 1] == ']' &&
        type_from_name(typed + 4, tlen - 5, &t))
        return put_array_json(b, t, value, err, errlen);
    if (!type_from_name(typed, tlen, &t)) {
        tandem_errmsg(err, errlen, "unknown type \"%.*s\" (u8 i8 u16 i16 u32 i32 u64 i64 f32 "
                      "f64 bool str file arr[T])", (int)tlen, typed);
        return TANDEM_ERR_INVAL;
    }
    tandem_err e = put_u32(b, t);
    return e == TANDEM_OK ? put_scalar_text(b, t, value, err, errlen) : e;
}

tandem_err gguf_edit_set_spec(struct gguf_edit *edit, const char *spec, char *err, size_t errlen) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) {
        tandem_errmsg(err, errlen, "\"%s\": expected key=type:value", spec);
        return TANDEM_ERR_INVAL;
    }
    char *key = mem_strndup(spec, (size_t)(eq - spec));
    if (!key)
        return TANDEM_ERR_NOMEM;
    struct mem_buf value;
    mem_buf_init(&value, VALUE_MAX);
    char why[512] = "";
    tandem_err e = encode_typed(&value, eq + 1, why, sizeof why);
    struct change *c = e == TANDEM_OK ? fresh_change(edit, key) : NULL;
    if (e == TANDEM_OK && !c)
        e = TANDEM_ERR_NOMEM;
    if (c) {
        c->value = value; /* the change takes the encoded bytes */
        mem_buf_init(&value, VALUE_MAX);
    } else if (e != TANDEM_ERR_NOMEM) {
        tandem_errmsg(err, errlen, "%s: %s", key, why);
    }
    mem_buf_deinit(&value);
    mem_free(key);
    return e;
}

tandem_err gguf_edit_remove(struct gguf_edit *edit, const char *key, char *err, size_t errlen) {
    if (!gguf_kv_find(edit->src, key)) {
        tandem_errmsg(err, errlen, "%s: no such key", key);
        return TANDEM_ERR_NOTFOUND;
    }
    struct change *c = fresh_change(edit, key);
    if (!c)
        return TANDEM_ERR_NOMEM;
    c->remove = 1;
    return TANDEM_OK;
}

/* --- copying, appending, adding tensors -------------------------------------- */

tandem_err gguf_edit_copy_kv(struct gguf_edit *edit, const struct gguf_kv *kv) {
    char *key = mem_strndup(kv->key.ptr, (size_t)kv->key.len);
    struct change *c = key ? fresh_change(edit, key) : NULL;
    mem_free(key);
    if (!c)
        return TANDEM_ERR_NOMEM;
    uint32_t type = kv->type;
    tandem_err e = put_u32(&c->value, type);
    return e == TANDEM_OK ? put(&c->value, kv->value, (size_t)kv->value_len) : e;
}

/* The key's value as the edit currently defines it: type and encoded bytes. */
static tandem_err current_value(const struct gguf_edit *edit, const char *key, uint32_t *type,
                                const uint8_t **value, uint64_t *len) {
    const struct change *c = find_change(edit, key, strlen(key));
    if (c && !c->remove) {
        memcpy(type, c->value.data, sizeof *type);
        *value = (const uint8_t *)c->value.data + 4;
        *len = c->value.len - 4;
        return TANDEM_OK;
    }
    const struct gguf_kv *kv = c ? NULL : gguf_kv_find(edit->src, key);
    if (!kv)
        return TANDEM_ERR_NOTFOUND;
    *type = kv->type;
    *value = kv->value;
    *len = kv->value_len;
    return TANDEM_OK;
}

tandem_err gguf_edit_array_info(const struct gguf_edit *edit, const char *key, enum gguf_type *elem,
                                uint64_t *count) {
    uint32_t type, elem_type;
    const uint8_t *value;
    uint64_t len;
    tandem_err e = current_value(edit, key, &type, &value, &len);
    if (e == TANDEM_OK && type != GGUF_TYPE_ARRAY)
        e = TANDEM_ERR_TYPE;
    if (e == TANDEM_OK) {
        memcpy(&elem_type, value, 4);
        memcpy(count, value + 4, sizeof *count);
        *elem = (enum gguf_type)elem_type;
    }
    return e;
}

/* Replaces key's value by: array header (elem type, count) + the first
 * old_bytes of old elements + the elements in more. */
static tandem_err replace_array(struct gguf_edit *edit, const char *key, uint32_t elem,
                                uint64_t count, const uint8_t *old, uint64_t old_bytes,
                                const void *more, size_t more_bytes) {
    struct mem_buf joined;
    mem_buf_init(&joined, VALUE_MAX);
    tandem_err e = put_u32(&joined, GGUF_TYPE_ARRAY);
    if (e == TANDEM_OK) e = put_u32(&joined, elem);
    if (e == TANDEM_OK) e = put_u64(&joined, count);
    if (e == TANDEM_OK) e = put(&joined, old, (size_t)old_bytes);
    if (e == TANDEM_OK && more_bytes) e = put(&joined, more, more_bytes);
    struct change *c = e == TANDEM_OK ? fresh_change(edit, key) : NULL; /* frees old: used above */
    if (e == TANDEM_OK && !c)
        e = TANDEM_ERR_NOMEM;
    if (c)
        c->value = joined; /* the change takes the bytes */
    else
        mem_buf_deinit(&joined);
    return e;
}

tandem_err gguf_edit_append_json(struct gguf_edit *edit, const char *key, const char *json_array,
                                 char *err, size_t errlen) {
    uint32_t type, elem;
    const uint8_t *old;
    uint64_t old_len, n_old, n_more;
    if (current_value(edit, key, &type, &old, &old_len) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "%s: no such key to append to", key);
        return TANDEM_ERR_NOTFOUND;
    }
    if (type != GGUF_TYPE_ARRAY) {
        tandem_errmsg(err, errlen, "%s: not an array", key);
        return TANDEM_ERR_TYPE;
    }
    memcpy(&elem, old, 4);
    memcpy(&n_old, old + 4, 8);
    struct mem_buf more;
    mem_buf_init(&more, VALUE_MAX);
    char why[512] = "";
    tandem_err e = put_array_json(&more, (enum gguf_type)elem, json_array, why, sizeof why);
    if (e == TANDEM_OK) {
        memcpy(&n_more, more.data + 8, 8); /* after: u32 ARRAY, u32 elem */
        e = replace_array(edit, key, elem, n_old + n_more, old + 12, old_len - 12, more.data + 16,
                          more.len - 16);
    } else {
        tandem_errmsg(err, errlen, "%s: %s", key, why);
    }
    mem_buf_deinit(&more);
    return e;
}

/* Bytes taken by the first n elements of an encoded array body (after its
 * 12-byte header); the body came from a validated file or our own encoder. */
static uint64_t elements_bytes(uint32_t elem, const uint8_t *body, uint64_t body_len, uint64_t n) {
    if (elem != GGUF_TYPE_STRING)
        return n * gguf_type_size((enum gguf_type)elem);
    uint64_t off = 0, len;
    for (uint64_t i = 0; i < n && off + 8 <= body_len; i++) {
        memcpy(&len, body + off, 8);
        off += 8 + len;
    }
    return off;
}

tandem_err gguf_edit_truncate(struct gguf_edit *edit, const char *key, uint64_t n) {
    uint32_t type, elem;
    const uint8_t *old;
    uint64_t old_len, count;
    tandem_err e = current_value(edit, key, &type, &old, &old_len);
    if (e != TANDEM_OK)
        return e;
    if (type != GGUF_TYPE_ARRAY)
        return TANDEM_ERR_TYPE;
    memcpy(&elem, old, 4);
    memcpy(&count, old + 4, 8);
    if (count <= n)
        return TANDEM_OK;
    return replace_array(edit, key, elem, n, old + 12, elements_bytes(elem, old + 12, old_len - 12, n),
                         NULL, 0);
}

static int tensor_name_taken(const struct gguf_edit *edit, const char *name) {
    if (gguf_tensor_find(edit->src, name))
        return 1;
    for (size_t i = 0; i < edit->n_added; i++)
        if (!strcmp(edit->added[i].name, name))
            return 1;
    return 0;
}

static tandem_err check_new_tensor(const struct gguf_edit *edit, struct added_tensor *t,
                                   const char *name, char *err, size_t errlen) {
    const struct ggml_type_info *info = ggml_type_get(t->type);
    if (strlen(name) >= GGUF_MAX_NAME || !*name || tensor_name_taken(edit, name)) {
        tandem_errmsg(err, errlen, "tensor '%s': name empty, too long (max %d bytes) or taken",
                      name, GGUF_MAX_NAME - 1);
        return TANDEM_ERR_INVAL;
    }
    if (!info || t->n_dims < 1 || t->n_dims > 4 ||
        ggml_type_tensor_bytes(t->type, t->ne, t->n_dims, &t->size) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "tensor '%s': invalid type or shape for %s", name,
                      info ? info->name : "an unknown type");
        return TANDEM_ERR_INVAL;
    }
    if (!tensor_fill_supports(t->fill.kind, t->type)) {
        tandem_errmsg(err, errlen, "tensor '%s': this fill cannot produce %s data", name, info->name);
        return TANDEM_ERR_INVAL;
    }
    return TANDEM_OK;
}

tandem_err gguf_edit_add_tensor(struct gguf_edit *edit, const char *name, uint32_t type,
                                uint32_t n_dims, const int64_t ne[4],
                                const struct tensor_fill *fill, char *err, size_t errlen) {
    struct added_tensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .fill = *fill};
    for (uint32_t d = 0; d < n_dims && d < 4; d++)
        t.ne[d] = ne[d];
    tandem_err e = check_new_tensor(edit, &t, name, err, errlen);
    if (e != TANDEM_OK)
        return e;
    if (mem_array_grow((void **)&edit->added, &edit->cap_added, edit->n_added + 1,
                       sizeof *edit->added, SIZE_MAX) != TANDEM_OK ||
        !(t.name = mem_strdup(name)))
        return TANDEM_ERR_NOMEM;
    edit->added[edit->n_added++] = t;
    return TANDEM_OK;
}

/* --- writing -------------------------------------------------------------- */

struct out {
    FILE *f;
    uint64_t pos; /* bytes written so far */
};

static void out_bytes(struct out *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) == n)
        o->pos += n;
    else if (n)
        o->pos = UINT64_MAX; /* poisons every later size check; ferror() reports it */
}

static void out_u32(struct out *o, uint32_t v) { out_bytes(o, &v, sizeof v); }
static void out_u64(struct out *o, uint64_t v) { out_bytes(o, &v, sizeof v); }

static void out_pad(struct out *o, uint64_t to) {
    static const char zeros[256];
    while (o->pos < to) {
        uint64_t n = to - o->pos < sizeof zeros ? to - o->pos : sizeof zeros;
        out_bytes(o, zeros, (size_t)n);
    }
}

static uint64_t align_up(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* The change that applies to a source key, or NULL. */
static const struct change *change_for(const struct gguf_edit *edit, const struct gguf_kv *kv) {
    return find_change(edit, kv->key.ptr, (size_t)kv->key.len);
}

static int is_new_key(const struct gguf_edit *edit, const struct change *c) {
    return !c->remove && !gguf_kv_find(edit->src, c->key);
}

static uint64_t output_kv_count(const struct gguf_edit *edit) {
    uint64_t n = gguf_kv_count(edit->src);
    for (size_t i = 0; i < edit->n; i++) {
        if (edit->changes[i].remove)
            n--;
        else if (is_new_key(edit, &edit->changes[i]))
            n++;
    }
    return n;
}

/* The output's alignment: general.alignment as the edit leaves it (absent: 32),
 * which must be a u32 power of two. */
static tandem_err output_alignment(const struct gguf_edit *edit, uint64_t *out, char *err,
                                   size_t errlen) {
    uint32_t type, v = 0;
    const uint8_t *value;
    uint64_t len;
    if (current_value(edit, "general.alignment", &type, &value, &len) != TANDEM_OK) {
        *out = GGUF_DEFAULT_ALIGNMENT;
        return TANDEM_OK;
    }
    if (type == GGUF_TYPE_UINT32)
        memcpy(&v, value, sizeof v);
    if (type != GGUF_TYPE_UINT32 || v == 0 || (v & (v - 1))) {
        tandem_errmsg(err, errlen, "general.alignment must be a u32 power of two");
        return TANDEM_ERR_INVAL;
    }
    *out = v;
    return TANDEM_OK;
}

static void write_kv(struct out *o, const struct gguf_kv *kv, const struct change *c) {
    out_u64(o, kv->key.len);
    out_bytes(o, kv->key.ptr, (size_t)kv->key.len);
    if (c) {
        out_bytes(o, c->value.data, c->value.len);
    } else {
        out_u32(o, kv->type);
        out_bytes(o, kv->value, (size_t)kv->value_len);
    }
}

static void write_kvs(struct out *o, const struct gguf_edit *edit) {
    for (uint64_t i = 0; i < gguf_kv_count(edit->src); i++) {
        const struct gguf_kv *kv = gguf_kv_at(edit->src, i);
        const struct change *c = change_for(edit, kv);
        if (!c || !c->remove)
            write_kv(o, kv, c);
    }
    for (size_t i = 0; i < edit->n; i++) {
        const struct change *c = &edit->changes[i];
        if (is_new_key(edit, c)) {
            out_u64(o, strlen(c->key));
            out_bytes(o, c->key, strlen(c->key));
            out_bytes(o, c->value.data, c->value.len);
        }
    }
}

/* One output tensor, from the source or added. */
struct out_tensor {
    const char *name;
    uint64_t name_len;
    uint32_t n_dims, type;
    const int64_t *ne;
    uint64_t size;
    const void *data;               /* source tensors: bytes in the mapping */
    const struct tensor_fill *fill; /* added tensors: how to generate them */
};

static uint64_t out_tensor_count(const struct gguf_edit *edit) {
    return gguf_tensor_count(edit->src) + edit->n_added;
}

static struct out_tensor out_tensor_at(const struct gguf_edit *edit, uint64_t i) {
    if (i < gguf_tensor_count(edit->src)) {
        const struct gguf_tensor *t = gguf_tensor_at(edit->src, i);
        return (struct out_tensor){t->name.ptr, t->name.len, t->n_dims, t->type, t->ne, t->size,
                                   gguf_tensor_data(edit->src, t), NULL};
    }
    const struct added_tensor *a = &edit->added[i - gguf_tensor_count(edit->src)];
    return (struct out_tensor){a->name, strlen(a->name), a->n_dims, a->type, a->ne, a->size,
                               NULL, &a->fill};
}

static void write_tensor_infos(struct out *o, const struct gguf_edit *edit, uint64_t alignment) {
    uint64_t cursor = 0;
    for (uint64_t i = 0; i < out_tensor_count(edit); i++) {
        struct out_tensor t = out_tensor_at(edit, i);
        out_u64(o, t.name_len);
        out_bytes(o, t.name, (size_t)t.name_len);
        out_u32(o, t.n_dims);
        for (uint32_t d = 0; d < t.n_dims; d++)
            out_u64(o, (uint64_t)t.ne[d]);
        out_u32(o, t.type);
        uint64_t offset = align_up(cursor, alignment);
        out_u64(o, offset);
        cursor = offset + t.size;
    }
}

/* Moves the write position forward n bytes without writing: a hole. */
static void out_skip(struct out *o, uint64_t n) {
    if (n > (uint64_t)INT64_MAX || fseeko(o->f, (off_t)n, SEEK_CUR) != 0)
        o->pos = UINT64_MAX;
    else if (o->pos != UINT64_MAX)
        o->pos += n;
}

/* Generates an added tensor row by row (holes are skipped, not written). */
static void write_generated(struct out *o, const struct out_tensor *t, uint8_t *row) {
    if (t->fill->kind == TENSOR_FILL_HOLE) {
        out_skip(o, t->size);
        return;
    }
    struct tensor_fill_stream s;
    tensor_fill_begin(&s, t->fill);
    uint64_t rows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    uint64_t row_bytes = rows ? t->size / rows : 0;
    for (uint64_t r = 0; r < rows && o->pos != UINT64_MAX; r++) {
        if (tensor_fill_row(&s, t->type, t->ne[0], row) != TANDEM_OK)
            o->pos = UINT64_MAX;
        else
            out_bytes(o, row, (size_t)row_bytes);
    }
}

static uint64_t largest_row(const struct gguf_edit *edit) {
    uint64_t max = 1, bytes;
    for (size_t i = 0; i < edit->n_added; i++)
        if (ggml_type_row_bytes(edit->added[i].type, edit->added[i].ne[0], &bytes) == TANDEM_OK &&
            bytes > max)
            max = bytes;
    return max;
}

static tandem_err write_tensor_data(struct out *o, const struct gguf_edit *edit, uint64_t alignment) {
    uint8_t *row = mem_alloc((size_t)largest_row(edit));
    if (!row)
        return TANDEM_ERR_NOMEM;
    uint64_t base = align_up(o->pos, alignment);
    out_pad(o, base);
    for (uint64_t i = 0; i < out_tensor_count(edit) && o->pos != UINT64_MAX; i++) {
        struct out_tensor t = out_tensor_at(edit, i);
        out_pad(o, base + align_up(o->pos - base, alignment));
        if (t.data)
            out_bytes(o, t.data, (size_t)t.size);
        else
            write_generated(o, &t, row);
    }
    /* the last tensor is padded too: ggml's reader loads the data section as
     * the sum of every tensor's padded size (gguf.cpp, ctx->size) when it
     * reads the data (llama-quantize's --imatrix does), and refuses a file
     * that ends short of it */
    if (out_tensor_count(edit))
        out_pad(o, base + align_up(o->pos - base, alignment));
    mem_free(row);
    return TANDEM_OK;
}

static tandem_err write_stream(const struct gguf_edit *edit, FILE *f, uint64_t alignment) {
    struct out o = {.f = f};
    out_bytes(&o, "GGUF", 4);
    out_u32(&o, edit->src ? gguf_version(edit->src) : 3); /* synthesis writes GGUF v3 */
    out_u64(&o, out_tensor_count(edit));
    out_u64(&o, output_kv_count(edit));
    write_kvs(&o, edit);
    write_tensor_infos(&o, edit, alignment);
    tandem_err e = write_tensor_data(&o, edit, alignment);
    if (e != TANDEM_OK)
        return e;
    /* a trailing hole has no bytes yet: give the file its full size */
    if (o.pos == UINT64_MAX || fflush(f) != 0 || ferror(f) ||
        ftruncate(fileno(f), (off_t)o.pos) != 0)
        return TANDEM_ERR_IO;
    return TANDEM_OK;
}

/* Opens a temporary file beside path; writes its name into tmp[cap]. */
static FILE *open_temp(const char *path, char *tmp, size_t cap) {
    int n = snprintf(tmp, cap, "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= cap)
        return NULL;
    int fd = mkstemp(tmp);
    if (fd < 0)
        return NULL;
    fchmod(fd, 0644);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
    }
    return f;
}

tandem_err gguf_edit_write(const struct gguf_edit *edit, const char *path, char *err, size_t errlen) {
    uint64_t alignment;
    tandem_err e = output_alignment(edit, &alignment, err, errlen);
    if (e != TANDEM_OK)
        return e;
    char tmp[PATH_MAX];
    FILE *f = open_temp(path, tmp, sizeof tmp);
    if (!f) {
        tandem_errmsg(err, errlen, "%s: cannot create a temporary file beside it: %s", path,
                      strerror(errno));
        return TANDEM_ERR_IO;
    }
    char *buffer = mem_alloc(WRITE_BUFFER);
    if (buffer)
        setvbuf(f, buffer, _IOFBF, WRITE_BUFFER); /* without one, stdio's default works too */
    e = write_stream(edit, f, alignment);
    if (e == TANDEM_OK && fsync(fileno(f)) != 0)
        e = TANDEM_ERR_IO;
    if (fclose(f) != 0 && e == TANDEM_OK)
        e = TANDEM_ERR_IO;
    mem_free(buffer);
    if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
    struct gguf *check = NULL;
    if (e == TANDEM_OK)
        e = gguf_open(tmp, &check, err, errlen); /* the result must parse as it will be read */
    gguf_free(check);
    if (e == TANDEM_OK && rename(tmp, path) != 0) {
        tandem_errmsg(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        e = TANDEM_ERR_IO;
    }
    if (e != TANDEM_OK)
        unlink(tmp);
    return e;
}
