/* placement.h: a tandem.yaml as the placement search (plan/place.h) sees it,
 * and what serving takes from the answer.
 *
 * The work is the config's pipelines (decide, then each verify stage; an
 * escalation runs only on a reject and is not counted), or, without
 * pipelines, each model's requests alone. Requests carry
 * scheduling.request_tokens prompt tokens, scheduling.clients of them at
 * once. Threads are split so that engines computing on the CPU and the host
 * threads of GPU engines do not oversubscribe the cores (docs/placement.md). */
#ifndef TANDEM_PLACEMENT_H
#define TANDEM_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "plan/place.h"
#include "plan/plan.h"
#include "serve/config.h"

/* Checks every model's device: against the GPUs of b. gpu:N beyond them,
 * or gpu on a machine with none (and no budget.vram), is TANDEM_ERR_FORMAT
 * with err "<file>:<line>: models.<name>.device: <what>". */
tandem_err placement_check_devices(const struct config *cfg, const struct place_budget *b,
                                   char *err, size_t errlen);

/* Remote models (upstream:) take no memory and are not placed: the search
 * sees the local ones only. Writes the config indices of cfg's local models,
 * in file order, into local[] (room for cfg->n_models) and returns how many. */
size_t placement_locals(const struct config *cfg, size_t *local);

/* Fills models[] with the local models (placement_locals' order; names,
 * settings and costs borrowed from cfg and pm[i], the opened model of
 * cfg->models[i], NULL for a remote one) and work[PLACE_MAX_WORK], whose
 * stages index models[] (remote stages are left out); returns the number of
 * works (0 = no pipelines with a local stage: each model's own requests).
 * use_measured: the cost and footprint caches. */
size_t placement_inputs(const struct config *cfg, struct plan_model *const *pm, bool use_measured,
                        struct place_model *models, struct place_work *work);

/* The search parameters of cfg's scheduling section. */
struct place_params placement_params(const struct config *cfg);

/* Takes cfg's decision cache (cache.max_bytes, the daemon's own memory) out
 * of b's host RAM, down to 0: what the models may use. */
void placement_reserve_cache(const struct config *cfg, struct place_budget *b);

/* Runs the search for cfg's local models on b into *out (output; its slots
 * in placement_locals' order). Returns
 * TANDEM_ERR_FORMAT with err "<file>:<line>: models.<name>.device: cpu: does
 * not fit: ..." when a model placed on the CPU by its config does not fit
 * host RAM, TANDEM_ERR_TOOBIG with err naming the numbers when no
 * arrangement fits, the footprint function's errors. */
tandem_err placement_run(const struct config *cfg, struct plan_model *const *pm,
                         const struct place_budget *b, bool use_measured, struct place_result *out,
                         char *err, size_t errlen);

/* Threads per engine for arrangement a of the models pm[n] on cores cores,
 * into threads[n], so that engines computing at the same time never ask for
 * more threads than there are cores. An engine whose layers all sit on a GPU
 * gets one host thread when any engine computes on the CPU (else cores / n).
 * Engines with layers on the CPU get the rest: each all of it when clients
 * is 1 (one request at a time: a pipeline's stages run in turn, so only one
 * engine computes at once), else an equal share, at least one each. On a
 * simulated GPU every engine computes on the CPU and counts as such. */
void placement_threads(const struct place_arrangement *a, struct plan_model *const *pm, size_t n,
                       uint32_t cores, bool simulated, uint32_t clients, uint32_t *threads);

#endif
