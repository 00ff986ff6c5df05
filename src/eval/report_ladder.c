/* report_ladder.c: the report of the quantization ladder (`tandem quantize
 * --ladder`): an HTML page with one row per rung and an SVG plot of file size
 * against the gated flip rate. Part of the report module: its interface is
 * eval/report.h, its page builder report_page.h.
 *
 * report_ladder_html() and report_ladder_svg() read the summary of `tandem
 * quantize --ladder --json`. Both first check it against the member tables
 * below (ladder_check), so the drawing code may take every required member as
 * present with its type, and every optional one as of its type, null or
 * absent. A rung counts as judged when its sure_flip_rate is a number (its
 * flip members are null otherwise), whatever its status says. The plot's
 * scales come from the data (axis_nice), never divide by zero, and draw no
 * NaN; labels cut to fit end on a whole UTF-8 character (appendf). */
#include "eval/report.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "eval/report_page.h"
#include "eval/svg.h"

/* --- the ladder's members --- */

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
            best = fmax(best, report_num(r, "mib"));
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
        lo = fmin(lo, report_num(r, "mib"));
        hi = fmax(hi, report_num(r, "mib"));
    }
    if (!(hi >= lo))
        return axis_nice(0, 1);
    double pad = hi > lo ? (hi - lo) * 0.08 : hi != 0 ? fabs(hi) * 0.1 : 1;
    double from = lo - pad;
    return axis_nice(lo >= 0 && from < 0 ? 0 : from, hi + pad);
}

/* y: from 0 past the gate and every judged rate and interval. */
static struct axis ladder_y_axis(const json_t *ladder) {
    double hi = report_num(ladder, "max_flip_rate");
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(ladder, "rungs"), i, r) {
        const json_t *ci = json_object_get(r, "sure_ci95");
        hi = fmax(hi, report_num(r, "sure_flip_rate"));
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
    double gate = report_num(ladder, "max_flip_rate"), fit = budget_fit_mib(ladder);
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
    appendf(tip, n, ": %.1f MiB, %s", report_num(rung, "mib"), str(rung, "status"));
    if (json_is_number(json_object_get(rung, "sure_flip_rate")))
        appendf(tip, n, "; flips among sure answers %.1f%%",
                report_num(rung, "sure_flip_rate") * 100);
    if (json_is_number(json_object_get(rung, "sure_flips")) &&
        json_is_number(json_object_get(rung, "sure_compared")))
        appendf(tip, n, " (%.0f of %.0f)", report_num(rung, "sure_flips"),
                report_num(rung, "sure_compared"));
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
    double x = plot_x(p, report_num(rung, "mib")),
           y = plot_y(p, report_num(rung, "sure_flip_rate"));
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
    double x = plot_x(p, report_num(rung, "mib")), y = LAD_T + LAD_PH;
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
             report_num(ladder, "margin"));
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
static void put_num(struct report_page *p, const json_t *v, int decimals, double scale) {
    if (json_is_number(v))
        report_putf(p, "%.*f", decimals, json_number_value(v) * scale);
    else
        report_put(p, DASH);
}

/* "yes", "no" (of class "bad" when no_is_bad) or DASH for a boolean. */
static void yes_no_cell(struct report_page *p, const json_t *v, int no_is_bad) {
    if (json_is_true(v))
        report_put(p, "<td>yes</td>");
    else if (json_is_false(v))
        report_put(p, no_is_bad ? "<td class=\"bad\">no</td>" : "<td>no</td>");
    else
        report_put(p, "<td>" DASH "</td>");
}

/* The gated flips with their interval, then all flips, e.g.
 * "1/32 (0.5–16.0%)" over "all 9/56"; DASH for a rung not judged. */
static void flips_cell(struct report_page *p, const json_t *r) {
    const json_t *ci = json_object_get(r, "sure_ci95");
    if (!json_is_number(json_object_get(r, "sure_flips")) &&
        !json_is_number(json_object_get(r, "flips"))) {
        report_put(p, "<td>" DASH "</td>");
        return;
    }
    report_put(p, "<td>");
    put_num(p, json_object_get(r, "sure_flips"), 0, 1);
    report_put(p, "/");
    put_num(p, json_object_get(r, "sure_compared"), 0, 1);
    if (json_is_array(ci))
        report_putf(p, " (%.1f" DASH "%.1f%%)", json_number_value(json_array_get(ci, 0)) * 100,
                    json_number_value(json_array_get(ci, 1)) * 100);
    report_put(p, "<br><small>all ");
    put_num(p, json_object_get(r, "flips"), 0, 1);
    report_put(p, "/");
    put_num(p, json_object_get(r, "compared"), 0, 1);
    report_put(p, "</small></td>");
}

/* "+1.5" percentage points, or DASH. */
static void delta_cell(struct report_page *p, const json_t *v) {
    if (json_is_number(v))
        report_putf(p, "<td>%+.1f</td>", json_number_value(v) * 100);
    else
        report_put(p, "<td>" DASH "</td>");
}

/* The status, coloured, with the reason on a second line. */
static void verdict_cell(struct report_page *p, const json_t *r) {
    const char *status = str(r, "status");
    const char *cls = !strcmp(status, "passed")                                   ? "ok"
                      : !strcmp(status, "failed") || !strcmp(status, "error") ? "bad"
                                                                                  : "muted";
    report_putf(p, "<td class=\"l %s\">", cls);
    report_put_esc(p, status);
    if (str(r, "reason")) {
        report_put(p, "<br><small>");
        report_put_esc(p, str(r, "reason"));
        report_put(p, "</small>");
    }
    report_put(p, "</td>");
}

/* How many tensors fell back to another type, and which, folded away. */
static void fallbacks_cell(struct report_page *p, const json_t *r) {
    const json_t *fb = json_object_get(r, "fallbacks");
    size_t i, n = json_array_size(fb);
    const json_t *f;
    if (!n) {
        report_put(p, json_is_array(fb) ? "<td>0</td>" : "<td>" DASH "</td>");
        return;
    }
    report_putf(p, "<td class=\"l\"><details><summary>%zu</summary><ul>", n);
    json_array_foreach(fb, i, f) {
        report_put(p, "<li><code>");
        report_put_esc(p, str(f, "tensor"));
        report_put(p, "</code>: wanted ");
        report_put_esc(p, str(f, "wanted") ? str(f, "wanted") : DASH);
        report_put(p, ", got ");
        report_put_esc(p, str(f, "got") ? str(f, "got") : DASH);
        report_put(p, "</li>");
    }
    report_put(p, "</ul></details></td>");
}

/* A <td> of put_num(). */
static void num_td(struct report_page *p, const json_t *v, int decimals, double scale) {
    report_put(p, "<td>");
    put_num(p, v, decimals, scale);
    report_put(p, "</td>");
}

static void rung_row(struct report_page *p, const json_t *ladder, const json_t *r) {
    int rec = is_recommended(ladder, r);
    report_put(p, rec ? "<tr class=\"rung recommended\"><td>&#9733; " : "<tr class=\"rung\"><td>");
    report_put_esc(p, str(r, "type"));
    report_put(p, "</td>");
    yes_no_cell(p, json_object_get(r, "imatrix"), 0);
    num_td(p, json_object_get(r, "mib"), 1, 1);
    num_td(p, json_object_get(r, "bpw"), 2, 1);
    num_td(p, json_object_get(r, "vram_alone"), 0, 1 / MIB);
    num_td(p, json_object_get(r, "vram_pair"), 0, 1 / MIB);
    yes_no_cell(p, json_object_get(r, "fits"), 1);
    flips_cell(p, r);
    report_put(p, "<td>");
    put_num(p, json_object_get(r, "kl_mean"), 4, 1);
    report_put(p, " / ");
    put_num(p, json_object_get(r, "kl_max"), 4, 1);
    report_put(p, "</td>");
    num_td(p, json_object_get(r, "max_dp"), 3, 1);
    delta_cell(p, json_object_get(r, "delta_accuracy"));
    num_td(p, json_object_get(r, "seconds"), 1, 1);
    verdict_cell(p, r);
    fallbacks_cell(p, r);
    report_put(p, "</tr>\n");
}

static void ladder_table(struct report_page *p, const json_t *ladder) {
    report_put(p, "\n<h2>Rungs</h2>\n<table class=\"ladder\"><tr><th>type</th><th>imatrix</th>"
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
    report_put(p, "</table>\n");
}

/* before, s escaped, then after; nothing when s is NULL (an absent member). */
static void put_around(struct report_page *p, const char *before, const char *s,
                       const char *after) {
    if (!s)
        return;
    report_put(p, before);
    report_put_esc(p, s);
    report_put(p, after);
}

/* One partner: its path, name and VRAM when known. */
static void put_partner(struct report_page *p, const json_t *partner) {
    report_put(p, "<code>");
    report_put_esc(p, str(partner, "path"));
    report_put(p, "</code>");
    put_around(p, " (", str(partner, "name"), ")");
    if (json_is_number(json_object_get(partner, "vram_bytes")))
        report_putf(p, ", VRAM %.0f MiB", report_num(partner, "vram_bytes") / MIB);
}

/* The partners, "none" without. */
static void put_partners(struct report_page *p, const json_t *partner) {
    const json_t *item;
    size_t i;
    if (json_is_object(partner))
        put_partner(p, partner);
    else if (!json_array_size(partner))
        report_put(p, "none");
    json_array_foreach(partner, i, item) {
        report_put(p, i ? "; " : "");
        put_partner(p, item);
    }
}

/* The importance matrix: path and hash, why there is none, or "none". */
static void put_imatrix(struct report_page *p, const json_t *im) {
    put_around(p, "<code>", str(im, "path"), "</code>");
    put_around(p, "<br><small>sha256 ", str(im, "sha256"), "</small>");
    put_around(p, "unavailable: ", str(im, "unavailable"), "");
    if (!str(im, "path") && !str(im, "unavailable"))
        report_put(p, "none");
}

/* The facts about the model: source, partners, budget, importance matrix. */
static void model_facts(struct report_page *p, const json_t *l) {
    const json_t *src = json_object_get(l, "source");
    report_put(p, "<tr><th>source</th><td><code>");
    report_put_esc(p, str(src, "path"));
    report_put(p, "</code> (");
    report_put_esc(p, str(src, "type"));
    report_putf(p, ", %.1f MiB)", report_num(src, "mib"));
    put_around(p, "<br><small>sha256 ", str(src, "sha256"), "</small>");
    report_put(p, "</td></tr>\n<tr><th>partner</th><td>");
    put_partners(p, json_object_get(l, "partner"));
    report_put(p, "</td></tr>\n<tr><th>budget</th><td>");
    if (json_is_number(json_object_get(l, "budget_bytes")))
        report_putf(p, "%.2f GiB", report_num(l, "budget_bytes") / (MIB * 1024));
    else
        report_put(p, "none");
    put_around(p, " (", str(l, "budget_source"), ")");
    report_put(p, "</td></tr>\n<tr><th>importance matrix</th><td>");
    put_imatrix(p, json_object_get(l, "imatrix"));
    report_put(p, "</td></tr>\n");
}

/* A number of an object and the words after it. */
struct part {
    const char *key;
    int decimals;
    const char *after;
};

/* Each part's number (DASH when null or absent), then its words. */
static void put_parts(struct report_page *p, const json_t *o, const struct part *parts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        put_num(p, json_object_get(o, parts[i].key), parts[i].decimals, 1);
        report_put(p, parts[i].after);
    }
}

/* The facts about the test: data, reference, gate. */
static void test_facts(struct report_page *p, const json_t *l) {
    static const struct part data[] = {
        {"cases", 0, " cases, "}, {"judged", 0, " judged, "},
        {"calibration", 0, " for calibration, seed "}, {"seed", 0, ""},
    };
    static const struct part ref[] = {
        {"questions", 0, " questions, "}, {"sure", 0, " sure; accuracy "},
        {"accuracy", 3, "; "}, {"seconds", 1, " s"},
    };
    report_put(p, "<tr><th>data</th><td><code>");
    report_put_esc(p, str(json_object_get(l, "data"), "path"));
    report_put(p, "</code>: ");
    put_parts(p, json_object_get(l, "data"), data, sizeof data / sizeof data[0]);
    report_put(p, "</td></tr>\n<tr><th>reference</th><td>");
    if (json_is_object(json_object_get(l, "reference")))
        put_parts(p, json_object_get(l, "reference"), ref, sizeof ref / sizeof ref[0]);
    else
        report_put(p, DASH);
    report_putf(p,
                "</td></tr>\n<tr><th>gate</th><td>at most %.4g%% flips among the answers the "
                "reference held with a margin " GEQ " %.3g</td></tr>\n",
                report_num(l, "max_flip_rate") * 100, report_num(l, "margin"));
}

static void ladder_recommendation(struct report_page *p, const json_t *l) {
    const json_t *rec = json_object_get(l, "recommendation");
    report_put(p, "\n<h2>Recommendation</h2>\n");
    if (!json_is_object(rec)) {
        report_put(p, "<p>No rung is recommended.</p>\n");
        return;
    }
    report_put(p, "<p class=\"recommendation\">&#9733; <b>");
    report_put_esc(p, str(rec, "type"));
    report_put(p, json_is_true(json_object_get(rec, "imatrix")) ? " + imatrix</b>" : "</b>");
    if (str(rec, "path")) {
        report_put(p, ": <code>");
        report_put_esc(p, str(rec, "path"));
        report_put(p, "</code>");
    }
    report_put(p, ".");
    if (str(rec, "why")) {
        report_put(p, " ");
        report_put_esc(p, str(rec, "why"));
    }
    report_put(p, "</p>\n");
}

tandem_err report_ladder_html(const json_t *ladder, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (ladder_check(ladder))
        return TANDEM_ERR_FORMAT;
    const char *path = str(json_object_get(ladder, "source"), "path");
    struct report_page p;
    report_page_init(&p);
    report_put(&p, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<title>tandem quantize ladder: ");
    report_put_esc(&p, path);
    report_put(&p,
               "</title><style>" REPORT_PAGE_CSS
               "body{max-width:1400px}.ladder{font-size:13px}.ladder th{text-align:center}"
               ".ladder td{white-space:nowrap}"
               ".ladder td.l{text-align:left;white-space:normal;min-width:14em}.muted{color:#777}"
               "tr.recommended td{background:#fff2cc;font-weight:bold}"
               "</style></head><body>\n<h1>tandem quantize ladder: <code>");
    report_put_esc(&p, path);
    report_put(&p, "</code></h1>\n");
    report_put(&p, "<table class=\"facts\">");
    model_facts(&p, ladder);
    test_facts(&p, ladder);
    report_put(&p, "</table>\n");
    ladder_table(&p, ladder);
    ladder_recommendation(&p, ladder);
    report_put(&p, "\n<h2>Size against flips</h2>\n");
    report_put_svg(&p, report_ladder_svg, ladder,
                   "Filled points: judged rungs with the Wilson 95% interval of their flip rate "
                   "among sure answers; hollow markers on the axis: rungs not judged; dashed red: "
                   "the largest flip rate allowed; dashed purple: the largest rung within the "
                   "budget; ringed: the recommended rung.");
    report_put(&p, "\n<p>Generated by tandem quantize --ladder.</p>\n</body></html>\n");
    return report_page_finish(&p, out, len);
}
