/* test_hand_runs.h: evaluation sets and runs built by hand, for the unit
 * tests of what scores and compares runs (summary, drift, thresholds). */
#ifndef TANDEM_TEST_HAND_RUNS_H
#define TANDEM_TEST_HAND_RUNS_H

#include <stddef.h>

#include "eval/eval.h"
#include "eval/evalset.h"

/* Three cases: "one", choice r (a, b), gold a; "two", noul n, gold true;
 * "three", choice s (c, d), gold c, then score u (lo, mid, hi) without gold. */
extern const char *const hand_lines[3];

/* A set of the n dataset lines (docs/eval-format.md), path "hand.jsonl",
 * its questions and gold questions counted. Fails the test on a bad line.
 * Release with evalset_free(). */
struct evalset *hand_set(const char *const *lines, size_t n);

/* A run of set (borrowed, must outlive it) with repeat repeats: p[r *
 * n_cases + c] is what case c answered in repeat r, its distributions in
 * question order (eval_case_width() doubles, copied), or NULL for a request
 * that failed with HTTP 503. Release with eval_run_free(). */
struct eval_run *hand_run(const struct evalset *set, unsigned repeat, const double *const *p);

#endif
