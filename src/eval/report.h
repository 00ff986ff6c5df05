/* report.h: the self-contained HTML report of `tandem eval --report`.
 *
 * Rendered from the `tandem eval --json` summary object alone (no network, no
 * scripts, no external files): the metrics table, an SVG reliability diagram
 * (accuracy against confidence per bin, with counts), an SVG confidence
 * histogram, with --compare the metrics and reliability diagram before and
 * after, selective prediction with its risk-coverage curve, the suggested
 * thresholds, the option-order test, the stability verdict, the failed
 * requests and every question's result. */
#ifndef TANDEM_REPORT_H
#define TANDEM_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* The most bytes a report may take. */
#define REPORT_MAX_BYTES (64u << 20)

/* Renders summary (borrowed; the object cmd_eval_summarize() returns) as an
 * HTML document into *out (NUL-terminated, *len bytes; caller owns, release
 * with mem_free()). On failure *out is NULL. Returns TANDEM_ERR_NOMEM,
 * TANDEM_ERR_TOOBIG past REPORT_MAX_BYTES, or TANDEM_ERR_FORMAT when summary
 * lacks the reliability bins. */
tandem_err report_eval_html(const json_t *summary, char **out, size_t *len);

/* Renders the reliability diagram of the 15 bins in reliability (a JSON
 * array of {lo, hi, n, confidence, accuracy}) as an SVG document (*out, as
 * above). Returns TANDEM_ERR_NOMEM or TANDEM_ERR_FORMAT. */
tandem_err report_reliability_svg(const json_t *reliability, char **out, size_t *len);

/* Renders the confidence histogram (bar per bin, height = n) of the same
 * bins as an SVG document (*out, as above). */
tandem_err report_histogram_svg(const json_t *reliability, char **out, size_t *len);

/* Renders the risk-coverage curve of selective (the summary's "selective"
 * object: target_risk, aurc, coverage_at_target_risk, curve of {coverage,
 * risk, threshold}) as an SVG document (*out, as above), the target risk as a
 * dashed line and its cut marked. Returns TANDEM_ERR_NOMEM or
 * TANDEM_ERR_FORMAT (no curve). */
tandem_err report_risk_coverage_svg(const json_t *selective, char **out, size_t *len);

#endif
