/* qladder.h: the quantization ladder: the smallest quantization of a decision model that keeps
 * its decisions and fits beside its partner.
 *
 * Every candidate type is sized by the engine's dry run and planned beside
 * the partner by the placement search (qladder_plan.h) before anything is
 * built; the rungs that fit are bisected (eval/ladder.h) toward the smallest
 * one whose decisions stay within the flip gate, each built with the
 * decision head protected, served by the real engine and judged against the
 * source on held-out cases with `tandem drift`'s own comparison. Builds and
 * judgements are cached by their inputs' hashes (qladder_cache.h).
 * docs/quantize.md describes the workflow, its numbers and the summary's
 * JSON (tandem-ladder/1). `tandem quantize --ladder` is its command. */
#ifndef TANDEM_QLADDER_H
#define TANDEM_QLADDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "plan/plan_cli.h"

#define QLADDER_DEFAULT_TYPES "Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_K_S,IQ4_XS,Q3_K_M,IQ3_M,Q2_K"

/* Called as the ladder works: rung (a type, "reference", "imatrix") is in
 * phase ("dry-run", "quantize", "judge 3/20, ..."), elapsed_s seconds after
 * the start; once a rung was judged, left > 0 more judgements may follow,
 * about eta_s seconds of them. rung NULL: clear the line (a message or the
 * result follows). The strings are valid for the call. */
typedef void (*qladder_progress_fn)(void *user, const char *rung, const char *phase,
                                    double elapsed_s, size_t left, double eta_s);

struct qladder_params {
    const char *src;        /* the source and reference GGUF (F32, F16, BF16 or Q8_0) */
    const char *data;       /* the cases: an eval set or an audit log; NULL with plan_only */
    const char *types;      /* comma-separated llama-quantize types */
    const char *imatrix;    /* "auto", "none", or a file */
    const char *with;       /* the partner's GGUF; NULL = none (or plan.config's) */
    const char *model;      /* with plan.config: the config's model that SRC replaces */
    const char *out_dir;    /* where rungs are built and cached; NULL = ./STEM-ladder */
    double max_flip;        /* the gate: the Wilson 95% upper bound of the sure flip rate */
    double margin;          /* a sure answer's top-two probability margin */
    double share;           /* the calibration share of the cases (with a matrix) */
    unsigned repeat;        /* sends per case, >= 1 */
    unsigned timeout_s;     /* per request */
    unsigned seed;          /* of the calibration split */
    bool allow_requantize;  /* accept a source stored below Q8_0 */
    bool verbose;           /* the engines' and tools' logs on stderr */
    bool plan_only;         /* size and plan every rung; build and judge nothing */
    bool all;               /* judge every rung that fits instead of bisecting */
    struct plan_cli plan;   /* the budget and launch settings, as for tandem plan */
    const char *llama_server;  /* NULL = the usual lookup */
    qladder_progress_fn progress; /* NULL = none */
    void *progress_user;
};

/* The defaults of `tandem quantize --ladder`: every type of
 * QLADDER_DEFAULT_TYPES, --imatrix auto, a 2% gate at margin 0.1, half the
 * cases for the matrix, one send per case, 120 s per request. */
struct qladder_params qladder_default_params(void);

/* Runs the ladder. On TANDEM_OK, *summary (output; the caller releases it
 * with json_decref) is the tandem-ladder/1 summary: its "recommendation" is
 * null when no rung passed (or with plan_only). TANDEM_ERR_INVAL: a bad
 * request (too many types, one the engine does not know); another code: the
 * ladder stopped (the source, the cases, the reference, the engine). Either
 * way the reason is on stderr, prefixed "tandem quantize --ladder: ". Borrows
 * p's strings for the call; p->plan is copied. */
tandem_err qladder_run(const struct qladder_params *p, json_t **summary);

#endif
