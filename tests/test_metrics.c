/* Unit tests for metrics: every formula against numbers worked out by hand
 * (the arithmetic is in the comments). tests/e2e/test_metrics.py adds the
 * comparison with numpy on random distributions. */
#include <criterion/criterion.h>
#include <math.h>

#include "eval/metrics.h"

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
