/* verdict.h: one verdict for a plan: fit's words (co-resident, rotate,
 * partial, does not fit), derived from the arrangement the placement search
 * chose (verdict.c). */
#ifndef TANDEM_VERDICT_H
#define TANDEM_VERDICT_H

#include <stddef.h>

#include "plan/fit.h"
#include "plan/place.h"

/* The verdict that arrangement a of models[n] (its slots in the same order)
 * on budget b stands for:
 *   FIT_NO_FIT       a does not fit;
 *   FIT_ROTATE       a model rotates (loads in turn with others);
 *   FIT_PARTIAL      nothing rotates, and on a budget with a GPU a model
 *                    keeps fewer layers on its GPU than it asks for, or runs
 *                    wholly on the CPU although its device allows a GPU;
 *   FIT_CO_RESIDENT  every model stays resident as it asks.
 * All arguments borrowed. */
enum fit_verdict verdict_of_arrangement(const struct place_model *models, size_t n,
                                        const struct place_budget *b,
                                        const struct place_arrangement *a);

/* Makes fit's answer and the placement's one: res (in-out) holds fit_models()'s
 * result for fm[n] with per-model results fr[n]; placed is place_choose()'s
 * result for models[n] (the same models, matched by their plan_model, in any
 * order) on budget b. res->verdict becomes verdict_of_arrangement() of the
 * chosen arrangement. When that is fit's verdict and every model sits where
 * fit assumed (all on the GPU budget's device, at fit's layer count), res is
 * left as it is. Otherwise res->reason describes the chosen arrangement
 * (what rotates, what keeps fewer layers, what runs on the CPU), followed by
 * fit's own reason, and res->alternative names the best other arrangement
 * that fits, with why it lost ("" when none does). need_gpu and need_host
 * are not changed. All other arguments borrowed. */
void verdict_settle(const struct fit_model *fm, const struct fit_model_result *fr, size_t n,
                    const struct place_model *models, const struct place_budget *b,
                    const struct place_result *placed, struct fit_result *res);

#endif
