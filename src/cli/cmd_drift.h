/* cmd_drift.h: `tandem drift`, comparing two decision models answer by answer.
 *
 * Both models answer the same dataset; per question the KL divergence
 * KL(ref || cand), max |dp| and top-answer agreement are reported, overall the
 * flip rate and mean/max KL, and the worst questions. docs/eval.md documents
 * the formulas and the --json object. */
#ifndef TANDEM_CMD_DRIFT_H
#define TANDEM_CMD_DRIFT_H

#include <jansson.h>
#include <stddef.h>

#include "eval/eval.h"

/* Runs `tandem drift` with its own argv (argv[0] = "drift"); llama_server is
 * unused. Returns 0 when every request of both models was answered, 1 when
 * the dataset or an endpoint failed (the comparison of what was answered is
 * still printed), 2 usage error. */
int cmd_drift_main(int argc, char **argv, const char *llama_server);

struct drift_options {
    size_t top;    /* worst questions to list */
    double margin; /* an answer is "sure" when the reference's top-two margin is at least this */
};

/* Returns the defaults: the 10 worst questions, margin 0.1. */
struct drift_options cmd_drift_default_options(void);

/* Compares two runs over the same set into the documented `tandem drift
 * --json` object (new reference, caller owns; NULL when out of memory). Every
 * repeat of cand is compared with the reference's first repeat (its answers
 * are fetched once): a question flips when its top answer changed in more
 * than half of cand's repeats, and is "unstable" when it changed in some but
 * not most; KL is averaged over the repeats. When ref has several repeats,
 * its later ones against its first are reported as "ref_noise". A question
 * either side failed on in any repeat is skipped. The models are reported as
 * given (NULL = none); o is borrowed. */
json_t *cmd_drift_compare(const struct eval_run *ref, const char *ref_model,
                          const struct eval_run *cand, const char *cand_model,
                          const struct drift_options *o);

#endif
