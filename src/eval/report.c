/* report.c: HTML evaluation reports with inline SVG charts.
 *
 * Works only from the summary object (summary.c), so the report shows the
 * same numbers as `--json` and the table. Charts are drawn with svg.c into
 * their own documents and inlined; the page has inline CSS and nothing else,
 * so the file can be mailed or archived and still render. Every string that
 * comes from the dataset or the endpoint is escaped (svg_escape). */
#include "eval/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
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

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

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
        double lo = num(b, "lo"), hi = num(b, "hi"), n = num(b, "n");
        double acc = num(b, "accuracy"), conf = num(b, "confidence");
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
    double target = num(selective, "target_risk"), at = num(selective, "coverage_at_target_risk");
    char title[96];
    snprintf(title, sizeof title, "Risk-coverage curve (AURC %.3f)", num(selective, "aurc"));
    svg_text(s, PAD_L + PLOT_W / 2, 18, "middle", 14, 0, title);
    svg_line(s, X(0), Y(target), X(1), Y(target), "#cc0000", 1, 1);
    double px = 0, py = 0;
    size_t i;
    const json_t *pt;
    json_array_foreach(curve, i, pt) {
        double c = num(pt, "coverage"), r = num(pt, "risk");
        char tip[128];
        snprintf(tip, sizeof tip, "confidence >= %.4f: coverage %.3f, risk %.3f",
                 num(pt, "threshold"), c, r);
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
        double n = num(b, "n");
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
        double lo = num(b, "lo"), hi = num(b, "hi"), n = num(b, "n");
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

struct page {
    struct mem_buf buf;
    tandem_err err;
};

/* The style sheet of every page. */
#define PAGE_CSS                                                                            \
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}"                  \
    "table{border-collapse:collapse;margin:8px 0 20px}"                                     \
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"                         \
    "th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}"                  \
    "figure{display:inline-block;margin:0 16px 16px 0}.facts td{text-align:left}"           \
    ".bad{color:#b00}.ok{color:#070}"

static void put(struct page *p, const char *s) {
    if (!p->err)
        p->err = mem_buf_append(&p->buf, s, strlen(s));
}

static void put_esc(struct page *p, const char *s) {
    if (!p->err)
        p->err = svg_escape(&p->buf, s ? s : "", s ? strlen(s) : 0);
}

__attribute__((format(printf, 2, 3))) static void putf(struct page *p, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        if (!p->err)
            p->err = TANDEM_ERR_TOOBIG;
        return;
    }
    put(p, tmp);
}

/* A table cell with a number at 3 decimals, or "-" when absent. */
static void num_cell(struct page *p, const json_t *o, const char *key) {
    double v = num(o, key);
    if (isfinite(v))
        putf(p, "<td>%.3f</td>", v);
    else
        put(p, "<td>-</td>");
}

/* Any JSON scalar as cell text (strings escaped). */
static void value_cell(struct page *p, const json_t *v) {
    put(p, "<td>");
    if (json_is_string(v))
        put_esc(p, json_string_value(v));
    else if (json_is_integer(v))
        putf(p, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        putf(p, "%.3f", json_real_value(v));
    else if (json_is_true(v))
        put(p, "true");
    else if (json_is_false(v))
        put(p, "false");
    else
        put(p, "-");
    put(p, "</td>");
}

/* A figure with the drawing of data, captioned when caption is not NULL. */
static void inline_svg(struct page *p, tandem_err (*draw)(const json_t *, char **, size_t *),
                       const json_t *data, const char *caption) {
    char *svg;
    size_t n;
    tandem_err e = draw(data, &svg, &n);
    if (e) {
        if (!p->err)
            p->err = e;
        return;
    }
    put(p, "<figure>");
    put(p, svg);
    if (caption) {
        put(p, "<figcaption>");
        put_esc(p, caption);
        put(p, "</figcaption>");
    }
    put(p, "</figure>");
    mem_free(svg);
}

static const char *const groups[] = {"overall", "choice", "score", "noul"};

/* "[lo, hi]" of interval name, or "" without intervals. */
static void interval(struct page *p, const json_t *s, const char *name) {
    const json_t *iv = json_object_get(json_object_get(s, "intervals"), name);
    if (json_array_size(iv) == 2)
        putf(p, " (95%% interval %.3f to %.3f)", json_number_value(json_array_get(iv, 0)),
             json_number_value(json_array_get(iv, 1)));
}

static void selective_section(struct page *p, const json_t *s) {
    const json_t *sel = json_object_get(s, "selective");
    const json_t *overall = json_object_get(json_object_get(s, "metrics"), "overall");
    if (!json_is_object(sel))
        return;
    putf(p, "\n<h2>Selective prediction</h2>\n<p>Answering only when the top probability is "
            "at least a threshold: AURC %.4f; at risk &le; %.3f the coverage is %.3f",
         num(sel, "aurc"), num(sel, "target_risk"), num(sel, "coverage_at_target_risk"));
    interval(p, s, "coverage_at_target_risk");
    const json_t *th = json_object_get(sel, "threshold");
    if (json_is_number(th))
        putf(p, ", with threshold %.4f", json_number_value(th));
    putf(p, ". Accuracy %.3f", num(overall, "accuracy"));
    interval(p, s, "accuracy");
    putf(p, ", ECE %.3f", num(overall, "ece"));
    interval(p, s, "ece");
    put(p, ".</p>\n");
    inline_svg(p, report_risk_coverage_svg, sel, NULL);
}

/* --compare: the metrics before and after per question type, and both
 * reliability diagrams. */
static void compare_section(struct page *p, const json_t *s, const json_t *cmp) {
    static const char *const keys[] = {"accuracy", "brier", "nll", "ece"};
    put(p, "\n<h2>Before and after</h2>\n<p>Before: ");
    put_esc(p, json_string_value(json_object_get(cmp, "file")));
    put(p, " (model ");
    put_esc(p, json_string_value(json_object_get(cmp, "model")));
    put(p, ").</p>\n<table class=\"compare\"><tr><th>type</th><th>n</th>");
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        putf(p, "<th>%s before</th><th>%s after</th>", keys[k], keys[k]);
    put(p, "</tr>");
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        const json_t *a = json_object_get(json_object_get(cmp, "metrics"), groups[g]);
        const json_t *b = json_object_get(json_object_get(s, "metrics"), groups[g]);
        if (!json_integer_value(json_object_get(a, "n")) ||
            !json_integer_value(json_object_get(b, "n")))
            continue;
        putf(p, "<tr><td>%s</td><td>%lld</td>", groups[g],
             (long long)json_integer_value(json_object_get(b, "n")));
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            num_cell(p, a, keys[k]);
            num_cell(p, b, keys[k]);
        }
        put(p, "</tr>");
    }
    put(p, "</table>\n");
    inline_svg(p, report_reliability_svg, json_object_get(cmp, "reliability"), "before");
    inline_svg(p, report_reliability_svg, json_object_get(s, "reliability"), "after");
}

/* --suggest-thresholds: one row per threshold. */
static void thresholds_section(struct page *p, const json_t *t) {
    putf(p, "\n<h2>Thresholds</h2>\n<p>For a precision of %.4g, the largest cut of each "
            "question's answers (each needs at least %lld answers; 95%% interval of the "
            "threshold from %lld resamples).</p>\n<table class=\"thresholds\"><tr>"
            "<th>question</th><th>threshold</th><th>answers</th><th>accepted</th>"
            "<th>precision</th><th>coverage</th><th>interval</th></tr>",
         num(t, "target_precision"),
         (long long)json_integer_value(json_object_get(t, "min_answers")),
         (long long)json_integer_value(json_object_get(t, "resamples")));
    size_t i;
    const json_t *g;
    json_array_foreach(json_object_get(t, "questions"), i, g) {
        const json_t *q = json_object_get(g, "question"), *iv = json_object_get(g, "interval");
        const json_t *value = json_object_get(g, "value");
        put(p, "<tr>");
        value_cell(p, json_is_string(q) ? q : json_object_get(g, "key"));
        value_cell(p, json_is_string(value) ? value : json_object_get(g, "status"));
        value_cell(p, json_object_get(g, "answers"));
        value_cell(p, json_object_get(g, "accepted"));
        num_cell(p, g, "precision");
        num_cell(p, g, "coverage");
        put(p, "<td>");
        for (size_t k = 0; k < 2 && json_is_array(iv); k++) {
            const json_t *x = json_array_get(iv, k);
            json_is_number(x) ? putf(p, "%.4f", json_number_value(x)) : put(p, "none");
            put(p, k ? "" : " to ");
        }
        put(p, "</td></tr>");
    }
    put(p, "</table>\n");
}

/* The option-order test (--permute K): flips, |dp|, and the chosen positions. */
static void permutation_section(struct page *p, const json_t *pm) {
    putf(p, "\n<h2>Option order</h2>\n<p>Every choice question asked again in %lld seeded "
            "permutations of its options (seed %lld): %lld of %lld orders answered. Flip rate "
            "%.3f (the chosen option changed with the order), mean |&#916;p| %.4f; chi-square "
            "%.2f, df %lld, p-value %.3g against a uniform choice of position.</p>\n",
         (long long)json_integer_value(json_object_get(pm, "k")),
         (long long)json_integer_value(json_object_get(pm, "seed")),
         (long long)json_integer_value(json_object_get(pm, "orders_asked")),
         (long long)(json_integer_value(json_object_get(pm, "orders_asked")) +
                     json_integer_value(json_object_get(pm, "orders_failed"))),
         num(pm, "flip_rate"), num(pm, "mean_abs_dp"), num(pm, "chi_square"),
         (long long)json_integer_value(json_object_get(pm, "df")), num(pm, "p_value"));
    put(p, "<table class=\"permutation\"><tr><th>position</th><th>chosen</th><th>expected</th>"
           "<th>rate</th><th>uniform rate</th></tr>");
    size_t i;
    const json_t *row;
    json_array_foreach(json_object_get(pm, "positions"), i, row) {
        put(p, "<tr>");
        value_cell(p, json_object_get(row, "label"));
        value_cell(p, json_object_get(row, "chosen"));
        num_cell(p, row, "expected");
        num_cell(p, row, "rate");
        num_cell(p, row, "uniform_rate");
        put(p, "</tr>");
    }
    put(p, "</table>\n");
}

tandem_err report_eval_html(const json_t *s, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    const json_t *bins = json_object_get(s, "reliability");
    if (check_bins(bins))
        return TANDEM_ERR_FORMAT;
    struct page p = {0};
    mem_buf_init(&p.buf, REPORT_MAX_BYTES);
    put(&p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>tandem eval: ");
    put_esc(&p, json_string_value(json_object_get(s, "data")));
    put(&p, "</title><style>" PAGE_CSS "</style></head><body>\n<h1>tandem eval</h1>\n"
            "<table class=\"facts\">");
    static const char *const facts[][2] = {
        {"data", "dataset"}, {"endpoint", "endpoint"}, {"model", "model"},
        {"cases", "cases"},  {"questions", "questions"}, {"scored_questions", "scored"},
        {"repeat", "repeat"}, {"seconds", "seconds"},
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        putf(&p, "<tr><th>%s</th>", facts[i][1]);
        value_cell(&p, json_object_get(s, facts[i][0]));
        put(&p, "</tr>");
    }
    put(&p, "</table>\n<h2>Metrics</h2>\n<table><tr><th>type</th><th>n</th><th>accuracy</th>"
            "<th>Brier</th><th>NLL</th><th>ECE</th><th>low-confidence rate</th>"
            "<th>mean confidence</th>"
            "<th>MAE</th></tr>");
    const json_t *m = json_object_get(s, "metrics");
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        const json_t *row = json_object_get(m, groups[g]);
        if (!row)
            continue;
        putf(&p, "<tr><td>%s</td><td>%lld</td>", groups[g],
             (long long)json_integer_value(json_object_get(row, "n")));
        num_cell(&p, row, "accuracy");
        num_cell(&p, row, "brier");
        num_cell(&p, row, "nll");
        num_cell(&p, row, "ece");
        num_cell(&p, row, "low_confidence_rate");
        num_cell(&p, row, "mean_confidence");
        num_cell(&p, row, "mae");
        put(&p, "</tr>");
    }
    putf(&p, "</table><p>Low confidence: top-answer probability below %.2f. Confidence is the "
             "probability of the top answer; 15 equal-width bins.</p>\n",
         num(s, "low_confidence_threshold"));
    put(&p, "<h2>Calibration</h2>\n");
    inline_svg(&p, report_reliability_svg, bins, NULL);
    inline_svg(&p, report_histogram_svg, bins, NULL);
    if (json_is_object(json_object_get(s, "compare")))
        compare_section(&p, s, json_object_get(s, "compare"));
    selective_section(&p, s);
    if (json_is_object(json_object_get(s, "thresholds")))
        thresholds_section(&p, json_object_get(s, "thresholds"));
    if (json_is_object(json_object_get(s, "permutation")))
        permutation_section(&p, json_object_get(s, "permutation"));

    const json_t *st = json_object_get(s, "stability");
    const char *verdict = json_string_value(json_object_get(st, "verdict"));
    put(&p, "\n<h2>Stability</h2>\n<p>Verdict: <b class=\"");
    put(&p, verdict && !strcmp(verdict, "deterministic") ? "ok" : "bad");
    put(&p, "\">");
    put_esc(&p, verdict);
    if (json_integer_value(json_object_get(st, "repeat")) < 2)
        put(&p, "</b> (each case was sent once; run with --repeat N).</p>");
    else
        putf(&p, "</b> over %lld repeats; %lld of %lld questions identical; max |&#916;p| %.6g; "
                 "%lld questions with top-answer flips.</p>",
             (long long)json_integer_value(json_object_get(st, "repeat")),
             (long long)json_integer_value(json_object_get(st, "questions_identical")),
             (long long)json_integer_value(json_object_get(st, "questions_measured")),
             num(st, "max_dp"),
             (long long)json_integer_value(json_object_get(st, "questions_with_flips")));
    size_t i;
    const json_t *v;
    const json_t *unstable = json_object_get(st, "unstable");
    if (json_array_size(unstable)) {
        put(&p, "<table><tr><th>case</th><th>question</th><th>max |&#916;p|</th><th>flips</th>"
                "</tr>");
        json_array_foreach(unstable, i, v) {
            put(&p, "<tr>");
            value_cell(&p, json_object_get(v, "case"));
            value_cell(&p, json_object_get(v, "question"));
            num_cell(&p, v, "max_dp");
            value_cell(&p, json_object_get(v, "flips"));
            put(&p, "</tr>");
        }
        put(&p, "</table>");
    }
    const json_t *errors = json_object_get(s, "errors");
    putf(&p, "\n<h2>Errors</h2>\n<p>%zu failed requests.</p>", json_array_size(errors));
    if (json_array_size(errors)) {
        put(&p, "<table><tr><th>case</th><th>line</th><th>repeat</th><th>HTTP</th><th>error</th>"
                "</tr>");
        json_array_foreach(errors, i, v) {
            put(&p, "<tr>");
            value_cell(&p, json_object_get(v, "case"));
            value_cell(&p, json_object_get(v, "line"));
            value_cell(&p, json_object_get(v, "repeat"));
            value_cell(&p, json_object_get(v, "http_status"));
            value_cell(&p, json_object_get(v, "error"));
            put(&p, "</tr>");
        }
        put(&p, "</table>");
    }
    put(&p, "\n<h2>Questions</h2>\n<table><tr><th>case</th><th>question</th><th>type</th>"
            "<th>gold</th><th>answer</th><th>p</th><th>correct</th><th>Brier</th></tr>");
    json_array_foreach(json_object_get(s, "results"), i, v) {
        put(&p, "<tr>");
        value_cell(&p, json_object_get(v, "case"));
        value_cell(&p, json_object_get(v, "question"));
        value_cell(&p, json_object_get(v, "type"));
        value_cell(&p, json_object_get(v, "gold"));
        value_cell(&p, json_object_get(v, "answer"));
        num_cell(&p, v, "p");
        value_cell(&p, json_object_get(v, "correct"));
        num_cell(&p, v, "brier");
        put(&p, "</tr>");
    }
    put(&p, "</table>\n<p>Generated by tandem eval; formulas in docs/eval.md.</p>\n"
            "</body></html>\n");
    if (p.err) {
        tandem_err e = p.err;
        mem_buf_deinit(&p.buf);
        return e;
    }
    *out = p.buf.data;
    *len = p.buf.len;
    return TANDEM_OK;
}

/* --- the quantization ladder ----------------------------------------------------
 *
 * report_ladder_html() and report_ladder_svg() read the summary of `tandem
 * quantize --ladder --json`. Both first check it against the member tables
 * below (ladder_check), so the drawing code may take every required member as
 * present with its type, and every optional one as of its type, null or
 * absent. A rung counts as judged when its sure_flip_rate is a number (its
 * flip members are null otherwise), whatever its status says. */

#define DASH "\xe2\x80\x93" /* U+2013 EN DASH, for JSON nulls */
#define GEQ "\xe2\x89\xa5"  /* U+2265 */
#define MIB 1048576.0

enum kind { K_STR, K_NUM, K_BOOL, K_OBJ, K_ARR, K_CI /* [lo, hi], two numbers */ };

struct member {
    const char *key;
    enum kind kind;
    int required; /* 0: may also be null or absent */
};

static const struct member ladder_members[] = {
    {"source", K_OBJ, 1},      {"budget_bytes", K_NUM, 0}, {"budget_source", K_STR, 0},
    {"margin", K_NUM, 1},      {"max_flip_rate", K_NUM, 1}, {"data", K_OBJ, 1},
    {"reference", K_OBJ, 0},   {"imatrix", K_OBJ, 0},      {"rungs", K_ARR, 1},
    {"recommendation", K_OBJ, 0},
    /* "partner": null, one object or an array of them (partner_ok) */
};
static const struct member source_members[] = {
    {"path", K_STR, 1}, {"type", K_STR, 1}, {"mib", K_NUM, 1}, {"sha256", K_STR, 0},
};
static const struct member partner_members[] = {
    {"path", K_STR, 1}, {"name", K_STR, 0}, {"vram_bytes", K_NUM, 0},
};
static const struct member imatrix_members[] = {
    {"path", K_STR, 0}, {"sha256", K_STR, 0}, {"unavailable", K_STR, 0},
};
static const struct member data_members[] = {
    {"path", K_STR, 1},        {"cases", K_NUM, 0}, {"judged", K_NUM, 0},
    {"calibration", K_NUM, 0}, {"seed", K_NUM, 0},
};
static const struct member reference_members[] = {
    {"questions", K_NUM, 0}, {"sure", K_NUM, 0}, {"accuracy", K_NUM, 0}, {"seconds", K_NUM, 0},
};
static const struct member rung_members[] = {
    {"type", K_STR, 1},           {"imatrix", K_BOOL, 1},       {"bytes", K_NUM, 0},
    {"mib", K_NUM, 1},            {"bpw", K_NUM, 0},            {"vram_alone", K_NUM, 0},
    {"vram_pair", K_NUM, 0},      {"fits", K_BOOL, 0},          {"fallbacks", K_ARR, 0},
    {"status", K_STR, 1},         {"reason", K_STR, 0},         {"compared", K_NUM, 0},
    {"flips", K_NUM, 0},          {"flip_rate", K_NUM, 0},      {"flip_ci95", K_CI, 0},
    {"sure_compared", K_NUM, 0},  {"sure_flips", K_NUM, 0},     {"sure_flip_rate", K_NUM, 0},
    {"sure_ci95", K_CI, 0},       {"kl_mean", K_NUM, 0},        {"kl_max", K_NUM, 0},
    {"max_dp", K_NUM, 0},         {"delta_accuracy", K_NUM, 0}, {"seconds", K_NUM, 0},
    {"path", K_STR, 0},
};
static const struct member fallback_members[] = {
    {"tensor", K_STR, 1}, {"wanted", K_STR, 0}, {"got", K_STR, 0},
};
static const struct member recommendation_members[] = {
    {"type", K_STR, 1}, {"imatrix", K_BOOL, 0}, {"path", K_STR, 0}, {"why", K_STR, 0},
};

#define MEMBERS(table) table, sizeof table / sizeof table[0]

static int kind_ok(const json_t *v, enum kind k) {
    switch (k) {
    case K_STR: return json_is_string(v);
    case K_NUM: return json_is_number(v);
    case K_BOOL: return json_is_boolean(v);
    case K_OBJ: return json_is_object(v);
    case K_ARR: return json_is_array(v);
    case K_CI:
        return json_array_size(v) == 2 && json_is_number(json_array_get(v, 0)) &&
               json_is_number(json_array_get(v, 1));
    }
    return 0;
}

/* Whether o is an object whose members match the table. */
static int members_ok(const json_t *o, const struct member *m, size_t n) {
    if (!json_is_object(o))
        return 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(o, m[i].key);
        if (!kind_ok(v, m[i].kind) && (m[i].required || (v && !json_is_null(v))))
            return 0;
    }
    return 1;
}

/* Whether the optional object o.key is null, absent or matches the table. */
static int optional_ok(const json_t *o, const char *key, const struct member *m, size_t n) {
    const json_t *v = json_object_get(o, key);
    return !v || json_is_null(v) || members_ok(v, m, n);
}

/* Whether the partner is null, absent, one partner or an array of them
 * (flow/qladder writes the array, one {name, path} per partner model). */
static int partner_ok(const json_t *ladder) {
    const json_t *v = json_object_get(ladder, "partner"), *item;
    size_t i;
    if (!json_is_array(v))
        return optional_ok(ladder, "partner", MEMBERS(partner_members));
    json_array_foreach(v, i, item) {
        if (!members_ok(item, MEMBERS(partner_members)))
            return 0;
    }
    return 1;
}

/* TANDEM_ERR_FORMAT unless ladder has every required member with its type. */
static tandem_err ladder_check(const json_t *ladder) {
    if (!members_ok(ladder, MEMBERS(ladder_members)) ||
        !members_ok(json_object_get(ladder, "source"), MEMBERS(source_members)) ||
        !members_ok(json_object_get(ladder, "data"), MEMBERS(data_members)) ||
        !partner_ok(ladder) || !optional_ok(ladder, "imatrix", MEMBERS(imatrix_members)) ||
        !optional_ok(ladder, "reference", MEMBERS(reference_members)) ||
        !optional_ok(ladder, "recommendation", MEMBERS(recommendation_members)))
        return TANDEM_ERR_FORMAT;
    size_t i, j;
    const json_t *r, *f;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        if (!members_ok(r, MEMBERS(rung_members)))
            return TANDEM_ERR_FORMAT;
        json_array_foreach(json_object_get(r, "fallbacks"), j, f) {
            if (!members_ok(f, MEMBERS(fallback_members)))
                return TANDEM_ERR_FORMAT;
        }
    }
    return TANDEM_OK;
}

static const char *str(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* Whether rung is the recommended one: same type, same imatrix. */
static int is_recommended(const json_t *ladder, const json_t *rung) {
    const json_t *rec = json_object_get(ladder, "recommendation");
    return json_is_object(rec) && !strcmp(str(rec, "type"), str(rung, "type")) &&
           json_is_true(json_object_get(rec, "imatrix")) ==
               json_is_true(json_object_get(rung, "imatrix"));
}

/* Appends printf output to the NUL-terminated buf of n bytes. On truncation
 * the end is cut back to a whole UTF-8 character, so the text stays valid. */
__attribute__((format(printf, 3, 4))) static void appendf(char *buf, size_t n, const char *fmt,
                                                          ...) {
    size_t used = strlen(buf);
    if (used + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
    if (k < 0) {
        buf[used] = 0;
    } else if ((size_t)k >= n - used) {
        size_t end = n - 1;
        while (end > used && ((unsigned char)buf[end - 1] & 0xC0) == 0x80)
            end--;
        if (end > used && (unsigned char)buf[end - 1] >= 0xC0)
            end--;
        buf[end] = 0;
    }
}

/* "Q4_K_M" or "Q4_K_M + imatrix" into buf. */
static void rung_name(const json_t *rung, char *buf, size_t n) {
    buf[0] = 0;
    appendf(buf, n, "%s%s", str(rung, "type"),
            json_is_true(json_object_get(rung, "imatrix")) ? " + imatrix" : "");
}

/* The largest rung that fits budget_bytes, in MiB; NaN without a budget or
 * without a fitting rung. */
static double budget_fit_mib(const json_t *ladder) {
    double best = NAN;
    size_t i;
    const json_t *r;
    if (!json_is_number(json_object_get(ladder, "budget_bytes")))
        return NAN;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        if (json_is_true(json_object_get(r, "fits")))
            best = fmax(best, num(r, "mib"));
    }
    return best;
}

/* --- the ladder's plot --- */

/* geometry in pixels: wider than the eval charts, for the rungs' labels */
#define LAD_W 640.0
#define LAD_H 420.0
#define LAD_L 64.0
#define LAD_R 24.0
#define LAD_T 32.0
#define LAD_B 52.0
#define LAD_PW (LAD_W - LAD_L - LAD_R)
#define LAD_PH (LAD_H - LAD_T - LAD_B)

/* An axis range lo < hi in whole steps. */
struct axis {
    double lo, hi, step;
};

struct plot {
    struct axis x, y;
};

static double plot_x(const struct plot *p, double v) {
    return LAD_L + (v - p->x.lo) / (p->x.hi - p->x.lo) * LAD_PW;
}

static double plot_y(const struct plot *p, double v) {
    return LAD_T + (1 - (v - p->y.lo) / (p->y.hi - p->y.lo)) * LAD_PH;
}

/* [lo, hi] widened to whole steps of 1, 2 or 5 x 10^k, five or so of them;
 * [0, 1] unless lo < hi are finite, so the scale never divides by zero. */
static struct axis axis_nice(double lo, double hi) {
    const struct axis unit = {0, 1, 0.2};
    if (!isfinite(lo) || !isfinite(hi) || !(hi > lo) || !isfinite(hi - lo))
        return unit;
    double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    struct axis a = {floor(lo / step) * step, ceil(hi / step) * step, step};
    return isfinite(a.lo) && isfinite(a.hi) && a.hi > a.lo && step > 0 ? a : unit;
}

/* x: every rung's size and the budget line, with room either side; a single
 * size gets 10% of itself either side. */
static struct axis ladder_x_axis(const json_t *ladder, double fit_mib) {
    double lo = fit_mib, hi = fit_mib; /* fmin/fmax skip NaN */
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        lo = fmin(lo, num(r, "mib"));
        hi = fmax(hi, num(r, "mib"));
    }
    if (!(hi >= lo))
        return axis_nice(0, 1);
    double pad = hi > lo ? (hi - lo) * 0.08 : hi != 0 ? fabs(hi) * 0.1 : 1;
    double from = lo - pad;
    return axis_nice(lo >= 0 && from < 0 ? 0 : from, hi + pad);
}

/* y: from 0 past the gate and every judged rate and interval. */
static struct axis ladder_y_axis(const json_t *ladder) {
    double hi = num(ladder, "max_flip_rate");
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        const json_t *ci = json_object_get(r, "sure_ci95");
        hi = fmax(hi, num(r, "sure_flip_rate"));
        if (json_is_array(ci))
            hi = fmax(hi, json_number_value(json_array_get(ci, 1)));
    }
    return axis_nice(0, hi > 0 ? hi * 1.1 : 0.05);
}

/* The frame, grid and tick labels (sizes in MiB, rates in %). */
static void ladder_axes(struct svg *s, const struct plot *p) {
    char t[48];
    svg_rect(s, LAD_L, LAD_T, LAD_PW, LAD_PH, "#fafafa", NULL);
    for (int i = 0; i <= 20 && p->x.lo + i * p->x.step <= p->x.hi + p->x.step * 1e-6; i++) {
        double v = p->x.lo + i * p->x.step;
        svg_line(s, plot_x(p, v), LAD_T, plot_x(p, v), LAD_T + LAD_PH, "#e0e0e0", 1, 0);
        snprintf(t, sizeof t, "%.6g", v);
        svg_text(s, plot_x(p, v), LAD_T + LAD_PH + 16, "middle", 11, 0, t);
    }
    for (int i = 0; i <= 20 && p->y.lo + i * p->y.step <= p->y.hi + p->y.step * 1e-6; i++) {
        double v = p->y.lo + i * p->y.step;
        svg_line(s, LAD_L, plot_y(p, v), LAD_L + LAD_PW, plot_y(p, v), "#e0e0e0", 1, 0);
        snprintf(t, sizeof t, "%.4g%%", v * 100);
        svg_text(s, LAD_L - 6, plot_y(p, v) + 4, "end", 11, 0, t);
    }
    svg_line(s, LAD_L, LAD_T + LAD_PH, LAD_L + LAD_PW, LAD_T + LAD_PH, "#333333", 1.5, 0);
    svg_line(s, LAD_L, LAD_T, LAD_L, LAD_T + LAD_PH, "#333333", 1.5, 0);
    svg_text(s, LAD_L + LAD_PW / 2, LAD_H - 12, "middle", 13, 0, "file size (MiB)");
    svg_text(s, 16, LAD_T + LAD_PH / 2, "middle", 13, -90, "flips among sure answers");
}

/* A legend entry in the plot's top right corner (row 0, 1, ...): a short
 * dashed line of colour and its text. */
static void legend_entry(struct svg *s, int row, const char *colour, const char *text) {
    double x = LAD_L + LAD_PW - 8, y = LAD_T + 14 + row * 14;
    svg_line(s, x - 20, y - 4, x, y - 4, colour, 1.2, 1);
    svg_text(s, x - 26, y, "end", 10, 0, text);
}

/* The gate as a dashed line across, and the budget's largest fitting rung
 * as a dashed line up (when known), each named in the legend: labels on the
 * lines would cross the rungs' own. */
static void ladder_limits(struct svg *s, const struct plot *p, const json_t *ladder) {
    char t[96];
    double gate = num(ladder, "max_flip_rate"), fit = budget_fit_mib(ladder);
    svg_line(s, LAD_L, plot_y(p, gate), LAD_L + LAD_PW, plot_y(p, gate), "#cc0000", 1.2, 1);
    snprintf(t, sizeof t, "max flip rate %.4g%%", gate * 100);
    legend_entry(s, 0, "#cc0000", t);
    if (!isfinite(fit))
        return;
    svg_line(s, plot_x(p, fit), LAD_T, plot_x(p, fit), LAD_T + LAD_PH, "#674ea7", 1.2, 1);
    snprintf(t, sizeof t, "largest rung within the budget: %.1f MiB", fit);
    legend_entry(s, 1, "#674ea7", t);
}

/* The tooltip of a rung: name, size, status, the gated flips, the reason. */
static void rung_tip(const json_t *rung, int recommended, char *tip, size_t n) {
    const json_t *ci = json_object_get(rung, "sure_ci95");
    rung_name(rung, tip, n);
    appendf(tip, n, ": %.1f MiB, %s", num(rung, "mib"), str(rung, "status"));
    if (json_is_number(json_object_get(rung, "sure_flip_rate")))
        appendf(tip, n, "; flips among sure answers %.1f%%", num(rung, "sure_flip_rate") * 100);
    if (json_is_number(json_object_get(rung, "sure_flips")) &&
        json_is_number(json_object_get(rung, "sure_compared")))
        appendf(tip, n, " (%.0f of %.0f)", num(rung, "sure_flips"), num(rung, "sure_compared"));
    if (json_is_array(ci))
        appendf(tip, n, ", 95%% interval %.1f%% to %.1f%%",
                json_number_value(json_array_get(ci, 0)) * 100,
                json_number_value(json_array_get(ci, 1)) * 100);
    if (str(rung, "reason"))
        appendf(tip, n, "; %s", str(rung, "reason"));
    if (recommended)
        appendf(tip, n, "; recommended");
}

static const char *status_colour(const char *status) {
    if (!strcmp(status, "passed"))
        return "#38761d";
    return !strcmp(status, "failed") ? "#e06666" : "#666666";
}

/* A judged rung: its interval as a capped bar, the point, its name beside
 * it (on the left in the right half, so that it stays inside the plot). */
static void draw_judged(struct svg *s, const struct plot *p, const json_t *rung, int recommended,
                        const char *tip) {
    const json_t *ci = json_object_get(rung, "sure_ci95");
    const char *colour = status_colour(str(rung, "status"));
    double x = plot_x(p, num(rung, "mib")), y = plot_y(p, num(rung, "sure_flip_rate"));
    if (json_is_array(ci)) {
        double lo = plot_y(p, json_number_value(json_array_get(ci, 0)));
        double hi = plot_y(p, json_number_value(json_array_get(ci, 1)));
        svg_line(s, x, lo, x, hi, colour, 1.5, 0);
        svg_line(s, x - 4, lo, x + 4, lo, colour, 1.5, 0);
        svg_line(s, x - 4, hi, x + 4, hi, colour, 1.5, 0);
    }
    if (recommended)
        svg_circle(s, x, y, 9, "#f1c232", tip);
    svg_circle(s, x, y, 4.5, colour, tip);
    char label[160];
    rung_name(rung, label, sizeof label);
    if (recommended)
        appendf(label, sizeof label, " (recommended)");
    int left = x > LAD_L + LAD_PW / 2;
    svg_text(s, x + (left ? -8 : 8), y - 6, left ? "end" : "start", 10, 0, label);
}

/* A rung that was not judged: a hollow marker on the x axis, its name and
 * status written upwards from it. */
static void draw_unjudged(struct svg *s, const struct plot *p, const json_t *rung,
                          int recommended, const char *tip) {
    double x = plot_x(p, num(rung, "mib")), y = LAD_T + LAD_PH;
    if (recommended)
        svg_circle(s, x, y, 9, "#f1c232", tip);
    svg_circle(s, x, y, 5, "#999999", tip);
    svg_circle(s, x, y, 3.2, "#ffffff", tip);
    char label[192];
    rung_name(rung, label, sizeof label);
    appendf(label, sizeof label, ": %s", str(rung, "status"));
    svg_text(s, x + 3.5, y - 9, "start", 10, -90, label);
}

tandem_err report_ladder_svg(const json_t *ladder, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (ladder_check(ladder))
        return TANDEM_ERR_FORMAT;
    struct plot p = {ladder_x_axis(ladder, budget_fit_mib(ladder)), ladder_y_axis(ladder)};
    struct svg *s;
    tandem_err e = svg_new(LAD_W, LAD_H, "Quantization ladder: file size against flips", &s);
    if (e)
        return e;
    ladder_axes(s, &p);
    char title[96];
    snprintf(title, sizeof title, "Size against flips (answers with margin " GEQ " %.3g)",
             num(ladder, "margin"));
    svg_text(s, LAD_L + LAD_PW / 2, 20, "middle", 14, 0, title);
    ladder_limits(s, &p, ladder);
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        char tip[640];
        int rec = is_recommended(ladder, r);
        rung_tip(r, rec, tip, sizeof tip);
        if (json_is_number(json_object_get(r, "sure_flip_rate")))
            draw_judged(s, &p, r, rec, tip);
        else
            draw_unjudged(s, &p, r, rec, tip);
    }
    return svg_finish(s, out, len);
}

/* --- the ladder's page --- */

/* v (a JSON number) times scale at decimals places, or DASH when it is null. */
static void put_num(struct page *p, const json_t *v, int decimals, double scale) {
    if (json_is_number(v))
        putf(p, "%.*f", decimals, json_number_value(v) * scale);
    else
        put(p, DASH);
}

/* "yes", "no" (of class "bad" when no_is_bad) or DASH for a boolean. */
static void yes_no_cell(struct page *p, const json_t *v, int no_is_bad) {
    if (json_is_true(v))
        put(p, "<td>yes</td>");
    else if (json_is_false(v))
        put(p, no_is_bad ? "<td class=\"bad\">no</td>" : "<td>no</td>");
    else
        put(p, "<td>" DASH "</td>");
}

/* The gated flips with their interval, then all flips, e.g.
 * "1/32 (0.5–16.0%)" over "all 9/56"; DASH for a rung not judged. */
static void flips_cell(struct page *p, const json_t *r) {
    const json_t *ci = json_object_get(r, "sure_ci95");
    if (!json_is_number(json_object_get(r, "sure_flips")) &&
        !json_is_number(json_object_get(r, "flips"))) {
        put(p, "<td>" DASH "</td>");
        return;
    }
    put(p, "<td>");
    put_num(p, json_object_get(r, "sure_flips"), 0, 1);
    put(p, "/");
    put_num(p, json_object_get(r, "sure_compared"), 0, 1);
    if (json_is_array(ci))
        putf(p, " (%.1f" DASH "%.1f%%)", json_number_value(json_array_get(ci, 0)) * 100,
             json_number_value(json_array_get(ci, 1)) * 100);
    put(p, "<br><small>all ");
    put_num(p, json_object_get(r, "flips"), 0, 1);
    put(p, "/");
    put_num(p, json_object_get(r, "compared"), 0, 1);
    put(p, "</small></td>");
}

/* "+1.5" percentage points, or DASH. */
static void delta_cell(struct page *p, const json_t *v) {
    if (json_is_number(v))
        putf(p, "<td>%+.1f</td>", json_number_value(v) * 100);
    else
        put(p, "<td>" DASH "</td>");
}

/* The status, coloured, with the reason on a second line. */
static void verdict_cell(struct page *p, const json_t *r) {
    const char *status = str(r, "status");
    const char *cls = !strcmp(status, "passed")                                   ? "ok"
                      : !strcmp(status, "failed") || !strcmp(status, "error") ? "bad"
                                                                                  : "muted";
    putf(p, "<td class=\"l %s\">", cls);
    put_esc(p, status);
    if (str(r, "reason")) {
        put(p, "<br><small>");
        put_esc(p, str(r, "reason"));
        put(p, "</small>");
    }
    put(p, "</td>");
}

/* How many tensors fell back to another type, and which, folded away. */
static void fallbacks_cell(struct page *p, const json_t *r) {
    const json_t *fb = json_object_get(r, "fallbacks");
    size_t i, n = json_array_size(fb);
    const json_t *f;
    if (!n) {
        put(p, json_is_array(fb) ? "<td>0</td>" : "<td>" DASH "</td>");
        return;
    }
    putf(p, "<td class=\"l\"><details><summary>%zu</summary><ul>", n);
    json_array_foreach(fb, i, f) {
        put(p, "<li><code>");
        put_esc(p, str(f, "tensor"));
        put(p, "</code>: wanted ");
        put_esc(p, str(f, "wanted") ? str(f, "wanted") : DASH);
        put(p, ", got ");
        put_esc(p, str(f, "got") ? str(f, "got") : DASH);
        put(p, "</li>");
    }
    put(p, "</ul></details></td>");
}

/* A <td> of put_num(). */
static void num_td(struct page *p, const json_t *v, int decimals, double scale) {
    put(p, "<td>");
    put_num(p, v, decimals, scale);
    put(p, "</td>");
}

static void rung_row(struct page *p, const json_t *ladder, const json_t *r) {
    int rec = is_recommended(ladder, r);
    put(p, rec ? "<tr class=\"rung recommended\"><td>&#9733; " : "<tr class=\"rung\"><td>");
    put_esc(p, str(r, "type"));
    put(p, "</td>");
    yes_no_cell(p, json_object_get(r, "imatrix"), 0);
    num_td(p, json_object_get(r, "mib"), 1, 1);
    num_td(p, json_object_get(r, "bpw"), 2, 1);
    num_td(p, json_object_get(r, "vram_alone"), 0, 1 / MIB);
    num_td(p, json_object_get(r, "vram_pair"), 0, 1 / MIB);
    yes_no_cell(p, json_object_get(r, "fits"), 1);
    flips_cell(p, r);
    put(p, "<td>");
    put_num(p, json_object_get(r, "kl_mean"), 4, 1);
    put(p, " / ");
    put_num(p, json_object_get(r, "kl_max"), 4, 1);
    put(p, "</td>");
    num_td(p, json_object_get(r, "max_dp"), 3, 1);
    delta_cell(p, json_object_get(r, "delta_accuracy"));
    num_td(p, json_object_get(r, "seconds"), 1, 1);
    verdict_cell(p, r);
    fallbacks_cell(p, r);
    put(p, "</tr>\n");
}

static void ladder_table(struct page *p, const json_t *ladder) {
    put(p, "\n<h2>Rungs</h2>\n<table class=\"ladder\"><tr><th>type</th><th>imatrix</th>"
           "<th>MiB</th><th>bits/weight</th><th>VRAM alone (MiB)</th>"
           "<th>VRAM with partner (MiB)</th><th>fits</th>"
           "<th>flips: sure (95% interval)<br>all</th><th>KL mean / max</th>"
           "<th>max |&#916;p|</th><th>&#916; accuracy (points)</th><th>seconds</th>"
           "<th>verdict</th><th>fallbacks</th></tr>\n");
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        rung_row(p, ladder, r);
    }
    put(p, "</table>\n");
}

/* One partner: its path, name and VRAM when known. */
static void put_partner(struct page *p, const json_t *partner) {
    put(p, "<code>");
    put_esc(p, str(partner, "path"));
    put(p, "</code>");
    if (str(partner, "name")) {
        put(p, " (");
        put_esc(p, str(partner, "name"));
        put(p, ")");
    }
    if (json_is_number(json_object_get(partner, "vram_bytes")))
        putf(p, ", VRAM %.0f MiB", num(partner, "vram_bytes") / MIB);
}

/* The partners, "none" without. */
static void put_partners(struct page *p, const json_t *partner) {
    const json_t *item;
    size_t i;
    if (json_is_object(partner))
        put_partner(p, partner);
    else if (!json_array_size(partner))
        put(p, "none");
    json_array_foreach(partner, i, item) {
        put(p, i ? "; " : "");
        put_partner(p, item);
    }
}

/* The importance matrix: path and hash, why there is none, or "none". */
static void put_imatrix(struct page *p, const json_t *im) {
    if (str(im, "path")) {
        put(p, "<code>");
        put_esc(p, str(im, "path"));
        put(p, "</code>");
    }
    if (str(im, "sha256")) {
        put(p, "<br><small>sha256 ");
        put_esc(p, str(im, "sha256"));
        put(p, "</small>");
    }
    if (str(im, "unavailable")) {
        put(p, "unavailable: ");
        put_esc(p, str(im, "unavailable"));
    }
    if (!str(im, "path") && !str(im, "unavailable"))
        put(p, "none");
}

/* The facts about the model: source, partners, budget, importance matrix. */
static void model_facts(struct page *p, const json_t *l) {
    const json_t *src = json_object_get(l, "source");
    put(p, "<tr><th>source</th><td><code>");
    put_esc(p, str(src, "path"));
    put(p, "</code> (");
    put_esc(p, str(src, "type"));
    putf(p, ", %.1f MiB)", num(src, "mib"));
    if (str(src, "sha256")) {
        put(p, "<br><small>sha256 ");
        put_esc(p, str(src, "sha256"));
        put(p, "</small>");
    }
    put(p, "</td></tr>\n<tr><th>partner</th><td>");
    put_partners(p, json_object_get(l, "partner"));
    put(p, "</td></tr>\n<tr><th>budget</th><td>");
    if (json_is_number(json_object_get(l, "budget_bytes")))
        putf(p, "%.2f GiB", num(l, "budget_bytes") / (MIB * 1024));
    else
        put(p, "none");
    if (str(l, "budget_source")) {
        put(p, " (");
        put_esc(p, str(l, "budget_source"));
        put(p, ")");
    }
    put(p, "</td></tr>\n<tr><th>importance matrix</th><td>");
    put_imatrix(p, json_object_get(l, "imatrix"));
    put(p, "</td></tr>\n");
}

/* A number of an object and the words after it. */
struct part {
    const char *key;
    int decimals;
    const char *after;
};

/* Each part's number (DASH when null or absent), then its words. */
static void put_parts(struct page *p, const json_t *o, const struct part *parts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        put_num(p, json_object_get(o, parts[i].key), parts[i].decimals, 1);
        put(p, parts[i].after);
    }
}

/* The facts about the test: data, reference, gate. */
static void test_facts(struct page *p, const json_t *l) {
    static const struct part data[] = {
        {"cases", 0, " cases, "}, {"judged", 0, " judged, "},
        {"calibration", 0, " for calibration, seed "}, {"seed", 0, ""},
    };
    static const struct part ref[] = {
        {"questions", 0, " questions, "}, {"sure", 0, " sure; accuracy "},
        {"accuracy", 3, "; "}, {"seconds", 1, " s"},
    };
    put(p, "<tr><th>data</th><td><code>");
    put_esc(p, str(json_object_get(l, "data"), "path"));
    put(p, "</code>: ");
    put_parts(p, json_object_get(l, "data"), data, sizeof data / sizeof data[0]);
    put(p, "</td></tr>\n<tr><th>reference</th><td>");
    if (json_is_object(json_object_get(l, "reference")))
        put_parts(p, json_object_get(l, "reference"), ref, sizeof ref / sizeof ref[0]);
    else
        put(p, DASH);
    putf(p, "</td></tr>\n<tr><th>gate</th><td>at most %.4g%% flips among the answers the "
            "reference held with a margin " GEQ " %.3g</td></tr>\n",
         num(l, "max_flip_rate") * 100, num(l, "margin"));
}

static void ladder_recommendation(struct page *p, const json_t *l) {
    const json_t *rec = json_object_get(l, "recommendation");
    put(p, "\n<h2>Recommendation</h2>\n");
    if (!json_is_object(rec)) {
        put(p, "<p>No rung is recommended.</p>\n");
        return;
    }
    put(p, "<p class=\"recommendation\">&#9733; <b>");
    put_esc(p, str(rec, "type"));
    put(p, json_is_true(json_object_get(rec, "imatrix")) ? " + imatrix</b>" : "</b>");
    if (str(rec, "path")) {
        put(p, ": <code>");
        put_esc(p, str(rec, "path"));
        put(p, "</code>");
    }
    put(p, ".");
    if (str(rec, "why")) {
        put(p, " ");
        put_esc(p, str(rec, "why"));
    }
    put(p, "</p>\n");
}

tandem_err report_ladder_html(const json_t *ladder, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (ladder_check(ladder))
        return TANDEM_ERR_FORMAT;
    const char *path = str(json_object_get(ladder, "source"), "path");
    struct page p = {0};
    mem_buf_init(&p.buf, REPORT_MAX_BYTES);
    put(&p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>tandem quantize ladder: ");
    put_esc(&p, path);
    put(&p, "</title><style>" PAGE_CSS
            "body{max-width:1400px}.ladder{font-size:13px}.ladder th{text-align:center}"
            ".ladder td{white-space:nowrap}"
            ".ladder td.l{text-align:left;white-space:normal;min-width:14em}.muted{color:#777}"
            "tr.recommended td{background:#fff2cc;font-weight:bold}"
            "</style></head><body>\n<h1>tandem quantize ladder: <code>");
    put_esc(&p, path);
    put(&p, "</code></h1>\n");
    put(&p, "<table class=\"facts\">");
    model_facts(&p, ladder);
    test_facts(&p, ladder);
    put(&p, "</table>\n");
    ladder_table(&p, ladder);
    ladder_recommendation(&p, ladder);
    put(&p, "\n<h2>Size against flips</h2>\n");
    inline_svg(&p, report_ladder_svg, ladder,
               "Filled points: judged rungs with the Wilson 95% interval of their flip rate "
               "among sure answers; hollow markers on the axis: rungs not judged; dashed red: "
               "the largest flip rate allowed; dashed purple: the largest rung within the "
               "budget; ringed: the recommended rung.");
    put(&p, "\n<p>Generated by tandem quantize --ladder.</p>\n</body></html>\n");
    if (p.err) {
        mem_buf_deinit(&p.buf);
        return p.err;
    }
    *out = p.buf.data;
    *len = p.buf.len;
    return TANDEM_OK;
}
