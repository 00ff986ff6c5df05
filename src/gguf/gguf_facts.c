/* gguf_facts.c: what a GGUF model holds, as the one JSON object that
 * `tandem inspect --json` prints (docs/inspect.md) and its table is drawn from.
 *
 * Only the header is read: architecture keys ("<arch>.<suffix>") become
 * JSON values through gguf_json, or null when absent, so every member is
 * always present and the shape is stable; tensor bytes are summed per type
 * and the parameter count from the shapes (overflow-checked at open). The
 * decision head, tandem's calibration keys and a quantized file's provenance
 * are their own members. sha256 is null here: hashing reads the whole file,
 * which the caller asks for separately. */
#include "gguf/gguf_facts.h"

#include <stdio.h>
#include <string.h>

#include "gguf/ggml_types.h"
#include "gguf/gguf_json.h"

/* The value of "<arch>.<suffix>" as JSON, or JSON null when absent. */
static json_t *arch_value(const struct gguf *g, const char *arch, const char *suffix) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_kv_find(g, key);
    json_t *v = kv ? gguf_json_value(kv) : NULL;
    return v ? v : json_null();
}

static json_t *key_value(const struct gguf *g, const char *key) {
    const struct gguf_kv *kv = gguf_kv_find(g, key);
    json_t *v = kv ? gguf_json_value(kv) : NULL;
    return v ? v : json_null();
}

static int has_prefix(struct gguf_str s, const char *prefix, size_t *plen) {
    *plen = strlen(prefix);
    return s.len >= *plen && !memcmp(s.ptr, prefix, *plen);
}

/* Every key "<prefix><rest>" as {rest: value}. */
static json_t *keys_with_prefix(const struct gguf *g, const char *prefix) {
    json_t *o = json_object();
    size_t plen;
    for (uint64_t i = 0; o && i < gguf_kv_count(g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(g, i);
        if (has_prefix(kv->key, prefix, &plen) && kv->key.len > plen)
            json_object_setn_new(o, kv->key.ptr + plen, (size_t)(kv->key.len - plen),
                                 gguf_json_value(kv));
    }
    return o;
}

static json_t *chat_templates(const struct gguf *g) {
    json_t *names = json_array();
    size_t plen;
    for (uint64_t i = 0; names && i < gguf_kv_count(g); i++) {
        struct gguf_str key = gguf_kv_at(g, i)->key;
        if (gguf_str_eq(key, "tokenizer.chat_template"))
            json_array_append_new(names, json_string("default"));
        else if (has_prefix(key, "tokenizer.chat_template.", &plen))
            json_array_append_new(names, json_stringn(key.ptr + plen, (size_t)(key.len - plen)));
    }
    return names;
}

static json_t *tensor_summary(const struct gguf *g, uint64_t *params) {
    json_t *by_type = json_object();
    *params = 0;
    for (uint64_t i = 0; by_type && i < gguf_tensor_count(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        const struct ggml_type_info *info = ggml_type_get(t->type);
        /* element counts were overflow-checked at open */
        *params += (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
        json_t *row = json_object_get(by_type, info->name);
        if (!row) {
            row = json_pack("{s:I, s:I}", "count", (json_int_t)0, "bytes", (json_int_t)0);
            json_object_set_new(by_type, info->name, row);
        }
        json_t *count = json_object_get(row, "count"), *bytes = json_object_get(row, "bytes");
        json_integer_set(count, json_integer_value(count) + 1);
        json_integer_set(bytes, json_integer_value(bytes) + (json_int_t)t->size);
    }
    return by_type;
}

static json_t *decision_facts(const struct gguf *g, const char *arch) {
    json_t *type = arch_value(g, arch, "decision.type");
    if (json_is_null(type)) {
        json_decref(type);
        return json_null();
    }
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.decision.temperature.", arch);
    return json_pack("{s:o, s:o, s:o, s:o}", "type", type, "temperatures",
                     keys_with_prefix(g, prefix), "max_head_tokens",
                     arch_value(g, arch, "decision.max_head_tokens"), "block_count",
                     arch_value(g, arch, "decision.block_count"));
}

/* Every tandem.calibration.* key (written by `tandem calibrate`) as {rest: value},
 * the metrics parsed from their JSON text; JSON null when the file has none. */
static json_t *calibration_facts(const struct gguf *g) {
    json_t *o = keys_with_prefix(g, "tandem.calibration.");
    if (!json_object_size(o)) {
        json_decref(o);
        return json_null();
    }
    const char *text = json_string_value(json_object_get(o, "metrics"));
    json_t *metrics = text ? json_loads(text, 0, NULL) : NULL;
    if (metrics)
        json_object_set_new(o, "metrics", metrics);
    return o;
}

/* Where a quantized file came from: tandem quantize --ladder's keys
 * (tandem.quantize.*) and llama-quantize's own (quantize.imatrix.*); null
 * when it has neither. */
static json_t *provenance_facts(const struct gguf *g) {
    json_t *o = keys_with_prefix(g, "tandem.quantize.");
    json_t *imatrix = keys_with_prefix(g, "quantize.imatrix.");
    if (json_object_size(imatrix))
        json_object_set(o, "imatrix", imatrix);
    json_decref(imatrix);
    if (!json_object_size(o)) {
        json_decref(o);
        return json_null();
    }
    return o;
}

static json_t *vocab_size(const struct gguf *g) {
    enum gguf_type elem;
    uint64_t count;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &elem, &count) != TANDEM_OK)
        return json_null();
    return json_integer((json_int_t)count);
}

json_t *gguf_facts_json(const struct gguf *g, const char *path) {
    struct gguf_str arch_s = {0};
    char arch[128] = "";
    if (gguf_get_str(g, "general.architecture", &arch_s) == TANDEM_OK && arch_s.len < sizeof arch)
        memcpy(arch, arch_s.ptr, (size_t)arch_s.len);
    uint64_t params;
    json_t *by_type = tensor_summary(g, &params);
    char ssm[160];
    snprintf(ssm, sizeof ssm, "%s.ssm.", arch);
    return json_pack(
        "{s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o,"
        " s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o},"
        " s:{s:o, s:o}, s:{s:o, s:o}, s:o, s:o, s:o, s:o, s:o}",
        "file", path, "file_size", (json_int_t)gguf_file_size(g), "gguf_version",
        (json_int_t)gguf_version(g), "alignment", (json_int_t)gguf_alignment(g),
        "architecture", *arch ? json_string(arch) : json_null(),
        "name", key_value(g, "general.name"),
        "file_type", key_value(g, "general.file_type"),
        "parameters", (json_int_t)params, "tensor_count", (json_int_t)gguf_tensor_count(g),
        "tensor_bytes_by_type", by_type,
        "layers", arch_value(g, arch, "block_count"),
        "context_length", arch_value(g, arch, "context_length"),
        "embedding_length", arch_value(g, arch, "embedding_length"),
        "feed_forward_length", arch_value(g, arch, "feed_forward_length"),
        "vocab_size", vocab_size(g),
        "attention",
        "head_count", arch_value(g, arch, "attention.head_count"),
        "head_count_kv", arch_value(g, arch, "attention.head_count_kv"),
        "key_length", arch_value(g, arch, "attention.key_length"),
        "value_length", arch_value(g, arch, "attention.value_length"),
        "causal", arch_value(g, arch, "attention.causal"),
        "sliding_window", arch_value(g, arch, "attention.sliding_window"),
        "sliding_window_pattern", arch_value(g, arch, "attention.sliding_window_pattern"),
        "recurrent",
        "full_attention_interval", arch_value(g, arch, "full_attention_interval"),
        "ssm", keys_with_prefix(g, ssm),
        "experts",
        "count", arch_value(g, arch, "expert_count"),
        "used", arch_value(g, arch, "expert_used_count"),
        "chat_templates", chat_templates(g),
        "decision", decision_facts(g, arch),
        "calibration", calibration_facts(g),
        "provenance", provenance_facts(g),
        "sha256", json_null());
}
