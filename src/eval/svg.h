/* svg.h: a small SVG 1.1 writer for tandem's charts.
 *
 * Shapes are appended to an in-memory document in drawing order; text and
 * attribute values are XML-escaped here, so callers may pass any UTF-8
 * string. Errors are sticky, as with a stdio stream: once an append fails,
 * later calls do nothing and svg_finish() reports the first failure. */
#ifndef TANDEM_SVG_H
#define TANDEM_SVG_H

#include <stddef.h>

#include "base/err.h"

/* The most bytes one document may hold. */
#define SVG_MAX_BYTES (8u << 20)

struct svg;

/* Starts a document of width x height user units (pixels) with the given
 * accessible title (escaped; may be NULL). Writes the handle into *out
 * (caller owns: svg_finish() or svg_free()). Returns TANDEM_ERR_NOMEM. */
tandem_err svg_new(double width, double height, const char *title, struct svg **out);

/* Releases an unfinished document. svg_free(NULL) is a no-op. */
void svg_free(struct svg *s);

/* A rectangle at (x, y), top-left origin, filled with the CSS colour fill;
 * tooltip (may be NULL) becomes a <title> child. */
void svg_rect(struct svg *s, double x, double y, double w, double h, const char *fill,
              const char *tooltip);

/* A straight line from (x1, y1) to (x2, y2); dashed when dashed != 0. */
void svg_line(struct svg *s, double x1, double y1, double x2, double y2, const char *stroke,
              double width, int dashed);

/* A circle of radius r at (cx, cy); tooltip as for svg_rect(). */
void svg_circle(struct svg *s, double cx, double cy, double r, const char *fill,
                const char *tooltip);

/* Text with its baseline at (x, y); anchor is "start", "middle" or "end";
 * rotate is in degrees about (x, y) (0 = none). */
void svg_text(struct svg *s, double x, double y, const char *anchor, double size, double rotate,
              const char *text);

/* Closes the document and hands its text to *out (NUL-terminated, *len bytes
 * without the terminator; caller owns, release with mem_free()). The handle
 * is released in every case. Returns the first error of the document
 * (TANDEM_ERR_NOMEM, or TANDEM_ERR_TOOBIG past SVG_MAX_BYTES). */
tandem_err svg_finish(struct svg *s, char **out, size_t *len);

/* Appends text[0..n) to buf XML-escaped (& < > " '), for other XML or HTML
 * writers. Returns mem_buf_append()'s error. */
struct mem_buf;
tandem_err svg_escape(struct mem_buf *buf, const char *text, size_t n);

#endif
