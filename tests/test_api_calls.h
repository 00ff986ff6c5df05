/* test_api_calls.h: an api on a real config and scheduler, driven with detached requests
 * (no socket), for the api's unit tests (test_api_local.c, test_api_proxy.c). The
 * scheduler is shut down from the start and never had an engine, so whatever would reach
 * one is refused with 503: the api's own answers are what these tests see. */
#ifndef TANDEM_TEST_API_CALLS_H
#define TANDEM_TEST_API_CALLS_H

#include <stddef.h>

#include <event2/event.h>
#include <event2/keyvalq_struct.h>

#include "serve/api.h"

/* One daemon: a decision model "kev" (openjev) and a generative one "gen", both local,
 * kev the default; with the event stream. */
struct api_fixture {
    struct event_base *base;
    struct config *cfg;
    struct prom *metrics;
    struct sched *sched;
    struct events *events;
    struct pipeline_set *pipelines;
    struct api *api;
    struct api_model models[2];
};

/* Sets f up on the config MODELS plus extra (YAML, may be ""); asserts on failure. */
void api_fixture_init(struct api_fixture *f, const char *extra);

/* Frees what f holds. */
void api_fixture_deinit(struct api_fixture *f);

/* One request's answer, as the client would get it. */
struct api_answer {
    unsigned count;           /* answers given: must be 1 */
    int status;
    struct evkeyvalq headers; /* the answer's */
    char *body;               /* NUL-terminated copy (owned) */
    size_t len;
};

/* Sends method uri with headers ("Name: value" lines; Host: localhost is added when it
 * has none) and body (may be NULL) to f's api, runs the loop once and fills *out
 * (release with api_answer_clear). */
void api_fixture_call(struct api_fixture *f, enum evhttp_cmd_type method, const char *uri,
                      const char *headers, const char *body, struct api_answer *out);

/* The answer's header name, or NULL. */
const char *api_answer_header(const struct api_answer *a, const char *name);

/* The answer's body parsed (caller decrefs), asserted to be a JSON object. */
json_t *api_answer_json(const struct api_answer *a);

void api_answer_clear(struct api_answer *a);

/* obj's string member key (borrowed), or NULL. */
const char *api_json_str(const json_t *obj, const char *key);

#endif
