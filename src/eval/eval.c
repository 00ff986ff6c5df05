/* eval.c: sending an evaluation set to an endpoint and collecting the answers.
 *
 * The work is repeat * n_cases requests, numbered t = r * n_cases + c so
 * that the repeats of one case are spread over the run rather than sent
 * back to back. K worker threads take the next number from an atomic
 * counter; each owns one s1client and writes only its own answer slots, so
 * the answers need no lock. Request bodies are serialized once, before the
 * workers start, and the workers never touch the shared jansson values
 * (jansson is not thread-safe for shared values). The calling thread waits
 * on a condition variable and reports progress.
 *
 * Invariant: after eval_run_new() every answer slot is either OK with a
 * full distribution vector, or an error with a message. */
#include "eval/eval.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/s1client.h"

#define PROB_TOLERANCE 1e-6 /* how far outside [0, 1] a probability may stray */
#define SUM_TOLERANCE 1e-3  /* how far from 1 a distribution's sum may stray */
#define PROGRESS_MS 250

struct eval_params eval_default_params(void) {
    return (struct eval_params){.timeout_ms = 60000, .repeat = 1, .concurrency = 1,
                                .retries = 2, .retry_delay_ms = 500};
}

size_t eval_case_width(const struct evalset_case *c) {
    size_t w = 0;
    for (size_t i = 0; i < c->n_questions; i++)
        w += c->q[i].n_options;
    return w;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Reads one probability p at field where; fails unless it is a number in [0, 1]. */
static tandem_err read_prob(const json_t *v, const char *where, double *p, char *err,
                            size_t errlen) {
    if (!json_is_number(v)) {
        tandem_errmsg(err, errlen, "%s: %s", where, v ? "not a number" : "missing");
        return TANDEM_ERR_FORMAT;
    }
    double x = json_number_value(v);
    if (!isfinite(x) || x < -PROB_TOLERANCE || x > 1 + PROB_TOLERANCE) {
        tandem_errmsg(err, errlen, "%s: %g is not a probability", where, x);
        return TANDEM_ERR_FORMAT;
    }
    *p = x;
    return TANDEM_OK;
}

static tandem_err parse_question_answer(const struct evalset_question *q, const json_t *a,
                                        double *p, char *err, size_t errlen) {
    char where[512];
    if (!json_is_object(a)) {
        tandem_errmsg(err, errlen, "answers.%s: %s", q->id, a ? "not an object" : "missing");
        return TANDEM_ERR_FORMAT;
    }
    const char *type = json_string_value(json_object_get(a, "type"));
    if (type && strcmp(type, s1q_type_name(q->type))) {
        tandem_errmsg(err, errlen, "answers.%s.type: \"%s\", but the question is %s", q->id,
                      type, s1q_type_name(q->type));
        return TANDEM_ERR_FORMAT;
    }
    if (q->type == S1Q_TYPE_NOUL) {
        snprintf(where, sizeof where, "answers.%s.noul", q->id);
        tandem_err e = read_prob(json_object_get(a, "noul"), where, &p[0], err, errlen);
        if (e)
            return e;
        p[1] = 1 - p[0];
        return TANDEM_OK;
    }
    const json_t *probs = json_object_get(a, "probabilities");
    if (!json_is_object(probs)) {
        tandem_errmsg(err, errlen, "answers.%s.probabilities: %s", q->id,
                      probs ? "not an object" : "missing");
        return TANDEM_ERR_FORMAT;
    }
    double sum = 0;
    for (size_t i = 0; i < q->n_options; i++) {
        snprintf(where, sizeof where, "answers.%s.probabilities.%s", q->id, q->options[i]);
        tandem_err e = read_prob(json_object_get(probs, q->options[i]), where, &p[i], err,
                                 errlen);
        if (e)
            return e;
        sum += p[i];
    }
    if (fabs(sum - 1) > SUM_TOLERANCE) {
        tandem_errmsg(err, errlen, "answers.%s.probabilities: sum to %.6g, not 1", q->id, sum);
        return TANDEM_ERR_FORMAT;
    }
    return TANDEM_OK;
}

tandem_err eval_parse_answer(const struct evalset_case *c, const json_t *response, double *p,
                             char *err, size_t errlen) {
    const json_t *answers = json_object_get(response, "answers");
    if (!json_is_object(answers)) {
        tandem_errmsg(err, errlen, "answers: %s", answers ? "not an object" : "missing");
        return TANDEM_ERR_FORMAT;
    }
    size_t off = 0;
    for (size_t i = 0; i < c->n_questions; i++) {
        tandem_err e = parse_question_answer(&c->q[i], json_object_get(answers, c->q[i].id),
                                             p + off, err, errlen);
        if (e)
            return e;
        off += c->q[i].n_options;
    }
    return TANDEM_OK;
}

/* The message an error body carries: llama.cpp's error.message or TypeSafe's
 * detail (string, {message}, or [{msg}]). NULL when there is none. */
static const char *error_message(const json_t *body) {
    const json_t *e = json_object_get(body, "error");
    const char *m = json_string_value(json_object_get(e, "message"));
    if (m)
        return m;
    if (json_is_string(e))
        return json_string_value(e);
    const json_t *d = json_object_get(body, "detail");
    if (json_is_string(d))
        return json_string_value(d);
    if ((m = json_string_value(json_object_get(d, "message"))))
        return m;
    return json_string_value(json_object_get(json_array_get(d, 0), "msg"));
}

struct shared {
    const struct evalset *set;
    const struct eval_params *params;
    char **bodies;   /* per case, serialized request */
    size_t *lens;
    struct eval_answer *answers;
    size_t total;
    atomic_size_t next;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t done;     /* under lock */
};

static bool retryable(long status) { return status == 429 || status == 503 || status == 529; }

static void answer_error(struct eval_answer *a, tandem_err e, const char *msg) {
    a->status = e;
    a->error = mem_strdup(msg);
}

/* Sends one request and fills its answer slot. */
static void run_one(struct shared *sh, struct s1client *cl, size_t t) {
    size_t n = sh->set->n_cases, ci = t % n;
    const struct evalset_case *c = &sh->set->cases[ci];
    struct eval_answer *a = &sh->answers[t];
    double t0 = now_s();
    char msg[1024];
    json_t *resp = NULL;
    long delay = sh->params->retry_delay_ms;
    tandem_err e;
    for (;;) {
        a->tries++;
        e = s1client_post(cl, sh->bodies[ci], sh->lens[ci], &a->http_status, &resp, msg,
                          sizeof msg);
        if (e || !retryable(a->http_status) || a->tries > sh->params->retries)
            break;
        json_decref(resp);
        resp = NULL;
        sleep_ms(delay);
        delay *= 2;
    }
    if (e) {
        answer_error(a, e, msg);
    } else if (a->http_status != 200) {
        const char *m = resp ? error_message(resp) : NULL;
        char full[1200];
        snprintf(full, sizeof full, "HTTP %ld: %s", a->http_status,
                 m ? m : resp ? "(no error message in the body)" : msg);
        answer_error(a, TANDEM_ERR_HTTP, full);
    } else if (!resp) {
        answer_error(a, TANDEM_ERR_FORMAT, msg);
    } else {
        size_t w = eval_case_width(c);
        a->p = mem_alloc_array(w, sizeof *a->p);
        if (!a->p)
            answer_error(a, TANDEM_ERR_NOMEM, "out of memory");
        else if ((e = eval_parse_answer(c, resp, a->p, msg, sizeof msg)) != TANDEM_OK) {
            mem_free(a->p);
            a->p = NULL;
            answer_error(a, e, msg);
        } else
            a->status = TANDEM_OK;
    }
    json_decref(resp);
    a->seconds = now_s() - t0;
}

struct worker {
    pthread_t thread;
    struct shared *sh;
    struct s1client *client;
    bool started;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct shared *sh = w->sh;
    for (;;) {
        size_t t = atomic_fetch_add(&sh->next, 1);
        if (t >= sh->total)
            break;
        run_one(sh, w->client, t);
        pthread_mutex_lock(&sh->lock);
        sh->done++;
        pthread_cond_signal(&sh->cond);
        pthread_mutex_unlock(&sh->lock);
    }
    return NULL;
}

/* Serializes {"model", "state", "questions"} for case c into a mem-owned string. */
static tandem_err make_body(const struct evalset_case *c, const char *model, char **out,
                            size_t *len) {
    json_t *o = json_object();
    if (!o)
        return TANDEM_ERR_NOMEM;
    int bad = 0;
    if (model)
        bad |= json_object_set_new(o, "model", json_string(model));
    bad |= json_object_set(o, "state", c->state);
    bad |= json_object_set(o, "questions", c->questions);
    size_t n = bad ? 0 : json_dumpb(o, NULL, 0, JSON_COMPACT);
    char *s = n ? mem_alloc(n + 1) : NULL;
    if (s) {
        json_dumpb(o, s, n, JSON_COMPACT);
        s[n] = '\0';
    }
    json_decref(o);
    if (!s)
        return TANDEM_ERR_NOMEM;
    *out = s;
    *len = n;
    return TANDEM_OK;
}

static void free_bodies(struct shared *sh) {
    if (sh->bodies)
        for (size_t i = 0; i < sh->set->n_cases; i++)
            mem_free(sh->bodies[i]);
    mem_free(sh->bodies);
    mem_free(sh->lens);
}

void eval_run_free(struct eval_run *run) {
    if (!run)
        return;
    if (run->answers)
        for (size_t i = 0; i < (size_t)run->repeat * run->set->n_cases; i++) {
            mem_free(run->answers[i].p);
            mem_free(run->answers[i].error);
        }
    mem_free(run->answers);
    mem_free(run);
}

const struct eval_answer *eval_run_answer(const struct eval_run *run, size_t c, unsigned r) {
    return &run->answers[(size_t)r * run->set->n_cases + c];
}

const double *eval_run_dist(const struct eval_run *run, size_t c, unsigned r, size_t q) {
    const struct eval_answer *a = eval_run_answer(run, c, r);
    if (!a->p)
        return NULL;
    size_t off = 0;
    for (size_t i = 0; i < q; i++)
        off += run->set->cases[c].q[i].n_options;
    return a->p + off;
}

tandem_err eval_run_new(const struct evalset *set, const struct eval_params *params,
                        struct eval_run **out, char *err, size_t errlen) {
    *out = NULL;
    if (params->repeat < 1 || params->repeat > EVAL_MAX_REPEAT) {
        tandem_errmsg(err, errlen, "repeat must be 1 to %u", EVAL_MAX_REPEAT);
        return TANDEM_ERR_INVAL;
    }
    if (params->concurrency < 1 || params->concurrency > EVAL_MAX_CONCURRENCY) {
        tandem_errmsg(err, errlen, "concurrency must be 1 to %u", EVAL_MAX_CONCURRENCY);
        return TANDEM_ERR_INVAL;
    }
    struct eval_run *run = mem_calloc(1, sizeof *run);
    if (!run)
        return TANDEM_ERR_NOMEM;
    run->set = set;
    run->repeat = params->repeat;
    struct shared sh = {.set = set, .params = params};
    sh.total = (size_t)params->repeat * set->n_cases;
    unsigned k = params->concurrency;
    if (k > sh.total)
        k = sh.total ? (unsigned)sh.total : 1;
    struct worker *ws = mem_calloc(k, sizeof *ws);
    run->answers = mem_calloc(sh.total, sizeof *run->answers);
    sh.answers = run->answers;
    sh.bodies = mem_calloc(set->n_cases, sizeof *sh.bodies);
    sh.lens = mem_calloc(set->n_cases, sizeof *sh.lens);
    tandem_err e = ws && run->answers && sh.bodies && sh.lens ? TANDEM_OK : TANDEM_ERR_NOMEM;
    for (size_t i = 0; !e && i < set->n_cases; i++)
        e = make_body(&set->cases[i], params->model, &sh.bodies[i], &sh.lens[i]);
    if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(err, errlen, "out of memory");
    struct s1client_params cp = s1client_default_params();
    cp.endpoint = params->endpoint;
    cp.api_key = params->api_key;
    cp.timeout_ms = params->timeout_ms;
    /* a measurement is not traffic: tandem keeps none of it (no-store: neither the decision
     * cache nor the request store); a repeat measures the engine, not the cache (no-cache) */
    static const char *const measure[] = {"Cache-Control: no-store", NULL};
    static const char *const recompute[] = {"Cache-Control: no-cache, no-store", NULL};
    cp.headers = params->repeat > 1 ? recompute : measure;
    for (unsigned i = 0; !e && i < k; i++) {
        ws[i].sh = &sh;
        e = s1client_new(&cp, &ws[i].client, err, errlen);
    }
    if (!e)
        snprintf(run->url, sizeof run->url, "%s", s1client_url(ws[0].client));
    pthread_mutex_init(&sh.lock, NULL);
    pthread_cond_init(&sh.cond, NULL);
    atomic_init(&sh.next, 0);
    double t0 = now_s();
    unsigned started = 0;
    for (unsigned i = 0; !e && i < k; i++) {
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) != 0)
            break;
        ws[i].started = true;
        started++;
    }
    if (!e && started == 0) {
        tandem_errmsg(err, errlen, "cannot start a worker thread");
        e = TANDEM_ERR_SPAWN;
    }
    if (!e) {
        /* wait for the workers, reporting progress; fewer threads than asked is fine */
        pthread_mutex_lock(&sh.lock);
        while (sh.done < sh.total) {
            struct timespec until = host_wall_after_ms(PROGRESS_MS);
            pthread_cond_timedwait(&sh.cond, &sh.lock, &until);
            size_t done = sh.done;
            pthread_mutex_unlock(&sh.lock);
            if (params->progress && done < sh.total)
                params->progress(params->progress_user, done, sh.total, now_s() - t0);
            pthread_mutex_lock(&sh.lock);
        }
        pthread_mutex_unlock(&sh.lock);
    }
    for (unsigned i = 0; i < k && ws; i++)
        if (ws[i].started)
            pthread_join(ws[i].thread, NULL);
    run->seconds = now_s() - t0;
    if (!e && params->progress)
        params->progress(params->progress_user, sh.total, sh.total, run->seconds);
    pthread_cond_destroy(&sh.cond);
    pthread_mutex_destroy(&sh.lock);
    for (unsigned i = 0; i < k && ws; i++)
        s1client_free(ws[i].client);
    mem_free(ws);
    free_bodies(&sh);
    if (e) {
        eval_run_free(run);
        return e;
    }
    for (size_t t = 0; t < sh.total; t++)
        run->n_errors += run->answers[t].status != TANDEM_OK;
    *out = run;
    return TANDEM_OK;
}
