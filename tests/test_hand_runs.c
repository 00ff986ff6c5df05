/* test_hand_runs.c: evaluation sets and runs built by hand (see the header). */
#include "test_hand_runs.h"

#include <criterion/criterion.h>
#include <string.h>

#include "base/mem.h"

const char *const hand_lines[3] = {
    "{\"id\": \"one\", \"state\": \"s1\", \"questions\": {\"r\": {\"type\": \"choice\","
    " \"instructions\": \"x\", \"criteria\": {\"a\": null, \"b\": null}}},"
    " \"gold\": {\"r\": \"a\"}}",
    "{\"id\": \"two\", \"state\": \"s2\", \"questions\": {\"n\": {\"type\": \"noul\","
    " \"instructions\": \"x\"}}, \"gold\": {\"n\": true}}",
    "{\"id\": \"three\", \"state\": \"s3\", \"questions\": {\"s\": {\"type\": \"choice\","
    " \"instructions\": \"x\", \"criteria\": {\"c\": null, \"d\": null}}, \"u\": {\"type\":"
    " \"score\", \"instructions\": \"x\", \"criteria\": [\"lo\", \"mid\", \"hi\"]}},"
    " \"gold\": {\"s\": \"c\"}}",
};

struct evalset *hand_set(const char *const *lines, size_t n) {
    struct evalset *set = mem_calloc(1, sizeof *set);
    cr_assert(set);
    set->path = mem_strdup("hand.jsonl");
    set->n_cases = n;
    set->cases = mem_calloc(n, sizeof *set->cases);
    for (size_t i = 0; i < n; i++) {
        char err[512];
        struct evalset_case *c = &set->cases[i];
        cr_assert_eq(evalset_parse_line("hand.jsonl", i + 1, lines[i], strlen(lines[i]), c, err,
                                        sizeof err),
                     TANDEM_OK, "%s", err);
        set->n_questions += c->n_questions;
        for (size_t q = 0; q < c->n_questions; q++)
            set->n_gold += c->q[q].has_gold;
    }
    return set;
}

struct eval_run *hand_run(const struct evalset *set, unsigned repeat, const double *const *p) {
    struct eval_run *run = mem_calloc(1, sizeof *run);
    cr_assert(run);
    run->set = set;
    run->repeat = repeat;
    run->seconds = 1.5;
    snprintf(run->url, sizeof run->url, "http://hand/v1/systemone");
    run->answers = mem_calloc((size_t)repeat * set->n_cases, sizeof *run->answers);
    for (size_t i = 0; i < (size_t)repeat * set->n_cases; i++) {
        struct eval_answer *a = &run->answers[i];
        size_t w = eval_case_width(&set->cases[i % set->n_cases]);
        if (!p[i]) {
            a->status = TANDEM_ERR_HTTP;
            a->http_status = 503;
            a->error = mem_strdup("HTTP 503");
            run->n_errors++;
            continue;
        }
        a->p = mem_alloc_array(w, sizeof *a->p);
        memcpy(a->p, p[i], w * sizeof *a->p);
    }
    return run;
}
