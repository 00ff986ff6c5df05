/* metrics.h: the scoring formulas of `tandem eval` and `tandem drift`.
 *
 * Pure functions over probability vectors: no I/O, no allocation. Every
 * formula is written out in docs/eval.md, and tests/e2e/test_metrics.py checks
 * the implementation against an independent numpy computation.
 *
 * A distribution is an array of n doubles, one per option in the question's
 * order: choice options as the dataset lists them, score levels 0..n-1, and
 * for noul the pair {P(true), P(false)} = {p, 1 - p}. The "top answer" is the
 * first index of the largest probability, so a noul answer of exactly 0.5
 * counts as true. */
#ifndef TANDEM_METRICS_H
#define TANDEM_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Number of equal-width confidence bins of the ECE and the reliability diagram. */
#define METRICS_ECE_BINS 15

/* Probabilities below this are raised to it inside KL's logarithm. */
#define METRICS_KL_EPSILON 1e-12

/* Returns the index of the largest p[i] (the first one on ties); 0 when n is 0. */
size_t metrics_top(const double *p, size_t n);

/* Returns the multi-class Brier score sum_i (p[i] - y[i])^2 in [0, 2], where y
 * is target[0..n) when target is not NULL, else the one-hot vector of gold. */
double metrics_brier(const double *p, const double *target, size_t n, size_t gold);

/* Returns the ECE bin of a top-answer confidence c in [0, 1]:
 * min(floor(c * METRICS_ECE_BINS), METRICS_ECE_BINS - 1), clamped at 0. */
size_t metrics_ece_bin(double c);

/* Per-bin accumulators of the reliability diagram. Caller-allocated; start
 * from metrics_calib_init(). */
struct metrics_calib {
    uint64_t n[METRICS_ECE_BINS];       /* answers whose confidence fell in the bin */
    double conf_sum[METRICS_ECE_BINS];  /* sum of their confidences */
    double correct[METRICS_ECE_BINS];   /* how many of them were correct */
    uint64_t total;                     /* sum of n[] */
};

/* Empties *c. */
void metrics_calib_init(struct metrics_calib *c);

/* Adds one answer with top-answer confidence conf and correctness correct. */
void metrics_calib_add(struct metrics_calib *c, double conf, bool correct);

/* Returns the expected calibration error sum_b (n_b / N) |acc_b - conf_b| over
 * the non-empty bins, or 0 when *c holds no answers. */
double metrics_calib_ece(const struct metrics_calib *c);

/* Returns KL(p || q) = sum_i p[i] ln(p[i] / max(q[i], METRICS_KL_EPSILON)) in
 * nats, over the i with p[i] > 0 (terms with p[i] = 0 are 0). Not renormalised:
 * engines return distributions that sum to 1 up to float rounding. The result
 * is never negative (rounding below 0 is clamped to 0). */
double metrics_kl(const double *p, const double *q, size_t n);

/* Returns max_i |p[i] - q[i]|, 0 when n is 0. */
double metrics_max_abs_diff(const double *p, const double *q, size_t n);

/* Returns the expected level sum_i i * p[i] of a score distribution. */
double metrics_expected_level(const double *p, size_t n);

/* Summary of one group of answers (overall or one question type).
 * Caller-allocated; start from metrics_summary_init(). */
struct metrics_summary {
    uint64_t n;             /* scored answers */
    uint64_t correct;       /* top answer == gold */
    double brier_sum;       /* sum of Brier scores */
    uint64_t low_conf;      /* answers with top-answer confidence < threshold */
    double conf_sum;        /* sum of top-answer confidences */
    uint64_t n_score;       /* score answers, for the MAE */
    double abs_err_sum;     /* sum over score answers of |expected level - gold| */
    struct metrics_calib calib;
};

/* Empties *s. */
void metrics_summary_init(struct metrics_summary *s);

/* Adds one answer p[0..n) of a question of kind is_score (true for score
 * questions) with gold index gold and optional target distribution (NULL =
 * one-hot gold). low_threshold is the low-confidence threshold. */
void metrics_summary_add(struct metrics_summary *s, const double *p, const double *target,
                         size_t n, size_t gold, bool is_score, double low_threshold);

/* The finished numbers of a summary; NaN where undefined (no answers, or MAE
 * without score answers). */
struct metrics_result {
    double accuracy;      /* correct / n */
    double brier;         /* mean Brier score */
    double ece;           /* expected calibration error, 15 bins */
    double low_conf_rate; /* low_conf / n */
    double mean_conf;     /* mean top-answer confidence */
    double mae;           /* mean |expected level - gold| of score answers */
};

/* Returns the finished numbers of *s. */
struct metrics_result metrics_summary_result(const struct metrics_summary *s);

#endif
