/* svg.c: SVG documents as text in a bounded buffer.
 *
 * Every shape is one printf-formatted element; coordinates are written with
 * two decimals, which is finer than a pixel and keeps the output stable
 * across libc versions. The first failed append is remembered in err and
 * turns every later call into a no-op (a stream's error flag). */
#include "eval/svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"

struct svg {
    struct mem_buf buf;
    tandem_err err;
};

static void put(struct svg *s, const char *p, size_t n) {
    if (!s->err)
        s->err = mem_buf_append(&s->buf, p, n);
}

__attribute__((format(printf, 2, 3))) static void putf(struct svg *s, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        if (!s->err)
            s->err = TANDEM_ERR_TOOBIG;
        return;
    }
    put(s, tmp, (size_t)n);
}

tandem_err svg_escape(struct mem_buf *buf, const char *text, size_t n) {
    size_t start = 0;
    tandem_err e = TANDEM_OK;
    for (size_t i = 0; i < n && !e; i++) {
        const char *rep = NULL;
        switch (text[i]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        default: break;
        }
        if (!rep)
            continue;
        e = mem_buf_append(buf, text + start, i - start);
        if (!e)
            e = mem_buf_append(buf, rep, strlen(rep));
        start = i + 1;
    }
    if (!e)
        e = mem_buf_append(buf, text + start, n - start);
    return e;
}

static void put_escaped(struct svg *s, const char *text) {
    if (!s->err)
        s->err = svg_escape(&s->buf, text, strlen(text));
}

/* A colour or anchor keyword: passed through only when it is plainly safe. */
static const char *safe_word(const char *w, const char *fallback) {
    if (!w || !*w)
        return fallback;
    for (const char *p = w; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '#' || *p == '-'))
            return fallback;
    return w;
}

/* Finite coordinate: NaN and infinities become 0 so the document stays valid. */
static double fin(double v) { return isfinite(v) ? v : 0; }

tandem_err svg_new(double width, double height, const char *title, struct svg **out) {
    struct svg *s = mem_calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return TANDEM_ERR_NOMEM;
    mem_buf_init(&s->buf, SVG_MAX_BYTES);
    putf(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" role=\"img\" font-family=\"sans-serif\">",
         fin(width), fin(height), fin(width), fin(height));
    if (title) {
        put(s, "<title>", 7);
        put_escaped(s, title);
        put(s, "</title>", 8);
    }
    if (s->err) {
        svg_free(s);
        return TANDEM_ERR_NOMEM;
    }
    *out = s;
    return TANDEM_OK;
}

void svg_free(struct svg *s) {
    if (!s)
        return;
    mem_buf_deinit(&s->buf);
    mem_free(s);
}

static void close_with_tooltip(struct svg *s, const char *elem, const char *tooltip) {
    if (!tooltip) {
        put(s, "/>", 2);
        return;
    }
    put(s, "><title>", 8);
    put_escaped(s, tooltip);
    putf(s, "</title></%s>", elem);
}

void svg_rect(struct svg *s, double x, double y, double w, double h, const char *fill,
              const char *tooltip) {
    putf(s, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"", fin(x),
         fin(y), fin(w) > 0 ? fin(w) : 0, fin(h) > 0 ? fin(h) : 0, safe_word(fill, "black"));
    close_with_tooltip(s, "rect", tooltip);
}

void svg_line(struct svg *s, double x1, double y1, double x2, double y2, const char *stroke,
              double width, int dashed) {
    putf(s, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
            "stroke-width=\"%.2f\"%s/>",
         fin(x1), fin(y1), fin(x2), fin(y2), safe_word(stroke, "black"), fin(width),
         dashed ? " stroke-dasharray=\"4 3\"" : "");
}

void svg_circle(struct svg *s, double cx, double cy, double r, const char *fill,
                const char *tooltip) {
    putf(s, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"%.2f\" fill=\"%s\"", fin(cx), fin(cy),
         fin(r) > 0 ? fin(r) : 0, safe_word(fill, "black"));
    close_with_tooltip(s, "circle", tooltip);
}

void svg_text(struct svg *s, double x, double y, const char *anchor, double size, double rotate,
              const char *text) {
    const char *a = safe_word(anchor, "start");
    if (strcmp(a, "start") && strcmp(a, "middle") && strcmp(a, "end"))
        a = "start";
    putf(s, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-size=\"%.1f\"", fin(x), fin(y),
         a, fin(size));
    if (rotate != 0)
        putf(s, " transform=\"rotate(%.1f %.2f %.2f)\"", fin(rotate), fin(x), fin(y));
    put(s, ">", 1);
    put_escaped(s, text);
    put(s, "</text>", 7);
}

tandem_err svg_finish(struct svg *s, char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    put(s, "</svg>", 6);
    tandem_err e = s->err;
    if (!e) {
        *out = s->buf.data;
        *len = s->buf.len;
        s->buf.data = NULL;
    }
    svg_free(s);
    return e;
}
