/* cmd_plan.c: `tandem plan MODEL.gguf ... [options]`.
 *
 * Plans each model's footprint from its header (and, unless --no-measured,
 * the footprint cache), fits them to the budget, and prints a budget table or
 * the stable JSON of docs/planner.md. The JSON object is built first; the
 * table is rendered from it, so the two cannot disagree. Nothing but GGUF
 * headers is read. Models are listed highest priority first. */
#include "cli/cmd_plan.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"
#include "plan/fit.h"
#include "gguf/ggml_types.h"
#include "plan/plan.h"
#include "plan/plan_cli.h"
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
            "                       priorities, pins and budget (flags override the budget)\n"
            "output:\n"
            "  --no-measured        ignore the footprint cache: the model alone\n"
            "  --json               stable machine-readable output (docs/planner.md)\n"
            "  -h, --help\n",
            (unsigned long long)(PLAN_GPU_OVERHEAD_BYTES >> 20));
}

static int parse_args(int argc, char **argv, struct plan_cli *o) {
    int c;
    optind = 0; /* glibc: full re-initialisation, permuting models after options */
    while ((c = getopt_long(argc, argv, "h", plan_cli_options, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c == '?' || plan_cli_option(c, optarg, o) != 0)
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
    return json_pack("{s:i, s:i, s:b, s:s, s:s, s:b, s:i, s:i, s:b}", "ctx", (json_int_t)s->ctx,
                     "parallel", (json_int_t)s->parallel, "kv_unified", s->kv_unified,
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
        printf("  %-22s ctx %lld (max %lld), %lld of %lld layers on the GPU%s\n", "",
               json_integer_value(json_object_get(m, "n_ctx")),
               json_integer_value(json_object_get(m, "max_ctx")),
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
    *n = (*cfg)->n_models;
    return 0;
}

/* The i-th model by priority (highest first; file order breaks ties). */
static const struct config_model *by_priority(const struct config *c, size_t i) {
    for (int32_t p = 1000; p >= -1000; p--)
        for (size_t k = 0; k < c->n_models; k++)
            if (c->models[k].priority == p && i-- == 0)
                return &c->models[k];
    return NULL;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

int cmd_plan_main(int argc, char **argv, const char *llama_server) {
    (void)llama_server;
    struct plan_cli o = {.settings = plan_default_settings()};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    size_t n = (size_t)(argc - optind);
    struct plan_model *pm[MAX_MODELS] = {0};
    struct fit_model fm[MAX_MODELS];
    struct fit_model_result r[MAX_MODELS];
    struct fit_budget budget = {0};
    struct fit_result res;
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
                   : (struct fit_model){base_name(path), pm[i], o.settings, false};
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
    json_t *j = result_json(fm, n, &budget, total, source, r, &res);
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
    }
    json_decref(j);
    rc = 0;
done:
    for (size_t i = 0; i < n; i++)
        plan_model_free(pm[i]);
    config_free(cfg);
    return rc;
}
