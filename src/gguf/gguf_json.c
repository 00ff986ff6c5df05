/* gguf_json.c: converts parsed GGUF metadata to jansson values.
 *
 * jansson refuses invalid UTF-8, and GGUF strings (vocabulary pieces above
 * all) need not be valid, so strings that jansson rejects are copied with each
 * invalid sequence replaced by U+FFFD. Values come from the reader's
 * accessors, which have already bounds-checked everything. */
#include "gguf/gguf_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gguf/ggml_types.h"
#include "base/jstr.h"
#include "base/mem.h"

json_t *gguf_json_str(struct gguf_str s) {
    return jstr_lossy(s.ptr ? s.ptr : "", (size_t)s.len);
}

static json_t *json_u64(uint64_t v) {
    if (v <= INT64_MAX)
        return json_integer((json_int_t)v);
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    return json_string(text);
}

static json_t *json_f64(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static int is_unsigned(enum gguf_type t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 ||
           t == GGUF_TYPE_UINT64;
}

/* Element i of an array kv (or the scalar itself when i is UINT64_MAX). */
static json_t *element(const struct gguf_kv *kv, enum gguf_type t, uint64_t i) {
    int scalar = i == UINT64_MAX;
    uint64_t u;
    int64_t s;
    double f;
    bool b;
    struct gguf_str str;
    if (is_unsigned(t))
        return (scalar ? gguf_kv_u64(kv, &u) : gguf_kv_arr_u64(kv, i, &u)) ? NULL : json_u64(u);
    switch (t) {
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        return (scalar ? gguf_kv_i64(kv, &s) : gguf_kv_arr_i64(kv, i, &s)) ? NULL : json_integer(s);
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64:
        return (scalar ? gguf_kv_f64(kv, &f) : gguf_kv_arr_f64(kv, i, &f)) ? NULL : json_f64(f);
    case GGUF_TYPE_BOOL:
        return (scalar ? gguf_kv_bool(kv, &b) : gguf_kv_arr_bool(kv, i, &b)) ? NULL : json_boolean(b);
    case GGUF_TYPE_STRING:
        return (scalar ? gguf_kv_str(kv, &str) : gguf_kv_arr_str(kv, i, &str)) ? NULL
                                                                                 : gguf_json_str(str);
    default:
        return NULL;
    }
}

json_t *gguf_json_value(const struct gguf_kv *kv) {
    if (kv->type != GGUF_TYPE_ARRAY)
        return element(kv, kv->type, UINT64_MAX);
    json_t *arr = json_array();
    for (uint64_t i = 0; arr && i < kv->arr_count; i++) {
        if (json_array_append_new(arr, element(kv, kv->arr_type, i)) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static json_t *kv_object(const struct gguf_kv *kv) {
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = json_object_set_new(o, "key", gguf_json_str(kv->key)) ||
              json_object_set_new(o, "type", json_string(gguf_type_name(kv->type))) ||
              (kv->type == GGUF_TYPE_ARRAY &&
               json_object_set_new(o, "elem_type", json_string(gguf_type_name(kv->arr_type)))) ||
              json_object_set_new(o, "value", gguf_json_value(kv));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *tensor_object(const struct gguf *g, const struct gguf_tensor *t) {
    json_t *shape = json_array();
    for (uint32_t d = 0; shape && d < t->n_dims; d++)
        if (json_array_append_new(shape, json_integer(t->ne[d]))) {
            json_decref(shape);
            shape = NULL;
        }
    const struct ggml_type_info *info = ggml_type_get(t->type);
    return json_pack("{s:o, s:s, s:o*, s:I, s:I}", "name", gguf_json_str(t->name), "type",
                     info ? info->name : "?", "shape", shape, "offset",
                     (json_int_t)(gguf_data_offset(g) + t->offset), "size", (json_int_t)t->size);
}

json_t *gguf_json_dump(const struct gguf *g) {
    json_t *kvs = json_array(), *tensors = json_array();
    int bad = !kvs || !tensors;
    for (uint64_t i = 0; !bad && i < gguf_kv_count(g); i++)
        bad = json_array_append_new(kvs, kv_object(gguf_kv_at(g, i))) != 0;
    for (uint64_t i = 0; !bad && i < gguf_tensor_count(g); i++)
        bad = json_array_append_new(tensors, tensor_object(g, gguf_tensor_at(g, i))) != 0;
    if (bad) {
        json_decref(kvs);
        json_decref(tensors);
        return NULL;
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:o, s:o}", "version", (json_int_t)gguf_version(g),
                     "alignment", (json_int_t)gguf_alignment(g), "data_offset",
                     (json_int_t)gguf_data_offset(g), "file_size", (json_int_t)gguf_file_size(g),
                     "kv", kvs, "tensors", tensors);
}
