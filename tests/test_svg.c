/* Unit tests for svg: element output, escaping of text and tooltips,
 * unsafe colour words replaced, non-finite numbers kept out of the document. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "eval/svg.h"

Test(svg, writes_escaped_elements) {
    struct svg *s;
    cr_assert_eq(svg_new(100, 50, "a <title> & \"more\"", &s), TANDEM_OK);
    svg_rect(s, 1, 2, 3, 4, "#6fa8dc", "n < 5 & 'x'");
    svg_line(s, 0, 0, 10, 10, "red\" onload=\"x", 1, 1);
    svg_circle(s, 5, 5, NAN, "blue", NULL);
    svg_text(s, 1, 2, "middle", 10, -90, "<b>");
    char *out;
    size_t len;
    cr_assert_eq(svg_finish(s, &out, &len), TANDEM_OK);
    cr_expect_eq(strlen(out), len);
    cr_expect(!strncmp(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\"", 51), "%s", out);
    cr_expect(strstr(out, "<title>a &lt;title&gt; &amp; &quot;more&quot;</title>"), "%s", out);
    cr_expect(strstr(out, "<rect x=\"1.00\" y=\"2.00\" width=\"3.00\" height=\"4.00\" "
                          "fill=\"#6fa8dc\"><title>n &lt; 5 &amp; &#39;x&#39;</title></rect>"),
              "%s", out);
    cr_expect(strstr(out, "stroke=\"black\""), "unsafe colour kept: %s", out);
    cr_expect(strstr(out, "r=\"0.00\""), "%s", out);
    cr_expect(strstr(out, "transform=\"rotate(-90.0 1.00 2.00)\">&lt;b&gt;</text>"), "%s", out);
    cr_expect(!strcmp(out + len - 6, "</svg>"));
    mem_free(out);
    svg_free(NULL);
}
