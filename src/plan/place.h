/* place.h: where each model runs (which GPU, how many of its layers, or
 * wholly on the CPU), chosen jointly for all models by the expected latency
 * of the configured work.
 *
 * An arrangement puts every model on the CPU or on one GPU. The models on a
 * GPU are co-resident when they fit together; otherwise they rotate (each
 * loads in turn), or one of them keeps only the layers that fit beside the
 * others (a partial offload) so that none rotates. For each arrangement that
 * fits, the expected seconds per request of every unit of work (a pipeline's
 * stages, or one model's requests) are each model's request cost on its
 * device plus the loads that rotation forces, priced at each model's load
 * cost (cost.h). The arrangement with the lowest mean wins; every other one
 * is kept with the reason it lost. docs/placement.md describes the model. */
#ifndef TANDEM_PLACE_H
#define TANDEM_PLACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "plan/cost.h"
#include "plan/fit.h"
#include "plan/plan.h"

#define PLACE_MAX_GPUS 8
#define PLACE_MAX_MODELS 16
#define PLACE_MAX_STAGES 8
#define PLACE_MAX_WORK 32
#define PLACE_MAX_ALTS 24
#define PLACE_CPU (-1)  /* the device index of the CPU */
#define PLACE_ANY_GPU (-1)

/* What the configuration asks for one model (`device:`). */
enum place_want { PLACE_WANT_AUTO, PLACE_WANT_GPU, PLACE_WANT_CPU };

/* Static names: "auto", "gpu", "cpu". */
const char *place_want_name(enum place_want w);

/* Parses "auto", "gpu", "gpu:N" or "cpu" into *want and *gpu (N, or
 * PLACE_ANY_GPU). Returns TANDEM_ERR_INVAL for anything else. */
tandem_err place_want_parse(const char *text, enum place_want *want, int32_t *gpu);

struct place_model {
    const char *name;               /* borrowed */
    const struct plan_model *model; /* borrowed */
    struct plan_settings settings;  /* requested; ngl PLAN_NGL_AUTO = as many as fit */
    enum place_want want;
    int32_t gpu;                    /* with PLACE_WANT_GPU: N of gpu:N, or PLACE_ANY_GPU */
    bool pinned;                    /* never rotated out, never the partial one */
    struct cost_model cost;         /* from cost_of() */
};

struct place_budget {
    uint32_t n_gpus;                     /* 0 = none: everything on the CPU */
    uint64_t gpu_bytes[PLACE_MAX_GPUS];  /* usable memory per GPU */
    uint64_t host_bytes;                 /* usable host RAM */
};

/* One unit of the configured work: the models one request uses, in order. */
struct place_work {
    const char *name;                    /* borrowed: a pipeline or model name */
    bool pipeline;
    size_t models[PLACE_MAX_STAGES];     /* indexes into the models */
    size_t n;
};

struct place_params {
    uint32_t tokens;      /* prompt tokens of a typical request */
    uint32_t clients;     /* requests in flight at once (grouping shares a load) */
    uint32_t group_limit; /* scheduling.group_limit: requests one load may serve */
};

/* Where one model runs in an arrangement. */
struct place_slot {
    int32_t device;                /* a GPU index, or PLACE_CPU */
    int32_t ngl;                   /* layers on the GPU (0 on the CPU) */
    bool rotates;                  /* loads in turn with others on its GPU */
    struct plan_footprint footprint;
    double request_s;              /* one request of params.tokens here */
    double load_s;                 /* one load here */
};

struct place_arrangement {
    bool fits;
    struct place_slot slot[PLACE_MAX_MODELS];
    uint64_t gpu_need[PLACE_MAX_GPUS]; /* resident at once (a rotating GPU: its largest
                                        * moment) */
    uint64_t host_need;
    double work_s[PLACE_MAX_WORK];      /* expected seconds per request of each work */
    double loads[PLACE_MAX_WORK];       /* expected loads per request of each work */
    double score;                       /* mean of work_s */
    char label[256];                    /* "kev gpu:0 29/33, laya cpu" */
    char reason[320];                   /* why it fits or not; for alternatives, why not */
};

struct place_result {
    struct place_arrangement best;
    struct place_arrangement alts[PLACE_MAX_ALTS]; /* the others, best first; those that
                                                    * do not fit last */
    size_t n_alts;
    size_t n_considered;
};

/* Chooses the arrangement of models[n] on budget b for work[n_work] (none =
 * each model's requests alone, in turn), computing footprints with fn (user
 * passed through). Returns TANDEM_ERR_INVAL when n or n_work exceeds the
 * maxima or a work names a bad index, the first error fn returns, else
 * TANDEM_OK; out->best.fits is false when no arrangement fits (its reason
 * says why, naming the numbers). */
tandem_err place_choose(const struct place_model *models, size_t n, const struct place_work *work,
                        size_t n_work, const struct place_budget *b, const struct place_params *p,
                        fit_footprint_fn fn, void *user, struct place_result *out);

/* Writes "cpu" or "gpu:N" for device into out[cap]; returns out. */
char *place_device_name(int32_t device, char *out, size_t cap);

#endif
