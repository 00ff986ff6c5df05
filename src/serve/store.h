/* store.h: the request store, one SQLite file per node (docs/serve.md, "Outcomes").
 *
 * Every answered decision (/v1/systemone on a model, and every pipeline) is
 * kept: its request id, time, node, model and file hash, each question's
 * answer keys and probabilities, a pipeline's verdict and checks, and with
 * store.bodies the request itself. Outcomes come back as labels
 * (POST /v1/feedback), validated against the stored request, and the
 * labelled requests give live quality (GET /v1/quality, /metrics) by the
 * formulas of `tandem eval` (proto/metrics).
 *
 * The daemon's side is asynchronous: one writer thread owns the database;
 * the event loop hands it jobs through a bounded queue and never waits on the
 * disk. Replies (feedback, quality) come back on the loop through a pipe
 * watched by libevent. A database that cannot be opened (corrupt, locked, a
 * newer schema, a full disk) leaves the store "failed" with its cause:
 * decisions are served on, records are dropped and counted, feedback and
 * quality get 503, and opening is retried every STORE_RETRY_MS.
 *
 * The reading side (export, `--data store:`) opens the file read-only in the
 * caller's thread. */
#ifndef TANDEM_STORE_H
#define TANDEM_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct event_base;
struct store; /* opaque */

/* The schema this tandem writes and reads (PRAGMA user_version). */
#define STORE_SCHEMA_VERSION 1

/* Answered requests waiting for the writer at most, and their bytes; past either a
 * record is dropped (and counted). */
#define STORE_QUEUE_MAX 8192u
#define STORE_QUEUE_MAX_BYTES (64u << 20)

/* How long a failed store waits before it tries to open the database again. */
#define STORE_RETRY_MS 5000

struct store_params {
    const char *path;     /* the database file (borrowed during store_new) */
    const char *node;     /* node.id, written with every request (borrowed, copied) */
    bool bodies;          /* keep each request's JSON (store.bodies) */
    int64_t retention_ms; /* requests older are deleted (store.retention) */
    uint64_t max_bytes;   /* the oldest requests go past this size (store.max_bytes) */
    struct event_base *base; /* the loop the replies come back on */
};

/* Starts the store: its writer thread opens (creating, mode 0600, and its
 * folder) the database at p->path. A database that cannot be opened is not an
 * error here: the store runs "failed" and says why in store_stats(). On
 * success *out is the new store (caller frees with store_free). Returns
 * TANDEM_ERR_NOMEM, or TANDEM_ERR_IO when the thread or its pipe cannot be
 * made (err says which). */
tandem_err store_new(const struct store_params *p, struct store **out, char *err, size_t errlen);

/* Writes what the queue holds, stops the writer and closes the database.
 * Replies still pending are dropped without their callbacks. store_free(NULL)
 * is a no-op. */
void store_free(struct store *s);

/* One answered decision, as the api hands it over: every string is copied. */
struct store_answer {
    const char *request_id;
    const char *model;    /* the model that answered; NULL for a pipeline (its decider is
                           * read from the answer's "models") */
    const char *sha256;   /* its file's SHA-256, or NULL/"" when not computed yet */
    const char *path;     /* its file, hashed by the writer when sha256 is not given (once:
                           * base/hash's digest cache); NULL for a remote model */
    const char *pipeline; /* the pipeline's name, or NULL */
    const char *request;  /* the request body (JSON text), request_len bytes */
    size_t request_len;
    const char *answer;   /* the 200 answer (JSON text), answer_len bytes */
    size_t answer_len;
};

/* Queues a, answered now, for the writer, which parses and stores it. Never
 * blocks on the disk. Returns false when it was dropped (the queue is full, the store is
 * failed, or out of memory); the drop is counted. */
bool store_record(struct store *s, const struct store_answer *a);

/* A reply: status (200, 404, 409, 422, 503...) and body (stolen by the
 * callee), on the loop's thread. */
typedef void (*store_reply_fn)(void *user, int status, json_t *body);

/* Checks the shape of a POST /v1/feedback body (text[len]): an object with a
 * non-empty string "request_id", exactly one of "gold" (an object, question
 * -> answer) and "outcome" (a string or null), and an optional boolean
 * "replace"; nothing else. Returns the parsed body (caller owns), or NULL with
 * err[errlen] "<field>: <reason>" and param[paramlen] the field ("body" for
 * a body that is not a JSON object; an unknown member's own name). */
json_t *store_feedback_parse(const char *text, size_t len, char *param, size_t paramlen,
                             char *err, size_t errlen);

/* Queues feedback fb (stolen; as store_feedback_parse returned it): the
 * writer validates it against the stored request and keeps its labels, then
 * fn(user, status, body) runs on the loop, after the labels are committed
 * (200), or with the refusal (404, 409, 422, 503). Returns TANDEM_OK;
 * TANDEM_ERR_NOMEM, TANDEM_ERR_INVAL when s is NULL, or TANDEM_ERR_CANCELLED
 * when the store is stopping: fn is never called then. */
tandem_err store_feedback(struct store *s, json_t *fb, store_reply_fn fn, void *user);

/* Queues a quality report over the requests answered in the last since_ms ms
 * (docs/serve.md, "Live quality"); fn gets 200 and the report, or 503. Returns
 * as store_feedback. */
tandem_err store_quality(struct store *s, int64_t since_ms, store_reply_fn fn, void *user);

/* The replies queued for user will not be delivered (its caller is gone). */
void store_cancel(struct store *s, const void *user);

struct store_stats {
    const char *state;       /* "ok" or "failed" (static) */
    char error[256];         /* why it failed ("" when ok) */
    size_t queue;            /* jobs waiting for the writer */
    uint64_t records;        /* requests stored */
    uint64_t errors;         /* failed database operations */
    uint64_t dropped;        /* answered requests not stored */
    uint64_t expired;        /* requests deleted by retention or the size cap */
};

/* The store's health, for /v1/status and /metrics. */
void store_stats(struct store *s, struct store_stats *out);

/* --- the reading side ------------------------------------------------------------------- */

/* Called with each exported case: one eval-format line (docs/eval-format.md)
 * as a JSON object (borrowed). Returns false to stop (an error in err). */
typedef bool (*store_case_fn)(void *user, const json_t *c, char *err, size_t errlen);

/* What store_export reads. */
struct store_export_opts {
    int64_t since_ms;     /* requests answered in the last since_ms ms */
    bool labelled;        /* only requests with at least one label */
    const char *model;    /* only this model's requests (a pipeline's: its decider); NULL = all */
};

/* Reads the store at path (read-only) and calls fn with each stored request
 * answered in the window, oldest first, as an eval-format case: "id" (the
 * request id; a repeated id gives only its latest request), "state",
 * "questions", "gold" from its labels (absent when none), and "meta" (model,
 * pipeline, node, time_ms). A pipeline request becomes the System One request
 * of the pipeline model "pipelines/NAME". Requests kept without their body
 * (store.bodies off) are skipped and counted in *skipped. Returns
 * TANDEM_ERR_IO (err: the file and SQLite's reason), TANDEM_ERR_FORMAT (a
 * schema this tandem does not read), or fn's error as TANDEM_ERR_INVAL. */
tandem_err store_export(const char *path, const struct store_export_opts *o, store_case_fn fn,
                        void *user, size_t *exported, size_t *skipped, char *err, size_t errlen);

#endif
