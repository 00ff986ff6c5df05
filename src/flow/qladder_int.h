/* qladder_int.h: the quantization ladder's run state, shared by its files and by no one else.
 *
 * qladder.c runs the ladder (the cases, the reference, building and judging,
 * the importance matrix, the search, the summary); qladder_rungs.c checks
 * the source and sizes and plans the rungs. Both work on one struct qladder,
 * the way SQLite's files share sqliteInt.h. Outside flow/qladder*.c, use
 * qladder.h. */
#ifndef TANDEM_QLADDER_INT_H
#define TANDEM_QLADDER_INT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/hash.h"
#include "engine/engine_quantize.h"
#include "eval/eval.h"
#include "eval/evalset.h"
#include "eval/ladder.h"
#include "flow/qladder.h"
#include "flow/qladder_plan.h"
#include "gguf/gguf.h"
#include "plan/plan.h"

#define QLADDER_MAX_TYPES 24
#define QLADDER_MAX_PROTECT 16
#define QLADDER_MIB (1024.0 * 1024.0)

struct qladder_variant {
    bool imatrix;
    enum ladder_state state;
    char path[PATH_MAX];
    char reason[600];  /* one line: why it failed or could not be judged */
    json_t *judged;    /* the drift summary's figures; NULL until judged */
    double seconds;    /* what building (when it was built) and judging it took */
    bool cached;       /* the judgement came from an earlier run */
};

struct qladder_rung {
    char type[16];
    struct engine_quant_size size;
    struct qladder_fit fit;    /* where it runs beside the partners */
    size_t n_variants;
    struct qladder_variant v[2];
    char skipped[256];         /* why it was never judged */
};

struct qladder {
    struct qladder_params o;
    double t0;
    char tool[PATH_MAX], out_dir[PATH_MAX], stem[128];
    char src_sha[HASH_SHA256_HEX_LEN + 1], data_sha[HASH_SHA256_HEX_LEN + 1];
    char src_type[16];
    struct gguf *g;
    struct plan_model *pm;
    char *protect[QLADDER_MAX_PROTECT]; /* "^cls\.output\.weight$=f32" */
    size_t n_protect;
    char protect_note[256];
    struct evalset *set;
    struct evalset judged;       /* a view of set: the held-out cases */
    bool *calibration;           /* per case of set */
    size_t n_calibration;
    struct qladder_rung rungs[QLADDER_MAX_TYPES]; /* largest first, once sized */
    size_t n_rungs;
    enum ladder_state states[QLADDER_MAX_TYPES];  /* of each rung: the search's view, the
                                                   * better of its variants */
    struct eval_run *ref;
    size_t ref_questions, ref_sure;
    double ref_accuracy;
    char imatrix[PATH_MAX], imatrix_sha[HASH_SHA256_HEX_LEN + 1], imatrix_note[600];
    double imatrix_seconds; /* building it this run; 0 = given or cached */
    size_t n_judged;        /* rungs judged this run, and the seconds they took */
    double judge_seconds;
    struct qladder_plan plan; /* the budget and the partners */
};

/* qladder.c: seconds on the monotonic clock. */
double qladder_now(void);

/* qladder.c: reports that rung type is in phase (p->progress), with the
 * judgements the search may still need; qladder_progress_end clears the
 * line before a message or the result. */
void qladder_progress(const struct qladder *L, const char *type, const char *phase);
void qladder_progress_end(const struct qladder *L);

/* qladder.c: llama-quantize's parameters for type of L's source (imatrix,
 * log and overrides may be NULL); borrows every string. */
struct engine_quant_params qladder_quant_params(const struct qladder *L, const char *type,
                                                const char *imatrix, const char *log,
                                                const char *const *overrides);

/* qladder_rungs.c: refuses a source that is no decision model, or keeps
 * matrices below Q8_0 (unless allowed), and notes its type. 0, or 1 after a
 * message. */
int qladder_rungs_check_source(struct qladder *L);

/* qladder_rungs.c: one --tensor-type rule per cls.* matrix, kept as stored.
 * 0, or 1 after a message. */
int qladder_rungs_protect_head(struct qladder *L);

/* qladder_rungs.c: sizes every type with a dry run, plans it beside the
 * partners, orders the rungs largest first and sets their variants and
 * states. 0, 1 (failed) or 2 (a bad type list), after a message. */
int qladder_rungs_size(struct qladder *L);

#endif
