/* cmd_eval_thresholds.h: `tandem eval --suggest-thresholds`, thresholds chosen
 * from data.
 *
 * For every noul question of a dataset (a pipeline's verify questions,
 * rendered as the pipeline asks them), the threshold on P(true) whose
 * accepted answers reach a target precision with the most coverage; for its
 * choice questions pooled, the same on the engine's confidence, which is the
 * pipeline's min_confidence. --write-thresholds prints them as the
 * pipeline's verdict lines and --apply writes them into the config file.
 * docs/eval.md documents the method, docs/eval-format.md the dataset. */
#ifndef TANDEM_CMD_EVAL_THRESHOLDS_H
#define TANDEM_CMD_EVAL_THRESHOLDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cli/cmd_eval.h"
#include "eval/eval.h"
#include "eval/evalset.h"

struct config;

/* What the command line asks of thresholds. */
struct cmd_eval_thresholds {
    bool suggest;              /* --suggest-thresholds (implied by --write-thresholds) */
    double target_precision;   /* --target-precision, default 0.95 */
    const char *pipeline;      /* --write-thresholds PIPELINE, or NULL */
    const char *apply;         /* --apply FILE, or NULL */
    const char *config;        /* the config that names the pipeline, or NULL */
    struct config *cfg;        /* loaded by cmd_eval_thresholds_check_set(); owned */
};

/* Checks the combination of flags (config is --config's value, or NULL) and
 * completes th (config from --apply, suggest implied). Returns 0, or 2 after
 * printing the usage error on stderr. */
int cmd_eval_thresholds_check_args(struct cmd_eval_thresholds *th, const char *config);

/* Before anything is sent: loads th's config when a pipeline is named and
 * checks set against it (every noul question is one of the pipeline's
 * verify noul questions) and against the target (each group has enough
 * cases). Returns 0, or 1 with the reason in err[errlen]. */
int cmd_eval_thresholds_check_set(const struct evalset *set, struct cmd_eval_thresholds *th,
                                  char *err, size_t errlen);

/* Suggests the thresholds of a finished run: the summary's "thresholds"
 * object (docs/eval.md; new reference, caller owns), or NULL with the reason
 * in err[errlen] (too few answers once failed requests are left out, or out
 * of memory). sc gives the bootstrap's resamples and seed. */
json_t *cmd_eval_thresholds_suggest(const struct eval_run *run,
                                    const struct cmd_eval_thresholds *th,
                                    const struct cmd_eval_scoring *sc, char *err, size_t errlen);

/* Prints the thresholds part of the table (thresholds: the summary's
 * object, borrowed; nothing when NULL). */
void cmd_eval_thresholds_print(const json_t *thresholds);

/* With --write-thresholds: prints the pipeline's YAML lines (unless as_json,
 * where the summary already holds them as "yaml") and, with --apply, rewrites
 * the config in place after saving it as FILE.bak. Returns 0, or 1 with the
 * reason on stderr (a question without a threshold, a file that cannot be
 * written, a result the config loader refuses). */
int cmd_eval_thresholds_write(const json_t *thresholds, const struct cmd_eval_thresholds *th,
                              bool as_json);

/* Releases what th owns (its loaded config). */
void cmd_eval_thresholds_deinit(struct cmd_eval_thresholds *th);

#endif
