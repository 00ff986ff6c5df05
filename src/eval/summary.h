/* summary.h: a finished evaluation run scored into its JSON summary.
 *
 * The summary is the documented `tandem eval --json` object (docs/eval.md):
 * accuracy, Brier, NLL, ECE, score MAE and the low-confidence rate, overall
 * and per question type; bootstrap intervals; selective prediction (AURC,
 * coverage at a target risk, the risk-coverage curve); the reliability bins;
 * stability over repeats; and every question's result and every failed
 * request. The terminal table and the HTML report (report.h) are rendered
 * from it. Also the JSON values the other comparisons share (answers,
 * numbers that may be NaN). */
#ifndef TANDEM_EVAL_SUMMARY_H
#define TANDEM_EVAL_SUMMARY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "eval/eval.h"
#include "eval/evalset.h"

/* The metric groups of the summary's "metrics" object, in order: "overall",
 * then one per question type ("choice", "score", "noul"). */
#define SUMMARY_N_GROUPS 4
extern const char *const summary_group_names[SUMMARY_N_GROUPS];

/* How a run is scored. */
struct summary_scoring {
    double low;           /* the low-confidence threshold, a probability */
    double target_risk;   /* selective prediction: the coverage at this risk */
    unsigned bootstrap;   /* resamples of the 95% intervals; 0 = none */
    uint64_t seed;        /* of the resampling */
};

/* Scores a finished run (borrowed) into the documented `tandem eval --json`
 * object (new reference, caller owns; NULL when out of memory). model is
 * reported as given (NULL = none), concurrency as the run used it; sc is
 * borrowed. */
json_t *summary_build(const struct eval_run *run, const char *model,
                      const struct summary_scoring *sc, unsigned concurrency);

/* Returns answer index i of question q as its JSON value: the option name
 * (choice), the level as an integer (score) or true/false (noul). New
 * reference, caller owns. */
json_t *summary_answer_json(const struct evalset_question *q, size_t i);

/* Returns x as a JSON real, or JSON null when x is NaN or infinite. New
 * reference, caller owns. */
json_t *summary_number(double x);

#endif
