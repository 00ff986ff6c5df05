/* Unit tests for calib: the power-law refit on hand-computed cases, the fit
 * recovering a known power from synthetic answers drawn with a seeded
 * generator, the NLL's convexity and edge cases, the split, and the
 * temperature table's update rules (type fit against bucket fit).
 * tests/e2e/test_calibrate.py checks the predictions against the engine. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "eval/calib.h"
#include "proto/metrics.h"

#define NEAR(a, b, tol) \
    cr_expect(fabs((a) - (b)) <= (tol), "%s = %.17g, expected %.17g", #a, (double)(a), (double)(b))

Test(calib, apply_hand_computed) {
    double p[] = {0.5, 0.25, 0.25}, q[3];
    calib_apply(p, 3, 2, q); /* {0.25, 0.0625, 0.0625} / 0.375 */
    NEAR(q[0], 2.0 / 3, 1e-15);
    NEAR(q[1], 1.0 / 6, 1e-15);
    NEAR(q[2], 1.0 / 6, 1e-15);
    double r[] = {0.64, 0.36};
    calib_apply(r, 2, 0.5, q); /* {0.8, 0.6} / 1.4 */
    NEAR(q[0], 4.0 / 7, 1e-15);
    NEAR(q[1], 3.0 / 7, 1e-15);
    calib_apply(p, 3, 1, q);
    NEAR(q[0], 0.5, 1e-15);
    NEAR(q[2], 0.25, 1e-15);
}

Test(calib, apply_keeps_zeros_and_aliases) {
    double p[] = {0.5, 0.0, 0.5};
    calib_apply(p, 3, 3, p);
    NEAR(p[0], 0.5, 1e-15);
    cr_expect_eq(p[1], 0.0);
    double z[] = {0, 0}, q[2] = {1, 1};
    calib_apply(z, 2, 2, q);
    cr_expect(q[0] == 0 && q[1] == 0);
}

Test(calib, nll_at_one_is_the_metric) {
    double p1[] = {0.7, 0.2, 0.1}, p2[] = {0.4, 0.6}, t2[] = {0.3, 0.7};
    struct calib_item it[] = {{p1, NULL, 3, 1}, {p2, t2, 2, 1}};
    double want = (metrics_nll(p1, NULL, 3, 1) + metrics_nll(p2, t2, 2, 1)) / 2;
    NEAR(calib_nll(it, 2, 1), want, 1e-12);
    cr_expect(isnan(calib_nll(it, 0, 1)));
}

Test(calib, nll_of_a_zero_gold_is_the_floor_at_any_power) {
    double p[] = {1.0, 0.0};
    struct calib_item it = {p, NULL, 2, 1};
    NEAR(calib_nll(&it, 1, 1), -log(METRICS_KL_EPSILON), 1e-9);
    NEAR(calib_nll(&it, 1, 5), -log(METRICS_KL_EPSILON), 1e-9);
}

/* Convex until a gold's refit probability falls below METRICS_KL_EPSILON,
 * where metrics_nll's floor flattens it (here (1/6)^a < 1e-12 past a = 15). */
Test(calib, nll_is_convex_in_a) {
    double p1[] = {0.6, 0.3, 0.1, 0.0}, p2[] = {0.2, 0.8}, p3[] = {0.25, 0.25, 0.5};
    struct calib_item it[] = {{p1, NULL, 4, 2}, {p2, NULL, 2, 0}, {p3, NULL, 3, 2}};
    double prev2 = calib_nll(it, 3, 0.05), prev = calib_nll(it, 3, 0.1);
    for (double a = 0.15; a < 12; a += 0.05) {
        double cur = calib_nll(it, 3, a);
        cr_expect(cur - 2 * prev + prev2 > -1e-12, "not convex at a = %g", a);
        prev2 = prev;
        prev = cur;
    }
}

/* Two options {0.8, 0.2}: gold 0 three times in four, so the best refit puts
 * 0.75 on the first: 4^a = 3, a = ln 3 / ln 4. A target {0.75, 0.25} asks
 * for the same. */
Test(calib, fit_two_options_closed_form) {
    double p[] = {0.8, 0.2}, t[] = {0.75, 0.25};
    struct calib_item it[] = {{p, NULL, 2, 0}, {p, NULL, 2, 0}, {p, NULL, 2, 0}, {p, NULL, 2, 1}};
    NEAR(calib_fit(it, 4), log(3) / log(4), 1e-9);
    struct calib_item soft = {p, t, 2, 0};
    NEAR(calib_fit(&soft, 1), log(3) / log(4), 1e-9);
}

Test(calib, fit_stops_at_the_bounds) {
    double p[] = {0.8, 0.2};
    struct calib_item right = {p, NULL, 2, 0}, wrong = {p, NULL, 2, 1};
    cr_expect_eq(calib_fit(&right, 1), CALIB_A_MAX); /* sharper is always better */
    cr_expect_eq(calib_fit(&wrong, 1), CALIB_A_MIN); /* flatter is always better */
    cr_expect_eq(calib_fit(NULL, 0), 1);
}

/* In (0, 1): rng_uniform's [0, 1) moved half a step, so log() never sees 0. */
static double uniform(uint64_t *s) { return rng_uniform(s) + 0x1.0p-54; }

static double normal(uint64_t *s) {
    return sqrt(-2 * log(uniform(s))) * cos(2 * M_PI * uniform(s));
}

/* Served answers at T = 1 of random logits; gold drawn from the refit p^a_true. */
static double recover(double a_true, uint64_t seed) {
    enum { N = 4000, K = 4 };
    static double p[N][K];
    static struct calib_item it[N];
    uint64_t s = seed;
    for (size_t i = 0; i < N; i++) {
        double sum = 0, q[K];
        for (size_t j = 0; j < K; j++)
            sum += p[i][j] = exp(1.5 * normal(&s));
        for (size_t j = 0; j < K; j++)
            p[i][j] /= sum;
        calib_apply(p[i], K, a_true, q);
        double u = uniform(&s), c = 0;
        size_t g = 0;
        while (g < K - 1 && (c += q[g]) < u)
            g++;
        it[i] = (struct calib_item){p[i], NULL, K, g};
    }
    return calib_fit(it, N);
}

Test(calib, fit_recovers_a_known_power) {
    NEAR(recover(0.5, 1), 0.5, 0.05);
    NEAR(recover(2.0, 2), 2.0, 0.2);
    NEAR(recover(1.0, 3), 1.0, 0.1);
}

Test(calib, split_holds_out_a_seeded_share) {
    bool a[60], b[60], c[60];
    cr_expect_eq(calib_split(60, 0.3, 1, a), 18);
    cr_expect_eq(calib_split(60, 0.3, 1, b), 18);
    cr_expect_eq(memcmp(a, b, sizeof a), 0);
    cr_expect_eq(calib_split(60, 0.3, 2, c), 18);
    cr_expect_neq(memcmp(a, c, sizeof a), 0);
    size_t n = 0;
    for (size_t i = 0; i < 60; i++)
        n += a[i];
    cr_expect_eq(n, 18);
    cr_expect_eq(calib_split(7, 0, 1, a), 0);
    cr_expect_eq(calib_split(7, 1, 1, a), 7);
}

Test(calib, buckets_follow_the_engine) {
    cr_expect_str_eq(calib_bucket_name(calib_bucket(2)), "2");
    cr_expect_str_eq(calib_bucket_name(calib_bucket(3)), "3_5");
    cr_expect_str_eq(calib_bucket_name(calib_bucket(5)), "3_5");
    cr_expect_str_eq(calib_bucket_name(calib_bucket(6)), "6_10");
    cr_expect_str_eq(calib_bucket_name(calib_bucket(10)), "6_10");
    cr_expect_str_eq(calib_bucket_name(calib_bucket(11)), "11");
}

Test(calib, temperatures_read_as_the_engine_does) {
    NEAR(calib_temp_engine(2.41f), (double)strtof("2.410000", NULL), 0);
    cr_expect_eq(calib_temp_round(1.0 / 3), strtof("0.333333", NULL));
    /* a written value reads back as itself */
    float w = calib_temp_round(5.0440912);
    cr_expect_eq(calib_temp_engine(w), (double)w);
}

Test(calib, lookup_prefers_the_bucket_key) {
    struct calib_temps ts = {0};
    cr_expect(calib_temps_put(&ts, "choice", 2.0));
    cr_expect(calib_temps_put(&ts, "choice.3_5", 4.0));
    NEAR(calib_temps_lookup(&ts, "choice", 4), 4.0, 0);
    NEAR(calib_temps_lookup(&ts, "choice", 2), 2.0, 0);
    NEAR(calib_temps_lookup(&ts, "score", 4), 1.0, 0);
    NEAR(calib_temps_get(&ts, "noul"), 1.0, 0);
}

/* A type fit scales every key of the type and creates the type key; a
 * bucket fit touches only its bucket key; other types stay as they were. */
Test(calib, type_and_bucket_updates) {
    struct calib_temps ts = {0};
    calib_temps_put(&ts, "choice", 2.0);
    calib_temps_put(&ts, "choice.3_5", 4.0);
    calib_temps_put(&ts, "choicey", 3.0); /* another prefix, not the type */
    calib_temps_put(&ts, "score", 1.5);
    cr_expect(calib_temps_scale_type(&ts, "choice", 2));
    NEAR(calib_temps_get(&ts, "choice"), 1.0, 0);
    NEAR(calib_temps_get(&ts, "choice.3_5"), 2.0, 0);
    NEAR(calib_temps_get(&ts, "choicey"), 3.0, 0);
    NEAR(calib_temps_get(&ts, "score"), 1.5, 0);
    cr_expect(calib_temps_scale_type(&ts, "noul", 4));
    NEAR(calib_temps_get(&ts, "noul"), 0.25, 0);
    cr_expect(calib_temps_set_bucket(&ts, "choice", 2, 0.5));
    NEAR(calib_temps_lookup(&ts, "choice", 7), 0.5, 0);
    NEAR(calib_temps_lookup(&ts, "choice", 2), 1.0, 0);
    size_t changed = 0;
    for (size_t i = 0; i < ts.n; i++)
        changed += ts.t[i].changed;
    cr_expect_eq(changed, 4); /* choice, choice.3_5, noul, choice.6_10 */
    cr_expect_eq(ts.n, 6);
}
