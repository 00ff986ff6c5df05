/* sched.c: which models are resident, and which request runs when.
 *
 * Design. Everything happens on the loop, driven by one function, kick(),
 * called after every change (a job arrives or ends, a child becomes ready or
 * exits, a timer fires). kick() first starts waiting jobs, oldest first, on
 * resident models with free slots; then looks at the oldest job whose model
 * is not resident and makes room for it:
 *   1. load it if it fits beside every model holding memory (resident,
 *      loading, or stopping: a stopping child's memory is not free until it
 *      has exited, so nothing loads into it before);
 *   2. else stop idle residents, lowest priority then least recently used
 *      first, never a pinned one, if that frees enough;
 *   3. else drain busy residents (no new jobs start on them; they stop when
 *      their running jobs end) once they have had their turn: they started
 *      group_limit jobs while this one waited, or they have held the device
 *      for max_wait of its wait (counted from their readiness, so a slow load
 *      does not use up the turn). An idle resident whose client may come
 *      back (it finished a job less than GROUP_LINGER_MS ago) counts as busy.
 *      That is the grouping that keeps alternating clients from forcing a
 *      swap per request, and max_wait is its starvation bound.
 * Only the oldest such job is served this way (head of line for memory), so
 * a stream of small models cannot starve a large one.
 *
 * A job's deadline is a timer; a job that has not started or finished by then
 * fails with 504 and where its time went.
 *
 * Engine failures. A child that exits unasked is restarted on the next
 * demand. Its running jobs go back to the head of the queue when they are
 * idempotent (ops->retry), have not been resent before, and their deadline
 * leaves time for the restart; the others fail with 502 engine_failed
 * naming the exit status and the log's last line. Jobs waiting for a load
 * that crashed wait for one more. A connection failure of a live engine or
 * its 5xx answer resends the same way, to the same engine. After
 * max_restarts crashes within CRASH_WINDOW_MS the model is failed: its jobs
 * get 503 with the cause until a back-off that doubles with each relapse
 * (FAILED_BACKOFF_FIRST_MS to FAILED_BACKOFF_MAX_MS) is over. */
#include "serve/sched.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine/engine_child.h"
#include "engine/engine_progress.h"
#include "engine/engine_rundir.h"
#include "plan/cost.h"
#include "plan/footprint.h"
#include "base/host.h"
#include "base/prefetch.h"
#include "serve/upstream.h"
#include "base/mem.h"
#include "version.h"

#define HEALTH_POLL_MS 50
#define UPSTREAM_EXIT_WAIT_MS 250 /* how long an engine hang-up waits for its exit status */
#define CRASH_WINDOW_MS 60000
#define DEFAULT_MAX_RESTARTS 5
#define FAILED_BACKOFF_FIRST_MS 2000
#define FAILED_BACKOFF_MAX_MS 300000
/* a resident that just finished keeps its engine this long for its client's
 * next request before a waiting model may take its memory (grouping) */
#define GROUP_LINGER_MS 150
#define PREFETCH_MARGIN (512ull << 20) /* host RAM a read-ahead leaves free */
#define COST_FLUSH_SAMPLES 8           /* cost samples kept in memory before a write */
#define NO_MODEL SIZE_MAX
#define QUEUE_EVENT_MS 100     /* queue events, at most 10 a second */
#define MEMORY_EVENT_MS 2000   /* memory samples while someone subscribes */
#define PROGRESS_STEP 0.05     /* loading events as the weights' fraction moves this much */
#define RECENT_ANSWERS 16      /* answer times kept per model, for the deadline message */
#define ERASE_POLL_MS 10       /* how often a busy slot is checked again before an erase */

enum job_phase { JOB_WAITING, JOB_RUNNING, JOB_FAILING };

struct smodel;

struct sched_job {
    TAILQ_ENTRY(sched_job) link; /* in s->waiting or m->running */
    struct sched *s;
    struct smodel *m;
    const struct sched_job_ops *ops;
    void *user;
    enum job_phase phase;
    int64_t submitted, started, deadline, loading_ms;
    struct event *timer; /* the deadline; then the wait for an exit status */
    char *upstream_msg;
    uint32_t failures;   /* engine failures it lived through (2 = no more resends) */
    long tokens;         /* prompt tokens the engine reported; <= 0 = unknown */
    size_t next;         /* the model the owner goes to next, or NO_MODEL */
    uint64_t prompt;     /* what its answer depends on (sched_submit); 0 = unknown */
    struct upstream_call *erase; /* the slot check or erase that precedes its start */
    struct event *erase_wait;    /* the next slot check, while the engine is still busy */
};
TAILQ_HEAD(job_list, sched_job);

struct smodel {
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
    struct job_list running;
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
    char *engine, *log_dir;
    struct smodel **models;
    size_t n_models;
    struct job_list waiting;
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

static void kick(struct sched *s);
static const char *why_not_resent(struct sched_job *j);
static void resend(struct sched_job *j, const char *reason);
static void fail_engine(struct sched_job *j, const char *msg, const char *why_not);
static void stop_model(struct smodel *m, const char *reason);
static void spawn(struct smodel *m);
static void queue_changed(struct sched *s);

/* --- metrics ------------------------------------------------------------------------------- */

static void register_metrics(struct sched *s) {
    struct prom *p = s->p.metrics;
    if (!p)
        return;
    static const char *const model[] = {"model", NULL};
    static const char *const model_device[] = {"model", "device", NULL};
    static const double load_bounds[] = {0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120};
    s->m_loads = prom_register(p, PROM_COUNTER, "tandem_model_loads_total",
                               "Engine starts that became ready", model, NULL, 0);
    static const char *const model_reason[] = {"model", "reason", NULL};
    s->m_evictions = prom_register(p, PROM_COUNTER, "tandem_model_evictions_total",
                                   "Engines stopped, by reason: room, keep_alive, admin, shutdown",
                                   model_reason, NULL, 0);
    s->m_crashes = prom_register(p, PROM_COUNTER, "tandem_model_crashes_total",
                                 "Engines that exited unasked", model, NULL, 0);
    s->m_load_seconds = prom_register(p, PROM_HISTOGRAM, "tandem_model_load_seconds",
                                      "Spawn to healthy", model, load_bounds,
                                      sizeof load_bounds / sizeof *load_bounds);
    s->m_resident = prom_register(p, PROM_GAUGE, "tandem_model_resident_bytes",
                                  "Planned bytes of resident engines", model_device, NULL, 0);
    s->m_queue = prom_register(p, PROM_GAUGE, "tandem_queue_depth", "Jobs waiting", NULL, NULL, 0);
    s->m_state = prom_register(p, PROM_GAUGE, "tandem_model_resident",
                               "1 while the model's engine is resident", model, NULL, 0);
    s->m_device = prom_register(p, PROM_GAUGE, "tandem_model_device",
                                "1 for the device the model's layers run on (gpu:N or cpu)",
                                model_device, NULL, 0);
    s->m_prefetches = prom_register(p, PROM_COUNTER, "tandem_model_prefetches_total",
                                    "Model files read ahead of a load", model, NULL, 0);
    s->m_retries = prom_register(p, PROM_COUNTER, "tandem_engine_retries_total",
                                 "Requests resent after an engine failure, by reason: crash, "
                                 "connection, server_error",
                                 model_reason, NULL, 0);
    s->m_failed = prom_register(p, PROM_GAUGE, "tandem_model_failed",
                                "1 while the model is failed (crash loop) and backing off",
                                model, NULL, 0);
}

static void count(struct prom_metric *metric, struct smodel *m, double v) {
    const char *labels[] = {m->name};
    if (metric)
        prom_add(metric, labels, v);
}

static void publish_state(struct smodel *m) {
    struct sched *s = m->s;
    bool holds = m->state == SCHED_RESIDENT;
    const char *gpu[] = {m->name, "gpu"}, *host[] = {m->name, "host"}, *one[] = {m->name};
    if (s->m_resident) {
        prom_set(s->m_resident, gpu, holds ? (double)m->gpu : 0);
        prom_set(s->m_resident, host, holds ? (double)m->host : 0);
    }
    if (s->m_state)
        prom_set(s->m_state, one, holds);
    if (s->m_failed)
        prom_set(s->m_failed, one, m->state == SCHED_FAILED);
    char dev[16];
    const char *device[] = {m->name, place_device_name(m->device, dev, sizeof dev)};
    if (s->m_device)
        prom_set(s->m_device, device, 1);
    if (s->m_queue)
        prom_set(s->m_queue, NULL, s->n_waiting);
    queue_changed(s);
}

/* --- events (GET /v1/events; docs/serve.md, Events) ---------------------------------------- */

/* Publishes event type about m: {"model": name, ...fields} (fields stolen). */
static void publish(struct smodel *m, const char *type, json_t *fields) {
    json_t *e = m->s->p.events ? json_pack("{ss}", "model", m->name) : NULL;
    if (e && fields)
        json_object_update(e, fields);
    json_decref(fields);
    events_publish(m->s->p.events, type, e);
}

static json_t *progress_json(const struct engine_progress_sample *p) {
    return json_pack("{sssosI}", "phase", engine_phase_name(p->phase), "fraction",
                     p->fraction >= 0 ? json_real(p->fraction) : json_null(), "elapsed_ms",
                     (json_int_t)p->elapsed_ms);
}

static void publish_loading(struct smodel *m) { publish(m, "loading", progress_json(&m->load)); }

static void queue_changed(struct sched *s) {
    if (s->queue_ev && !evtimer_pending(s->queue_ev, NULL)) {
        struct timeval tv = {0, QUEUE_EVENT_MS * 1000};
        evtimer_add(s->queue_ev, &tv);
    }
}

/* The queue now: every model's waiting and running jobs, and its oldest
 * job's wait (the queue is in arrival order). */
static void on_queue_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct sched *s = arg;
    int64_t now = host_now_ms();
    json_t *models = json_object();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct smodel *m = s->models[i];
        const struct sched_job *oldest = NULL, *j;
        TAILQ_FOREACH(j, &s->waiting, link)
            if (j->m == m) {
                oldest = j;
                break;
            }
        json_t *wait = oldest ? json_integer(now - oldest->submitted) : json_null();
        json_object_set_new(models, m->name, json_pack("{sisiso}", "waiting", m->n_waiting,
                                                       "running", m->n_running, "oldest_wait_ms",
                                                       wait));
    }
    events_publish(s->p.events, "queue", json_pack("{siso}", "waiting", s->n_waiting, "models",
                                                   models));
}

static void on_memory_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct sched *s = arg;
    if (events_subscribers(s->p.events))
        events_publish(s->p.events, "memory", sched_memory_json(s));
}

/* --- small helpers --------------------------------------------------------------------------- */

static void timer_in(struct event *ev, int64_t ms) {
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    event_add(ev, &tv);
}

static bool holds_memory(const struct smodel *m) {
    return m->state == SCHED_LOADING || m->state == SCHED_RESIDENT || m->state == SCHED_STOPPING;
}

/* Bytes per device: each GPU's, then the host's. */
struct usage {
    uint64_t gpu[PLACE_MAX_GPUS];
    uint64_t host;
};

static void add_usage(struct usage *u, const struct smodel *m) {
    if (m->device >= 0 && m->device < PLACE_MAX_GPUS)
        u->gpu[m->device] += m->gpu;
    u->host += m->host;
}

static uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* What m lacks beside every model holding memory, minus freed (per device;
 * all zero = it fits). */
static struct usage shortfall(const struct sched *s, const struct smodel *m,
                              const struct usage *freed) {
    struct usage u = {0}, out = {0};
    add_usage(&u, m);
    for (size_t i = 0; i < s->n_models; i++)
        if (s->models[i] != m && holds_memory(s->models[i]))
            add_usage(&u, s->models[i]);
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++)
        out.gpu[g] = minus(minus(u.gpu[g], freed->gpu[g]), s->p.gpu_budget[g]);
    out.host = minus(minus(u.host, freed->host), s->p.host_budget);
    return out;
}

static bool fits(const struct sched *s, const struct smodel *m, const struct usage *freed) {
    struct usage sh = shortfall(s, m, freed);
    for (uint32_t g = 0; g < PLACE_MAX_GPUS; g++)
        if (sh.gpu[g])
            return false;
    return sh.host == 0;
}

static const struct usage NOTHING_FREED;

/* Whether stopping r would free memory m lacks. */
static bool helps(const struct sched *s, const struct smodel *r, const struct smodel *m,
                  const struct usage *freed) {
    struct usage sh = shortfall(s, m, freed);
    return (sh.host && r->host) ||
           (r->device >= 0 && r->device < PLACE_MAX_GPUS && sh.gpu[r->device] && r->gpu);
}

static bool idle(const struct smodel *m) { return m->n_running == 0 && m->n_waiting == 0; }

/* --- costs and read-ahead --------------------------------------------------------------------- */

/* The device kind m's measurements describe: the CPU for a CPU engine (or
 * any engine on a simulated GPU, which computes on the CPU), the GPU for an
 * engine with every layer on a real one; -1 for a partial offload, whose
 * costs are a mix of both. */
static int cost_device(const struct smodel *m) {
    if (m->device == PLACE_CPU || m->s->p.simulated)
        return COST_CPU;
    return m->settings.ngl >= (int32_t)plan_model_n_layer(m->pm) + 1 ? COST_GPU : -1;
}

/* Writes m's pending cost samples to the cache. */
static void flush_cost(struct smodel *m) {
    struct cost_record *c = &m->cost;
    int d = cost_device(m);
    if (d < 0 || !m->pm || (!c->loads && !c->firsts && !c->requests))
        return;
    char err[512];
    if (cost_record_add(m->pm, TANDEM_ENGINE_BUILD, (enum cost_device)d, c, err, sizeof err) !=
        TANDEM_OK)
        fprintf(stderr, "tandem: %s: cost not recorded: %s\n", m->name, err);
    memset(c, 0, sizeof *c);
}

/* One answered job of m: its running time per prompt token. */
static void note_answer(struct smodel *m, const struct sched_job *j, int64_t now) {
    m->recent_ms[m->n_recent++ % RECENT_ANSWERS] = now - j->submitted;
    double ms = (double)(now - j->started);
    if (m->first_pending)
        m->first_ms = (int64_t)ms;
    if (j->tokens > 0 && m->first_pending)
        m->cost.firsts++, m->cost.first_tokens += (uint64_t)j->tokens, m->cost.first_ms += ms;
    else if (j->tokens > 0)
        m->cost.requests++, m->cost.tokens += (uint64_t)j->tokens, m->cost.request_ms += ms;
    m->first_pending = false;
    if (m->cost.loads + m->cost.firsts + m->cost.requests >= COST_FLUSH_SAMPLES)
        flush_cost(m);
}

/* Reads m's file ahead of its next load (once), when enabled and host RAM
 * allows. */
static void prefetch(struct smodel *m) {
    if (!m->s->p.prefetch || m->prefetched || holds_memory(m) ||
        prefetch_start(m->path, PREFETCH_MARGIN) != TANDEM_OK)
        return;
    m->prefetched = true;
    m->prefetches++;
    count(m->s->m_prefetches, m, 1);
}

/* --- jobs ----------------------------------------------------------------------------------- */

static void cancel_erase(struct sched_job *j) {
    if (j->erase)
        upstream_cancel(j->erase);
    j->erase = NULL;
    if (j->erase_wait)
        event_free(j->erase_wait);
    j->erase_wait = NULL;
}

static void job_free(struct sched_job *j) {
    struct sched *s = j->s;
    struct smodel *m = j->m;
    cancel_erase(j);
    if (j->phase == JOB_WAITING) {
        TAILQ_REMOVE(&s->waiting, j, link);
        s->n_waiting--;
        m->n_waiting--;
    } else {
        TAILQ_REMOVE(&m->running, j, link);
        m->n_running--;
    }
    m->last_used = host_now_ms();
    if (j->timer)
        event_free(j->timer);
    mem_free(j->upstream_msg);
    mem_free(j);
    publish_state(m);
}

/* Ends j through its fail callback, then frees it. */
static void job_fail(struct sched_job *j, int status, const char *type, const char *msg) {
    j->ops->fail(j, status, type, msg, j->user);
    job_free(j);
}

static int64_t loading_overlap(const struct sched_job *j, int64_t now) {
    const struct smodel *m = j->m;
    int64_t from = j->submitted > m->load_started ? j->submitted : m->load_started;
    int64_t to = m->state == SCHED_LOADING ? now : m->ready_at;
    return m->load_started && to > from ? to - from : 0;
}

void sched_job_timing(const struct sched_job *j, struct sched_timing *t) {
    int64_t now = host_now_ms();
    int64_t end_wait = j->phase == JOB_WAITING ? now : j->started;
    int64_t loading = j->phase == JOB_WAITING ? loading_overlap(j, now) : j->loading_ms;
    t->loading_ms = loading;
    t->queued_ms = end_wait - j->submitted - loading;
    if (t->queued_ms < 0)
        t->queued_ms = 0;
    t->running_ms = j->phase == JOB_WAITING ? 0 : now - j->started;
}

size_t sched_job_model(const struct sched_job *j) { return j->m->index; }

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* What m's recent answers took, from submission, for a deadline message:
 * into buf[len], which it returns. */
static const char *recent_answers(const struct smodel *m, char *buf, size_t len) {
    uint32_t n = m->n_recent < RECENT_ANSWERS ? m->n_recent : RECENT_ANSWERS;
    if (!n) {
        snprintf(buf, len, "no request to this model has been answered yet");
        return buf;
    }
    int64_t ms[RECENT_ANSWERS];
    memcpy(ms, m->recent_ms, n * sizeof *ms);
    qsort(ms, n, sizeof *ms, cmp_i64);
    if (n == 1)
        snprintf(buf, len, "its last answer took %lld ms", (long long)ms[0]);
    else
        snprintf(buf, len, "its last %u answers took %lld ms at the median (%lld to %lld ms)",
                 n, (long long)ms[n / 2], (long long)ms[0], (long long)ms[n - 1]);
    return buf;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct sched_job *j = arg;
    if (j->phase == JOB_FAILING) { /* the engine lives on: its connection failed */
        char msg[700];
        snprintf(msg, sizeof msg, "model %s: %s", j->m->name,
                 j->upstream_msg ? j->upstream_msg : "the engine connection failed");
        struct sched *s = j->s;
        const char *why_not = why_not_resent(j);
        if (!why_not)
            resend(j, "connection");
        else
            fail_engine(j, msg, why_not);
        kick(s);
        return;
    }
    struct sched_timing t;
    sched_job_timing(j, &t);
    const char *where = j->phase == JOB_RUNNING ? "running"
                        : t.loading_ms > t.queued_ms ? "loading" : "queued";
    char msg[600], recent[200];
    snprintf(msg, sizeof msg,
             "deadline exceeded while %s (model %s): the request ran %lld ms (queued %lld ms, "
             "loading %lld ms, running %lld ms); %s",
             where, j->m->name, (long long)(host_now_ms() - j->submitted),
             (long long)t.queued_ms, (long long)t.loading_ms, (long long)t.running_ms,
             recent_answers(j->m, recent, sizeof recent));
    struct sched *s = j->s;
    job_fail(j, 504, "deadline_exceeded", msg);
    kick(s);
}

/* Whether j's answer could come from its engine's prompt cache rather than
 * from a full evaluation: its prompt key equals the last one started on this
 * single-slot engine. The engine would then find the whole prompt cached and
 * evaluate its last token alone, which gives different bytes than the first
 * answer (docs/serve.md, Determinism). Notes j's key as the last one. */
static bool repeats_last_prompt(struct sched_job *j) {
    struct smodel *m = j->m;
    if (!j->prompt)
        return false; /* an unknown prompt leaves the slot's key as it was: conservative */
    bool repeat = j->prompt == m->last_prompt && m->settings.parallel == 1;
    m->last_prompt = j->prompt;
    return repeat;
}

/* The erase is over (status 200), or could not be done: j starts. */
static void erase_done(void *user, int status, struct evbuffer *body, const char *error) {
    (void)body;
    struct sched_job *j = user;
    struct smodel *m = j->m;
    j->erase = NULL;
    if (status != 200 && !m->erase_warned) {
        m->erase_warned = true;
        fprintf(stderr, "tandem: %s: the engine's slot could not be erased (%s %d); an exact "
                "repeat may differ from its first answer\n", m->name, error ? error : "status",
                status);
    }
    j->ops->start(j, engine_child_socket(m->child), j->user);
}

static const struct upstream_ops erase_ops = {.done = erase_done};
static void check_slot(struct sched_job *j);

/* Whether GET /slots says that slot 0 is working (on a request whose client
 * went away: the engine finishes or cancels it on its own). */
static bool slot_busy(struct evbuffer *body) {
    size_t len = body ? evbuffer_get_length(body) : 0;
    json_t *slots = len ? json_loadb((const char *)evbuffer_pullup(body, -1), len, 0, NULL) : NULL;
    bool busy = json_is_true(json_object_get(json_array_get(slots, 0), "is_processing"));
    json_decref(slots);
    return busy;
}

static void on_erase_wait(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    check_slot(arg);
}

/* The slot's state is known: erase it once it is idle. The engine defers an
 * erase while the slot works, and a deferred erase can be stranded (a
 * released slot takes one deferred task, and the tasks of a cancelled
 * request leave that queue unannounced), holding up every later request;
 * so the erase is sent only to an idle slot. */
static void slot_checked(void *user, int status, struct evbuffer *body, const char *error) {
    struct sched_job *j = user;
    struct smodel *m = j->m;
    j->erase = NULL;
    if (status != 200) {
        erase_done(j, status, NULL, error);
    } else if (slot_busy(body)) {
        if (!j->erase_wait)
            j->erase_wait = event_new(j->s->base, -1, 0, on_erase_wait, j);
        if (j->erase_wait)
            timer_in(j->erase_wait, ERASE_POLL_MS);
        else
            erase_done(j, 0, NULL, "out of memory");
    } else {
        j->erase = upstream_start(j->s->http, engine_child_socket(m->child), EVHTTP_REQ_POST,
                                  "/slots/0?action=erase", "application/json", "{}", 2, NULL,
                                  NULL, &erase_ops, j);
        if (!j->erase)
            erase_done(j, 0, NULL, "no connection");
    }
}

static const struct upstream_ops check_ops = {.done = slot_checked};

/* Empties the engine's slot, then starts j: its prompt is evaluated whole, as
 * the first time. The job holds the slot meanwhile. First GET /slots, then
 * (slot_checked) the erase. */
static void check_slot(struct sched_job *j) {
    j->erase = upstream_start(j->s->http, engine_child_socket(j->m->child), EVHTTP_REQ_GET,
                              "/slots", NULL, NULL, 0, NULL, NULL, &check_ops, j);
    if (!j->erase)
        erase_done(j, 0, NULL, "no connection");
}

static void job_start(struct sched_job *j) {
    struct sched *s = j->s;
    struct smodel *m = j->m;
    TAILQ_REMOVE(&s->waiting, j, link);
    s->n_waiting--;
    m->n_waiting--;
    j->started = host_now_ms();
    j->loading_ms = loading_overlap(j, j->started);
    j->phase = JOB_RUNNING;
    TAILQ_INSERT_TAIL(&m->running, j, link);
    m->n_running++;
    m->last_used = j->started;
    m->handed_off = false;
    event_del(m->timer); /* no keep-alive expiry while busy */
    for (size_t i = 0; i < s->n_models; i++)
        if (s->models[i] != m && s->models[i]->n_waiting && !holds_memory(s->models[i])) {
            m->group_count++; /* started while another model waits for memory */
            break;
        }
    publish_state(m);
    if (repeats_last_prompt(j))
        check_slot(j);
    else
        j->ops->start(j, engine_child_socket(m->child), j->user);
}

/* Whether m cannot be ready before deadline_ms: it holds no ready engine
 * and the rest of its expected load (measured here, else estimated) ends
 * later. Unknown load times never refuse. */
static bool loads_past(const struct smodel *m, int64_t deadline_ms) {
    int64_t expect = m->ready_ms >= 0 ? m->ready_ms : m->load_estimate_ms, now = host_now_ms();
    if (deadline_ms <= 0 || expect <= 0 || m->state == SCHED_RESIDENT)
        return false;
    if (m->state == SCHED_LOADING)
        expect -= now - m->load_started;
    return now + expect > deadline_ms;
}

tandem_err sched_submit(struct sched *s, size_t index, int64_t deadline_ms, uint64_t prompt,
                        const struct sched_job_ops *ops, void *user, struct sched_job **job,
                        uint32_t *position) {
    *job = NULL;
    if (index >= s->n_models)
        return TANDEM_ERR_RANGE;
    if (s->shutting_down)
        return TANDEM_ERR_UNSUPPORTED;
    if (s->n_waiting >= s->p.queue_depth)
        return TANDEM_ERR_TOOBIG;
    int64_t backing_off;
    if (sched_model_failure(s, index, &backing_off))
        return TANDEM_ERR_ENGINE;
    if (loads_past(s->models[index], deadline_ms))
        return TANDEM_ERR_TIMEOUT;
    struct sched_job *j = mem_calloc(1, sizeof *j);
    if (!j)
        return TANDEM_ERR_NOMEM;
    struct smodel *m = s->models[index];
    *j = (struct sched_job){.s = s, .m = m, .ops = ops, .user = user, .phase = JOB_WAITING,
                            .submitted = host_now_ms(), .deadline = deadline_ms,
                            .next = NO_MODEL, .prompt = prompt};
    j->timer = event_new(s->base, -1, 0, on_deadline, j);
    if (!j->timer) {
        mem_free(j);
        return TANDEM_ERR_NOMEM;
    }
    if (deadline_ms > 0)
        timer_in(j->timer, deadline_ms - j->submitted);
    *position = s->n_waiting;
    TAILQ_INSERT_TAIL(&s->waiting, j, link);
    s->n_waiting++;
    m->n_waiting++;
    *job = j;
    publish_state(m);
    kick(s);
    return TANDEM_OK;
}

void sched_job_done(struct sched_job *j, bool ok) {
    struct sched *s = j->s;
    struct smodel *m = j->m;
    if (ok && j->phase == JOB_RUNNING) {
        m->relapses = 0;
        m->answered++;
        note_answer(m, j, host_now_ms());
    }
    if (j->next != NO_MODEL && j->phase == JOB_RUNNING)
        m->handed_off = true;
    job_free(j);
    kick(s);
}

void sched_job_tokens(struct sched_job *j, long tokens) { j->tokens = tokens; }

void sched_job_lookahead(struct sched_job *j, size_t next) {
    struct sched *s = j->s;
    if (next >= s->n_models || s->models[next] == j->m || s->shutting_down)
        return;
    struct smodel *n = s->models[next];
    j->next = next;
    n->lookaheads++;
    if (holds_memory(n) || n->retry_at > host_now_ms())
        return;
    if (fits(s, n, &NOTHING_FREED))
        spawn(n); /* memory allows it now: load while the current stage runs */
    else
        prefetch(n);
}

void sched_job_cancel(struct sched_job *j) { sched_job_done(j, false); }

void sched_job_upstream_failed(struct sched_job *j, const char *upstream_message) {
    if (j->phase != JOB_RUNNING)
        return;
    j->phase = JOB_FAILING;
    j->upstream_msg = mem_strdup(upstream_message);
    event_del(j->timer);
    timer_in(j->timer, UPSTREAM_EXIT_WAIT_MS);
}

bool sched_job_engine_error(struct sched_job *j, int status, const char *message) {
    if (j->phase != JOB_RUNNING || status < 500 || why_not_resent(j))
        return false;
    fprintf(stderr, "tandem: %s answered %d (%.200s)\n", j->m->name, status, message);
    resend(j, "server_error");
    kick(j->s);
    return true;
}

/* --- engine lifecycle ----------------------------------------------------------------------- */

static void fail_waiting(struct smodel *m, int status, const char *type, const char *msg) {
    struct sched_job *j, *next;
    for (j = TAILQ_FIRST(&m->s->waiting); j; j = next) {
        next = TAILQ_NEXT(j, link);
        if (j->m == m)
            job_fail(j, status, type, msg);
    }
}

static void fail_running(struct smodel *m, int status, const char *type, const char *msg) {
    struct sched_job *j;
    while ((j = TAILQ_FIRST(&m->running)))
        job_fail(j, status, type, msg);
}

static void set_state(struct smodel *m, enum sched_state st) {
    m->state = st;
    publish_state(m);
}

/* The child is gone (reaped): forget it. */
static void drop_child(struct smodel *m) {
    event_del(m->timer);
    event_del(m->load_ev);
    if (m->exit_ev) {
        event_free(m->exit_ev);
        m->exit_ev = NULL;
    }
    if (m->health) {
        upstream_cancel(m->health);
        m->health = NULL;
    }
    engine_child_free(m->child);
    m->child = NULL;
    engine_progress_free(m->progress);
    m->progress = NULL;
    m->draining = m->stop_asked = false;
    m->group_count = 0;
}

static void on_retry(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct smodel *m = arg;
    if (m->state == SCHED_FAILED)
        set_state(m, SCHED_UNLOADED); /* the back-off is over: the next demand loads it */
    kick(m->s);
}

/* --- engine failures: resend or fail ----------------------------------------------------------- */

/* Counts an engine failure that j lived through. NULL when j may be
 * resent: it is idempotent, this was its first failure, and its deadline
 * leaves time for the model's expected load when it must load again. Else
 * why not ("" when the job is not idempotent). */
static const char *why_not_resent(struct sched_job *j) {
    j->failures++;
    if (!j->ops->retry)
        return "";
    if (j->failures >= 2)
        return "the engine failed on this request twice";
    if (j->s->shutting_down)
        return "tandem is shutting down";
    if (loads_past(j->m, j->deadline))
        return "the engine's restart would end after the request's deadline";
    return NULL;
}

/* Fails j with 502 engine_failed: msg, and why it was not resent. */
static void fail_engine(struct sched_job *j, const char *msg, const char *why_not) {
    char full[1400];
    tandem_errmsg(full, sizeof full, "%s%s%s", msg, why_not[0] ? "; not resent: " : "", why_not);
    job_fail(j, 502, "engine_failed", full);
}

/* Puts started job j back at the head of the queue, to be resent when its
 * model has an engine and a free slot; reason labels the retry metric. */
static void resend(struct sched_job *j, const char *reason) {
    struct sched *s = j->s;
    struct smodel *m = j->m;
    TAILQ_REMOVE(&m->running, j, link);
    m->n_running--;
    cancel_erase(j);
    j->phase = JOB_WAITING;
    TAILQ_INSERT_HEAD(&s->waiting, j, link);
    s->n_waiting++;
    m->n_waiting++;
    mem_free(j->upstream_msg);
    j->upstream_msg = NULL;
    event_del(j->timer);
    if (j->deadline > 0)
        timer_in(j->timer, j->deadline - host_now_ms());
    m->retries++;
    const char *labels[] = {m->name, reason};
    if (s->m_retries)
        prom_add(s->m_retries, labels, 1);
    fprintf(stderr, "tandem: %s: resending a request after an engine failure (%s)\n", m->name,
            reason);
    publish_state(m);
    j->ops->retry(j, j->user);
}

/* The engine of m is gone: each running job is resent or fails with msg. */
static void resend_or_fail_running(struct smodel *m, const char *msg) {
    struct sched_job *j;
    while ((j = TAILQ_FIRST(&m->running))) {
        const char *why_not = why_not_resent(j);
        if (!why_not)
            resend(j, "crash");
        else
            fail_engine(j, msg, why_not);
    }
}

/* A load of m crashed: the jobs waiting for it wait for one more, unless it
 * is their second engine failure or their deadline comes first. */
static void fail_waiting_twice(struct smodel *m, const char *msg) {
    struct sched_job *j, *next;
    for (j = TAILQ_FIRST(&m->s->waiting); j; j = next) {
        next = TAILQ_NEXT(j, link);
        if (j->m != m)
            continue;
        if (++j->failures >= 2)
            fail_engine(j, msg, "the engine failed to load twice while this request waited");
        else if (loads_past(m, j->deadline))
            fail_engine(j, msg, "the engine's restart would end after the request's deadline");
    }
}

/* Records a crash at now; true when it is the max_restarts-th within
 * CRASH_WINDOW_MS (a crash loop). */
static bool crash_loop(struct smodel *m, int64_t now) {
    uint32_t n = m->s->p.max_restarts;
    m->crash_at[m->crash_next++ % n] = now;
    return m->crash_next >= n && now - m->crash_at[m->crash_next % n] < CRASH_WINDOW_MS;
}

static uint32_t recent_crashes(const struct smodel *m, int64_t now) {
    uint32_t n = m->s->p.max_restarts, k = 0;
    for (uint32_t i = 0; i < n && i < m->crash_next; i++)
        k += now - m->crash_at[i] < CRASH_WINDOW_MS;
    return k;
}

/* Marks m failed for a back-off that doubles with each relapse: its jobs,
 * running or waiting, and new ones until then get 503 naming the cause
 * (which must not be m->last_error, rewritten here). */
static void mark_failed(struct smodel *m, const char *cause) {
    int64_t backoff = (int64_t)FAILED_BACKOFF_FIRST_MS << (m->relapses < 8 ? m->relapses : 8);
    backoff = backoff < FAILED_BACKOFF_MAX_MS ? backoff : FAILED_BACKOFF_MAX_MS;
    m->relapses++;
    m->retry_at = host_now_ms() + backoff;
    tandem_errmsg(m->last_error, sizeof m->last_error, "model %s failed: %s; next try in %lld s",
                  m->name, cause, (long long)((backoff + 999) / 1000));
    set_state(m, SCHED_FAILED);
    fail_running(m, 503, "unavailable_error", m->last_error);
    fail_waiting(m, 503, "unavailable_error", m->last_error);
    timer_in(m->retry_ev, backoff);
    fprintf(stderr, "tandem: %s\n", m->last_error);
}

/* An exit nobody asked for: count it, then resend, fail or, in a crash
 * loop, mark the model failed. */
static void crashed(struct smodel *m, const char *why) {
    bool loading = m->state == SCHED_LOADING;
    char tail[256] = "";
    engine_child_log_tail(m->child, tail, sizeof tail);
    const char *msg = m->last_error;
    tandem_errmsg(m->last_error, sizeof m->last_error, "model %s: llama-server %s%s (log %s%s%s)",
                  m->name, why, loading ? " while loading" : "", m->log_path, tail[0] ? ": " : "",
                  tail);
    m->crash_total++;
    m->crashed_last = true;
    count(m->s->m_crashes, m, 1);
    drop_child(m);
    fprintf(stderr, "tandem: %s\n", msg);
    bool looping = crash_loop(m, host_now_ms());
    publish(m, "crashed", json_pack("{sssbsb}", "message", msg, "while_loading", loading, "failed",
                                    looping));
    if (looping) {
        char cause[sizeof m->last_error];
        tandem_errmsg(cause, sizeof cause, "%u crashes within %d s (limits.max_restarts); last: %s",
                 m->s->p.max_restarts, CRASH_WINDOW_MS / 1000, msg);
        mark_failed(m, cause);
        return;
    }
    set_state(m, SCHED_UNLOADED);
    resend_or_fail_running(m, msg);
    if (loading)
        fail_waiting_twice(m, msg);
}

static void on_exit_fd(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct smodel *m = arg;
    bool exited = false;
    int status = 0;
    engine_child_poll(m->child, &exited, &status);
    if (!exited)
        return;
    char why[96];
    engine_child_describe_status(status, why, sizeof why);
    if (m->state == SCHED_STOPPING) {
        m->stop_ms = host_now_ms() - m->stop_started;
        fprintf(stderr, "tandem: %s stopped in %lld ms (%s)\n", m->name, (long long)m->stop_ms,
                why);
        drop_child(m);
        set_state(m, SCHED_UNLOADED);
    } else {
        crashed(m, why);
    }
    kick(m->s);
}

static void record_footprint(struct smodel *m) {
    char key[HASH_SHA256_HEX_LEN + 1], err[512];
    struct footprint_measure meas;
    if (footprint_record_log(m->pm, &m->settings, m->log_path, engine_child_pid(m->child), key,
                             NULL, 0, err, sizeof err) != TANDEM_OK ||
        footprint_load(key, &meas, NULL, 0) != TANDEM_OK) {
        fprintf(stderr, "tandem: %s: footprint not recorded: %s\n", m->name, err);
        return;
    }
    m->measured_gpu = m->measured_host = 0;
    for (int p = 0; p < PLAN_PART_COUNT; p++) {
        m->measured_gpu += meas.bytes[PLAN_DEVICE_GPU][p];
        m->measured_host += meas.bytes[PLAN_DEVICE_HOST][p];
    }
    if (meas.process_bytes)
        m->measured_gpu = meas.process_bytes;
}

static void became_ready(struct smodel *m) {
    m->ready_at = host_now_ms();
    event_del(m->timer);
    event_del(m->load_ev);
    set_state(m, SCHED_RESIDENT);
    m->loads++;
    m->last_used = m->ready_at;
    m->group_count = 0;
    m->ready_ms = m->ready_at - m->load_started;
    m->first_ms = -1;
    m->first_pending = true;
    m->cost.loads++;
    m->cost.load_ms += (double)m->ready_ms;
    count(m->s->m_loads, m, 1);
    const char *labels[] = {m->name};
    double secs = (double)(m->ready_at - m->load_started) / 1000.0;
    if (m->s->m_load_seconds)
        prom_observe(m->s->m_load_seconds, labels, secs);
    fprintf(stderr, "tandem: %s ready in %.2f s on %s (pid %ld)\n", m->name, secs,
            engine_child_socket(m->child), (long)engine_child_pid(m->child));
    if (m->progress) /* NULL after an OOM at the spawn: no progress was followed */
        engine_progress_ready(m->progress, &m->load);
    else
        m->load = (struct engine_progress_sample){ENGINE_PHASE_READY, 1, m->ready_ms};
    m->crashed_last = false;
    char dev[16];
    publish(m, "ready", json_pack("{sssIsIss}", "device",
                                  place_device_name(m->device, dev, sizeof dev), "load_ms",
                                  (json_int_t)m->ready_ms, "pid",
                                  (json_int_t)engine_child_pid(m->child), "socket",
                                  engine_child_socket(m->child)));
    record_footprint(m);
    kick(m->s);
}

static void health_done(void *user, int status, struct evbuffer *body, const char *error) {
    (void)body, (void)error;
    struct smodel *m = user;
    m->health = NULL;
    if (m->state != SCHED_LOADING)
        return;
    if (status == 200)
        became_ready(m);
    else
        timer_in(m->timer, HEALTH_POLL_MS);
}

static const struct upstream_ops health_ops = {.done = health_done};

static void on_model_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct smodel *m = arg;
    switch (m->state) {
    case SCHED_LOADING: /* follow the load, poll /health */
        if (m->progress && engine_progress_poll(m->progress, PROGRESS_STEP, &m->load))
            publish_loading(m);
        m->health = upstream_start(m->s->http, engine_child_socket(m->child), EVHTTP_REQ_GET,
                                   "/health", NULL, NULL, 0, NULL, NULL, &health_ops, m);
        if (!m->health)
            timer_in(m->timer, HEALTH_POLL_MS);
        break;
    case SCHED_STOPPING: /* the grace is over */
        fprintf(stderr, "tandem: %s did not stop within %lld ms: SIGKILL\n", m->name,
                (long long)m->s->p.stop_grace_ms);
        engine_child_signal(m->child, SIGKILL);
        break;
    case SCHED_RESIDENT: /* keep_alive expired */
        if (idle(m) && !m->pin)
            stop_model(m, "keep_alive");
        break;
    default: break;
    }
}

static void on_load_timeout(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct smodel *m = arg;
    if (m->state != SCHED_LOADING)
        return;
    const char *msg = m->last_error;
    tandem_errmsg(m->last_error, sizeof m->last_error,
                  "model %s: llama-server not ready after %lld ms (log %s)", m->name,
                  (long long)m->load_timeout_ms, m->log_path);
    fprintf(stderr, "tandem: %s\n", msg);
    fail_waiting(m, 502, "upstream_error", msg);
    m->stop_asked = true;
    set_state(m, SCHED_STOPPING);
    engine_child_signal(m->child, SIGKILL);
}

/* Moves an existing log aside (one generation kept), so that each run's log
 * holds only its own buffer lines. */
static void rotate_log(const char *path) {
    char old[4300];
    snprintf(old, sizeof old, "%s.1", path);
    rename(path, old);
}

/* The engine's socket and slot folder in the scheduler's private run folder
 * (made on the first spawn); TANDEM_OK or an error explained in err. */
static tandem_err engine_paths(struct smodel *m, char *sock, char *slots, size_t cap, char *err,
                               size_t errlen) {
    struct sched *s = m->s;
    tandem_err e = s->run ? TANDEM_OK : engine_rundir_new(&s->run, err, errlen);
    if (e == TANDEM_OK)
        e = engine_rundir_socket(s->run, (unsigned)m->index, sock, cap, err, errlen);
    /* the engine needs a directory for its slot actions, erase included; it
     * writes there only when asked to save a slot, which tandem never does */
    if (e == TANDEM_OK)
        e = engine_rundir_slots(s->run, (unsigned)m->index, slots, cap, err, errlen);
    return e;
}

static void spawn(struct smodel *m) {
    char err[768] = "", sock[256], slots[256];
    char **argv = NULL;
    tandem_err e = engine_paths(m, sock, slots, sizeof sock, err, sizeof err);
    if (e == TANDEM_OK)
        e = engine_child_argv(m->s->engine, m->path, m->name, &m->settings, sock, slots, m->extra,
                              &argv);
    char visible[48];
    char *env[] = {visible, NULL};
    snprintf(visible, sizeof visible, "CUDA_VISIBLE_DEVICES=%d", m->device);
    bool choose_gpu = m->device >= 0 && m->s->p.n_gpus > 1 && !m->s->p.simulated;
    if (e == TANDEM_OK) {
        rotate_log(m->log_path);
        e = engine_child_spawn(argv, choose_gpu ? env : NULL, m->log_path, sock, &m->child, err,
                               sizeof err);
    }
    engine_child_argv_free(argv);
    if (e == TANDEM_OK)
        m->exit_ev = event_new(m->s->base, engine_child_exit_fd(m->child), EV_READ | EV_PERSIST,
                               on_exit_fd, m);
    if (e != TANDEM_OK || !m->exit_ev) {
        char cause[sizeof m->last_error];
        tandem_errmsg(cause, sizeof cause, "cannot start llama-server: %s",
                 err[0] ? err : tandem_strerror(e));
        engine_child_free(m->child);
        m->child = NULL;
        publish(m, "crashed", json_pack("{sssbsb}", "message", cause, "while_loading", true,
                                        "failed", true));
        mark_failed(m, cause);
        return;
    }
    event_add(m->exit_ev, NULL);
    m->progress = engine_progress_new(engine_child_pid(m->child), m->log_path, m->file_bytes);
    m->load = (struct engine_progress_sample){ENGINE_PHASE_SPAWN, -1, 0};
    m->prefetched = false;
    m->last_prompt = 0; /* a new engine's slot is empty */
    m->load_started = host_now_ms();
    m->last_error[0] = '\0';
    set_state(m, SCHED_LOADING);
    timer_in(m->timer, HEALTH_POLL_MS);
    timer_in(m->load_ev, m->load_timeout_ms);
    fprintf(stderr, "tandem: loading %s (pid %ld, socket %s, log %s)\n", m->name,
            (long)engine_child_pid(m->child), sock, m->log_path);
    if (m->crashed_last)
        publish(m, "restarted", json_pack("{sI}", "crashes", (json_int_t)m->crash_total));
    publish_loading(m);
}

/* Stops m's engine; reason is "room", "keep_alive", "admin" or "shutdown"
 * (the eviction metric's label). */
static void stop_model(struct smodel *m, const char *reason) {
    if (m->state != SCHED_RESIDENT && m->state != SCHED_LOADING)
        return;
    fprintf(stderr, "tandem: stopping %s (%s)\n", m->name, reason);
    publish(m, "evicted", json_pack("{ss}", "reason", reason));
    if (!strcmp(reason, "room"))
        m->evictions++;
    const char *labels[] = {m->name, reason};
    if (m->s->m_evictions)
        prom_add(m->s->m_evictions, labels, 1);
    m->stop_asked = true;
    m->stop_started = host_now_ms();
    flush_cost(m);
    if (m->health) {
        upstream_cancel(m->health);
        m->health = NULL;
    }
    set_state(m, SCHED_STOPPING);
    engine_child_signal(m->child, SIGTERM);
    event_del(m->timer);
    timer_in(m->timer, m->s->p.stop_grace_ms);
}

/* --- the decision: what runs, what loads, what goes ------------------------------------------ */

static void start_ready_jobs(struct sched *s) {
    struct sched_job *j, *next;
    for (j = TAILQ_FIRST(&s->waiting); j; j = next) {
        next = TAILQ_NEXT(j, link);
        struct smodel *m = j->m;
        if (m->state == SCHED_RESIDENT && !m->draining && m->n_running < m->settings.parallel)
            job_start(j);
    }
}

/* Stops drained residents whose last job has ended, and arms keep-alive
 * timers on idle ones. */
static void settle_residents(struct sched *s) {
    for (size_t i = 0; i < s->n_models; i++) {
        struct smodel *m = s->models[i];
        if (m->state != SCHED_RESIDENT)
            continue;
        if (m->draining && m->n_running == 0)
            stop_model(m, "room");
        else if (idle(m) && !m->pin && m->keep_alive_ms >= 0 &&
                 !event_pending(m->timer, EV_TIMEOUT, NULL))
            timer_in(m->timer, m->keep_alive_ms - (host_now_ms() - m->last_used));
    }
}

/* Whether resident r has had its turn while m waits (since oldest): it
 * started group_limit jobs meanwhile, or it has held the device for max_wait
 * of oldest's wait. The wait counts from r's readiness, so a load slower
 * than max_wait does not end the loaded model's turn before it starts. */
static bool turn_over(const struct smodel *r, const struct sched_job *oldest, int64_t now) {
    const struct sched *s = r->s;
    int64_t since = oldest->submitted > r->ready_at ? oldest->submitted : r->ready_at;
    return r->group_count >= s->p.group_limit || now - since >= s->p.max_wait_ms;
}

/* The residents that could go for m, lowest priority, then least recently
 * used first: idle ones whose client has not come back within
 * GROUP_LINGER_MS or whose turn is over (pass 0), then busy ones whose turn
 * is over (pass 1). */
static bool may_evict(const struct smodel *r, const struct smodel *m, int pass,
                      const struct sched_job *oldest, int64_t now) {
    if (r == m || r->pin || r->state != SCHED_RESIDENT)
        return false;
    if (!oldest) /* an admin load: idle ones only, at once */
        return pass == 0 && idle(r);
    if (pass == 0)
        return idle(r) && (r->handed_off || now - r->last_used >= GROUP_LINGER_MS ||
                           turn_over(r, oldest, now));
    return r->draining || turn_over(r, oldest, now);
}

static struct smodel *lru_candidate(struct sched *s, const struct smodel *m, int pass,
                                    const struct sched_job *oldest, int64_t now, bool *chosen,
                                    const struct usage *freed) {
    struct smodel *best = NULL;
    for (size_t i = 0; i < s->n_models; i++) {
        struct smodel *r = s->models[i];
        if (!chosen[i] && may_evict(r, m, pass, oldest, now) && helps(s, r, m, freed) &&
            (!best || r->priority < best->priority ||
             (r->priority == best->priority && r->last_used < best->last_used)))
            best = r;
    }
    if (best)
        chosen[best->index] = true;
    return best;
}

/* Makes room for m (whose oldest job is oldest). Returns true when it loaded. */
static bool make_room(struct sched *s, struct smodel *m, const struct sched_job *oldest) {
    if (fits(s, m, &NOTHING_FREED)) {
        spawn(m);
        return true;
    }
    for (size_t i = 0; i < s->n_models; i++)
        if (s->models[i]->state == SCHED_STOPPING || s->models[i]->state == SCHED_LOADING)
            return false; /* memory is on its way: decide again when it settles */
    bool chosen[s->n_models];
    memset(chosen, 0, sizeof chosen);
    struct usage freed = {0};
    int64_t now = host_now_ms();
    struct smodel *victims[s->n_models];
    size_t n = 0;
    for (int pass = 0; pass < 2 && !fits(s, m, &freed); pass++) {
        struct smodel *r;
        while (!fits(s, m, &freed) &&
               (r = lru_candidate(s, m, pass, oldest, now, chosen, &freed))) {
            victims[n++] = r;
            add_usage(&freed, r);
        }
    }
    if (!fits(s, m, &freed)) {
        /* not yet: look again once a linger may be over (turns end by time too) */
        if (!event_pending(s->starve_ev, EV_TIMEOUT, NULL))
            timer_in(s->starve_ev, GROUP_LINGER_MS);
        return false;
    }
    prefetch(m); /* while the victims drain and exit */
    for (size_t i = 0; i < n; i++) {
        if (victims[i]->n_running == 0 && victims[i]->n_waiting == 0)
            stop_model(victims[i], "room");
        else if (!victims[i]->draining) {
            victims[i]->draining = true;
            fprintf(stderr, "tandem: draining %s to make room for %s\n", victims[i]->name,
                    m->name);
        }
    }
    settle_residents(s);
    return false;
}

/* The oldest job whose model has no engine (and is not backing off). */
static struct sched_job *oldest_unloaded(struct sched *s, int64_t now) {
    struct sched_job *j;
    TAILQ_FOREACH(j, &s->waiting, link) {
        struct smodel *m = j->m;
        if (holds_memory(m))
            continue;
        if (m->retry_at > now) {
            if (!event_pending(m->retry_ev, EV_TIMEOUT, NULL))
                timer_in(m->retry_ev, m->retry_at - now);
            continue;
        }
        return j;
    }
    return NULL;
}

static void maybe_done(struct sched *s) {
    if (!s->shutting_down || !s->done)
        return;
    for (size_t i = 0; i < s->n_models; i++)
        if (s->models[i]->child || s->models[i]->n_running)
            return;
    void (*done)(void *) = s->done;
    s->done = NULL;
    done(s->done_user);
}

/* Admin loads that waited for evicted engines to exit, once they fit. */
static void load_asked_models(struct sched *s) {
    for (size_t i = 0; i < s->n_models; i++) {
        struct smodel *m = s->models[i];
        if (m->load_asked && !holds_memory(m) && fits(s, m, &NOTHING_FREED)) {
            m->load_asked = false;
            spawn(m);
        }
    }
}

static void kick(struct sched *s) {
    if (s->shutting_down) { /* the admitted jobs of ready engines finish, nothing loads */
        start_ready_jobs(s);
        for (size_t i = 0; i < s->n_models; i++)
            if (idle(s->models[i]))
                stop_model(s->models[i], "shutdown");
        maybe_done(s);
        return;
    }
    start_ready_jobs(s);
    load_asked_models(s);
    struct sched_job *j = oldest_unloaded(s, host_now_ms());
    if (j)
        make_room(s, j->m, j);
    settle_residents(s);
    start_ready_jobs(s);
}

static void on_starve(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    kick(arg);
}

/* --- public ------------------------------------------------------------------------------- */

struct sched *sched_new(struct event_base *base, const struct sched_params *p) {
    struct sched *s = mem_calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->base = base;
    s->p = *p;
    TAILQ_INIT(&s->waiting);
    s->engine = mem_strdup(p->engine);
    s->log_dir = mem_strdup(p->log_dir);
    s->http = upstream_client_new(base);
    s->starve_ev = event_new(base, -1, 0, on_starve, s);
    if (p->events) {
        s->queue_ev = evtimer_new(base, on_queue_event, s);
        s->memory_ev = event_new(base, -1, EV_PERSIST, on_memory_event, s);
    }
    if (!s->engine || !s->log_dir || !s->http || !s->starve_ev ||
        (p->events && (!s->queue_ev || !s->memory_ev))) {
        sched_free(s);
        return NULL;
    }
    s->p.engine = s->engine;
    s->p.log_dir = s->log_dir;
    if (!s->p.max_restarts)
        s->p.max_restarts = DEFAULT_MAX_RESTARTS;
    register_metrics(s);
    if (s->memory_ev)
        event_add(s->memory_ev, &(struct timeval){MEMORY_EVENT_MS / 1000, 0});
    return s;
}

static void free_model(struct smodel *m) {
    flush_cost(m);
    struct sched_job *j;
    while ((j = TAILQ_FIRST(&m->running)))
        job_free(j);
    drop_child(m);
    if (m->timer)
        event_free(m->timer);
    if (m->load_ev)
        event_free(m->load_ev);
    if (m->retry_ev)
        event_free(m->retry_ev);
    for (size_t i = 0; m->extra && m->extra[i]; i++)
        mem_free(m->extra[i]);
    mem_free(m->extra);
    mem_free(m->crash_at);
    mem_free(m->name);
    mem_free(m->path);
    mem_free(m);
}

void sched_free(struct sched *s) {
    if (!s)
        return;
    struct sched_job *j;
    while ((j = TAILQ_FIRST(&s->waiting)))
        job_free(j);
    for (size_t i = 0; i < s->n_models; i++)
        free_model(s->models[i]);
    mem_free(s->models);
    upstream_client_free(s->http);
    engine_rundir_free(s->run);
    struct event *evs[] = {s->starve_ev, s->queue_ev, s->memory_ev};
    for (size_t i = 0; i < sizeof evs / sizeof *evs; i++)
        if (evs[i])
            event_free(evs[i]);
    mem_free(s->engine);
    mem_free(s->log_dir);
    mem_free(s);
}

static char **copy_args(char *const *args) {
    size_t n = 0;
    while (args && args[n])
        n++;
    char **out = mem_calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = mem_strdup(args[i]))) {
            for (size_t k = 0; k < i; k++)
                mem_free(out[k]);
            mem_free(out);
            return NULL;
        }
    return out;
}

tandem_err sched_add_model(struct sched *s, const struct sched_model_spec *spec, size_t *index) {
    struct smodel **grown = mem_realloc(s->models, (s->n_models + 1) * sizeof *grown);
    if (!grown)
        return TANDEM_ERR_NOMEM;
    s->models = grown;
    struct smodel *m = mem_calloc(1, sizeof *m);
    if (!m)
        return TANDEM_ERR_NOMEM;
    *m = (struct smodel){.s = s, .index = s->n_models, .pm = spec->model,
                         .settings = spec->settings, .device = spec->device,
                         .stop_ms = -1, .ready_ms = -1, .first_ms = -1, .gpu = spec->gpu_bytes,
                         .host = spec->host_bytes, .keep_alive_ms = spec->keep_alive_ms,
                         .load_timeout_ms = spec->load_timeout_ms,
                         .load_estimate_ms = spec->load_estimate_ms, .pin = spec->pin,
                         .priority = spec->priority};
    TAILQ_INIT(&m->running);
    m->name = mem_strdup(spec->name);
    m->path = mem_strdup(spec->path);
    m->extra = copy_args(spec->extra_args);
    m->timer = event_new(s->base, -1, 0, on_model_timer, m);
    m->load_ev = event_new(s->base, -1, 0, on_load_timeout, m);
    m->retry_ev = event_new(s->base, -1, 0, on_retry, m);
    m->crash_at = mem_calloc(s->p.max_restarts, sizeof *m->crash_at);
    snprintf(m->log_path, sizeof m->log_path, "%s/%s.log", s->log_dir, spec->name);
    struct stat st;
    m->file_bytes = stat(spec->path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (!m->name || !m->path || !m->extra || !m->timer || !m->load_ev || !m->retry_ev ||
        !m->crash_at) {
        free_model(m);
        return TANDEM_ERR_NOMEM;
    }
    if (m->settings.parallel < 1)
        m->settings.parallel = 1;
    s->models[s->n_models] = m;
    *index = s->n_models++;
    publish_state(m);
    return TANDEM_OK;
}

void sched_preload(struct sched *s) {
    for (size_t i = 0; i < s->n_models; i++)
        if (s->models[i]->pin)
            sched_load(s, i);
}

tandem_err sched_load(struct sched *s, size_t index) {
    if (index >= s->n_models)
        return TANDEM_ERR_RANGE;
    struct smodel *m = s->models[index];
    if (holds_memory(m) || s->shutting_down)
        return m->state == SCHED_STOPPING ? TANDEM_ERR_UNSUPPORTED : TANDEM_OK;
    if (fits(s, m, &NOTHING_FREED)) {
        spawn(m);
        return TANDEM_OK;
    }
    struct usage freed = {0};
    bool chosen[s->n_models];
    memset(chosen, 0, sizeof chosen);
    struct smodel *victims[s->n_models], *r;
    size_t n = 0;
    while (!fits(s, m, &freed) && (r = lru_candidate(s, m, 0, NULL, 0, chosen, &freed))) {
        victims[n++] = r;
        add_usage(&freed, r);
    }
    if (!fits(s, m, &freed))
        return TANDEM_ERR_TOOBIG;
    for (size_t i = 0; i < n; i++)
        stop_model(victims[i], "room");
    m->load_asked = true; /* load_asked_models() loads it once they have exited */
    return TANDEM_OK;
}

tandem_err sched_unload(struct sched *s, size_t index) {
    if (index >= s->n_models)
        return TANDEM_ERR_RANGE;
    struct smodel *m = s->models[index];
    if (m->n_running || m->n_waiting)
        return TANDEM_ERR_UNSUPPORTED;
    stop_model(m, "admin");
    return TANDEM_OK;
}

/* Fails the waiting jobs; with only_unloaded, those whose model holds no
 * engine that is ready or loading (they would need a new load). */
static void fail_queue(struct sched *s, bool only_unloaded) {
    struct sched_job *j, *next;
    for (j = TAILQ_FIRST(&s->waiting); j; j = next) {
        next = TAILQ_NEXT(j, link);
        enum sched_state st = j->m->state;
        if (!only_unloaded || (st != SCHED_RESIDENT && st != SCHED_LOADING))
            job_fail(j, 503, "unavailable_error", "tandem is shutting down");
    }
}

void sched_shutdown(struct sched *s, void (*done)(void *user), void *user) {
    s->shutting_down = true;
    s->done = done;
    s->done_user = user;
    fail_queue(s, true);
    kick(s);
}

void sched_shutdown_now(struct sched *s) {
    s->shutting_down = true;
    fail_queue(s, false);
    for (size_t i = 0; i < s->n_models; i++)
        fail_running(s->models[i], 503, "unavailable_error", "tandem is shutting down");
    kick(s);
}

size_t sched_model_count(const struct sched *s) { return s->n_models; }
const char *sched_model_name(const struct sched *s, size_t i) { return s->models[i]->name; }
enum sched_state sched_model_state(const struct sched *s, size_t i) { return s->models[i]->state; }

const char *sched_state_name(enum sched_state st) {
    switch (st) {
    case SCHED_UNLOADED: return "unloaded";
    case SCHED_LOADING: return "loading";
    case SCHED_RESIDENT: return "resident";
    case SCHED_STOPPING: return "stopping";
    case SCHED_FAILED: return "failed";
    }
    return "?";
}

void sched_model_counts(const struct sched *s, size_t i, struct sched_counts *out) {
    const struct smodel *m = s->models[i];
    *out = (struct sched_counts){.loads = m->loads, .evictions = m->evictions,
                                 .crashes = m->crash_total, .retries = m->retries,
                                 .prefetches = m->prefetches, .lookaheads = m->lookaheads,
                                 .waiting = m->n_waiting, .running = m->n_running};
}

const char *sched_model_failure(const struct sched *s, size_t i, int64_t *retry_in_ms) {
    const struct smodel *m = s->models[i];
    int64_t left = m->retry_at - host_now_ms();
    if (m->state != SCHED_FAILED || left <= 0)
        return NULL;
    *retry_in_ms = left;
    return m->last_error;
}

static json_t *ms_or_null(int64_t ms) { return ms >= 0 ? json_integer(ms) : json_null(); }

/* Milliseconds until keep_alive unloads m, were it to stay idle; -1 when it
 * will not (not resident, busy, pinned, or kept forever). */
static int64_t until_unload(const struct smodel *m, int64_t now) {
    if (m->state != SCHED_RESIDENT || !idle(m) || m->pin || m->keep_alive_ms < 0)
        return -1;
    int64_t left = m->keep_alive_ms - (now - m->last_used);
    return left > 0 ? left : 0;
}

static json_t *model_json(const struct smodel *m, int64_t now) {
    json_t *j = json_object();
    char dev[16];
    json_object_set_new(j, "name", json_string(m->name));
    json_object_set_new(j, "state", json_string(sched_state_name(m->state)));
    json_object_set_new(j, "device", json_string(place_device_name(m->device, dev, sizeof dev)));
    json_object_set_new(j, "ngl", json_integer(m->settings.ngl));
    json_object_set_new(j, "threads", json_integer(m->settings.threads));
    json_object_set_new(j, "swap", json_pack("{s:o, s:o, s:o}", "stop_ms", ms_or_null(m->stop_ms),
                                             "ready_ms", ms_or_null(m->ready_ms), "first_answer_ms",
                                             ms_or_null(m->first_ms)));
    json_object_set_new(j, "prefetches", json_integer((json_int_t)m->prefetches));
    json_object_set_new(j, "lookaheads", json_integer((json_int_t)m->lookaheads));
    json_object_set_new(j, "planned", json_pack("{sIsI}", "gpu_bytes", (json_int_t)m->gpu,
                                                "host_bytes", (json_int_t)m->host));
    json_object_set_new(j, "measured",
                        m->measured_gpu || m->measured_host
                            ? json_pack("{sIsI}", "gpu_bytes", (json_int_t)m->measured_gpu,
                                        "host_bytes", (json_int_t)m->measured_host)
                            : json_null());
    json_object_set_new(j, "pid", m->child ? json_integer(engine_child_pid(m->child)) : json_null());
    json_object_set_new(j, "socket",
                        m->child ? json_string(engine_child_socket(m->child)) : json_null());
    json_object_set_new(j, "slots", json_integer(m->settings.parallel));
    json_object_set_new(j, "determinism",
                        json_string(m->settings.parallel == 1 ? "strict" : "relaxed"));
    json_object_set_new(j, "running", json_integer(m->n_running));
    json_object_set_new(j, "queued", json_integer(m->n_waiting));
    json_object_set_new(j, "pinned", json_boolean(m->pin));
    json_object_set_new(j, "idle_ms", m->last_used ? json_integer(now - m->last_used) : json_null());
    json_object_set_new(j, "keep_alive_ms", m->keep_alive_ms >= 0 ? json_integer(m->keep_alive_ms)
                                                                  : json_null());
    json_object_set_new(j, "until_ms", ms_or_null(until_unload(m, now)));
    json_object_set_new(j, "answered", json_integer((json_int_t)m->answered));
    json_object_set_new(j, "loads", json_integer((json_int_t)m->loads));
    json_object_set_new(j, "evictions", json_integer((json_int_t)m->evictions));
    json_object_set_new(j, "crashes", json_integer((json_int_t)m->crash_total));
    json_object_set_new(j, "crashes_last_60s", json_integer(recent_crashes(m, now)));
    json_object_set_new(j, "retries", json_integer((json_int_t)m->retries));
    json_object_set_new(j, "retry_in_ms", m->state == SCHED_FAILED && m->retry_at > now
                                              ? json_integer(m->retry_at - now)
                                              : json_null());
    json_object_set_new(j, "progress", m->state == SCHED_LOADING || m->state == SCHED_RESIDENT
                                           ? progress_json(&m->load)
                                           : json_null());
    json_object_set_new(j, "last_error", m->last_error[0] ? json_string(m->last_error) : json_null());
    json_object_set_new(j, "log", json_string(m->log_path));
    return j;
}

/* Per device: its budget and what holders use, GPUs first, then the host. */
static json_t *devices_json(const struct sched *s, const struct usage *used) {
    json_t *a = json_array();
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++) {
        char dev[16];
        json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:b}", "device",
                                           place_device_name((int32_t)g, dev, sizeof dev),
                                           "budget_bytes", (json_int_t)s->p.gpu_budget[g],
                                           "used_bytes", (json_int_t)used->gpu[g], "simulated",
                                           s->p.simulated));
    }
    json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:b}", "device", "host", "budget_bytes",
                                       (json_int_t)s->p.host_budget, "used_bytes",
                                       (json_int_t)used->host, "simulated", false));
    return a;
}

struct upstream_client *sched_engine_client(struct sched *s) { return s->http; }

void sched_slots(const struct sched *s, uint32_t *busy, uint32_t *total) {
    *busy = *total = 0;
    for (size_t i = 0; i < s->n_models; i++) {
        const struct smodel *m = s->models[i];
        if (m->state != SCHED_RESIDENT)
            continue;
        *busy += m->n_running;
        *total += m->settings.parallel;
    }
}

/* What m's engine holds now: its resident set (host memory) and, on a real
 * GPU with NVML, its memory there; each -1 when unknown. */
static void measure(const struct smodel *m, int64_t *rss, int64_t *gpu) {
    uint64_t kb, bytes;
    long pid = m->child ? (long)engine_child_pid(m->child) : 0;
    *rss = pid && host_proc_field(pid, "status", "VmRSS:", &kb) == TANDEM_OK ? (int64_t)kb * 1024
                                                                             : -1;
    *gpu = pid && m->device >= 0 && m->s->p.nvml && !m->s->p.simulated &&
                   nvml_process_used_bytes(m->s->p.nvml, (unsigned)m->device, pid, &bytes) ==
                       TANDEM_OK
               ? (int64_t)bytes
               : -1;
}

static json_t *bytes_or_null(int64_t b) { return b >= 0 ? json_integer(b) : json_null(); }

/* Adds b (when known) to *sum, which is -1 until something is known. */
static void add_known(int64_t *sum, int64_t b) {
    if (b >= 0)
        *sum = (*sum < 0 ? 0 : *sum) + b;
}

/* Measured use per device: what its engines hold, -1 when nothing is known. */
struct measured {
    int64_t gpu[PLACE_MAX_GPUS], host;
};

/* The engines holding memory, planned against measured; adds to *planned and *meas. */
static json_t *memory_models_json(const struct sched *s, struct usage *planned,
                                  struct measured *meas) {
    json_t *models = json_array();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct smodel *m = s->models[i];
        if (!holds_memory(m))
            continue;
        add_usage(planned, m);
        int64_t rss, gpu;
        measure(m, &rss, &gpu);
        add_known(&meas->host, rss);
        if (m->device >= 0 && m->device < PLACE_MAX_GPUS)
            add_known(&meas->gpu[m->device], gpu);
        char dev[16];
        json_array_append_new(models, json_pack("{sssssIsIsoso}", "model", m->name, "device",
                                                place_device_name(m->device, dev, sizeof dev),
                                                "planned_gpu_bytes", (json_int_t)m->gpu,
                                                "planned_host_bytes", (json_int_t)m->host,
                                                "measured_gpu_bytes", bytes_or_null(gpu),
                                                "rss_bytes", bytes_or_null(rss)));
    }
    return models;
}

static json_t *memory_device_json(const char *device, uint64_t budget, uint64_t planned,
                                  int64_t measured) {
    return json_pack("{sssIsIso}", "device", device, "budget_bytes", (json_int_t)budget,
                     "planned_bytes", (json_int_t)planned, "measured_bytes",
                     bytes_or_null(measured));
}

json_t *sched_memory_json(const struct sched *s) {
    struct usage planned = {0};
    struct measured meas = {.host = -1};
    for (size_t g = 0; g < PLACE_MAX_GPUS; g++)
        meas.gpu[g] = -1;
    json_t *models = memory_models_json(s, &planned, &meas), *devices = json_array();
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++) {
        char dev[16];
        json_array_append_new(devices, memory_device_json(place_device_name((int32_t)g, dev,
                                                                            sizeof dev),
                                                          s->p.gpu_budget[g], planned.gpu[g],
                                                          meas.gpu[g]));
    }
    json_array_append_new(devices, memory_device_json("host", s->p.host_budget, planned.host,
                                                      meas.host));
    return json_pack("{soso}", "devices", devices, "models", models);
}

json_t *sched_status_json(const struct sched *s) {
    int64_t now = host_now_ms();
    struct usage used = {0};
    uint64_t gpu = 0, gpu_budget = 0;
    json_t *models = json_array();
    for (size_t i = 0; i < s->n_models; i++) {
        const struct smodel *m = s->models[i];
        if (holds_memory(m))
            add_usage(&used, m);
        json_array_append_new(models, model_json(m, now));
    }
    for (uint32_t g = 0; g < s->p.n_gpus && g < PLACE_MAX_GPUS; g++)
        gpu += used.gpu[g], gpu_budget += s->p.gpu_budget[g];
    return json_pack("{s{sIsIsIsIsbso}s{sIsI}so}", "budget", "gpu_bytes", (json_int_t)gpu_budget,
                     "host_bytes", (json_int_t)s->p.host_budget, "gpu_used_bytes",
                     (json_int_t)gpu, "host_used_bytes", (json_int_t)used.host, "simulated",
                     s->p.simulated, "devices", devices_json(s, &used), "queue", "waiting",
                     (json_int_t)s->n_waiting, "depth", (json_int_t)s->p.queue_depth, "models",
                     models);
}
