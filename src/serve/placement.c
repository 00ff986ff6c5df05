/* placement.c: from a config to the placement search's inputs (models with
 * their device wants and costs, pipelines as units of work), the errors that
 * name a config line, and the thread split. The search itself is plan/place.c. */
#include "serve/placement.h"

#include <stdio.h>
#include <string.h>

#include "base/units.h"
#include "plan/plan_cli.h"
#include "version.h"

tandem_err placement_check_devices(const struct config *cfg, const struct place_budget *b,
                                   char *err, size_t errlen) {
    for (size_t i = 0; i < cfg->n_models; i++) {
        const struct config_model *m = &cfg->models[i];
        if (m->device != PLACE_WANT_GPU)
            continue;
        if (!b->n_gpus) {
            tandem_errmsg(err, errlen,
                          "%s:%u: models.%s.device: %s, but no GPU was found and budget.vram "
                          "is not set (set it to plan for a GPU, or use device: auto or cpu)",
                          cfg->path, m->device_line, m->name, m->gpu >= 0 ? "gpu:N" : "gpu");
            return TANDEM_ERR_FORMAT;
        }
        if (m->gpu >= (int32_t)b->n_gpus) {
            char have[48];
            if (b->n_gpus == 1)
                snprintf(have, sizeof have, "one GPU, gpu:0");
            else
                snprintf(have, sizeof have, "%u GPUs, gpu:0 to gpu:%u", b->n_gpus, b->n_gpus - 1);
            tandem_errmsg(err, errlen, "%s:%u: models.%s.device: gpu:%d, but this machine has %s",
                          cfg->path, m->device_line, m->name, m->gpu, have);
            return TANDEM_ERR_FORMAT;
        }
    }
    return TANDEM_OK;
}

size_t placement_locals(const struct config *cfg, size_t *local) {
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_models; i++)
        if (!cfg->models[i].upstream)
            local[n++] = i;
    return n;
}

/* The local index of the model named name, or SIZE_MAX (remote or unknown). */
static size_t local_of(const struct config *cfg, const size_t *local, size_t n, const char *name) {
    const struct config_model *m = config_find_model(cfg, name);
    for (size_t k = 0; m && k < n; k++)
        if (&cfg->models[local[k]] == m)
            return k;
    return SIZE_MAX;
}

static void add_stage(struct place_work *w, size_t k) {
    if (k != SIZE_MAX && w->n < PLACE_MAX_STAGES)
        w->models[w->n++] = k;
}

size_t placement_inputs(const struct config *cfg, struct plan_model *const *pm, bool use_measured,
                        struct place_model *models, struct place_work *work) {
    double cpu_flops = cost_cpu_flops(TANDEM_ENGINE_BUILD, use_measured, NULL);
    size_t local[PLACE_MAX_MODELS], n_local = placement_locals(cfg, local);
    for (size_t k = 0; k < n_local; k++) {
        const struct config_model *cm = &cfg->models[local[k]];
        models[k] = (struct place_model){.name = cm->name, .model = pm[local[k]],
                                         .settings = cm->settings, .want = cm->device,
                                         .gpu = cm->gpu, .pinned = cm->pin};
        cost_of(pm[local[k]], TANDEM_ENGINE_BUILD, use_measured, cpu_flops, &models[k].cost);
    }
    size_t n = 0;
    for (size_t p = 0; p < cfg->n_pipelines && n < PLACE_MAX_WORK; p++) {
        const struct config_pipeline *pl = &cfg->pipelines[p];
        struct place_work *w = &work[n];
        *w = (struct place_work){.name = pl->name, .pipeline = true};
        add_stage(w, local_of(cfg, local, n_local, pl->decide.model));
        for (size_t v = 0; v < pl->n_verify; v++)
            add_stage(w, local_of(cfg, local, n_local, pl->verify[v].model));
        n += w->n > 0; /* a pipeline of remote stages only costs nothing here */
    }
    return n;
}

struct place_params placement_params(const struct config *cfg) {
    return (struct place_params){.tokens = cfg->request_tokens, .clients = cfg->clients,
                                 .group_limit = cfg->group_limit};
}

void placement_reserve_cache(const struct config *cfg, struct place_budget *b) {
    b->host_bytes = b->host_bytes > cfg->cache_max_bytes ? b->host_bytes - cfg->cache_max_bytes : 0;
}

/* A model its config puts on the CPU that cannot fit host RAM alone. */
static tandem_err check_cpu_models(const struct config *cfg, const size_t *local, size_t n,
                                   const struct place_budget *b, const struct place_result *r,
                                   char *err, size_t errlen) {
    for (size_t k = 0; k < n; k++) {
        const struct config_model *m = &cfg->models[local[k]];
        uint64_t need = plan_footprint_device_total(&r->best.slot[k].footprint, PLAN_DEVICE_HOST);
        if (m->device != PLACE_WANT_CPU || need <= b->host_bytes)
            continue;
        char a[32], h[32], c[32];
        tandem_errmsg(err, errlen,
                      "%s:%u: models.%s.device: cpu: does not fit: it needs %s of host RAM, "
                      "%s is available (after cache.max_bytes, %s)",
                      cfg->path, m->device_line, m->name, units_format_bytes(need, a, sizeof a),
                      units_format_bytes(b->host_bytes, h, sizeof h),
                      units_format_bytes(cfg->cache_max_bytes, c, sizeof c));
        return TANDEM_ERR_FORMAT;
    }
    return TANDEM_OK;
}

/* The first model that fits no device even alone: err names it and why. */
static bool name_misfit(const struct config *cfg, const size_t *local, size_t n,
                        const struct place_model *models, const struct place_budget *b,
                        const struct place_params *p, bool use_measured,
                        struct place_result *scratch, char *err, size_t errlen) {
    for (size_t k = 0; k < n; k++) {
        if (place_choose(&models[k], 1, NULL, 0, b, p, plan_cli_footprint, &use_measured,
                         scratch) != TANDEM_OK ||
            scratch->best.fits)
            continue;
        const struct config_model *m = &cfg->models[local[k]];
        tandem_errmsg(err, errlen, "%s:%u: models.%s: %s, even alone", cfg->path, m->line,
                      m->name, scratch->best.reason);
        return true;
    }
    return false;
}

tandem_err placement_run(const struct config *cfg, struct plan_model *const *pm,
                         const struct place_budget *b, bool use_measured, struct place_result *out,
                         char *err, size_t errlen) {
    struct place_model models[PLACE_MAX_MODELS];
    struct place_work work[PLACE_MAX_WORK];
    if (cfg->n_models > PLACE_MAX_MODELS) {
        tandem_errmsg(err, errlen, "%s: at most %d models", cfg->path, PLACE_MAX_MODELS);
        return TANDEM_ERR_TOOBIG;
    }
    size_t local[PLACE_MAX_MODELS], n = placement_locals(cfg, local);
    size_t n_work = placement_inputs(cfg, pm, use_measured, models, work);
    struct place_params p = placement_params(cfg);
    tandem_err e = place_choose(models, n, work, n_work, b, &p, plan_cli_footprint,
                                &use_measured, out);
    if (e != TANDEM_OK) {
        tandem_errmsg(err, errlen, "placement: %s", tandem_strerror(e));
        return e;
    }
    if ((e = check_cpu_models(cfg, local, n, b, out, err, errlen)) != TANDEM_OK)
        return e;
    if (out->best.fits)
        return TANDEM_OK;
    char why[sizeof out->best.reason + sizeof out->best.label + 8];
    snprintf(why, sizeof why, "%s (%s)", out->best.reason, out->best.label);
    if (!name_misfit(cfg, local, n, models, b, &p, use_measured, out, err, errlen))
        tandem_errmsg(err, errlen, "%s: no placement of the models fits together: %s", cfg->path,
                      why);
    return TANDEM_ERR_TOOBIG;
}

/* Whether slot i computes (some of its layers) on the CPU. */
static bool on_cpu(const struct place_arrangement *a, struct plan_model *const *pm, size_t i,
                   bool simulated) {
    return simulated || a->slot[i].device == PLACE_CPU ||
           a->slot[i].ngl < (int32_t)plan_model_n_layer(pm[i]) + 1;
}

void placement_threads(const struct place_arrangement *a, struct plan_model *const *pm, size_t n,
                       uint32_t cores, bool simulated, uint32_t clients, uint32_t *threads) {
    uint32_t cpu = 0;
    for (size_t i = 0; i < n; i++)
        cpu += on_cpu(a, pm, i, simulated);
    uint32_t gpu = (uint32_t)n - cpu, per_gpu = 1, per_cpu = 1;
    if (!cpu && n)
        per_gpu = cores / (uint32_t)n ? cores / (uint32_t)n : 1;
    uint32_t sharing = clients > 1 ? cpu : 1;
    if (cpu && cores > gpu)
        per_cpu = (cores - gpu) / sharing ? (cores - gpu) / sharing : 1;
    for (size_t i = 0; i < n; i++)
        threads[i] = on_cpu(a, pm, i, simulated) ? per_cpu : per_gpu;
}
