/* fit.h: which models can be resident together on one device budget.
 *
 * Given planned footprints, a budget and the models in priority order, fit
 * decides co-resident / rotate / partial offload / does not fit, the largest
 * context and GPU-layer count each model can have, and a reason and an
 * alternative in words. Pure arithmetic over plan_model_footprint(). */
#ifndef TANDEM_FIT_H
#define TANDEM_FIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"

/* Computes one model's footprint (the planner, optionally corrected by
 * measurements); fit calls it many times. Returns plan_model_footprint()'s
 * errors. user is passed through. */
typedef tandem_err (*fit_footprint_fn)(const struct plan_model *m, const struct plan_settings *s,
                                       struct plan_footprint *out, void *user);

struct fit_model {
    const char *name;               /* borrowed; for messages */
    const struct plan_model *model; /* borrowed */
    struct plan_settings settings;  /* as requested; ngl PLAN_NGL_AUTO = as many as fit */
    bool pinned;                    /* never the one offloaded or rotated out */
};

struct fit_budget {
    bool gpu;            /* plan against a GPU (else everything is host RAM) */
    uint64_t gpu_bytes;  /* usable GPU memory: total minus reserve */
    uint64_t host_bytes; /* usable host RAM */
};

enum fit_verdict {
    FIT_CO_RESIDENT, /* all fit together at the requested settings */
    FIT_ROTATE,      /* each fits alone, not together */
    FIT_PARTIAL,     /* a model fits only with some layers on the host */
    FIT_NO_FIT,      /* a model does not fit even fully on the host */
};

/* How much slower a partially offloaded model is, by the share of its
 * layers on the GPU (rough classes; docs/planner.md). */
enum fit_slowdown {
    FIT_SLOWDOWN_NONE,   /* all layers on the GPU */
    FIT_SLOWDOWN_MILD,   /* >= 90% of the layers on the GPU */
    FIT_SLOWDOWN_HEAVY,  /* >= 50% */
    FIT_SLOWDOWN_SEVERE, /* < 50%: CPU-bound */
};

struct fit_model_result {
    struct plan_footprint footprint; /* at the settings the verdict assumes */
    int32_t ngl;          /* GPU layers the verdict assumes */
    int32_t max_ngl;      /* most GPU layers that fit alone at the requested context */
    uint32_t max_ctx;     /* largest context that fits beside the others (co-resident) or
                           * alone (otherwise), with all layers on the GPU; 0 = none */
    bool fits_alone;      /* fits the budget alone with all layers on the GPU */
    enum fit_slowdown slowdown;
};

struct fit_result {
    enum fit_verdict verdict;
    uint64_t need_gpu, need_host; /* totals at the verdict's settings */
    char reason[512];             /* why, in one sentence */
    char alternative[512];        /* the best other arrangement, "" when none is needed */
};

/* Static names: "co-resident", "rotate", "partial", "does not fit";
 * "none", "mild", "heavy", "severe". */
const char *fit_verdict_name(enum fit_verdict v);
const char *fit_slowdown_name(enum fit_slowdown s);

/* The slowdown class of a model with ngl of its layers (the output layer
 * included) on the GPU. */
enum fit_slowdown fit_slowdown_of(int32_t ngl, int32_t layers);

/* Decides the fit of models[n] (highest priority first) on budget, filling
 * results[n] and *out (outputs). fn computes footprints (user passed
 * through). Returns the first error fn returns, else TANDEM_OK. */
tandem_err fit_models(const struct fit_model *models, size_t n, const struct fit_budget *budget,
                      fit_footprint_fn fn, void *user, struct fit_model_result *results,
                      struct fit_result *out);

#endif
