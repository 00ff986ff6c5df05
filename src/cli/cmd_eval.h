/* cmd_eval.h: `tandem eval`, scoring a decision model on a dataset.
 *
 * Sends a dataset (docs/eval-format.md) to a /v1/systemone endpoint through
 * eval.h and scores the answers with metrics.h: accuracy, Brier, ECE, score
 * MAE, low-confidence rate, and stability over repeats. docs/eval.md documents
 * the table, the --json object and the HTML report. Also holds the pieces
 * `tandem drift` shares (progress line, answer values). */
#ifndef TANDEM_CMD_EVAL_H
#define TANDEM_CMD_EVAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "eval/eval.h"

/* Runs `tandem eval` with its own argv (argv[0] = "eval"); llama_server is
 * unused. Prints the table (or --json) on stdout, progress on a terminal
 * stderr. Returns the exit status: 0 every request answered, 1 the dataset
 * or the endpoint failed (when some requests errored the report is still
 * printed), 2 usage error. */
int cmd_eval_main(int argc, char **argv, const char *llama_server);

/* How a run is scored. */
struct cmd_eval_scoring {
    double low;           /* the low-confidence threshold */
    double target_risk;   /* selective prediction: the coverage at this risk */
    unsigned bootstrap;   /* resamples of the 95% intervals; 0 = none */
    uint64_t seed;        /* of the resampling */
};

/* Scores a finished run into the documented `tandem eval --json` object
 * (new reference, caller owns; NULL when out of memory). model is reported as
 * given (NULL = none). */
json_t *cmd_eval_summarize(const struct eval_run *run, const char *model,
                           const struct cmd_eval_scoring *sc, unsigned concurrency);

/* Returns answer index i of question q as its JSON value: the option name
 * (choice), the level as an integer (score) or true/false (noul). New
 * reference, caller owns. */
json_t *cmd_eval_answer_json(const struct evalset_question *q, size_t i);

/* An eval_progress_fn writing "\r<label>: done/total requests, rate/s, ETA"
 * to stderr; user is the label (a const char *). */
void cmd_eval_progress(void *user, size_t done, size_t total, double elapsed_s);

/* Returns x as a JSON real, or JSON null when x is NaN or infinite. */
json_t *cmd_eval_number(double x);

/* Parses s as an integer in [lo, hi] into *out for option flag. Returns 0,
 * or prints "tandem <cmd>: <flag> <s>: expected an integer from lo to hi"
 * and returns 2 (usage). */
int cmd_eval_parse_uint(const char *cmd, const char *flag, const char *s, unsigned lo,
                        unsigned hi, unsigned *out);

/* Parses s as a number in [lo, hi] into *out for option flag. Returns 0, or
 * prints "tandem <cmd>: <flag> <s>: expected a number from lo to hi" and
 * returns 2 (usage). */
int cmd_eval_parse_double(const char *cmd, const char *flag, const char *s, double lo,
                          double hi, double *out);

#endif
