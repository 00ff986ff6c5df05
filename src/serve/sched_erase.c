/* sched_erase.c: the slot erase that keeps an exact repeat deterministic.
 *
 * A single-slot engine keeps the last prompt's evaluation in its slot. When
 * the next job on it has the same prompt key (sched_submit's prompt), the
 * engine would evaluate only its last token and answer with different bytes
 * than the first time (docs/serve.md, Determinism). So before such a job
 * starts, its slot is emptied: GET /slots until slot 0 is idle (every
 * ERASE_POLL_MS), then POST /slots/0?action=erase, then the job's start. A
 * failed erase starts the job anyway, and says so once per model. The job
 * holds its slot meanwhile; sched_erase_cancel ends the exchange when the
 * job goes. */
#include "serve/sched_erase.h"

#include <stdio.h>

#include "serve/upstream.h"

#define ERASE_POLL_MS 10 /* how often a busy slot is checked again before an erase */

void sched_erase_cancel(struct sched_job *j) {
    if (j->erase)
        upstream_cancel(j->erase);
    j->erase = NULL;
    if (j->erase_wait)
        event_free(j->erase_wait);
    j->erase_wait = NULL;
}

/* Whether j's answer could come from its engine's prompt cache rather than
 * from a full evaluation: its prompt key equals the last one started on this
 * single-slot engine. The engine would then find the whole prompt cached and
 * evaluate its last token alone, which gives different bytes than the first
 * answer (docs/serve.md, Determinism). Notes j's key as the last one. */
static bool repeats_last_prompt(struct sched_job *j) {
    struct sched_model *m = j->m;
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
    struct sched_model *m = j->m;
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
    struct sched_model *m = j->m;
    j->erase = NULL;
    if (status != 200) {
        erase_done(j, status, NULL, error);
    } else if (slot_busy(body)) {
        if (!j->erase_wait)
            j->erase_wait = event_new(j->s->base, -1, 0, on_erase_wait, j);
        if (j->erase_wait)
            event_add(j->erase_wait, &(struct timeval){0, ERASE_POLL_MS * 1000});
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

void sched_erase_start(struct sched_job *j) {
    if (repeats_last_prompt(j))
        check_slot(j);
    else
        j->ops->start(j, engine_child_socket(j->m->child), j->user);
}
