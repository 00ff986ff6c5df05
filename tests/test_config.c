/* Unit tests for config: every malformed file in tests/data/config/ with its
 * exact one-line message (<name>.yaml + <name>.expected, @F@ = the file,
 * @D@ = its absolute directory), then defaults, expansion, aliases and the
 * shipped example. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "serve/config.h"
#include "base/mem.h"

#define DIR_ "tests/data/config"

static void replace(char *text, size_t cap, const char *from, const char *to) {
    char out[2048] = "", *p, *s = text;
    while ((p = strstr(s, from))) {
        strncat(out, s, (size_t)(p - s));
        strncat(out, to, sizeof out - strlen(out) - 1);
        s = p + strlen(from);
    }
    strncat(out, s, sizeof out - strlen(out) - 1);
    snprintf(text, cap, "%s", out);
}

Test(config, malformed_files_give_their_exact_message) {
    DIR *d = opendir(DIR_);
    cr_assert_not_null(d, "run the tests from the repository root");
    char absdir[PATH_MAX];
    cr_assert_not_null(realpath(DIR_, absdir));
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml"))
            continue;
        char path[512], exp_path[512], want[2048] = "", err[1024] = "";
        snprintf(path, sizeof path, DIR_ "/%s", e->d_name);
        snprintf(exp_path, sizeof exp_path, DIR_ "/%.*s.expected", (int)(len - 5), e->d_name);
        FILE *f = fopen(exp_path, "r");
        cr_assert_not_null(f, "%s has no .expected", path);
        cr_assert_not_null(fgets(want, sizeof want, f));
        fclose(f);
        want[strcspn(want, "\n")] = '\0';
        char line[2048];
        snprintf(line, sizeof line, "%s", want);
        replace(line, sizeof line, "@F@", path);
        replace(line, sizeof line, "@D@", absdir);
        struct config *c = (struct config *)1;
        tandem_err got = config_load(path, &c, err, sizeof err);
        cr_expect_neq(got, TANDEM_OK, "%s loaded", path);
        cr_expect_null(c);
        cr_expect_str_eq(err, line, "%s", path);
        n++;
    }
    closedir(d);
    cr_expect_geq(n, 25);
}

static struct config *load_text(const char *text) {
    struct config *c = NULL;
    char err[1024] = "";
    cr_assert_eq(config_load_buffer(DIR_ "/inline.yaml", text, strlen(text), &c, err, sizeof err),
                 TANDEM_OK, "%s", err);
    return c;
}

Test(config, defaults_are_filled) {
    struct config *c = load_text("models:\n  kev: {path: model.gguf}\n");
    cr_expect_str_eq(c->listen_host, "127.0.0.1");
    cr_expect_eq(c->listen_port, 8090);
    cr_expect_eq(c->n_api_keys, 0);
    cr_expect_eq(c->vram, 0);
    cr_expect_eq(c->reserve, 512ull << 20);
    cr_expect_eq(c->max_body_bytes, 1u << 20);
    cr_expect_eq(c->queue_depth, 64);
    cr_expect_eq(c->request_timeout_ms, 60000);
    cr_expect_eq(c->group_limit, 16);
    cr_expect_eq(c->request_tokens, 256);
    cr_expect_eq(c->clients, 1);
    cr_expect_not_null(c->audit_path);
    cr_expect(strstr(c->audit_path, "audit.jsonl"));
    cr_expect(!c->audit_fail); /* logs.audit_on_error: continue */
    const struct config_model *m = &c->models[0];
    cr_expect_str_eq(m->name, "kev");
    cr_expect_eq(m->path[0], '/');
    cr_expect_eq(m->settings.ngl, PLAN_NGL_AUTO);
    cr_expect_eq(m->settings.parallel, 1);
    cr_expect_eq(m->keep_alive_ms, 300000);
    cr_expect(!m->pin && !m->settings.flash_attn);
    cr_expect(m->device == PLACE_WANT_AUTO && m->gpu == PLACE_ANY_GPU && m->device_line == 0);
    cr_expect_null(m->upstream);
    cr_expect_eq(c->drain_delay_ms, 5000);
    cr_expect_eq(c->health_interval_ms, 1000);
    cr_expect_eq(c->max_restarts, 5);
    cr_expect_eq(c->max_event_clients, 16);
    cr_expect(c->node_id[0] && !strchr(c->node_id, ' '));
    cr_expect(!c->metrics_vllm && !c->metrics_require_key);
    cr_expect(!c->mcp_http); /* POST /mcp is off unless asked for */
    cr_expect_null(c->allowed_hosts);
    cr_expect_eq(c->n_allowed_hosts, 0);
    cr_expect_null(c->allowed_origins);
    cr_expect_eq(c->n_allowed_origins, 0);
    cr_expect_eq(c->n_warnings, 0);
    config_free(c);
}

/* determinism: strict is one slot; relaxed takes CONFIG_RELAXED_SLOTS unless
 * parallel says otherwise. (parallel > 1 without relaxed: parallel_strict.yaml) */
Test(config, determinism_sets_the_slots) {
    struct config *c = load_text("models:\n"
                                 "  a: {path: model.gguf}\n"
                                 "  b: {path: model.gguf, determinism: strict}\n"
                                 "  c: {path: model.gguf, determinism: relaxed}\n"
                                 "  d: {path: model.gguf, determinism: relaxed, parallel: 2}\n"
                                 "  e: {path: model.gguf, determinism: relaxed, parallel: 1}\n");
    uint32_t want[] = {1, 1, CONFIG_RELAXED_SLOTS, 2, 1};
    bool relaxed[] = {false, false, true, true, true};
    for (size_t i = 0; i < 5; i++) {
        cr_expect_eq(c->models[i].settings.parallel, want[i], "%s", c->models[i].name);
        cr_expect_eq(c->models[i].relaxed, relaxed[i], "%s", c->models[i].name);
    }
    config_free(c);
}

Test(config, remote_models_and_gateway_keys) {
    setenv("TANDEM_TEST_UPSTREAM_KEY", "k3y", 1);
    struct config *c = load_text("node: {id: node-7}\n"
                                 "metrics: {compat: vllm, require_key: true}\n"
                                 "limits: {drain_delay: 2s, health_interval: 250ms, "
                                 "max_restarts: 12}\n"
                                 "models:\n"
                                 "  kev: {path: model.gguf}\n"
                                 "  far:\n"
                                 "    upstream: [http://10.0.0.5:8090, https://gpu.example/tandem/]\n"
                                 "    aliases: [big]\n"
                                 "    dialect: openai\n"
                                 "    api_key_env: TANDEM_TEST_UPSTREAM_KEY\n"
                                 "    timeout: 30s\n"
                                 "    health: none\n"
                                 "  near: {upstream: [http://127.0.0.1:9]}\n");
    cr_expect_str_eq(c->node_id, "node-7");
    cr_expect(c->metrics_vllm && c->metrics_require_key);
    cr_expect_eq(c->drain_delay_ms, 2000);
    cr_expect_eq(c->health_interval_ms, 250);
    cr_expect_eq(c->max_restarts, 12);
    const struct config_model *far = config_find_model(c, "big");
    cr_assert_not_null(far);
    cr_expect_null(far->path);
    cr_assert_not_null(far->upstream);
    cr_expect_eq(far->upstream->n_urls, 2);
    cr_expect_str_eq(far->upstream->urls[1], "https://gpu.example/tandem/");
    cr_expect_eq(far->upstream->dialect, CONFIG_DIALECT_OPENAI);
    cr_expect_str_eq(far->upstream->api_key, "k3y");
    cr_expect_eq(far->upstream->timeout_ms, 30000);
    cr_expect_null(far->upstream->health);
    const struct config_model *near = config_find_model(c, "near");
    cr_expect_eq(near->upstream->dialect, CONFIG_DIALECT_SYSTEMONE);
    cr_expect_str_eq(near->upstream->health, "/health");
    cr_expect_eq(near->upstream->timeout_ms, 0);
    cr_expect_null(near->upstream->api_key);
    config_free(c);
    unsetenv("TANDEM_TEST_UPSTREAM_KEY");
}

Test(config, devices_and_placement_keys) {
    struct config *c = load_text("scheduling: {request_tokens: 100, clients: 4}\n"
                                 "models:\n"
                                 "  kev: {path: model.gguf, device: gpu:1}\n"
                                 "  laya: {path: model.gguf, device: cpu}\n"
                                 "  any: {path: model.gguf, device: gpu}\n");
    cr_expect_eq(c->request_tokens, 100);
    cr_expect_eq(c->clients, 4);
    cr_expect(c->models[0].device == PLACE_WANT_GPU && c->models[0].gpu == 1);
    cr_expect_eq(c->models[0].device_line, 3);
    cr_expect(c->models[1].device == PLACE_WANT_CPU);
    cr_expect(c->models[2].device == PLACE_WANT_GPU && c->models[2].gpu == PLACE_ANY_GPU);
    config_free(c);
}

Test(config, values_expansions_and_aliases) {
    char abs[PATH_MAX];
    cr_assert_not_null(realpath(DIR_, abs));
    setenv("TANDEM_TEST_DIR", abs, 1);
    struct config *c = load_text(
        "listen: '[::1]:9000'\n"
        "api_keys: [k1, k2]\n"
        "budget: {vram: 6GiB, reserve: 256MiB}\n"
        "defaults: {model: fast}\n"
        "limits: {max_body: 2MiB, request_timeout: 1.5s}\n"
        "logs: {audit: off, bodies: true, audit_on_error: fail}\n"
        "models:\n"
        "  kev:\n"
        "    path: ${TANDEM_TEST_DIR}/model.gguf\n"
        "    aliases: [fast, kev-4b]\n"
        "    ctx: 8192\n"
        "    ngl: 20\n"
        "    cache_type_k: q8_0\n"
        "    keep_alive: forever\n"
        "    pin: yes\n"
        "    priority: -3\n"
        "    threads: 2\n"
        "    extra_args: [--mlock, --verbose-prompt]\n");
    cr_expect_str_eq(c->listen_host, "::1");
    cr_expect_eq(c->listen_port, 9000);
    cr_expect_eq(c->n_api_keys, 2);
    cr_expect_eq(c->vram, 6ull << 30);
    cr_expect_eq(c->reserve, 256ull << 20);
    cr_expect_eq(c->max_body_bytes, 2u << 20);
    cr_expect_eq(c->request_timeout_ms, 1500);
    cr_expect_null(c->audit_path);
    cr_expect(c->log_bodies);
    cr_expect(c->audit_fail);
    const struct config_model *m = config_find_model(c, "kev-4b");
    cr_assert_not_null(m);
    cr_expect_eq(m, config_find_model(c, "fast"));
    cr_expect_eq(m, config_find_model(c, "kev"));
    cr_expect_null(config_find_model(c, "laya"));
    cr_expect(strstr(m->path, "tests/data/config/model.gguf") != NULL, "%s", m->path);
    cr_expect_eq(m->settings.ctx, 8192);
    cr_expect_eq(m->settings.ngl, 20);
    cr_expect_eq(m->settings.type_k, 8);
    cr_expect_eq(m->keep_alive_ms, CONFIG_KEEP_ALIVE_FOREVER);
    cr_expect(m->pin);
    cr_expect_eq(m->priority, -3);
    cr_expect_eq(m->n_extra_args, 2);
    cr_expect_eq(m->settings.threads, 2);
    cr_expect_str_eq(c->default_model, "fast");
    config_free(c);
}

/* Loading text fails with exactly want (the malformed files cover the rest). */
static void expect_load_error(const char *text, const char *want) {
    struct config *c = (struct config *)1;
    char err[1024] = "";
    cr_expect_eq(config_load_buffer(DIR_ "/inline.yaml", text, strlen(text), &c, err, sizeof err),
                 TANDEM_ERR_FORMAT, "%s", text);
    cr_expect_null(c);
    cr_expect_str_eq(err, want);
}

/* A pipeline p (verified by b) whose description: line is the argument. */
#define PIPELINE_WITH(description_line)                                                      \
    "models:\n  a: {path: model.gguf}\n  b: {path: model.gguf}\n"                            \
    "pipelines:\n  p:\n" description_line                                                     \
    "    decide: {model: a, instructions: pick}\n"                                           \
    "    verify: [{model: b, questions: {q: {type: noul, instructions: ok?}}}]\n"

Test(config, pipeline_description_is_kept) {
    struct config *c = load_text(PIPELINE_WITH("    description: >-\n"
                                               "      Picks the runbook for an alert;\n"
                                               "      caf\u00e9 \"ok\"\n")
                                 "  bare:\n"
                                 "    decide: {model: a}\n"
                                 "    verify: [{model: b, questions: {q: {type: noul, "
                                 "instructions: ok?}}}]\n");
    cr_assert_eq(c->n_pipelines, 2);
    cr_expect_str_eq(config_find_pipeline(c, "p")->description,
                     "Picks the runbook for an alert; caf\u00e9 \"ok\"");
    cr_expect_null(config_find_pipeline(c, "bare")->description);
    config_free(c);
}

Test(config, pipeline_description_is_checked) {
    char line[CONFIG_DESCRIPTION_MAX + 64], text[4096];
    /* exactly the limit loads; one byte more does not */
    snprintf(line, sizeof line, "    description: %0*d\n", CONFIG_DESCRIPTION_MAX, 7);
    snprintf(text, sizeof text, PIPELINE_WITH("%s"), line);
    struct config *c = load_text(text);
    cr_expect_eq(strlen(c->pipelines[0].description), CONFIG_DESCRIPTION_MAX);
    config_free(c);
    snprintf(line, sizeof line, "    description: %0*d\n", CONFIG_DESCRIPTION_MAX + 1, 7);
    snprintf(text, sizeof text, PIPELINE_WITH("%s"), line);
    expect_load_error(text, DIR_ "/inline.yaml:6: pipelines.p.description: at most 1024 bytes, "
                            "got 1025");
    expect_load_error(PIPELINE_WITH("    description: \"a\\0b\"\n"),
                      DIR_ "/inline.yaml:6: pipelines.p.description: expected UTF-8 text without "
                           "NUL bytes");
    expect_load_error(PIPELINE_WITH("    description: \"  \\t \"\n"),
                      DIR_ "/inline.yaml:6: pipelines.p.description: must not be empty");
    expect_load_error(PIPELINE_WITH("    descripton: x\n"),
                      DIR_ "/inline.yaml:6: pipelines.p.descripton: unknown key (did you mean "
                           "description?)");
}

Test(config, mcp_section) {
    struct config *c = load_text("mcp:\n"
                                 "  http: true\n"
                                 "  allowed_origins:\n"
                                 "    - https://App.Example\n"
                                 "    - http://localhost:3000\n"
                                 "    - 'http://[::1]:5173'\n"
                                 "models:\n  kev: {path: model.gguf}\n");
    cr_expect(c->mcp_http);
    cr_assert_eq(c->n_allowed_origins, 3); /* the deprecated key feeds the one list */
    cr_expect_str_eq(c->allowed_origins[0], "https://app.example"); /* as browsers send it */
    cr_expect_str_eq(c->allowed_origins[1], "http://localhost:3000");
    cr_expect_str_eq(c->allowed_origins[2], "http://[::1]:5173");
    cr_assert_eq(c->n_warnings, 1);
    cr_expect_str_eq(c->warnings[0], DIR_ "/inline.yaml:4: mcp.allowed_origins: deprecated: use "
                     "the top-level allowed_origins, which every route checks (these origins "
                     "are added to it)");
    config_free(c);
    c = load_text("mcp: {http: off, allowed_origins: []}\nmodels:\n  kev: {path: model.gguf}\n");
    cr_expect(!c->mcp_http);
    cr_expect_eq(c->n_allowed_origins, 0);
    config_free(c);
    expect_load_error("mcp: {allowed_origins: https://app.example}\n"
                      "models:\n  kev: {path: model.gguf}\n",
                      DIR_ "/inline.yaml:1: mcp.allowed_origins: expected a list");
    expect_load_error("mcp: {allowed_origins: ['https://app.example/']}\n"
                      "models:\n  kev: {path: model.gguf}\n",
                      DIR_ "/inline.yaml:1: mcp.allowed_origins[0]: \"https://app.example/\": an "
                           "origin is http(s)://host[:port], with nothing after the host or port");
}

/* allowed_hosts and allowed_origins (docs/serve.md, "Hosts and origins"): lowercased,
 * merged with the deprecated mcp.allowed_origins, each bad entry named with its line. */
Test(config, hosts_and_origins) {
    struct config *c = load_text("allowed_hosts: [Tandem.Example, 10.0.0.5, '[fd00::1]', '*']\n"
                                 "allowed_origins: [https://App.Example:8443]\n"
                                 "mcp:\n  allowed_origins: [http://agent.example]\n"
                                 "models:\n  kev: {path: model.gguf}\n");
    cr_assert_eq(c->n_allowed_hosts, 4);
    cr_expect_str_eq(c->allowed_hosts[0], "tandem.example");
    cr_expect_str_eq(c->allowed_hosts[1], "10.0.0.5");
    cr_expect_str_eq(c->allowed_hosts[2], "[fd00::1]");
    cr_expect_str_eq(c->allowed_hosts[3], "*");
    cr_assert_eq(c->n_allowed_origins, 2);
    cr_expect_str_eq(c->allowed_origins[0], "https://app.example:8443");
    cr_expect_str_eq(c->allowed_origins[1], "http://agent.example");
    cr_expect_null(c->allowed_origins[2]);
    cr_expect_eq(c->n_warnings, 1);
    config_free(c);
    static const struct { const char *yaml, *err; } bad[] = {
        {"allowed_hosts: tandem.example\n", ":1: allowed_hosts: expected a list"},
        {"allowed_hosts:\n  - ok.example\n  - tandem.example:8090\n",
         ":3: allowed_hosts[1]: \"tandem.example:8090\": expected a host name without scheme, "
         "port or path (\"tandem.example\", \"10.0.0.5\", \"[fd00::1]\"), or \"*\" for any"},
        {"allowed_hosts: ['http://tandem.example']\n",
         ":1: allowed_hosts[0]: \"http://tandem.example\": expected a host name without scheme"},
        {"allowed_hosts: ['tandem.example/ui']\n", ":1: allowed_hosts[0]: \"tandem.example/ui\""},
        {"allowed_hosts: ['']\n", ":1: allowed_hosts[0]: \"\": expected a host name"},
        {"allowed_hosts: ['[fd00::1']\n", ":1: allowed_hosts[0]: \"[fd00::1\": expected"},
        {"allowed_origins: ['https://app.example/path']\n",
         ":1: allowed_origins[0]: \"https://app.example/path\": an origin is http(s)://host[:port], "
         "with nothing after the host or port"},
        {"allowed_origins: ['*']\n", ":1: allowed_origins[0]: \"*\": expected http:// or https://"},
        {"allowed_origins: ['null']\n", ":1: allowed_origins[0]: \"null\": expected http://"},
        {"allowed_origins: [app.example]\n",
         ":1: allowed_origins[0]: \"app.example\": expected http:// or https://"},
        {"allowed_origins:\n  - http://a.example\n  - 'http://user@b.example'\n",
         ":3: allowed_origins[1]: \"http://user@b.example\": user info is not allowed"},
        {"allowed_origin: []\n", ":1: allowed_origin: unknown key (did you mean allowed_origins?)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char yaml[512], err[1024] = "";
        snprintf(yaml, sizeof yaml, "%smodels:\n  kev: {path: model.gguf}\n", bad[i].yaml);
        struct config *got = NULL;
        cr_expect_neq(config_load_buffer(DIR_ "/inline.yaml", yaml, strlen(yaml), &got, err,
                                         sizeof err), TANDEM_OK, "%s", bad[i].yaml);
        cr_expect_null(got);
        char want[600];
        snprintf(want, sizeof want, DIR_ "/inline.yaml%s", bad[i].err);
        cr_expect(!strncmp(err, want, strlen(want)), "%s: got \"%s\", expected \"%s...\"",
                  bad[i].yaml, err, want);
    }
    expect_load_error("mcp: {allowed_origins: ['http://x:99999']}\n"
                      "models:\n  kev: {path: model.gguf}\n",
                      DIR_ "/inline.yaml:1: mcp.allowed_origins[0]: \"http://x:99999\": bad port "
                           "99999");
    expect_load_error("mpc: {http: true}\nmodels:\n  kev: {path: model.gguf}\n",
                      DIR_ "/inline.yaml:1: mpc: unknown key (did you mean mcp?)");
}

Test(config, audit_path_longer_than_off) {
    struct config *c = load_text("logs: {audit: /var/log/tandem/soak/audit.jsonl}\n"
                                 "models:\n  kev: {path: model.gguf}\n");
    cr_expect_str_eq(c->audit_path, "/var/log/tandem/soak/audit.jsonl");
    config_free(c);
}

Test(config, home_and_xdg_expand) {
    setenv("HOME", "/tmp/tandem-config-home", 1);
    unsetenv("XDG_CACHE_HOME");
    mkdir("/tmp/tandem-config-home", 0755);
    mkdir("/tmp/tandem-config-home/.cache", 0755);
    fclose(fopen("/tmp/tandem-config-home/.cache/m.gguf", "w"));
    struct config *c = load_text("models:\n  a: {path: ~/.cache/m.gguf}\n  b: {path: "
                                 "\"${XDG_CACHE_HOME}/m.gguf\"}\n");
    cr_expect_str_eq(c->models[0].path, "/tmp/tandem-config-home/.cache/m.gguf");
    cr_expect_str_eq(c->models[1].path, "/tmp/tandem-config-home/.cache/m.gguf");
    config_free(c);
}

Test(config, shipped_example_loads) {
    /* examples/tandem.yaml names the fixtures in the cache: stand in empty files */
    setenv("XDG_CACHE_HOME", "/tmp/tandem-config-xdg", 1);
    mkdir("/tmp/tandem-config-xdg", 0755);
    mkdir("/tmp/tandem-config-xdg/tandem", 0755);
    mkdir("/tmp/tandem-config-xdg/tandem/fixtures", 0755);
    fclose(fopen("/tmp/tandem-config-xdg/tandem/fixtures/smollm2-decider.gguf", "w"));
    fclose(fopen("/tmp/tandem-config-xdg/tandem/fixtures/gemma3-decider.gguf", "w"));
    struct config *c = NULL;
    char err[1024] = "";
    cr_assert_eq(config_load("examples/tandem.yaml", &c, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_eq(c->n_models, 2);
    cr_expect_not_null(config_find_model(c, c->default_model));
    config_free(c);
}

Test(config, out_of_memory_is_reported_not_crashed) {
    static const char text[] = "models:\n  kev: {path: model.gguf, aliases: [a, b]}\n";
    for (long n = 0; n < 40; n++) {
        struct config *c = NULL;
        mem_fail_after(n);
        tandem_err e = config_load_buffer(DIR_ "/x.yaml", text, sizeof text - 1, &c, NULL, 0);
        mem_fail_after(-1);
        cr_expect(e == TANDEM_OK || e == TANDEM_ERR_NOMEM, "n=%ld e=%d", n, e);
        config_free(c);
    }
}

Test(config, out_of_memory_in_mcp_and_descriptions) {
    static const char text[] = PIPELINE_WITH("    description: picks\n")
        "mcp: {http: true, allowed_origins: [https://a.example, http://b.example:8080]}\n";
    int ok = 0;
    for (long n = 0; n < 400 && !ok; n++) {
        struct config *c = NULL;
        mem_fail_after(n);
        tandem_err e = config_load_buffer(DIR_ "/x.yaml", text, sizeof text - 1, &c, NULL, 0);
        mem_fail_after(-1);
        cr_expect(e == TANDEM_OK || e == TANDEM_ERR_NOMEM, "n=%ld e=%d", n, e);
        ok = e == TANDEM_OK;
        config_free(c);
    }
    cr_expect(ok, "never loaded");
}

Test(config, unreadable_file_is_io) {
    struct config *c;
    char err[256] = "";
    cr_expect_eq(config_load("/nonexistent/tandem.yaml", &c, err, sizeof err), TANDEM_ERR_IO);
    cr_expect(strstr(err, "/nonexistent/tandem.yaml: No such file"), "%s", err);
}
