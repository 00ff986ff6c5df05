/* Unit tests for reload: which config changes a SIGHUP applies in place
 * (keys, limits, logging, pipelines) and which need a restart (anything
 * about a model or the placement inputs). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"
#include "serve/reload.h"

#define BASE_                                                                                \
    "api_keys: [k1]\n"                                                                       \
    "limits: {max_body: 1MiB}\n"                                                             \
    "models:\n"                                                                              \
    "  kev: {path: kev.gguf, ctx: 4096, aliases: [big], extra_args: [--no-mmap]}\n"          \
    "  laya: {path: laya.gguf, device: cpu}\n"                                               \
    "  far: {upstream: [http://10.0.0.5:8090], timeout: 30s}\n"

#define PIPELINE_(question)                                                                  \
    "pipelines:\n  p:\n"                                                                     \
    "    decide: {model: kev, instructions: pick}\n"                                         \
    "    verify: [{model: laya, questions: {" question ": {type: noul, instructions: ok?}}}]\n"

/* The models' files, empty (only their paths count here), in a fresh
 * directory; the inline config names that directory. */
static char dir[64], name[128];

static void make_models(void) {
    snprintf(dir, sizeof dir, "/tmp/tandem-reload-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(name, sizeof name, "%s/inline.yaml", dir);
    const char *files[] = {"kev.gguf", "kev2.gguf", "laya.gguf", "more.gguf", "far.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fclose(f);
    }
}

static void remove_models(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

TestSuite(reload, .init = make_models, .fini = remove_models);

static struct config *load(const char *text) {
    struct config *c = NULL;
    char err[1024] = "";
    cr_assert_eq(config_load_buffer(name, text, strlen(text), &c, err, sizeof err), TANDEM_OK,
                 "%s: %s", text, err);
    return c;
}

/* Whether the config text `next` may replace BASE_ in place. */
static bool applies(const char *base, const char *next) {
    struct config *a = load(base), *b = load(next);
    bool same = reload_models_same(a, b);
    config_free(a);
    config_free(b);
    return same;
}

Test(reload, the_same_text_applies) {
    cr_expect(applies(BASE_, BASE_));
}

Test(reload, keys_limits_and_pipelines_apply_in_place) {
    cr_expect(applies(BASE_, "api_keys: [k2, k3]\nlimits: {max_body: 4MiB}\n"
                             "models:\n"
                             "  kev: {path: kev.gguf, ctx: 4096, aliases: [big], "
                             "extra_args: [--no-mmap]}\n"
                             "  laya: {path: laya.gguf, device: cpu}\n"
                             "  far: {upstream: [http://10.0.0.5:8090], timeout: 30s}\n"));
    cr_expect(applies(BASE_ PIPELINE_("q"), BASE_ PIPELINE_("other")));
    cr_expect(applies(BASE_, BASE_ PIPELINE_("q")));
}

/* BASE_ with one model line replaced: each change needs a restart. */
static void expect_restart(const char *kev, const char *laya, const char *far) {
    char next[1024];
    snprintf(next, sizeof next, "models:\n  kev: %s\n  laya: %s\n  far: %s\n", kev, laya, far);
    cr_expect_not(applies(BASE_, next), "%s", next);
}

#define KEV_ "{path: kev.gguf, ctx: 4096, aliases: [big], extra_args: [--no-mmap]}"
#define LAYA_ "{path: laya.gguf, device: cpu}"
#define FAR_ "{upstream: [http://10.0.0.5:8090], timeout: 30s}"

Test(reload, a_changed_model_needs_a_restart) {
    char base[1024];
    snprintf(base, sizeof base, "models:\n  kev: %s\n  laya: %s\n  far: %s\n", KEV_, LAYA_, FAR_);
    cr_assert(applies(BASE_, base), "the helper's baseline must match BASE_");
    expect_restart("{path: kev2.gguf, ctx: 4096, aliases: [big], extra_args: [--no-mmap]}",
                   LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 8192, aliases: [big], extra_args: [--no-mmap]}",
                   LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 4096, aliases: [huge], extra_args: [--no-mmap]}",
                   LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 4096, aliases: [big]}", LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 4096, aliases: [big], extra_args: [--mlock]}",
                   LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 4096, aliases: [big], extra_args: [--no-mmap], "
                   "pin: true}", LAYA_, FAR_);
    expect_restart("{path: kev.gguf, ctx: 4096, aliases: [big], extra_args: [--no-mmap], "
                   "keep_alive: 1m}", LAYA_, FAR_);
    expect_restart(KEV_, "{path: laya.gguf}", FAR_);
    expect_restart(KEV_, LAYA_, "{upstream: [http://10.0.0.6:8090], timeout: 30s}");
    expect_restart(KEV_, LAYA_, "{upstream: [http://10.0.0.5:8090], timeout: 20s}");
    expect_restart(KEV_, LAYA_, "{upstream: [http://10.0.0.5:8090], timeout: 30s, "
                                "dialect: openai}");
    expect_restart(KEV_, LAYA_, "{path: far.gguf}");
}

Test(reload, added_removed_or_reordered_models_need_a_restart) {
    cr_expect_not(applies(BASE_, "models:\n  kev: " KEV_ "\n  laya: " LAYA_ "\n"));
    cr_expect_not(applies(BASE_, BASE_ "  more: {path: more.gguf}\n"));
    cr_expect_not(applies(BASE_, "models:\n  laya: " LAYA_ "\n  kev: " KEV_ "\n  far: " FAR_
                                 "\n"));
}

Test(reload, placement_inputs_need_a_restart) {
    cr_expect_not(applies(BASE_, "scheduling: {request_tokens: 1024}\n" BASE_));
    cr_expect_not(applies(BASE_, "scheduling: {clients: 4}\n" BASE_));
}

Test(reload, one_model_compares_field_by_field) {
    struct config *a = load(BASE_), *b = load(BASE_);
    cr_expect(reload_model_same(&a->models[0], &b->models[0]));
    cr_expect_not(reload_model_same(&a->models[0], &b->models[1]));
    cr_expect(reload_model_same(&a->models[2], &b->models[2]));
    cr_expect_not(reload_model_same(&a->models[1], &b->models[2]));
    config_free(a);
    config_free(b);
}

/* Whether the store of BASE_ plus `extra` equals that of BASE_ plus `next`. */
static bool store_same(const char *extra, const char *next) {
    char a_text[2048], b_text[2048];
    snprintf(a_text, sizeof a_text, "%s%s", BASE_, extra);
    snprintf(b_text, sizeof b_text, "%s%s", BASE_, next);
    struct config *a = load(a_text), *b = load(b_text);
    bool same = reload_store_same(a, b);
    config_free(a);
    config_free(b);
    return same;
}

Test(reload, a_changed_store_needs_a_restart_but_its_quality_window_does_not) {
    cr_expect(store_same("", ""));
    cr_expect(store_same("", "store: {quality_window: 1d}\n"));
    cr_expect_not(store_same("", "store: {path: /tmp/other.db}\n"));
    cr_expect_not(store_same("", "store: {path: \"off\"}\n"));
    cr_expect_not(store_same("", "store: {bodies: true}\n"));
    cr_expect_not(store_same("", "store: {retention: 7d}\n"));
    cr_expect_not(store_same("", "store: {max_bytes: 10MiB}\n"));
}
