/* Unit tests for metrics: every formula against numbers worked out by hand
 * (the arithmetic is in the comments). tests/e2e/test_metrics.py adds the
 * comparison with numpy on random distributions. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "proto/metrics.h"

#define NEAR(a, b) cr_expect(fabs((a) - (b)) < 1e-12, "%s = %.17g, expected %.17g", #a, (a), (b))

Test(metrics, top_is_first_maximum) {
    double p[] = {0.2, 0.4, 0.4};
    cr_expect_eq(metrics_top(p, 3), 1);
    double noul_half[] = {0.5, 0.5}; /* noul at exactly 0.5 counts as true (index 0) */
    cr_expect_eq(metrics_top(noul_half, 2), 0);
    cr_expect_eq(metrics_top(p, 0), 0);
}

Test(metrics, brier_one_hot_and_target) {
    double p[] = {0.7, 0.2, 0.1};
    NEAR(metrics_brier(p, NULL, 3, 0), 0.09 + 0.04 + 0.01); /* (0.3^2 + 0.2^2 + 0.1^2) */
    NEAR(metrics_brier(p, NULL, 3, 2), 0.49 + 0.04 + 0.81);
    double q[] = {0.6, 0.3, 0.1}, t[] = {0.5, 0.5, 0.0};
    NEAR(metrics_brier(q, t, 3, 0), 0.01 + 0.04 + 0.01);
    double noul[] = {0.8, 0.2}; /* P(true) = 0.8, gold true: 2 * 0.2^2 */
    NEAR(metrics_brier(noul, NULL, 2, 0), 0.08);
}

Test(metrics, ece_bins) {
    cr_expect_eq(metrics_ece_bin(0), 0);
    cr_expect_eq(metrics_ece_bin(-1), 0);
    cr_expect_eq(metrics_ece_bin(NAN), 0);
    cr_expect_eq(metrics_ece_bin(0.0666), 0);
    cr_expect_eq(metrics_ece_bin(0.0667), 1);
    cr_expect_eq(metrics_ece_bin(0.5), 7); /* 7.5 */
    cr_expect_eq(metrics_ece_bin(0.99), 14);
    cr_expect_eq(metrics_ece_bin(1.0), 14); /* the last bin is closed */
    cr_expect_eq(metrics_ece_bin(1.5), 14);
}

Test(metrics, ece_by_hand) {
    /* bins: 0.95 -> 14 (twice, one right), 0.55 -> 8 (right), 0.30 -> 4 (wrong)
     * ECE = 2/4 |0.5 - 0.95| + 1/4 |1 - 0.55| + 1/4 |0 - 0.30| = 0.225 + 0.1125 + 0.075 */
    struct metrics_calib c;
    metrics_calib_init(&c);
    cr_expect_eq(metrics_calib_ece(&c), 0);
    metrics_calib_add(&c, 0.95, true);
    metrics_calib_add(&c, 0.95, false);
    metrics_calib_add(&c, 0.55, true);
    metrics_calib_add(&c, 0.30, false);
    cr_expect_eq(c.total, 4);
    cr_expect_eq(c.n[14], 2);
    cr_expect_eq(c.n[8], 1);
    cr_expect_eq(c.n[4], 1);
    NEAR(metrics_calib_ece(&c), 0.4125);
}

Test(metrics, kl_and_max_dp) {
    double p[] = {0.5, 0.5}, q[] = {0.25, 0.75};
    NEAR(metrics_kl(p, q, 2), 0.5 * log(2.0) + 0.5 * log(0.5 / 0.75));
    NEAR(metrics_kl(p, p, 2), 0);
    NEAR(metrics_max_abs_diff(p, q, 2), 0.25);
    double one[] = {1, 0}, other[] = {0, 1};
    NEAR(metrics_kl(one, other, 2), log(1 / METRICS_KL_EPSILON)); /* q = 0 raised to epsilon */
    NEAR(metrics_kl(other, p, 2), log(2.0)); /* the p = 0 term is 0 */
    NEAR(metrics_max_abs_diff(one, other, 2), 1);
}

Test(metrics, summary_by_hand) {
    struct metrics_summary s;
    metrics_summary_init(&s);
    struct metrics_result empty = metrics_summary_result(&s);
    cr_expect(isnan(empty.accuracy) && isnan(empty.mae));
    double a[] = {0.7, 0.2, 0.1};      /* choice, gold 0: right, conf 0.7, Brier 0.14 */
    double b[] = {0.0, 0.5, 0.5};      /* score, gold 0: wrong, conf 0.5, E = 1.5, Brier 1.5 */
    double c[] = {0.45, 0.55};         /* noul, gold false (1): right, conf 0.55, Brier 0.405 */
    metrics_summary_add(&s, a, NULL, 3, 0, false, 0.6);
    metrics_summary_add(&s, b, NULL, 3, 0, true, 0.6);
    metrics_summary_add(&s, c, NULL, 2, 1, false, 0.6);
    struct metrics_result r = metrics_summary_result(&s);
    NEAR(r.accuracy, 2.0 / 3);
    NEAR(r.brier, (0.14 + 1.5 + 0.405) / 3);
    NEAR(r.low_conf_rate, 2.0 / 3); /* 0.5 and 0.55 are below 0.6 */
    NEAR(r.mean_conf, (0.7 + 0.5 + 0.55) / 3);
    NEAR(r.mae, 1.5);
    /* bins: 0.7 -> 10 (right), 0.5 -> 7 (wrong), 0.55 -> 8 (right)
     * ECE = 1/3 (0.3 + 0.5 + 0.45) */
    NEAR(r.ece, (0.3 + 0.5 + 0.45) / 3);
}

Test(metrics, nll_of_gold_and_of_a_target) {
    const double p[] = {0.5, 0.25, 0.25}, t[] = {0.5, 0.5, 0};
    cr_assert_float_eq(metrics_nll(p, NULL, 3, 1), log(4.0), 1e-12);
    cr_assert_float_eq(metrics_nll(p, t, 3, 0), 0.5 * log(2.0) + 0.5 * log(4.0), 1e-12);
    const double zero[] = {1, 0};
    cr_assert_float_eq(metrics_nll(zero, NULL, 2, 1), -log(METRICS_KL_EPSILON), 1e-9);
}

/* 0.9 right, 0.8 wrong, 0.8 right, 0.6 right, 0.4 wrong (given unsorted). */
static void five(struct metrics_answer a[5]) {
    const struct metrics_answer v[5] = {{0.6, true}, {0.8, false}, {0.4, false}, {0.9, true},
                                        {0.8, true}};
    memcpy(a, v, sizeof v);
    metrics_answers_sort(a, 5);
}

Test(metrics, risk_coverage_cuts_after_each_tie_group) {
    struct metrics_answer a[5];
    five(a);
    struct metrics_rc_point pt[8];
    cr_assert_eq(metrics_risk_coverage(a, 5, pt, 8), 4);
    const double cov[] = {0.2, 0.6, 0.8, 1.0}, risk[] = {0, 1.0 / 3, 0.25, 0.4},
                 thr[] = {0.9, 0.8, 0.6, 0.4};
    for (int i = 0; i < 4; i++) {
        cr_assert_float_eq(pt[i].coverage, cov[i], 1e-12, "point %d", i);
        cr_assert_float_eq(pt[i].risk, risk[i], 1e-12, "point %d", i);
        cr_assert_float_eq(pt[i].threshold, thr[i], 1e-12, "point %d", i);
    }
    cr_assert_eq(metrics_risk_coverage(a, 5, NULL, 0), 4);
    /* (1/5) (1 x 0 + 2 x 1/3 + 1 x 1/4 + 1 x 2/5) */
    cr_assert_float_eq(metrics_aurc(a, 5), (2.0 / 3 + 0.25 + 0.4) / 5, 1e-12);
    cr_assert(isnan(metrics_aurc(a, 0)));
}

Test(metrics, coverage_at_a_target_risk) {
    struct metrics_answer a[5];
    five(a);
    double th;
    cr_assert_float_eq(metrics_coverage_at_risk(a, 5, 0.3, &th), 0.8, 1e-12);
    cr_assert_float_eq(th, 0.6, 1e-12);
    cr_assert_float_eq(metrics_coverage_at_risk(a, 5, 0.25, &th), 0.8, 1e-12, "the bound is inclusive");
    cr_assert_float_eq(metrics_coverage_at_risk(a, 5, 0.1, &th), 0.2, 1e-12);
    cr_assert_float_eq(th, 0.9, 1e-12);
    cr_assert_float_eq(metrics_coverage_at_risk(a, 5, 1, NULL), 1.0, 1e-12);
    struct metrics_answer wrong[1] = {{0.7, false}};
    cr_assert_float_eq(metrics_coverage_at_risk(wrong, 1, 0.5, &th), 0, 1e-12);
    cr_assert(isnan(th));
}

static double counter(struct metrics_answer *a, size_t n, void *arg) {
    (void)a, (void)n;
    return (double)(*(int *)arg)++;
}

Test(metrics, bootstrap_percentiles_and_seeding) {
    struct metrics_answer a[5], scratch[5];
    five(a);
    double values[100], lo, hi, lo2, hi2;
    int k = 0; /* a statistic that returns 0, 1, ..., 99: the interval is numpy's percentiles */
    cr_assert(metrics_bootstrap(a, 5, counter, &k, 1, 100, scratch, values, &lo, &hi));
    cr_assert_float_eq(lo, 2.475, 1e-12);
    cr_assert_float_eq(hi, 96.525, 1e-12);
    cr_assert(metrics_bootstrap(a, 5, metrics_stat_accuracy, NULL, 7, 100, scratch, values, &lo,
                                &hi));
    cr_assert(metrics_bootstrap(a, 5, metrics_stat_accuracy, NULL, 7, 100, scratch, values, &lo2,
                                &hi2));
    cr_assert(lo == lo2 && hi == hi2, "the same seed gives the same interval");
    cr_assert(lo <= 0.6 && 0.6 <= hi && lo < hi, "[%f, %f] around 0.6", lo, hi);
    struct metrics_answer right[3] = {{0.9, true}, {0.5, true}, {0.7, true}};
    cr_assert(metrics_bootstrap(right, 3, metrics_stat_accuracy, NULL, 3, 50, scratch, values,
                                &lo, &hi));
    cr_assert(lo == 1 && hi == 1);
    double risk = 0.1;
    cr_assert(metrics_bootstrap(right, 3, metrics_stat_coverage, &risk, 3, 50, scratch, values,
                                &lo, &hi));
    cr_assert(lo == 1 && hi == 1);
    cr_assert_not(metrics_bootstrap(a, 0, metrics_stat_ece, NULL, 1, 10, scratch, values, &lo,
                                    &hi));
    cr_assert(isnan(lo) && isnan(hi));
}

Test(metrics, threshold_search_and_the_answers_a_precision_needs) {
    /* sorted: 0.9 R, 0.8 R, 0.7 W, 0.6 R, 0.5 R, 0.4 W. Precision of the cuts:
     * 1, 1, 2/3, 3/4, 4/5, 4/6: at 0.75 the largest cut keeps down to 0.5 */
    struct metrics_answer a[6] = {{0.6, true}, {0.9, true}, {0.4, false},
                                  {0.8, true}, {0.5, true}, {0.7, false}};
    double risk = 0.25, threshold;
    cr_assert_float_eq(metrics_stat_threshold(a, 6, &risk), 0.5, 1e-12);
    metrics_coverage_at_risk(a, 6, risk, &threshold);
    cr_assert_float_eq(threshold, 0.5, 1e-12);
    risk = 0.1; /* 1 - 0.9: only the first two */
    cr_assert_float_eq(metrics_stat_threshold(a, 6, &risk), 0.8, 1e-12);
    struct metrics_answer wrong[2] = {{0.9, false}, {0.2, false}};
    cr_assert(isinf(metrics_stat_threshold(wrong, 2, &risk)), "unreachable: accept nothing");
    cr_assert_eq(metrics_min_answers_for_precision(0.95), 59);
    cr_assert_eq(metrics_min_answers_for_precision(0.9), 29);
    cr_assert_eq(metrics_min_answers_for_precision(0.8), 14);
    cr_assert_eq(metrics_min_answers_for_precision(0.5), 5);
    double lo, hi, values[200];
    struct metrics_answer scratch[2];
    cr_assert(metrics_bootstrap(wrong, 2, metrics_stat_threshold, &risk, 1, 200, scratch, values,
                                &lo, &hi));
    cr_assert(isinf(lo) && isinf(hi), "every resample unreachable: [inf, inf], not NaN");
}

/* Wilson 95% intervals computed by hand: (p + z²/2n ∓ z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n). */
Test(metrics, wilson_hand_computed) {
    double lo, hi;
    metrics_wilson(1, 32, &lo, &hi); /* 1 flip of 32: [0.00554, 0.15744] */
    cr_assert_float_eq(lo, 0.005538, 2e-6);
    cr_assert_float_eq(hi, 0.157443, 2e-6);
    metrics_wilson(0, 10, &lo, &hi); /* none of 10: upper z²/(n + z²) */
    cr_assert_eq(lo, 0.0);
    cr_assert_float_eq(hi, 3.841459 / 13.841459, 1e-6);
    metrics_wilson(10, 10, &lo, &hi); /* all of 10: lower n/(n + z²) */
    cr_assert_float_eq(lo, 10 / 13.841459, 1e-6);
    cr_assert_float_eq(hi, 1.0, 1e-12);
    metrics_wilson(20, 32, &lo, &hi); /* 20 of 32: [0.4525, 0.7707] */
    cr_assert_float_eq(lo, 0.452544, 2e-6);
    cr_assert_float_eq(hi, 0.770661, 2e-6);
    metrics_wilson(0, 0, &lo, &hi);
    cr_assert(isnan(lo) && isnan(hi));
}

Test(metrics, min_trials_for_rate) {
    cr_assert_eq(metrics_min_trials_for_rate(0.02), 189); /* 3.8415 * 0.98 / 0.02 = 188.2 */
    cr_assert_eq(metrics_min_trials_for_rate(0.1), 35);   /* 34.6 */
    cr_assert_eq(metrics_min_trials_for_rate(0.5), 4);    /* 3.84 */
    cr_assert_eq(metrics_min_trials_for_rate(1), 1);
    cr_assert_eq(metrics_min_trials_for_rate(0), SIZE_MAX);
    /* at that n the upper bound of 0 events is below the rate, one fewer is not */
    double lo, hi;
    metrics_wilson(0, 189, &lo, &hi);
    cr_assert_lt(hi, 0.02);
    metrics_wilson(0, 188, &lo, &hi);
    cr_assert_geq(hi, 0.02);
}

Test(metrics, margin_top_two) {
    const double a[] = {0.2, 0.5, 0.3}, b[] = {0.5, 0.5}, c[] = {1.0}, d[] = {0.1, 0.1, 0.8};
    cr_assert_float_eq(metrics_margin(a, 3), 0.2, 1e-12);
    cr_assert_eq(metrics_margin(b, 2), 0.0);
    cr_assert_eq(metrics_margin(c, 1), 1.0);
    cr_assert_float_eq(metrics_margin(d, 3), 0.7, 1e-12);
    cr_assert_eq(metrics_margin(NULL, 0), 0.0);
}
