/* plan_cli.h: command-line planning options shared by `tandem plan` and
 * `tandem run`. */
#ifndef TANDEM_PLAN_CLI_H
#define TANDEM_PLAN_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "plan/fit.h"
#include "plan/place.h"
#include "plan/plan.h"

struct plan_cli {
    struct plan_settings settings; /* launch settings for every model */
    uint64_t vram, reserve, ram;   /* --vram, --reserve, --ram (bytes) */
    bool have_vram, have_reserve, have_ram;
    bool cpu;                      /* --cpu: plan for a CPU engine */
    bool no_measured;              /* --no-measured: ignore the footprint cache */
    bool json;                     /* --json */
    const char *config;            /* --config FILE (plan only); borrowed from argv */
};

/* getopt_long table of the shared flags (terminated by {0}); the values
 * they return go to plan_cli_option. "help" maps to 'h'. */
extern const struct option plan_cli_options[];

/* Applies one option (c from plan_cli_options, arg its value) to *o.
 * Returns 0, or 2 after printing "tandem: --flag: expected ..." to stderr. */
int plan_cli_option(int c, const char *arg, struct plan_cli *o);

/* Fills *b from the flags: --vram (minus --reserve, default 512 MiB), else
 * NVML device 0, else (or with --cpu) host RAM (--ram or MemAvailable);
 * *total is the device's full size. Returns a static description of where
 * the budget came from. */
const char *plan_cli_budget(const struct plan_cli *o, struct fit_budget *b, uint64_t *total);

/* Fills *pb (output) from the same sources as plan_cli_budget, which filled
 * b: with --vram (or a config's budget.vram), one GPU of b->gpu_bytes, which
 * is simulated when NVML finds none (engines then run on the CPU, planned
 * as though the GPU existed); else every NVML device, its total minus the
 * reserve; else (or with --cpu) none. Returns true when the GPU is simulated. */
bool plan_cli_place_budget(const struct plan_cli *o, const struct fit_budget *b,
                           struct place_budget *pb);

/* fit_footprint_fn: plan_model_footprint, then the footprint cache's
 * measurement for the same resolved settings when *(bool *)user is true. */
tandem_err plan_cli_footprint(const struct plan_model *m, const struct plan_settings *s,
                              struct plan_footprint *out, void *user);

/* Plans model m (named name) alone on budget b at the requested settings
 * want (ngl PLAN_NGL_AUTO = as many layers as fit), using measured
 * footprints when measured is true. On TANDEM_OK, *res holds the verdict and
 * reason, *r the footprint and GPU layers, and *resolved the launch settings
 * (explicit ctx and ngl, b->gpu). Returns fit_models' errors. A verdict of
 * FIT_NO_FIT is still TANDEM_OK: the caller refuses it with res->reason. */
tandem_err plan_cli_fit_one(const char *name, const struct plan_model *m,
                            const struct plan_settings *want, const struct fit_budget *b,
                            bool measured, struct plan_settings *resolved,
                            struct fit_model_result *r, struct fit_result *res);

#endif
