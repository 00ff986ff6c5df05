/* thresholds.h: thresholds chosen from data, for a pipeline's verdict.
 *
 * For every noul question of a finished run (a pipeline's verify questions,
 * rendered as the pipeline asks them), the cut on P(true) whose accepted
 * answers reach a target precision with the most coverage; for its choice
 * questions pooled, the same on the engine's confidence, which is the
 * pipeline's min_confidence. Each cut comes with a bootstrap 95% interval
 * and the shortest decimal that accepts exactly its answers. docs/eval.md
 * documents the method and the "thresholds" object. Which config the values
 * go to, and how they are written there, is the caller's business. */
#ifndef TANDEM_EVAL_THRESHOLDS_H
#define TANDEM_EVAL_THRESHOLDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "eval/eval.h"
#include "eval/evalset.h"

/* The config key of the decider's threshold, and its group's "key". */
#define THRESHOLDS_DECIDER_KEY "min_confidence"

struct thresholds_params {
    double target_precision;  /* share of accepted answers that must be right, in (0, 1) */
    unsigned bootstrap;       /* resamples of each threshold's 95% interval; 0 = none */
    uint64_t seed;            /* of the resampling */
    const char *const *below; /* noul question ids whose threshold accepts P(true) <= it
                                 (the config's "<=" or "<"); borrowed; NULL = none */
    size_t n_below;
};

/* Returns the defaults: precision 0.95, 1000 resamples, seed 1, every noul
 * question accepted from P(true) >= its threshold. */
struct thresholds_params thresholds_default_params(void);

/* Before a run: checks that set (borrowed) has noul or choice questions with
 * a gold answer, and that each group (every noul question, the choice
 * questions pooled) has enough of them to show target_precision
 * (metrics_min_answers_for_precision). Returns TANDEM_OK, TANDEM_ERR_INVAL
 * with the reason in err[errlen], or TANDEM_ERR_NOMEM. */
tandem_err thresholds_check_set(const struct evalset *set, double target_precision, char *err,
                                size_t errlen);

/* Suggests the thresholds of a finished run (borrowed; only each case's
 * first answered repeat counts): the "thresholds" object of docs/eval.md,
 * without its "pipeline" and "yaml" members (new reference, caller owns).
 * Verify questions come first, the decider last. Returns NULL with the
 * reason in err[errlen] when too few answers remain once failed requests are
 * left out, or when out of memory. p is borrowed. */
json_t *thresholds_suggest(const struct eval_run *run, const struct thresholds_params *p,
                           char *err, size_t errlen);

#endif
