/* cmd_inspect.c: `tandem inspect FILE [--json] [--sha256]`.
 *
 * The facts are gathered once into a JSON object (gguf/gguf_facts: the
 * documented, stable `--json` output, see docs/inspect.md); the human table
 * is rendered from that same object, so the two views cannot disagree. Only the header is parsed:
 * tensor data is never touched, except that --sha256 reads the whole file. */
#include "cli/cmd_inspect.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_facts.h"
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
    json_t *facts = gguf_facts_json(g, path);
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
