/* engine_progress.h: how far a llama-server child has got with its load.
 *
 * Part of the engine module. The phase comes from the child's own log, whose
 * markers are the engine's: "load_tensors:" starts reading the weights,
 * "llama_context: constructing" ends it (the context, its buffers and the
 * warmup follow), and tandem's health check says ready. The fraction of the
 * weights read comes from the child's /proc files, because neither the log
 * (it prints no progress on these loads) nor /proc/<pid>/io's read_bytes (0
 * when the file is in the page cache, as it is on every swap back) says it:
 * the growth of the child's file-backed resident memory (RssFile in
 * /proc/<pid>/status, the mapped weights it has touched) or of its read(2)
 * bytes (rchar in /proc/<pid>/io, a load without mmap), whichever is larger,
 * over the file's size. docs/serve.md gives the measured accuracy. */
#ifndef TANDEM_ENGINE_PROGRESS_H
#define TANDEM_ENGINE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum engine_phase {
    ENGINE_PHASE_SPAWN,   /* exec'd, reading the file's metadata */
    ENGINE_PHASE_WEIGHTS, /* reading the weights */
    ENGINE_PHASE_WARMUP,  /* building the context and warming up */
    ENGINE_PHASE_READY    /* answering */
};

struct engine_progress; /* opaque */

/* One reading of a load's progress. */
struct engine_progress_sample {
    enum engine_phase phase;
    double fraction;    /* of the weights read, 0-1, in ENGINE_PHASE_WEIGHTS and after;
                         * < 0 = unknown (before the weights, or no /proc) */
    int64_t elapsed_ms; /* since engine_progress_new */
};

/* Starts following the load of child pid, whose output goes to log_path
 * (copied), of a model file of file_bytes. Returns NULL on OOM. */
struct engine_progress *engine_progress_new(pid_t pid, const char *log_path, uint64_t file_bytes);

/* Frees p. NULL is a no-op. */
void engine_progress_free(struct engine_progress *p);

/* Reads the log's new lines and the child's /proc files into *out (output).
 * Returns whether the phase changed, or the fraction moved by at least
 * step (e.g. 0.05) or reached 1, since the last sample that returned true. */
bool engine_progress_poll(struct engine_progress *p, double step,
                          struct engine_progress_sample *out);

/* Marks the load ready (the health check answered); *out as above. */
void engine_progress_ready(struct engine_progress *p, struct engine_progress_sample *out);

/* "spawn", "reading weights", "warmup", "ready". */
const char *engine_phase_name(enum engine_phase phase);

#endif
