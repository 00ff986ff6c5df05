/* report_page.c: the page builder of the report module (report_page.h).
 *
 * Both reports are one pass of appends into a mem_buf capped at
 * REPORT_MAX_BYTES. The first failure sticks in the page and turns every
 * later append into a no-op, so the writers need no error checks of their
 * own and report_page_finish is the one place that frees a failed page.
 * Escaping is svg_escape's, so the HTML and the inlined SVG agree on it. */
#include "eval/report_page.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "eval/report.h"
#include "eval/svg.h"

void report_page_init(struct report_page *p) {
    mem_buf_init(&p->buf, REPORT_MAX_BYTES);
    p->err = TANDEM_OK;
}

tandem_err report_page_finish(struct report_page *p, char **out, size_t *len) {
    tandem_err e = p->err;
    *out = NULL;
    *len = 0;
    if (e) {
        mem_buf_deinit(&p->buf);
        return e;
    }
    *out = p->buf.data;
    *len = p->buf.len;
    mem_buf_init(&p->buf, p->buf.max);
    return TANDEM_OK;
}

void report_put(struct report_page *p, const char *s) {
    if (!p->err)
        p->err = mem_buf_append(&p->buf, s, strlen(s));
}

void report_put_esc(struct report_page *p, const char *s) {
    if (!p->err)
        p->err = svg_escape(&p->buf, s ? s : "", s ? strlen(s) : 0);
}

void report_putf(struct report_page *p, const char *fmt, ...) {
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
    report_put(p, tmp);
}

void report_put_svg(struct report_page *p, tandem_err (*draw)(const json_t *, char **, size_t *),
                    const json_t *data, const char *caption) {
    char *svg;
    size_t n;
    tandem_err e = draw(data, &svg, &n);
    if (e) {
        if (!p->err)
            p->err = e;
        return;
    }
    report_put(p, "<figure>");
    report_put(p, svg);
    if (caption) {
        report_put(p, "<figcaption>");
        report_put_esc(p, caption);
        report_put(p, "</figcaption>");
    }
    report_put(p, "</figure>");
    mem_free(svg);
}

double report_num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}
