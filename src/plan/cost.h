/* cost.h: what one request and one load of a model cost on each kind of
 * device, measured where tandem has run the model, estimated from its header
 * where it has not.
 *
 * Measurements live in the footprint cache beside the memory figures
 * ($TANDEM_CACHE/footprints/cost-<model header sha>-b<engine build>.json),
 * one record per device kind, as running sums (decayed past COST_KEEP
 * samples so that old conditions fade). Every engine tandem supervises feeds
 * them: load time (spawn to ready), the first answer's extra time, and
 * request time per prompt token. The estimate, and its measured error, are
 * documented in docs/placement.md. */
#ifndef TANDEM_COST_H
#define TANDEM_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "plan/plan.h"

/* Where a model's engine computes: a GPU holding its layers, or the CPU. */
enum cost_device { COST_GPU, COST_CPU, COST_DEVICE_COUNT };

/* Static names: "gpu", "cpu". */
const char *cost_device_name(enum cost_device d);

/* Samples beyond which the sums are halved. */
#define COST_KEEP 64

/* Running sums for one model on one device kind. */
struct cost_record {
    uint64_t loads;       /* engine starts that became ready */
    double load_ms;       /* their spawn-to-ready times, summed */
    uint64_t firsts;      /* first answers after a load (not counted in requests) */
    uint64_t first_tokens; /* their prompt tokens, summed */
    double first_ms;      /* their engine times, summed */
    uint64_t requests;    /* later answered requests with a token count */
    uint64_t tokens;      /* their prompt tokens, summed */
    double request_ms;    /* their engine times, summed */
};

/* One model's expected costs on one device kind, in seconds. */
struct cost_figure {
    double token_s;       /* per prompt token of a request */
    double load_s;        /* spawn to ready, plus the first answer's extra time */
    bool token_measured;  /* token_s comes from the cache (else the estimate) */
    bool load_measured;   /* load_s likewise */
};

/* Per-device figures of one model. */
struct cost_model {
    struct cost_figure on[COST_DEVICE_COUNT];
};

/* The estimate's constants; docs/placement.md gives their basis. */
#define COST_GPU_FLOPS 30e12          /* effective prefill FLOP/s of a 6 GiB-class GPU */
#define COST_CPU_FLOPS_PER_CORE 80e9  /* effective FLOP/s per core, when nothing is measured */
#define COST_SPAWN_S 0.35             /* process start to a listening server */
#define COST_GPU_INIT_S 1.5           /* a GPU engine's backend start (context, libraries) */
#define COST_GPU_LOAD_BPS 0.7e9       /* bytes per second, file to GPU memory */
#define COST_CPU_LOAD_BPS 4e9         /* bytes per second, mapping a cached file */
#define COST_REQUEST_S 0.01           /* fixed part of a request: HTTP, template, readout */

/* Adds delta to the record of (model, engine build, device) in the cache
 * (read, add, decay, write a temporary file, rename). model_path is kept for
 * people reading the file. Returns TANDEM_ERR_IO with err[errlen] naming the
 * path, TANDEM_ERR_NOMEM. */
tandem_err cost_record_add(const struct plan_model *m, int64_t engine_build, enum cost_device d,
                           const struct cost_record *delta, char *err, size_t errlen);

/* Loads the record of (model, build, device) into *out (output; zeros when
 * none). Returns TANDEM_ERR_NOTFOUND when none is cached, TANDEM_ERR_FORMAT
 * for a damaged file. */
tandem_err cost_record_load(const struct plan_model *m, int64_t engine_build, enum cost_device d,
                            struct cost_record *out);

/* This host's effective CPU FLOP/s: the median of 2 x parameters x tokens /
 * time over every CPU record in the cache for engine_build (one scan of the
 * cache: call it once per plan), else, or when use_measured is false,
 * COST_CPU_FLOPS_PER_CORE x online cores. *measured (optional, output) says
 * which. */
double cost_cpu_flops(int64_t engine_build, bool use_measured, bool *measured);

/* The estimate from the header alone: 2 x parameters FLOPs per token at
 * flops (the device's); COST_SPAWN_S (plus COST_GPU_INIT_S on a GPU) plus
 * the weights at the device's load rate. */
void cost_estimate(const struct plan_model *m, enum cost_device d, double flops,
                   struct cost_figure *out);

/* m's figures on both devices: the cache's measurements where present
 * (unless use_measured is false), the estimate elsewhere, the CPU's at
 * cpu_flops (from cost_cpu_flops()). */
void cost_of(const struct plan_model *m, int64_t engine_build, bool use_measured,
             double cpu_flops, struct cost_model *out);

/* Expected seconds of one request of tokens prompt tokens from figure f. */
double cost_request_s(const struct cost_figure *f, uint32_t tokens);

#endif
