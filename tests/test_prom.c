/* Unit tests for prom: the exact exposition text for each metric kind, label
 * and help escaping, number formatting, the checks on names, label counts and
 * counter increments, and every allocation failure (registry left intact). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "serve/prom.h"

static void disarm(void) {
    mem_fail_after(-1);
}

/* Renders p and compares with want; frees nothing. */
static void expect_render(const struct prom *p, const char *want) {
    struct mem_buf b;
    mem_buf_init(&b, 1 << 20);
    cr_assert_eq(prom_render(p, &b), TANDEM_OK);
    cr_expect_str_eq(b.data ? b.data : "", want);
    mem_buf_deinit(&b);
}

Test(prom, counter_with_labels_renders_in_creation_order) {
    struct prom *p = prom_new();
    cr_assert_not_null(p);
    const char *labels[] = {"model", "route", "status", NULL};
    struct prom_metric *m = prom_register(p, PROM_COUNTER, "tandem_requests_total",
                                          "Requests by model, route and status.", labels, NULL, 0);
    cr_assert_not_null(m);
    const char *a[] = {"jev", "/v1/systemone", "200"};
    const char *b[] = {"smol", "/v1/chat/completions", "503"};
    cr_expect_eq(prom_add(m, a, 1), TANDEM_OK);
    cr_expect_eq(prom_add(m, b, 1), TANDEM_OK);
    cr_expect_eq(prom_add(m, a, 2), TANDEM_OK);
    expect_render(p, "# HELP tandem_requests_total Requests by model, route and status.\n"
                     "# TYPE tandem_requests_total counter\n"
                     "tandem_requests_total{model=\"jev\",route=\"/v1/systemone\",status=\"200\"} 3\n"
                     "tandem_requests_total{model=\"smol\",route=\"/v1/chat/completions\","
                     "status=\"503\"} 1\n");
    prom_free(p);
}

Test(prom, gauges_without_labels_and_number_format) {
    struct prom *p = prom_new();
    struct prom_metric *g = prom_register(p, PROM_GAUGE, "g", "a gauge", NULL, NULL, 0);
    struct prom_metric *h = prom_register(p, PROM_GAUGE, "ns:h", "", (const char *[]){"k", NULL},
                                          NULL, 0);
    cr_assert(g && h);
    cr_expect_eq(prom_set(g, NULL, 12345678901.0), TANDEM_OK);
    const char *vals[][1] = {{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}, {"h"}};
    double nums[] = {0.1, -2, 1e300, -0.0, NAN, INFINITY, -INFINITY, 9007199254740993.0};
    for (size_t i = 0; i < 8; i++)
        cr_expect_eq(prom_set(h, vals[i], nums[i]), TANDEM_OK);
    cr_expect_eq(prom_add(h, vals[1], -0.5), TANDEM_OK, "gauges may go down");
    expect_render(p, "# HELP g a gauge\n"
                     "# TYPE g gauge\n"
                     "g 12345678901\n"
                     "# HELP ns:h \n"
                     "# TYPE ns:h gauge\n"
                     "ns:h{k=\"a\"} 0.1\n"
                     "ns:h{k=\"b\"} -2.5\n"
                     "ns:h{k=\"c\"} 1e+300\n"
                     "ns:h{k=\"d\"} 0\n"
                     "ns:h{k=\"e\"} NaN\n"
                     "ns:h{k=\"f\"} +Inf\n"
                     "ns:h{k=\"g\"} -Inf\n"
                     "ns:h{k=\"h\"} 9007199254740992\n");
    prom_free(p);
}

Test(prom, histogram_buckets_are_cumulative_with_sum_and_count) {
    struct prom *p = prom_new();
    const double bounds[] = {0.005, 0.1, 1, 2.5};
    struct prom_metric *m =
        prom_register(p, PROM_HISTOGRAM, "lat_seconds", "Latency.",
                      (const char *[]){"model", NULL}, bounds, 4);
    struct prom_metric *u = prom_register(p, PROM_HISTOGRAM, "u", "no labels", NULL, NULL, 0);
    cr_assert(m && u);
    const char *v[] = {"jev"};
    double obs[] = {0.005, 0.05, 0.5, 3, 0.001};
    for (size_t i = 0; i < 5; i++)
        cr_expect_eq(prom_observe(m, v, obs[i]), TANDEM_OK);
    cr_expect_eq(prom_observe(u, NULL, 7), TANDEM_OK);
    expect_render(p, "# HELP lat_seconds Latency.\n"
                     "# TYPE lat_seconds histogram\n"
                     "lat_seconds_bucket{model=\"jev\",le=\"0.005\"} 2\n"
                     "lat_seconds_bucket{model=\"jev\",le=\"0.1\"} 3\n"
                     "lat_seconds_bucket{model=\"jev\",le=\"1\"} 4\n"
                     "lat_seconds_bucket{model=\"jev\",le=\"2.5\"} 4\n"
                     "lat_seconds_bucket{model=\"jev\",le=\"+Inf\"} 5\n"
                     "lat_seconds_sum{model=\"jev\"} 3.556\n"
                     "lat_seconds_count{model=\"jev\"} 5\n"
                     "# HELP u no labels\n"
                     "# TYPE u histogram\n"
                     "u_bucket{le=\"+Inf\"} 1\n"
                     "u_sum 7\n"
                     "u_count 1\n");
    prom_free(p);
}

Test(prom, metric_without_series_prints_help_and_type) {
    struct prom *p = prom_new();
    cr_assert_not_null(prom_register(p, PROM_COUNTER, "c_total", "none yet",
                                     (const char *[]){"a", NULL}, NULL, 0));
    expect_render(p, "# HELP c_total none yet\n# TYPE c_total counter\n");
    prom_free(p);
    expect_render(NULL, "");
}

Test(prom, label_values_and_help_are_escaped) {
    struct prom *p = prom_new();
    struct prom_metric *m = prom_register(p, PROM_COUNTER, "e_total", "back\\slash \"q\"\nnext",
                                          (const char *[]){"v", NULL}, NULL, 0);
    cr_assert_not_null(m);
    cr_expect_eq(prom_add(m, (const char *[]){"a\\b\"c\nd"}, 1), TANDEM_OK);
    cr_expect_eq(prom_add(m, (const char *[]){""}, 1), TANDEM_OK);
    cr_expect_eq(prom_add(m, (const char *[]){"\xc3\xa9t\xc3\xa9 {x=1}"}, 1), TANDEM_OK);
    expect_render(p, "# HELP e_total back\\\\slash \"q\"\\nnext\n"
                     "# TYPE e_total counter\n"
                     "e_total{v=\"a\\\\b\\\"c\\nd\"} 1\n"
                     "e_total{v=\"\"} 1\n"
                     "e_total{v=\"\xc3\xa9t\xc3\xa9 {x=1}\"} 1\n");
    prom_free(p);
}

Test(prom, bad_names_labels_and_bounds_are_refused) {
    struct prom *p = prom_new();
    const char *ok[] = {"a", NULL};
    cr_expect_null(prom_register(p, PROM_COUNTER, "", "", NULL, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, NULL, "", NULL, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "9lives", "", NULL, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "has-dash", "", NULL, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "sp ace", "", NULL, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "x", "", (const char *[]){"a:b", NULL}, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "x", "", (const char *[]){"__r", NULL}, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "x", "", (const char *[]){"1a", NULL}, NULL, 0));
    cr_expect_null(
        prom_register(p, PROM_COUNTER, "x", "", (const char *[]){"a", "a", NULL}, NULL, 0));
    cr_expect_null(prom_register(p, PROM_COUNTER, "x", "",
                                 (const char *[]){"a", "b", "c", "d", "e", NULL}, NULL, 0));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", (const char *[]){"le", NULL},
                                 (const double[]){1}, 1));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", NULL, (const double[]){2, 1}, 2));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", NULL, (const double[]){1, 1}, 2));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", NULL, (const double[]){NAN}, 1));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", NULL, (const double[]){INFINITY}, 1));
    cr_expect_null(prom_register(p, PROM_HISTOGRAM, "x", "", NULL, NULL, 3));
    cr_expect_null(prom_register(p, (enum prom_kind)7, "x", "", NULL, NULL, 0));
    cr_expect_null(prom_register(NULL, PROM_COUNTER, "x", "", NULL, NULL, 0));
    cr_expect_not_null(prom_register(p, PROM_COUNTER, "x", "", ok, NULL, 0));
    cr_expect_null(prom_register(p, PROM_GAUGE, "x", "", NULL, NULL, 0), "names must not repeat");
    cr_expect_not_null(prom_register(p, PROM_GAUGE, "_:y:", NULL,
                                     (const char *[]){"a", "b", "c", "d", NULL}, NULL, 0));
    expect_render(p, "# HELP x \n# TYPE x counter\n# HELP _:y: \n# TYPE _:y: gauge\n");
    prom_free(p);
}

Test(prom, wrong_value_counts_kinds_and_increments_are_refused) {
    struct prom *p = prom_new();
    struct prom_metric *c = prom_register(p, PROM_COUNTER, "c", "", (const char *[]){"a", "b", NULL},
                                          NULL, 0);
    struct prom_metric *n = prom_register(p, PROM_COUNTER, "n", "", NULL, NULL, 0);
    struct prom_metric *g = prom_register(p, PROM_GAUGE, "g", "", NULL, NULL, 0);
    struct prom_metric *h = prom_register(p, PROM_HISTOGRAM, "h", "", NULL, NULL, 0);
    cr_assert(c && n && g && h);
    cr_expect_eq(prom_add(c, NULL, 1), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(c, (const char *[]){"x", NULL}, 1), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(n, (const char *[]){"x", NULL}, 1), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(n, (const char *[]){NULL}, 1), TANDEM_OK, "an empty list is none");
    cr_expect_eq(prom_add(c, (const char *[]){"x", "y"}, -1), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(c, (const char *[]){"x", "y"}, NAN), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(c, (const char *[]){"x", "y"}, 0), TANDEM_OK);
    cr_expect_eq(prom_set(c, (const char *[]){"x", "y"}, 1), TANDEM_ERR_TYPE);
    cr_expect_eq(prom_observe(c, (const char *[]){"x", "y"}, 1), TANDEM_ERR_TYPE);
    cr_expect_eq(prom_observe(g, NULL, 1), TANDEM_ERR_TYPE);
    cr_expect_eq(prom_add(h, NULL, 1), TANDEM_ERR_TYPE);
    cr_expect_eq(prom_set(h, NULL, 1), TANDEM_ERR_TYPE);
    cr_expect_eq(prom_add(NULL, NULL, 1), TANDEM_ERR_INVAL);
    cr_expect_eq(prom_add(g, NULL, -3), TANDEM_OK);
    expect_render(p, "# HELP c \n# TYPE c counter\nc{a=\"x\",b=\"y\"} 0\n"
                     "# HELP n \n# TYPE n counter\nn 1\n"
                     "# HELP g \n# TYPE g gauge\ng -3\n"
                     "# HELP h \n# TYPE h histogram\n");
    prom_free(p);
}

Test(prom, series_per_metric_are_capped) {
    struct prom *p = prom_new();
    struct prom_metric *m = prom_register(p, PROM_COUNTER, "c", "", (const char *[]){"id", NULL},
                                          NULL, 0);
    char id[16];
    tandem_err e = TANDEM_OK;
    int n = 0;
    for (; n < 10000 && e == TANDEM_OK; n++) {
        snprintf(id, sizeof id, "%d", n);
        e = prom_add(m, (const char *[]){id}, 1);
    }
    cr_expect_eq(e, TANDEM_ERR_TOOBIG);
    cr_expect_eq(n - 1, 4096);
    cr_expect_eq(prom_add(m, (const char *[]){"7"}, 1), TANDEM_OK, "existing series still count");
    prom_free(p);
}

Test(prom, render_failure_leaves_the_buffer_as_it_was) {
    struct prom *p = prom_new();
    struct prom_metric *m = prom_register(p, PROM_GAUGE, "g", "help", NULL, NULL, 0);
    prom_set(m, NULL, 1);
    struct mem_buf b;
    mem_buf_init(&b, 20);
    cr_assert_eq(mem_buf_append(&b, "keep", 4), TANDEM_OK);
    cr_expect_eq(prom_render(p, &b), TANDEM_ERR_TOOBIG);
    cr_expect_eq(b.len, 4);
    cr_expect_str_eq(b.data, "keep");
    mem_buf_deinit(&b);
    prom_free(p);
}

/* One full session: register, fill, render. Returns the first error. */
static tandem_err session(char **text) {
    *text = NULL;
    struct prom *p = prom_new();
    if (!p)
        return TANDEM_ERR_NOMEM;
    const char *l2[] = {"model", "route", NULL};
    struct prom_metric *c = prom_register(p, PROM_COUNTER, "r_total", "req", l2, NULL, 0);
    struct prom_metric *h = prom_register(p, PROM_HISTOGRAM, "w_seconds", "wait", l2,
                                          (const double[]){0.1, 1}, 2);
    struct prom_metric *g = prom_register(p, PROM_GAUGE, "b_bytes", "res", NULL, NULL, 0);
    tandem_err e = c && h && g ? TANDEM_OK : TANDEM_ERR_NOMEM;
    for (int i = 0; e == TANDEM_OK && i < 40; i++) {
        char model[16];
        snprintf(model, sizeof model, "m%d", i % 20);
        const char *v[] = {model, i % 2 ? "/a" : "/b"};
        e = prom_add(c, v, 1);
        if (e == TANDEM_OK)
            e = prom_observe(h, v, i / 10.0);
    }
    if (e == TANDEM_OK)
        e = prom_set(g, NULL, 42);
    struct mem_buf b;
    mem_buf_init(&b, 1 << 20);
    if (e == TANDEM_OK)
        e = prom_render(p, &b);
    if (e == TANDEM_OK)
        *text = mem_strdup(b.data);
    if (e == TANDEM_OK && !*text)
        e = TANDEM_ERR_NOMEM;
    mem_buf_deinit(&b);
    prom_free(p);
    return e;
}

Test(prom, every_allocation_failure_is_reported, .fini = disarm) {
    char *want;
    cr_assert_eq(session(&want), TANDEM_OK);
    int failures = 0;
    for (long n = 0; n < 5000; n++) {
        struct mem_stats a, b;
        char *text;
        mem_stats_get(&a);
        mem_fail_after(n);
        tandem_err e = session(&text);
        disarm();
        if (e == TANDEM_OK) {
            cr_expect_str_eq(text, want);
            mem_free(text);
            mem_stats_get(&b);
            cr_expect_eq(b.allocs - a.allocs, b.frees - a.frees);
            break;
        }
        mem_stats_get(&b);
        cr_expect_eq(e, TANDEM_ERR_NOMEM, "allocation %ld", n);
        cr_expect_eq(b.allocs - a.allocs, b.frees - a.frees, "allocation %ld leaks", n);
        failures++;
    }
    cr_expect_gt(failures, 100);
    mem_free(want);
}

/* A failure in the middle of an update leaves earlier series untouched. */
Test(prom, failed_series_creation_leaves_the_metric_intact, .fini = disarm) {
    struct prom *p = prom_new();
    struct prom_metric *m = prom_register(p, PROM_HISTOGRAM, "h", "", (const char *[]){"a", NULL},
                                          (const double[]){1}, 1);
    cr_assert_eq(prom_observe(m, (const char *[]){"x"}, 0.5), TANDEM_OK);
    for (long n = 0; n < 3; n++) {
        mem_fail_after(n);
        cr_expect_eq(prom_observe(m, (const char *[]){"y"}, 0.5), TANDEM_ERR_NOMEM);
        disarm();
    }
    cr_expect_eq(prom_observe(m, (const char *[]){"x"}, 2), TANDEM_OK, "no allocation needed");
    expect_render(p, "# HELP h \n# TYPE h histogram\n"
                     "h_bucket{a=\"x\",le=\"1\"} 1\nh_bucket{a=\"x\",le=\"+Inf\"} 2\n"
                     "h_sum{a=\"x\"} 2.5\nh_count{a=\"x\"} 2\n");
    prom_free(p);
}
