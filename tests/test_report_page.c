/* Unit tests for the report module's page builder (eval/report_page.h):
 * escaping of data against markup put as it is, the sticky first error and
 * a failed page freed without leaks, inlined drawings, and report_num. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "eval/report_page.h"

/* The page's text; fails the test unless finishing succeeds. Caller frees. */
static char *finish(struct report_page *p, size_t *len) {
    char *out = NULL;
    cr_assert_eq(report_page_finish(p, &out, len), TANDEM_OK);
    cr_assert(out);
    cr_expect_eq(strlen(out), *len);
    return out;
}

Test(report_page, put_esc_escapes_data_and_put_keeps_markup) {
    struct report_page p;
    report_page_init(&p);
    report_put(&p, "<td>");
    report_put_esc(&p, "a<b> & \"c\" 'd' \xc3\xa9");
    report_put_esc(&p, NULL);
    report_put_esc(&p, "");
    report_putf(&p, "</td><td>%.3f</td>", 0.5);
    size_t len;
    char *out = finish(&p, &len);
    cr_expect_str_eq(out, "<td>a&lt;b&gt; &amp; &quot;c&quot; &#39;d&#39; \xc3\xa9</td>"
                          "<td>0.500</td>");
    mem_free(out);
}

Test(report_page, the_first_error_sticks_and_the_page_is_freed) {
    struct mem_stats s0, s1;
    mem_stats_get(&s0);
    struct report_page p;
    report_page_init(&p);
    report_put(&p, "kept until the error");
    char big[600];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    report_putf(&p, "%s", big); /* past putf's 511 bytes */
    cr_expect_eq(p.err, TANDEM_ERR_TOOBIG);
    size_t before = p.buf.len;
    report_put(&p, "ignored");
    report_put_esc(&p, "<ignored>");
    cr_expect_eq(p.buf.len, before, "appends after a failure must do nothing");
    char *out = (char *)"not touched";
    size_t len = 99;
    cr_expect_eq(report_page_finish(&p, &out, &len), TANDEM_ERR_TOOBIG);
    cr_expect(out == NULL && len == 0);
    mem_stats_get(&s1);
    cr_expect_eq(s1.allocs - s0.allocs, s1.frees - s0.frees, "a failed page leaks");
}

static tandem_err draw_ok(const json_t *data, char **out, size_t *len) {
    (void)data;
    *out = mem_strdup("<svg></svg>");
    *len = *out ? strlen(*out) : 0;
    return *out ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

static tandem_err draw_bad(const json_t *data, char **out, size_t *len) {
    (void)data;
    *out = NULL;
    *len = 0;
    return TANDEM_ERR_FORMAT;
}

Test(report_page, put_svg_inlines_a_captioned_figure_or_fails_the_page) {
    struct report_page p;
    report_page_init(&p);
    report_put_svg(&p, draw_ok, NULL, "before & <after>");
    report_put_svg(&p, draw_ok, NULL, NULL);
    size_t len;
    char *out = finish(&p, &len);
    cr_expect_str_eq(out, "<figure><svg></svg><figcaption>before &amp; &lt;after&gt;"
                          "</figcaption></figure><figure><svg></svg></figure>");
    mem_free(out);

    report_page_init(&p);
    report_put_svg(&p, draw_bad, NULL, "x");
    report_put(&p, "ignored");
    cr_expect_eq(report_page_finish(&p, &out, &len), TANDEM_ERR_FORMAT);
    cr_expect(out == NULL);
}

Test(report_page, num_reads_numbers_and_nan_otherwise) {
    json_t *o = json_pack("{s:i, s:f, s:s, s:n}", "i", 3, "f", 0.25, "s", "7", "n");
    cr_expect_eq(report_num(o, "i"), 3.0);
    cr_expect_eq(report_num(o, "f"), 0.25);
    cr_expect(isnan(report_num(o, "s")));
    cr_expect(isnan(report_num(o, "n")));
    cr_expect(isnan(report_num(o, "absent")));
    cr_expect(isnan(report_num(NULL, "i")));
    json_decref(o);
}
