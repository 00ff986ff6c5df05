/* sched_policy.c: who runs, what loads, what goes, as pure functions.
 *
 * The rules (sched.c's design comment tells when they are asked):
 *   - a waiting job starts on a resident, non-draining model with a free slot;
 *   - a model loads when it fits beside every model holding memory (loading,
 *     resident or stopping), per GPU and on the host;
 *   - else, while an engine loads or stops, nothing is decided: that memory
 *     is on its way;
 *   - else residents go, lowest priority then least recently used first,
 *     never a pinned one, and only one whose going frees memory the model
 *     lacks. Pass 0 takes idle ones whose client has not come back within
 *     the linger (grouping); pass 1 busy ones once they have had their turn
 *     (turn_over: group_limit jobs started, or max_wait held, while the job
 *     waited), which bounds the starvation grouping could cause.
 * The functions take the scheduler's state as an array of views and return
 * decisions; they keep nothing between calls. */
#include "serve/sched_policy.h"

#define FAILED_BACKOFF_FIRST_MS 2000
#define FAILED_BACKOFF_MAX_MS 300000

bool sched_policy_holds_memory(enum sched_state st) {
    return st == SCHED_LOADING || st == SCHED_RESIDENT || st == SCHED_STOPPING;
}

bool sched_policy_idle(const struct sched_policy_model *m) {
    return m->running == 0 && m->waiting == 0;
}

void sched_policy_usage_add(struct sched_policy_usage *u, const struct sched_policy_model *m) {
    if (m->device >= 0 && m->device < PLACE_MAX_GPUS)
        u->gpu[m->device] += m->gpu_bytes;
    u->host += m->host_bytes;
}

static uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

static const struct sched_policy_usage NOTHING_FREED;

/* What models[index] lacks beside every model holding memory, minus freed
 * (per device; all zero = it fits). */
static struct sched_policy_usage shortfall(const struct sched_policy *p,
                                           const struct sched_policy_model *models, size_t n,
                                           size_t index, const struct sched_policy_usage *freed) {
    struct sched_policy_usage u = {0}, out = {0};
    sched_policy_usage_add(&u, &models[index]);
    for (size_t i = 0; i < n; i++)
        if (i != index && sched_policy_holds_memory(models[i].state))
            sched_policy_usage_add(&u, &models[i]);
    for (uint32_t g = 0; g < p->n_gpus && g < PLACE_MAX_GPUS; g++)
        out.gpu[g] = minus(minus(u.gpu[g], freed->gpu[g]), p->gpu_budget[g]);
    out.host = minus(minus(u.host, freed->host), p->host_budget);
    return out;
}

bool sched_policy_fits(const struct sched_policy *p, const struct sched_policy_model *models,
                       size_t n, size_t index, const struct sched_policy_usage *freed) {
    struct sched_policy_usage sh = shortfall(p, models, n, index, freed ? freed : &NOTHING_FREED);
    for (uint32_t g = 0; g < PLACE_MAX_GPUS; g++)
        if (sh.gpu[g])
            return false;
    return sh.host == 0;
}

/* Whether stopping models[r] would free memory models[index] lacks. */
static bool helps(const struct sched_policy *p, const struct sched_policy_model *models, size_t n,
                  size_t r, size_t index, const struct sched_policy_usage *freed) {
    struct sched_policy_usage sh = shortfall(p, models, n, index, freed);
    const struct sched_policy_model *v = &models[r];
    return (sh.host && v->host_bytes) ||
           (v->device >= 0 && v->device < PLACE_MAX_GPUS && sh.gpu[v->device] && v->gpu_bytes);
}

bool sched_policy_can_start(const struct sched_policy_model *m) {
    return m->state == SCHED_RESIDENT && !m->draining && m->running < m->slots;
}

bool sched_policy_counts_turn(const struct sched_policy_model *models, size_t n, size_t index) {
    for (size_t i = 0; i < n; i++)
        if (i != index && models[i].waiting && !sched_policy_holds_memory(models[i].state))
            return true;
    return false;
}

bool sched_policy_turn_over(const struct sched_policy *p, const struct sched_policy_model *r,
                            int64_t submitted_ms, int64_t now_ms) {
    int64_t since = submitted_ms > r->ready_at_ms ? submitted_ms : r->ready_at_ms;
    return r->group_count >= p->group_limit || now_ms - since >= p->max_wait_ms;
}

/* Whether models[r] could go for ask's model in pass 0 (idle ones whose
 * client has not come back, or whose turn is over) or pass 1 (busy ones
 * whose turn is over). */
static bool may_evict(const struct sched_policy *p, const struct sched_policy_model *models,
                      size_t r, int pass, const struct sched_policy_ask *ask) {
    const struct sched_policy_model *v = &models[r];
    if (r == ask->model || v->pin || v->state != SCHED_RESIDENT)
        return false;
    if (ask->admin)
        return pass == 0 && sched_policy_idle(v);
    if (pass == 0)
        return sched_policy_idle(v) &&
               (v->handed_off || ask->now_ms - v->last_used_ms >= SCHED_POLICY_LINGER_MS ||
                sched_policy_turn_over(p, v, ask->submitted_ms, ask->now_ms));
    return v->draining || sched_policy_turn_over(p, v, ask->submitted_ms, ask->now_ms);
}

static bool chosen(const size_t *victims, size_t n_victims, size_t i) {
    for (size_t k = 0; k < n_victims; k++)
        if (victims[k] == i)
            return true;
    return false;
}

/* The next victim of the pass: lowest priority, then least recently used;
 * n when there is none. */
static size_t lru_candidate(const struct sched_policy *p, const struct sched_policy_model *models,
                            size_t n, int pass, const struct sched_policy_ask *ask,
                            const size_t *victims, size_t n_victims,
                            const struct sched_policy_usage *freed) {
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        const struct sched_policy_model *r = &models[i];
        if (!chosen(victims, n_victims, i) && may_evict(p, models, i, pass, ask) &&
            helps(p, models, n, i, ask->model, freed) &&
            (best == n || r->priority < models[best].priority ||
             (r->priority == models[best].priority && r->last_used_ms < models[best].last_used_ms)))
            best = i;
    }
    return best;
}

bool sched_policy_victims(const struct sched_policy *p, const struct sched_policy_model *models,
                          size_t n, const struct sched_policy_ask *ask, size_t *victims,
                          size_t *n_victims) {
    struct sched_policy_usage freed = {0};
    *n_victims = 0;
    int passes = ask->admin ? 1 : 2;
    for (int pass = 0; pass < passes && !sched_policy_fits(p, models, n, ask->model, &freed);
         pass++) {
        size_t r;
        while (!sched_policy_fits(p, models, n, ask->model, &freed) &&
               (r = lru_candidate(p, models, n, pass, ask, victims, *n_victims, &freed)) < n) {
            victims[(*n_victims)++] = r;
            sched_policy_usage_add(&freed, &models[r]);
        }
    }
    return sched_policy_fits(p, models, n, ask->model, &freed);
}

enum sched_policy_room sched_policy_room(const struct sched_policy *p,
                                         const struct sched_policy_model *models, size_t n,
                                         const struct sched_policy_ask *ask, size_t *victims,
                                         size_t *n_victims) {
    *n_victims = 0;
    if (sched_policy_fits(p, models, n, ask->model, NULL))
        return SCHED_POLICY_ROOM_LOAD;
    for (size_t i = 0; i < n; i++)
        if (models[i].state == SCHED_STOPPING || models[i].state == SCHED_LOADING)
            return SCHED_POLICY_ROOM_SETTLING;
    if (!sched_policy_victims(p, models, n, ask, victims, n_victims))
        return SCHED_POLICY_ROOM_WAIT;
    return SCHED_POLICY_ROOM_EVICT;
}

enum sched_policy_ahead sched_policy_lookahead(const struct sched_policy *p,
                                               const struct sched_policy_model *models, size_t n,
                                               size_t next, int64_t now_ms) {
    const struct sched_policy_model *m = &models[next];
    if (sched_policy_holds_memory(m->state) || m->retry_at_ms > now_ms)
        return SCHED_POLICY_AHEAD_NONE;
    return sched_policy_fits(p, models, n, next, NULL) ? SCHED_POLICY_AHEAD_LOAD
                                                       : SCHED_POLICY_AHEAD_PREFETCH;
}

bool sched_policy_loads_past(const struct sched_policy_model *m, int64_t deadline_ms,
                             int64_t now_ms) {
    int64_t expect = m->ready_ms >= 0 ? m->ready_ms : m->load_estimate_ms;
    if (deadline_ms <= 0 || expect <= 0 || m->state == SCHED_RESIDENT)
        return false;
    if (m->state == SCHED_LOADING)
        expect -= now_ms - m->load_started_ms;
    return now_ms + expect > deadline_ms;
}

int64_t sched_policy_until_unload(const struct sched_policy_model *m, int64_t now_ms) {
    if (m->state != SCHED_RESIDENT || !sched_policy_idle(m) || m->pin || m->keep_alive_ms < 0)
        return -1;
    int64_t left = m->keep_alive_ms - (now_ms - m->last_used_ms);
    return left > 0 ? left : 0;
}

int64_t sched_policy_backoff_ms(uint32_t relapses) {
    int64_t backoff = (int64_t)FAILED_BACKOFF_FIRST_MS << (relapses < 8 ? relapses : 8);
    return backoff < FAILED_BACKOFF_MAX_MS ? backoff : FAILED_BACKOFF_MAX_MS;
}
