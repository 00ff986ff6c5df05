/* test_api_calls.c: the api fixture of test_api_calls.h. No tests of its own. */
#include "test_api_calls.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <jansson.h>

#include "serve/events.h"
#include "serve/s1.h"

static const char *const decision_types[2] = {"openjev", ""};

static const char config_yaml[] = "node: {id: unit-node}\n"
                                  "defaults: {model: kev}\n"
                                  "models:\n"
                                  "  kev: {path: model.gguf, aliases: [kev-alias]}\n"
                                  "  gen: {path: model.gguf}\n";

static void add_models(struct api_fixture *f, struct pipeline_model *pm) {
    for (size_t i = 0; i < 2; i++) {
        const struct config_model *cm = &f->cfg->models[i];
        struct sched_model_spec spec = {.name = cm->name, .path = cm->path,
                                        .settings = cm->settings, .device = PLACE_CPU,
                                        .keep_alive_ms = cm->keep_alive_ms,
                                        .load_timeout_ms = cm->load_timeout_ms};
        size_t index;
        cr_assert_eq(sched_add_model(f->sched, &spec, &index), TANDEM_OK);
        f->models[i] = (struct api_model){.cm = cm, .sched_index = index,
                                          .remote_index = SIZE_MAX,
                                          .decision_type = decision_types[i], .arch = "llama",
                                          .n_ctx = 2048, .sha256 = "", .file_sha256 = ""};
        pm[i] = (struct pipeline_model){.sched_index = index, .remote_index = SIZE_MAX,
                                        .decision_type = decision_types[i],
                                        .max_options = s1_max_options(decision_types[i]),
                                        .file_sha256 = ""};
    }
}

void api_fixture_init(struct api_fixture *f, const char *extra) {
    *f = (struct api_fixture){0};
    char yaml[2048], err[1024] = "";
    int n = snprintf(yaml, sizeof yaml, "%s%s", extra, config_yaml);
    cr_assert_eq(config_load_buffer("tests/data/config/inline.yaml", yaml, (size_t)n, &f->cfg,
                                    err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(f->cfg->n_models, 2);
    f->base = event_base_new();
    f->metrics = prom_new();
    struct events_params ep = events_default_params();
    f->events = events_new(f->base, &ep);
    cr_assert(f->base && f->metrics && f->events);
    struct sched_params sp = {.engine = "/nonexistent/llama-server", .log_dir = "/tmp",
                              .host_budget = 1ull << 30, .queue_depth = f->cfg->queue_depth,
                              .group_limit = f->cfg->group_limit,
                              .max_wait_ms = f->cfg->starvation_ms,
                              .stop_grace_ms = f->cfg->stop_grace_ms,
                              .max_restarts = f->cfg->max_restarts, .metrics = f->metrics};
    f->sched = sched_new(f->base, &sp);
    cr_assert_not_null(f->sched);
    struct pipeline_model pm[2];
    add_models(f, pm);
    sched_shutdown(f->sched, NULL, NULL); /* nothing can load: no engine is ever started */
    cr_assert_eq(pipeline_set_new(f->cfg, pm, &f->pipelines, err, sizeof err), TANDEM_OK, "%s",
                 err);
    struct api_params ap = {.cfg = f->cfg, .models = f->models, .n_models = 2,
                            .default_model = 0, .sched = f->sched, .metrics = f->metrics,
                            .pipelines = f->pipelines, .events = f->events, .base = f->base};
    f->api = api_new(&ap);
    cr_assert_not_null(f->api);
    api_set_phase(f->api, API_SERVING);
}

void api_fixture_deinit(struct api_fixture *f) {
    events_free(f->events);
    api_free(f->api);
    sched_free(f->sched);
    pipeline_set_free(f->pipelines);
    prom_free(f->metrics);
    config_free(f->cfg);
    event_base_free(f->base);
}

static void on_reply(void *user, int status, const struct evkeyvalq *headers, const void *body,
                     size_t len) {
    struct api_answer *a = user;
    if (a->count++)
        return;
    a->status = status;
    for (const struct evkeyval *kv = TAILQ_FIRST(headers); kv; kv = TAILQ_NEXT(kv, next))
        cr_assert_eq(evhttp_add_header(&a->headers, kv->key, kv->value), 0);
    a->body = malloc(len + 1);
    cr_assert_not_null(a->body);
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
}

static void parse_headers(const char *lines, struct evkeyvalq *h) {
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", lines ? lines : "");
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *v = strchr(l, ':');
        cr_assert_not_null(v, "bad test header %s", l);
        *v++ = '\0';
        cr_assert_eq(evhttp_add_header(h, l, v + strspn(v, " ")), 0);
    }
    if (!evhttp_find_header(h, "Host"))
        cr_assert_eq(evhttp_add_header(h, "Host", "localhost"), 0);
}

void api_fixture_call(struct api_fixture *f, enum evhttp_cmd_type method, const char *uri,
                      const char *headers, const char *body, struct api_answer *out) {
    *out = (struct api_answer){0};
    TAILQ_INIT(&out->headers);
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    parse_headers(headers, &h);
    struct http_req *r;
    struct http_detached_params p = {.method = method, .uri = uri, .headers = &h, .body = body,
                                     .len = body ? strlen(body) : 0,
                                     .max_body_bytes = f->cfg->max_body_bytes,
                                     .reply = on_reply, .user = out};
    cr_assert_eq(http_req_new_detached(&p, &r), TANDEM_OK);
    api_handle(r, f->api);
    event_base_loop(f->base, EVLOOP_NONBLOCK);
    evhttp_clear_headers(&h);
}

const char *api_answer_header(const struct api_answer *a, const char *name) {
    return evhttp_find_header(&a->headers, name);
}

json_t *api_answer_json(const struct api_answer *a) {
    json_t *j = json_loadb(a->body, a->len, 0, NULL);
    cr_assert(json_is_object(j), "not a JSON object: %s", a->body);
    return j;
}

void api_answer_clear(struct api_answer *a) {
    evhttp_clear_headers(&a->headers);
    free(a->body);
    *a = (struct api_answer){0};
}

const char *api_json_str(const json_t *obj, const char *key) {
    return json_string_value(json_object_get(obj, key));
}
