/* Unit tests for thresholds: the largest cut at a target precision, its
 * written value, a threshold accepted from below, the decider's confidence,
 * and the case counts, on hand-made runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "eval/thresholds.h"
#include "test_hand_runs.h"

#define N_CASES 30

static double num(const json_t *o, const char *key) {
    return json_number_value(json_object_get(o, key));
}

static const json_t *question(const json_t *th, size_t i) {
    return json_array_get(json_object_get(th, "questions"), i);
}

/* Thirty cases of two noul questions q and u with the given gold answers. */
static struct evalset *noul_set(const bool *q_gold, const bool *u_gold) {
    static char text[N_CASES][256];
    const char *lines[N_CASES];
    for (int i = 0; i < N_CASES; i++) {
        snprintf(text[i], sizeof text[i],
                 "{\"id\": \"c%d\", \"state\": \"case %d\", \"questions\": {"
                 "\"q\": {\"type\": \"noul\", \"instructions\": \"q?\"},"
                 "\"u\": {\"type\": \"noul\", \"instructions\": \"u?\"}},"
                 " \"gold\": {\"q\": %s, \"u\": %s}}",
                 i, i, q_gold[i] ? "true" : "false", u_gold[i] ? "true" : "false");
        lines[i] = text[i];
    }
    return hand_set(lines, N_CASES);
}

/* A run whose case i answered P(true) q[i] and u[i], but whose first
 * `failed` requests failed. */
static struct eval_run *noul_run(const struct evalset *set, const double *q, const double *u,
                                 int failed) {
    static double p[N_CASES][4];
    const double *rows[N_CASES];
    for (int i = 0; i < N_CASES; i++) {
        p[i][0] = q[i], p[i][1] = 1 - q[i], p[i][2] = u[i], p[i][3] = 1 - u[i];
        rows[i] = i < failed ? NULL : p[i];
    }
    return hand_run(set, 1, rows);
}

/* q keeps its seven true answers down to 0.87341, and its first false one
 * is at 0.87339: the written value is 0.8734 (0.873 would let it in). u's
 * most confident answer is false and its answers then alternate: no cut
 * reaches 0.9, the most precise is the top two at 0.92 (precision 0.5). */
static void hand_scores(double *q, bool *q_gold, double *u, bool *u_gold) {
    static const double top[] = {0.99, 0.97, 0.95, 0.93, 0.91, 0.89, 0.87341, 0.87339};
    for (int i = 0; i < N_CASES; i++) {
        q[i] = i < 8 ? top[i] : 0.8 - 0.03 * (i - 8);
        q_gold[i] = i < 7;
        u[i] = 0.95 - 0.03 * i;
        u_gold[i] = i % 2 == 1;
    }
}

Test(thresholds, largest_cut_at_the_target_and_its_written_value) {
    double q[N_CASES], u[N_CASES];
    bool qg[N_CASES], ug[N_CASES];
    hand_scores(q, qg, u, ug);
    struct evalset *set = noul_set(qg, ug);
    struct eval_run *run = noul_run(set, q, u, 0);
    struct thresholds_params p = thresholds_default_params();
    cr_expect_float_eq(p.target_precision, 0.95, 1e-15);
    p.target_precision = 0.9;
    p.bootstrap = 0;
    char err[512] = "";
    json_t *th = thresholds_suggest(run, &p, err, sizeof err);
    cr_assert(th, "%s", err);
    cr_expect_eq(json_integer_value(json_object_get(th, "min_answers")), 29);
    cr_expect(!json_object_get(th, "yaml"), "the YAML is the caller's");
    const json_t *gq = question(th, 0), *gu = question(th, 1);
    cr_expect_str_eq(json_string_value(json_object_get(gq, "question")), "q");
    cr_expect_str_eq(json_string_value(json_object_get(gq, "status")), "ok");
    cr_expect_str_eq(json_string_value(json_object_get(gq, "value")), ">= 0.8734");
    cr_expect_str_eq(json_string_value(json_object_get(gq, "key")), "thresholds");
    cr_expect_eq(num(gq, "threshold"), 0.8734);
    cr_expect_eq(json_integer_value(json_object_get(gq, "accepted")), 7);
    cr_expect_eq(json_integer_value(json_object_get(gq, "answers")), 30);
    cr_expect_eq(json_integer_value(json_object_get(gq, "right")), 7);
    cr_expect_float_eq(num(gq, "precision"), 1, 1e-12);
    cr_expect_float_eq(num(gq, "coverage"), 7.0 / 30, 1e-12);
    cr_expect(json_is_null(json_object_get(gq, "interval")), "no resamples, no interval");
    cr_expect_str_eq(json_string_value(json_object_get(gu, "status")), "unreachable");
    cr_expect(!json_object_get(gu, "value"));
    const json_t *best = json_object_get(gu, "best");
    cr_expect_float_eq(num(best, "precision"), 0.5, 1e-12);
    cr_expect_float_eq(num(best, "coverage"), 2.0 / 30, 1e-12);
    cr_expect_float_eq(num(best, "threshold"), 0.92, 1e-12);
    json_decref(th);

    p.bootstrap = 100;
    th = thresholds_suggest(run, &p, err, sizeof err);
    cr_assert(th, "%s", err);
    const json_t *iv = json_object_get(question(th, 0), "interval");
    cr_assert_eq(json_array_size(iv), 2);
    double lo = json_number_value(json_array_get(iv, 0));
    double hi = json_number_value(json_array_get(iv, 1));
    cr_expect(lo <= hi && hi <= 0.99, "[%g, %g]", lo, hi);
    json_decref(th);
    eval_run_free(run);
    evalset_free(set);
}

/* The same answers mirrored (P(true) 1 - q, gold inverted) with q's
 * threshold written "<=": the cut accepts from below, at 0.1266. */
Test(thresholds, a_below_threshold_accepts_from_below) {
    double q[N_CASES], u[N_CASES];
    bool qg[N_CASES], ug[N_CASES];
    hand_scores(q, qg, u, ug);
    for (int i = 0; i < N_CASES; i++) {
        q[i] = 1 - q[i];
        qg[i] = !qg[i];
    }
    struct evalset *set = noul_set(qg, ug);
    struct eval_run *run = noul_run(set, q, u, 0);
    static const char *const below[] = {"q"};
    struct thresholds_params p = {.target_precision = 0.9, .below = below, .n_below = 1};
    char err[512] = "";
    json_t *th = thresholds_suggest(run, &p, err, sizeof err);
    cr_assert(th, "%s", err);
    const json_t *gq = question(th, 0);
    cr_expect_str_eq(json_string_value(json_object_get(gq, "op")), "<=");
    cr_expect_str_eq(json_string_value(json_object_get(gq, "value")), "<= 0.1266");
    cr_expect_eq(num(gq, "threshold"), 0.1266);
    cr_expect_eq(json_integer_value(json_object_get(gq, "accepted")), 7);
    cr_expect_eq(json_integer_value(json_object_get(gq, "right")), 7, "right: gold false");
    cr_expect_str_eq(json_string_value(json_object_get(question(th, 1), "op")), ">=");
    json_decref(th);
    eval_run_free(run);
    evalset_free(set);
}

/* Ten choice questions of two options, top probabilities 0.95 .. 0.52: the
 * engine's confidence 2 p - 1 is 0.9 .. 0.04. At precision 0.7 the largest
 * cut keeps five (four right: 0.8) down to confidence 0.5. */
Test(thresholds, the_decider_cut_is_on_the_engine_confidence) {
    static const double top[] = {0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.52};
    static const bool right[] = {1, 1, 0, 1, 1, 0, 0, 0, 0, 0};
    static char text[10][256];
    const char *lines[10];
    double p[10][2];
    const double *rows[10];
    for (int i = 0; i < 10; i++) {
        snprintf(text[i], sizeof text[i],
                 "{\"id\": \"d%d\", \"state\": \"s\", \"questions\": {\"r\": {\"type\":"
                 " \"choice\", \"instructions\": \"x\", \"criteria\": {\"a\": null, \"b\":"
                 " null}}}, \"gold\": {\"r\": \"%s\"}}", i, right[i] ? "a" : "b");
        lines[i] = text[i];
        p[i][0] = top[i], p[i][1] = 1 - top[i];
        rows[i] = p[i];
    }
    struct evalset *set = hand_set(lines, 10);
    struct eval_run *run = hand_run(set, 1, rows);
    struct thresholds_params p7 = {.target_precision = 0.7};
    char err[512] = "";
    json_t *th = thresholds_suggest(run, &p7, err, sizeof err);
    cr_assert(th, "%s", err);
    cr_expect_eq(json_integer_value(json_object_get(th, "min_answers")), 9);
    cr_assert_eq(json_array_size(json_object_get(th, "questions")), 1);
    const json_t *g = question(th, 0);
    cr_expect(json_is_null(json_object_get(g, "question")));
    cr_expect(json_is_null(json_object_get(g, "op")));
    cr_expect_str_eq(json_string_value(json_object_get(g, "key")), THRESHOLDS_DECIDER_KEY);
    cr_expect_str_eq(json_string_value(json_object_get(g, "value")), "0.50");
    cr_expect_eq(num(g, "threshold"), 0.5);
    cr_expect_eq(json_integer_value(json_object_get(g, "accepted")), 5);
    cr_expect_float_eq(num(g, "precision"), 0.8, 1e-12);
    cr_expect_float_eq(num(g, "coverage"), 0.5, 1e-12);
    json_decref(th);
    eval_run_free(run);
    evalset_free(set);
}

Test(thresholds, too_few_cases_are_counted_before_and_after_the_run) {
    double q[N_CASES], u[N_CASES];
    bool qg[N_CASES], ug[N_CASES];
    hand_scores(q, qg, u, ug);
    struct evalset *set = noul_set(qg, ug);
    char err[1024] = "";
    cr_expect_eq(thresholds_check_set(set, 0.9, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_eq(thresholds_check_set(set, 0.95, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "too few cases for a precision of 0.95: q: 30 cases with a gold "
                          "answer; u: 30 cases with a gold answer; each needs at least 59"),
              "%s", err);

    /* two failed requests leave 28 answers, one fewer than 29 */
    struct eval_run *run = noul_run(set, q, u, 2);
    struct thresholds_params tp = {.target_precision = 0.9};
    cr_expect(!thresholds_suggest(run, &tp, err, sizeof err));
    cr_expect(strstr(err, "q: 28 answered cases"), "%s", err);
    eval_run_free(run);
    evalset_free(set);

    static const char *const score[] = {
        "{\"id\": \"x\", \"state\": \"s\", \"questions\": {\"u\": {\"type\": \"score\","
        " \"instructions\": \"x\", \"criteria\": [\"lo\", \"hi\"]}}, \"gold\": {\"u\": 1}}"};
    set = hand_set(score, 1);
    cr_expect_eq(thresholds_check_set(set, 0.9, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect_str_eq(err, "hand.jsonl: no noul or choice question has a gold answer");
    evalset_free(set);
}
