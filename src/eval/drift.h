/* drift.h: two decision models compared answer by answer.
 *
 * Both runs answered the same dataset; per question the KL divergence
 * KL(ref || cand), max |dp| and top-answer agreement are computed, overall
 * the flip rate (with the flips among answers the reference was sure of) and
 * mean/max KL, and the worst questions. The result is the documented `tandem
 * drift --json` object (docs/eval.md); the quantization ladder gates its
 * rungs on the same object. */
#ifndef TANDEM_EVAL_DRIFT_H
#define TANDEM_EVAL_DRIFT_H

#include <jansson.h>
#include <stddef.h>

#include "eval/eval.h"

#define DRIFT_DEFAULT_TOP 10
#define DRIFT_DEFAULT_MARGIN 0.1

struct drift_options {
    size_t top;    /* worst questions to list; 0 = none */
    double margin; /* an answer is "sure" when the reference's top-two margin is at least this */
};

/* Returns the defaults: the DRIFT_DEFAULT_TOP (10) worst questions, margin
 * DRIFT_DEFAULT_MARGIN (0.1). */
struct drift_options drift_default_options(void);

/* Compares two runs over the same set into the documented `tandem drift
 * --json` object (new reference, caller owns; NULL when out of memory). Every
 * repeat of cand is compared with the reference's first repeat (its answers
 * are fetched once): a question flips when its top answer changed in more
 * than half of cand's repeats, and is "unstable" when it changed in some but
 * not most; KL is averaged over the repeats. When ref has several repeats,
 * its later ones against its first are reported as "ref_noise". A question
 * either side failed on in any repeat is skipped. The models are reported as
 * given (NULL = none); ref, cand and o are borrowed. */
json_t *drift_compare(const struct eval_run *ref, const char *ref_model,
                      const struct eval_run *cand, const char *cand_model,
                      const struct drift_options *o);

#endif
