/* calibrate.h: refitting a decision model's temperatures from its served
 * answers (`tandem calibrate`), as a library call.
 *
 * An endpoint serving the model answers a dataset once; a power of the
 * served probabilities is fitted per question type (and option-count
 * bucket) on a training split, kept only when the held-out split's NLL
 * improves, and written into a copy of the model as new temperatures with
 * provenance metadata (tandem.calibration.*). The maths is eval/calib.h;
 * this module reads the model, runs the set, fits, and writes the copy.
 * docs/calibrate.md documents the command and its summary. */
#ifndef TANDEM_FLOW_CALIBRATE_H
#define TANDEM_FLOW_CALIBRATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "base/mem.h"
#include "eval/calib.h"
#include "eval/eval.h"
#include "eval/evalset.h"
#include "gguf/gguf.h"

#define CALIBRATE_DEFAULT_HOLDOUT 0.3
#define CALIBRATE_DEFAULT_SEED 1
#define CALIBRATE_DEFAULT_MIN_BUCKET 30
#define CALIBRATE_MIN_TYPE_TRAIN 10 /* training answers a type fit needs */
#define CALIBRATE_MIN_TYPE_HELD 5   /* held-out answers a type fit needs */
/* Groups one fit can hold: each type, and each of its buckets. */
#define CALIBRATE_GROUPS_MAX (S1Q_TYPE_COUNT * (1 + CALIB_BUCKETS))

/* One calibration. Every pointer is borrowed for the call. */
struct calibrate_params {
    const char *command;      /* for messages: "tandem calibrate" */
    const char *model;        /* MODEL.gguf: read, hashed, and copied */
    const char *data;         /* the dataset (docs/eval-format.md) */
    const char *out;          /* the calibrated copy, written atomically */
    struct eval_params eval;  /* the run; endpoint NULL = file:MODEL on a private daemon,
                               * model NULL = the request's "model" omitted */
    const char *llama_server; /* for the private daemon; NULL = the usual lookup */
    double holdout;           /* share of the cases held out, 0.05 to 0.95 */
    unsigned seed;            /* of the split */
    unsigned min_bucket;      /* answers a bucket fit needs in each split, >= 1 */
};

/* Returns params with no model, data or output, command "tandem calibrate",
 * eval_default_params(), and the default holdout, seed and min_bucket. */
struct calibrate_params calibrate_default_params(void);

/* What calibrate_run leaves. Caller-allocated; release with
 * calibrate_result_deinit. */
struct calibrate_result {
    json_t *summary;       /* on success: the summary, the --json object of
                            * docs/calibrate.md; owned */
    struct mem_buf diag;   /* on failure: what to tell the user, whole lines
                            * ("\n"-ended) as the command prints them */
    bool endpoint_refused; /* on failure: model_endpoints_start refused the endpoint
                            * as given (said on stderr; a usage error) */
};

/* Releases what r holds. r itself is the caller's. */
void calibrate_result_deinit(struct calibrate_result *r);

/* Calibrates: reads p->model's decision metadata and temperatures, refuses
 * p->out naming the model, hashes the model and the data, points the run at
 * p->eval.endpoint (or serves p->model on a private daemon, stopped before
 * returning), runs the set once (every request must be answered), splits the
 * cases (calib_split of p->holdout and p->seed), fits (calibrate_fit), and
 * writes the copy (calibrate_write). *out (output) is initialised here.
 * Returns TANDEM_OK with out->summary set; otherwise the failing step's
 * error with out->diag saying why (the endpoint's own messages go to stderr,
 * and out->endpoint_refused says whether it refused the spec as given).
 * TANDEM_ERR_RANGE means no question type could be fitted. Nothing is left
 * at p->out on failure. */
tandem_err calibrate_run(const struct calibrate_params *p, struct calibrate_result *out);

/* --- the steps, for callers and tests ------------------------------------------ */

/* A decision model's metadata as calibrate needs it. */
struct calibrate_model {
    struct gguf *g;            /* the open model; owned */
    char arch[128];            /* general.architecture */
    char dtype[64];            /* {arch}.decision.type */
    struct calib_temps temps;  /* every {arch}.decision.temperature.*, as the engine
                                * reads it */
};

/* Opens the GGUF at path (borrowed) into *m (output; release with
 * calibrate_model_close, also after a failure). Returns TANDEM_OK; or, with
 * err[errlen] set to one line: the reader's error, TANDEM_ERR_FORMAT (no
 * architecture, not a decision model, a temperature the engine does not
 * accept or too many of them), TANDEM_ERR_UNSUPPORTED (decision type lev). */
tandem_err calibrate_model_open(const char *path, struct calibrate_model *m, char *err,
                                size_t errlen);

/* Closes what calibrate_model_open opened; m may be zeroed. */
void calibrate_model_close(struct calibrate_model *m);

/* One scored answer with gold. */
struct calibrate_answer {
    struct calib_item it;   /* the served distribution and the gold; borrowed */
    enum s1q_type type;
    size_t bucket;          /* calib_bucket(it.n) */
    bool held;              /* in the held-out split */
};

/* One fit: a type (bucket -1) or one of its option-count buckets. */
struct calibrate_group {
    enum s1q_type type;
    int bucket;              /* -1: the whole type, else the bucket index */
    size_t n_train, n_held;
    bool fitted, kept;
    double a;                /* the fitted power; NaN when not fitted */
    double t_old, t_new;     /* the group's temperature before and after */
    double nll_before, nll_after, ece_before, ece_after; /* held-out; NaN when not fitted */
    char note[192];          /* why not fitted or not kept; "" otherwise */
};

/* What calibrate_fit decided. Plain data. */
struct calibrate_fit {
    struct calib_temps now;  /* the copy's temperatures, as the engine reads them;
                              * the changed ones are what calibrate_write writes */
    struct calibrate_group groups[CALIBRATE_GROUPS_MAX];
    size_t n_groups;
    size_t n_fitted;         /* types fitted; 0 = nothing can be written */
};

/* Fits served (the model's temperatures) to ans[0..n_ans) (borrowed): each
 * type with answers, when it has CALIBRATE_MIN_TYPE_TRAIN training and
 * CALIBRATE_MIN_TYPE_HELD held-out answers, then its buckets with min_bucket
 * answers in both splits when the type spans more than one bucket. A fit is
 * kept only if it lowers the held-out NLL; a bucket's new temperature is its
 * served one over its power. Fills *out (output). Returns TANDEM_OK or
 * TANDEM_ERR_NOMEM. */
tandem_err calibrate_fit(const struct calib_temps *served, const struct calibrate_answer *ans,
                         size_t n_ans, unsigned min_bucket, struct calibrate_fit *out);

/* Returns the JSON of group g: {"group", "type", "bucket", "n_train",
 * "n_held", "fitted", "a", "t_old", "t_new", "kept", "nll_before",
 * "nll_after", "ece_before", "ece_after", "note"} (NaN as null); caller owns
 * it; NULL when out of memory. */
json_t *calibrate_group_json(const struct calibrate_group *g);

/* Returns {"<arch>.decision.temperature.<suffix>": value} for each changed
 * key of now; caller owns it; NULL when out of memory. */
json_t *calibrate_written_json(const char *arch, const struct calib_temps *now);

/* Writes out (borrowed): the model m with now's changed temperatures as
 * float32 and the tandem.calibration.* keys taken from summary (its
 * model_sha256, data, data_sha256, split.text and groups), atomically.
 * Returns TANDEM_OK; else the editor's error with err[errlen] set to
 * "OUT: why". */
tandem_err calibrate_write(const struct calibrate_model *m, const struct calib_temps *now,
                           const json_t *summary, const char *out, char *err, size_t errlen);

#endif
