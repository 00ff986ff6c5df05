/* sched_policy.h: the scheduler's decisions, as pure functions.
 *
 * The scheduler (sched.c) describes its models as an array of plain views,
 * one per model in index order, and asks this module what to do: whether a
 * waiting job may start, whether a model fits, which residents go to make
 * room for one (and whether their turn is over), whether a pipeline's next
 * stage loads or is read ahead, whether a deadline is out of reach, and how
 * long a failed model backs off. Nothing here holds state, reads a clock or
 * touches an engine, a timer or a file: the caller passes the time, and acts
 * on the answer. So the rules can be tested with made-up models
 * (tests/test_sched_policy.c). */
#ifndef TANDEM_SCHED_POLICY_H
#define TANDEM_SCHED_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/place.h"

enum sched_state { SCHED_UNLOADED, SCHED_LOADING, SCHED_RESIDENT, SCHED_STOPPING, SCHED_FAILED };

/* A resident that just finished keeps its engine this long for its client's
 * next request before a waiting model may take its memory (grouping). */
#define SCHED_POLICY_LINGER_MS 150

/* The limits the decisions respect (from struct sched_params). */
struct sched_policy {
    uint32_t n_gpus;                 /* GPUs budgeted (0 = none) */
    uint64_t gpu_budget[PLACE_MAX_GPUS], host_budget; /* bytes per GPU, bytes of host RAM */
    uint32_t group_limit;            /* jobs a resident may start while another model waits */
    int64_t max_wait_ms;             /* ... or how long it may hold the device meanwhile */
};

/* One model as the decisions see it. Times are host_now_ms() based. */
struct sched_policy_model {
    enum sched_state state;
    int32_t device;                  /* the GPU index its layers use, or PLACE_CPU */
    uint64_t gpu_bytes, host_bytes;  /* its footprint: gpu_bytes on device */
    bool pin;                        /* never evicted */
    int32_t priority;                /* lower goes first */
    uint32_t slots;                  /* jobs its engine runs at once (>= 1) */
    uint32_t running, waiting;       /* its jobs */
    uint32_t group_count;            /* jobs it started while another model waited for memory */
    bool draining;                   /* chosen to go: no new job starts on it */
    bool handed_off;                 /* its last client moved on (pipeline lookahead) */
    int64_t last_used_ms;            /* the last start or end of one of its jobs */
    int64_t ready_at_ms;             /* when its engine became ready */
    int64_t load_started_ms;         /* when its last load began; 0 = never */
    int64_t ready_ms;                /* its last load's spawn to ready; -1 = not measured */
    int64_t load_estimate_ms;        /* the expected load before one is measured; 0 = unknown */
    int64_t retry_at_ms;             /* failed: when its back-off is over */
    int64_t keep_alive_ms;           /* idle time before unload; < 0 = forever */
};

/* Bytes per device: each GPU's, then the host's. */
struct sched_policy_usage {
    uint64_t gpu[PLACE_MAX_GPUS];
    uint64_t host;
};

/* Who asks for memory. */
struct sched_policy_ask {
    size_t model;         /* the index of the model that needs it */
    bool admin;           /* an admin load: idle residents go, at once, and no busy one */
    int64_t submitted_ms; /* else: when its oldest waiting job was submitted */
    int64_t now_ms;
};

/* What make-room decides for a model whose oldest job waits for memory. */
enum sched_policy_room {
    SCHED_POLICY_ROOM_LOAD,     /* it fits beside every model holding memory: load it */
    SCHED_POLICY_ROOM_SETTLING, /* an engine is loading or stopping: decide once it settles */
    SCHED_POLICY_ROOM_EVICT,    /* stop (or drain, when busy) the victims; load once they exit */
    SCHED_POLICY_ROOM_WAIT,     /* not yet: look again once a linger or a turn may be over */
};

/* What a pipeline's announced next stage gets. */
enum sched_policy_ahead {
    SCHED_POLICY_AHEAD_NONE,     /* it holds an engine already, or is backing off */
    SCHED_POLICY_AHEAD_LOAD,     /* it fits beside everything now: start loading it */
    SCHED_POLICY_AHEAD_PREFETCH, /* it does not: read its file ahead */
};

/* Whether a model in state st holds memory (loading, resident, or stopping:
 * a stopping engine's memory is not free until it has exited). */
bool sched_policy_holds_memory(enum sched_state st);

/* Whether m has no job, running or waiting. */
bool sched_policy_idle(const struct sched_policy_model *m);

/* Adds m's footprint to *u (its GPU bytes only when device is a GPU). */
void sched_policy_usage_add(struct sched_policy_usage *u, const struct sched_policy_model *m);

/* Whether models[index] fits beside every other model holding memory, once
 * freed (NULL = nothing) is given back: on each budgeted GPU and on the host. */
bool sched_policy_fits(const struct sched_policy *p, const struct sched_policy_model *models,
                       size_t n, size_t index, const struct sched_policy_usage *freed);

/* Whether a waiting job of m may start now: m is resident, not draining,
 * and has a free slot. */
bool sched_policy_can_start(const struct sched_policy_model *m);

/* Whether a job that starts on models[index] uses up its turn: another model
 * waits for memory (it has waiting jobs and holds none). */
bool sched_policy_counts_turn(const struct sched_policy_model *models, size_t n, size_t index);

/* Whether resident r has had its turn while a job submitted at submitted_ms
 * waits for another model: r started group_limit jobs meanwhile, or it has
 * held the device for max_wait of that wait. The wait counts from r's
 * readiness, so a load slower than max_wait does not end r's turn before it
 * starts. This is the starvation bound. */
bool sched_policy_turn_over(const struct sched_policy *p, const struct sched_policy_model *r,
                            int64_t submitted_ms, int64_t now_ms);

/* Chooses the residents to stop so that models[ask->model] fits, into
 * victims[] (room for n indexes; output) in the order chosen, their count in
 * *n_victims (output). Never a pinned one, and only those whose going frees
 * memory it lacks; lowest priority, then least recently used, first. First
 * idle ones whose client has not come back within SCHED_POLICY_LINGER_MS
 * (or who moved on, or whose turn is over); then, unless ask is an admin
 * load, busy (or draining) ones whose turn is over. Returns whether it fits
 * once the victims are gone. */
bool sched_policy_victims(const struct sched_policy *p, const struct sched_policy_model *models,
                          size_t n, const struct sched_policy_ask *ask, size_t *victims,
                          size_t *n_victims);

/* Makes room for models[ask->model] (not an admin ask), whose oldest job
 * waits: returns the decision, with the victims (victims[], room for n;
 * *n_victims; outputs) when it is SCHED_POLICY_ROOM_EVICT. */
enum sched_policy_room sched_policy_room(const struct sched_policy *p,
                                         const struct sched_policy_model *models, size_t n,
                                         const struct sched_policy_ask *ask, size_t *victims,
                                         size_t *n_victims);

/* What models[next], announced as a running pipeline's next stage, gets now. */
enum sched_policy_ahead sched_policy_lookahead(const struct sched_policy *p,
                                               const struct sched_policy_model *models, size_t n,
                                               size_t next, int64_t now_ms);

/* Whether m cannot be ready before deadline_ms: it holds no ready engine and
 * the rest of its expected load (measured here, else estimated) ends later.
 * No deadline (<= 0) and unknown load times never refuse. */
bool sched_policy_loads_past(const struct sched_policy_model *m, int64_t deadline_ms,
                             int64_t now_ms);

/* Milliseconds until keep_alive unloads m, were it to stay idle (0 when due);
 * -1 when it will not (not resident, busy, pinned, or kept forever). */
int64_t sched_policy_until_unload(const struct sched_policy_model *m, int64_t now_ms);

/* How long a model that failed after relapses earlier failures (since its
 * last answer) backs off: 2 s, doubling with each relapse, at most 300 s. */
int64_t sched_policy_backoff_ms(uint32_t relapses);

#endif
