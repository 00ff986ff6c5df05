/* Unit tests for summary: the `tandem eval --json` object of hand-made runs,
 * every number worked out by hand. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "eval/summary.h"
#include "test_hand_runs.h"

/* The answers to hand_lines (test_hand_runs.h): r right at 0.9; n answers
 * false at 0.7 (wrong); s answers d at 0.55 (wrong). */
static const double ONE[] = {0.9, 0.1}, TWO[] = {0.3, 0.7}, THREE[] = {0.45, 0.55, 0.2, 0.3, 0.5};

static struct summary_scoring scoring(unsigned bootstrap) {
    return (struct summary_scoring){.low = 0.6, .target_risk = 0.05, .bootstrap = bootstrap,
                                    .seed = 1};
}

static double num(const json_t *o, const char *key) {
    return json_number_value(json_object_get(o, key));
}

static const json_t *group(const json_t *s, const char *name) {
    return json_object_get(json_object_get(s, "metrics"), name);
}

Test(summary, scores_of_one_repeat) {
    struct evalset *set = hand_set(hand_lines, 3);
    const double *p[] = {ONE, TWO, THREE};
    struct eval_run *run = hand_run(set, 1, p);
    struct summary_scoring sc = scoring(0);
    json_t *s = summary_build(run, "m", &sc, 4);
    cr_assert(s);
    cr_expect_str_eq(json_string_value(json_object_get(s, "format")), "tandem-eval/1");
    cr_expect_str_eq(json_string_value(json_object_get(s, "model")), "m");
    cr_expect_eq(json_integer_value(json_object_get(s, "questions")), 4);
    cr_expect_eq(json_integer_value(json_object_get(s, "scored_questions")), 3);
    cr_expect_eq(json_integer_value(json_object_get(s, "concurrency")), 4);

    const json_t *all = group(s, "overall");
    cr_expect_eq(json_integer_value(json_object_get(all, "n")), 3);
    cr_expect_float_eq(num(all, "accuracy"), 1.0 / 3, 1e-12);
    cr_expect_float_eq(num(all, "nll"), -(log(0.9) + log(0.3) + log(0.45)) / 3, 1e-12);
    cr_expect_float_eq(num(all, "brier"), (0.02 + 0.98 + 2 * 0.55 * 0.55) / 3, 1e-12);
    /* one answer in each of bins 13, 10 and 8: (|1 - 0.9| + |0 - 0.7| + |0 - 0.55|) / 3 */
    cr_expect_float_eq(num(all, "ece"), 0.45, 1e-12);
    cr_expect_float_eq(num(all, "mean_confidence"), (0.9 + 0.7 + 0.55) / 3, 1e-12);
    cr_expect_float_eq(num(all, "low_confidence_rate"), 1.0 / 3, 1e-12);
    cr_expect(json_is_null(json_object_get(all, "mae")), "no scored score question");

    const json_t *choice = group(s, "choice");
    cr_expect_eq(json_integer_value(json_object_get(choice, "n")), 2);
    cr_expect_float_eq(num(choice, "accuracy"), 0.5, 1e-12);
    cr_expect_float_eq(num(choice, "nll"), -(log(0.9) + log(0.45)) / 2, 1e-12);
    cr_expect_float_eq(num(choice, "ece"), (0.1 + 0.55) / 2, 1e-12);
    cr_expect_float_eq(num(group(s, "noul"), "accuracy"), 0, 1e-12);
    cr_expect_eq(json_integer_value(json_object_get(group(s, "score"), "n")), 0);
    cr_expect(json_is_null(json_object_get(group(s, "score"), "accuracy")));

    const json_t *bin = json_array_get(json_object_get(s, "reliability"), 13);
    cr_expect_eq(json_integer_value(json_object_get(bin, "n")), 1);
    cr_expect_float_eq(num(bin, "confidence"), 0.9, 1e-12);
    cr_expect_float_eq(num(bin, "accuracy"), 1, 1e-12);
    cr_expect(json_is_null(json_object_get(json_array_get(json_object_get(s, "reliability"), 0),
                                           "accuracy")), "an empty bin has no accuracy");

    /* sorted 0.9 right, 0.7 wrong, 0.55 wrong: risks 0, 1/2, 2/3 */
    const json_t *sel = json_object_get(s, "selective");
    cr_expect_float_eq(num(sel, "aurc"), (0 + 0.5 + 2.0 / 3) / 3, 1e-12);
    cr_expect_float_eq(num(sel, "coverage_at_target_risk"), 1.0 / 3, 1e-12);
    cr_expect_float_eq(num(sel, "threshold"), 0.9, 1e-12);
    cr_expect_eq(json_array_size(json_object_get(sel, "curve")), 3);
    cr_expect(json_is_null(json_object_get(s, "intervals")), "no --bootstrap, no intervals");

    const json_t *st = json_object_get(s, "stability");
    cr_expect_str_eq(json_string_value(json_object_get(st, "verdict")), "not measured");
    const json_t *results = json_object_get(s, "results");
    cr_assert_eq(json_array_size(results), 4);
    const json_t *n = json_array_get(results, 1), *u = json_array_get(results, 3);
    cr_expect(json_is_false(json_object_get(n, "answer")));
    cr_expect(json_is_true(json_object_get(n, "gold")));
    cr_expect(json_is_false(json_object_get(n, "correct")));
    cr_expect_float_eq(num(n, "p"), 0.7, 1e-12);
    cr_expect_eq(json_integer_value(json_object_get(u, "answer")), 2, "score answers are levels");
    cr_expect(json_is_null(json_object_get(u, "gold")));
    cr_expect(json_is_null(json_object_get(u, "correct")));
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(results, 2), "answer")),
                     "d");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(s, "requests"), "errors")), 0);
    json_decref(s);
    eval_run_free(run);
    evalset_free(set);
}

/* Repeat 2: r moves to 0.6 (still a), n flips to true at 0.8, and case
 * three's second request fails. */
Test(summary, repeats_measure_stability_and_list_failures) {
    struct evalset *set = hand_set(hand_lines, 3);
    static const double one2[] = {0.6, 0.4}, two2[] = {0.8, 0.2};
    const double *p[] = {ONE, TWO, THREE, one2, two2, NULL};
    struct eval_run *run = hand_run(set, 2, p);
    struct summary_scoring sc = scoring(0);
    json_t *s = summary_build(run, NULL, &sc, 1);
    cr_assert(s);
    cr_expect(json_is_null(json_object_get(s, "model")));
    const json_t *all = group(s, "overall");
    cr_expect_eq(json_integer_value(json_object_get(all, "n")), 5, "every answered repeat");
    cr_expect_float_eq(num(all, "accuracy"), 3.0 / 5, 1e-12);
    cr_expect_float_eq(num(all, "nll"),
                       -(log(0.9) + log(0.6) + log(0.3) + log(0.8) + log(0.45)) / 5, 1e-12);

    const json_t *st = json_object_get(s, "stability");
    cr_expect_str_eq(json_string_value(json_object_get(st, "verdict")), "nondeterministic");
    cr_expect_eq(json_integer_value(json_object_get(st, "questions_measured")), 2);
    cr_expect_eq(json_integer_value(json_object_get(st, "questions_identical")), 0);
    cr_expect_float_eq(num(st, "max_dp"), 0.5, 1e-12);
    cr_expect_eq(json_integer_value(json_object_get(st, "flips")), 1);
    cr_expect_eq(json_integer_value(json_object_get(st, "questions_with_flips")), 1);
    const json_t *unstable = json_object_get(st, "unstable");
    cr_assert_eq(json_array_size(unstable), 2);
    const json_t *un = json_array_get(unstable, 1);
    cr_expect_str_eq(json_string_value(json_object_get(un, "question")), "n");
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(un, "answers"), "true")), 1);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(un, "answers"), "false")), 1);

    const json_t *req = json_object_get(s, "requests");
    cr_expect_eq(json_integer_value(json_object_get(req, "total")), 6);
    cr_expect_eq(json_integer_value(json_object_get(req, "ok")), 5);
    cr_expect_eq(json_integer_value(json_object_get(req, "cases_answered")), 3);
    const json_t *e = json_array_get(json_object_get(s, "errors"), 0);
    cr_assert(e);
    cr_expect_str_eq(json_string_value(json_object_get(e, "case")), "three");
    cr_expect_eq(json_integer_value(json_object_get(e, "repeat")), 2);
    cr_expect_eq(json_integer_value(json_object_get(e, "http_status")), 503);
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(json_object_get(s, "results"),
                                                                   2), "answered")), 1);
    json_decref(s);
    eval_run_free(run);
    evalset_free(set);
}

Test(summary, bootstrap_intervals_are_seeded) {
    struct evalset *set = hand_set(hand_lines, 3);
    const double *p[] = {ONE, TWO, THREE};
    struct eval_run *run = hand_run(set, 1, p);
    struct summary_scoring sc = scoring(200);
    json_t *a = summary_build(run, NULL, &sc, 1), *b = summary_build(run, NULL, &sc, 1);
    cr_assert(a && b);
    const json_t *iv = json_object_get(a, "intervals");
    cr_expect_eq(json_integer_value(json_object_get(iv, "resamples")), 200);
    const json_t *acc = json_object_get(iv, "accuracy");
    cr_assert_eq(json_array_size(acc), 2);
    double lo = json_number_value(json_array_get(acc, 0));
    double hi = json_number_value(json_array_get(acc, 1));
    cr_expect(lo >= 0 && lo <= hi && hi <= 1, "[%g, %g]", lo, hi);
    cr_expect(json_equal(iv, json_object_get(b, "intervals")), "same seed, same intervals");
    json_decref(a);
    json_decref(b);
    eval_run_free(run);
    evalset_free(set);
}

Test(summary, values_as_json) {
    struct evalset *set = hand_set(hand_lines, 3);
    const struct evalset_question *r = &set->cases[0].q[0], *n = &set->cases[1].q[0];
    json_t *v = summary_answer_json(r, 1);
    cr_expect_str_eq(json_string_value(v), "b");
    json_decref(v);
    v = summary_answer_json(n, 1);
    cr_expect(json_is_false(v));
    json_decref(v);
    v = summary_number(NAN);
    cr_expect(json_is_null(v));
    json_decref(v);
    v = summary_number(INFINITY);
    cr_expect(json_is_null(v));
    json_decref(v);
    v = summary_number(0.25);
    cr_expect_eq(json_real_value(v), 0.25);
    json_decref(v);
    cr_expect_str_eq(summary_group_names[0], "overall");
    evalset_free(set);
}
