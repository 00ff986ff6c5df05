/* qladder_plan.h: where a quantization ladder's rung would run beside its partners.
 *
 * A rung is the source with its weights scaled to the rung's exact size. It
 * is planned with `tandem plan`'s accounting and asked of the placement
 * search (plan/place.h) that `tandem plan` and the daemon use: the rung runs
 * whole on the budget's device (every layer on a GPU when the budget has
 * one, never rotated out), the partners wherever the search puts them. The
 * rung fits when an arrangement of that kind fits with no model rotating;
 * the best such one says where each partner runs. docs/quantize.md, step 4. */
#ifndef TANDEM_QLADDER_PLAN_H
#define TANDEM_QLADDER_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "plan/fit.h"
#include "plan/place.h"
#include "plan/plan.h"
#include "plan/plan_cli.h"
#include "serve/config.h"

#define QLADDER_MAX_PARTNERS 8

/* The budget, the partners and the work, planned once for every rung. */
struct qladder_plan {
    const struct plan_model *src;        /* borrowed: the source, whose weights are scaled */
    struct plan_settings settings;       /* the rung's launch settings */
    struct fit_budget budget;            /* as tandem plan computes it */
    const char *budget_source;           /* static: where the budget came from */
    struct place_budget place;           /* the same budget, per GPU */
    struct fit_model partners[QLADDER_MAX_PARTNERS];
    struct plan_model *partner_pm[QLADDER_MAX_PARTNERS]; /* owned */
    size_t n_partners;
    struct config *cfg;                  /* owned: --config's, or NULL */
    bool measured;                       /* the partners' footprints from the cache */
    fit_footprint_fn fn;                 /* every model's footprint before scaling; NULL =
                                          * the planner's (the cache's for the partners) */
    void *fn_user;
    /* the placement search's inputs: models[rung] is the rung, models[partner_at[i]]
     * is partners[i] */
    struct place_model models[PLACE_MAX_MODELS];
    struct place_work work[PLACE_MAX_WORK];
    size_t n_models, n_work, rung, partner_at[QLADDER_MAX_PARTNERS];
    struct place_params params;
};

/* Where one rung runs. */
struct qladder_fit {
    uint64_t mem_alone;   /* the rung's bytes with every layer on the budget's device */
    uint64_t mem_pair;    /* the same plus each partner's */
    bool fits;            /* an arrangement keeps the rung whole with nothing rotating */
    char reason[512];     /* why it does not fit ("" when it does) */
    char placement[256];  /* the arrangement ("Q4_K_M gpu:0, laya cpu"); "" without one */
    char partner_device[QLADDER_MAX_PARTNERS][48]; /* per partner: "cpu", "gpu:0", or
                                                    * "gpu:0 12/25 layers" */
};

/* Sets up *p (output) for the source src: the partners are with's file
 * (with_path, NULL = none) or, with cli->config, the config's other local
 * models beside model (the rung replaces it and takes its settings); the
 * budget is cli's, completed by the config's (cli is updated). Returns
 * TANDEM_OK; on failure, after "tandem quantize --ladder: ..." on stderr,
 * the config's or the model's error, or TANDEM_ERR_INVAL (the config lacks
 * the model, or holds too many). Borrows src and cli's strings for p's life;
 * release with qladder_plan_deinit (also after a failure). */
tandem_err qladder_plan_init(struct qladder_plan *p, const struct plan_model *src,
                             struct plan_cli *cli, const char *with_path, const char *model);

/* Releases what p owns; p may be zeroed or half set up. */
void qladder_plan_deinit(struct qladder_plan *p);

/* Plans a rung named name (its type) of rung_bytes of weights into *out
 * (output). Returns TANDEM_OK, TANDEM_ERR_NOMEM, or the footprint function's
 * or the placement search's error. */
tandem_err qladder_plan_rung(const struct qladder_plan *p, const char *name, uint64_t rung_bytes,
                             struct qladder_fit *out);

/* The arrangement a rung is served in: the first of r's (the best, then the
 * others, best first) that fits with no model rotating; NULL when none does.
 * Borrows r; the result points into it. */
const struct place_arrangement *qladder_plan_pick(const struct place_result *r, size_t n_models);

#endif
