/* report_page.h: the HTML page builder that report.c and report_ladder.c share.
 * INTERNAL: nothing outside src/eval/report*.c includes it; eval/report.h is the
 * report module's interface.
 *
 * The report module is one module in three files:
 *   report.c         the evaluation report of `tandem eval --report` and its charts;
 *   report_ladder.c  the quantization ladder's report and plot;
 *   report_page.c    what both pages are written with (below).
 *
 * A page is a growable buffer (REPORT_MAX_BYTES at most) with a sticky error:
 * the report_put* functions do nothing once one of them has failed, so a page
 * is written straight through and its error read once, by report_page_finish. */
#ifndef TANDEM_REPORT_PAGE_H
#define TANDEM_REPORT_PAGE_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"
#include "base/mem.h"

/* The style sheet every page starts from; a page may append its own rules. */
#define REPORT_PAGE_CSS                                                                     \
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}"                  \
    "table{border-collapse:collapse;margin:8px 0 20px}"                                     \
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"                         \
    "th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}"                  \
    "figure{display:inline-block;margin:0 16px 16px 0}.facts td{text-align:left}"           \
    ".bad{color:#b00}.ok{color:#070}"

/* A page being written. Caller-allocated: report_page_init(), the report_put*
 * functions, then report_page_finish(), which hands the text over or frees it. */
struct report_page {
    struct mem_buf buf; /* the text so far; owned by the page until finished */
    tandem_err err;     /* the first failure; TANDEM_OK while none */
};

/* Starts p as an empty page that may grow to REPORT_MAX_BYTES. Allocates nothing. */
void report_page_init(struct report_page *p);

/* Hands the page over: on success *out is its text (NUL-terminated, *len bytes;
 * caller owns, release with mem_free()) and TANDEM_OK is returned. When any
 * report_put* failed, frees the text, sets *out = NULL and *len = 0 and returns
 * the first error (TANDEM_ERR_NOMEM, TANDEM_ERR_TOOBIG, or what a drawing
 * returned). Either way p holds nothing afterwards. */
tandem_err report_page_finish(struct report_page *p, char **out, size_t *len);

/* Appends s (borrowed, NUL-terminated) as it is: markup, never data. */
void report_put(struct report_page *p, const char *s);

/* Appends s (borrowed) HTML-escaped (& < > " ' as entities, svg_escape); NULL
 * appends nothing. Every string from the JSON goes through this. */
void report_put_esc(struct report_page *p, const char *s);

/* Appends printf output as it is; one call writes at most 511 bytes, a longer
 * result appends nothing and fails the page with TANDEM_ERR_TOOBIG. */
__attribute__((format(printf, 2, 3))) void report_putf(struct report_page *p, const char *fmt,
                                                       ...);

/* Appends a <figure> with the SVG document that draw renders from data
 * (borrowed; draw is one of the report_*_svg functions), captioned (escaped)
 * when caption is not NULL. A failed drawing fails the page with its error. */
void report_put_svg(struct report_page *p, tandem_err (*draw)(const json_t *, char **, size_t *),
                    const json_t *data, const char *caption);

/* o.key (o borrowed, may be NULL or not an object) as a double; NaN when it is
 * absent or not a number. */
double report_num(const json_t *o, const char *key);

#endif
