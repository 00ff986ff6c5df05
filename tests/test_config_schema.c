/* Unit tests for config_schema: every table's rows are well formed and every
 * default they give is accepted by its own field; then, per kind, one real
 * key of tandem.yaml through config_load_buffer: its default, a value out of
 * range (where the kind has one) and a value of the wrong type, each with
 * its exact message. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "serve/config.h"
#include "serve/config_schema.h"
#include "serve/config_walk.h"

#define NAME "tests/data/config/inline.yaml"
#define MODELS "models:\n  kev: {path: model.gguf}\n"
#define PIPE "pipelines:\n  p:\n    decide: {model: kev}\n" \
             "    verify:\n      - model: kev\n        questions:\n" \
             "          ok: {type: noul, instructions: i}\n"

Test(config_schema, rows_are_well_formed) {
    size_t tables = 0, rows = 0;
    for (const struct config_field *const *t = config_schema_tables(); *t; t++, tables++)
        for (const struct config_field *f = *t; f->name; f++, rows++) {
            for (const struct config_field *g = *t; g != f; g++)
                cr_expect_str_neq(g->name, f->name, "%s twice in one table", f->name);
            switch (f->kind) {
            case CONFIG_KIND_SECTION:
                cr_expect_not_null(f->sub, "%s", f->name);
                break;
            case CONFIG_KIND_CUSTOM:
                cr_expect_not_null(f->fn, "%s", f->name);
                break;
            case CONFIG_KIND_ENUM:
                cr_expect(f->size == sizeof(bool) || f->size == sizeof(int), "%s", f->name);
                cr_expect(f->choices && f->choices[0].word && f->choices[1].word, "%s", f->name);
                break;
            case CONFIG_KIND_UINT:
                cr_expect(f->min >= 0 && f->min <= f->max && f->max <= UINT32_MAX, "%s", f->name);
                break;
            case CONFIG_KIND_INT:
            case CONFIG_KIND_DOUBLE:
                cr_expect(f->min <= f->max, "%s", f->name);
                break;
            default:
                break;
            }
            cr_expect(f->cap <= 64, "%s", f->name);
            cr_expect(!f->def || !f->via, "%s: a via field takes no default", f->name);
        }
    cr_expect_geq(tables, 18);
    cr_expect_geq(rows, 80);
}

Test(config_schema, every_default_is_accepted_by_its_field) {
    union {
        struct config c;
        struct config_model m;
        struct config_upstream u;
        struct config_pipeline p;
        struct config_stage s;
        struct config_question q;
    } scratch;
    char err[256] = "";
    for (const struct config_field *const *t = config_schema_tables(); *t; t++) {
        memset(&scratch, 0, sizeof scratch);
        struct config_walk w = {.file = "schema", .err = err, .errlen = sizeof err};
        cr_expect(config_walk_defaults(&w, *t, &scratch), "%s", err);
    }
}

/* text loads; the caller frees the config. */
static struct config *load(const char *text) {
    struct config *c = NULL;
    char err[1024] = "";
    cr_assert_eq(config_load_buffer(NAME, text, strlen(text), &c, err, sizeof err), TANDEM_OK,
                 "%s", err);
    return c;
}

/* text is refused with exactly NAME ":" want. */
static void refused(const char *text, const char *want) {
    struct config *c = NULL;
    char err[1024] = "", full[1024];
    snprintf(full, sizeof full, NAME ":%s", want);
    cr_expect_eq(config_load_buffer(NAME, text, strlen(text), &c, err, sizeof err),
                 TANDEM_ERR_FORMAT, "%s", text);
    cr_expect_null(c);
    cr_expect_str_eq(err, full, "%s", text);
}

Test(config_schema, defaults_of_every_kind) {
    struct config *c = load(MODELS "  r: {upstream: [\"http://h:1\"]}\n" PIPE);
    const struct config_model *m = &c->models[0];
    const struct config_pipeline *pl = &c->pipelines[0];
    cr_expect_eq(c->queue_depth, 64);                      /* uint */
    cr_expect_eq(pl->max_attempts, 3);                     /* uint, in a verdict */
    cr_expect_eq(m->priority, 0);                          /* int */
    cr_expect_float_eq(pl->min_confidence, 0, 1e-12);      /* double */
    cr_expect_eq(c->reserve, 512ull << 20);                /* size */
    cr_expect_eq(c->audit_max_bytes, 64ull << 20);
    cr_expect_eq(m->keep_alive_ms, 300000);                /* duration, with forever */
    cr_expect_eq(m->load_timeout_ms, 120000);
    cr_expect_eq(c->health_interval_ms, 1000);             /* duration, with a minimum */
    cr_expect_eq(c->stop_grace_ms, 10000);
    cr_expect_eq(pl->on_reject, CONFIG_ON_REJECT_NEXT_BEST); /* enum */
    cr_expect(!c->audit_fail && !c->metrics_vllm && !m->relaxed);
    cr_expect_eq(c->models[1].upstream->dialect, CONFIG_DIALECT_SYSTEMONE);
    cr_expect_eq(c->models[1].upstream->timeout_ms, 0);
    cr_expect(!c->mcp_http && !c->log_bodies && !m->pin);  /* bool */
    cr_expect_eq(m->settings.type_k, 1);                   /* cache type: f16 */
    cr_expect_null(c->default_model);                      /* string */
    cr_expect_null(c->llama_server);                       /* path */
    cr_expect_null(pl->decide.instructions.text);          /* text */
    cr_expect_null(c->api_keys);                           /* list */
    config_free(c);
}

Test(config_schema, uint_keys) {
    refused("limits:\n  max_restarts: 1001\n" MODELS,
            "2: limits.max_restarts: 1001 is out of range (1 to 1000)");
    refused("limits: {max_event_clients: 1025}\n" MODELS,
            "1: limits.max_event_clients: 1025 is out of range (0 to 1024)");
    refused("limits: {queue_depth: [1]}\n" MODELS,
            "1: limits.queue_depth: expected a value, got a list");
    refused(MODELS PIPE "    verdict: {max_attempts: 65}\n",
            "10: pipelines.p.verdict.max_attempts: 65 is out of range (1 to 64)");
}

Test(config_schema, int_key) {
    refused("models:\n  kev: {path: model.gguf, priority: 1001}\n",
            "2: models.kev.priority: expected an integer from -1000 to 1000, got \"1001\"");
    refused("models:\n  kev: {path: model.gguf, priority: {a: 1}}\n",
            "2: models.kev.priority: expected a value, got a mapping");
}

Test(config_schema, double_key) {
    refused(MODELS PIPE "    verdict: {min_confidence: 1.5}\n",
            "10: pipelines.p.verdict.min_confidence: expected a number from 0 to 1, got \"1.5\"");
    refused(MODELS PIPE "    verdict: {min_confidence: [0]}\n",
            "10: pipelines.p.verdict.min_confidence: expected a value, got a list");
}

Test(config_schema, size_keys) {
    refused("budget: {vram: 6 parsecs}\n" MODELS,
            "1: budget.vram: expected a size like 6GiB, got \"6 parsecs\"");
    refused("logs: {audit_max: {a: 1}}\n" MODELS,
            "1: logs.audit_max: expected a value, got a mapping");
}

Test(config_schema, duration_keys) {
    refused("limits: {health_interval: 99ms}\n" MODELS,
            "1: limits.health_interval: must be at least 100ms");
    refused("models:\n  kev: {path: model.gguf, keep_alive: soon}\n",
            "2: models.kev.keep_alive: expected a duration like 30s, 5m or forever, got \"soon\"");
    refused("models:\n  kev: {upstream: [\"http://h:1\"], timeout: forever}\n",
            "2: models.kev.timeout: expected a duration like 30s, 5m, got \"forever\"");
    refused("shutdown: {grace: [1]}\n" MODELS, "1: shutdown.grace: expected a value, got a list");
}

Test(config_schema, enum_keys) {
    refused("logs: {audit_on_error: maybe}\n" MODELS,
            "1: logs.audit_on_error: expected fail or continue, got \"maybe\"");
    refused("metrics: {compat: prom}\n" MODELS,
            "1: metrics.compat: expected vllm or none, got \"prom\"");
    refused(MODELS PIPE "    verdict: {on_reject: retry}\n",
            "10: pipelines.p.verdict.on_reject: expected next_best, reject or escalate, "
            "got \"retry\"");
    refused("models:\n  kev: {upstream: [\"http://h:1\"], dialect: grpc}\n",
            "2: models.kev.dialect: expected systemone or openai, got \"grpc\"");
    /* determinism and a question's type read at most 15 bytes */
    refused("models:\n  kev: {path: model.gguf, determinism: deterministically}\n",
            "2: models.kev.determinism: value too long (17 bytes)");
    refused("models:\n  kev: {path: model.gguf, determinism: [strict]}\n",
            "2: models.kev.determinism: expected a value, got a list");
}

Test(config_schema, bool_cache_type_and_text_keys) {
    refused("mcp: {http: maybe}\n" MODELS, "1: mcp.http: expected true or false, got \"maybe\"");
    refused("models:\n  kev: {path: model.gguf, cache_type_v: q9}\n",
            "2: models.kev.cache_type_v: unknown cache type \"q9\" (e.g. f16, q8_0)");
    refused("models:\n  kev: {path: model.gguf, cache_type_k: [f16]}\n",
            "2: models.kev.cache_type_k: expected a value, got a list");
    refused(MODELS "pipelines:\n  p:\n    decide: {model: kev, instructions: {a: 1}}\n",
            "5: pipelines.p.decide.instructions: expected a value, got a mapping");
}

Test(config_schema, string_path_list_and_section_keys) {
    refused("defaults: {model: [kev]}\n" MODELS, "1: defaults.model: expected a value, got a list");
    refused("engine: {path: \"${TANDEM_SCHEMA_TEST_UNSET}/llama-server\"}\n" MODELS,
            "1: engine.path: environment variable TANDEM_SCHEMA_TEST_UNSET is not set");
    refused("api_keys: secret\n" MODELS, "1: api_keys: expected a list");
    refused("limits: 5\n" MODELS, "1: limits: expected a mapping of keys");
    refused("limits: {max_bdy: 1}\n" MODELS, "1: limits.max_bdy: unknown key (did you mean max_body?)");
}
