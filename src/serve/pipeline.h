/* pipeline.h: decide-then-verify pipelines (docs/pipelines.md).
 *
 * A pipeline asks a decider to choose among the request's candidates, asks
 * one or more verifiers about the chosen candidate, and applies a verdict
 * rule: thresholds per verify question, a minimum decide confidence, and what
 * to do on a reject (verify the next most probable candidate, reject, or
 * escalate to another pipeline or model). Every stage is one POST
 * /v1/systemone to the stage model's engine, scheduled like any request
 * (sched), so stages share residency, grouping and deadlines with the rest of
 * the daemon.
 *
 * A pipeline set is compiled once from the config: templates, models and
 * option counts are checked there, so a request can only fail for what it
 * carries or for what happens at run time. A stage on a remote model
 * (upstream:) is the same POST sent through the remote set instead. */
#ifndef TANDEM_PIPELINE_H
#define TANDEM_PIPELINE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/config.h"
#include "serve/dcache.h"
#include "base/err.h"
#include "serve/http.h"
#include "serve/remote.h"
#include "serve/sched.h"
#include "serve/upstream.h"

/* A model as pipelines see it: entry i describes cfg->models[i]. */
struct pipeline_model {
    size_t sched_index;        /* the scheduler's index of a local model, else SIZE_MAX */
    size_t remote_index;       /* the remote set's index of a remote model, else SIZE_MAX */
    const char *decision_type; /* "" = not a decision model */
    unsigned max_options;      /* choice options the model takes */
    const char *file_sha256;   /* hex digest of the whole GGUF file; "" = unknown */
};

/* What runs need; everything is borrowed and must outlive the runs. */
struct pipeline_env {
    struct sched *sched;
    struct upstream_client *engines;
    struct remote *remote;     /* NULL when no model is remote */
    struct dcache *cache;      /* the decision cache, for local stages; NULL = none */
    bool no_lookup, no_store;  /* the request's Cache-Control: no-cache, no-store
                                * (struct dcache_request), for every stage */
    struct event_base *base;   /* where a stage's cache hit is answered (next turn);
                                * required with cache */
};

struct pipeline_set; /* opaque: the compiled pipelines of one config */
struct pipeline_run; /* opaque: one request in flight */

/* Compiles every pipeline of cfg (borrowed: it must outlive the set) against
 * models[cfg->n_models] (borrowed, likewise). On success *out is a new set
 * (caller frees with pipeline_set_free), possibly empty. Returns
 * TANDEM_ERR_FORMAT with err[errlen] "<file>:<line>: <key.path>: <what>" for a
 * template with a bad reference, a stage model without decision metadata, a
 * choice question with more options than its model takes; TANDEM_ERR_NOMEM. */
tandem_err pipeline_set_new(const struct config *cfg, const struct pipeline_model *models,
                            struct pipeline_set **out, char *err, size_t errlen);

/* Releases s. Runs still in flight must have been cancelled first.
 * pipeline_set_free(NULL) is a no-op. */
void pipeline_set_free(struct pipeline_set *s);

/* GET /v1/pipelines: {"pipelines": [{"name", "decide": {"model"}, "verify":
 * [{"model", "questions": [...]}], "verdict": {...}}]}. New reference, NULL
 * on OOM. */
json_t *pipeline_set_list_json(const struct pipeline_set *s);

/* How a run ended, for the caller's answer, audit line and metrics. */
struct pipeline_outcome {
    int status;             /* HTTP status: 200 with a verdict, else an error */
    json_t *body;           /* the answer (200) or tandem's error body; owned by
                             * the callback (json_decref it) */
    const char *verdict;    /* "accepted", "rejected", "escalated"; NULL on error */
    struct sched_timing sum; /* queued, loading and running time over every stage */
    long input_tokens;      /* summed over the stages; -1 when unknown */
    unsigned resends;       /* stages resent after an engine failure */
    unsigned looked, cached; /* stages the decision cache looked up; answered from it */
};

typedef void (*pipeline_done_fn)(void *user, struct pipeline_outcome *outcome);

/* Starts pipeline name on request (borrowed: copied as needed) with the
 * caller's request_id (copied) and an absolute deadline (host_now_ms() based;
 * <= 0 = none). On TANDEM_OK, *run is the run and done is called exactly
 * once, later (never from inside this call), after which the run is freed.
 * Otherwise nothing is called back and *status (output) is the HTTP status
 * to answer, with err[errlen] the message and param[paramlen] (both optional
 * outputs) the field at fault ("" when none): TANDEM_ERR_NOTFOUND (404, no
 * such pipeline), TANDEM_ERR_FORMAT (400, the request breaks the pipeline
 * request contract), TANDEM_ERR_TOOBIG (429, the queue is full),
 * TANDEM_ERR_TIMEOUT (504, the decide model must load and cannot in time),
 * TANDEM_ERR_UNSUPPORTED (503, shutting down), TANDEM_ERR_NOMEM (500). */
tandem_err pipeline_run_start(const struct pipeline_set *s, const struct pipeline_env *env,
                              const char *name, const json_t *request, const char *request_id,
                              int64_t deadline_ms, pipeline_done_fn done, void *user,
                              struct pipeline_run **run, int *status, char *err, size_t errlen,
                              char *param, size_t paramlen);

/* Abandons a run (its client went away): the stage in flight is cancelled
 * and the run freed; done is not called. */
void pipeline_run_cancel(struct pipeline_run *run);

/* --- the same pipelines on POST /v1/systemone (docs/pipelines.md) --- */

#define PIPELINE_QUESTION_MAX 128 /* bytes of a question name, with its NUL */

/* Reads request (a /v1/systemone body for model CONFIG_PIPELINE_MODEL_PREFIX
 * "<name>", borrowed) as a pipeline request: it must ask exactly one
 * question, a choice, whose criteria become the candidates and whose
 * instructions (optional) the instructions; state and every other top-level
 * field but model and questions are carried over as they are (max_attempts
 * and min_confidence stay overrides; anything else is refused later by
 * pipeline_run_start). On TANDEM_OK *out is a new reference
 * and question the question's name. TANDEM_ERR_FORMAT: err[errlen] names the
 * field ("questions.act.type: ...") and param[paramlen] (optional) is the
 * field; TANDEM_ERR_NOMEM. */
tandem_err pipeline_request_from_systemone(const json_t *request, json_t **out,
                                           char question[PIPELINE_QUESTION_MAX], char *err,
                                           size_t errlen, char *param, size_t paramlen);

/* Makes body (a pipeline's 200 answer, modified in place) a /v1/systemone
 * answer too: adds "model" (copied) and "answers": {question: a choice answer
 * for the accepted candidate, with the confidence and every probability of the
 * decision it came from (the escalation's, when the pipeline escalated)}, or
 * {} when no candidate was accepted. TANDEM_OK or TANDEM_ERR_NOMEM. */
tandem_err pipeline_answer_to_systemone(json_t *body, const char *model, const char *question);

/* The decide model's config index of pipeline name, or SIZE_MAX. */
size_t pipeline_decide_model(const struct pipeline_set *s, const char *name);

#endif
