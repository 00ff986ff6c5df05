/* Unit tests for api_local (the routes the api answers itself), through api_handle with
 * detached requests: every answer carries x-request-id (the client's, else a generated
 * one) and x-tandem-node, the dashboard's 304 and the event stream included; the catalog
 * and status bodies say what the daemon holds. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <jansson.h>

#include "serve/events.h"
#include "test_api_calls.h"

static struct api_fixture f;

static void setup(void) { api_fixture_init(&f, ""); }
static void teardown(void) { api_fixture_deinit(&f); }

TestSuite(api_local, .init = setup, .fini = teardown);

static bool generated_id(const char *id) {
    bool ok = id && strlen(id) == 36 && !strncmp(id, "req_", 4);
    for (size_t i = 4; ok && i < 36; i++)
        ok = strchr("0123456789abcdef", id[i]) != NULL;
    return ok;
}

/* How many headers of the answer are named name. */
static size_t header_count(const struct api_answer *a, const char *name) {
    size_t n = 0;
    for (const struct evkeyval *kv = TAILQ_FIRST(&a->headers); kv; kv = TAILQ_NEXT(kv, next))
        n += !strcasecmp(kv->key, name);
    return n;
}

/* GETs uri; *a gets the answer, and the result is its body (caller frees with done). */
static json_t *get_json(const char *uri, struct api_answer *a) {
    api_fixture_call(&f, EVHTTP_REQ_GET, uri, NULL, NULL, a);
    cr_assert_eq(a->status, 200, "%s: %d", uri, a->status);
    return api_answer_json(a);
}

static void done(json_t *j, struct api_answer *a) {
    json_decref(j);
    api_answer_clear(a);
}

Test(api_local, every_local_route_answers_with_a_request_id_and_the_node) {
    static const struct {
        enum evhttp_cmd_type method;
        const char *uri;
        int status;
    } calls[] = {
        {EVHTTP_REQ_GET, "/health", 200},       {EVHTTP_REQ_GET, "/livez", 200},
        {EVHTTP_REQ_GET, "/v1/models", 200},    {EVHTTP_REQ_GET, "/v1/status", 200},
        {EVHTTP_REQ_GET, "/metrics", 200},      {EVHTTP_REQ_GET, "/openapi.yaml", 200},
        {EVHTTP_REQ_GET, "/v1/pipelines", 200}, {EVHTTP_REQ_GET, "/ui", 200},
        {EVHTTP_REQ_HEAD, "/ui", 200},          {EVHTTP_REQ_GET, "/ui/app.css", 200},
        {EVHTTP_REQ_GET, "/ui/app.js", 200},    {EVHTTP_REQ_GET, "/ui/nothing", 404},
        {EVHTTP_REQ_GET, "/nowhere", 404},      {EVHTTP_REQ_OPTIONS, "/v1/models", 204},
        {EVHTTP_REQ_PUT, "/livez", 405},        {EVHTTP_REQ_POST, "/mcp", 404},
        {EVHTTP_REQ_POST, "/admin/models/none/load", 404}};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        struct api_answer a;
        api_fixture_call(&f, calls[i].method, calls[i].uri, NULL, NULL, &a);
        cr_expect_eq(a.count, 1, "%s", calls[i].uri);
        cr_expect_eq(a.status, calls[i].status, "%s: %d", calls[i].uri, a.status);
        cr_expect(generated_id(api_answer_header(&a, "x-request-id")), "%s: x-request-id %s",
                  calls[i].uri, api_answer_header(&a, "x-request-id"));
        cr_expect_eq(header_count(&a, "x-request-id"), 1, "%s", calls[i].uri);
        cr_expect_str_eq(api_answer_header(&a, "x-tandem-node"), "unit-node", "%s",
                         calls[i].uri);
        api_answer_clear(&a);
    }
    cr_expect_eq(api_calls_in_flight(f.api), 0);
}

Test(api_local, the_dashboards_304_carries_the_clients_request_id) {
    struct api_answer a;
    api_fixture_call(&f, EVHTTP_REQ_GET, "/ui/app.js", NULL, NULL, &a);
    char etag[64], lines[160];
    snprintf(etag, sizeof etag, "%s", api_answer_header(&a, "ETag"));
    cr_expect_eq(strlen(etag), 18, "an ETag of 16 hex digits in quotes: %s", etag);
    api_answer_clear(&a);
    snprintf(lines, sizeof lines, "If-None-Match: %s\nx-request-id: mine-304", etag);
    api_fixture_call(&f, EVHTTP_REQ_GET, "/ui/app.js", lines, NULL, &a);
    cr_expect_eq(a.status, 304);
    cr_expect_eq(a.len, 0);
    cr_expect_str_eq(api_answer_header(&a, "x-request-id"), "mine-304");
    cr_expect_str_eq(api_answer_header(&a, "ETag"), etag);
    api_answer_clear(&a);
}

Test(api_local, the_event_stream_carries_the_request_id) {
    struct api_answer a;
    api_fixture_call(&f, EVHTTP_REQ_GET, "/v1/events", "x-request-id: ev-1", NULL, &a);
    cr_expect_eq(a.count, 0, "a stream is answered when it ends");
    cr_expect_eq(events_subscribers(f.events), 1);
    events_close_all(f.events);
    cr_expect_eq(a.count, 1);
    cr_expect_eq(a.status, 200);
    cr_expect_str_eq(api_answer_header(&a, "Content-Type"), "text/event-stream");
    cr_expect_str_eq(api_answer_header(&a, "x-request-id"), "ev-1");
    cr_expect_str_eq(api_answer_header(&a, "x-tandem-node"), "unit-node");
    cr_expect(strstr(a.body, ": tandem events\n") == a.body, "%s", a.body);
    api_answer_clear(&a);
}

Test(api_local, a_refused_subscriber_gets_each_header_once) {
    events_set_max_clients(f.events, 0);
    struct api_answer a;
    api_fixture_call(&f, EVHTTP_REQ_GET, "/v1/events", NULL, NULL, &a);
    cr_expect_eq(a.status, 429);
    cr_expect_eq(header_count(&a, "x-request-id"), 1);
    cr_expect_eq(header_count(&a, "x-tandem-node"), 1);
    cr_expect_eq(header_count(&a, "Retry-After"), 1);
    json_t *j = api_answer_json(&a);
    cr_expect_str_eq(api_json_str(json_object_get(j, "error"), "type"),
                     "too_many_subscribers");
    done(j, &a);
}

Test(api_local, models_lists_both_models_and_the_default_alias) {
    struct api_answer a;
    json_t *j = get_json("/v1/models", &a);
    json_t *data = json_object_get(j, "data"), *models = json_object_get(j, "models");
    cr_assert_eq(json_array_size(data), 2);
    cr_expect_str_eq(api_json_str(json_array_get(data, 0), "id"), "kev");
    cr_expect_str_eq(api_json_str(json_array_get(data, 0), "status"), "loadable");
    cr_expect_str_eq(api_json_str(json_array_get(data, 1), "decision_type"), "");
    cr_assert_eq(json_array_size(models), 3, "kev, jev-latest and gen");
    cr_expect_str_eq(api_json_str(json_array_get(models, 1), "alias_of"), "kev");
    done(j, &a);
}

Test(api_local, status_names_the_node_and_counts_no_other_call) {
    struct api_answer a;
    json_t *j = get_json("/v1/status", &a);
    json_t *node = json_object_get(j, "node");
    cr_expect_str_eq(api_json_str(node, "id"), "unit-node");
    cr_expect_str_eq(api_json_str(node, "phase"), "serving");
    cr_expect_eq(json_integer_value(json_object_get(j, "calls_in_flight")), 0);
    cr_expect_eq(json_integer_value(json_object_get(json_object_get(j, "events"), "max")),
                 f.cfg->max_event_clients);
    done(j, &a);
}
