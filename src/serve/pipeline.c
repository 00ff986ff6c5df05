/* pipeline.c: pipeline runs (see pipeline_internal.h for the module's three files).
 *
 * A run is a small state machine on the daemon's loop, one stage in flight
 * at a time, over a compiled set (pipeline_set.c) it only reads:
 *
 *   start ──▶ DECIDE ──(confidence too low)──────────────────────▶ reject/escalate
 *               │
 *               ▼ rank candidates by probability
 *             VERIFY attempt k, stage 0..n ──(a threshold fails)──▶ next_best: k+1
 *               │                                                   reject / escalate
 *               ▼ every threshold passed
 *             accepted
 *
 * start_run() checks the request against the pipeline request contract
 * (take_request) before the first stage. run_stage() looks one POST
 * /v1/systemone up in the decision cache (a hit goes on at the loop's next
 * turn; an identical stage in flight is waited for), else submits it to the
 * scheduler (so stages wait for residency and share grouping and deadlines
 * with every other request), or to the remote set for a remote model, sends
 * it when the job starts, and hands the engine's answer
 * to the run's continuation (on_decided, on_verified, on_escalated_model).
 * Any failure ends the run through finish_error(); success through
 * finish_verdict(). Escalation to a pipeline starts a nested run with the
 * same request. */
#include "serve/pipeline.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>

#include "base/host.h"
#include "base/mem.h"
#include "proto/s1q.h"
#include "serve/pipeline_internal.h"
#include "serve/s1.h"
#include "serve/tmpl.h"

#define RENDER_MAX (1u << 20)
#define MAX_ATTEMPTS_LIMIT 64
#define STAGE_NAME_MAX 48

/* --- runs: state ------------------------------------------------------------------------------ */

typedef void (*stage_cont)(struct pipeline_run *r, json_t *response);

struct pipeline_run {
    const struct pipeline_set *set;
    const struct cpipeline *cp;
    struct pipeline_env env;
    pipeline_done_fn done;
    void *user;
    char request_id[96];
    int64_t deadline, t0;
    json_t *request;            /* a copy, for an escalation */
    json_t *state, *candidates; /* borrowed from request */
    json_t *instructions;       /* the decide instructions (owned) */
    unsigned max_attempts;
    double min_confidence;
    /* progress */
    json_t *decide;             /* {"model", "answers", ...} of the decide stage */
    json_t *choice_answer;      /* borrowed from decide: answers.choice */
    const char **ranked;        /* candidate names, most probable first (borrowed) */
    size_t n_ranked, attempt, stage;
    json_t *attempts, *cur_attempt, *verify_answers, *stages, *models;
    struct sched_timing sum;
    long tokens;
    unsigned resends;           /* stages resent after an engine failure */
    /* the stage in flight */
    char stage_name[STAGE_NAME_MAX];
    size_t stage_model;
    char *body;
    struct sched_job *job;
    struct upstream_call *up;
    struct remote_call *rcall;  /* a remote stage in flight */
    uint64_t prompt;            /* the stage's prompt key (sched_submit) */
    struct dcache_ticket *ticket; /* its part in a decision-cache flight */
    const char *stage_cache;    /* what the cache did for it ("hit", ...), NULL = nothing */
    struct event *next_ev;      /* the loop's next turn: a cache hit's answer, or a
                                 * lookup again */
    char *hit;                  /* that hit's answer; NULL: look up again */
    size_t hit_len;
    unsigned looked, cached;    /* stages the cache looked up; answered from it */
    int64_t stage_t0;
    stage_cont cont;
    struct pipeline_run *nested;
    char why[600];              /* why the decision was rejected, for an escalation */
};

static void run_free(struct pipeline_run *r) {
    dcache_ticket_cancel(r->ticket); /* identical stages waiting look up again */
    if (r->next_ev)
        event_free(r->next_ev);
    mem_free(r->hit);
    json_decref(r->request);
    json_decref(r->instructions);
    json_decref(r->decide);
    json_decref(r->attempts);
    json_decref(r->cur_attempt);
    json_decref(r->verify_answers);
    json_decref(r->stages);
    json_decref(r->models);
    mem_free(r->ranked);
    mem_free(r->body);
    mem_free(r);
}

static const char *model_name(const struct pipeline_run *r, size_t model) {
    return r->set->cfg->models[model].name;
}

/* Ends the run with outcome; frees it. */
static void finish(struct pipeline_run *r, int status, json_t *body, const char *verdict) {
    struct pipeline_outcome o = {status, body, verdict, r->sum, r->tokens, r->resends,
                                 r->looked, r->cached};
    pipeline_done_fn done = r->done;
    void *user = r->user;
    run_free(r);
    done(user, &o);
}

__attribute__((format(printf, 4, 5))) static void finish_error(struct pipeline_run *r, int status,
                                                               const char *type, const char *fmt,
                                                               ...) {
    char msg[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *body = s1_error_body(status, type, msg, NULL);
    json_object_set_new(json_object_get(body, "error"), "pipeline", json_string(r->cp->pl->name));
    json_object_set(json_object_get(body, "error"), "stages", r->stages);
    finish(r, status, body, NULL);
}

/* --- runs: one stage ---------------------------------------------------------------------------- */

static void add_timing(struct pipeline_run *r, const struct sched_timing *t) {
    r->sum.queued_ms += t->queued_ms;
    r->sum.loading_ms += t->loading_ms;
    r->sum.running_ms += t->running_ms;
    json_t *rec = json_pack("{sssssIsIsI}", "stage", r->stage_name, "model",
                            model_name(r, r->stage_model), "queued_ms", (json_int_t)t->queued_ms,
                            "loading_ms", (json_int_t)t->loading_ms, "running_ms",
                            (json_int_t)t->running_ms);
    if (r->cur_attempt)
        json_object_set_new(rec, "attempt", json_integer((json_int_t)r->attempt + 1));
    if (r->stage_cache) {
        json_object_set_new(rec, "cache", json_string(r->stage_cache));
        r->looked++;
        r->cached += !strcmp(r->stage_cache, "hit");
    }
    json_array_append_new(r->stages, rec);
}

static void on_job_fail(struct sched_job *job, int status, const char *type, const char *message,
                        void *user) {
    struct pipeline_run *r = user;
    struct sched_timing t;
    sched_job_timing(job, &t);
    r->job = NULL;
    if (r->up) {
        upstream_cancel(r->up);
        r->up = NULL;
    }
    add_timing(r, &t);
    finish_error(r, status, type, "pipeline %s, stage %s: %s", r->cp->pl->name, r->stage_name,
                 message);
}

/* The engine's error answer, with its status and message kept. */
static void stage_engine_error(struct pipeline_run *r, int status, json_t *answer,
                               const char *text, size_t len) {
    const char *msg = json_string_value(json_object_get(json_object_get(answer, "error"), "message"));
    finish_error(r, status >= 500 ? 502 : status, status >= 500 ? "upstream_error" : "invalid_request_error",
                 "pipeline %s, stage %s: model %s answered %d: %.400s", r->cp->pl->name,
                 r->stage_name, model_name(r, r->stage_model), status,
                 msg ? msg : len ? text : "(empty body)");
}

/* The stage's answer (status, text[len], parsed into answer: stolen, NULL
 * when not JSON) arrived and its timing is recorded: the run goes on, or ends
 * with the model's error. */
static void stage_answered(struct pipeline_run *r, int status, json_t *answer, const char *text,
                           size_t len) {
    json_t *in = json_object_get(json_object_get(answer, "usage"), "input_tokens");
    if (status != 200 || !json_is_object(json_object_get(answer, "answers"))) {
        stage_engine_error(r, status == 200 ? 502 : status, answer, text, len);
        json_decref(answer);
        return;
    }
    if (json_is_integer(in))
        r->tokens = (r->tokens < 0 ? 0 : r->tokens) + (long)json_integer_value(in);
    r->cont(r, answer); /* takes the reference */
}

static void on_engine_done(void *user, int status, struct evbuffer *body, const char *error) {
    struct pipeline_run *r = user;
    r->up = NULL;
    if (status == 0) {
        sched_job_upstream_failed(r->job, error); /* on_job_fail follows */
        return;
    }
    struct sched_timing t;
    size_t len = evbuffer_get_length(body);
    const char *text = len ? (const char *)evbuffer_pullup(body, (ev_ssize_t)len) : "";
    if (status >= 500 && sched_job_engine_error(r->job, status, text))
        return; /* resent: on_job_start follows */
    struct dcache_ticket *ticket = r->ticket; /* identical stages waiting get the same */
    r->ticket = NULL;
    json_t *answer = json_loadb(text, len, 0, NULL);
    json_t *in = json_object_get(json_object_get(answer, "usage"), "input_tokens");
    if (json_is_integer(in))
        sched_job_tokens(r->job, (long)json_integer_value(in));
    sched_job_timing(r->job, &t);
    sched_job_done(r->job, status == 200);
    r->job = NULL;
    add_timing(r, &t);
    stage_answered(r, status, answer, text, len); /* may free r */
    /* the waiters go on after this run has started its next stage, which they may join
     * (they are due no earlier than it) */
    dcache_ticket_done(ticket, &(struct dcache_answer){status, text, len});
}

/* A remote stage ended: an upstream's answer goes on like an engine's; no
 * answer (every upstream down or refusing, the deadline) ends the run. */
static void on_remote_done(void *user, const struct remote_result *res) {
    struct pipeline_run *r = user;
    r->rcall = NULL;
    struct sched_timing t = {.running_ms = host_now_ms() - r->stage_t0};
    add_timing(r, &t);
    if (res->from_upstream)
        stage_answered(r, res->status, json_loadb(res->body, res->len, 0, NULL), res->body,
                       res->len);
    else
        finish_error(r, res->status, res->status == 504 ? "deadline_exceeded" : "upstream_error",
                     "pipeline %s, stage %s: %s", r->cp->pl->name, r->stage_name, res->error);
}

static const struct upstream_ops engine_ops = {.done = on_engine_done};

/* The model of the stage after the running one: the first verify stage after
 * decide, the next verify stage after a verify stage, and after the last
 * one the decide stage, where the agent's next request starts (agents call a
 * pipeline in a loop). SIZE_MAX after an escalation. */
static size_t next_stage_model(const struct pipeline_run *r) {
    size_t n = r->cp->pl->n_verify;
    if (!strcmp(r->stage_name, "decide"))
        return n ? r->cp->verify[0].model : SIZE_MAX;
    if (strncmp(r->stage_name, "verify[", 7))
        return SIZE_MAX;
    return r->stage + 1 < n ? r->cp->verify[r->stage + 1].model : r->cp->decide.model;
}

static void on_job_start(struct sched_job *job, const char *socket_path, void *user) {
    struct pipeline_run *r = user;
    size_t next = next_stage_model(r);
    if (next != SIZE_MAX)
        sched_job_lookahead(job, r->set->models[next].sched_index);
    r->up = upstream_start(r->env.engines, socket_path, EVHTTP_REQ_POST, "/v1/systemone",
                                "application/json", r->body, strlen(r->body), NULL, NULL,
                                &engine_ops, r);
    if (!r->up)
        sched_job_upstream_failed(r->job, "cannot connect to the engine");
}

/* The stage's engine failed before answering: forget its request; the
 * scheduler starts the stage again (decisions are read-only). */
static void on_job_retry(struct sched_job *job, void *user) {
    (void)job;
    struct pipeline_run *r = user;
    upstream_cancel(r->up);
    r->up = NULL;
    r->resends++;
}

static const struct sched_job_ops job_ops = {
    .start = on_job_start, .fail = on_job_fail, .retry = on_job_retry};

static tandem_err submit_stage(struct pipeline_run *r);
static void fail_refused(struct pipeline_run *r, tandem_err e);

/* The loop's turn after the stage's lookup (a stage never ends inside
 * run_stage, nor a lookup again inside whatever woke it): a cache hit's
 * answer, or the stage looked up again. */
static void on_next_turn(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct pipeline_run *r = arg;
    char *text = r->hit;
    size_t len = r->hit_len;
    r->hit = NULL;
    if (!text) {
        tandem_err e = submit_stage(r);
        if (e != TANDEM_OK)
            fail_refused(r, e);
        return;
    }
    add_timing(r, &(struct sched_timing){0});
    stage_answered(r, 200, json_loadb(text, len, 0, NULL), text, len);
    mem_free(text);
}

/* Keeps hit's answer (NULL: none, look up again) and goes on with it on the
 * loop's next turn. */
static tandem_err next_turn(struct pipeline_run *r, const struct dcache_answer *hit) {
    if (!r->next_ev && !(r->next_ev = evtimer_new(r->env.base, on_next_turn, r)))
        return TANDEM_ERR_NOMEM;
    if (hit && !(r->hit = mem_strndup(hit->body, hit->len)))
        return TANDEM_ERR_NOMEM;
    r->hit_len = hit ? hit->len : 0;
    struct timeval now = {0, 0};
    evtimer_add(r->next_ev, &now);
    return TANDEM_OK;
}

/* The identical stage this one waited for ended: its answer is this one's;
 * without one (it went away), the stage is looked up again. */
static void on_stage_wake(void *user, const struct dcache_answer *a) {
    struct pipeline_run *r = user;
    r->ticket = NULL;
    if (a) {
        add_timing(r, &(struct sched_timing){0});
        stage_answered(r, a->status, json_loadb(a->body, a->len, 0, NULL), a->body, a->len);
        return;
    }
    tandem_err e = next_turn(r, NULL);
    if (e != TANDEM_OK)
        fail_refused(r, e);
}

/* The stage's body (r->body) for its local model: answered from the decision
 * cache, joined to an identical stage in flight, or submitted to the
 * scheduler. Returns the scheduler's refusal. */
static tandem_err submit_stage(struct pipeline_run *r) {
    const struct pipeline_model *pm = &r->set->models[r->stage_model];
    struct dcache_request rq = {.model = pm->sched_index, .text = r->body,
                                .len = strlen(r->body), .deadline_ms = r->deadline,
                                .no_lookup = r->env.no_lookup, .no_store = r->env.no_store,
                                .wake = on_stage_wake, .user = r};
    struct dcache_answer hit;
    enum dcache_outcome o = dcache_lookup(r->env.cache, &rq, &r->ticket, &hit);
    r->stage_cache = dcache_outcome_name(o);
    if (o == DCACHE_HIT)
        return next_turn(r, &hit);
    if (o == DCACHE_WAIT)
        return TANDEM_OK;
    uint32_t position;
    return sched_submit(r->env.sched, pm->sched_index, r->deadline, r->prompt, &job_ops, r,
                        &r->job, &position);
}

/* Sends questions (stolen) about the request's state to model; cont gets the
 * answer. Returns the scheduler's refusal (the run is still the caller's). */
static tandem_err run_stage(struct pipeline_run *r, const char *name, size_t model,
                            json_t *questions, stage_cont cont) {
    snprintf(r->stage_name, sizeof r->stage_name, "%s", name);
    r->stage_model = model;
    r->cont = cont;
    json_t *req = json_pack("{sssOso}", "model", model_name(r, model), "state", r->state,
                            "questions", questions);
    mem_free(r->body);
    r->body = req ? json_dumps(req, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    r->prompt = s1_prompt_key(req);
    json_decref(req);
    r->stage_cache = NULL;
    if (!r->body)
        return TANDEM_ERR_NOMEM;
    const struct pipeline_model *pm = &r->set->models[model];
    if (pm->remote_index != SIZE_MAX) {
        r->stage_t0 = host_now_ms();
        r->rcall = remote_call_start(r->env.remote, pm->remote_index, "/v1/systemone", r->body,
                                     strlen(r->body), r->request_id, r->deadline, on_remote_done,
                                     r);
        return r->rcall ? TANDEM_OK : TANDEM_ERR_NOMEM;
    }
    return submit_stage(r);
}

/* The scheduler's refusal e of a stage on model: its status, with the
 * error's type and message (into msg[len]). */
static int refusal(const struct pipeline_run *r, tandem_err e, size_t model, const char **type,
                   char *msg, size_t len) {
    int64_t backoff;
    const char *failure;
    *type = "unavailable_error";
    switch (e) {
    case TANDEM_ERR_TOOBIG:
        *type = "queue_full";
        tandem_errmsg(msg, len, "the admission queue is full (limits.queue_depth); retry later");
        return 429;
    case TANDEM_ERR_TIMEOUT:
        *type = "deadline_exceeded";
        tandem_errmsg(msg, len, "model %s must load first, and its expected load time ends "
                      "after the deadline", model_name(r, model));
        return 504;
    case TANDEM_ERR_UNSUPPORTED: tandem_errmsg(msg, len, "tandem is shutting down"); return 503;
    case TANDEM_ERR_ENGINE:
        failure = sched_model_failure(r->env.sched, r->set->models[model].sched_index, &backoff);
        tandem_errmsg(msg, len, "%s", failure ? failure : "the model's engine failed");
        return 503;
    default:
        *type = "internal_error";
        tandem_errmsg(msg, len, "%s", tandem_strerror(e));
        return 500;
    }
}

/* run_stage for a stage started from a callback: a refusal ends the run. */
static void run_stage_or_fail(struct pipeline_run *r, const char *name, size_t model,
                              json_t *questions, stage_cont cont) {
    tandem_err e = run_stage(r, name, model, questions, cont);
    if (e != TANDEM_OK)
        fail_refused(r, e);
}

/* Ends the run with the scheduler's refusal e of its current stage. */
static void fail_refused(struct pipeline_run *r, tandem_err e) {
    const char *type;
    char msg[1100];
    int status = refusal(r, e, r->stage_model, &type, msg, sizeof msg);
    finish_error(r, status, type, "pipeline %s, stage %s: %s", r->cp->pl->name, r->stage_name,
                 msg);
}

/* --- runs: questions ------------------------------------------------------------------------ */

static struct tmpl_values values(const struct pipeline_run *r) {
    struct tmpl_values v = {.state = r->state, .instructions = r->instructions,
                            .candidates = r->candidates, .attempt = (unsigned)r->attempt + 1,
                            .verify_answers = r->verify_answers};
    if (r->decide) {
        v.decide_answers = json_object_get(r->decide, "answers");
        v.confidence = json_number_value(json_object_get(r->choice_answer, "confidence"));
        if (r->attempt < r->n_ranked) {
            v.choice = r->ranked[r->attempt];
            v.probability = json_number_value(
                json_object_get(json_object_get(r->choice_answer, "probabilities"), v.choice));
        }
    }
    return v;
}

/* Renders t into a new JSON string; NULL with err set on failure. */
static json_t *render(const struct pipeline_run *r, const struct tmpl *t, char *err, size_t errlen) {
    struct mem_buf b;
    mem_buf_init(&b, RENDER_MAX);
    struct tmpl_values v = values(r);
    tandem_err e = tmpl_render(t, &v, &b, err, errlen);
    if (e == TANDEM_ERR_TOOBIG)
        tandem_errmsg(err, errlen, "a rendered text is over %u bytes", RENDER_MAX);
    json_t *s = e == TANDEM_OK ? json_stringn(b.data ? b.data : "", b.len) : NULL;
    if (e == TANDEM_OK && !s)
        tandem_errmsg(err, errlen, "a rendered text is not valid UTF-8");
    mem_buf_deinit(&b);
    return s;
}

/* One configured question as the API wants it, rendered for this run. */
static json_t *question_json(const struct pipeline_run *r, const struct cquestion *cq, char *err,
                             size_t errlen) {
    const struct config_question *q = cq->q;
    json_t *out = json_pack("{ssso}", "type", s1q_type_name(q->type), "instructions",
                            render(r, cq->instructions, err, errlen));
    if (!out)
        return NULL;
    json_t *crit = q->type == S1Q_TYPE_SCORE ? json_array() : q->n_criteria ? json_object() : NULL;
    for (size_t i = 0; crit && i < q->n_criteria; i++) {
        json_t *text = render(r, cq->criteria[i], err, errlen);
        if (!text || (q->keys ? json_object_set_new(crit, q->keys[i], text)
                              : json_array_append_new(crit, text))) {
            json_decref(crit);
            json_decref(out);
            return NULL;
        }
    }
    if (crit)
        json_object_set_new(out, "criteria", crit);
    return out;
}

/* The questions of stage st; on failure NULL with err set. */
static json_t *stage_questions(const struct pipeline_run *r, const struct cstage *st,
                               json_t *first, char *err, size_t errlen) {
    json_t *qs = json_object();
    if (first)
        json_object_set_new(qs, CONFIG_DECIDE_CHOICE_ID, first);
    for (size_t i = 0; qs && i < st->n; i++) {
        json_t *q = question_json(r, &st->qs[i], err, errlen);
        if (!q) {
            json_decref(qs);
            return NULL;
        }
        json_object_set_new(qs, st->qs[i].q->id, q);
    }
    return qs;
}

/* --- runs: the verdict ------------------------------------------------------------------------- */

static json_t *models_entry(const struct pipeline_run *r, const char *role, size_t model) {
    const char *sha = r->set->models[model].file_sha256;
    return json_pack("{ssssso}", "role", role, "name", model_name(r, model), "sha256",
                     sha[0] ? json_string(sha) : json_null());
}

static void finish_verdict(struct pipeline_run *r, const char *verdict, const char *choice,
                           const char *reason, json_t *escalation) {
    json_t *body = json_pack("{sssssssossso}", "pipeline", r->cp->pl->name, "request_id",
                             r->request_id, "verdict", verdict, "choice",
                             choice ? json_string(choice) : json_null(), "reason", reason,
                             "decide", json_incref(r->decide));
    json_object_set(body, "attempts", r->attempts);
    if (escalation)
        json_object_set_new(body, "escalation", escalation);
    json_object_set(body, "models", r->models);
    json_object_set_new(body, "timing", json_pack("{sIsIsIsIsO}", "total_ms",
                                                  (json_int_t)(host_now_ms() - r->t0),
                                                  "queued_ms", (json_int_t)r->sum.queued_ms,
                                                  "loading_ms", (json_int_t)r->sum.loading_ms,
                                                  "running_ms", (json_int_t)r->sum.running_ms,
                                                  "stages", r->stages));
    json_object_set_new(body, "usage", json_pack("{sI}", "input_tokens",
                                                 (json_int_t)(r->tokens < 0 ? 0 : r->tokens)));
    if (!body) {
        finish_error(r, 500, "internal_error", "out of memory");
        return;
    }
    finish(r, 200, body, verdict);
}

static void escalate(struct pipeline_run *r, const char *why);

/* The end of a rejected attempt or of a low-confidence decision. */
static void rejected(struct pipeline_run *r, const char *why) {
    if (r->cp->pl->on_reject == CONFIG_ON_REJECT_ESCALATE)
        escalate(r, why);
    else
        finish_verdict(r, "rejected", NULL, why, NULL);
}

/* Whether answer (an engine answer object) passes th. */
static bool passes(const struct config_threshold *th, const json_t *answer) {
    if (th->option) {
        const char *choice = json_string_value(json_object_get(answer, "choice"));
        return choice && !strcmp(choice, th->option);
    }
    json_t *v = json_object_get(answer, "noul");
    if (!v)
        v = json_object_get(answer, "score");
    if (!json_is_number(v))
        return false;
    double x = json_number_value(v);
    return !strcmp(th->op, ">=") ? x >= th->value : !strcmp(th->op, ">") ? x > th->value
         : !strcmp(th->op, "<=") ? x <= th->value : x < th->value;
}

static void verify_next(struct pipeline_run *r);

/* Records a verify stage's answers with their thresholds. Returns the
 * first failed question id, or NULL when every threshold passed. */
static const char *judge_stage(struct pipeline_run *r, const struct cstage *st, json_t *answers,
                               json_t *record) {
    const char *failed = NULL;
    json_t *qs = json_object();
    for (size_t i = 0; i < st->n; i++) {
        const struct cquestion *cq = &st->qs[i];
        json_t *a = json_object_get(answers, cq->q->id);
        json_object_set(r->verify_answers, cq->q->id, a ? a : json_null());
        char th[300];
        bool ok = !cq->threshold || passes(cq->threshold, a);
        if (!ok && !failed)
            failed = cq->q->id;
        json_object_set_new(qs, cq->q->id,
                            json_pack("{sOsoso}", "answer", a ? a : json_null(), "threshold",
                                      cq->threshold ? json_string(pipeline_threshold_text(
                                                          cq->threshold, th, sizeof th))
                                                    : json_null(),
                                      "passed", cq->threshold ? json_boolean(ok) : json_null()));
    }
    json_object_set_new(record, "questions", qs);
    json_object_set_new(record, "passed", json_boolean(!failed));
    return failed;
}

static void on_verified(struct pipeline_run *r, json_t *response) {
    const struct cstage *st = &r->cp->verify[r->stage];
    json_t *record = json_pack("{sisss{}}", "stage", (int)r->stage, "model",
                               model_name(r, st->model), "questions");
    const char *failed = judge_stage(r, st, json_object_get(response, "answers"), record);
    json_array_append_new(json_object_get(r->cur_attempt, "verify"), record);
    json_decref(response);
    const char *candidate = r->ranked[r->attempt];
    if (!failed && ++r->stage < r->cp->pl->n_verify) {
        verify_next(r);
        return;
    }
    json_object_set_new(r->cur_attempt, "passed", json_boolean(!failed));
    json_array_append(r->attempts, r->cur_attempt);
    json_decref(r->cur_attempt);
    r->cur_attempt = NULL;
    char why[600];
    if (!failed) {
        snprintf(why, sizeof why, "%s passed every threshold (attempt %zu)", candidate,
                 r->attempt + 1);
        finish_verdict(r, "accepted", candidate, why, NULL);
        return;
    }
    snprintf(why, sizeof why, "%s failed %s (attempt %zu)", candidate, failed, r->attempt + 1);
    size_t limit = r->cp->pl->on_reject == CONFIG_ON_REJECT_NEXT_BEST ? r->max_attempts : 1;
    if (++r->attempt < limit && r->attempt < r->n_ranked) {
        r->stage = 0;
        verify_next(r);
        return;
    }
    if (r->cp->pl->on_reject == CONFIG_ON_REJECT_NEXT_BEST && r->attempt > 1)
        snprintf(why + strlen(why), sizeof why - strlen(why), "; %zu of %zu candidates tried",
                 r->attempt, r->n_ranked);
    rejected(r, why);
}

/* Runs verify stage r->stage for candidate r->ranked[r->attempt]. */
static void verify_next(struct pipeline_run *r) {
    if (!r->cur_attempt) {
        const char *c = r->ranked[r->attempt];
        r->cur_attempt = json_pack("{sissso}", "attempt", (int)r->attempt + 1, "candidate", c,
                                   "decide", json_incref(r->choice_answer));
        json_object_set_new(r->cur_attempt, "verify", json_array());
        json_object_clear(r->verify_answers);
    }
    char err[600] = "", name[STAGE_NAME_MAX];
    const struct cstage *st = &r->cp->verify[r->stage];
    json_t *qs = stage_questions(r, st, NULL, err, sizeof err);
    snprintf(name, sizeof name, "verify[%zu]", r->stage);
    if (!qs) {
        finish_error(r, 502, "upstream_error", "pipeline %s, stage %s: %s", r->cp->pl->name,
                     name, err);
        return;
    }
    run_stage_or_fail(r, name, st->model, qs, on_verified);
}

/* --- runs: decide and escalate ------------------------------------------------------------------ */

static int by_probability(const void *a, const void *b, void *probs) {
    double pa = json_number_value(json_object_get(probs, *(const char *const *)a));
    double pb = json_number_value(json_object_get(probs, *(const char *const *)b));
    return pa > pb ? -1 : pa < pb ? 1 : 0;
}

/* Candidate names by decreasing probability, request order among equals
 * (insertion sort: stable, and there are at most 255). */
static bool rank_candidates(struct pipeline_run *r, json_t *probs) {
    size_t n = json_object_size(r->candidates);
    if (!(r->ranked = mem_calloc(n, sizeof *r->ranked)))
        return false;
    const char *key;
    json_t *v;
    json_object_foreach(r->candidates, key, v) {
        size_t i = r->n_ranked++;
        r->ranked[i] = key;
        while (i > 0 && by_probability(&r->ranked[i - 1], &r->ranked[i], probs) > 0) {
            const char *t = r->ranked[i - 1];
            r->ranked[i - 1] = r->ranked[i];
            r->ranked[i] = t;
            i--;
        }
    }
    return true;
}

/* Checks the decide answer covers every candidate with a probability. */
static const char *missing_probability(const struct pipeline_run *r, json_t *probs) {
    const char *key;
    json_t *v;
    json_object_foreach(r->candidates, key, v) {
        if (!json_is_number(json_object_get(probs, key)))
            return key;
    }
    return NULL;
}

static void on_decided(struct pipeline_run *r, json_t *response) {
    json_t *answers = json_object_get(response, "answers");
    r->decide = json_pack("{sssO}", "model", model_name(r, r->stage_model), "answers", answers);
    json_decref(response);
    r->choice_answer = json_object_get(json_object_get(r->decide, "answers"), CONFIG_DECIDE_CHOICE_ID);
    json_t *probs = json_object_get(r->choice_answer, "probabilities");
    const char *missing = missing_probability(r, probs);
    if (missing) {
        finish_error(r, 502, "upstream_error", "pipeline %s, stage decide: model %s gave no "
                     "probability for candidate %s", r->cp->pl->name,
                     model_name(r, r->stage_model), missing);
        return;
    }
    if (!rank_candidates(r, probs)) {
        finish_error(r, 500, "internal_error", "out of memory");
        return;
    }
    double confidence = json_number_value(json_object_get(r->choice_answer, "confidence"));
    if (confidence < r->min_confidence) {
        char why[300];
        snprintf(why, sizeof why, "decide confidence %.3f is below min_confidence %.3f",
                 confidence, r->min_confidence);
        rejected(r, why);
        return;
    }
    verify_next(r);
}

static void on_escalated_model(struct pipeline_run *r, json_t *response) {
    json_t *answers = json_object_get(response, "answers");
    const char *choice = json_string_value(
        json_object_get(json_object_get(answers, CONFIG_DECIDE_CHOICE_ID), "choice"));
    json_t *esc = json_pack("{sssO}", "model", model_name(r, r->stage_model), "answers", answers);
    char why[sizeof r->why + 100];
    snprintf(why, sizeof why, "%s; escalated to model %s", r->why, model_name(r, r->stage_model));
    finish_verdict(r, "escalated", choice, why, esc);
    json_decref(response);
}

static void add_nested_costs(struct pipeline_run *r, const struct pipeline_outcome *o) {
    r->sum.queued_ms += o->sum.queued_ms;
    r->sum.loading_ms += o->sum.loading_ms;
    r->sum.running_ms += o->sum.running_ms;
    if (o->input_tokens > 0)
        r->tokens = (r->tokens < 0 ? 0 : r->tokens) + o->input_tokens;
}

static void on_nested_done(void *user, struct pipeline_outcome *o) {
    struct pipeline_run *r = user;
    const char *to = r->cp->pl->escalate_pipeline;
    r->nested = NULL;
    add_nested_costs(r, o);
    json_t *err = json_object_get(o->body, "error");
    if (o->status != 200) {
        const char *type = json_string_value(json_object_get(err, "type"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        finish_error(r, o->status, type ? type : "upstream_error", "escalated to pipeline %s: %s",
                     to, msg ? msg : "failed");
        json_decref(o->body);
        return;
    }
    bool accepted = !strcmp(o->verdict, "accepted");
    char why[sizeof r->why + 300];
    snprintf(why, sizeof why, "%s; escalated to pipeline %s, which %s", r->why, to, o->verdict);
    json_t *esc = json_pack("{ssso}", "pipeline", to, "result", o->body); /* o->body stolen */
    const char *choice = accepted ? json_string_value(json_object_get(o->body, "choice")) : NULL;
    finish_verdict(r, "escalated", choice, why, esc);
}

static tandem_err start_run(const struct pipeline_set *s, const struct pipeline_env *env,
                            const struct cpipeline *cp, const json_t *request,
                            const char *request_id, int64_t deadline_ms, pipeline_done_fn done,
                            void *user, struct pipeline_run **out, int *status, char *err,
                            size_t errlen, char *param, size_t paramlen);

/* Hands the request to escalate.pipeline, or asks escalate.model to decide. */
static void escalate(struct pipeline_run *r, const char *why) {
    snprintf(r->why, sizeof r->why, "%s", why);
    const struct config_pipeline *pl = r->cp->pl;
    if (pl->escalate_model) {
        char err[600] = "";
        json_t *first = json_pack("{sssOsO}", "type", "choice", "instructions", r->instructions,
                                  "criteria", r->candidates);
        json_t *qs = stage_questions(r, &r->cp->decide, first, err, sizeof err);
        if (!qs) {
            finish_error(r, 500, "internal_error", "pipeline %s, stage escalate: %s", pl->name,
                         err);
            return;
        }
        run_stage_or_fail(r, "escalate", r->cp->escalate_model, qs, on_escalated_model);
        return;
    }
    int status;
    char msg[1000], param[128];
    const struct cpipeline *to = pipeline_set_find(r->set, pl->escalate_pipeline);
    if (start_run(r->set, &r->env, to, r->request, r->request_id, r->deadline, on_nested_done, r,
                  &r->nested, &status, msg, sizeof msg, param, sizeof param) != TANDEM_OK)
        finish_error(r, status, status == 400 ? "invalid_request_error" : "unavailable_error",
                     "escalated to pipeline %s: %s", pl->escalate_pipeline, msg);
}

/* --- runs: the request ------------------------------------------------------------------------- */

tandem_err pipeline_bad_request(char *err, size_t errlen, char *param, size_t paramlen,
                                const char *field, const char *fmt, ...) {
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    tandem_errmsg(err, errlen, "%s: %s", field, what);
    if (param && paramlen)
        snprintf(param, paramlen, "%s", field);
    return TANDEM_ERR_FORMAT;
}

static tandem_err check_candidates(const json_t *c, unsigned max, char *err, size_t errlen,
                                   char *param, size_t paramlen) {
    if (!json_is_object(c))
        return pipeline_bad_request(err, errlen, param, paramlen, "candidates",
                                    "required: an object of option -> description");
    size_t n = json_object_size(c);
    if (n < 2 || n > max)
        return pipeline_bad_request(err, errlen, param, paramlen, "candidates",
                                    "expected 2 to %u options, got %zu", max, n);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)c, key, v) {
        if (!key[0])
            return pipeline_bad_request(err, errlen, param, paramlen, "candidates",
                                        "an option name is empty");
        if (!s1q_is_text(v) && !json_is_null(v))
            return pipeline_bad_request(err, errlen, param, paramlen, "candidates",
                                        "%s: expected a string, object, array or null", key);
    }
    return TANDEM_OK;
}

/* Checks the request against the pipeline request contract and sets the
 * run's request fields and overrides. */
static tandem_err take_request(struct pipeline_run *r, const json_t *req, char *err, size_t errlen,
                               char *param, size_t paramlen) {
    static const char *const known[] = {"state", "candidates", "instructions", "max_attempts",
                                        "min_confidence", NULL};
    const char *key;
    json_t *v;
    if (!json_is_object(req))
        return pipeline_bad_request(err, errlen, param, paramlen, "(body)",
                                    "expected a JSON object");
    json_object_foreach((json_t *)req, key, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key))
            i++;
        if (!known[i])
            return pipeline_bad_request(err, errlen, param, paramlen, key,
                                        "unknown field (a pipeline request takes state, "
                                        "candidates, instructions, max_attempts, "
                                        "min_confidence)");
    }
    if (!s1q_is_text(r->state = json_object_get(req, "state")))
        return pipeline_bad_request(err, errlen, param, paramlen, "state",
                                    "required: a string, object or array");
    unsigned max = r->set->models[r->cp->decide.model].max_options;
    tandem_err e = check_candidates(r->candidates = json_object_get(req, "candidates"), max, err,
                                    errlen, param, paramlen);
    if (e != TANDEM_OK)
        return e;
    json_t *ins = json_object_get(req, "instructions");
    if (ins && !s1q_is_text(ins))
        return pipeline_bad_request(err, errlen, param, paramlen, "instructions",
                                    "expected a string, object or array");
    if (!ins && !r->cp->instructions)
        return pipeline_bad_request(err, errlen, param, paramlen, "instructions",
                                    "required: pipeline %s has no default decide.instructions",
                                    r->cp->pl->name);
    json_t *ma = json_object_get(req, "max_attempts");
    if (ma && (!json_is_integer(ma) || json_integer_value(ma) < 1 ||
               json_integer_value(ma) > MAX_ATTEMPTS_LIMIT))
        return pipeline_bad_request(err, errlen, param, paramlen, "max_attempts",
                                    "expected an integer from 1 to %d", MAX_ATTEMPTS_LIMIT);
    json_t *mc = json_object_get(req, "min_confidence");
    if (mc && (!json_is_number(mc) || json_number_value(mc) < 0 || json_number_value(mc) > 1))
        return pipeline_bad_request(err, errlen, param, paramlen, "min_confidence",
                                    "expected a number from 0 to 1");
    r->max_attempts = ma ? (unsigned)json_integer_value(ma) : r->cp->pl->max_attempts;
    r->min_confidence = mc ? json_number_value(mc) : r->cp->pl->min_confidence;
    r->instructions = json_incref(ins);
    return TANDEM_OK;
}

/* The decide stage's questions: the choice over the candidates (with the
 * request's instructions, else the pipeline's default), then the extras. */
static json_t *decide_questions(struct pipeline_run *r, char *err, size_t errlen) {
    if (!r->instructions && !(r->instructions = render(r, r->cp->instructions, err, errlen)))
        return NULL;
    json_t *first = json_pack("{sssOsO}", "type", "choice", "instructions", r->instructions,
                              "criteria", r->candidates);
    return stage_questions(r, &r->cp->decide, first, err, errlen);
}

static struct pipeline_run *run_new(const struct pipeline_set *s, const struct pipeline_env *env,
                                    const struct cpipeline *cp, const json_t *request,
                                    const char *request_id, int64_t deadline_ms) {
    struct pipeline_run *r = mem_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    *r = (struct pipeline_run){.set = s, .cp = cp, .env = *env, .deadline = deadline_ms,
                               .t0 = host_now_ms(), .tokens = -1};
    snprintf(r->request_id, sizeof r->request_id, "%s", request_id);
    r->request = json_deep_copy(request);
    r->attempts = json_array();
    r->verify_answers = json_object();
    r->stages = json_array();
    r->models = json_array();
    if (!r->request || !r->attempts || !r->verify_answers || !r->stages || !r->models) {
        run_free(r);
        return NULL;
    }
    json_array_append_new(r->models, models_entry(r, "decide", cp->decide.model));
    for (size_t v = 0; v < cp->pl->n_verify; v++)
        json_array_append_new(r->models, models_entry(r, "verify", cp->verify[v].model));
    if (cp->escalate_model != SIZE_MAX)
        json_array_append_new(r->models, models_entry(r, "escalate", cp->escalate_model));
    return r;
}

static tandem_err start_run(const struct pipeline_set *s, const struct pipeline_env *env,
                            const struct cpipeline *cp, const json_t *request,
                            const char *request_id, int64_t deadline_ms, pipeline_done_fn done,
                            void *user, struct pipeline_run **out, int *status, char *err,
                            size_t errlen, char *param, size_t paramlen) {
    *out = NULL;
    if (param && paramlen)
        param[0] = '\0';
    struct pipeline_run *r = run_new(s, env, cp, request, request_id, deadline_ms);
    if (!r) {
        *status = 500;
        tandem_errmsg(err, errlen, "out of memory");
        return TANDEM_ERR_NOMEM;
    }
    r->done = done;
    r->user = user;
    tandem_err e = take_request(r, r->request, err, errlen, param, paramlen);
    json_t *qs = e == TANDEM_OK ? decide_questions(r, err, errlen) : NULL;
    if (e == TANDEM_OK && !qs)
        e = TANDEM_ERR_FORMAT; /* the default instructions did not render */
    if (e == TANDEM_OK)
        e = run_stage(r, "decide", cp->decide.model, qs, on_decided);
    if (e != TANDEM_OK) {
        const char *type;
        *status = e == TANDEM_ERR_FORMAT ? 400 : refusal(r, e, cp->decide.model, &type, err, errlen);
        run_free(r);
        return e;
    }
    *out = r;
    return TANDEM_OK;
}

tandem_err pipeline_run_start(const struct pipeline_set *s, const struct pipeline_env *env,
                              const char *name, const json_t *request, const char *request_id,
                              int64_t deadline_ms, pipeline_done_fn done, void *user,
                              struct pipeline_run **run, int *status, char *err, size_t errlen,
                              char *param, size_t paramlen) {
    const struct cpipeline *cp = pipeline_set_find(s, name);
    if (!cp) {
        *run = NULL;
        *status = 404;
        tandem_errmsg(err, errlen, "no pipeline named \"%s\"", name);
        if (param && paramlen)
            snprintf(param, paramlen, "pipeline");
        return TANDEM_ERR_NOTFOUND;
    }
    return start_run(s, env, cp, request, request_id, deadline_ms, done, user, run, status, err,
                     errlen, param, paramlen);
}

void pipeline_run_cancel(struct pipeline_run *r) {
    if (!r)
        return;
    if (r->nested)
        pipeline_run_cancel(r->nested);
    if (r->up)
        upstream_cancel(r->up);
    if (r->job)
        sched_job_cancel(r->job);
    if (r->rcall)
        remote_call_cancel(r->rcall);
    run_free(r);
}
