/* cmd_drift.h: `tandem drift`, comparing two decision models answer by answer.
 *
 * Both models answer the same dataset; eval/drift.h compares them: per
 * question the KL divergence KL(ref || cand), max |dp| and top-answer
 * agreement, overall the flip rate and mean/max KL, and the worst
 * questions. docs/eval.md documents the formulas and the --json object. */
#ifndef TANDEM_CMD_DRIFT_H
#define TANDEM_CMD_DRIFT_H

/* Runs `tandem drift` with its own argv (argv[0] = "drift"); llama_server is
 * unused. Returns 0 when every request of both models was answered, 1 when
 * the dataset or an endpoint failed (the comparison of what was answered is
 * still printed), 2 usage error. */
int cmd_drift_main(int argc, char **argv, const char *llama_server);

#endif
