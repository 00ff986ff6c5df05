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
    double nll_sum;         /* sum of negative log-likelihoods */
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
    double nll;           /* mean negative log-likelihood, nats */
    double ece;           /* expected calibration error, 15 bins */
    double low_conf_rate; /* low_conf / n */
    double mean_conf;     /* mean top-answer confidence */
    double mae;           /* mean |expected level - gold| of score answers */
};

/* Returns the finished numbers of *s. */
struct metrics_result metrics_summary_result(const struct metrics_summary *s);

/* Returns the negative log-likelihood -sum_i y_i ln max(p[i], METRICS_KL_EPSILON)
 * in nats, with y as in metrics_brier (target, or one-hot gold); terms with
 * y_i = 0 are 0. */
double metrics_nll(const double *p, const double *target, size_t n, size_t gold);

/* --- selective prediction: answer only above a confidence ------------------------------- */

/* One scored answer: its top-answer confidence and whether it was right. */
struct metrics_answer {
    double conf;
    bool correct;
};

/* Sorts a[0..n) by confidence, highest first. */
void metrics_answers_sort(struct metrics_answer *a, size_t n);

/* One cut of the risk-coverage curve: answering only when the confidence is
 * at least threshold keeps coverage of the answers, and risk of those kept
 * are wrong. */
struct metrics_rc_point {
    double coverage, risk, threshold;
};

/* The risk-coverage curve of a[0..n), sorted by metrics_answers_sort: one
 * point per distinct confidence, from the highest, each cutting after the
 * last answer of that confidence (tied answers are kept or dropped together).
 * Writes the first cap points into out (may be NULL when cap is 0) and
 * returns how many there are. */
size_t metrics_risk_coverage(const struct metrics_answer *a, size_t n,
                             struct metrics_rc_point *out, size_t cap);

/* Returns the area under the risk-coverage curve of a[0..n) (sorted):
 * (1/n) sum_{k=1..n} risk_k, where risk_k is the risk of the cut that keeps
 * the k-th most confident answer (its tie group's cut); NaN when n is 0. */
double metrics_aurc(const struct metrics_answer *a, size_t n);

/* Returns the largest coverage of a cut of a[0..n) (sorted) whose risk is at
 * most target, 0 when none is; *threshold (optional output) gets that cut's
 * confidence, NaN when none. */
double metrics_coverage_at_risk(const struct metrics_answer *a, size_t n, double target,
                                double *threshold);

/* --- bootstrap intervals --------------------------------------------------------------- */

/* A statistic of a set of answers (it may reorder them). */
typedef double (*metrics_stat_fn)(struct metrics_answer *a, size_t n, void *arg);

/* A 95% bootstrap interval: the 2.5th and 97.5th percentiles (linear between
 * order statistics, as numpy's default) of stat over `resamples` resamples of
 * a[0..n) drawn with replacement by a seeded splitmix64. scratch must hold n
 * answers and values `resamples` doubles (both caller-owned). Returns false
 * (lo = hi = NaN) when n or resamples is 0. */
bool metrics_bootstrap(const struct metrics_answer *a, size_t n, metrics_stat_fn stat,
                       void *arg, uint64_t seed, size_t resamples,
                       struct metrics_answer *scratch, double *values, double *lo,
                       double *hi);

/* Statistics for metrics_bootstrap: accuracy, ECE (15 bins), and coverage at
 * the risk *(double *)arg. */
double metrics_stat_accuracy(struct metrics_answer *a, size_t n, void *arg);
double metrics_stat_ece(struct metrics_answer *a, size_t n, void *arg);
double metrics_stat_coverage(struct metrics_answer *a, size_t n, void *arg);

/* For metrics_bootstrap: the confidence threshold of the largest cut whose
 * risk is at most *(double *)arg (metrics_coverage_at_risk), or +infinity
 * when no cut reaches it (answer nothing). */
double metrics_stat_threshold(struct metrics_answer *a, size_t n, void *arg);

/* Returns the fewest answers n for which n right answers out of n bound the
 * precision at target or above with 95% confidence (one-sided
 * Clopper-Pearson: 0.05^(1/n) >= target), i.e. ceil(ln 0.05 / ln target):
 * 59 for 0.95, 29 for 0.9, 14 for 0.8. 1 for target <= 0, SIZE_MAX for >= 1. */
size_t metrics_min_answers_for_precision(double target);

/* --- flip rates: binomial intervals ---------------------------------------------------- */

/* The two-sided 95% normal quantile the intervals below use. */
#define METRICS_Z95 1.959963984540054

/* The Wilson score 95% interval of a rate of k events in n trials:
 * (k/n + z^2/2n -+ z sqrt(k(n-k)/n^3 + z^2/4n^2)) / (1 + z^2/n), z = METRICS_Z95,
 * clamped to [0, 1]. Writes lo and hi; both NaN when n is 0. */
void metrics_wilson(size_t k, size_t n, double *lo, double *hi);

/* Returns the fewest trials n whose Wilson 95% upper bound at zero events,
 * z^2 / (n + z^2), is below max_rate: floor(z^2 (1 - max_rate) / max_rate) + 1
 * (189 for 0.02, 35 for 0.1). 1 for max_rate >= 1, SIZE_MAX for max_rate <= 0. */
size_t metrics_min_trials_for_rate(double max_rate);

/* Returns the top-two margin of a distribution: its largest probability minus
 * its second largest (the largest itself when n is 1, 0 when n is 0). An
 * answer with a small margin flips on rounding alone. */
double metrics_margin(const double *p, size_t n);

/* --- chi-square test ------------------------------------------------------------------- */

/* Returns the chi-square survival function P(X >= x) for df degrees of
 * freedom: the regularized upper incomplete gamma function Q(df/2, x/2)
 * (series below x/2 < df/2 + 1, Lentz's continued fraction above, to about
 * 1e-14 relative). 1 for x <= 0, NaN for df = 0 or x NaN. */
double metrics_chi2_sf(double x, unsigned df);

#endif
