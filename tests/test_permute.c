/* Unit tests for the option-order test: the chi-square survival function,
 * the seeded orders, the permuted copy of a case, and the metrics on a
 * hand-computed pair of runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "proto/metrics.h"
#include "eval/permute.h"
#include "test_hand_runs.h"

/* --- chi-square survival function ------------------------------------------------------ */

Test(permute, chi2_sf_known_values) {
    cr_expect_float_eq(metrics_chi2_sf(3.841459, 1), 0.05, 1e-7);
    /* df 3: erfc(sqrt(x/2)) + sqrt(2x/pi) e^{-x/2} = 0.0185661 (not 0.0185659) */
    cr_expect_float_eq(metrics_chi2_sf(10, 3), 0.018566135463, 1e-11);
    cr_expect_float_eq(metrics_chi2_sf(1.0 / 3, 1), 0.5637028616, 1e-9);
    cr_expect_float_eq(metrics_chi2_sf(124.342, 100), 0.05, 1e-5);
    for (unsigned df = 1; df < 50; df++) {
        cr_expect_eq(metrics_chi2_sf(0, df), 1.0);
        cr_expect_eq(metrics_chi2_sf(-1, df), 1.0);
    }
    double big = metrics_chi2_sf(500, 3);
    cr_expect(big > 0 && big < 1e-100, "sf(500, 3) = %g", big);
    cr_expect(isnan(metrics_chi2_sf(1, 0)));
}

/* df 2 and 4 have closed forms: e^{-x/2} and e^{-x/2} (1 + x/2); both
 * branches (series below x/2 < df/2 + 1, continued fraction above) are hit. */
Test(permute, chi2_sf_closed_forms) {
    for (double x = 0.01; x < 80; x *= 1.7) {
        double e = exp(-x / 2);
        cr_expect_float_eq(metrics_chi2_sf(x, 2), e, 1e-12 + 1e-10 * e, "x = %g", x);
        cr_expect_float_eq(metrics_chi2_sf(x, 4), e * (1 + x / 2), 1e-12 + 1e-10 * e,
                           "x = %g", x);
    }
}

/* --- seeded orders --------------------------------------------------------------------- */

static bool is_permutation(const size_t *p, size_t n) {
    bool seen[64] = {0};
    for (size_t i = 0; i < n; i++) {
        if (p[i] >= n || seen[p[i]])
            return false;
        seen[p[i]] = true;
    }
    return true;
}

static bool is_identity(const size_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != i)
            return false;
    return true;
}

Test(permute, orders_are_deterministic_permutations) {
    size_t a[10 * 7], b[10 * 7], c[10 * 7];
    permute_orders(1, 3, 0, 7, 10, a);
    permute_orders(1, 3, 0, 7, 10, b);
    permute_orders(2, 3, 0, 7, 10, c);
    cr_expect(!memcmp(a, b, sizeof a), "same seed, same orders");
    cr_expect(memcmp(a, c, sizeof a), "another seed, other orders");
    permute_orders(1, 4, 0, 7, 10, c);
    cr_expect(memcmp(a, c, sizeof a), "another case, other orders");
    permute_orders(1, 3, 1, 7, 10, c);
    cr_expect(memcmp(a, c, sizeof a), "another question, other orders");
    for (size_t t = 0; t < 10; t++) {
        cr_expect(is_permutation(a + t * 7, 7), "order %zu", t);
        cr_expect(!is_identity(a + t * 7, 7), "order %zu", t);
    }
}

/* Three options have 5 non-identity orders: k = 5 asks each once, k = 10 twice. */
Test(permute, orders_differ_while_they_can) {
    size_t p[10 * 3];
    permute_orders(7, 0, 0, 3, 10, p);
    for (size_t t = 0; t < 10; t++) {
        cr_expect(is_permutation(p + t * 3, 3));
        cr_expect(!is_identity(p + t * 3, 3), "order %zu", t);
        size_t round = t / 5 * 5;
        for (size_t u = round; u < t; u++)
            cr_expect(memcmp(p + u * 3, p + t * 3, 3 * sizeof *p), "orders %zu, %zu", u, t);
    }
    size_t two[4 * 2];
    permute_orders(7, 0, 0, 2, 4, two);
    for (size_t t = 0; t < 4; t++)
        cr_expect(two[t * 2] == 1 && two[t * 2 + 1] == 0, "two options: always swapped");
}

/* --- the permuted copy ----------------------------------------------------------------- */

static void parse(const char *line, struct evalset_case *c) {
    char err[512];
    cr_assert_eq(evalset_parse_line("t", 1, line, strlen(line), c, err, sizeof err), TANDEM_OK,
                 "%s", err);
}

static const char MIXED[] =
    "{\"id\": \"m\", \"state\": {\"k\": [1, 2.5]}, \"questions\": {"
    "\"n\": {\"type\": \"noul\", \"instructions\": \"x\"},"
    "\"r\": {\"type\": \"choice\", \"instructions\": \"pick\","
    " \"criteria\": {\"a\": \"first\", \"b\": null, \"c\": [\"third\"]}}},"
    " \"gold\": {\"n\": true, \"r\": \"b\"}}";

Test(permute, case_keeps_choice_questions_in_the_asked_order) {
    struct evalset_case c, out;
    parse(MIXED, &c);
    size_t orders[] = {0, 1, 2, 2, 0, 1}; /* k = 2: identity, then c, a, b */
    const size_t *perms[] = {NULL, orders};
    char err[256];
    cr_assert_eq(permute_case_new(&c, perms, 1, &out, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(out.n_questions, 1, "the noul question is not asked");
    const struct evalset_question *q = &out.q[0];
    cr_expect_str_eq(q->id, "r");
    cr_assert_eq(q->n_options, 3);
    cr_expect_str_eq(q->options[0], "c");
    cr_expect_str_eq(q->options[1], "a");
    cr_expect_str_eq(q->options[2], "b");
    cr_expect(q->has_gold);
    cr_expect_eq(q->gold, 2, "gold b now stands at position 2");
    cr_expect_eq(orders[3 + q->gold], c.q[1].gold, "and maps back to the original index");
    const json_t *crit = json_object_get(json_object_get(out.questions, "r"), "criteria");
    cr_expect_str_eq(json_string_value(json_object_get(crit, "a")), "first");
    cr_expect(json_is_null(json_object_get(crit, "b")));
    cr_expect(json_equal(json_object_get(crit, "c"), json_object_get(json_object_get(
        json_object_get(c.questions, "r"), "criteria"), "c")));
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(out.questions, "r"),
                                                       "instructions")), "pick");
    cr_expect(json_equal(out.state, c.state));
    cr_expect_str_eq(out.id, "m");
    evalset_case_deinit(&out);
    evalset_case_deinit(&c);
}

Test(permute, case_without_choice_is_refused) {
    struct evalset_case c, out;
    parse("{\"id\": \"x\", \"state\": \"s\", \"questions\": {"
          "\"n\": {\"type\": \"noul\", \"instructions\": \"x\"}}}", &c);
    const size_t *perms[] = {NULL};
    char err[256] = "";
    cr_expect_eq(permute_case_new(&c, perms, 0, &out, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "no choice question"), "%s", err);
    evalset_case_deinit(&c);
}

/* --- the metrics on hand-made runs ----------------------------------------------------- */

static const char *const LINES[] = {
    "{\"id\": \"one\", \"state\": \"s\", \"questions\": {\"r\": {\"type\": \"choice\","
    " \"instructions\": \"x\", \"criteria\": {\"a\": null, \"b\": null}}},"
    " \"gold\": {\"r\": \"a\"}}",
    "{\"id\": \"two\", \"state\": \"s\", \"questions\": {\"n\": {\"type\": \"noul\","
    " \"instructions\": \"x\"}}, \"gold\": {\"n\": true}}",
    "{\"id\": \"three\", \"state\": \"s\", \"questions\": {\"u\": {\"type\": \"score\","
    " \"instructions\": \"x\", \"criteria\": [\"lo\", \"hi\"]}, \"s\": {\"type\": \"choice\","
    " \"instructions\": \"x\", \"criteria\": {\"c\": null, \"d\": null}}},"
    " \"gold\": {\"s\": \"c\"}}",
};

static double num(const json_t *o, const char *key) {
    return json_number_value(json_object_get(o, key));
}

/* Two-option questions are always swapped. Question r (a, b), original
 * (0.7, 0.3): order 0 answers (b, a) = (0.4, 0.6), a again; order 1 (0.8, 0.2),
 * b: a flip. Question s (c, d), original (0.2, 0.8): order 0 (d, c) =
 * (0.9, 0.1), d again; order 1 failed. Three pairs, one flip; |dp| 0.1 0.1
 * 0.5 0.5 0.1 0.1, mean 1.4 / 6; chosen positions A: 2, B: 1 against 1.5
 * each: chi-square 1/3, df 1. */
Test(permute, metrics_of_hand_made_runs) {
    struct evalset *set = hand_set(LINES, 3);
    static const double one[] = {0.7, 0.3}, two[] = {0.9, 0.1}, three[] = {0.5, 0.5, 0.2, 0.8};
    const double *orig[] = {one, two, three};
    struct eval_run *base = hand_run(set, 1, orig);
    struct evalset *asked_set;
    char err[256];
    cr_assert_eq(permute_set_new(set, 2, 1, &asked_set, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(asked_set->n_cases, 4, "2 orders of the 2 cases with a choice question");
    cr_expect_str_eq(asked_set->cases[0].id, "one");
    cr_expect_str_eq(asked_set->cases[1].id, "three");
    cr_expect_str_eq(asked_set->cases[1].q[0].options[0], "d");
    cr_expect_eq(asked_set->cases[1].q[0].gold, 1, "gold c moved to position B");
    static const double r0[] = {0.4, 0.6}, r1[] = {0.8, 0.2}, s0[] = {0.9, 0.1};
    const double *answers[] = {r0, s0, r1, NULL};
    struct eval_run *asked = hand_run(asked_set, 1, answers);
    json_t *pm = permute_summarize(base, asked, 2, 1);
    cr_assert(pm);
    cr_expect_eq(json_integer_value(json_object_get(pm, "choice_questions")), 2);
    cr_expect_eq(json_integer_value(json_object_get(pm, "orders_asked")), 3);
    cr_expect_eq(json_integer_value(json_object_get(pm, "orders_failed")), 1);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(pm, "requests"), "errors")),
                 1);
    cr_expect_eq(json_integer_value(json_object_get(pm, "flips")), 1);
    cr_expect_float_eq(num(pm, "flip_rate"), 1.0 / 3, 1e-12);
    cr_expect_float_eq(num(pm, "mean_abs_dp"), 1.4 / 6, 1e-12);
    const json_t *pos = json_object_get(pm, "positions");
    cr_assert_eq(json_array_size(pos), 2);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(pos, 1), "label")), "B");
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(pos, 0), "chosen")), 2);
    cr_expect_float_eq(num(json_array_get(pos, 0), "expected"), 1.5, 1e-12);
    cr_expect_float_eq(num(json_array_get(pos, 0), "rate"), 2.0 / 3, 1e-12);
    cr_expect_float_eq(num(json_array_get(pos, 1), "uniform_rate"), 0.5, 1e-12);
    cr_expect_float_eq(num(pm, "chi_square"), 1.0 / 3, 1e-12);
    cr_expect_eq(json_integer_value(json_object_get(pm, "df")), 1);
    cr_expect_float_eq(num(pm, "p_value"), 0.5637028616, 1e-9);
    const json_t *flipped = json_object_get(pm, "flipped");
    cr_assert_eq(json_array_size(flipped), 1);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(flipped, 0), "case")), "one");
    cr_expect_float_eq(num(json_array_get(flipped, 0), "max_dp"), 0.5, 1e-12);
    const json_t *e = json_array_get(json_object_get(pm, "errors"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(e, "case")), "three");
    cr_expect_eq(json_integer_value(json_object_get(e, "order")), 2);
    json_decref(pm);
    eval_run_free(asked);
    eval_run_free(base);
    evalset_free(asked_set);
    evalset_free(set);
}

Test(permute, set_without_choice_is_refused) {
    struct evalset *set = mem_calloc(1, sizeof *set);
    set->path = mem_strdup("noul.jsonl");
    set->n_cases = 1;
    set->cases = mem_calloc(1, sizeof *set->cases);
    parse(LINES[1], &set->cases[0]);
    struct evalset *out = NULL;
    char err[256] = "";
    cr_expect_eq(permute_set_new(set, 3, 1, &out, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect_null(out);
    cr_expect(strstr(err, "noul.jsonl has no choice question"), "%s", err);
    evalset_free(set);
}

/* A choice question of one option is valid (the contract allows it) but has
 * no other order: it is left out, and a set of only such questions has
 * nothing to permute. Before, permute_orders() divided by n! - 1 = 0. */
static struct evalset *one_case_set(const char *line) {
    struct evalset *set = mem_calloc(1, sizeof *set);
    set->path = mem_strdup("one.jsonl");
    set->n_cases = 1;
    set->cases = mem_calloc(1, sizeof *set->cases);
    parse(line, &set->cases[0]);
    return set;
}

Test(permute, one_option_questions_are_left_out) {
    struct evalset *set = one_case_set(
        "{\"id\": \"x\", \"state\": \"s\", \"questions\": {"
        "\"one\": {\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"only\": null}},"
        "\"two\": {\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"a\": null,"
        " \"b\": null}}}, \"gold\": {\"one\": \"only\", \"two\": \"b\"}}");
    struct evalset *out = NULL;
    char err[256] = "";
    cr_assert_eq(permute_set_new(set, 3, 1, &out, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(out->n_cases, 3);
    for (size_t i = 0; i < out->n_cases; i++) {
        cr_assert_eq(out->cases[i].n_questions, 1, "case %zu", i);
        cr_expect_str_eq(out->cases[i].q[0].id, "two");
        cr_expect_str_eq(out->cases[i].q[0].options[0], "b", "two options are swapped");
    }
    evalset_free(out);
    evalset_free(set);

    set = one_case_set("{\"id\": \"y\", \"state\": \"s\", \"questions\": {\"one\": {\"type\":"
                       " \"choice\", \"instructions\": \"x\", \"criteria\": {\"only\": null}}}}");
    out = NULL;
    cr_expect_eq(permute_set_new(set, 3, 1, &out, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect_null(out);
    cr_expect(strstr(err, "one.jsonl has no choice question"), "%s", err);
    evalset_free(set);
}
