/* Unit tests for drift: two hand-made runs compared, KL, max |dp|, flips,
 * sure flips and the Wilson intervals worked out by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "eval/drift.h"
#include "proto/metrics.h"
#include "test_hand_runs.h"

/* The answers to hand_lines (test_hand_runs.h). The reference: r a at 0.9, n false at 0.7, s d at 0.6, u level 2 at 0.5. */
static const double REF1[] = {0.9, 0.1}, REF2[] = {0.3, 0.7}, REF3[] = {0.4, 0.6, 0.2, 0.3, 0.5};
/* The candidate: r still a (0.6), n flips to true, s unchanged, u flips to level 0. */
static const double CAND1[] = {0.6, 0.4}, CAND2[] = {0.8, 0.2}, CAND3[] = {0.4, 0.6, 0.5, 0.3, 0.2};

#define KL_R (0.9 * log(0.9 / 0.6) + 0.1 * log(0.1 / 0.4))
#define KL_N (0.3 * log(0.3 / 0.8) + 0.7 * log(0.7 / 0.2))
#define KL_U (0.2 * log(0.2 / 0.5) + 0.5 * log(0.5 / 0.2))

static double num(const json_t *o, const char *key) {
    return json_number_value(json_object_get(o, key));
}

static json_int_t integer(const json_t *o, const char *key) {
    return json_integer_value(json_object_get(o, key));
}

/* The Wilson 95% interval of k in n, written out. */
static void wilson(double k, double n, double *lo, double *hi) {
    double z = METRICS_Z95, p = k / n, d = 1 + z * z / n;
    double mid = (p + z * z / (2 * n)) / d;
    double half = z * sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d;
    *lo = mid - half;
    *hi = mid + half;
}

Test(drift, one_repeat_each_side) {
    struct evalset *set = hand_set(hand_lines, 3);
    const double *rp[] = {REF1, REF2, REF3}, *cp[] = {CAND1, CAND2, CAND3};
    struct eval_run *ref = hand_run(set, 1, rp), *cand = hand_run(set, 1, cp);
    struct drift_options o = drift_default_options();
    cr_expect_eq(o.top, 10);
    cr_expect_float_eq(o.margin, 0.1, 1e-15);
    o.top = 2;
    json_t *d = drift_compare(ref, "ref-model", cand, NULL, &o);
    cr_assert(d);
    cr_expect_str_eq(json_string_value(json_object_get(d, "format")), "tandem-drift/1");
    cr_expect_eq(integer(d, "compared"), 4);
    cr_expect_eq(integer(d, "skipped"), 0);
    cr_expect_eq(integer(d, "flips"), 2);
    cr_expect_float_eq(num(d, "flip_rate"), 0.5, 1e-12);
    cr_expect_eq(integer(d, "sure_compared"), 4, "every reference margin is at least 0.1");
    cr_expect_eq(integer(d, "sure_flips"), 2);
    cr_expect_eq(integer(d, "unstable"), 0);
    cr_expect_float_eq(num(d, "kl_mean"), (KL_R + KL_N + 0 + KL_U) / 4, 1e-12);
    cr_expect_float_eq(num(d, "kl_max"), KL_N, 1e-12);
    cr_expect_float_eq(num(d, "max_dp_mean"), (0.3 + 0.5 + 0 + 0.3) / 4, 1e-12);
    cr_expect_float_eq(num(d, "max_dp_max"), 0.5, 1e-12);
    double lo, hi;
    wilson(2, 4, &lo, &hi);
    const json_t *ci = json_object_get(d, "flip_ci95");
    cr_expect_float_eq(json_number_value(json_array_get(ci, 0)), lo, 1e-12);
    cr_expect_float_eq(json_number_value(json_array_get(ci, 1)), hi, 1e-12);

    const json_t *types = json_object_get(d, "by_type");
    cr_expect_eq(integer(json_object_get(types, "choice"), "compared"), 2);
    cr_expect_eq(integer(json_object_get(types, "choice"), "flips"), 0);
    cr_expect_eq(integer(json_object_get(types, "noul"), "flips"), 1);
    cr_expect_float_eq(num(json_object_get(types, "score"), "kl_mean"), KL_U, 1e-12);

    const json_t *worst = json_object_get(d, "worst");
    cr_assert_eq(json_array_size(worst), 2, "--top 2");
    const json_t *w0 = json_array_get(worst, 0);
    cr_expect_str_eq(json_string_value(json_object_get(w0, "question")), "n");
    cr_expect(json_is_false(json_object_get(w0, "ref_answer")));
    cr_expect(json_is_true(json_object_get(w0, "cand_answer")));
    cr_expect_float_eq(num(w0, "cand_p"), 0.8, 1e-12);
    cr_expect(json_is_false(json_object_get(w0, "agree")));
    /* KL_U = 0.3 ln 2.5 = 0.275 beats KL_R = 0.9 ln 1.5 - 0.1 ln 4 = 0.226 */
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(worst, 1), "question")),
                     "u");
    cr_expect_eq(json_array_size(json_object_get(d, "results")), 4);

    const json_t *side = json_object_get(d, "ref");
    cr_expect_str_eq(json_string_value(json_object_get(side, "model")), "ref-model");
    cr_expect_eq(integer(side, "scored"), 3);
    cr_expect_float_eq(num(side, "accuracy"), 1.0 / 3, 1e-12);
    cr_expect_float_eq(num(json_object_get(d, "cand"), "accuracy"), 2.0 / 3, 1e-12);
    cr_expect(json_is_null(json_object_get(json_object_get(d, "cand"), "model")));
    cr_expect(!json_object_get(d, "ref_noise"), "one reference repeat: no noise measured");
    json_decref(d);
    eval_run_free(cand);
    eval_run_free(ref);
    evalset_free(set);
}

/* A margin above the reference's on r (0.8) and n (0.4) but not s and u
 * (0.2): only two answers are sure, and one of them flipped. */
Test(drift, margin_decides_what_is_sure) {
    struct evalset *set = hand_set(hand_lines, 3);
    const double *rp[] = {REF1, REF2, REF3}, *cp[] = {CAND1, CAND2, CAND3};
    struct eval_run *ref = hand_run(set, 1, rp), *cand = hand_run(set, 1, cp);
    struct drift_options o = {.top = 0, .margin = 0.3};
    json_t *d = drift_compare(ref, NULL, cand, NULL, &o);
    cr_assert(d);
    cr_expect_eq(integer(d, "sure_compared"), 2);
    cr_expect_eq(integer(d, "sure_flips"), 1);
    cr_expect_float_eq(num(d, "sure_flip_rate"), 0.5, 1e-12);
    cr_expect_eq(json_array_size(json_object_get(d, "worst")), 0);
    json_decref(d);
    eval_run_free(cand);
    eval_run_free(ref);
    evalset_free(set);
}

Test(drift, failed_requests_are_skipped_and_listed) {
    struct evalset *set = hand_set(hand_lines, 3);
    const double *rp[] = {REF1, REF2, REF3}, *cp[] = {CAND1, CAND2, NULL};
    struct eval_run *ref = hand_run(set, 1, rp), *cand = hand_run(set, 1, cp);
    struct drift_options o = drift_default_options();
    json_t *d = drift_compare(ref, NULL, cand, NULL, &o);
    cr_assert(d);
    cr_expect_eq(integer(d, "compared"), 2);
    cr_expect_eq(integer(d, "skipped"), 2, "both questions of case three");
    cr_expect_float_eq(num(d, "kl_mean"), (KL_R + KL_N) / 2, 1e-12);
    const json_t *errors = json_object_get(d, "errors");
    cr_assert_eq(json_array_size(errors), 1);
    const json_t *e = json_array_get(errors, 0);
    cr_expect_str_eq(json_string_value(json_object_get(e, "side")), "cand");
    cr_expect_str_eq(json_string_value(json_object_get(e, "case")), "three");
    cr_expect_eq(integer(e, "http_status"), 503);
    cr_expect_eq(integer(json_object_get(d, "cand"), "errors"), 1);
    cr_expect_eq(integer(json_object_get(json_object_get(d, "by_type"), "score"), "compared"), 0);
    cr_expect(json_is_null(json_object_get(json_object_get(json_object_get(d, "by_type"),
                                                           "score"), "kl_mean")));
    json_decref(d);
    eval_run_free(cand);
    eval_run_free(ref);
    evalset_free(set);
}

/* The candidate answers three times: r flips in one repeat of three (not
 * most: unstable), n in all three. The reference's two identical repeats
 * measure no noise. */
Test(drift, repeats_flip_by_majority) {
    struct evalset *set = hand_set(hand_lines, 2);
    static const double r_flip[] = {0.3, 0.7};
    const double *rp[] = {REF1, REF2, REF1, REF2};
    const double *cp[] = {CAND1, CAND2, r_flip, CAND2, CAND1, CAND2};
    struct eval_run *ref = hand_run(set, 2, rp), *cand = hand_run(set, 3, cp);
    struct drift_options o = drift_default_options();
    json_t *d = drift_compare(ref, NULL, cand, NULL, &o);
    cr_assert(d);
    cr_expect_eq(integer(d, "repeat"), 3);
    cr_expect_eq(integer(d, "compared"), 2);
    cr_expect_eq(integer(d, "flips"), 1, "n flipped in every repeat, r in one of three");
    cr_expect_eq(integer(d, "unstable"), 1);
    const json_t *r = json_array_get(json_object_get(d, "results"), 0);
    cr_expect_eq(integer(r, "flipped_repeats"), 1);
    cr_expect(json_is_true(json_object_get(r, "agree")));
    double kl_flip = 0.9 * log(0.9 / 0.3) + 0.1 * log(0.1 / 0.7);
    cr_expect_float_eq(num(r, "kl"), (2 * KL_R + kl_flip) / 3, 1e-12);
    cr_expect_float_eq(num(r, "max_dp"), 0.6, 1e-12);
    const json_t *noise = json_object_get(d, "ref_noise");
    cr_assert(noise, "two reference repeats measure the noise");
    cr_expect_eq(integer(noise, "compared"), 2);
    cr_expect_eq(integer(noise, "flips"), 0);
    cr_expect_float_eq(num(noise, "kl_max"), 0, 1e-15);
    json_decref(d);
    eval_run_free(cand);
    eval_run_free(ref);
    evalset_free(set);
}
