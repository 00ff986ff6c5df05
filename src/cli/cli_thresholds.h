/* cli_thresholds.h: `tandem eval --suggest-thresholds`, the command's side.
 *
 * eval/thresholds.h chooses the thresholds from a run: for every noul
 * question of a dataset (a pipeline's verify questions, rendered as the
 * pipeline asks them), the threshold on P(true) whose accepted answers reach
 * a target precision with the most coverage; for its choice questions
 * pooled, the same on the engine's confidence, which is the pipeline's
 * min_confidence. This module ties them to tandem.yaml: it checks the flags
 * and the dataset against the named pipeline, prints the table lines,
 * --write-thresholds prints them as the pipeline's verdict lines and --apply
 * writes them into the config file. docs/eval.md documents the method,
 * docs/eval-format.md the dataset. */
#ifndef TANDEM_CLI_THRESHOLDS_H
#define TANDEM_CLI_THRESHOLDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "eval/eval.h"
#include "eval/evalset.h"
#include "eval/summary.h"

struct config;

/* What the command line asks of thresholds. */
struct cli_thresholds {
    bool suggest;              /* --suggest-thresholds (implied by --write-thresholds) */
    double target_precision;   /* --target-precision, default 0.95 */
    const char *pipeline;      /* --write-thresholds PIPELINE, or NULL */
    const char *apply;         /* --apply FILE, or NULL */
    const char *config;        /* the config that names the pipeline, or NULL */
    struct config *cfg;        /* loaded by cli_thresholds_check_set(); owned */
};

/* Checks the combination of flags (config is --config's value, or NULL) and
 * completes th (config from --apply, suggest implied). Returns 0, or 2 after
 * printing the usage error on stderr. */
int cli_thresholds_check_args(struct cli_thresholds *th, const char *config);

/* Before anything is sent: loads th's config when a pipeline is named and
 * checks set against it (every noul question is one of the pipeline's
 * verify noul questions) and against the target (each group has enough
 * cases, thresholds_check_set). Returns 0, or 1 with the reason in
 * err[errlen]. */
int cli_thresholds_check_set(const struct evalset *set, struct cli_thresholds *th, char *err,
                             size_t errlen);

/* Suggests the thresholds of a finished run (thresholds_suggest, with the
 * pipeline's "<=" questions accepted from below): the summary's "thresholds"
 * object (docs/eval.md; new reference, caller owns), with the pipeline's
 * YAML when one is named, or NULL with the reason in err[errlen] (too few
 * answers once failed requests are left out, or out of memory). sc gives the
 * bootstrap's resamples and seed. */
json_t *cli_thresholds_suggest(const struct eval_run *run, const struct cli_thresholds *th,
                               const struct summary_scoring *sc, char *err, size_t errlen);

/* Prints the thresholds part of the table (thresholds: the summary's
 * object, borrowed; nothing when NULL). */
void cli_thresholds_print(const json_t *thresholds);

/* With --write-thresholds: prints the pipeline's YAML lines (unless as_json,
 * where the summary already holds them as "yaml") and, with --apply, rewrites
 * the config in place after saving it as FILE.bak. Returns 0, or 1 with the
 * reason on stderr (a question without a threshold, a file that cannot be
 * written, a result the config loader refuses). */
int cli_thresholds_write(const json_t *thresholds, const struct cli_thresholds *th, bool as_json);

/* Releases what th owns (its loaded config). */
void cli_thresholds_deinit(struct cli_thresholds *th);

#endif
