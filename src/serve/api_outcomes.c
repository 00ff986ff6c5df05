/* api_outcomes.c: the api's side of the request store (serve/store).
 *
 * An answered decision's request and 200 answer are handed to the store just
 * before the answer is sent (api_store_answer): the store copies them and
 * writes them on its own thread. POST /v1/feedback
 * checks the body's shape here and waits for the store's verdict; GET
 * /v1/quality asks the store for a report. The quality series on /metrics are
 * a report over store.quality_window, asked for every QUALITY_REFRESH_MS while
 * feedback arrives (and once at start), so a scrape never waits on the disk. */
#include "serve/api_internal.h"

#include <stdio.h>
#include <string.h>

#include <event2/event.h>
#include <event2/http.h>

#include "base/units.h"
#include "serve/config.h"
#include "serve/http.h"
#include "serve/prom.h"
#include "serve/store.h"

#define QUALITY_REFRESH_MS 5000 /* the quality series, at most this often */
#define QUALITY_DEFAULT_SINCE "7d"

enum { STORE_RECORDS, STORE_ERRORS, STORE_DROPPED, STORE_EXPIRED };

static uint64_t store_counter(const struct store_stats *st, size_t k) {
    const uint64_t v[API_STORE_COUNTERS] = {st->records, st->errors, st->dropped, st->expired};
    return v[k];
}

/* --- records -------------------------------------------------------------------------------- */

void api_store_answer(struct api_call *c, const char *text, size_t len) {
    struct api *a = c->api;
    if (!a->p.store || !c->body || api_call_directive(c, "no-store"))
        return; /* no-store: nothing of the request is kept (the measuring commands send it) */
    bool local_model = c->model && !c->pipeline[0];
    struct store_answer sa = {.request_id = c->id,
                              .model = local_model ? c->model->cm->name : NULL,
                              .sha256 = local_model ? c->model->file_sha256 : NULL,
                              .path = local_model && c->model->remote_index == SIZE_MAX
                                          ? c->model->cm->path : NULL,
                              .pipeline = c->pipeline[0] ? c->pipeline : NULL,
                              .request = c->body, .request_len = c->body_len,
                              .answer = text, .answer_len = len};
    store_record(a->p.store, &sa);
}

/* --- POST /v1/feedback ------------------------------------------------------------------------ */

static void count_feedback(struct api *a, int status) {
    char code[8];
    snprintf(code, sizeof code, "%d", status);
    const char *labels[] = {code};
    if (a->m_feedback)
        prom_add(a->m_feedback, labels, 1);
}

static void on_store_reply(void *user, int status, json_t *body) {
    struct api_call *c = user;
    c->store_wait = false;
    const char *msg = json_string_value(json_object_get(json_object_get(body, "error"), "message"));
    char error[600];
    snprintf(error, sizeof error, "%s", msg ? msg : "");
    if (c->route == API_ROUTE_FEEDBACK) {
        count_feedback(c->api, status);
        c->api->quality_dirty |= status == 200;
    }
    if (status == 503)
        api_call_add_retry_after(c);
    api_call_reply_json(c, status, body);
    api_call_finish(c, status, msg ? error : NULL);
}

/* 503 for a route that needs the store when it is off. Returns true when it answered. */
static bool refuse_without_store(struct api_call *c) {
    if (c->api->p.store)
        return false;
    if (c->route == API_ROUTE_FEEDBACK)
        count_feedback(c->api, 503);
    api_call_fail(c, 503, NULL, "the request store is off (store.path: off): no feedback or "
                  "quality without it", NULL, NULL);
    return true;
}

void api_feedback(struct api_call *c) {
    if (refuse_without_store(c) || !api_call_read_body(c))
        return;
    char err[512], param[128];
    json_t *fb = store_feedback_parse(c->body, c->body_len, param, sizeof param, err, sizeof err);
    if (!fb) {
        count_feedback(c->api, 400);
        api_call_fail(c, 400, NULL, err, param, NULL);
        return;
    }
    c->store_wait = true;
    if (store_feedback(c->api->p.store, fb, on_store_reply, c) != TANDEM_OK) {
        c->store_wait = false;
        count_feedback(c->api, 503);
        api_call_fail(c, 503, NULL, "the request store is stopping", NULL, NULL);
    }
}

/* --- GET /v1/quality ------------------------------------------------------------------------- */

/* The query's "since" (default QUALITY_DEFAULT_SINCE) in ms. False after failing c. */
static bool since_param(struct api_call *c, int64_t *ms) {
    struct evhttp_uri *u = evhttp_uri_parse_with_flags(http_req_uri(c->r), EVHTTP_URI_NONCONFORMANT);
    const char *query = u ? evhttp_uri_get_query(u) : NULL;
    struct evkeyvalq q;
    TAILQ_INIT(&q);
    const char *since = query && evhttp_parse_query_str(query, &q) == 0
                            ? evhttp_find_header(&q, "since") : NULL;
    char text[64];
    snprintf(text, sizeof text, "%s", since ? since : QUALITY_DEFAULT_SINCE);
    evhttp_clear_headers(&q);
    if (u)
        evhttp_uri_free(u);
    if (units_parse_ms(text, ms) == TANDEM_OK && *ms > 0)
        return true;
    char msg[200];
    snprintf(msg, sizeof msg, "since: expected a duration like 30m, 24h or 7d, got \"%s\"", text);
    api_call_fail(c, 400, NULL, msg, "since", NULL);
    return false;
}

void api_quality(struct api_call *c) {
    int64_t since_ms;
    if (refuse_without_store(c) || !since_param(c, &since_ms))
        return;
    c->store_wait = true;
    if (store_quality(c->api->p.store, since_ms, on_store_reply, c) != TANDEM_OK) {
        c->store_wait = false;
        api_call_fail(c, 503, NULL, "the request store is stopping", NULL, NULL);
    }
}

/* --- status and metrics ----------------------------------------------------------------------- */

json_t *api_store_status(struct api *a) {
    if (!a->p.store)
        return json_pack("{s:s}", "state", "off");
    struct store_stats st;
    store_stats(a->p.store, &st);
    return json_pack("{s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I}", "state", st.state, "path",
                     a->p.cfg->store_path, "error", st.error, "bodies", a->p.cfg->store_bodies,
                     "queue", (json_int_t)st.queue, "records", (json_int_t)st.records, "errors",
                     (json_int_t)st.errors, "dropped", (json_int_t)st.dropped, "expired",
                     (json_int_t)st.expired);
}

void api_store_metrics(struct api *a) {
    if (!a->p.store || !a->m_store[0])
        return;
    struct store_stats st;
    store_stats(a->p.store, &st);
    for (size_t k = 0; k < API_STORE_COUNTERS; k++)
        prom_add(a->m_store[k], NULL,
                 (double)(store_counter(&st, k) - store_counter(&a->store_published, k)));
    prom_set(a->m_store_queue, NULL, (double)st.queue);
    prom_set(a->m_store_failed, NULL, !strcmp(st.state, "failed"));
    a->store_published = st;
}

/* Sets the quality series from a report's "models" and "pipelines". */
static void publish_quality(struct api *a, const json_t *report) {
    static const char *const fields[API_QUALITY_SERIES] = {"count", "accuracy", "nll", "ece"};
    size_t i;
    json_t *g;
    json_array_foreach(json_object_get(report, "models"), i, g) {
        const char *labels[] = {json_string_value(json_object_get(g, "model")),
                                json_string_value(json_object_get(g, "question"))};
        for (size_t k = 0; k < API_QUALITY_SERIES; k++) {
            json_t *v = json_object_get(g, fields[k]);
            if (json_is_number(v))
                prom_set(a->m_quality[k], labels, json_number_value(v));
        }
    }
    json_array_foreach(json_object_get(report, "pipelines"), i, g) {
        const char *labels[] = {json_string_value(json_object_get(g, "pipeline"))};
        json_t *v = json_object_get(g, "precision");
        prom_set(a->m_pipeline_count, labels, json_number_value(json_object_get(g, "count")));
        if (json_is_number(v))
            prom_set(a->m_pipeline_precision, labels, json_number_value(v));
    }
}

static void on_quality_report(void *user, int status, json_t *body) {
    struct api *a = user;
    a->quality_asked = false;
    if (status == 200)
        publish_quality(a, body);
    json_decref(body);
}

static void on_quality_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    struct api *a = arg;
    if (!a->quality_dirty || a->quality_asked)
        return;
    a->quality_dirty = false;
    a->quality_asked = store_quality(a->p.store, a->p.cfg->store_window_ms, on_quality_report,
                                     a) == TANDEM_OK;
}

void api_outcomes_init(struct api *a) {
    static const char *const mq[] = {"model", "question", NULL};
    static const char *const pl[] = {"pipeline", NULL};
    static const char *const code[] = {"status", NULL};
    static const char *const names[API_STORE_COUNTERS][2] = {
        {"tandem_store_records_total", "Answered decisions written to the request store"},
        {"tandem_store_errors_total", "Failed request-store operations (the cause: /v1/status)"},
        {"tandem_store_dropped_total", "Answered decisions not stored (queue full, store failed)"},
        {"tandem_store_expired_total", "Stored requests deleted by store.retention or the size cap"}};
    static const char *const quality[API_QUALITY_SERIES][2] = {
        {"tandem_quality_count", "Labelled answers in store.quality_window"},
        {"tandem_quality_accuracy", "Accuracy of the labelled answers (as tandem eval)"},
        {"tandem_quality_nll", "Mean negative log-likelihood of the labelled answers, nats"},
        {"tandem_quality_ece", "Expected calibration error of the labelled answers, 15 bins"}};
    struct prom *p = a->p.metrics;
    if (!a->p.store || !p)
        return;
    for (size_t k = 0; k < API_STORE_COUNTERS; k++)
        a->m_store[k] = prom_register(p, PROM_COUNTER, names[k][0], names[k][1], NULL, NULL, 0);
    a->m_store_queue = prom_register(p, PROM_GAUGE, "tandem_store_queue",
                                     "Answered decisions waiting for the store's writer", NULL,
                                     NULL, 0);
    a->m_store_failed = prom_register(p, PROM_GAUGE, "tandem_store_failed",
                                      "1 while the request store cannot write", NULL, NULL, 0);
    a->m_feedback = prom_register(p, PROM_COUNTER, "tandem_feedback_total",
                                  "POST /v1/feedback answers, by status", code, NULL, 0);
    for (size_t k = 0; k < API_QUALITY_SERIES; k++)
        a->m_quality[k] = prom_register(p, PROM_GAUGE, quality[k][0], quality[k][1], mq, NULL, 0);
    a->m_pipeline_count = prom_register(p, PROM_GAUGE, "tandem_quality_pipeline_count",
                                        "Labelled pipeline outcomes in store.quality_window", pl,
                                        NULL, 0);
    a->m_pipeline_precision = prom_register(
        p, PROM_GAUGE, "tandem_quality_pipeline_precision",
        "Accepted decisions that were right, of the labelled accepted ones", pl, NULL, 0);
    struct timeval every = {QUALITY_REFRESH_MS / 1000, 0};
    a->quality_dirty = true; /* the series of the labels already stored */
    if ((a->quality_ev = event_new(a->p.base, -1, EV_PERSIST, on_quality_tick, a)))
        event_add(a->quality_ev, &every);
}

void api_outcomes_free(struct api *a) {
    if (a->quality_ev)
        event_free(a->quality_ev);
    store_cancel(a->p.store, a);
}
