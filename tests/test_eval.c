/* Unit tests for eval: answers turned into distributions, and every way an
 * answer can fail to answer its question named by field. */
#include <criterion/criterion.h>
#include <string.h>

#include "eval/eval.h"
#include "base/mem.h"

static const char CASE[] =
    "{\"id\": \"c\", \"state\": \"s\", \"questions\": {"
    "\"r\": {\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"a\": null, \"b\": null}},"
    "\"u\": {\"type\": \"score\", \"instructions\": \"x\", \"criteria\": [\"lo\", \"mid\", \"hi\"]},"
    "\"n\": {\"type\": \"noul\", \"instructions\": \"x\"}}}";

static void load(struct evalset_case *c) {
    char err[256];
    cr_assert_eq(evalset_parse_line("t", 1, CASE, strlen(CASE), c, err, sizeof err), TANDEM_OK,
                 "%s", err);
}

static tandem_err parse(const char *body, double *p, char *err, size_t n) {
    struct evalset_case c;
    load(&c);
    json_t *j = json_loads(body, 0, NULL);
    cr_assert(j, "bad test JSON: %s", body);
    tandem_err e = eval_parse_answer(&c, j, p, err, n);
    json_decref(j);
    evalset_case_deinit(&c);
    return e;
}

Test(eval, answer_becomes_distributions) {
    struct evalset_case c;
    load(&c);
    cr_expect_eq(eval_case_width(&c), 7);
    evalset_case_deinit(&c);
    double p[7];
    char err[256] = "";
    cr_assert_eq(parse("{\"answers\": {"
                       "\"r\": {\"type\": \"choice\", \"probabilities\": {\"b\": 0.75, \"a\": 0.25}},"
                       "\"u\": {\"probabilities\": {\"0\": 0.2, \"1\": 0.3, \"2\": 0.5}},"
                       "\"n\": {\"type\": \"noul\", \"noul\": 0.9}}}",
                       p, err, sizeof err),
                 TANDEM_OK, "%s", err);
    double want[] = {0.25, 0.75, 0.2, 0.3, 0.5, 0.9, 1 - 0.9};
    for (int i = 0; i < 7; i++)
        cr_expect_eq(p[i], want[i], "p[%d] = %g", i, p[i]);
}

Test(eval, malformed_answers_name_the_field) {
    static const char *const cases[][2] = {
        {"{}", "answers: missing"},
        {"{\"answers\": []}", "answers: not an object"},
        {"{\"answers\": {}}", "answers.r: missing"},
        {"{\"answers\": {\"r\": {\"type\": \"noul\", \"noul\": 1}}}",
         "answers.r.type: \"noul\", but the question is choice"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 1}}}}",
         "answers.r.probabilities.b: missing"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 0.5, \"b\": \"x\"}}}}",
         "answers.r.probabilities.b: not a number"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 1.5, \"b\": 0}}}}",
         "answers.r.probabilities.a: 1.5 is not a probability"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 0.5, \"b\": 0.4}}}}",
         "answers.r.probabilities: sum to 0.9, not 1"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 0.5, \"b\": 0.5}}, \"u\": {}}}",
         "answers.u.probabilities: missing"},
        {"{\"answers\": {\"r\": {\"probabilities\": {\"a\": 0.5, \"b\": 0.5}}, "
         "\"u\": {\"probabilities\": {\"0\": 1, \"1\": 0, \"2\": 0}}, \"n\": {\"noul\": -0.5}}}",
         "answers.n.noul: -0.5 is not a probability"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double p[7];
        char err[256] = "";
        cr_expect_eq(parse(cases[i][0], p, err, sizeof err), TANDEM_ERR_FORMAT, "%s", cases[i][0]);
        cr_expect(!strcmp(err, cases[i][1]), "%s: got \"%s\"", cases[i][0], err);
    }
}

Test(eval, bad_params_are_refused) {
    struct evalset set = {0};
    struct eval_run *run;
    struct eval_params p = eval_default_params();
    char err[256];
    p.endpoint = "http://127.0.0.1:1";
    p.repeat = 0;
    cr_expect_eq(eval_run_new(&set, &p, &run, err, sizeof err), TANDEM_ERR_INVAL);
    p.repeat = 1;
    p.concurrency = EVAL_MAX_CONCURRENCY + 1;
    cr_expect_eq(eval_run_new(&set, &p, &run, err, sizeof err), TANDEM_ERR_INVAL);
    p.concurrency = 1;
    p.endpoint = "ftp://x";
    cr_expect_eq(eval_run_new(&set, &p, &run, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect(strstr(err, "not an http:// or https:// URL"), "%s", err);
    eval_run_free(NULL);
}
