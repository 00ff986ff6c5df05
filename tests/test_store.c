/* Unit tests for store, the request store: a feedback body's shape, labels
 * checked against the stored request (200, the same label again, 409,
 * replace, 422, 404 unknown and expired), quality scored by the eval
 * formulas, the export as eval cases, and a database from a newer tandem
 * refused while the store keeps running. Each test runs a real store (its
 * writer thread, a SQLite file in a temporary folder) on a libevent loop. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <sqlite3.h>

#include "serve/store.h"

#define QUESTIONS                                                                                 \
    "{\"act\":{\"type\":\"choice\",\"instructions\":\"What now?\",\"criteria\":{\"reduce\":null," \
    "\"stop\":null,\"nothing\":null}},\"urgent\":{\"type\":\"noul\",\"instructions\":\"Urgent?\"}}"
#define REQUEST "{\"state\":\"disk full\",\"questions\":" QUESTIONS "}"
#define ANSWER                                                                                    \
    "{\"model\":\"m\",\"answers\":{\"act\":{\"type\":\"choice\",\"choice\":\"stop\","             \
    "\"probabilities\":{\"reduce\":0.2,\"stop\":0.5,\"nothing\":0.3},\"confidence\":0.25},"       \
    "\"urgent\":{\"type\":\"noul\",\"noul\":0.75}},\"usage\":{\"input_tokens\":9}}"
#define PIPELINE_REQUEST "{\"state\":\"disk full\",\"candidates\":{\"a\":\"x\",\"b\":\"y\"}}"
#define PIPELINE_ANSWER                                                                           \
    "{\"pipeline\":\"p\",\"verdict\":\"rejected\",\"choice\":null,\"decide\":{\"model\":\"d\","  \
    "\"answers\":{\"choice\":{\"type\":\"choice\",\"choice\":\"a\",\"probabilities\":{\"a\":0.9," \
    "\"b\":0.1},\"confidence\":0.8}}},\"attempts\":[],\"models\":[{\"role\":\"decide\","        \
    "\"name\":\"d\",\"sha256\":\"abc\"}]}"

static char dir[64], path[96];
static struct event_base *base;

struct reply {
    bool got;
    int status;
    json_t *body;
};

static void on_reply(void *user, int status, json_t *body) {
    struct reply *r = user;
    r->got = true;
    r->status = status;
    r->body = body;
}

/* Runs the loop until r has its reply (at most 10 s). */
static void wait_for(struct reply *r) {
    for (int i = 0; i < 1000 && !r->got; i++) {
        struct timeval tick = {0, 10000};
        event_base_loopexit(base, &tick);
        event_base_dispatch(base);
    }
    cr_assert(r->got, "no reply from the store");
}

static struct store *open_store(int64_t retention_ms) {
    snprintf(dir, sizeof dir, "/tmp/tandem-store-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s/store.db", dir);
    base = event_base_new();
    struct store_params p = {.path = path, .node = "n1", .bodies = true,
                             .retention_ms = retention_ms, .max_bytes = 1u << 30, .base = base};
    struct store *s;
    char err[256];
    cr_assert_eq(store_new(&p, &s, err, sizeof err), TANDEM_OK, "%s", err);
    return s;
}

static void close_store(struct store *s) {
    store_free(s);
    event_base_free(base);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void record(struct store *s, const char *id, const char *pipeline, const char *request,
                   const char *answer) {
    struct store_answer a = {.request_id = id, .model = pipeline ? NULL : "m",
                             .pipeline = pipeline, .request = request,
                             .request_len = strlen(request), .answer = answer,
                             .answer_len = strlen(answer)};
    cr_assert(store_record(s, &a));
}

/* Sends feedback text; returns the reply (caller frees its body). */
static struct reply feedback(struct store *s, const char *text) {
    char err[256], param[64];
    json_t *fb = store_feedback_parse(text, strlen(text), param, sizeof param, err, sizeof err);
    cr_assert_not_null(fb, "%s", err);
    struct reply r = {0};
    cr_assert_eq(store_feedback(s, fb, on_reply, &r), TANDEM_OK);
    wait_for(&r);
    return r;
}

static const char *message(const struct reply *r) {
    return json_string_value(json_object_get(json_object_get(r->body, "error"), "message"));
}

static void expect(struct store *s, const char *text, int status, const char *needle) {
    struct reply r = feedback(s, text);
    cr_assert_eq(r.status, status, "%s -> %d %s", text, r.status, message(&r) ?: "");
    if (needle) {
        char *dump = json_dumps(r.body, 0);
        cr_assert(strstr(dump, needle), "%s -> %s (wanted %s)", text, dump, needle);
        free(dump);
    }
    json_decref(r.body);
}

Test(store, refuses_malformed_feedback_naming_the_field) {
    static const struct {
        const char *body, *param;
    } bad[] = {{"[1]", "body"},
               {"{\"gold\":{\"q\":1}}", "request_id"},
               {"{\"request_id\":\"\",\"gold\":{\"q\":1}}", "request_id"},
               {"{\"request_id\":\"r\"}", "gold"},
               {"{\"request_id\":\"r\",\"gold\":{\"q\":1},\"outcome\":\"a\"}", "outcome"},
               {"{\"request_id\":\"r\",\"gold\":{}}", "gold"},
               {"{\"request_id\":\"r\",\"outcome\":5}", "outcome"},
               {"{\"request_id\":\"r\",\"outcome\":null,\"replace\":1}", "replace"},
               {"{\"request_id\":\"r\",\"outcome\":null,\"extra\":1}", "extra"},
               {"{\"request_id\":\"r\",\"request_id\":\"s\",\"outcome\":null}", "body"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[256] = "", param[64] = "";
        cr_assert_null(store_feedback_parse(bad[i].body, strlen(bad[i].body), param,
                                            sizeof param, err, sizeof err), "%s", bad[i].body);
        cr_assert_str_eq(param, bad[i].param, "%s: %s", bad[i].body, err);
        cr_assert(err[0]);
    }
    const char *ok = "{\"request_id\":\"r\",\"outcome\":null,\"replace\":true}";
    json_t *fb = store_feedback_parse(ok, strlen(ok), NULL, 0, NULL, 0);
    cr_assert_not_null(fb);
    json_decref(fb);
}

Test(store, checks_labels_against_the_stored_request) {
    struct store *s = open_store(86400000);
    record(s, "r1", NULL, REQUEST, ANSWER);
    record(s, "p1", "p", PIPELINE_REQUEST, PIPELINE_ANSWER);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}", 200,
           "\"labelled\": [\"act\"]");
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}", 200,
           "\"unchanged\": [\"act\"]");
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"reduce\"}}", 409, "replace");
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"reduce\"},\"replace\":true}", 200,
           "\"replaced\": [\"act\"]");
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"bogus\"}}", 422,
           "reduce, stop, nothing");
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"nope\":true}}", 422, "act, urgent");
    expect(s, "{\"request_id\":\"r1\",\"outcome\":\"stop\"}", 422, "gold");
    expect(s, "{\"request_id\":\"p1\",\"gold\":{\"choice\":\"a\"}}", 422, "outcome");
    expect(s, "{\"request_id\":\"p1\",\"outcome\":\"c\"}", 422, "a, b");
    expect(s, "{\"request_id\":\"p1\",\"outcome\":\"a\"}", 200, "\"labelled\": [\"choice\"]");
    expect(s, "{\"request_id\":\"zz\",\"outcome\":null}", 404, "no request zz");
    /* a 422 in a feedback keeps none of its labels */
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"urgent\":true,\"act\":\"bogus\"}}", 422, NULL);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"urgent\":true}}", 200,
           "\"labelled\": [\"urgent\"]");
    close_store(s);
}

Test(store, scores_quality_with_the_eval_formulas) {
    struct store *s = open_store(86400000);
    record(s, "r1", NULL, REQUEST, ANSWER);
    record(s, "p1", "p", PIPELINE_REQUEST, PIPELINE_ANSWER);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\",\"urgent\":false}}", 200, NULL);
    expect(s, "{\"request_id\":\"p1\",\"outcome\":\"a\"}", 200, NULL);
    struct reply r = {0};
    cr_assert_eq(store_quality(s, 3600000, on_reply, &r), TANDEM_OK);
    wait_for(&r);
    cr_assert_eq(r.status, 200);
    json_t *models = json_object_get(r.body, "models");
    cr_assert_eq(json_array_size(models), 2);
    json_t *act = json_array_get(models, 0), *urgent = json_array_get(models, 1);
    cr_assert_str_eq(json_string_value(json_object_get(act, "question")), "act");
    cr_assert_eq(json_integer_value(json_object_get(act, "count")), 1);
    cr_assert_float_eq(json_real_value(json_object_get(act, "accuracy")), 1.0, 1e-12);
    cr_assert_float_eq(json_real_value(json_object_get(act, "nll")), -log(0.5), 1e-12);
    cr_assert_float_eq(json_real_value(json_object_get(act, "ece")), 0.5, 1e-12);
    /* noul 0.75 against false: the top answer (true) is wrong */
    cr_assert_float_eq(json_real_value(json_object_get(urgent, "accuracy")), 0.0, 1e-12);
    cr_assert_float_eq(json_real_value(json_object_get(urgent, "nll")), -log(0.25), 1e-12);
    json_t *p = json_array_get(json_object_get(r.body, "pipelines"), 0);
    cr_assert_eq(json_integer_value(json_object_get(p, "rejected")), 1);
    cr_assert_eq(json_integer_value(json_object_get(p, "rejected_would_be_right")), 1);
    cr_assert(json_is_null(json_object_get(p, "precision")));
    json_decref(r.body);
    close_store(s);
}

static bool collect(void *user, const json_t *c, char *err, size_t errlen) {
    (void)err, (void)errlen;
    json_array_append((json_t *)user, (json_t *)c);
    return true;
}

Test(store, exports_requests_as_eval_cases) {
    struct store *s = open_store(86400000);
    record(s, "r1", NULL, REQUEST, ANSWER);
    record(s, "p1", "p", PIPELINE_REQUEST, PIPELINE_ANSWER);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}", 200, NULL);
    expect(s, "{\"request_id\":\"p1\",\"outcome\":\"b\"}", 200, NULL);
    json_t *cases = json_array();
    size_t exported = 0, skipped = 0;
    char err[256];
    struct store_export_opts o = {.since_ms = 3600000};
    cr_assert_eq(store_export(path, &o, collect, cases, &exported, &skipped, err, sizeof err),
                 TANDEM_OK, "%s", err);
    cr_assert_eq(exported, 2);
    json_t *c0 = json_array_get(cases, 0), *c1 = json_array_get(cases, 1);
    cr_assert_str_eq(json_string_value(json_object_get(c0, "id")), "r1");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c0, "gold"), "act")), "stop");
    json_t *q = json_object_get(json_object_get(c1, "questions"), "choice");
    cr_assert_str_eq(json_string_value(json_object_get(q, "type")), "choice");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c1, "gold"), "choice")), "b");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(c1, "meta"), "pipeline")), "p");
    json_decref(cases);
    close_store(s);
}

Test(store, says_a_request_expired) {
    struct store *s = open_store(1000);
    record(s, "r1", NULL, REQUEST, ANSWER);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}", 200, NULL);
    struct store_stats st;
    for (int i = 0; i < 500 && (store_stats(s, &st), st.expired == 0); i++)
        usleep(10 * 1000); /* the sweep runs every retention / 10, once the request is 1 s old */
    cr_assert_eq(st.expired, 1);
    expect(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}", 404, "expired");
    close_store(s);
}

Test(store, refuses_a_database_from_a_newer_tandem_and_serves_on) {
    snprintf(dir, sizeof dir, "/tmp/tandem-store-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/store.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    base = event_base_new();
    struct store_params p = {.path = path, .node = "n1", .retention_ms = 1000000,
                             .max_bytes = 1u << 20, .base = base};
    struct store *s;
    char err[256];
    cr_assert_eq(store_new(&p, &s, err, sizeof err), TANDEM_OK);
    record(s, "r1", NULL, REQUEST, ANSWER); /* queued, then dropped: never blocks */
    struct reply r = feedback(s, "{\"request_id\":\"r1\",\"gold\":{\"act\":\"stop\"}}");
    cr_assert_eq(r.status, 503);
    cr_assert(strstr(message(&r), "schema version 99"), "%s", message(&r));
    cr_assert(strstr(message(&r), "newer tandem"), "%s", message(&r));
    json_decref(r.body);
    struct store_stats st;
    store_stats(s, &st);
    cr_assert_str_eq(st.state, "failed");
    cr_assert_eq(st.dropped, 1);
    cr_assert_eq(st.records, 0);
    close_store(s);
}
