/* cmd_plan.c: `tandem plan MODEL.gguf ... [options]`.
 *
 * Plans each model's footprint from its header (and, unless --no-measured,
 * the footprint cache), fits them to the budget, and prints a budget table or
 * the stable JSON of docs/planner.md. The JSON object is built first; the
 * table is rendered from it, so the two cannot disagree. Nothing but GGUF
 * headers is read. Models are listed highest priority first. The verdict is
 * the chosen placement's (plan/verdict.c), so that it and the placement
 * printed below it are one answer. */
#include "cli/cmd_plan.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"
#include "serve/placement.h"
#include "plan/cost.h"
#include "plan/place.h"
#include "plan/fit.h"
#include "gguf/ggml_types.h"
#include "plan/plan.h"
#include "plan/plan_cli.h"
#include "plan/verdict.h"
#include "base/host.h"
#include "base/mem.h"
#include "base/units.h"
#include "version.h"

#define MAX_MODELS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: tandem plan MODEL.gguf [MODEL.gguf ...] [options]\n"
            "       tandem plan --config tandem.yaml [options]\n"
            "\n"
            "Plans the memory each model's llama-server will allocate (weights, KV cache,\n"
            "recurrent state, compute and output buffers, per-process overhead), per device,\n"
            "and decides whether the models fit together: co-resident, rotate, partial\n"
            "offload, or does not fit. Reads only GGUF headers. Models are listed highest\n"
            "priority first; the last one yields first.\n"
            "\n"
            "budget (default: the GPU that NVML reports, else host RAM):\n"
            "  --vram SIZE          plan for a GPU with SIZE of memory (e.g. 6GiB)\n"
            "  --reserve SIZE       keep SIZE of the GPU free (default 512MiB)\n"
            "  --ram SIZE           host RAM available (default: MemAvailable)\n"
            "  --cpu                plan for a CPU-only engine: everything in host RAM\n"
            "launch settings (for every model; encoders keep their window as context):\n"
            "  --ctx N              context cells over all slots (default: training context)\n"
            "  --parallel N         slots (-np, default 1)\n"
            "  --ngl N              GPU layers, n_layer + 1 = all (default: as many as fit)\n"
            "  --cache-type-k T     K cache type (default f16); --cache-type-v T likewise\n"
            "  --flash-attn on|off  (default off: tandem runs deterministic answers)\n"
            "  --batch N, --ubatch N  -b and -ub (default 2048 / 512; encoders: the window)\n"
            "  --kv-unified         one KV pool for all slots\n"
            "  --overhead SIZE      per-process GPU overhead (default %llu MiB)\n"
            "  --config FILE        plan the models of a tandem.yaml with their own settings,\n"
            "                       priorities, pins, devices, pipelines and budget (flags\n"
            "                       override the budget)\n"
            "placement (docs/placement.md):\n"
            "  --device NAME=DEV    put model NAME (its config name, or its file name) on DEV:\n"
            "                       auto (default), gpu, gpu:N or cpu; repeatable\n"
            "  --request-tokens N   prompt tokens of a typical request (default 256, or the\n"
            "                       config's scheduling.request_tokens)\n"
            "  --clients N          requests in flight at once (default 1, or scheduling.clients)\n"
            "  --work pipeline|models  without --config, the models form one decide-then-verify\n"
            "                       pipeline in the order given (default), or each model's\n"
            "                       requests come alone\n"
            "output:\n"
            "  --no-measured        ignore the footprint cache: the model alone\n"
            "  --json               stable machine-readable output (docs/planner.md)\n"
            "  -h, --help\n",
            (unsigned long long)(PLAN_GPU_OVERHEAD_BYTES >> 20));
}

/* Placement flags, beside the shared ones. */
struct place_flags {
    const char *device[MAX_MODELS]; /* "NAME=DEV", borrowed from argv */
    size_t n_device;
    uint32_t tokens, clients;       /* 0 = the config's, else the default */
    bool each;                      /* --work models: no pipeline without a config */
};

#define OPT_DEVICE 1000
#define OPT_TOKENS 1001
#define OPT_CLIENTS 1002
#define OPT_WORK 1003

static int place_option(int c, const char *arg, struct place_flags *pf) {
    char *end;
    unsigned long n;
    switch (c) {
    case OPT_WORK:
        if (strcmp(arg, "pipeline") && strcmp(arg, "models")) {
            fprintf(stderr, "tandem plan: --work: expected pipeline or models, got '%s'\n", arg);
            return 2;
        }
        pf->each = !strcmp(arg, "models");
        return 0;
    case OPT_DEVICE:
        if (pf->n_device == MAX_MODELS || !strchr(arg, '=')) {
            fprintf(stderr, "tandem plan: --device: expected NAME=auto|gpu|gpu:N|cpu, got '%s'\n",
                    arg);
            return 2;
        }
        pf->device[pf->n_device++] = arg;
        return 0;
    case OPT_TOKENS:
    case OPT_CLIENTS:
        n = strtoul(arg, &end, 10);
        if (!*arg || *end || arg[0] == '-' || n < 1 || n > 1000000) {
            fprintf(stderr, "tandem plan: %s: expected a positive integer, got '%s'\n",
                    c == OPT_TOKENS ? "--request-tokens" : "--clients", arg);
            return 2;
        }
        *(c == OPT_TOKENS ? &pf->tokens : &pf->clients) = (uint32_t)n;
        return 0;
    }
    return 2;
}

static int parse_args(int argc, char **argv, struct plan_cli *o, struct place_flags *pf) {
    static const struct option extra[] = {{"device", required_argument, NULL, OPT_DEVICE},
                                          {"request-tokens", required_argument, NULL, OPT_TOKENS},
                                          {"clients", required_argument, NULL, OPT_CLIENTS},
                                          {"work", required_argument, NULL, OPT_WORK}};
    struct option opts[64];
    size_t n = 0;
    while (plan_cli_options[n].name && n < 60)
        opts[n] = plan_cli_options[n], n++;
    memcpy(&opts[n], extra, sizeof extra);
    memset(&opts[n + sizeof extra / sizeof *extra], 0, sizeof *opts);
    int c;
    optind = 0; /* glibc: full re-initialisation, permuting models after options */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        int rc = c >= OPT_DEVICE ? place_option(c, optarg, pf)
                 : c == '?'      ? 2
                                 : plan_cli_option(c, optarg, o);
        if (rc)
            return 2;
    }
    if (o->config ? optind != argc : optind >= argc) {
        if (o->config)
            fprintf(stderr, "tandem plan: give --config or model files, not both\n");
        else
            usage(stderr);
        return 2;
    }
    if (argc - optind > MAX_MODELS) {
        fprintf(stderr, "tandem plan: at most %d models\n", MAX_MODELS);
        return 2;
    }
    return 0;
}

/* --- JSON ---------------------------------------------------------------------------------- */

static json_t *device_json(const struct plan_footprint *f, enum plan_device d) {
    json_t *o = json_object();
    for (int p = 0; p < PLAN_PART_COUNT; p++)
        json_object_set_new(o, plan_part_name(p), json_integer((json_int_t)f->bytes[d][p]));
    json_object_set_new(o, "total", json_integer((json_int_t)plan_footprint_device_total(f, d)));
    return o;
}

static json_t *settings_json(const struct plan_settings *s) {
    const struct ggml_type_info *k = ggml_type_get(s->type_k), *v = ggml_type_get(s->type_v);
    return json_pack("{s:i, s:i, s:s, s:b, s:s, s:s, s:b, s:i, s:i, s:b}", "ctx",
                     (json_int_t)s->ctx, "parallel", (json_int_t)s->parallel, "determinism",
                     s->parallel == 1 ? "strict" : "relaxed", "kv_unified", s->kv_unified,
                     "cache_type_k", k ? k->name : "?", "cache_type_v", v ? v->name : "?",
                     "flash_attn", s->flash_attn, "batch", (json_int_t)s->batch, "ubatch",
                     (json_int_t)s->ubatch, "gpu", s->gpu);
}

static json_t *model_json(const char *name, const struct plan_model *m,
                          const struct plan_settings *asked, const struct fit_model_result *r) {
    struct plan_settings s;
    plan_model_resolve(m, asked, &s);
    s.ctx = r->footprint.n_ctx;
    const char *decision = plan_model_decision_type(m);
    return json_pack("{s:s, s:s, s:s, s:o, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:I, s:i, s:i,"
                     " s:b, s:s}",
                     "name", name, "path", plan_model_path(m), "arch", plan_model_arch(m),
                     "decision_type", decision[0] ? json_string(decision) : json_null(),
                     "n_layer", (json_int_t)plan_model_n_layer(m), "ctx_train",
                     (json_int_t)plan_model_ctx_train(m), "n_ctx", (json_int_t)r->footprint.n_ctx,
                     "ngl", (json_int_t)r->ngl, "settings", settings_json(&s), "gpu",
                     device_json(&r->footprint, PLAN_DEVICE_GPU), "host",
                     device_json(&r->footprint, PLAN_DEVICE_HOST), "total",
                     (json_int_t)plan_footprint_total(&r->footprint), "max_ctx",
                     (json_int_t)r->max_ctx, "max_ngl", (json_int_t)r->max_ngl, "fits_alone",
                     r->fits_alone, "slowdown", fit_slowdown_name(r->slowdown));
}

static void set_sources(json_t *model, const struct plan_footprint *f) {
    json_t *sources = json_object();
    for (int p = 0; p < PLAN_PART_COUNT; p++)
        json_object_set_new(sources, plan_part_name(p), json_string(plan_source_name(f->source[p])));
    json_object_set_new(model, "sources", sources);
}

static json_t *result_json(const struct fit_model *fm, size_t n, const struct fit_budget *b,
                           uint64_t total, const char *source, const struct fit_model_result *r,
                           const struct fit_result *res) {
    json_t *models = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *m = model_json(fm[i].name, fm[i].model, &fm[i].settings, &r[i]);
        set_sources(m, &r[i].footprint);
        json_array_append_new(models, m);
    }
    uint64_t cap = b->gpu ? b->gpu_bytes : b->host_bytes;
    uint64_t need = b->gpu ? res->need_gpu : res->need_host;
    return json_pack("{s:{s:s, s:I, s:I, s:I, s:s}, s:s, s:s, s:s, s:{s:I, s:I}, s:I, s:o,"
                     " s:i}",
                     "budget", "device", b->gpu ? "gpu" : "host", "total", (json_int_t)total,
                     "usable", (json_int_t)cap, "host", (json_int_t)b->host_bytes, "source",
                     source, "verdict", fit_verdict_name(res->verdict), "reason", res->reason,
                     "alternative", res->alternative, "need", "gpu", (json_int_t)res->need_gpu,
                     "host", (json_int_t)res->need_host, "headroom",
                     (json_int_t)((int64_t)cap - (int64_t)need), "models", models,
                     "engine_build", (json_int_t)TANDEM_ENGINE_BUILD);
}

/* --- the table ------------------------------------------------------------------------------ */

static const char *mib(json_t *o, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%.0f", (double)json_integer_value(json_object_get(o, key)) / 1048576.0);
    return buf;
}

static void print_row(const char *name, json_t *dev, const char *where, int measured) {
    char c[PLAN_PART_COUNT + 1][24];
    printf("  %-22s %-4s %9s %8s %9s %8s %7s %9s %9s%s\n", name, where,
           mib(dev, "weights", c[0], 24), mib(dev, "kv", c[1], 24), mib(dev, "recurrent", c[2], 24),
           mib(dev, "compute", c[3], 24), mib(dev, "output", c[4], 24),
           mib(dev, "overhead", c[5], 24), mib(dev, "total", c[6], 24), measured ? "  *" : "");
}

static void print_table(json_t *j) {
    json_t *budget = json_object_get(j, "budget"), *models = json_object_get(j, "models");
    const char *dev = json_string_value(json_object_get(budget, "device"));
    bool gpu = !strcmp(dev, "gpu");
    char a[32], b[32], h[32];
    printf("budget: %s %s usable (%s; %s total)\n", dev,
           units_format_bytes((uint64_t)json_integer_value(json_object_get(budget, "usable")), a, 32),
           json_string_value(json_object_get(budget, "source")),
           units_format_bytes((uint64_t)json_integer_value(json_object_get(budget, "total")), b, 32));
    printf("\n  %-22s %-4s %9s %8s %9s %8s %7s %9s %9s\n", "model (MiB)", "on", "weights", "KV",
           "recurrent", "compute", "output", "overhead", "total");
    size_t i;
    json_t *m;
    int any_measured = 0;
    json_array_foreach(models, i, m) {
        json_t *src = json_object_get(m, "sources");
        int measured = !strcmp(json_string_value(json_object_get(src, "compute")), "measured");
        any_measured |= measured;
        const char *name = json_string_value(json_object_get(m, "name"));
        if (gpu)
            print_row(name, json_object_get(m, "gpu"), "gpu", measured);
        print_row(gpu ? "" : name, json_object_get(m, "host"), "host", gpu ? 0 : measured);
        json_t *set = json_object_get(m, "settings");
        long long slots = json_integer_value(json_object_get(set, "parallel"));
        printf("  %-22s ctx %lld (max %lld), %lld slot%s (%s), %lld of %lld layers on the "
               "GPU%s\n", "", json_integer_value(json_object_get(m, "n_ctx")),
               json_integer_value(json_object_get(m, "max_ctx")), slots, slots == 1 ? "" : "s",
               json_string_value(json_object_get(set, "determinism")),
               json_integer_value(json_object_get(m, "ngl")),
               json_integer_value(json_object_get(m, "n_layer")) + 1,
               gpu ? "" : " (CPU engine)");
    }
    json_t *need = json_object_get(j, "need");
    long long headroom = json_integer_value(json_object_get(j, "headroom"));
    char host_part[64] = "";
    if (gpu)
        snprintf(host_part, sizeof host_part, " (%s on the host)",
                 units_format_bytes((uint64_t)json_integer_value(json_object_get(need, "host")),
                                    b, 32));
    printf("\n  sum: %s on the %s%s; headroom %s%s\n",
           units_format_bytes((uint64_t)json_integer_value(json_object_get(need, dev)), a, 32), dev,
           host_part, headroom < 0 ? "-" : "",
           units_format_bytes((uint64_t)(headroom < 0 ? -headroom : headroom), h, 32));
    printf("verdict: %s: %s\n", json_string_value(json_object_get(j, "verdict")),
           json_string_value(json_object_get(j, "reason")));
    const char *alt = json_string_value(json_object_get(j, "alternative"));
    if (alt && *alt)
        printf("alternative: %s\n", alt);
    if (any_measured)
        printf("* measured by the engine (footprint cache), not modelled\n");
}

/* The i-th local model by priority (highest first; file order breaks ties).
 * Remote models (upstream:) take no memory and are not planned. */
static const struct config_model *by_priority(const struct config *c, size_t i) {
    for (int32_t p = 1000; p >= -1000; p--)
        for (size_t k = 0; k < c->n_models; k++)
            if (!c->models[k].upstream && c->models[k].priority == p && i-- == 0)
                return &c->models[k];
    return NULL;
}

/* --- placement ------------------------------------------------------------------------------ */

struct placement {
    struct place_model models[MAX_MODELS];
    struct place_work work[PLACE_MAX_WORK];
    size_t n, n_work;
    struct place_budget budget;
    struct place_params params;
    bool simulated;
    struct place_result *result; /* heap: it is large */
};

static json_t *figure_json(const struct cost_figure *f) {
    return json_pack("{s:f, s:b, s:f, s:b}", "token_s", f->token_s, "token_measured",
                     f->token_measured, "load_s", f->load_s, "load_measured", f->load_measured);
}

static json_t *memory_json(const struct placement *pl, const struct place_arrangement *a) {
    json_t *o = json_object();
    for (uint32_t g = 0; g < pl->budget.n_gpus; g++) {
        char name[16];
        json_object_set_new(o, place_device_name((int32_t)g, name, sizeof name),
                            json_integer((json_int_t)a->gpu_need[g]));
    }
    json_object_set_new(o, "host", json_integer((json_int_t)a->host_need));
    return o;
}

static json_t *arrangement_json(const struct placement *pl, const struct place_arrangement *a) {
    json_t *models = json_array(), *work = json_array();
    for (size_t i = 0; i < pl->n; i++) {
        const struct place_slot *sl = &a->slot[i];
        char dev[16];
        json_array_append_new(
            models, json_pack("{s:s, s:s, s:i, s:i, s:b, s:f, s:f, s:I, s:I}", "name",
                              pl->models[i].name, "device",
                              place_device_name(sl->device, dev, sizeof dev), "ngl",
                              (json_int_t)sl->ngl, "layers",
                              (json_int_t)plan_model_n_layer(pl->models[i].model) + 1, "rotates",
                              sl->rotates, "request_s", sl->request_s, "load_s", sl->load_s,
                              "gpu_bytes",
                              (json_int_t)plan_footprint_device_total(&sl->footprint,
                                                                      PLAN_DEVICE_GPU),
                              "host_bytes",
                              (json_int_t)plan_footprint_device_total(&sl->footprint,
                                                                      PLAN_DEVICE_HOST)));
    }
    for (size_t w = 0; w < pl->n_work; w++)
        json_array_append_new(work, json_pack("{s:s, s:b, s:f, s:f}", "name", pl->work[w].name,
                                              "pipeline", pl->work[w].pipeline, "seconds",
                                              a->work_s[w], "loads", a->loads[w]));
    return json_pack("{s:s, s:b, s:s, s:f, s:o, s:o, s:o}", "label", a->label, "fits", a->fits,
                     "reason", a->reason, "expected_s", a->score, "memory", memory_json(pl, a),
                     "work", work, "models", models);
}

static json_t *placement_json(const struct placement *pl) {
    json_t *gpus = json_array(), *costs = json_array(), *rejected = json_array();
    for (uint32_t g = 0; g < pl->budget.n_gpus; g++) {
        char name[16];
        json_array_append_new(gpus, json_pack("{s:s, s:I}", "device",
                                              place_device_name((int32_t)g, name, sizeof name),
                                              "usable", (json_int_t)pl->budget.gpu_bytes[g]));
    }
    for (size_t i = 0; i < pl->n; i++) {
        const struct place_model *m = &pl->models[i];
        json_array_append_new(costs, json_pack("{s:s, s:s, s:o, s:o}", "name", m->name, "want",
                                               place_want_name(m->want), "gpu",
                                               figure_json(&m->cost.on[COST_GPU]), "cpu",
                                               figure_json(&m->cost.on[COST_CPU])));
    }
    for (size_t k = 0; k < pl->result->n_alts; k++)
        json_array_append_new(rejected, arrangement_json(pl, &pl->result->alts[k]));
    return json_pack("{s:b, s:o, s:I, s:{s:i, s:i, s:i}, s:o, s:o, s:o, s:i}", "simulated",
                     pl->simulated, "gpus", gpus, "host", (json_int_t)pl->budget.host_bytes,
                     "params", "request_tokens", (json_int_t)pl->params.tokens, "clients",
                     (json_int_t)pl->params.clients, "group_limit",
                     (json_int_t)pl->params.group_limit, "costs", costs, "chosen",
                     arrangement_json(pl, &pl->result->best), "rejected", rejected, "considered",
                     (json_int_t)pl->result->n_considered);
}

static void print_arrangement(const char *first, json_t *a) {
    const char *in = "    ";
    printf("%s%s\n%s%s\n", first, json_string_value(json_object_get(a, "label")), in,
           json_string_value(json_object_get(a, "reason")));
    const char *k;
    json_t *v, *w;
    size_t i;
    printf("%smemory:", in);
    json_object_foreach(json_object_get(a, "memory"), k, v) {
        char b[32];
        printf(" %s %s", k, units_format_bytes((uint64_t)json_integer_value(v), b, sizeof b));
    }
    printf("\n%sper request:", in);
    json_array_foreach(json_object_get(a, "work"), i, w)
        printf("%s %s %.3f s (%.2f loads)", i ? ";" : "",
               json_string_value(json_object_get(w, "name")),
               json_real_value(json_object_get(w, "seconds")),
               json_real_value(json_object_get(w, "loads")));
    printf("\n%sper model request:", in);
    json_array_foreach(json_object_get(a, "models"), i, w) {
        printf("%s %s %.3f s", i ? ";" : "", json_string_value(json_object_get(w, "name")),
               json_real_value(json_object_get(w, "request_s")));
        if (json_is_true(json_object_get(w, "rotates")))
            printf(" + %.2f s per load", json_real_value(json_object_get(w, "load_s")));
    }
    printf("\n");
}

static const char *source(json_t *figure, const char *key) {
    return json_is_true(json_object_get(figure, key)) ? "measured" : "estimate";
}

static void print_costs(json_t *c) {
    printf("  cost %s:", json_string_value(json_object_get(c, "name")));
    const char *dev[] = {"gpu", "cpu"};
    for (int d = 0; d < 2; d++) {
        json_t *f = json_object_get(c, dev[d]);
        printf("%s %s %.2f ms/token (%s), %.2f s/load (%s)", d ? ";" : "", dev[d],
               1000 * json_real_value(json_object_get(f, "token_s")),
               source(f, "token_measured"), json_real_value(json_object_get(f, "load_s")),
               source(f, "load_measured"));
    }
    printf("\n");
}

static void print_placement(json_t *p) {
    printf("\nplacement (expected latency of the work, docs/placement.md)%s:\n",
           json_is_true(json_object_get(p, "simulated"))
               ? "; GPU simulated: no GPU found, engines run on the CPU"
               : "");
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(p, "costs"), i, c)
        print_costs(c);
    print_arrangement("chosen: ", json_object_get(p, "chosen"));
    json_t *rejected = json_object_get(p, "rejected");
    if (json_array_size(rejected))
        printf("rejected (%zu, best first):\n", json_array_size(rejected));
    json_array_foreach(rejected, i, c)
        print_arrangement("  - ", c);
}

/* Applies --device NAME=DEV to the place models; 2 after a message. */
static int apply_devices(const struct place_flags *pf, struct placement *pl) {
    for (size_t d = 0; d < pf->n_device; d++) {
        const char *eq = strchr(pf->device[d], '=');
        size_t len = (size_t)(eq - pf->device[d]);
        size_t i = 0;
        while (i < pl->n && (strlen(pl->models[i].name) != len ||
                             strncmp(pl->models[i].name, pf->device[d], len)))
            i++;
        if (i == pl->n) {
            fprintf(stderr, "tandem plan: --device %s: no model named '%.*s'\n", pf->device[d],
                    (int)len, pf->device[d]);
            return 2;
        }
        struct place_model *m = &pl->models[i];
        if (place_want_parse(eq + 1, &m->want, &m->gpu) != TANDEM_OK) {
            fprintf(stderr, "tandem plan: --device %s: expected auto, gpu, gpu:N or cpu\n",
                    pf->device[d]);
            return 2;
        }
        if (m->want == PLACE_WANT_GPU &&
            (!pl->budget.n_gpus || m->gpu >= (int32_t)pl->budget.n_gpus)) {
            fprintf(stderr, "tandem plan: --device %s: the budget has %u GPU(s)%s\n",
                    pf->device[d], pl->budget.n_gpus,
                    pl->budget.n_gpus ? "" : " (give --vram to plan for one)");
            return 2;
        }
    }
    return 0;
}

/* Plans the placement of fm[n] (or cfg's models and pipelines) into *pl. */
static int place(const struct config *cfg, const struct fit_model *fm, size_t n,
                 const struct plan_cli *o, const struct place_flags *pf,
                 const struct fit_budget *fb, bool use_measured, struct placement *pl) {
    pl->n = n;
    pl->simulated = plan_cli_place_budget(o, fb, &pl->budget);
    if (cfg) {
        placement_reserve_cache(cfg, &pl->budget);
        struct plan_model *file_pm[MAX_MODELS] = {0};
        for (size_t i = 0; i < n; i++)
            for (size_t k = 0; k < cfg->n_models; k++)
                if (by_priority(cfg, i) == &cfg->models[k])
                    file_pm[k] = (struct plan_model *)fm[i].model;
        pl->n_work = placement_inputs(cfg, file_pm, use_measured, pl->models, pl->work);
        pl->params = placement_params(cfg);
    } else {
        double cpu_flops = cost_cpu_flops(TANDEM_ENGINE_BUILD, use_measured, NULL);
        for (size_t i = 0; i < n; i++) {
            pl->models[i] = (struct place_model){.name = fm[i].name, .model = fm[i].model,
                                                 .settings = fm[i].settings, .gpu = PLACE_ANY_GPU};
            cost_of(fm[i].model, TANDEM_ENGINE_BUILD, use_measured, cpu_flops,
                    &pl->models[i].cost);
        }
        pl->params = (struct place_params){.tokens = 256, .clients = 1, .group_limit = 16};
        if (!pf->each && n <= PLACE_MAX_STAGES) { /* the first decides, the others verify */
            pl->work[0] = (struct place_work){.name = "pipeline", .pipeline = true, .n = n};
            for (size_t i = 0; i < n; i++)
                pl->work[0].models[i] = i;
            pl->n_work = 1;
        }
    }
    if (!pl->n_work)
        for (size_t i = 0; i < n; i++)
            pl->work[pl->n_work++] = (struct place_work){.name = pl->models[i].name,
                                                         .models = {i}, .n = 1};
    if (pf->tokens)
        pl->params.tokens = pf->tokens;
    if (pf->clients)
        pl->params.clients = pf->clients;
    if (apply_devices(pf, pl))
        return 2;
    char err[1024];
    if (cfg && placement_check_devices(cfg, &pl->budget, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem plan: %s\n", err);
        return 2;
    }
    if (!(pl->result = mem_alloc(sizeof *pl->result)))
        return 1;
    tandem_err e = place_choose(pl->models, n, pl->work, pl->n_work, &pl->budget, &pl->params,
                                plan_cli_footprint, &use_measured, pl->result);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem plan: placement: %s\n", tandem_strerror(e));
        return 1;
    }
    return 0;
}

/* --- main ------------------------------------------------------------------------------------ */

/* Loads the config; its budget applies where no flag overrides it. */
static int load_config(struct plan_cli *o, struct config **cfg, size_t *n) {
    char err[1024];
    if (config_load(o->config, cfg, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, "tandem plan: %s\n", err);
        return 1;
    }
    if ((*cfg)->n_models > MAX_MODELS) {
        fprintf(stderr, "tandem plan: %s: at most %d models\n", o->config, MAX_MODELS);
        return 1;
    }
    if (!o->have_vram && (*cfg)->vram)
        o->vram = (*cfg)->vram, o->have_vram = true;
    if (!o->have_reserve)
        o->reserve = (*cfg)->reserve, o->have_reserve = true;
    if (!o->have_ram && (*cfg)->ram)
        o->ram = (*cfg)->ram, o->have_ram = true;
    size_t local[MAX_MODELS];
    *n = placement_locals(*cfg, local);
    for (size_t i = 0; i < (*cfg)->n_models; i++)
        if ((*cfg)->models[i].upstream)
            fprintf(stderr, "tandem plan: models.%s is remote (%s): it takes no memory here\n",
                    (*cfg)->models[i].name, (*cfg)->models[i].upstream->urls[0]);
    if (!*n) {
        fprintf(stderr, "tandem plan: %s: every model is remote; nothing to plan\n", o->config);
        return 1;
    }
    return 0;
}

int cmd_plan_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    struct plan_cli o = {.settings = plan_default_settings()};
    struct place_flags pf = {0};
    int rc = parse_args(argc, argv, &o, &pf);
    if (rc)
        return rc < 0 ? 0 : rc;
    size_t n = (size_t)(argc - optind);
    struct plan_model *pm[MAX_MODELS] = {0};
    struct fit_model fm[MAX_MODELS];
    struct fit_model_result r[MAX_MODELS];
    struct fit_budget budget = {0};
    struct fit_result res;
    struct placement pl = {0};
    uint64_t total = 0;
    rc = 1;
    struct config *cfg = NULL;
    if (o.config && load_config(&o, &cfg, &n) != 0)
        goto done;
    for (size_t i = 0; i < n; i++) {
        char err[512];
        const struct config_model *cm = cfg ? by_priority(cfg, i) : NULL;
        const char *path = cm ? cm->path : argv[optind + (int)i];
        if (plan_model_open(path, &pm[i], err, sizeof err) != TANDEM_OK) {
            fprintf(stderr, "tandem plan: %s\n", err);
            goto done;
        }
        fm[i] = cm ? (struct fit_model){cm->name, pm[i], cm->settings, cm->pin}
                   : (struct fit_model){host_base_name(path), pm[i], o.settings, false};
        if (plan_model_is_encoder(pm[i]) && !cm)
            fm[i].settings.ctx = 0; /* whole-batch encoders run at their window */
    }
    const char *source = plan_cli_budget(&o, &budget, &total);
    bool use_measured = !o.no_measured;
    tandem_err e = fit_models(fm, n, &budget, plan_cli_footprint, &use_measured, r, &res);
    if (e != TANDEM_OK) {
        fprintf(stderr, "tandem plan: %s\n", tandem_strerror(e));
        goto done;
    }
    if ((rc = place(cfg, fm, n, &o, &pf, &budget, use_measured, &pl)) != 0)
        goto done;
    verdict_settle(fm, r, n, pl.models, &pl.budget, pl.result, &res);
    rc = 1;
    json_t *j = result_json(fm, n, &budget, total, source, r, &res);
    if (j)
        json_object_set_new(j, "placement", placement_json(&pl));
    if (!j) {
        fprintf(stderr, "tandem plan: out of memory\n");
        goto done;
    }
    if (o.json) {
        char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(text ? text : "{}");
        free(text);
    } else {
        print_table(j);
        print_placement(json_object_get(j, "placement"));
    }
    json_decref(j);
    rc = 0;
done:
    for (size_t i = 0; i < n; i++)
        plan_model_free(pm[i]);
    mem_free(pl.result);
    config_free(cfg);
    return rc;
}
