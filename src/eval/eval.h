/* eval.h: running an evaluation set against a /v1/systemone endpoint.
 *
 * Every case is sent `repeat` times by `concurrency` worker threads, each
 * with its own s1client connection. Each answer is checked against the
 * question it answers and turned into one probability vector per question
 * (the metrics.h layout); a failed request or a malformed answer is kept as
 * a per-case error with its message, never dropped. `tandem eval` and
 * `tandem drift` both run on this. */
#ifndef TANDEM_EVAL_H
#define TANDEM_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "eval/evalset.h"

#define EVAL_MAX_REPEAT 1000u
#define EVAL_MAX_CONCURRENCY 64u

/* Called on the thread that called eval_run_new(), about four times a second
 * and once at the end: done of total requests finished, elapsed seconds. */
typedef void (*eval_progress_fn)(void *user, size_t done, size_t total, double elapsed_s);

struct eval_params {
    const char *endpoint;   /* base URL of the endpoint; borrowed for the call */
    const char *api_key;    /* bearer token; NULL = none */
    const char *model;      /* the request's "model"; NULL = field omitted */
    long timeout_ms;        /* per request, milliseconds; 0 = 60000 */
    unsigned repeat;        /* times each case is sent, 1..EVAL_MAX_REPEAT; above 1
                             * every request says Cache-Control: no-cache, so that
                             * tandem's decision cache answers none of them */
    unsigned concurrency;   /* requests in flight, 1..EVAL_MAX_CONCURRENCY */
    unsigned retries;       /* extra tries after HTTP 429, 503 or 529; 0 = none */
    long retry_delay_ms;    /* first retry delay, doubled per retry */
    eval_progress_fn progress; /* NULL = no progress reports */
    void *progress_user;
};

/* Returns the defaults: repeat 1, concurrency 1, 60 s timeout, 2 retries
 * after 500 ms, no model, key or progress. */
struct eval_params eval_default_params(void);

/* One request: case `c` sent for the r-th time. */
struct eval_answer {
    tandem_err status;  /* TANDEM_OK, or why no usable answer came back */
    long http_status;   /* the last HTTP status seen; 0 when none */
    char *error;        /* one-line reason when status != TANDEM_OK, else NULL */
    double *p;          /* the case's distributions, question by question (each
                           n_options long, in evalset order); NULL on error */
    double seconds;     /* wall time of the request, retries included */
    unsigned tries;     /* requests sent */
};

struct eval_run {
    const struct evalset *set; /* borrowed: must outlive the run */
    unsigned repeat;
    struct eval_answer *answers; /* [repeat * set->n_cases], index r * n_cases + c */
    size_t n_errors;             /* answers with status != TANDEM_OK */
    double seconds;              /* wall time of the whole run */
    char url[1024];              /* the request URL */
};

/* Sends every case of set params->repeat times and collects the answers into
 * a new run (*out; caller owns, release with eval_run_free()). Request
 * failures do not fail the call: they are recorded per answer. Returns
 * TANDEM_ERR_INVAL for bad params (a wrong endpoint URL, repeat or
 * concurrency out of range), TANDEM_ERR_NOMEM, TANDEM_ERR_HTTP when libcurl
 * cannot start, or TANDEM_ERR_SPAWN when no worker thread can start; err[errlen]
 * (optional) says why. */
tandem_err eval_run_new(const struct evalset *set, const struct eval_params *params,
                        struct eval_run **out, char *err, size_t errlen);

/* Releases the run. eval_run_free(NULL) is a no-op. */
void eval_run_free(struct eval_run *run);

/* Returns the answer of case c, repeat r (borrowed from run). */
const struct eval_answer *eval_run_answer(const struct eval_run *run, size_t c, unsigned r);

/* Returns question q's distribution in case c, repeat r (n_options doubles,
 * borrowed from run), or NULL when that request failed. */
const double *eval_run_dist(const struct eval_run *run, size_t c, unsigned r, size_t q);

/* Checks one response body (the parsed JSON of an HTTP 200 answer) against
 * case c and writes its distributions into p (sum of c's n_options doubles,
 * caller-allocated). Returns TANDEM_ERR_FORMAT with err[errlen] naming the
 * field (e.g. "answers.route.probabilities: missing option \"billing\"")
 * when the body does not answer every question. Exposed for unit tests. */
tandem_err eval_parse_answer(const struct evalset_case *c, const json_t *response, double *p,
                             char *err, size_t errlen);

/* Returns the number of doubles of case c's distributions (sum of n_options). */
size_t eval_case_width(const struct evalset_case *c);

#endif
