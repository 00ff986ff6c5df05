/* footprint.h: measured memory footprints of engine processes, and their cache.
 *
 * When llama-server starts at -lv 4 it logs every buffer it allocates
 * ("<BUFTYPE> model|KV|RS|compute|output buffer size = X MiB"). This module
 * parses those lines into per-device, per-part bytes and keeps them in the
 * footprint cache ($TANDEM_CACHE/footprints/<key>.json), keyed by the model's
 * header hash, the resolved launch settings and the engine build, so that the
 * planner can prefer what the engine really allocated. */
#ifndef TANDEM_FOOTPRINT_H
#define TANDEM_FOOTPRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/hash.h"
#include "plan/plan.h"

/* What one engine process reported. Parts the log never mentioned stay 0
 * with seen[part] false (e.g. no KV for an encoder). */
struct footprint_measure {
    uint64_t bytes[PLAN_DEVICE_COUNT][PLAN_PART_COUNT];
    bool seen[PLAN_PART_COUNT];
    uint64_t process_bytes; /* NVML's used memory of the process; 0 = not measured */
};

/* Parses the engine log text[len] (need not be NUL-terminated) into *out
 * (output). Buffer types starting with "CPU" (CPU, CPU_Mapped, CPU_REPACK,
 * CUDA_Host is matched as host too) count as host, every other one as GPU.
 * Returns TANDEM_ERR_NOTFOUND when no buffer line is present (for example an
 * engine run below -lv 4). Never reads past len. */
tandem_err footprint_parse_log(const char *text, size_t len, struct footprint_measure *out);

/* Whether any buffer lay on a GPU (the run used a GPU backend with layers on it). */
bool footprint_measure_has_gpu(const struct footprint_measure *m);

/* Derives the launch settings from a llama-server argv (argv[0] is the first
 * argument, not the program) into *settings and points *model at the -m
 * value (borrowed from argv; NULL if absent). Unknown flags are skipped with
 * their value when they take one. Returns TANDEM_ERR_INVAL, with err naming
 * the flag, for a value it cannot read (e.g. -ctk with an unknown type). */
tandem_err footprint_settings_from_argv(int argc, char *const *argv,
                                        struct plan_settings *settings, const char **model,
                                        char *err, size_t errlen);

/* Writes the cache key for (model header hash, resolved settings, engine
 * build) as hex into key[HASH_SHA256_HEX_LEN + 1], and its readable form
 * into canon[cap] (optional: canon may be NULL). */
tandem_err footprint_key(const struct plan_model *m, const struct plan_settings *resolved,
                         int64_t engine_build, char key[HASH_SHA256_HEX_LEN + 1], char *canon,
                         size_t cap);

/* Writes the path of entry name (a key, or another record such as cost.h's)
 * in the footprint cache, $TANDEM_CACHE/footprints/<name>.json, into
 * out[cap], creating the folder when create. Returns the cache root's errors,
 * TANDEM_ERR_TOOBIG when it does not fit in cap. */
tandem_err footprint_cache_path(const char *name, bool create, char *out, size_t cap);

/* Writes o (borrowed) to path atomically: a temporary file, then rename.
 * Returns TANDEM_ERR_IO with err naming the path. */
tandem_err footprint_cache_write(const char *path, json_t *o, char *err, size_t errlen);

/* Stores m under key in the cache (atomic: temp file then rename), with the
 * canonical settings string and model path for humans. Returns TANDEM_ERR_IO
 * with err naming the path. */
tandem_err footprint_store(const char *key, const char *canon, const char *model_path,
                           const struct footprint_measure *m, char *err, size_t errlen);

/* Loads the measurement stored under key into *out (output). Returns
 * TANDEM_ERR_NOTFOUND when none is cached, TANDEM_ERR_FORMAT for a damaged
 * entry (err names the file). */
tandem_err footprint_load(const char *key, struct footprint_measure *out, char *err,
                          size_t errlen);

/* Records one engine run: reads the -lv 4 log at log_path, parses its
 * buffer lines, adds NVML's memory of process pid (when pid > 0 and a GPU is
 * present), resolves s for m (the backend is what the log shows) and stores
 * the measurement under its key. Writes the key and, when canon is not NULL,
 * the canonical settings (outputs). Returns TANDEM_ERR_IO (log unreadable),
 * TANDEM_ERR_NOTFOUND (no buffer lines: err suggests -lv 4), the store's
 * errors; err[errlen] says which. */
tandem_err footprint_record_log(const struct plan_model *m, const struct plan_settings *s,
                                const char *log_path, long pid,
                                char key[HASH_SHA256_HEX_LEN + 1], char *canon, size_t cap,
                                char *err, size_t errlen);

/* Replaces f's weights, KV, recurrent, compute and output parts with the
 * measured ones that m saw, marking them PLAN_SOURCE_MEASURED. Overhead stays
 * (NVML's process bytes, when present, replace the GPU overhead as the
 * remainder the buffers do not explain). */
void footprint_apply(const struct footprint_measure *m, struct plan_footprint *f);

#endif
