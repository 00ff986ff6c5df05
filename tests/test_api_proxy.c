/* Unit tests for api_proxy (the exchanges: engines, upstreams, pipelines), through
 * api_handle with detached requests on a scheduler that is shut down: what the exchange
 * checks before it sends anything (the System One contract, the model, the deadline
 * headers, the pipeline's name) and how a refused submission is answered. */
#include <criterion/criterion.h>
#include <string.h>

#include <event2/http.h>
#include <jansson.h>

#include "test_api_calls.h"

static struct api_fixture f;

static void setup(void) { api_fixture_init(&f, ""); }
static void teardown(void) { api_fixture_deinit(&f); }

TestSuite(api_proxy, .init = setup, .fini = teardown);

#define JSON_BODY "Content-Type: application/json"
#define DECISION "{\"model\": \"%s\", \"state\": \"disk full\", \"questions\": {\"u\": " \
                 "{\"type\": \"noul\", \"instructions\": \"Is this urgent?\"}}}"

/* POSTs body to uri with headers after the JSON Content-Type; *out gets the answer and
 * the result is its "error" object (NULL for none), owned by *doc. */
static json_t *post(const char *uri, const char *headers, const char *body,
                    struct api_answer *out, json_t **doc) {
    char lines[512];
    snprintf(lines, sizeof lines, JSON_BODY "\n%s", headers ? headers : "");
    api_fixture_call(&f, EVHTTP_REQ_POST, uri, lines, body, out);
    cr_assert_eq(out->count, 1);
    *doc = api_answer_json(out);
    return json_object_get(*doc, "error");
}

Test(api_proxy, a_decision_for_a_generative_model_is_501) {
    char body[256];
    snprintf(body, sizeof body, DECISION, "gen");
    struct api_answer a;
    json_t *doc, *err = post("/v1/systemone", NULL, body, &a, &doc);
    cr_expect_eq(a.status, 501);
    cr_expect_str_eq(api_json_str(err, "type"), "not_supported_error");
    cr_expect_str_eq(api_json_str(err, "param"), "model");
    json_decref(doc);
    api_answer_clear(&a);
}

Test(api_proxy, a_contract_violation_names_its_field) {
    struct api_answer a;
    json_t *doc, *err = post("/v1/systemone", NULL,
                             "{\"state\": \"x\", \"questions\": {\"u\": {\"type\": \"bogus\"}}}",
                             &a, &doc);
    cr_expect_eq(a.status, 400);
    cr_expect_str_eq(api_json_str(err, "type"), "invalid_request_error");
    const char *param = api_json_str(err, "param");
    cr_expect(param && !strncmp(param, "questions.u", 11), "%s", param);
    json_decref(doc);
    api_answer_clear(&a);
}

Test(api_proxy, an_unknown_model_lists_the_models) {
    struct api_answer a;
    json_t *doc, *err = post("/v1/chat/completions", NULL, "{\"model\": \"nope\"}", &a, &doc);
    cr_expect_eq(a.status, 400);
    cr_expect_str_eq(api_json_str(err, "type"), "model_not_found");
    cr_expect_str_eq(api_json_str(err, "message"), "unknown model \"nope\"; models: kev gen");
    json_decref(doc);
    api_answer_clear(&a);
}

Test(api_proxy, a_submission_refused_by_a_stopping_scheduler_is_503_with_retry_after) {
    char body[256];
    snprintf(body, sizeof body, DECISION, "kev-alias");
    struct api_answer a;
    json_t *doc, *err = post("/v1/systemone", "x-request-id: p-1", body, &a, &doc);
    cr_expect_eq(a.status, 503);
    cr_expect_str_eq(api_json_str(err, "message"), "tandem is shutting down");
    cr_expect_not_null(api_answer_header(&a, "Retry-After"));
    cr_expect_str_eq(api_answer_header(&a, "X-Tandem-Model"), "kev", "the alias is resolved");
    cr_expect_str_eq(api_answer_header(&a, "x-request-id"), "p-1");
    json_decref(doc);
    api_answer_clear(&a);
    cr_expect_eq(api_calls_in_flight(f.api), 0);
}

Test(api_proxy, a_bad_deadline_header_is_400_before_any_submission) {
    struct api_answer a;
    json_t *doc, *err = post("/v1/embeddings", "X-Tandem-Timeout-Ms: 0", "{\"input\": \"x\"}",
                             &a, &doc);
    cr_expect_eq(a.status, 400);
    cr_expect_str_eq(api_json_str(err, "message"),
                     "X-Tandem-Timeout-Ms: expected milliseconds from 1 to 86400000");
    json_decref(doc);
    api_answer_clear(&a);
}

Test(api_proxy, an_unknown_pipeline_is_404) {
    struct api_answer a;
    json_t *doc, *err = post("/v1/pipelines/none", NULL,
                             "{\"state\": \"x\", \"candidates\": {\"a\": \"A\", \"b\": \"B\"}}",
                             &a, &doc);
    cr_expect_eq(a.status, 404);
    cr_expect_str_eq(api_json_str(err, "type"), "not_found_error");
    json_decref(doc);
    api_answer_clear(&a);
}
