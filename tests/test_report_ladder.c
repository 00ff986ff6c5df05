/* Unit tests for report_ladder_html and report_ladder_svg: a full ladder
 * (every status, a recommendation), one without recommendation, partner or
 * budget, escaping of every string from the JSON, malformed ladders refused,
 * degenerate plots (nothing judged, one rung) free of NaN and infinities,
 * and allocation failures reported without leaks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/utf8.h"
#include "eval/report.h"

#define DASH "\xe2\x80\x93"

/* The ladder, written with ' for " (swapped by load()). Q8_0 does not fit,
 * Q6_K and Q4_K_M + imatrix pass (the latter recommended), Q3_K_S fails,
 * Q2_K failed to quantize, IQ1_S was skipped. */
static const char FULL[] =
    "{'source': {'path': 'ref-f16.gguf', 'type': 'F16', 'mib': 258.6, 'sha256': 'abc123'},"
    " 'partner': {'path': 'laya.gguf', 'vram_bytes': 104857600},"
    " 'budget_bytes': 6442450944, 'margin': 0.1, 'max_flip_rate': 0.02,"
    " 'data': {'path': 'tests/data/eval/decisions.jsonl', 'cases': 60, 'judged': 30,"
    "          'calibration': 30, 'seed': 0},"
    " 'reference': {'questions': 56, 'sure': 32, 'accuracy': 0.8, 'seconds': 12.3},"
    " 'rungs': ["
    "  {'type': 'Q8_0', 'imatrix': false, 'bytes': 145000000, 'mib': 138.3, 'bpw': 8.5,"
    "   'vram_alone': 300000000, 'vram_pair': 500000000, 'fits': false, 'fallbacks': [],"
    "   'status': 'does not fit', 'reason': 'needs 477 MiB with the partner',"
    "   'compared': null, 'flips': null, 'flip_rate': null, 'flip_ci95': null,"
    "   'sure_compared': null, 'sure_flips': null, 'sure_flip_rate': null, 'sure_ci95': null,"
    "   'kl_mean': null, 'kl_max': null, 'max_dp': null, 'delta_accuracy': null,"
    "   'seconds': null, 'path': null},"
    "  {'type': 'Q6_K', 'imatrix': false, 'bytes': 111149056, 'mib': 106.0, 'bpw': 6.56,"
    "   'vram_alone': 250000000, 'vram_pair': 360000000, 'fits': true,"
    "   'fallbacks': [{'tensor': 'blk.0.ffn_down.weight', 'wanted': 'q6_K', 'got': 'q8_0'}],"
    "   'status': 'passed', 'reason': null,"
    "   'compared': 56, 'flips': 9, 'flip_rate': 0.16, 'flip_ci95': [0.08, 0.28],"
    "   'sure_compared': 32, 'sure_flips': 1, 'sure_flip_rate': 0.03, 'sure_ci95': [0.005, 0.16],"
    "   'kl_mean': 0.004, 'kl_max': 0.05, 'max_dp': 0.2, 'delta_accuracy': -0.02,"
    "   'seconds': 14.2, 'path': 'out/x-Q6_K.gguf'},"
    "  {'type': 'Q4_K_M', 'imatrix': true, 'bytes': 84095795, 'mib': 80.2, 'bpw': 4.89,"
    "   'vram_alone': 220000000, 'vram_pair': 330000000, 'fits': true, 'fallbacks': [],"
    "   'status': 'passed', 'reason': null,"
    "   'compared': 56, 'flips': 4, 'flip_rate': 0.07, 'flip_ci95': [0.03, 0.17],"
    "   'sure_compared': 32, 'sure_flips': 0, 'sure_flip_rate': 0, 'sure_ci95': [0, 0.107],"
    "   'kl_mean': 0.01, 'kl_max': 0.09, 'max_dp': 0.25, 'delta_accuracy': 0.01,"
    "   'seconds': 11.0, 'path': 'out/x-Q4_K_M-imatrix.gguf'},"
    "  {'type': 'Q3_K_S', 'imatrix': false, 'bytes': 65011712, 'mib': 62.0, 'bpw': 3.5,"
    "   'vram_alone': 200000000, 'vram_pair': 310000000, 'fits': true, 'fallbacks': [],"
    "   'status': 'failed', 'reason': 'flips among sure answers 12.5% > 2%',"
    "   'compared': 56, 'flips': 15, 'flip_rate': 0.27, 'flip_ci95': [0.17, 0.4],"
    "   'sure_compared': 32, 'sure_flips': 4, 'sure_flip_rate': 0.125, 'sure_ci95': [0.05, 0.28],"
    "   'kl_mean': 0.05, 'kl_max': 0.4, 'max_dp': 0.5, 'delta_accuracy': -0.07,"
    "   'seconds': 10.5, 'path': 'out/x-Q3_K_S.gguf'},"
    "  {'type': 'Q2_K', 'imatrix': false, 'bytes': 52428800, 'mib': 50.0, 'bpw': 2.9,"
    "   'vram_alone': 190000000, 'vram_pair': 300000000, 'fits': true, 'fallbacks': [],"
    "   'status': 'error', 'reason': 'llama-quantize exited with status 1',"
    "   'compared': null, 'flips': null, 'flip_rate': null, 'flip_ci95': null,"
    "   'sure_compared': null, 'sure_flips': null, 'sure_flip_rate': null, 'sure_ci95': null,"
    "   'kl_mean': null, 'kl_max': null, 'max_dp': null, 'delta_accuracy': null,"
    "   'seconds': 2.0, 'path': null},"
    "  {'type': 'IQ1_S', 'imatrix': true, 'bytes': 31457280, 'mib': 30.0, 'bpw': 1.6,"
    "   'vram_alone': 170000000, 'vram_pair': null, 'fits': true, 'fallbacks': [],"
    "   'status': 'skipped', 'reason': 'a larger rung already failed',"
    "   'compared': null, 'flips': null, 'flip_rate': null, 'flip_ci95': null,"
    "   'sure_compared': null, 'sure_flips': null, 'sure_flip_rate': null, 'sure_ci95': null,"
    "   'kl_mean': null, 'kl_max': null, 'max_dp': null, 'delta_accuracy': null,"
    "   'seconds': null, 'path': null}],"
    " 'recommendation': {'type': 'Q4_K_M', 'imatrix': true,"
    "   'path': 'out/x-Q4_K_M-imatrix.gguf',"
    "   'why': 'The smallest rung that fits and flips no sure answer.'}}";

/* One unjudged rung with every nullable member null. */
#define UNJUDGED(type, mib, status)                                                         \
    "{'type': '" type "', 'imatrix': false, 'bytes': null, 'mib': " #mib ", 'bpw': null,"     \
    " 'vram_alone': null, 'vram_pair': null, 'fits': null, 'fallbacks': null,"              \
    " 'status': '" status "', 'reason': null, 'compared': null, 'flips': null,"             \
    " 'flip_rate': null, 'flip_ci95': null, 'sure_compared': null, 'sure_flips': null,"     \
    " 'sure_flip_rate': null, 'sure_ci95': null, 'kl_mean': null, 'kl_max': null,"          \
    " 'max_dp': null, 'delta_accuracy': null, 'seconds': null, 'path': null}"

/* A ladder around the given rungs: no partner, no budget, no recommendation. */
#define BARE(rungs)                                                                         \
    "{'source': {'path': 's.gguf', 'type': 'F16', 'mib': 100}, 'partner': null,"           \
    " 'budget_bytes': null, 'margin': 0.1, 'max_flip_rate': 0, 'data': {'path': 'd.jsonl'},"\
    " 'reference': null, 'rungs': [" rungs "], 'recommendation': null}"

static json_t *load(const char *text) {
    char *t = strdup(text);
    cr_assert(t);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_error_t err;
    json_t *j = json_loads(t, JSON_DECODE_ANY, &err);
    cr_assert(j, "bad test JSON: %s at %d", err.text, err.position);
    free(t);
    return j;
}

static json_t *rung(json_t *ladder, size_t i) {
    return json_array_get(json_object_get(ladder, "rungs"), i);
}

static char *render(tandem_err (*f)(const json_t *, char **, size_t *), const json_t *ladder) {
    char *out;
    size_t len;
    tandem_err e = f(ladder, &out, &len);
    cr_assert_eq(e, TANDEM_OK, "%s", tandem_errname(e));
    cr_assert(out);
    cr_assert_eq(strlen(out), len);
    return out;
}

static size_t count(const char *hay, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* No printf rendering of a NaN or an infinity anywhere. */
static void expect_finite(const char *doc) {
    cr_expect(!strstr(doc, "nan") && !strstr(doc, "NAN"), "NaN in %s", doc);
    cr_expect(!strstr(doc, "inf") && !strstr(doc, "INF"), "infinity in %s", doc);
}

/* The (cx, cy) of the first circle filled with fill. */
static void circle_at(const char *svg, const char *fill, double *cx, double *cy) {
    char pat[64];
    snprintf(pat, sizeof pat, "fill=\"%s\"", fill);
    const char *f = strstr(svg, pat);
    cr_assert(f, "no circle filled %s in %s", fill, svg);
    const char *c = f;
    while (c > svg && strncmp(c, "<circle ", 8))
        c--;
    cr_assert_eq(sscanf(c, "<circle cx=\"%lf\" cy=\"%lf\"", cx, cy), 2, "%.80s", c);
}

/* The ends of the first line stroked with stroke. */
static void line_of(const char *svg, const char *stroke, double *x1, double *y1, double *x2,
                    double *y2) {
    char pat[64];
    snprintf(pat, sizeof pat, "stroke=\"%s\"", stroke);
    const char *f = strstr(svg, pat);
    cr_assert(f, "no line stroked %s in %s", stroke, svg);
    while (f > svg && strncmp(f, "<line ", 6))
        f--;
    cr_assert_eq(sscanf(f, "<line x1=\"%lf\" y1=\"%lf\" x2=\"%lf\" y2=\"%lf\"", x1, y1, x2, y2), 4,
                 "%.80s", f);
}

Test(report_ladder, html_has_a_row_per_rung_with_every_column) {
    json_t *l = load(FULL);
    char *h = render(report_ladder_html, l);
    cr_expect(!strncmp(h, "<!DOCTYPE html>", 15));
    cr_expect(strstr(h, "<title>tandem quantize ladder: ref-f16.gguf</title>"), "%s", h);
    cr_expect(!strstr(h, "<script"));
    cr_expect_eq(count(h, "<tr class=\"rung"), 6);
    cr_expect_eq(count(h, "<tr class=\"rung recommended\">"), 1);
    cr_expect(strstr(h, "<tr class=\"rung recommended\"><td>&#9733; Q4_K_M</td><td>yes</td>"
                        "<td>80.2</td><td>4.89</td><td>210</td><td>315</td><td>yes</td>"
                        "<td>0/32 (0.0" DASH "10.7%)<br><small>all 4/56</small></td>"
                        "<td>0.0100 / 0.0900</td><td>0.250</td><td>+1.0</td><td>11.0</td>"
                        "<td class=\"l ok\">passed</td><td>0</td></tr>"),
              "%s", h);
    /* the unjudged rung: nulls as dashes, the reason under the status */
    cr_expect(strstr(h, "<tr class=\"rung\"><td>IQ1_S</td><td>yes</td><td>30.0</td><td>1.60</td>"
                        "<td>162</td><td>" DASH "</td><td>yes</td><td>" DASH "</td><td>" DASH
                        " / " DASH "</td><td>" DASH "</td><td>" DASH "</td><td>" DASH "</td>"
                        "<td class=\"l muted\">skipped<br><small>a larger rung already failed"
                        "</small></td><td>0</td></tr>"),
              "%s", h);
    cr_expect(strstr(h, "<tr class=\"rung\"><td>Q8_0</td><td>no</td><td>138.3</td><td>8.50</td>"
                        "<td>286</td><td>477</td><td class=\"bad\">no</td><td>" DASH "</td>"),
              "%s", h);
    cr_expect(strstr(h, "<td>1/32 (0.5" DASH "16.0%)<br><small>all 9/56</small></td>"), "%s", h);
    cr_expect(strstr(h, "<td>-2.0</td>") && strstr(h, "<td>-7.0</td>"), "%s", h);
    cr_expect(strstr(h, "<td class=\"l bad\">failed<br><small>flips among sure answers 12.5% &gt;"
                        " 2%</small></td>"), "%s", h);
    cr_expect(strstr(h, "<td class=\"l bad\">error<br>"), "%s", h);
    cr_expect(strstr(h, "<details><summary>1</summary><ul><li><code>blk.0.ffn_down.weight</code>:"
                        " wanted q6_K, got q8_0</li></ul></details>"), "%s", h);
    /* the heading: source, partner, budget, data, reference, gate */
    cr_expect(strstr(h, "<code>ref-f16.gguf</code> (F16, 258.6 MiB)<br><small>sha256 abc123"));
    cr_expect(strstr(h, "<code>laya.gguf</code>, VRAM 100 MiB"), "%s", h);
    cr_expect(strstr(h, "<tr><th>budget</th><td>6.00 GiB</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>importance matrix</th><td>none</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<code>tests/data/eval/decisions.jsonl</code>: 60 cases, 30 judged, 30 "
                        "for calibration, seed 0"), "%s", h);
    cr_expect(strstr(h, "56 questions, 32 sure; accuracy 0.800; 12.3 s"), "%s", h);
    cr_expect(strstr(h, "at most 2% flips"), "%s", h);
    cr_expect(strstr(h, "<b>Q4_K_M + imatrix</b>: <code>out/x-Q4_K_M-imatrix.gguf</code>. The "
                        "smallest rung that fits and flips no sure answer.</p>"), "%s", h);
    cr_expect_eq(count(h, "<svg "), 1);
    cr_expect(strstr(h, "</svg><figcaption>"));
    cr_expect(!strcmp(h + strlen(h) - 15, "</body></html>\n"));
    expect_finite(h);
    mem_free(h);
    json_decref(l);
}

Test(report_ladder, svg_marks_gate_budget_intervals_and_the_recommended_rung) {
    json_t *l = load(FULL);
    char *s = render(report_ladder_svg, l);
    cr_expect(!strncmp(s, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39));
    cr_expect(!strcmp(s + strlen(s) - 6, "</svg>"));
    /* the gate: a dashed red line across the plot at 2% of a 0-35% axis, and
     * its legend entry */
    double x1, y1, x2, y2, px, py;
    line_of(s, "#cc0000", &x1, &y1, &x2, &y2);
    cr_expect(x1 == 64 && x2 == 640 - 24 && y1 == y2, "%g %g %g %g", x1, y1, x2, y2);
    cr_expect_float_eq(y1, 32 + (1 - 0.02 / 0.35) * (420 - 32 - 52), 0.01);
    cr_expect(strstr(s, ">35%</text>"), "%s", s);
    cr_expect_eq(count(s, "stroke=\"#cc0000\" stroke-width=\"1.20\" stroke-dasharray"), 2);
    cr_expect(strstr(s, ">max flip rate 2%</text>"), "%s", s);
    /* the budget: a dashed line up through Q6_K, the largest fitting rung
     * (Q8_0 does not fit) */
    line_of(s, "#674ea7", &x1, &y1, &x2, &y2);
    circle_at(s, "#38761d", &px, &py); /* Q6_K, the first passed rung */
    cr_expect(x1 == x2 && y1 == 32 && y2 == 420 - 52, "%g %g %g %g", x1, y1, x2, y2);
    cr_expect_float_eq(x1, px, 0.01);
    cr_expect_eq(count(s, "stroke=\"#674ea7\" stroke-width=\"1.20\" stroke-dasharray"), 2);
    cr_expect(strstr(s, ">largest rung within the budget: 106.0 MiB</text>"), "%s", s);
    /* three judged rungs with capped interval bars, three hollow markers */
    cr_expect_eq(count(s, "fill=\"#ffffff\""), 3);
    cr_expect_eq(count(s, "stroke=\"#38761d\" stroke-width=\"1.50\""), 2 * 3);
    cr_expect_eq(count(s, "stroke=\"#e06666\" stroke-width=\"1.50\""), 3);
    cr_expect(strstr(s, ">Q8_0: does not fit</text>"), "%s", s);
    cr_expect(strstr(s, ">Q2_K: error</text>"), "%s", s);
    cr_expect(strstr(s, ">IQ1_S + imatrix: skipped</text>"), "%s", s);
    cr_expect(strstr(s, "<title>Q2_K: 50.0 MiB, error; llama-quantize exited with status 1"
                        "</title>"), "%s", s);
    cr_expect(strstr(s, "<title>Q6_K: 106.0 MiB, passed; flips among sure answers 3.0% (1 of 32),"
                        " 95% interval 0.5% to 16.0%</title>"), "%s", s);
    /* the recommended rung: ringed, labelled, its tooltip says so */
    cr_expect_eq(count(s, "fill=\"#f1c232\""), 1);
    cr_expect_eq(count(s, "(recommended)"), 1);
    cr_expect(strstr(s, ">Q4_K_M + imatrix (recommended)</text>"), "%s", s);
    double rx, ry, qx, qy;
    circle_at(s, "#f1c232", &rx, &ry);
    const char *q = strstr(s, "; recommended</title></circle><circle");
    cr_assert(q);
    cr_assert_eq(sscanf(strstr(q, "<circle"), "<circle cx=\"%lf\" cy=\"%lf\"", &qx, &qy), 2);
    cr_expect_float_eq(rx, qx, 0.01);
    cr_expect_float_eq(ry, qy, 0.01);
    /* a rate of 0 sits on the x axis; a bigger file further right */
    cr_expect_float_eq(ry, 420.0 - 52.0, 0.01);
    cr_expect_lt(rx, px);
    expect_finite(s);
    mem_free(s);
    json_decref(l);
}

Test(report_ladder, no_recommendation_partner_or_budget) {
    json_t *l = load(FULL);
    json_object_set_new(l, "recommendation", json_null());
    json_object_set_new(l, "partner", json_null());
    json_object_del(l, "budget_bytes"); /* absent, as good as null */
    json_object_del(l, "reference");
    char *h = render(report_ladder_html, l), *s = render(report_ladder_svg, l);
    cr_expect(strstr(h, "<p>No rung is recommended.</p>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>partner</th><td>none</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>budget</th><td>none</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>reference</th><td>" DASH "</td></tr>"), "%s", h);
    cr_expect_eq(count(h, "<tr class=\"rung\">"), 6);
    cr_expect(!strstr(h, "recommended\""));
    cr_expect(!strstr(s, "#674ea7"), "a budget line without a budget");
    cr_expect(!strstr(s, "#f1c232") && !strstr(s, "recommended"));
    cr_expect(strstr(s, ">max flip rate 2%</text>"));
    mem_free(h);
    mem_free(s);
    json_decref(l);
}

Test(report_ladder, every_string_from_the_json_is_escaped) {
    static const char bad[] = "x<&\">'y";
    static const char esc[] = "x&lt;&amp;&quot;&gt;&#39;y";
    json_t *l = load(FULL);
    json_object_set_new(json_object_get(l, "source"), "path", json_string(bad));
    json_object_set_new(json_object_get(l, "source"), "type", json_string(bad));
    json_object_set_new(json_object_get(l, "source"), "sha256", json_string(bad));
    json_object_set_new(json_object_get(l, "partner"), "path", json_string(bad));
    json_object_set_new(json_object_get(l, "data"), "path", json_string(bad));
    json_object_set_new(rung(l, 0), "reason", json_string(bad));
    json_object_set_new(rung(l, 1), "status", json_string(bad));
    json_t *fb = json_array_get(json_object_get(rung(l, 1), "fallbacks"), 0);
    json_object_set_new(fb, "tensor", json_string(bad));
    json_object_set_new(fb, "wanted", json_string(bad));
    json_object_set_new(fb, "got", json_string(bad));
    /* the recommended rung and the recommendation itself */
    json_object_set_new(rung(l, 2), "type", json_string(bad));
    json_t *rec = json_object_get(l, "recommendation");
    json_object_set_new(rec, "type", json_string(bad));
    json_object_set_new(rec, "path", json_string(bad));
    json_object_set_new(rec, "why", json_string(bad));
    char *h = render(report_ladder_html, l), *s = render(report_ladder_svg, l);
    cr_expect(!strstr(h, "<&") && !strstr(h, "\">'"), "%s", h);
    cr_expect(!strstr(s, "<&") && !strstr(s, "\">'"), "%s", s);
    /* title, h1, source (path, type, sha), partner, data, Q8 reason, Q6 status,
     * three fallback strings, the Q4 row, recommendation (type, path, why) */
    char *fig = strstr(h, "<figure>");
    cr_assert(fig);
    *fig = 0; /* the plot is checked below */
    cr_expect_eq(count(h, esc), 2 + 3 + 1 + 1 + 1 + 1 + 3 + 1 + 3, "%s", h);
    cr_expect_eq(count(h, "<tr class=\"rung recommended\">"), 1, "still matched by type");
    /* the plot: labels and tooltips of Q8 (reason), Q6 (status), Q4 (type) */
    cr_expect(strstr(s, ">x&lt;&amp;&quot;&gt;&#39;y + imatrix (recommended)</text>"), "%s", s);
    cr_expect_geq(count(s, esc), 5, "%s", s);
    mem_free(h);
    mem_free(s);
    json_decref(l);
}

Test(report_ladder, long_names_are_cut_to_whole_characters) {
    char type[1201] = "";
    for (int i = 0; i < 600; i++)
        strcat(type, "\xc3\xa9"); /* U+00E9, two bytes */
    json_t *l = load(FULL);
    for (size_t i = 0; i < 6; i++) {
        json_object_set_new(rung(l, i), "type", json_string(type));
        json_object_set_new(rung(l, i), "reason", json_string(type));
    }
    char *s = render(report_ladder_svg, l), *h = render(report_ladder_html, l);
    cr_expect_eq(utf8_bad_line((const unsigned char *)s, strlen(s)), 0);
    cr_expect_eq(utf8_bad_line((const unsigned char *)h, strlen(h)), 0);
    cr_expect(strstr(h, type), "the table keeps the whole name");
    mem_free(s);
    mem_free(h);
    json_decref(l);
}

/* Sets the member at path ("a/b/0/c": object keys and array indexes) of j
 * to value (JSON text, ' for "), deletes it when value is NULL, or appends
 * value to the array at path when the last step is "+". */
static void edit(json_t *j, const char *path, const char *value) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    char *step = buf, *slash;
    while ((slash = strchr(step, '/'))) {
        *slash = 0;
        j = json_is_array(j) ? json_array_get(j, strtoul(step, NULL, 10))
                             : json_object_get(j, step);
        cr_assert(j, "%s: no %s", path, step);
        step = slash + 1;
    }
    if (!value)
        cr_assert_eq(json_object_del(j, step), 0, "%s", path);
    else if (!strcmp(step, "+"))
        json_array_append_new(j, load(value));
    else
        json_object_set_new(j, step, load(value));
}

/* The members flow/qladder writes beyond the brief's: partners as an array,
 * the importance matrix, where the budget came from, and members the
 * report does not show. */
Test(report_ladder, the_shape_qladder_writes) {
    json_t *l = load(FULL);
    edit(l, "partner",
         "[{'name': 'laya', 'path': 'laya.gguf'}, {'name': 'b<', 'path': 'b.gguf'}]");
    edit(l, "imatrix", "{'path': 'im.gguf', 'sha256': 'f00d'}");
    edit(l, "budget_source", "'--budget 6G'");
    edit(l, "format", "'tandem-ladder/1'");
    edit(l, "source/protected", "'output.weight kept at Q8_0'");
    edit(l, "data/share", "0.5");
    edit(l, "reference/repeat", "1");
    edit(l, "reference/accuracy", "null");
    edit(l, "rungs/1/unstable", "2");
    edit(l, "rungs/1/cached", "true");
    char *h = render(report_ladder_html, l), *s = render(report_ladder_svg, l);
    cr_expect(strstr(h, "<tr><th>partner</th><td><code>laya.gguf</code> (laya); "
                        "<code>b.gguf</code> (b&lt;)</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>budget</th><td>6.00 GiB (--budget 6G)</td></tr>"), "%s", h);
    cr_expect(strstr(h, "<tr><th>importance matrix</th><td><code>im.gguf</code><br><small>"
                        "sha256 f00d</small></td></tr>"), "%s", h);
    cr_expect(strstr(h, "32 sure; accuracy " DASH "; 12.3 s"), "%s", h);
    cr_expect_eq(count(h, "<tr class=\"rung"), 6);
    mem_free(h);
    mem_free(s);
    edit(l, "imatrix", "{'unavailable': 'no calibration cases'}");
    h = render(report_ladder_html, l);
    cr_expect(strstr(h, "<td>unavailable: no calibration cases</td>"), "%s", h);
    mem_free(h);
    json_decref(l);
}

Test(report_ladder, missing_or_mistyped_members_are_refused) {
    static const char *const cases[][2] = {
        {"rungs", NULL},
        {"rungs", "{}"},
        {"rungs/+", "'Q4_0'"},
        {"source", NULL},
        {"source/path", NULL},
        {"source/mib", "'258.6'"},
        {"margin", "'0.1'"},
        {"max_flip_rate", NULL},
        {"max_flip_rate", "null"},
        {"data", NULL},
        {"data/path", "3"},
        {"budget_bytes", "'6G'"},
        {"partner", "'laya.gguf'"},
        {"partner/path", NULL},
        {"partner", "[{'name': 'laya'}]"},
        {"partner", "['laya.gguf']"},
        {"imatrix", "'imatrix.gguf'"},
        {"imatrix", "{'path': 1}"},
        {"budget_source", "6"},
        {"reference", "[]"},
        {"rungs/3/type", NULL},
        {"rungs/3/mib", "null"},
        {"rungs/0/status", "1"},
        {"rungs/1/imatrix", "'yes'"},
        {"rungs/1/flips", "'9'"},
        {"rungs/1/sure_ci95", "[0.1]"},
        {"rungs/1/sure_ci95", "[0.1, null]"},
        {"rungs/1/fallbacks", "{}"},
        {"rungs/1/fallbacks/0/tensor", NULL},
        {"rungs/1/fallbacks/+", "'blk.1'"},
        {"recommendation/type", NULL},
        {"recommendation", "[]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *l = load(FULL);
        edit(l, cases[i][0], cases[i][1]);
        char *out = (char *)"untouched";
        size_t len = 7;
        cr_expect_eq(report_ladder_html(l, &out, &len), TANDEM_ERR_FORMAT, "html: %s = %s",
                     cases[i][0], cases[i][1]);
        cr_expect(out == NULL && len == 0);
        out = (char *)"untouched";
        len = 7;
        cr_expect_eq(report_ladder_svg(l, &out, &len), TANDEM_ERR_FORMAT, "svg: %s = %s",
                     cases[i][0], cases[i][1]);
        cr_expect(out == NULL && len == 0);
        json_decref(l);
    }
    char *out;
    size_t len;
    cr_expect_eq(report_ladder_html(NULL, &out, &len), TANDEM_ERR_FORMAT);
    json_t *arr = json_array();
    cr_expect_eq(report_ladder_svg(arr, &out, &len), TANDEM_ERR_FORMAT);
    json_decref(arr);
}

Test(report_ladder, optional_members_may_be_null_or_absent) {
    static const char *const cases[] = {
        "partner", "budget_bytes", "reference", "recommendation", "source/sha256",
        "data/cases", "data/seed", "rungs/1/fallbacks", "rungs/1/reason", "rungs/1/sure_ci95",
        "rungs/1/vram_pair", "rungs/1/fits", "recommendation/why", "recommendation/imatrix",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int absent = 0; absent < 2; absent++) {
            json_t *l = load(FULL);
            edit(l, cases[i], absent ? NULL : "null");
            char *h = NULL, *s = NULL;
            size_t len;
            cr_expect_eq(report_ladder_html(l, &h, &len), TANDEM_OK, "%s %s", cases[i],
                         absent ? "absent" : "null");
            cr_expect_eq(report_ladder_svg(l, &s, &len), TANDEM_OK, "%s", cases[i]);
            if (h && s) {
                expect_finite(h);
                expect_finite(s);
            }
            mem_free(h);
            mem_free(s);
            json_decref(l);
        }
    }
}

Test(report_ladder, nothing_judged_still_plots_without_nan) {
    /* a gate of 0, no rate: the y axis has nothing to scale to */
    json_t *l = load(BARE(UNJUDGED("Q8_0", 138.3, "does not fit") ","
                          UNJUDGED("Q4_K_M", 80.2, "skipped") ","
                          UNJUDGED("Q2_K", 50, "failed")));
    char *s = render(report_ladder_svg, l), *h = render(report_ladder_html, l);
    expect_finite(s);
    expect_finite(h);
    cr_expect_eq(count(s, "fill=\"#ffffff\""), 3, "%s", s);
    cr_expect(strstr(s, ">Q2_K: failed</text>"), "%s", s);
    cr_expect(strstr(s, ">max flip rate 0%</text>"), "%s", s);
    cr_expect_eq(count(h, "<tr class=\"rung\">"), 3);
    cr_expect(strstr(h, "<td>" DASH "</td><td>" DASH " / " DASH "</td>"), "%s", h);
    cr_expect(strstr(h, "<td class=\"l bad\">failed</td><td>" DASH "</td></tr>"), "%s", h);
    mem_free(s);
    mem_free(h);
    json_decref(l);

    l = load(BARE(""));
    s = render(report_ladder_svg, l);
    h = render(report_ladder_html, l);
    expect_finite(s);
    cr_expect(!strstr(s, "<circle"));
    cr_expect(!strstr(h, "<tr class=\"rung"));
    mem_free(s);
    mem_free(h);
    json_decref(l);
}

/* A judged rung of size mib, rate 0 or 0.5, on its own. */
static void one_rung(double mib, double rate) {
    json_t *l = load(BARE(UNJUDGED("Q4_0", 1, "passed")));
    json_t *r = rung(l, 0);
    json_object_set_new(r, "mib", json_real(mib));
    json_object_set_new(r, "sure_flip_rate", json_real(rate));
    json_object_set_new(r, "sure_ci95", json_pack("[f, f]", rate, rate));
    char *s = render(report_ladder_svg, l);
    expect_finite(s);
    double x, y;
    circle_at(s, "#38761d", &x, &y);
    /* inside the plot, not on its edges */
    cr_expect(mib > 0 ? x > 64 : x == 64, "mib %g: x %g", mib, x);
    cr_expect(x < 640 - 24, "mib %g: x %g", mib, x);
    cr_expect(y >= 32 && y <= 420 - 52, "rate %g: y %g", rate, y);
    cr_expect(strstr(s, ">Q4_0</text>"), "%s", s);
    mem_free(s);
    json_decref(l);
}

Test(report_ladder, a_single_rung_gets_an_axis_around_it) {
    one_rung(80.2, 0);
    one_rung(80.2, 0.5);
    one_rung(0, 0);
    one_rung(1e-9, 1);
    one_rung(1e12, 0.01);
}

Test(report_ladder, allocation_failures_are_reported_without_leaks) {
    json_t *l = load(FULL);
    int failures = 0;
    for (long n = 0; n < 1000; n++) {
        struct mem_stats s0, s1;
        mem_stats_get(&s0);
        char *out = NULL;
        size_t len = 0;
        mem_fail_after(n);
        tandem_err e = report_ladder_html(l, &out, &len);
        mem_fail_after(-1);
        mem_free(out);
        mem_stats_get(&s1);
        cr_expect_eq(s1.allocs - s0.allocs, s1.frees - s0.frees, "allocation %ld leaks", n);
        if (e == TANDEM_OK)
            break;
        cr_expect_eq(e, TANDEM_ERR_NOMEM, "allocation %ld: %s", n, tandem_errname(e));
        cr_expect(out == NULL && len == 0);
        failures++;
    }
    cr_expect_gt(failures, 3);
    json_decref(l);
}
