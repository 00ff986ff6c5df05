/* qladder_plan.c: a ladder rung planned beside its partners by the placement search.
 *
 * The partners and the budget are set up once (qladder_plan_init): --with's
 * file forms a decide-then-verify pipeline with the rung, as `tandem plan
 * A B` does; --config's models keep their settings, devices, pins and
 * pipelines, the rung standing in for the model it replaces, as `tandem plan
 * --config` does. Per rung (qladder_plan_rung), every footprint is the
 * planner's with the source's weights scaled to the rung's size, and the
 * placement search runs with the rung pinned on the budget's device: it is
 * never rotated out nor cut to a partial offload, so a rung that fits runs
 * whole. qladder_plan_pick then takes the best arrangement in which nothing
 * rotates: the partners may sit on the GPU beside it, partly on it, or on
 * the CPU. The MiB columns (alone, with the partners) stay what they were:
 * every layer of each model on the budget's device. */
#include "flow/qladder_plan.h"

#include <stdio.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"
#include "plan/cost.h"
#include "serve/placement.h"
#include "version.h"

#define ERR_PREFIX "tandem quantize --ladder: "

/* --- setting up ------------------------------------------------------------------------------ */

/* The config's models: model is the rung, the other local ones the partners. */
static tandem_err load_config(struct qladder_plan *p, struct plan_cli *cli, const char *model,
                              struct plan_model **by_index, size_t *me_index) {
    char err[1024];
    tandem_err e = config_load(cli->config, &p->cfg, err, sizeof err);
    if (e != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", err);
        return e;
    }
    const struct config_model *me = config_find_model(p->cfg, model);
    if (!me || !me->path) {
        fprintf(stderr, ERR_PREFIX "%s declares no local model \"%s\"\n", cli->config, model);
        return TANDEM_ERR_INVAL;
    }
    if (p->cfg->n_models > PLACE_MAX_MODELS) {
        fprintf(stderr, ERR_PREFIX "%s: at most %d models\n", cli->config, PLACE_MAX_MODELS);
        return TANDEM_ERR_INVAL;
    }
    p->settings = me->settings;
    if (!cli->have_vram && p->cfg->vram)
        cli->vram = p->cfg->vram, cli->have_vram = true;
    if (!cli->have_reserve)
        cli->reserve = p->cfg->reserve, cli->have_reserve = true;
    if (!cli->have_ram && p->cfg->ram)
        cli->ram = p->cfg->ram, cli->have_ram = true;
    *me_index = (size_t)(me - p->cfg->models);
    by_index[*me_index] = (struct plan_model *)p->src;
    for (size_t i = 0; i < p->cfg->n_models; i++) {
        const struct config_model *cm = &p->cfg->models[i];
        if (cm == me || !cm->path)
            continue;
        if (p->n_partners == QLADDER_MAX_PARTNERS) {
            fprintf(stderr, ERR_PREFIX "%s: at most %d models beside \"%s\"\n", cli->config,
                    QLADDER_MAX_PARTNERS, model);
            return TANDEM_ERR_INVAL;
        }
        struct plan_model **pm = &p->partner_pm[p->n_partners];
        if ((e = plan_model_open(cm->path, pm, err, sizeof err)) != TANDEM_OK) {
            fprintf(stderr, ERR_PREFIX "%s\n", err);
            return e;
        }
        by_index[i] = *pm;
        p->partners[p->n_partners++] = (struct fit_model){cm->name, *pm, cm->settings, cm->pin};
    }
    return TANDEM_OK;
}

/* The placement inputs of a config (at most PLACE_MAX_MODELS models): its
 * local models in file order. */
static void config_inputs(struct qladder_plan *p, struct plan_model *const *by_index,
                          size_t me_index) {
    size_t local[PLACE_MAX_MODELS];
    p->n_models = placement_locals(p->cfg, local);
    p->n_work = placement_inputs(p->cfg, by_index, p->measured, p->models, p->work);
    p->params = placement_params(p->cfg);
    for (size_t k = 0; k < p->n_models; k++) {
        if (local[k] == me_index)
            p->rung = k;
        for (size_t i = 0; i < p->n_partners; i++)
            if (by_index[local[k]] == p->partner_pm[i])
                p->partner_at[i] = k;
    }
}

/* The placement inputs without a config: the rung decides, the partner
 * verifies, as `tandem plan RUNG PARTNER` plans them. */
static void pipeline_inputs(struct qladder_plan *p) {
    double cpu_flops = cost_cpu_flops(TANDEM_ENGINE_BUILD, p->measured, NULL);
    p->n_models = 1 + p->n_partners;
    p->models[0] = (struct place_model){.name = "the rung", .model = p->src,
                                        .settings = p->settings, .gpu = PLACE_ANY_GPU};
    for (size_t i = 0; i < p->n_partners; i++) {
        p->models[1 + i] = (struct place_model){.name = p->partners[i].name,
                                                .model = p->partners[i].model,
                                                .settings = p->partners[i].settings,
                                                .gpu = PLACE_ANY_GPU};
        p->partner_at[i] = 1 + i;
    }
    for (size_t i = 0; i < p->n_models; i++)
        cost_of(p->models[i].model, TANDEM_ENGINE_BUILD, p->measured, cpu_flops,
                &p->models[i].cost);
    p->params = (struct place_params){.tokens = 256, .clients = 1, .group_limit = 16};
    p->rung = 0;
    if (p->n_partners) {
        p->work[0] = (struct place_work){.name = "pipeline", .pipeline = true, .n = p->n_models};
        for (size_t i = 0; i < p->n_models; i++)
            p->work[0].models[i] = i;
        p->n_work = 1;
    }
}

tandem_err qladder_plan_init(struct qladder_plan *p, const struct plan_model *src,
                             struct plan_cli *cli, const char *with_path, const char *model) {
    char err[1024];
    struct plan_model *by_index[PLACE_MAX_MODELS] = {0};
    size_t me_index = 0;
    tandem_err e;
    memset(p, 0, sizeof *p);
    p->src = src;
    p->settings = cli->settings;
    p->measured = !cli->no_measured;
    if (cli->config) {
        if ((e = load_config(p, cli, model, by_index, &me_index)) != TANDEM_OK)
            return e;
    } else if (with_path) {
        if ((e = plan_model_open(with_path, &p->partner_pm[0], err, sizeof err)) != TANDEM_OK) {
            fprintf(stderr, ERR_PREFIX "--with: %s\n", err);
            return e;
        }
        p->partners[0] = (struct fit_model){host_base_name(with_path), p->partner_pm[0],
                                            cli->settings, false};
        if (plan_model_is_encoder(p->partner_pm[0]))
            p->partners[0].settings.ctx = 0; /* whole-batch encoders run at their window */
        p->n_partners = 1;
    }
    if (plan_model_is_encoder(src) && !p->cfg)
        p->settings.ctx = 0;
    uint64_t total;
    p->budget_source = plan_cli_budget(cli, &p->budget, &total);
    plan_cli_place_budget(cli, &p->budget, &p->place);
    if (p->cfg)
        config_inputs(p, by_index, me_index);
    else
        pipeline_inputs(p);
    struct place_model *r = &p->models[p->rung];
    r->pinned = true; /* never rotated out, never the partial one: the rung runs whole */
    if (r->want == PLACE_WANT_AUTO && p->place.n_gpus)
        r->want = PLACE_WANT_GPU, r->gpu = PLACE_ANY_GPU;
    return TANDEM_OK;
}

void qladder_plan_deinit(struct qladder_plan *p) {
    for (size_t i = 0; i < p->n_partners; i++)
        plan_model_free(p->partner_pm[i]);
    config_free(p->cfg);
    memset(p, 0, sizeof *p);
}

/* --- one rung -------------------------------------------------------------------------------- */

/* fit_footprint_fn for a rung: the source's plan with its weights scaled to
 * the rung's size; the partners' as tandem plan computes them. */
struct rung_plan {
    const struct qladder_plan *p;
    double scale;
};

static tandem_err rung_footprint(const struct plan_model *m, const struct plan_settings *s,
                                 struct plan_footprint *out, void *user) {
    const struct rung_plan *rp = user;
    const struct qladder_plan *p = rp->p;
    bool measured = p->measured;
    if (m != p->src)
        return p->fn ? p->fn(m, s, out, p->fn_user) : plan_cli_footprint(m, s, out, &measured);
    tandem_err e = p->fn ? p->fn(m, s, out, p->fn_user) : plan_model_footprint(m, s, out);
    for (int d = 0; e == TANDEM_OK && d < PLAN_DEVICE_COUNT; d++)
        out->bytes[d][PLAN_PART_WEIGHTS] =
            (uint64_t)((double)out->bytes[d][PLAN_PART_WEIGHTS] * rp->scale + 0.5);
    return e;
}

/* The planned bytes of m with every layer on the budget's device. */
static uint64_t full_need(const struct qladder_plan *p, const struct plan_model *m,
                          const struct plan_settings *settings, struct rung_plan *rp) {
    struct plan_settings want = *settings, resolved;
    if (want.ngl == PLAN_NGL_AUTO)
        want.ngl = (int32_t)plan_model_n_layer(m) + 1;
    want.gpu = p->budget.gpu;
    plan_model_resolve(m, &want, &resolved);
    struct plan_footprint f;
    if (rung_footprint(m, &resolved, &f, rp) != TANDEM_OK)
        return UINT64_MAX;
    return plan_footprint_device_total(&f, p->budget.gpu ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST);
}

const struct place_arrangement *qladder_plan_pick(const struct place_result *r, size_t n_models) {
    for (size_t k = 0; k <= r->n_alts; k++) {
        const struct place_arrangement *a = k ? &r->alts[k - 1] : &r->best;
        bool rotates = false;
        for (size_t i = 0; i < n_models; i++)
            rotates |= a->slot[i].rotates;
        if (a->fits && !rotates)
            return a;
    }
    return NULL;
}

/* Where each partner runs in a, and a's label, into out. */
static void describe(const struct qladder_plan *p, const struct place_arrangement *a,
                     struct qladder_fit *out) {
    snprintf(out->placement, sizeof out->placement, "%s", a->label);
    for (size_t i = 0; i < p->n_partners; i++) {
        const struct place_slot *sl = &a->slot[p->partner_at[i]];
        int32_t all = (int32_t)plan_model_n_layer(p->partners[i].model) + 1;
        char dev[16];
        place_device_name(sl->device, dev, sizeof dev);
        if (sl->device != PLACE_CPU && sl->ngl < all)
            snprintf(out->partner_device[i], sizeof out->partner_device[i], "%s %d/%d layers",
                     dev, sl->ngl, all);
        else
            snprintf(out->partner_device[i], sizeof out->partner_device[i], "%s", dev);
    }
}

tandem_err qladder_plan_rung(const struct qladder_plan *p, const char *name, uint64_t rung_bytes,
                             struct qladder_fit *out) {
    uint64_t src_bytes = plan_model_weight_bytes(p->src);
    struct rung_plan rp = {p, src_bytes ? (double)rung_bytes / (double)src_bytes : 1};
    memset(out, 0, sizeof *out);
    out->mem_alone = out->mem_pair = full_need(p, p->src, &p->settings, &rp);
    for (size_t i = 0; i < p->n_partners; i++)
        out->mem_pair += full_need(p, p->partners[i].model, &p->partners[i].settings, &rp);
    struct place_model models[PLACE_MAX_MODELS];
    memcpy(models, p->models, p->n_models * sizeof *models);
    models[p->rung].name = name;
    struct place_result *r = mem_alloc(sizeof *r);
    if (!r)
        return TANDEM_ERR_NOMEM;
    tandem_err e = place_choose(models, p->n_models, p->work, p->n_work, &p->place, &p->params,
                                rung_footprint, &rp, r);
    const struct place_arrangement *a = e == TANDEM_OK ? qladder_plan_pick(r, p->n_models) : NULL;
    out->fits = a != NULL;
    if (a)
        describe(p, a, out);
    else if (e == TANDEM_OK && r->best.fits)
        snprintf(out->reason, sizeof out->reason,
                 "does not fit without rotation: every arrangement that fits rotates (%.200s)",
                 r->best.label);
    else if (e == TANDEM_OK)
        snprintf(out->reason, sizeof out->reason, "%.300s (%.200s)", r->best.reason,
                 r->best.label);
    mem_free(r);
    return e;
}
