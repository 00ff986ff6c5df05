/* sched_internal.h: what the scheduler's files share (sched.c, sched_status.c,
 * sched_erase.c); nothing outside serve/sched*.c includes it.
 *
 * The scheduler's state: its models, their engines and counters, and its
 * jobs, as sched.c keeps them. sched_status.c reads them to render the
 * status, memory and event JSON and the metrics; sched_erase.c drives a
 * job's slot erase. The decisions (sched_policy.h) see a model only through
 * its view, sched_model_view. */
#ifndef TANDEM_SCHED_INTERNAL_H
#define TANDEM_SCHED_INTERNAL_H

#include <sys/queue.h>

#include "engine/engine_child.h"
#include "engine/engine_progress.h"
#include "engine/engine_rundir.h"
#include "plan/cost.h"
#include "serve/sched.h"
#include "serve/sched_policy.h"

#define CRASH_WINDOW_MS 60000  /* crashes this close together count toward a crash loop */
#define RECENT_ANSWERS 16      /* answer times kept per model, for the deadline message */

enum sched_job_phase { SCHED_JOB_WAITING, SCHED_JOB_RUNNING, SCHED_JOB_FAILING };

struct sched_model;

struct sched_job {
    TAILQ_ENTRY(sched_job) link; /* in s->waiting or m->running */
    struct sched *s;
    struct sched_model *m;
    const struct sched_job_ops *ops;
    void *user;
    enum sched_job_phase phase;
    int64_t submitted, started, deadline, loading_ms;
    struct event *timer; /* the deadline; then the wait for an exit status */
    char *upstream_msg;
    uint32_t failures;   /* engine failures it lived through (2 = no more resends) */
    long tokens;         /* prompt tokens the engine reported; <= 0 = unknown */
    size_t next;         /* the model the owner goes to next, or SIZE_MAX */
    uint64_t prompt;     /* what its answer depends on (sched_submit); 0 = unknown */
    struct upstream_call *erase; /* the slot check or erase that precedes its start */
    struct event *erase_wait;    /* the next slot check, while the engine is still busy */
};
TAILQ_HEAD(sched_job_list, sched_job);

struct sched_model {
    struct sched *s;
    size_t index;
    char *name, *path;
    const struct plan_model *pm;
    struct plan_settings settings;
    int32_t device;          /* GPU index, or PLACE_CPU */
    uint64_t gpu, host;
    int64_t keep_alive_ms, load_timeout_ms, load_estimate_ms;
    bool pin;
    bool load_asked; /* an admin load waits for evicted engines to exit */
    int32_t priority;
    char **extra;
    enum sched_state state;
    struct engine_child *child;
    char log_path[4200];
    struct event *exit_ev;
    struct event *timer;     /* loading: health poll; stopping: SIGKILL; resident: keep-alive */
    struct event *load_ev;   /* loading: the load timeout */
    struct event *retry_ev;  /* backoff over: kick */
    struct upstream_call *health;
    struct sched_job_list running;
    uint32_t n_running, n_waiting, group_count;
    int64_t *crash_at;       /* the last max_restarts crash times, a ring */
    uint64_t crash_next;     /* where the next one goes (mod max_restarts) */
    uint32_t relapses;       /* times failed since the last answer: the back-off's exponent */
    bool draining, stop_asked;
    int64_t last_used, load_started, ready_at, retry_at;
    uint64_t loads, evictions, crash_total, prefetches, lookaheads, retries;
    uint64_t answered; /* jobs that ran to a successful end */
    uint64_t measured_gpu, measured_host;
    bool handed_off;         /* its last client moved on to another model (lookahead) */
    bool prefetched;         /* its file was read ahead for the next load (once per load) */
    bool first_pending;      /* ready, and no answer yet: the next one is the first */
    int64_t stop_started;    /* when the current stop was asked */
    int64_t stop_ms, ready_ms, first_ms; /* the last swap's parts; -1 = not yet */
    struct cost_record cost; /* samples not yet written to the cost cache */
    char last_error[1024];
    uint64_t file_bytes;       /* the model file's size, for the load's progress */
    struct engine_progress *progress; /* the load's, while it has a child */
    struct engine_progress_sample load; /* its last sample */
    bool crashed_last;         /* its last engine crashed: the next load is a restart */
    uint64_t last_prompt;      /* the prompt key of the last job started on this engine */
    int64_t recent_ms[RECENT_ANSWERS]; /* submission to answer of its last answers, a ring */
    uint32_t n_recent;         /* answers recorded there in all */
    bool erase_warned;         /* an erase failed once: said on stderr */
};

struct sched {
    struct event_base *base;
    struct sched_params p;
    struct sched_policy policy;    /* the decisions' limits, from p */
    struct sched_policy_model *view; /* every model's view, refreshed for each decision */
    char *engine, *log_dir;
    struct sched_model **models;
    size_t n_models;
    struct sched_job_list waiting;
    uint32_t n_waiting;
    struct upstream_client *http;
    struct engine_rundir *run; /* the engines' sockets and slot folders; made at the first spawn */
    struct event *starve_ev;
    struct event *queue_ev, *memory_ev; /* queue events (coalesced), memory samples */
    bool shutting_down;
    void (*done)(void *);
    void *done_user;
    struct prom_metric *m_loads, *m_evictions, *m_crashes, *m_load_seconds, *m_resident,
        *m_queue, *m_state, *m_device, *m_prefetches, *m_retries, *m_failed;
};

/* The policy's view of m (sched_policy.h), into *v (output). */
void sched_model_view(const struct sched_model *m, struct sched_policy_model *v);

#endif
