/* plan.h: the memory planner: what one llama-server process will allocate,
 * per device, before anything is loaded, and which models fit together.
 *
 * Inputs are a model's GGUF header (metadata and tensor table; tensor data is
 * never read) and the launch settings. The arithmetic mirrors the pinned
 * engine (llama.cpp b11434): see plan.c for each rule and its source. */
#ifndef TANDEM_PLAN_H
#define TANDEM_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/hash.h"

/* Where bytes live. GPU is the (single) accelerator; HOST is system RAM. */
enum plan_device { PLAN_DEVICE_GPU, PLAN_DEVICE_HOST, PLAN_DEVICE_COUNT };

/* What the bytes are for, in the order tables print them. */
enum plan_part {
    PLAN_PART_WEIGHTS,   /* model buffers (the mapped file on a CPU) */
    PLAN_PART_KV,        /* attention KV cache */
    PLAN_PART_RECURRENT, /* recurrent state (DeltaNet / Mamba layers) */
    PLAN_PART_COMPUTE,   /* the scheduler's worst-case graph buffer */
    PLAN_PART_OUTPUT,    /* logits and embeddings read back per output */
    PLAN_PART_OVERHEAD,  /* per-process runtime: CUDA context, cuBLAS, pools */
    PLAN_PART_COUNT
};

/* Where a part's number came from. */
enum plan_source {
    PLAN_SOURCE_MODEL,    /* computed from the header */
    PLAN_SOURCE_MEASURED, /* from the footprint cache: what the engine logged */
    PLAN_SOURCE_CONFIG,   /* given by the caller (overhead) */
};

#define PLAN_NGL_AUTO (-1)
#define PLAN_OVERHEAD_DEFAULT UINT64_MAX
/* The default per-process GPU overhead; see docs/planner.md for its basis. */
#define PLAN_GPU_OVERHEAD_BYTES (400ull << 20)

/* Launch settings of one llama-server process, in the engine's terms. */
struct plan_settings {
    uint32_t ctx;        /* -c, total cells over all slots; 0 = the model's training context */
    int32_t ngl;         /* -ngl: layers on the GPU, n_layer + 1 = all (the output layer
                          * counts); PLAN_NGL_AUTO = the most that fits (plan_fit only) */
    uint32_t parallel;   /* -np: slots, >= 1 */
    bool kv_unified;     /* --kv-unified: one KV pool for all slots (else split per slot) */
    uint32_t type_k;     /* -ctk as a ggml type id (GGML F16 = 1) */
    uint32_t type_v;     /* -ctv as a ggml type id */
    bool flash_attn;     /* -fa on */
    uint32_t batch;      /* -b; 0 = the engine default (2048) */
    uint32_t ubatch;     /* -ub; 0 = the engine default (512) */
    bool kv_offload;     /* KV on the layer's device (false = -nkvo: KV on the host) */
    bool swa_full;       /* --swa-full: full-size cache for sliding-window layers */
    bool gpu;            /* a GPU backend is used (false = CPU-only engine) */
    uint32_t threads;    /* -t and -tb: CPU threads; 0 = the engine's default (no effect
                          * on memory, so not part of a footprint's key) */
    bool no_warmup;      /* --no-warmup: skip the engine's empty warm-up decode, which
                          * only delays readiness on a CPU (docs/placement.md); not part
                          * of a footprint's key either */
    uint64_t overhead;   /* per-process GPU overhead bytes; PLAN_OVERHEAD_DEFAULT =
                          * PLAN_GPU_OVERHEAD_BYTES on a GPU, 0 on a CPU */
};

/* Returns the defaults tandem launches with: training context, all layers,
 * one slot, f16 KV, flash attention off (deterministic answers), engine
 * default batches, KV offloaded, GPU backend, default overhead. */
struct plan_settings plan_default_settings(void);

/* Whether a and b ask for the same launch (field by field; padding ignored). */
bool plan_settings_equal(const struct plan_settings *a, const struct plan_settings *b);

/* Per-device, per-part bytes of one process, plus what the plan assumed. */
struct plan_footprint {
    uint64_t bytes[PLAN_DEVICE_COUNT][PLAN_PART_COUNT];
    enum plan_source source[PLAN_PART_COUNT];
    uint32_t n_ctx;       /* cells the engine allocates in all (after its rounding) */
    uint32_t n_ctx_slot;  /* cells one slot can use */
    uint32_t n_ubatch;    /* effective micro-batch */
    int32_t ngl;          /* effective GPU layers (0 on a CPU) */
    uint32_t n_layer_gpu; /* repeating layers on the GPU */
};

/* Sum of one device's parts. */
uint64_t plan_footprint_device_total(const struct plan_footprint *f, enum plan_device d);

/* Sum over devices and parts. */
uint64_t plan_footprint_total(const struct plan_footprint *f);

/* Static lower-case names: "gpu", "host"; "weights", "kv", ...; "model", "measured". */
const char *plan_device_name(enum plan_device d);
const char *plan_part_name(enum plan_part p);
const char *plan_source_name(enum plan_source s);

struct plan_model; /* opaque: the facts of one model file the planner needs */

/* Reads path's GGUF header and extracts the planner's facts. On success *out
 * is a new handle (caller frees with plan_model_free). Returns the reader's
 * errors, TANDEM_ERR_UNSUPPORTED for an architecture the planner cannot size
 * (the message names it), TANDEM_ERR_FORMAT for missing or inconsistent
 * hyperparameters (the message names the key). err[errlen] (optional) gets
 * one line. */
tandem_err plan_model_open(const char *path, struct plan_model **out, char *err, size_t errlen);

/* Releases m. plan_model_free(NULL) is a no-op. */
void plan_model_free(struct plan_model *m);

/* Borrowed facts, valid until plan_model_free(). */
const char *plan_model_path(const struct plan_model *m);
const char *plan_model_arch(const struct plan_model *m);
const char *plan_model_decision_type(const struct plan_model *m); /* "" when none */
uint32_t plan_model_n_layer(const struct plan_model *m);
uint32_t plan_model_ctx_train(const struct plan_model *m);
bool plan_model_is_encoder(const struct plan_model *m); /* whole prompt in one micro-batch */
/* Hex SHA-256 of the header bytes [0, data offset): every fact a footprint
 * depends on lives there, so this names the model in the footprint cache
 * without reading gigabytes of weights. */
const char *plan_model_header_sha256(const struct plan_model *m);
/* Parameters (elements of every tensor) and data bytes of every tensor, as
 * the tensor table gives them: what the cost model (cost.h) scales by. */
uint64_t plan_model_n_params(const struct plan_model *m);
uint64_t plan_model_weight_bytes(const struct plan_model *m);

/* Resolves the settings the engine would really use for m (context 0 = the
 * training context, encoders' batches equal to the context, ngl capped at
 * n_layer + 1, ...) into *out (output). s is borrowed. */
void plan_model_resolve(const struct plan_model *m, const struct plan_settings *s,
                        struct plan_settings *out);

/* Computes the footprint of m under s (ngl must not be PLAN_NGL_AUTO) into
 * *out (output). Every source is PLAN_SOURCE_MODEL except overhead
 * (PLAN_SOURCE_CONFIG when given). Returns TANDEM_ERR_INVAL for ngl auto or
 * parallel 0, TANDEM_ERR_RANGE when a size overflows. */
tandem_err plan_model_footprint(const struct plan_model *m, const struct plan_settings *s,
                                struct plan_footprint *out);

#endif
