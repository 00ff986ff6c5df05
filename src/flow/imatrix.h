/* imatrix.h: an importance matrix from the user's own decision requests, as
 * a library call: `tandem imatrix` and the quantization ladder build one
 * here. The engine's side (the render server, its routes and answers, and
 * llama-imatrix's flags) is engine/engine_imatrix.h. */
#ifndef TANDEM_FLOW_IMATRIX_H
#define TANDEM_FLOW_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "eval/evalset.h"

/* The defaults of the calibration split (evalset_split). */
#define IMATRIX_DEFAULT_SHARE 0.5
#define IMATRIX_DEFAULT_SEED 0

/* Progress: phase is "render" (done/total prompts) or "imatrix" (0/chunks when
 * it starts, chunks/chunks when it ends; 0/0 = unknown). Called on the
 * caller's thread. */
typedef void (*imatrix_progress_fn)(void *user, const char *phase, size_t done, size_t total);

/* One build. Every pointer is borrowed for the call. */
struct imatrix_params {
    const char *model;          /* the decision model's GGUF */
    const struct evalset *set;  /* the cases */
    const bool *use;            /* per case: true = render it; NULL = every case */
    const char *out;            /* the importance matrix (GGUF) to write, atomically */
    const char *llama_server;   /* --llama-server flag, or NULL for the usual lookup
                                 * (llama-imatrix is taken from the same folder) */
    const char *data_name;      /* recorded as its dataset (imatrix.datasets), e.g. the
                                 * set's path; NULL = set->path */
    uint64_t split_seed;        /* the split that chose use[], recorded as
                                 * tandem.imatrix.seed and tandem.imatrix.calibration_share */
    double split_share;         /* ... when split_share > 0; 0 = no split recorded */
    const char *text_out;       /* also keep the rendered text here; NULL = not kept */
    bool verbose;               /* the engine's logs on stderr */
    imatrix_progress_fn progress; /* NULL = no progress */
    void *progress_user;
};

/* What a build did. */
struct imatrix_stats {
    size_t n_cases;     /* cases rendered */
    size_t n_prompts;   /* prompts rendered: one per question */
    uint64_t n_tokens;  /* tokens of the text as the model reads it; 0 = not counted
                         * (texts over 1 MiB, which hold plenty) */
    uint32_t chunk;     /* tokens per chunk (llama-imatrix -c) */
    uint32_t n_chunks;  /* chunks computed; 0 = not counted */
    double render_s;    /* seconds spent starting the engine and rendering */
    double imatrix_s;   /* seconds in llama-imatrix */
};

/* Returns params with no model, set or output, no split, not verbose. */
struct imatrix_params imatrix_default_params(void);

/* Builds an importance matrix for p->model from the cases of p->set that
 * p->use selects. Each question of each case is sent alone, as a
 * /v1/systemone request, to one llama-server started on the CPU for the
 * model with LLAMA_SERVER_SLOTS_DEBUG=1; the prompt the engine rendered for
 * it (its `tokenizer.chat_template.systemone` and per-type rules, special
 * tokens written out) is read back from GET /slots. The prompts, each
 * followed by "\n", make the text that the engine's llama-imatrix reads with
 * --parse-special. The result, with imatrix.datasets set to p->data_name and
 * tandem.imatrix.* provenance, is written to p->out atomically (temporary
 * file and rename, read back as GGUF); temporary files live in a mkdtemp
 * folder under $TMPDIR (or /tmp) and are removed. *stats (output, optional)
 * says what was done.
 *
 * Returns TANDEM_OK; TANDEM_ERR_UNSUPPORTED with err naming why the engine
 * cannot compute one for this model (the ladder then goes on without);
 * otherwise, with err[errlen] set to one line: TANDEM_ERR_INVAL (not a
 * decision model, no case selected, a question the model cannot answer: the
 * engine's message), TANDEM_ERR_NOTFOUND (no llama-server or llama-imatrix),
 * TANDEM_ERR_RANGE (too little text for one chunk), TANDEM_ERR_CHILD (the
 * engine failed: its last log line), TANDEM_ERR_TOOBIG (text over 256 MiB),
 * or the reader's, spawn's, HTTP and I/O errors. No partial file is left at
 * p->out or p->text_out. */
tandem_err imatrix_build(const struct imatrix_params *p, struct imatrix_stats *stats, char *err,
                         size_t errlen);

#endif
