/* report.c: the evaluation report of `tandem eval --report` and its charts.
 *
 * Works only from the summary object (summary.c), so the report shows the
 * same numbers as `--json` and the table. Charts are drawn with svg.c into
 * their own documents and inlined; the page has inline CSS and nothing else,
 * so the file can be mailed or archived and still render. Every string that
 * comes from the dataset or the endpoint is escaped (report_put_esc).
 *
 * The module's other files: report_ladder.c renders the quantization
 * ladder's report, and report_page.c holds the page builder both use
 * (report_page.h). */
#include "eval/report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eval/report_page.h"
#include "eval/svg.h"

/* chart geometry, in pixels */
#define CHART_W 420.0
#define CHART_H 380.0
#define PAD_L 56.0
#define PAD_R 16.0
#define PAD_T 28.0
#define PAD_B 50.0
#define PLOT_W (CHART_W - PAD_L - PAD_R)
#define PLOT_H (CHART_H - PAD_T - PAD_B)

static double X(double v) { return PAD_L + v * PLOT_W; }
static double Y(double v) { return PAD_T + (1 - v) * PLOT_H; }

static tandem_err check_bins(const json_t *bins) {
    if (!json_is_array(bins) || json_array_size(bins) == 0)
        return TANDEM_ERR_FORMAT;
    return TANDEM_OK;
}

/* Axes, ticks every 0.2 on x and on y (y labelled by ylabel at the given scale). */
static void axes(struct svg *s, const char *xlabel, const char *ylabel, double ymax) {
    char t[64];
    svg_rect(s, PAD_L, PAD_T, PLOT_W, PLOT_H, "#fafafa", NULL);
    for (int i = 0; i <= 5; i++) {
        double v = i / 5.0;
        svg_line(s, X(v), PAD_T, X(v), PAD_T + PLOT_H, "#e0e0e0", 1, 0);
        svg_line(s, PAD_L, Y(v), PAD_L + PLOT_W, Y(v), "#e0e0e0", 1, 0);
        snprintf(t, sizeof t, "%.1f", v);
        svg_text(s, X(v), PAD_T + PLOT_H + 16, "middle", 11, 0, t);
        if (ymax == 1)
            snprintf(t, sizeof t, "%.1f", v);
        else
            snprintf(t, sizeof t, "%.0f", v * ymax);
        svg_text(s, PAD_L - 6, Y(v) + 4, "end", 11, 0, t);
    }
    svg_line(s, PAD_L, PAD_T + PLOT_H, PAD_L + PLOT_W, PAD_T + PLOT_H, "#333333", 1.5, 0);
    svg_line(s, PAD_L, PAD_T, PAD_L, PAD_T + PLOT_H, "#333333", 1.5, 0);
    svg_text(s, PAD_L + PLOT_W / 2, CHART_H - 12, "middle", 13, 0, xlabel);
    svg_text(s, 16, PAD_T + PLOT_H / 2, "middle", 13, -90, ylabel);
}

tandem_err report_reliability_svg(const json_t *bins, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (check_bins(bins))
        return TANDEM_ERR_FORMAT;
    struct svg *s;
    tandem_err e = svg_new(CHART_W, CHART_H, "Reliability diagram", &s);
    if (e)
        return e;
    axes(s, "top-answer confidence", "accuracy", 1);
    svg_text(s, PAD_L + PLOT_W / 2, 18, "middle", 14, 0,
             "Reliability diagram (answers per bin above the bars)");
    svg_line(s, X(0), Y(0), X(1), Y(1), "#888888", 1.2, 1);
    size_t i;
    const json_t *b;
    json_array_foreach(bins, i, b) {
        double lo = report_num(b, "lo"), hi = report_num(b, "hi"), n = report_num(b, "n");
        double acc = report_num(b, "accuracy"), conf = report_num(b, "confidence");
        if (!(n > 0) || !isfinite(acc) || !isfinite(conf))
            continue;
        char tip[160], label[32];
        snprintf(tip, sizeof tip, "confidence %.2f-%.2f: %.0f answers, accuracy %.3f, mean "
                                  "confidence %.3f", lo, hi, n, acc, conf);
        double x = X(lo) + 1, w = (hi - lo) * PLOT_W - 2;
        svg_rect(s, x, Y(acc), w, Y(0) - Y(acc), "#6fa8dc", tip);
        /* the gap to perfect calibration, drawn at the bin's mean confidence */
        svg_circle(s, X(conf), Y(acc), 3.5, "#cc0000", tip);
        snprintf(label, sizeof label, "%.0f", n);
        svg_text(s, x + w / 2, Y(acc) - 4, "middle", 10, 0, label);
    }
    return svg_finish(s, out, len);
}

tandem_err report_risk_coverage_svg(const json_t *selective, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const json_t *curve = json_object_get(selective, "curve");
    if (!json_is_array(curve))
        return TANDEM_ERR_FORMAT;
    struct svg *s;
    tandem_err e = svg_new(CHART_W, CHART_H, "Risk-coverage curve", &s);
    if (e)
        return e;
    axes(s, "coverage (answers kept)", "risk (error rate of those kept)", 1);
    double target = report_num(selective, "target_risk"),
           at = report_num(selective, "coverage_at_target_risk");
    char title[96];
    snprintf(title, sizeof title, "Risk-coverage curve (AURC %.3f)", report_num(selective, "aurc"));
    svg_text(s, PAD_L + PLOT_W / 2, 18, "middle", 14, 0, title);
    svg_line(s, X(0), Y(target), X(1), Y(target), "#cc0000", 1, 1);
    double px = 0, py = 0;
    size_t i;
    const json_t *pt;
    json_array_foreach(curve, i, pt) {
        double c = report_num(pt, "coverage"), r = report_num(pt, "risk");
        char tip[128];
        snprintf(tip, sizeof tip, "confidence >= %.4f: coverage %.3f, risk %.3f",
                 report_num(pt, "threshold"), c, r);
        if (i)
            svg_line(s, X(px), Y(py), X(c), Y(r), "#3d85c6", 2, 0);
        svg_circle(s, X(c), Y(r), c == at ? 5 : 2.5, c == at ? "#cc0000" : "#3d85c6", tip);
        px = c, py = r;
    }
    return svg_finish(s, out, len);
}

tandem_err report_histogram_svg(const json_t *bins, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (check_bins(bins))
        return TANDEM_ERR_FORMAT;
    double max = 0;
    size_t i;
    const json_t *b;
    json_array_foreach(bins, i, b) {
        double n = report_num(b, "n");
        max = n > max ? n : max;
    }
    double ymax = max > 0 ? ceil(max / 5) * 5 : 5;
    struct svg *s;
    tandem_err e = svg_new(CHART_W, CHART_H, "Confidence histogram", &s);
    if (e)
        return e;
    axes(s, "top-answer confidence", "answers", ymax);
    svg_text(s, PAD_L + PLOT_W / 2, 18, "middle", 14, 0, "Confidence histogram");
    json_array_foreach(bins, i, b) {
        double lo = report_num(b, "lo"), hi = report_num(b, "hi"), n = report_num(b, "n");
        if (!(n > 0))
            continue;
        char tip[96], label[32];
        snprintf(tip, sizeof tip, "confidence %.2f-%.2f: %.0f answers", lo, hi, n);
        double x = X(lo) + 1, w = (hi - lo) * PLOT_W - 2, y = Y(n / ymax);
        svg_rect(s, x, y, w, Y(0) - y, "#93c47d", tip);
        snprintf(label, sizeof label, "%.0f", n);
        svg_text(s, x + w / 2, y - 4, "middle", 10, 0, label);
    }
    return svg_finish(s, out, len);
}

/* --- the page ----------------------------------------------------------------- */

/* A table cell with a number at 3 decimals, or "-" when absent. */
static void num_cell(struct report_page *p, const json_t *o, const char *key) {
    double v = report_num(o, key);
    if (isfinite(v))
        report_putf(p, "<td>%.3f</td>", v);
    else
        report_put(p, "<td>-</td>");
}

/* Any JSON scalar as cell text (strings escaped). */
static void value_cell(struct report_page *p, const json_t *v) {
    report_put(p, "<td>");
    if (json_is_string(v))
        report_put_esc(p, json_string_value(v));
    else if (json_is_integer(v))
        report_putf(p, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        report_putf(p, "%.3f", json_real_value(v));
    else if (json_is_true(v))
        report_put(p, "true");
    else if (json_is_false(v))
        report_put(p, "false");
    else
        report_put(p, "-");
    report_put(p, "</td>");
}
static const char *const groups[] = {"overall", "choice", "score", "noul"};

/* "[lo, hi]" of interval name, or "" without intervals. */
static void interval(struct report_page *p, const json_t *s, const char *name) {
    const json_t *iv = json_object_get(json_object_get(s, "intervals"), name);
    if (json_array_size(iv) == 2)
        report_putf(p, " (95%% interval %.3f to %.3f)", json_number_value(json_array_get(iv, 0)),
                    json_number_value(json_array_get(iv, 1)));
}

static void selective_section(struct report_page *p, const json_t *s) {
    const json_t *sel = json_object_get(s, "selective");
    const json_t *overall = json_object_get(json_object_get(s, "metrics"), "overall");
    if (!json_is_object(sel))
        return;
    report_putf(p,
                "\n<h2>Selective prediction</h2>\n<p>Answering only when the top probability is "
                "at least a threshold: AURC %.4f; at risk &le; %.3f the coverage is %.3f",
                report_num(sel, "aurc"), report_num(sel, "target_risk"),
                report_num(sel, "coverage_at_target_risk"));
    interval(p, s, "coverage_at_target_risk");
    const json_t *th = json_object_get(sel, "threshold");
    if (json_is_number(th))
        report_putf(p, ", with threshold %.4f", json_number_value(th));
    report_putf(p, ". Accuracy %.3f", report_num(overall, "accuracy"));
    interval(p, s, "accuracy");
    report_putf(p, ", ECE %.3f", report_num(overall, "ece"));
    interval(p, s, "ece");
    report_put(p, ".</p>\n");
    report_put_svg(p, report_risk_coverage_svg, sel, NULL);
}

/* --compare: the metrics before and after per question type, and both
 * reliability diagrams. */
static void compare_section(struct report_page *p, const json_t *s, const json_t *cmp) {
    static const char *const keys[] = {"accuracy", "brier", "nll", "ece"};
    report_put(p, "\n<h2>Before and after</h2>\n<p>Before: ");
    report_put_esc(p, json_string_value(json_object_get(cmp, "file")));
    report_put(p, " (model ");
    report_put_esc(p, json_string_value(json_object_get(cmp, "model")));
    report_put(p, ").</p>\n<table class=\"compare\"><tr><th>type</th><th>n</th>");
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        report_putf(p, "<th>%s before</th><th>%s after</th>", keys[k], keys[k]);
    report_put(p, "</tr>");
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        const json_t *a = json_object_get(json_object_get(cmp, "metrics"), groups[g]);
        const json_t *b = json_object_get(json_object_get(s, "metrics"), groups[g]);
        if (!json_integer_value(json_object_get(a, "n")) ||
            !json_integer_value(json_object_get(b, "n")))
            continue;
        report_putf(p, "<tr><td>%s</td><td>%lld</td>", groups[g],
                    (long long)json_integer_value(json_object_get(b, "n")));
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            num_cell(p, a, keys[k]);
            num_cell(p, b, keys[k]);
        }
        report_put(p, "</tr>");
    }
    report_put(p, "</table>\n");
    report_put_svg(p, report_reliability_svg, json_object_get(cmp, "reliability"), "before");
    report_put_svg(p, report_reliability_svg, json_object_get(s, "reliability"), "after");
}

/* --suggest-thresholds: one row per threshold. */
static void thresholds_section(struct report_page *p, const json_t *t) {
    report_putf(p,
                "\n<h2>Thresholds</h2>\n<p>For a precision of %.4g, the largest cut of each "
                "question's answers (each needs at least %lld answers; 95%% interval of the "
                "threshold from %lld resamples).</p>\n<table class=\"thresholds\"><tr>"
                "<th>question</th><th>threshold</th><th>answers</th><th>accepted</th>"
                "<th>precision</th><th>coverage</th><th>interval</th></tr>",
                report_num(t, "target_precision"),
                (long long)json_integer_value(json_object_get(t, "min_answers")),
                (long long)json_integer_value(json_object_get(t, "resamples")));
    size_t i;
    const json_t *g;
    json_array_foreach(json_object_get(t, "questions"), i, g) {
        const json_t *q = json_object_get(g, "question"), *iv = json_object_get(g, "interval");
        const json_t *value = json_object_get(g, "value");
        report_put(p, "<tr>");
        value_cell(p, json_is_string(q) ? q : json_object_get(g, "key"));
        value_cell(p, json_is_string(value) ? value : json_object_get(g, "status"));
        value_cell(p, json_object_get(g, "answers"));
        value_cell(p, json_object_get(g, "accepted"));
        num_cell(p, g, "precision");
        num_cell(p, g, "coverage");
        report_put(p, "<td>");
        for (size_t k = 0; k < 2 && json_is_array(iv); k++) {
            const json_t *x = json_array_get(iv, k);
            json_is_number(x) ? report_putf(p, "%.4f", json_number_value(x))
                              : report_put(p, "none");
            report_put(p, k ? "" : " to ");
        }
        report_put(p, "</td></tr>");
    }
    report_put(p, "</table>\n");
}

/* The option-order test (--permute K): flips, |dp|, and the chosen positions. */
static void permutation_section(struct report_page *p, const json_t *pm) {
    report_putf(p,
                "\n<h2>Option order</h2>\n<p>Every choice question asked again in %lld seeded "
                "permutations of its options (seed %lld): %lld of %lld orders answered. Flip "
                "rate %.3f (the chosen option changed with the order), mean |&#916;p| %.4f; "
                "chi-square %.2f, df %lld, p-value %.3g against a uniform choice of "
                "position.</p>\n",
                (long long)json_integer_value(json_object_get(pm, "k")),
                (long long)json_integer_value(json_object_get(pm, "seed")),
                (long long)json_integer_value(json_object_get(pm, "orders_asked")),
                (long long)(json_integer_value(json_object_get(pm, "orders_asked")) +
                            json_integer_value(json_object_get(pm, "orders_failed"))),
                report_num(pm, "flip_rate"), report_num(pm, "mean_abs_dp"),
                report_num(pm, "chi_square"),
                (long long)json_integer_value(json_object_get(pm, "df")),
                report_num(pm, "p_value"));
    report_put(p,
               "<table class=\"permutation\"><tr><th>position</th><th>chosen</th><th>expected</th>"
               "<th>rate</th><th>uniform rate</th></tr>");
    size_t i;
    const json_t *row;
    json_array_foreach(json_object_get(pm, "positions"), i, row) {
        report_put(p, "<tr>");
        value_cell(p, json_object_get(row, "label"));
        value_cell(p, json_object_get(row, "chosen"));
        num_cell(p, row, "expected");
        num_cell(p, row, "rate");
        num_cell(p, row, "uniform_rate");
        report_put(p, "</tr>");
    }
    report_put(p, "</table>\n");
}

tandem_err report_eval_html(const json_t *s, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const json_t *bins = json_object_get(s, "reliability");
    if (check_bins(bins))
        return TANDEM_ERR_FORMAT;
    struct report_page p;
    report_page_init(&p);
    report_put(&p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>tandem eval: ");
    report_put_esc(&p, json_string_value(json_object_get(s, "data")));
    report_put(&p, "</title><style>" REPORT_PAGE_CSS "</style></head><body>\n<h1>tandem eval</h1>\n"
                   "<table class=\"facts\">");
    static const char *const facts[][2] = {
        {"data", "dataset"}, {"endpoint", "endpoint"}, {"model", "model"},
        {"cases", "cases"},  {"questions", "questions"}, {"scored_questions", "scored"},
        {"repeat", "repeat"}, {"seconds", "seconds"},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        report_putf(&p, "<tr><th>%s</th>", facts[i][1]);
        value_cell(&p, json_object_get(s, facts[i][0]));
        report_put(&p, "</tr>");
    }
    report_put(&p, "</table>\n<h2>Metrics</h2>\n<table><tr><th>type</th><th>n</th><th>accuracy</th>"
                   "<th>Brier</th><th>NLL</th><th>ECE</th><th>low-confidence rate</th>"
                   "<th>mean confidence</th>"
                   "<th>MAE</th></tr>");
    const json_t *m = json_object_get(s, "metrics");
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        const json_t *row = json_object_get(m, groups[g]);
        if (!row)
            continue;
        report_putf(&p, "<tr><td>%s</td><td>%lld</td>", groups[g],
                    (long long)json_integer_value(json_object_get(row, "n")));
        num_cell(&p, row, "accuracy");
        num_cell(&p, row, "brier");
        num_cell(&p, row, "nll");
        num_cell(&p, row, "ece");
        num_cell(&p, row, "low_confidence_rate");
        num_cell(&p, row, "mean_confidence");
        num_cell(&p, row, "mae");
        report_put(&p, "</tr>");
    }
    report_putf(&p,
                "</table><p>Low confidence: top-answer probability below %.2f. Confidence is the "
                "probability of the top answer; 15 equal-width bins.</p>\n",
                report_num(s, "low_confidence_threshold"));
    report_put(&p, "<h2>Calibration</h2>\n");
    report_put_svg(&p, report_reliability_svg, bins, NULL);
    report_put_svg(&p, report_histogram_svg, bins, NULL);
    if (json_is_object(json_object_get(s, "compare")))
        compare_section(&p, s, json_object_get(s, "compare"));
    selective_section(&p, s);
    if (json_is_object(json_object_get(s, "thresholds")))
        thresholds_section(&p, json_object_get(s, "thresholds"));
    if (json_is_object(json_object_get(s, "permutation")))
        permutation_section(&p, json_object_get(s, "permutation"));

    const json_t *st = json_object_get(s, "stability");
    const char *verdict = json_string_value(json_object_get(st, "verdict"));
    report_put(&p, "\n<h2>Stability</h2>\n<p>Verdict: <b class=\"");
    report_put(&p, verdict && !strcmp(verdict, "deterministic") ? "ok" : "bad");
    report_put(&p, "\">");
    report_put_esc(&p, verdict);
    if (json_integer_value(json_object_get(st, "repeat")) < 2)
        report_put(&p, "</b> (each case was sent once; run with --repeat N).</p>");
    else
        report_putf(&p,
                    "</b> over %lld repeats; %lld of %lld questions identical; max |&#916;p| %.6g; "
                    "%lld questions with top-answer flips.</p>",
                    (long long)json_integer_value(json_object_get(st, "repeat")),
                    (long long)json_integer_value(json_object_get(st, "questions_identical")),
                    (long long)json_integer_value(json_object_get(st, "questions_measured")),
                    report_num(st, "max_dp"),
                    (long long)json_integer_value(json_object_get(st, "questions_with_flips")));
    size_t i;
    const json_t *v;
    const json_t *unstable = json_object_get(st, "unstable");
    if (json_array_size(unstable)) {
        report_put(&p,
                   "<table><tr><th>case</th><th>question</th><th>max |&#916;p|</th><th>flips</th>"
                   "</tr>");
        json_array_foreach(unstable, i, v) {
            report_put(&p, "<tr>");
            value_cell(&p, json_object_get(v, "case"));
            value_cell(&p, json_object_get(v, "question"));
            num_cell(&p, v, "max_dp");
            value_cell(&p, json_object_get(v, "flips"));
            report_put(&p, "</tr>");
        }
        report_put(&p, "</table>");
    }
    const json_t *errors = json_object_get(s, "errors");
    report_putf(&p, "\n<h2>Errors</h2>\n<p>%zu failed requests.</p>", json_array_size(errors));
    if (json_array_size(errors)) {
        report_put(&p,
                   "<table><tr><th>case</th><th>line</th><th>repeat</th><th>HTTP</th><th>error</th>"
                   "</tr>");
        json_array_foreach(errors, i, v) {
            report_put(&p, "<tr>");
            value_cell(&p, json_object_get(v, "case"));
            value_cell(&p, json_object_get(v, "line"));
            value_cell(&p, json_object_get(v, "repeat"));
            value_cell(&p, json_object_get(v, "http_status"));
            value_cell(&p, json_object_get(v, "error"));
            report_put(&p, "</tr>");
        }
        report_put(&p, "</table>");
    }
    report_put(&p, "\n<h2>Questions</h2>\n<table><tr><th>case</th><th>question</th><th>type</th>"
                   "<th>gold</th><th>answer</th><th>p</th><th>correct</th><th>Brier</th></tr>");
    json_array_foreach(json_object_get(s, "results"), i, v) {
        report_put(&p, "<tr>");
        value_cell(&p, json_object_get(v, "case"));
        value_cell(&p, json_object_get(v, "question"));
        value_cell(&p, json_object_get(v, "type"));
        value_cell(&p, json_object_get(v, "gold"));
        value_cell(&p, json_object_get(v, "answer"));
        num_cell(&p, v, "p");
        value_cell(&p, json_object_get(v, "correct"));
        num_cell(&p, v, "brier");
        report_put(&p, "</tr>");
    }
    report_put(&p, "</table>\n<p>Generated by tandem eval; formulas in docs/eval.md.</p>\n"
                   "</body></html>\n");
    return report_page_finish(&p, out, len);
}

