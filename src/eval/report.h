/* report.h: the self-contained HTML report of `tandem eval --report`.
 *
 * Rendered from the `tandem eval --json` summary object alone (no network, no
 * scripts, no external files): the metrics table, an SVG reliability diagram
 * (accuracy against confidence per bin, with counts), an SVG confidence
 * histogram, with --compare the metrics and reliability diagram before and
 * after, selective prediction with its risk-coverage curve, the suggested
 * thresholds, the option-order test, the stability verdict, the failed
 * requests and every question's result.
 *
 * The same for the ladder of `tandem quantize --ladder --json`: one row per
 * quantization rung and a plot of file size against the gated flip rate.
 *
 * One module in three files: report.c (the evaluation report), report_ladder.c
 * (the ladder's) and report_page.c (the page builder both write with, private
 * to the module: report_page.h). */
#ifndef TANDEM_REPORT_H
#define TANDEM_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "base/err.h"

/* The most bytes a report may take. */
#define REPORT_MAX_BYTES (64u << 20)

/* Renders summary (borrowed; the object summary_build() returns) as an
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

/* Renders ladder (borrowed; the object `tandem quantize --ladder --json`
 * prints: source, partner (null, one object or an array), budget_bytes,
 * budget_source, margin, max_flip_rate, data, reference, imatrix, rungs,
 * recommendation; other members are ignored) as one self-contained HTML
 * document (inline CSS and SVG, no scripts) into *out (as above): a heading
 * with the source, the data and the budget, a table with one row per rung
 * (JSON nulls shown as an en dash, the recommended rung's row of class
 * "recommended"), the recommendation, and the plot of report_ladder_svg().
 * Returns TANDEM_ERR_FORMAT when a required member is missing or a member has
 * the wrong type (see report_ladder.c, the ladder's members),
 * TANDEM_ERR_NOMEM, TANDEM_ERR_TOOBIG past REPORT_MAX_BYTES. */
tandem_err report_ladder_html(const json_t *ladder, char **out, size_t *len);

/* Renders the plot of ladder (borrowed, as above) as an SVG document (*out,
 * as above): x = file size in MiB, y = the gated flip rate (sure_flip_rate,
 * flips among answers the reference held with margin >= margin). A judged
 * rung (sure_flip_rate a number) is a point with its sure_ci95 Wilson
 * interval as a vertical bar, labelled with its type (+ imatrix); any other
 * rung is a hollow marker on the x axis labelled with its status; a
 * horizontal dashed line marks max_flip_rate, a vertical one the largest
 * rung that fits budget_bytes (only with a budget and a fitting rung); the
 * recommended rung is ringed and labelled "recommended". Returns
 * TANDEM_ERR_FORMAT (as for report_ladder_html), TANDEM_ERR_NOMEM,
 * TANDEM_ERR_TOOBIG past SVG_MAX_BYTES. */
tandem_err report_ladder_svg(const json_t *ladder, char **out, size_t *len);

#endif
