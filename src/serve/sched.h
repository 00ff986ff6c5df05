/* sched.h: residency and scheduling for `tandem serve`.
 *
 * The scheduler owns one engine child per resident model and every request
 * that waits for, or runs on, one. It lives on the daemon's libevent loop and
 * never blocks it: spawning is fork+exec, readiness is an asynchronous
 * GET /health every 50 ms, a stop is SIGTERM then a SIGKILL timer, and an
 * exit arrives on the child's pidfd.
 *
 * A request is a job: it is admitted into one bounded queue (a full queue is
 * refused), waits until its model is resident with a free slot (loading it
 * on demand, evicting idle models when memory is short), is handed the
 * engine's unix socket, and ends when its owner calls sched_job_done, or when the
 * scheduler fails it (deadline, engine crash) through its fail callback.
 * Jobs for the resident model are grouped so that two alternating clients do
 * not force a swap per request, within a bound (scheduling.group_limit and
 * scheduling.max_wait). */
#ifndef TANDEM_SCHED_H
#define TANDEM_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <jansson.h>

#include "base/err.h"
#include "plan/place.h"
#include "plan/plan.h"
#include "base/nvml.h"
#include "serve/events.h"
#include "serve/prom.h"
#include "serve/sched_policy.h"

struct sched;     /* opaque */
struct sched_job; /* opaque; owned by the scheduler */

/* enum sched_state (SCHED_UNLOADED, SCHED_LOADING, SCHED_RESIDENT,
 * SCHED_STOPPING, SCHED_FAILED) is defined in serve/sched_policy.h. */

/* One model the scheduler may load. Copied by sched_add_model, except model
 * (borrowed: it must outlive the scheduler). */
struct sched_model_spec {
    const char *name;
    const char *path;
    const struct plan_model *model;
    struct plan_settings settings;   /* resolved launch settings (explicit ctx, ngl, gpu,
                                      * threads) */
    int32_t device;                  /* the GPU index its layers use, or PLACE_CPU */
    uint64_t gpu_bytes, host_bytes;  /* the planned (or measured) footprint: gpu_bytes on
                                      * that GPU */
    int64_t keep_alive_ms;           /* idle time before unload; < 0 = forever */
    int64_t load_timeout_ms;
    int64_t load_estimate_ms;        /* expected spawn to ready before one is measured
                                      * here (the cost model's); 0 = unknown */
    bool pin;                        /* loaded at start, never evicted */
    int32_t priority;                /* eviction order: lower priority goes first,
                                      * least recently used among equals */
    char *const *extra_args;         /* NULL-terminated or NULL; copied */
};

struct sched_params {
    const char *engine;       /* llama-server binary; copied */
    const char *log_dir;      /* <log_dir>/<model>.log per child; copied */
    uint32_t n_gpus;                 /* GPUs budgeted (0 = none) */
    uint64_t gpu_budget[PLACE_MAX_GPUS], host_budget;
    bool simulated;                  /* the GPU is planned but absent: engines run on the
                                      * CPU (status says so; no CUDA_VISIBLE_DEVICES) */
    bool prefetch;                   /* read the next model's file ahead while the old
                                      * engine drains, when host RAM allows */
    uint32_t queue_depth;     /* waiting jobs admitted in all */
    uint32_t group_limit;     /* jobs a resident model may start while another waits */
    int64_t max_wait_ms;      /* ... or until it has held the device this long (from its
                               * readiness) while another waits */
    int64_t stop_grace_ms;    /* SIGTERM to SIGKILL */
    uint32_t max_restarts;    /* crashes of one model within 60 s that mark it failed
                               * (crash-loop protection); 0 = 5 */
    struct prom *metrics;     /* borrowed; NULL = none */
    struct events *events;    /* where model, queue and memory events go (docs/serve.md,
                               * Events); borrowed; NULL = none */
    struct nvml *nvml;        /* per-process GPU memory for the memory events; borrowed;
                               * NULL = none */
};

/* Where a job's time went, in milliseconds. */
struct sched_timing {
    int64_t queued_ms;  /* waiting while the model was resident but busy, or for memory */
    int64_t loading_ms; /* waiting while its model was loading */
    int64_t running_ms; /* since it was handed the engine */
};

/* How a job's owner learns what happened. start is called when the job may
 * use the engine listening on the unix socket at socket_path (borrowed for
 * the call; upstream_start copies it): once, or once more after retry. fail is
 * called at most once, when the scheduler ends the job (status 502
 * `engine_failed`, 503 shutting down or model unusable or failed, 504
 * deadline, with type and message for the error body); the job is freed
 * when fail returns and must not be touched again.
 *
 * retry, when not NULL, makes the job idempotent: when its engine fails
 * before the owner has sent the client a byte of the answer (the engine
 * exits, its connection fails, or it answers 5xx: sched_job_engine_error),
 * the scheduler puts the job back at the head of the queue, once, if its
 * deadline leaves time for the engine's restart, and calls retry: the
 * owner drops its engine request and waits for start again. Without retry
 * (a generation, a stream), an engine failure fails the job with 502. */
struct sched_job_ops {
    void (*start)(struct sched_job *job, const char *socket_path, void *user);
    void (*fail)(struct sched_job *job, int status, const char *type, const char *message,
                 void *user);
    void (*retry)(struct sched_job *job, void *user);
};

/* Creates a scheduler on base (borrowed). Returns NULL on OOM. */
struct sched *sched_new(struct event_base *base, const struct sched_params *p);

/* Stops every child at once (SIGKILL), fails nothing, frees everything.
 * Jobs still held are freed without callbacks. sched_free(NULL) is a no-op. */
void sched_free(struct sched *s);

/* Adds a model; returns its index in *index. TANDEM_ERR_NOMEM. */
tandem_err sched_add_model(struct sched *s, const struct sched_model_spec *spec, size_t *index);

/* Starts loading every pinned model. */
void sched_preload(struct sched *s);

/* Admits a job for model index with an absolute deadline (host_now_ms() based;
 * <= 0 = none). *position (output) is how many jobs wait ahead of it (0 when
 * it starts at once). ops->start may be called before this returns. Returns
 * TANDEM_ERR_TOOBIG when the queue is full (*job NULL; the caller answers
 * 429), TANDEM_ERR_TIMEOUT when the model holds no ready engine and its
 * expected load (the last one measured here, else the spec's estimate) ends
 * after the deadline (the caller answers 504 at once), TANDEM_ERR_RANGE for a
 * bad index, TANDEM_ERR_UNSUPPORTED while shutting down, TANDEM_ERR_ENGINE
 * while the model is failed and backing off (sched_model_failure says why),
 * TANDEM_ERR_NOMEM.
 *
 * prompt is a key of what the engine's answer depends on (a hash of the
 * request's state, or of its messages; 0 = unknown). When it equals the
 * key of the job last started on the same single-slot engine, the scheduler
 * erases the engine's slot before ops->start, so that an exact repeat is
 * evaluated whole and gets the first answer's bytes (docs/serve.md,
 * Determinism). */
tandem_err sched_submit(struct sched *s, size_t index, int64_t deadline_ms, uint64_t prompt,
                        const struct sched_job_ops *ops, void *user, struct sched_job **job,
                        uint32_t *position);

/* The owner is finished with a started job (it answered, or its client went
 * away): frees the slot and the job. ok = the engine answered normally. */
void sched_job_done(struct sched_job *job, bool ok);

/* The owner gives up on a job (its client disconnected), started or not:
 * frees it without callbacks. */
void sched_job_cancel(struct sched_job *job);

/* The engine connection of a started job failed. The scheduler waits briefly
 * for the child's exit so the error can name the exit status, then fails the
 * job (502) with upstream_message if the child lives on. */
void sched_job_upstream_failed(struct sched_job *job, const char *upstream_message);

/* The engine answered a started job with status (>= 500) and message,
 * before the owner sent the client anything. Returns true when the job was
 * put back in the queue to be resent (see sched_job_ops.retry; the owner
 * waits for start again), false when the owner answers the error itself:
 * the job is not idempotent, was resent already, or its deadline is too
 * close. */
bool sched_job_engine_error(struct sched_job *job, int status, const char *message);

/* The engine's answer to a started job reported tokens prompt tokens: its
 * running time per token feeds the cost cache (cost.h) when the job ends. */
void sched_job_tokens(struct sched_job *job, long tokens);

/* The owner of a started job knows that its next job goes to model next
 * (a pipeline's verify stage after its decide stage). When next holds no
 * engine, its file is read ahead and, if it fits beside everything now, it
 * starts loading; and once this job ends, its model does not wait for this
 * client to come back (no grouping linger), so a swap to next starts at once. */
void sched_job_lookahead(struct sched_job *job, size_t next);

/* The job's timing so far. */
void sched_job_timing(const struct sched_job *job, struct sched_timing *t);

/* The job's model index. */
size_t sched_job_model(const struct sched_job *job);

/* Explicit residency control (admin routes). load: starts loading if
 * unloaded; when idle models must go first, stops them and loads once they
 * have exited; TANDEM_ERR_TOOBIG when it cannot fit now even after evicting
 * every idle model. unload: stops it when idle, refusing
 * (TANDEM_ERR_UNSUPPORTED) while it has jobs. TANDEM_ERR_RANGE for a bad index. */
tandem_err sched_load(struct sched *s, size_t index);
tandem_err sched_unload(struct sched *s, size_t index);

/* Begins shutdown: new jobs are refused; queued jobs whose model is resident
 * or loading stay queued and run, the others (they would need a load) fail
 * with 503; running jobs continue. Idle engines stop. done (may be NULL) is
 * called once every job has finished and every child has exited (after
 * SIGTERM, then SIGKILL past the grace). */
void sched_shutdown(struct sched *s, void (*done)(void *user), void *user);

/* Forces the end of a shutdown: queued and running jobs fail with 503 and
 * children are killed. */
void sched_shutdown_now(struct sched *s);

/* The number of models, model index's name (the config's, borrowed), its state now,
 * and a state's name as /v1/status shows it ("resident", "loading", ...). */
size_t sched_model_count(const struct sched *s);
const char *sched_model_name(const struct sched *s, size_t index);
enum sched_state sched_model_state(const struct sched *s, size_t index);
const char *sched_state_name(enum sched_state st);

/* When model index is failed (it crashed limits.max_restarts times within
 * 60 s, or its engine cannot be started) and still backing off: the cause
 * (borrowed, valid until the next scheduler event), with *retry_in_ms the
 * time until the next try. NULL otherwise. */
const char *sched_model_failure(const struct sched *s, size_t index, int64_t *retry_in_ms);

/* Counts across the scheduler's life, for tests and status. */
struct sched_counts {
    uint64_t loads, evictions, crashes;
    uint64_t retries;     /* jobs resent after an engine failure */
    uint64_t prefetches;  /* reads ahead of a load */
    uint64_t lookaheads;  /* pipelines that announced this model as their next stage */
    uint32_t waiting, running;
};
void sched_model_counts(const struct sched *s, size_t index, struct sched_counts *out);

/* The connection pool to the engines (owned by s, valid until sched_free).
 * Every exchange with a local engine goes through it, so that an engine's
 * pooled connections are freed when the engine goes. */
struct upstream_client; /* serve/upstream.h */
struct upstream_client *sched_engine_client(struct sched *s);

/* Engine slots of the resident models: *busy running a job, *total in all. */
void sched_slots(const struct sched *s, uint32_t *busy, uint32_t *total);

/* The scheduler's state as JSON (new reference): budget and use, the queue,
 * and per model its state, footprint, pid, socket, jobs and counts. NULL on OOM. */
json_t *sched_status_json(const struct sched *s);

/* Memory now, planned against measured (the `memory` event; docs/serve.md,
 * Events): per device its budget, the planned bytes of the engines holding
 * memory and what they measure (the sum of their resident sets on the host;
 * NVML's per-process use on a GPU; null when nothing is measured), and per
 * such engine the same. Returns a new reference; NULL on OOM. */
json_t *sched_memory_json(const struct sched *s);

#endif
