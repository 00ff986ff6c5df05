/* cmd_eval.h: `tandem eval`, scoring a decision model on a dataset.
 *
 * Sends a dataset (docs/eval-format.md) to a /v1/systemone endpoint through
 * eval.h and scores the answers with eval/summary.h: accuracy, Brier, ECE,
 * score MAE, low-confidence rate, and stability over repeats. docs/eval.md
 * documents the table, the --json object and the HTML report. */
#ifndef TANDEM_CMD_EVAL_H
#define TANDEM_CMD_EVAL_H

/* Runs `tandem eval` with its own argv (argv[0] = "eval"); llama_server is
 * unused. Prints the table (or --json) on stdout, progress on a terminal
 * stderr. Returns the exit status: 0 every request answered, 1 the dataset
 * or the endpoint failed (when some requests errored the report is still
 * printed), 2 usage error. */
int cmd_eval_main(int argc, char **argv, const char *llama_server);

#endif
