/* fit.c: residency decisions over planned footprints.
 *
 * Footprints grow monotonically with context and with GPU layers, so the
 * largest context (in steps of the engine's 256-cell padding) and the most
 * GPU layers that fit a share of the budget are found by binary search.
 * The verdict, in order of preference:
 *   co-resident  every model at its requested settings fits together;
 *   rotate       each fits alone with all layers on the device, not together;
 *                the alternative names a smaller context or a partial
 *                offload that would let them share the device;
 *   partial      a model fits only with some layers left on the host;
 *   no fit       a model does not fit even with every layer on the host.
 * The "device" is the GPU when the budget has one, else host RAM. */
#include "plan/fit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/units.h"

struct ctx {
    const struct fit_model *models;
    size_t n;
    const struct fit_budget *budget;
    fit_footprint_fn fn;
    void *user;
    tandem_err err;
};

const char *fit_verdict_name(enum fit_verdict v) {
    switch (v) {
    case FIT_CO_RESIDENT: return "co-resident";
    case FIT_ROTATE: return "rotate";
    case FIT_PARTIAL: return "partial";
    case FIT_NO_FIT: return "does not fit";
    }
    return "?";
}

const char *fit_slowdown_name(enum fit_slowdown s) {
    switch (s) {
    case FIT_SLOWDOWN_NONE: return "none";
    case FIT_SLOWDOWN_MILD: return "mild";
    case FIT_SLOWDOWN_HEAVY: return "heavy";
    case FIT_SLOWDOWN_SEVERE: return "severe";
    }
    return "?";
}

static enum plan_device device(const struct ctx *c) {
    return c->budget->gpu ? PLAN_DEVICE_GPU : PLAN_DEVICE_HOST;
}

static uint64_t capacity(const struct ctx *c) {
    return c->budget->gpu ? c->budget->gpu_bytes : c->budget->host_bytes;
}

static int32_t all_layers(const struct fit_model *m) {
    return (int32_t)plan_model_n_layer(m->model) + 1;
}

/* Footprint of model i with ctx (0 = as requested) and ngl; false on error. */
static bool footprint(struct ctx *c, size_t i, uint32_t ctx, int32_t ngl,
                      struct plan_footprint *out) {
    struct plan_settings s = c->models[i].settings;
    s.gpu = c->budget->gpu;
    if (ctx)
        s.ctx = ctx;
    s.ngl = c->budget->gpu ? ngl : 0;
    tandem_err e = c->fn(c->models[i].model, &s, out, c->user);
    if (e != TANDEM_OK && c->err == TANDEM_OK)
        c->err = e;
    return e == TANDEM_OK;
}

static uint64_t on_device(const struct ctx *c, const struct plan_footprint *f) {
    return plan_footprint_device_total(f, device(c));
}

/* Most GPU layers of model i that fit in cap at the requested context; -1 = none. */
static int32_t max_ngl(struct ctx *c, size_t i, uint64_t cap) {
    struct plan_footprint f;
    int32_t lo = -1, hi = all_layers(&c->models[i]);
    if (!c->budget->gpu)
        return 0;
    while (lo < hi) { /* invariant: lo fits (or is -1), everything above hi does not */
        int32_t mid = lo + (hi - lo + 1) / 2;
        if (footprint(c, i, 0, mid, &f) && on_device(c, &f) <= cap)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Largest context of model i (multiple of 256, at most its training context
 * per slot) that fits in cap with all layers on the device; 0 = none. */
static uint32_t max_ctx(struct ctx *c, size_t i, uint64_t cap) {
    const struct fit_model *m = &c->models[i];
    struct plan_footprint f;
    uint32_t slots = m->settings.parallel ? m->settings.parallel : 1;
    uint32_t top = plan_model_ctx_train(m->model) * slots / 256;
    if (plan_model_is_encoder(m->model)) /* an encoder's context is its window */
        return footprint(c, i, 0, all_layers(m), &f) && on_device(c, &f) <= cap
                   ? plan_model_ctx_train(m->model)
                   : 0;
    uint32_t lo = 0, hi = top;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (footprint(c, i, mid * 256, all_layers(m), &f) && on_device(c, &f) <= cap)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo * 256;
}

enum fit_slowdown fit_slowdown_of(int32_t ngl, int32_t layers) {
    double share = (double)(ngl > 0 ? ngl : 0) / (double)(layers > 0 ? layers : 1);
    return share >= 1.0   ? FIT_SLOWDOWN_NONE
           : share >= 0.9 ? FIT_SLOWDOWN_MILD
           : share >= 0.5 ? FIT_SLOWDOWN_HEAVY
                          : FIT_SLOWDOWN_SEVERE;
}

/* The class by the share of layers (the output layer included) on the GPU. */
static enum fit_slowdown slowdown_of(const struct fit_model *m, const struct plan_footprint *f) {
    return fit_slowdown_of(f->ngl, all_layers(m));
}

static uint64_t others(const struct fit_model_result *r, size_t n, size_t skip,
                       enum plan_device d) {
    uint64_t sum = 0;
    for (size_t j = 0; j < n; j++)
        if (j != skip)
            sum += plan_footprint_device_total(&r[j].footprint, d);
    return sum;
}

static uint64_t room(uint64_t cap, uint64_t used) { return cap > used ? cap - used : 0; }

/* The lowest-priority model that is not pinned, or n when all are pinned. */
static size_t yielding_model(const struct ctx *c) {
    for (size_t i = c->n; i-- > 0;)
        if (!c->models[i].pinned)
            return i;
    return c->n;
}

/* The smallest context worth suggesting: below it a decision prompt with a
 * few options and a real state no longer fits. */
#define MIN_USEFUL_CTX 2048

static void rotate_alternative(struct ctx *c, struct fit_model_result *r, struct fit_result *out) {
    enum plan_device d = device(c);
    /* first choice: a smaller context for one model, lowest priority first */
    for (size_t k = c->n; k-- > 0;) {
        if (c->models[k].pinned || plan_model_is_encoder(c->models[k].model))
            continue;
        uint32_t ctx = max_ctx(c, k, room(capacity(c), others(r, c->n, k, d)));
        if (ctx >= MIN_USEFUL_CTX) {
            snprintf(out->alternative, sizeof out->alternative,
                     "co-resident if %s runs with context %u (requested %u)", c->models[k].name,
                     ctx, r[k].footprint.n_ctx);
            return;
        }
    }
    /* second: the lowest-priority model partially offloaded */
    size_t k = yielding_model(c);
    int32_t ngl = k < c->n ? max_ngl(c, k, room(capacity(c), others(r, c->n, k, d))) : -1;
    struct plan_footprint f;
    if (c->budget->gpu && ngl >= 1 && footprint(c, k, 0, ngl, &f)) {
        snprintf(out->alternative, sizeof out->alternative,
                 "co-resident if %s keeps %d of %d layers on the GPU (slowdown: %s)",
                 c->models[k].name, ngl, all_layers(&c->models[k]),
                 fit_slowdown_name(slowdown_of(&c->models[k], &f)));
        return;
    }
    snprintf(out->alternative, sizeof out->alternative,
             "none that shares the device: each model loads alone, and a switch costs a load");
}

static void describe_need(char *buf, size_t cap, const char *what, uint64_t need, uint64_t have) {
    char a[32], b[32];
    snprintf(buf, cap, "%s need %s of %s", what, units_format_bytes(need, a, sizeof a),
             units_format_bytes(have, b, sizeof b));
}

/* A model that does not fit alone: partial offload or no fit. */
static void decide_too_big(struct ctx *c, size_t i, struct fit_model_result *r,
                           struct fit_result *out) {
    char need[128];
    describe_need(need, sizeof need, "alone it would", on_device(c, &r[i].footprint),
                  capacity(c));
    int32_t ngl = r[i].max_ngl;
    struct plan_footprint f;
    if (!c->budget->gpu || ngl < 1 || !footprint(c, i, 0, ngl, &f) ||
        plan_footprint_device_total(&f, PLAN_DEVICE_HOST) > c->budget->host_bytes) {
        out->verdict = FIT_NO_FIT;
        snprintf(out->reason, sizeof out->reason, "%s does not fit: %s", c->models[i].name, need);
        uint32_t ctx = r[i].max_ctx;
        if (ctx >= MIN_USEFUL_CTX)
            snprintf(out->alternative, sizeof out->alternative,
                     "%s fits alone with context %u", c->models[i].name, ctx);
        return;
    }
    out->verdict = FIT_PARTIAL;
    r[i].footprint = f;
    r[i].ngl = ngl;
    r[i].slowdown = slowdown_of(&c->models[i], &f);
    snprintf(out->reason, sizeof out->reason,
             "%s fits only partially offloaded: %s; %d of %d layers fit on the GPU "
             "(slowdown: %s)",
             c->models[i].name, need, ngl, all_layers(&c->models[i]),
             fit_slowdown_name(r[i].slowdown));
    if (c->n > 1) {
        uint64_t left = room(capacity(c), others(r, c->n, i, device(c)));
        int32_t beside = max_ngl(c, i, left);
        if (beside >= 1)
            snprintf(out->alternative, sizeof out->alternative,
                     "the others stay resident beside %s at %d of %d GPU layers, or rotate "
                     "with %s at %d layers",
                     c->models[i].name, beside, all_layers(&c->models[i]), c->models[i].name,
                     ngl);
        else
            snprintf(out->alternative, sizeof out->alternative,
                     "rotate: %s loads alone at %d GPU layers; nothing fits beside it",
                     c->models[i].name, ngl);
    } else if (r[i].max_ctx >= MIN_USEFUL_CTX) {
        snprintf(out->alternative, sizeof out->alternative,
                 "all layers fit on the GPU with context %u", r[i].max_ctx);
    }
}

tandem_err fit_models(const struct fit_model *models, size_t n, const struct fit_budget *budget,
                      fit_footprint_fn fn, void *user, struct fit_model_result *r,
                      struct fit_result *out) {
    struct ctx c = {models, n, budget, fn, user, TANDEM_OK};
    memset(out, 0, sizeof *out);
    memset(r, 0, n * sizeof *r);
    uint64_t cap = capacity(&c);
    for (size_t i = 0; i < n; i++) {
        int32_t ngl = models[i].settings.ngl == PLAN_NGL_AUTO ? all_layers(&models[i])
                                                              : models[i].settings.ngl;
        if (!footprint(&c, i, 0, ngl, &r[i].footprint))
            return c.err;
        r[i].ngl = r[i].footprint.ngl;
        r[i].fits_alone = on_device(&c, &r[i].footprint) <= cap &&
                          plan_footprint_device_total(&r[i].footprint, PLAN_DEVICE_HOST) <=
                              budget->host_bytes;
        r[i].max_ngl = max_ngl(&c, i, cap);
        r[i].slowdown = budget->gpu ? slowdown_of(&models[i], &r[i].footprint) : FIT_SLOWDOWN_NONE;
    }
    out->need_gpu = others(r, n, n, PLAN_DEVICE_GPU);
    out->need_host = others(r, n, n, PLAN_DEVICE_HOST);
    uint64_t need = budget->gpu ? out->need_gpu : out->need_host;
    bool together = need <= cap && out->need_host <= budget->host_bytes;
    for (size_t i = 0; i < n; i++)
        r[i].max_ctx = max_ctx(&c, i, together ? room(cap, others(r, n, i, device(&c))) : cap);
    char why[128];
    describe_need(why, sizeof why, n > 1 ? "together they" : "it would", need, cap);
    if (together) {
        out->verdict = FIT_CO_RESIDENT;
        snprintf(out->reason, sizeof out->reason, "%s", why);
        return c.err;
    }
    for (size_t i = 0; i < n; i++)
        if (!r[i].fits_alone) {
            decide_too_big(&c, i, r, out);
            out->need_gpu = others(r, n, n, PLAN_DEVICE_GPU); /* at the offload it chose */
            out->need_host = others(r, n, n, PLAN_DEVICE_HOST);
            return c.err;
        }
    out->verdict = FIT_ROTATE;
    snprintf(out->reason, sizeof out->reason, "each fits alone, but %s", why);
    rotate_alternative(&c, r, out);
    return c.err;
}
