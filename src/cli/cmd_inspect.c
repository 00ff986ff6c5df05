/* cmd_inspect.c: `tandem inspect FILE [--json] [--sha256]`.
 *
 * The facts are gathered once into a JSON object (the documented, stable
 * `--json` output, see docs/inspect.md); the human table is rendered from that
 * same object, so the two views cannot disagree. Only the header is parsed:
 * tensor data is never touched, except that --sha256 reads the whole file. */
#include "cli/cmd_inspect.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/ggml_types.h"
#include "gguf/gguf.h"
#include "gguf/gguf_json.h"
#include "base/hash.h"
#include "base/units.h"

static void usage(FILE *f) {
    fprintf(f, "usage: tandem inspect FILE.gguf [--json] [--sha256]\n"
               "\n"
               "Shows what a GGUF model holds: architecture, parameters, tensor bytes by\n"
               "type, layers, context, heads (per layer), sliding window, recurrent layout,\n"
               "experts, vocabulary, chat templates and decision-model metadata.\n"
               "Reads only the header; a malformed file is reported with its byte offset.\n"
               "\n"
               "  --json    stable machine-readable output (documented in docs/inspect.md)\n"
               "  --sha256  also hash the whole file (reads every byte)\n"
               "  -h, --help\n");
}

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

static json_t *gather(const struct gguf *g, const char *path) {
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

/* --- the human table ------------------------------------------------------ */

#define ROW "%-34s "

/* Prints a JSON value compactly: null as "-", per-layer arrays with equal
 * entries as "N (all L layers)". */
static void print_value(const json_t *v) {
    if (!v || json_is_null(v)) {
        printf("-");
    } else if (json_is_string(v)) {
        printf("%s", json_string_value(v));
    } else if (json_is_array(v) && json_array_size(v) > 0) {
        size_t n = json_array_size(v), i;
        for (i = 1; i < n && json_equal(json_array_get(v, i), json_array_get(v, 0)); i++) {
        }
        if (i == n && !json_is_string(json_array_get(v, 0))) {
            print_value(json_array_get(v, 0));
            printf(" (all %zu layers)", n);
            return;
        }
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%s", text ? text : "?");
        free(text);
    } else {
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%s", text ? text : "?");
        free(text);
    }
}

static void print_row(const char *label, const json_t *v) {
    printf(ROW, label);
    print_value(v);
    printf("\n");
}

static void print_object_rows(const char *label, const json_t *o) {
    const char *k;
    json_t *v;
    if (!json_object_size(o)) {
        print_row(label, NULL);
        return;
    }
    json_object_foreach((json_t *)o, k, v) {
        char name[64];
        snprintf(name, sizeof name, "%s.%s", label, k);
        print_row(name, v);
    }
}

/* One row per fitted group of `tandem calibrate`'s metrics. */
static void print_calibration_groups(const json_t *metrics) {
    size_t i;
    const json_t *g;
    json_array_foreach(metrics, i, g) {
        char label[64];
        snprintf(label, sizeof label, "calibration.%s",
                 json_string_value(json_object_get(g, "group")));
        if (!json_is_true(json_object_get(g, "fitted"))) {
            print_row(label, json_object_get(g, "note"));
            continue;
        }
        printf(ROW "a %.4f, T %.6g -> %.6g, held-out NLL %.3f -> %.3f, ECE %.3f -> %.3f, %s\n",
               label, json_number_value(json_object_get(g, "a")),
               json_number_value(json_object_get(g, "t_old")),
               json_number_value(json_object_get(g, "t_new")),
               json_number_value(json_object_get(g, "nll_before")),
               json_number_value(json_object_get(g, "nll_after")),
               json_number_value(json_object_get(g, "ece_before")),
               json_number_value(json_object_get(g, "ece_after")),
               json_is_true(json_object_get(g, "kept")) ? "kept" : "not kept");
    }
}

/* The provenance rows; nothing when the file was not calibrated by tandem. */
static void print_calibration(const json_t *cal) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cal, k, v) {
        char label[64];
        snprintf(label, sizeof label, "calibration.%s", k);
        if (!strcmp(k, "metrics") && json_is_array(v))
            print_calibration_groups(v);
        else
            print_row(label, v);
    }
}

static void print_tensor_bytes(const json_t *by_type) {
    const char *k;
    json_t *row;
    char size[32];
    printf("tensor bytes by type:\n");
    json_object_foreach((json_t *)by_type, k, row) {
        printf("  %-8s %6" JSON_INTEGER_FORMAT " tensors %12s\n", k,
               json_integer_value(json_object_get(row, "count")),
               units_format_bytes((uint64_t)json_integer_value(json_object_get(row, "bytes")), size,
                                  sizeof size));
    }
}

/* key/value lengths absent from the file default to embedding / heads (as the engine does). */
static void print_default_kv_length(const json_t *f, const json_t *att) {
    const json_t *embd = json_object_get(f, "embedding_length");
    const json_t *heads = json_object_get(att, "head_count");
    if (!json_is_null(json_object_get(att, "key_length")) || !json_is_integer(embd) ||
        !json_is_integer(heads) || json_integer_value(heads) <= 0)
        return;
    printf(ROW "%" JSON_INTEGER_FORMAT " (embedding_length / head_count)\n",
           "attention.key_length (default)", json_integer_value(embd) / json_integer_value(heads));
}

static void print_human(const json_t *f) {
    char size[32];
    const json_t *att = json_object_get(f, "attention"), *dec = json_object_get(f, "decision");
    printf(ROW "%s (%s, GGUF v%" JSON_INTEGER_FORMAT ", alignment %" JSON_INTEGER_FORMAT ")\n",
           "file", json_string_value(json_object_get(f, "file")),
           units_format_bytes((uint64_t)json_integer_value(json_object_get(f, "file_size")), size,
                              sizeof size),
           json_integer_value(json_object_get(f, "gguf_version")),
           json_integer_value(json_object_get(f, "alignment")));
    print_row("architecture", json_object_get(f, "architecture"));
    print_row("name", json_object_get(f, "name"));
    printf(ROW "%" JSON_INTEGER_FORMAT " (%.1f M) in %" JSON_INTEGER_FORMAT " tensors\n",
           "parameters", json_integer_value(json_object_get(f, "parameters")),
           (double)json_integer_value(json_object_get(f, "parameters")) / 1e6,
           json_integer_value(json_object_get(f, "tensor_count")));
    static const char *const plain[] = {"layers", "context_length", "embedding_length",
                                        "feed_forward_length", "vocab_size"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        print_row(plain[i], json_object_get(f, plain[i]));
    print_object_rows("attention", att);
    print_default_kv_length(f, att);
    const json_t *rec = json_object_get(f, "recurrent");
    print_row("recurrent.full_attention_interval", json_object_get(rec, "full_attention_interval"));
    print_object_rows("recurrent.ssm", json_object_get(rec, "ssm"));
    print_object_rows("experts", json_object_get(f, "experts"));
    print_row("chat_templates", json_object_get(f, "chat_templates"));
    if (json_is_null(dec))
        printf(ROW "- (no decision metadata)\n", "decision");
    else
        print_object_rows("decision", dec);
    print_calibration(json_object_get(f, "calibration"));
    if (json_is_object(json_object_get(f, "provenance")))
        print_object_rows("provenance", json_object_get(f, "provenance"));
    if (!json_is_null(json_object_get(f, "sha256")))
        print_row("sha256", json_object_get(f, "sha256"));
    print_tensor_bytes(json_object_get(f, "tensor_bytes_by_type"));
}

int cmd_inspect_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"sha256", no_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    int c, as_json = 0, want_sha = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': as_json = 1; break;
        case 's': want_sha = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "tandem inspect: expected exactly one FILE\n");
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    char err[1024];
    struct gguf *g;
    if (gguf_open(path, &g, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    json_t *facts = gather(g, path);
    int status = facts ? 0 : 1;
    char hex[HASH_SHA256_HEX_LEN + 1];
    if (facts && want_sha) {
        if (hash_file_sha256(path, hex, err, sizeof err) == TANDEM_OK) {
            json_object_set_new(facts, "sha256", json_string(hex));
        } else {
            fprintf(stderr, "%s\n", err);
            status = 1;
        }
    }
    if (facts && as_json) {
        json_dumpf(facts, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        printf("\n");
    } else if (facts) {
        print_human(facts);
    } else {
        fprintf(stderr, "tandem inspect: out of memory\n");
    }
    json_decref(facts);
    gguf_free(g);
    return status;
}
