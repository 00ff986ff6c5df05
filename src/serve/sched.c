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
 *      back (it finished a job less than SCHED_POLICY_LINGER_MS ago) counts as busy.
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
 * (sched_policy_backoff_ms) is over.
 *
 * Files. The decisions are pure functions of the models' views
 * (sched_policy.c, with unit tests); this file holds the machinery that acts
 * on them: jobs, timers and the engines' lifecycle. What the scheduler shows
 * (status and memory JSON, events, metrics) is in sched_status.c, the slot
 * erase before a repeated prompt in sched_erase.c, and the state they share
 * in sched_internal.h. */
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
#include "serve/sched_erase.h"
#include "serve/sched_internal.h"
#include "serve/sched_policy.h"
#include "serve/sched_status.h"
#include "serve/upstream.h"
#include "base/mem.h"
#include "version.h"

#define HEALTH_POLL_MS 50
#define UPSTREAM_EXIT_WAIT_MS 250 /* how long an engine hang-up waits for its exit status */
#define DEFAULT_MAX_RESTARTS 5
#define PREFETCH_MARGIN (512ull << 20) /* host RAM a read-ahead leaves free */
#define COST_FLUSH_SAMPLES 8           /* cost samples kept in memory before a write */
#define NO_MODEL SIZE_MAX
#define MEMORY_EVENT_MS 2000   /* memory samples while someone subscribes */
#define PROGRESS_STEP 0.05     /* loading events as the weights' fraction moves this much */

static void kick(struct sched *s);
static const char *why_not_resent(struct sched_job *j);
static void resend(struct sched_job *j, const char *reason);
static void fail_engine(struct sched_job *j, const char *msg, const char *why_not);
static void stop_model(struct sched_model *m, const char *reason);
static void spawn(struct sched_model *m);

/* --- small helpers --------------------------------------------------------------------------- */

static void timer_in(struct event *ev, int64_t ms) {
    if (ms < 0)
        ms = 0;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    event_add(ev, &tv);
}

static bool holds_memory(const struct sched_model *m) {
    return sched_policy_holds_memory(m->state);
}

static bool idle(const struct sched_model *m) { return m->n_running == 0 && m->n_waiting == 0; }

void sched_model_view(const struct sched_model *m, struct sched_policy_model *v) {
    *v = (struct sched_policy_model){
        .state = m->state, .device = m->device, .gpu_bytes = m->gpu, .host_bytes = m->host,
        .pin = m->pin, .priority = m->priority, .slots = m->settings.parallel,
        .running = m->n_running, .waiting = m->n_waiting, .group_count = m->group_count,
        .draining = m->draining, .handed_off = m->handed_off, .last_used_ms = m->last_used,
        .ready_at_ms = m->ready_at, .load_started_ms = m->load_started, .ready_ms = m->ready_ms,
        .load_estimate_ms = m->load_estimate_ms, .retry_at_ms = m->retry_at,
        .keep_alive_ms = m->keep_alive_ms};
}

/* Every model's view, in index order, for one decision (valid until the
 * next call). */
static const struct sched_policy_model *views(struct sched *s) {
    for (size_t i = 0; i < s->n_models; i++)
        sched_model_view(s->models[i], &s->view[i]);
    return s->view;
}

/* Whether m fits beside every model holding memory now. */
static bool fits(struct sched *s, const struct sched_model *m) {
    return sched_policy_fits(&s->policy, views(s), s->n_models, m->index, NULL);
}

/* --- costs and read-ahead --------------------------------------------------------------------- */

/* The device kind m's measurements describe: the CPU for a CPU engine (or
 * any engine on a simulated GPU, which computes on the CPU), the GPU for an
 * engine with every layer on a real one; -1 for a partial offload, whose
 * costs are a mix of both. */
static int cost_device(const struct sched_model *m) {
    if (m->device == PLACE_CPU || m->s->p.simulated)
        return COST_CPU;
    return m->settings.ngl >= (int32_t)plan_model_n_layer(m->pm) + 1 ? COST_GPU : -1;
}

/* Writes m's pending cost samples to the cache. */
static void flush_cost(struct sched_model *m) {
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
static void note_answer(struct sched_model *m, const struct sched_job *j, int64_t now) {
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
static void prefetch(struct sched_model *m) {
    if (!m->s->p.prefetch || m->prefetched || holds_memory(m) ||
        prefetch_start(m->path, PREFETCH_MARGIN) != TANDEM_OK)
        return;
    m->prefetched = true;
    m->prefetches++;
    sched_status_count(m->s->m_prefetches, m, 1);
}

/* --- jobs ----------------------------------------------------------------------------------- */

static void job_free(struct sched_job *j) {
    struct sched *s = j->s;
    struct sched_model *m = j->m;
    sched_erase_cancel(j);
    if (j->phase == SCHED_JOB_WAITING) {
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
    sched_status_publish_state(m);
}

/* Ends j through its fail callback, then frees it. */
static void job_fail(struct sched_job *j, int status, const char *type, const char *msg) {
    j->ops->fail(j, status, type, msg, j->user);
    job_free(j);
}

static int64_t loading_overlap(const struct sched_job *j, int64_t now) {
    const struct sched_model *m = j->m;
    int64_t from = j->submitted > m->load_started ? j->submitted : m->load_started;
    int64_t to = m->state == SCHED_LOADING ? now : m->ready_at;
    return m->load_started && to > from ? to - from : 0;
}

void sched_job_timing(const struct sched_job *j, struct sched_timing *t) {
    int64_t now = host_now_ms();
    int64_t end_wait = j->phase == SCHED_JOB_WAITING ? now : j->started;
    int64_t loading = j->phase == SCHED_JOB_WAITING ? loading_overlap(j, now) : j->loading_ms;
    t->loading_ms = loading;
    t->queued_ms = end_wait - j->submitted - loading;
    if (t->queued_ms < 0)
        t->queued_ms = 0;
    t->running_ms = j->phase == SCHED_JOB_WAITING ? 0 : now - j->started;
}

size_t sched_job_model(const struct sched_job *j) { return j->m->index; }

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* What m's recent answers took, from submission, for a deadline message:
 * into buf[len], which it returns. */
static const char *recent_answers(const struct sched_model *m, char *buf, size_t len) {
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
    if (j->phase == SCHED_JOB_FAILING) { /* the engine lives on: its connection failed */
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
    const char *where = j->phase == SCHED_JOB_RUNNING ? "running"
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

static void job_start(struct sched_job *j) {
    struct sched *s = j->s;
    struct sched_model *m = j->m;
    TAILQ_REMOVE(&s->waiting, j, link);
    s->n_waiting--;
    m->n_waiting--;
    j->started = host_now_ms();
    j->loading_ms = loading_overlap(j, j->started);
    j->phase = SCHED_JOB_RUNNING;
    TAILQ_INSERT_TAIL(&m->running, j, link);
    m->n_running++;
    m->last_used = j->started;
    m->handed_off = false;
    event_del(m->timer); /* no keep-alive expiry while busy */
    if (sched_policy_counts_turn(views(s), s->n_models, m->index))
        m->group_count++; /* started while another model waits for memory */
    sched_status_publish_state(m);
    sched_erase_start(j);
}

/* Whether m cannot be ready before deadline_ms (sched_policy_loads_past). */
static bool loads_past(const struct sched_model *m, int64_t deadline_ms) {
    struct sched_policy_model v;
    sched_model_view(m, &v);
    return sched_policy_loads_past(&v, deadline_ms, host_now_ms());
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
    struct sched_model *m = s->models[index];
    *j = (struct sched_job){.s = s, .m = m, .ops = ops, .user = user, .phase = SCHED_JOB_WAITING,
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
    sched_status_publish_state(m);
    kick(s);
    return TANDEM_OK;
}

void sched_job_done(struct sched_job *j, bool ok) {
    struct sched *s = j->s;
    struct sched_model *m = j->m;
    if (ok && j->phase == SCHED_JOB_RUNNING) {
        m->relapses = 0;
        m->answered++;
        note_answer(m, j, host_now_ms());
    }
    if (j->next != NO_MODEL && j->phase == SCHED_JOB_RUNNING)
        m->handed_off = true;
    job_free(j);
    kick(s);
}

void sched_job_tokens(struct sched_job *j, long tokens) { j->tokens = tokens; }

void sched_job_lookahead(struct sched_job *j, size_t next) {
    struct sched *s = j->s;
    if (next >= s->n_models || s->models[next] == j->m || s->shutting_down)
        return;
    struct sched_model *n = s->models[next];
    j->next = next;
    n->lookaheads++;
    switch (sched_policy_lookahead(&s->policy, views(s), s->n_models, next, host_now_ms())) {
    case SCHED_POLICY_AHEAD_LOAD: /* memory allows it now: load while the current stage runs */
        spawn(n);
        break;
    case SCHED_POLICY_AHEAD_PREFETCH:
        prefetch(n);
        break;
    case SCHED_POLICY_AHEAD_NONE:
        break;
    }
}

void sched_job_cancel(struct sched_job *j) { sched_job_done(j, false); }

void sched_job_upstream_failed(struct sched_job *j, const char *upstream_message) {
    if (j->phase != SCHED_JOB_RUNNING)
        return;
    j->phase = SCHED_JOB_FAILING;
    j->upstream_msg = mem_strdup(upstream_message);
    event_del(j->timer);
    timer_in(j->timer, UPSTREAM_EXIT_WAIT_MS);
}

bool sched_job_engine_error(struct sched_job *j, int status, const char *message) {
    if (j->phase != SCHED_JOB_RUNNING || status < 500 || why_not_resent(j))
        return false;
    fprintf(stderr, "tandem: %s answered %d (%.200s)\n", j->m->name, status, message);
    resend(j, "server_error");
    kick(j->s);
    return true;
}

/* --- engine lifecycle ----------------------------------------------------------------------- */

static void fail_waiting(struct sched_model *m, int status, const char *type, const char *msg) {
    struct sched_job *j, *next;
    for (j = TAILQ_FIRST(&m->s->waiting); j; j = next) {
        next = TAILQ_NEXT(j, link);
        if (j->m == m)
            job_fail(j, status, type, msg);
    }
}

static void fail_running(struct sched_model *m, int status, const char *type, const char *msg) {
    struct sched_job *j;
    while ((j = TAILQ_FIRST(&m->running)))
        job_fail(j, status, type, msg);
}

static void set_state(struct sched_model *m, enum sched_state st) {
    m->state = st;
    sched_status_publish_state(m);
}

/* The child is gone (reaped): forget it. */
static void drop_child(struct sched_model *m) {
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
    struct sched_model *m = arg;
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
    struct sched_model *m = j->m;
    TAILQ_REMOVE(&m->running, j, link);
    m->n_running--;
    sched_erase_cancel(j);
    j->phase = SCHED_JOB_WAITING;
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
    sched_status_publish_state(m);
    j->ops->retry(j, j->user);
}

/* The engine of m is gone: each running job is resent or fails with msg. */
static void resend_or_fail_running(struct sched_model *m, const char *msg) {
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
static void fail_waiting_twice(struct sched_model *m, const char *msg) {
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
static bool crash_loop(struct sched_model *m, int64_t now) {
    uint32_t n = m->s->p.max_restarts;
    m->crash_at[m->crash_next++ % n] = now;
    return m->crash_next >= n && now - m->crash_at[m->crash_next % n] < CRASH_WINDOW_MS;
}

/* Marks m failed for a back-off that doubles with each relapse: its jobs,
 * running or waiting, and new ones until then get 503 naming the cause
 * (which must not be m->last_error, rewritten here). */
static void mark_failed(struct sched_model *m, const char *cause) {
    int64_t backoff = sched_policy_backoff_ms(m->relapses);
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
static void crashed(struct sched_model *m, const char *why) {
    bool loading = m->state == SCHED_LOADING;
    char tail[256] = "";
    engine_child_log_tail(m->child, tail, sizeof tail);
    const char *msg = m->last_error;
    tandem_errmsg(m->last_error, sizeof m->last_error, "model %s: llama-server %s%s (log %s%s%s)",
                  m->name, why, loading ? " while loading" : "", m->log_path, tail[0] ? ": " : "",
                  tail);
    m->crash_total++;
    m->crashed_last = true;
    sched_status_count(m->s->m_crashes, m, 1);
    drop_child(m);
    fprintf(stderr, "tandem: %s\n", msg);
    bool looping = crash_loop(m, host_now_ms());
    sched_status_publish(m, "crashed", json_pack("{sssbsb}", "message", msg, "while_loading",
                                                 loading, "failed", looping));
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
    struct sched_model *m = arg;
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

static void record_footprint(struct sched_model *m) {
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

static void became_ready(struct sched_model *m) {
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
    sched_status_count(m->s->m_loads, m, 1);
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
    sched_status_publish(m, "ready",
                         json_pack("{sssIsIss}", "device",
                                   place_device_name(m->device, dev, sizeof dev), "load_ms",
                                   (json_int_t)m->ready_ms, "pid",
                                   (json_int_t)engine_child_pid(m->child), "socket",
                                   engine_child_socket(m->child)));
    record_footprint(m);
    kick(m->s);
}

static void health_done(void *user, int status, struct evbuffer *body, const char *error) {
    (void)body, (void)error;
    struct sched_model *m = user;
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
    struct sched_model *m = arg;
    switch (m->state) {
    case SCHED_LOADING: /* follow the load, poll /health */
        if (m->progress && engine_progress_poll(m->progress, PROGRESS_STEP, &m->load))
            sched_status_publish_loading(m);
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
    struct sched_model *m = arg;
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
static tandem_err engine_paths(struct sched_model *m, char *sock, char *slots, size_t cap,
                               char *err, size_t errlen) {
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

static void spawn(struct sched_model *m) {
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
        sched_status_publish(m, "crashed", json_pack("{sssbsb}", "message", cause,
                                                     "while_loading", true, "failed", true));
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
        sched_status_publish(m, "restarted",
                             json_pack("{sI}", "crashes", (json_int_t)m->crash_total));
    sched_status_publish_loading(m);
}

/* Stops m's engine; reason is "room", "keep_alive", "admin" or "shutdown"
 * (the eviction metric's label). */
static void stop_model(struct sched_model *m, const char *reason) {
    if (m->state != SCHED_RESIDENT && m->state != SCHED_LOADING)
        return;
    fprintf(stderr, "tandem: stopping %s (%s)\n", m->name, reason);
    sched_status_publish(m, "evicted", json_pack("{ss}", "reason", reason));
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
        struct sched_policy_model v;
        sched_model_view(j->m, &v);
        if (sched_policy_can_start(&v))
            job_start(j);
    }
}

/* Stops drained residents whose last job has ended, and arms keep-alive
 * timers on idle ones. */
static void settle_residents(struct sched *s) {
    for (size_t i = 0; i < s->n_models; i++) {
        struct sched_model *m = s->models[i];
        if (m->state != SCHED_RESIDENT)
            continue;
        struct sched_policy_model v;
        sched_model_view(m, &v);
        int64_t left = sched_policy_until_unload(&v, host_now_ms());
        if (m->draining && m->n_running == 0)
            stop_model(m, "room");
        else if (left >= 0 && !event_pending(m->timer, EV_TIMEOUT, NULL))
            timer_in(m->timer, left);
    }
}

/* Makes room for m, whose oldest job is oldest (sched_policy_room): loads
 * it, or stops the idle victims and drains the busy ones, or looks again
 * later. Returns true when it loaded. */
static bool make_room(struct sched *s, struct sched_model *m, const struct sched_job *oldest) {
    size_t victims[s->n_models], n;
    struct sched_policy_ask ask = {.model = m->index, .submitted_ms = oldest->submitted,
                                   .now_ms = host_now_ms()};
    switch (sched_policy_room(&s->policy, views(s), s->n_models, &ask, victims, &n)) {
    case SCHED_POLICY_ROOM_LOAD:
        spawn(m);
        return true;
    case SCHED_POLICY_ROOM_SETTLING: /* memory is on its way: decide again when it settles */
        return false;
    case SCHED_POLICY_ROOM_WAIT: /* look again once a linger may be over (turns end by time too) */
        if (!event_pending(s->starve_ev, EV_TIMEOUT, NULL))
            timer_in(s->starve_ev, SCHED_POLICY_LINGER_MS);
        return false;
    case SCHED_POLICY_ROOM_EVICT:
        break;
    }
    prefetch(m); /* while the victims drain and exit */
    for (size_t i = 0; i < n; i++) {
        struct sched_model *r = s->models[victims[i]];
        if (idle(r))
            stop_model(r, "room");
        else if (!r->draining) {
            r->draining = true;
            fprintf(stderr, "tandem: draining %s to make room for %s\n", r->name, m->name);
        }
    }
    settle_residents(s);
    return false;
}

/* The oldest job whose model has no engine (and is not backing off). */
static struct sched_job *oldest_unloaded(struct sched *s, int64_t now) {
    struct sched_job *j;
    TAILQ_FOREACH(j, &s->waiting, link) {
        struct sched_model *m = j->m;
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
        struct sched_model *m = s->models[i];
        if (m->load_asked && !holds_memory(m) && fits(s, m)) {
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
        s->queue_ev = evtimer_new(base, sched_status_queue_event, s);
        s->memory_ev = event_new(base, -1, EV_PERSIST, sched_status_memory_event, s);
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
    s->policy = (struct sched_policy){.n_gpus = p->n_gpus, .host_budget = p->host_budget,
                                      .group_limit = p->group_limit,
                                      .max_wait_ms = p->max_wait_ms};
    memcpy(s->policy.gpu_budget, p->gpu_budget, sizeof s->policy.gpu_budget);
    sched_status_metrics_register(s);
    if (s->memory_ev)
        event_add(s->memory_ev, &(struct timeval){MEMORY_EVENT_MS / 1000, 0});
    return s;
}

static void free_model(struct sched_model *m) {
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
    mem_free(s->view);
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
    struct sched_model **grown = mem_realloc(s->models, (s->n_models + 1) * sizeof *grown);
    if (!grown)
        return TANDEM_ERR_NOMEM;
    s->models = grown;
    struct sched_policy_model *view = mem_realloc(s->view, (s->n_models + 1) * sizeof *view);
    if (!view)
        return TANDEM_ERR_NOMEM;
    s->view = view;
    struct sched_model *m = mem_calloc(1, sizeof *m);
    if (!m)
        return TANDEM_ERR_NOMEM;
    *m = (struct sched_model){.s = s, .index = s->n_models, .pm = spec->model,
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
    sched_status_publish_state(m);
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
    struct sched_model *m = s->models[index];
    if (holds_memory(m) || s->shutting_down)
        return m->state == SCHED_STOPPING ? TANDEM_ERR_UNSUPPORTED : TANDEM_OK;
    if (fits(s, m)) {
        spawn(m);
        return TANDEM_OK;
    }
    size_t victims[s->n_models], n;
    struct sched_policy_ask ask = {.model = index, .admin = true};
    if (!sched_policy_victims(&s->policy, views(s), s->n_models, &ask, victims, &n))
        return TANDEM_ERR_TOOBIG;
    for (size_t i = 0; i < n; i++)
        stop_model(s->models[victims[i]], "room");
    m->load_asked = true; /* load_asked_models() loads it once they have exited */
    return TANDEM_OK;
}

tandem_err sched_unload(struct sched *s, size_t index) {
    if (index >= s->n_models)
        return TANDEM_ERR_RANGE;
    struct sched_model *m = s->models[index];
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
    const struct sched_model *m = s->models[i];
    *out = (struct sched_counts){.loads = m->loads, .evictions = m->evictions,
                                 .crashes = m->crash_total, .retries = m->retries,
                                 .prefetches = m->prefetches, .lookaheads = m->lookaheads,
                                 .waiting = m->n_waiting, .running = m->n_running};
}

const char *sched_model_failure(const struct sched *s, size_t i, int64_t *retry_in_ms) {
    const struct sched_model *m = s->models[i];
    int64_t left = m->retry_at - host_now_ms();
    if (m->state != SCHED_FAILED || left <= 0)
        return NULL;
    *retry_in_ms = left;
    return m->last_error;
}

struct upstream_client *sched_engine_client(struct sched *s) { return s->http; }

void sched_slots(const struct sched *s, uint32_t *busy, uint32_t *total) {
    *busy = *total = 0;
    for (size_t i = 0; i < s->n_models; i++) {
        const struct sched_model *m = s->models[i];
        if (m->state != SCHED_RESIDENT)
            continue;
        *busy += m->n_running;
        *total += m->settings.parallel;
    }
}

