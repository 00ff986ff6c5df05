/* Unit tests for config_walk: a table with one field of each kind, over a
 * struct of its own, read from small YAML texts. Per kind: the default, a
 * value out of range (where the kind has a range), a value of the wrong type,
 * each with its exact message; then sections, unknown keys with their
 * suggestion, via, and the mapping helpers. */
#include <criterion/criterion.h>
#include <libfyaml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "serve/config_walk.h"

struct inner {
    uint32_t depth;
};

struct sample {
    char *name;
    char *dir;
    struct config_text note;
    char **tags;
    size_t n_tags;
    bool on;
    uint32_t count;
    int32_t level;
    double ratio;
    uint64_t bytes;
    int64_t wait_ms;
    int64_t keep_ms;
    bool fast;
    int color;
    uint32_t kv;
    uint32_t depth;
    int custom_calls;
    struct inner *inner; /* written via inner_of */
};

static bool k_custom(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    char s[8];
    if (!config_walk_scalar(w, v, p, s, sizeof s))
        return false;
    ((struct sample *)t)->custom_calls++;
    return true;
}

static void *inner_of(struct config_walk *w, struct fy_node *v, const char *p, void *t) {
    struct sample *s = t;
    if (!s->inner && !(s->inner = mem_calloc(1, sizeof *s->inner)))
        config_walk_fail(w, TANDEM_ERR_NOMEM, v, p, "out of memory");
    return s->inner;
}

static const struct config_choice SPEEDS[] = {{"fast", true}, {"safe", false}, {NULL, 0}};
static const struct config_choice COLORS[] = {{"red", 10}, {"green", 20}, {"blue", 30}, {NULL, 0}};

static const struct config_field SUB[] = {
    {"depth", CONFIG_UINT(struct sample, depth, 0, 9), .def = "4"}, {NULL}};

static const struct config_field FIELDS[] = {
    {"name", CONFIG_STRING(struct sample, name)},
    {"dir", CONFIG_PATH(struct sample, dir)},
    {"note", CONFIG_TEXT(struct sample, note)},
    {"tags", CONFIG_LIST(struct sample, tags, n_tags)},
    {"on", CONFIG_BOOL(struct sample, on)},
    {"count", CONFIG_UINT(struct sample, count, 1, 10), .def = "5"},
    {"level", CONFIG_INT(struct sample, level, -3, 3), .def = "-1"},
    {"ratio", CONFIG_DOUBLE(struct sample, ratio, 0, 1), .def = "0.25"},
    {"bytes", CONFIG_SIZE(struct sample, bytes), .def = "2KiB"},
    {"wait", CONFIG_DURATION(struct sample, wait_ms), .min = 100, .def = "1s"},
    {"keep", CONFIG_DURATION(struct sample, keep_ms), .forever = true, .def = "5m"},
    {"speed", CONFIG_ENUM(struct sample, fast, SPEEDS), .def = "fast"},
    {"color", CONFIG_ENUM(struct sample, color, COLORS), .cap = 6, .def = "green"},
    {"kv", CONFIG_CACHE_TYPE(struct sample, kv), .def = "q8_0"},
    {"sub", CONFIG_SECTION(SUB)},
    {"custom", CONFIG_CUSTOM(k_custom)},
    {"inner_depth", CONFIG_UINT(struct inner, depth, 1, 2), .via = inner_of},
    {NULL}};

static void sample_free(struct sample *s) {
    mem_free(s->name);
    mem_free(s->dir);
    mem_free(s->note.text);
    config_walk_list_free(s->tags, s->n_tags);
    mem_free(s->inner);
}

/* Stores the defaults into *s, then walks yaml into it; err gets the message. */
static tandem_err walk(const char *yaml, struct sample *s, char *err, size_t cap) {
    memset(s, 0, sizeof *s);
    err[0] = '\0';
    struct config_walk w = {.file = "t.yaml", .dir = "/base", .err = err, .errlen = cap};
    struct fy_document *doc = fy_document_build_from_string(NULL, yaml, FY_NT);
    cr_assert_not_null(doc, "%s", yaml);
    if (config_walk_defaults(&w, FIELDS, s))
        config_walk_section(&w, fy_document_root(doc), "", FIELDS, s);
    fy_document_destroy(doc);
    return w.e;
}

/* yaml must be refused with exactly want. */
static void refused(const char *yaml, const char *want) {
    struct sample s;
    char err[512];
    cr_expect_eq(walk(yaml, &s, err, sizeof err), TANDEM_ERR_FORMAT, "%s", yaml);
    cr_expect_str_eq(err, want, "%s", yaml);
    sample_free(&s);
}

/* yaml must be accepted into *s (the caller frees it). */
static void accepted(const char *yaml, struct sample *s) {
    char err[512];
    cr_assert_eq(walk(yaml, s, err, sizeof err), TANDEM_OK, "%s: %s", yaml, err);
}

Test(config_walk, defaults_of_every_kind) {
    struct sample s;
    accepted("{}", &s);
    cr_expect_null(s.name);
    cr_expect_null(s.dir);
    cr_expect_null(s.note.text);
    cr_expect_null(s.tags);
    cr_expect(!s.on);
    cr_expect_eq(s.count, 5);
    cr_expect_eq(s.level, -1);
    cr_expect_float_eq(s.ratio, 0.25, 1e-12);
    cr_expect_eq(s.bytes, 2048);
    cr_expect_eq(s.wait_ms, 1000);
    cr_expect_eq(s.keep_ms, 300000);
    cr_expect(s.fast);
    cr_expect_eq(s.color, 20);
    cr_expect_eq(s.kv, 8); /* GGML_TYPE_Q8_0 */
    cr_expect_eq(s.depth, 4); /* a section's defaults too */
    cr_expect_null(s.inner);  /* a via field makes nothing by default */
    sample_free(&s);
}

Test(config_walk, values_of_every_kind) {
    struct sample s;
    setenv("CONFIG_WALK_TEST", "env", 1);
    accepted("{name: kev, dir: \"${CONFIG_WALK_TEST}/x\", note: \"hi {{x}}\", tags: [a, b],"
             " on: yes, count: 10, level: -3, ratio: 1, bytes: 6GiB, wait: 100ms, keep: forever,"
             " speed: safe, color: blue, kv: f16, sub: {depth: 9}, custom: x, inner_depth: 2}",
             &s);
    cr_expect_str_eq(s.name, "kev");
    cr_expect_str_eq(s.dir, "/base/env/x"); /* expanded, then made absolute */
    cr_expect_str_eq(s.note.text, "hi {{x}}");
    cr_expect_eq(s.note.line, 1);
    cr_expect_eq(s.n_tags, 2);
    cr_expect_str_eq(s.tags[1], "b");
    cr_expect_null(s.tags[2]);
    cr_expect(s.on);
    cr_expect_eq(s.count, 10);
    cr_expect_eq(s.level, -3);
    cr_expect_float_eq(s.ratio, 1.0, 1e-12);
    cr_expect_eq(s.bytes, 6ull << 30);
    cr_expect_eq(s.wait_ms, 100);
    cr_expect_eq(s.keep_ms, CONFIG_KEEP_ALIVE_FOREVER);
    cr_expect(!s.fast);
    cr_expect_eq(s.color, 30);
    cr_expect_eq(s.kv, 1); /* GGML_TYPE_F16 */
    cr_expect_eq(s.depth, 9);
    cr_expect_eq(s.custom_calls, 1);
    cr_assert_not_null(s.inner);
    cr_expect_eq(s.inner->depth, 2);
    sample_free(&s);
}

Test(config_walk, uint_range_and_type) {
    refused("count: 11", "t.yaml:1: count: 11 is out of range (1 to 10)");
    refused("count: 0", "t.yaml:1: count: 0 is out of range (1 to 10)");
    refused("count: -1", "t.yaml:1: count: expected an integer, got \"-1\"");
    refused("count: 8k", "t.yaml:1: count: expected an integer, got \"8k\"");
    refused("count: [1]", "t.yaml:1: count: expected a value, got a list");
}

Test(config_walk, int_range_and_type) {
    refused("level: 4", "t.yaml:1: level: expected an integer from -3 to 3, got \"4\"");
    refused("level: -4", "t.yaml:1: level: expected an integer from -3 to 3, got \"-4\"");
    refused("level: {a: 1}", "t.yaml:1: level: expected a value, got a mapping");
}

Test(config_walk, double_range_and_type) {
    refused("ratio: 1.5", "t.yaml:1: ratio: expected a number from 0 to 1, got \"1.5\"");
    refused("ratio: half", "t.yaml:1: ratio: expected a number from 0 to 1, got \"half\"");
}

Test(config_walk, size_and_type) {
    refused("bytes: lots", "t.yaml:1: bytes: expected a size like 6GiB, got \"lots\"");
    refused("bytes: [1]", "t.yaml:1: bytes: expected a value, got a list");
}

Test(config_walk, duration_minimum_and_type) {
    refused("wait: 99ms", "t.yaml:1: wait: must be at least 100ms");
    refused("wait: 5w", "t.yaml:1: wait: expected a duration like 30s, 5m, got \"5w\"");
    refused("wait: forever", "t.yaml:1: wait: expected a duration like 30s, 5m, got \"forever\"");
    refused("keep: -1s", "t.yaml:1: keep: expected a duration like 30s, 5m or forever, got \"-1s\"");
}

Test(config_walk, bool_and_enum_words) {
    refused("on: 2", "t.yaml:1: on: expected true or false, got \"2\"");
    refused("speed: slow", "t.yaml:1: speed: expected fast or safe, got \"slow\"");
    refused("color: pink", "t.yaml:1: color: expected red, green or blue, got \"pink\"");
    refused("color: purple", "t.yaml:1: color: value too long (6 bytes)"); /* cap: 6 */
}

Test(config_walk, cache_type_and_strings) {
    refused("kv: q9", "t.yaml:1: kv: unknown cache type \"q9\" (e.g. f16, q8_0)");
    refused("name: {a: 1}", "t.yaml:1: name: expected a value, got a mapping");
    refused("dir: $NOT_SET_ANYWHERE_42/x",
            "t.yaml:1: dir: environment variable NOT_SET_ANYWHERE_42 is not set");
    refused("note: [x]", "t.yaml:1: note: expected a value, got a list");
    refused("tags: x", "t.yaml:1: tags: expected a list");
    refused("tags: [a, {b: 1}]", "t.yaml:1: tags[1]: expected a value, got a mapping");
}

Test(config_walk, sections_and_unknown_keys) {
    refused("sub: 3", "t.yaml:1: sub: expected a mapping of keys");
    refused("sub: {depth: 10}", "t.yaml:1: sub.depth: 10 is out of range (0 to 9)");
    refused("sub: {dpth: 1}", "t.yaml:1: sub.dpth: unknown key (did you mean depth?)");
    refused("colour: red", "t.yaml:1: colour: unknown key (did you mean color?)");
    refused("zzz: 1", "t.yaml:1: zzz: unknown key");
    refused("[1]", "t.yaml:1: (root): expected a mapping of keys");
    refused("inner_depth: 3", "t.yaml:1: inner_depth: 3 is out of range (1 to 2)");
    refused("{count: 2,\n level: 9}", "t.yaml:2: level: expected an integer from -3 to 3, got \"9\"");
}

Test(config_walk, a_refused_default_is_an_error) {
    static const struct config_field BAD[] = {
        {"count", CONFIG_UINT(struct sample, count, 1, 10), .def = "11"}, {NULL}};
    static const struct config_field NONE[] = {
        {"name", CONFIG_STRING(struct sample, name), .def = "x"}, {NULL}};
    struct sample s = {0};
    char err[256] = "";
    struct config_walk w = {.file = "t.yaml", .err = err, .errlen = sizeof err};
    cr_expect(!config_walk_defaults(&w, BAD, &s));
    cr_expect_str_eq(err, "t.yaml:0: count: 11 is out of range (1 to 10)");
    struct config_walk w2 = {.file = "t.yaml", .err = err, .errlen = sizeof err};
    cr_expect(!config_walk_defaults(&w2, NONE, &s));
    cr_expect_str_eq(err, "t.yaml:0: name: this field takes no default");
}

/* --- the mapping helpers ------------------------------------------------------------ */

struct names {
    char seen[4][64];
    size_t n;
};

static bool note_entry(struct config_walk *w, struct fy_node *k, struct fy_node *v,
                       const char *name, const char *sub, void *ctx) {
    struct names *ns = ctx;
    char value[16];
    if (!config_walk_scalar(w, v, sub, value, sizeof value))
        return false;
    if (!strcmp(value, "stop"))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, k, sub, "stopped here");
    snprintf(ns->seen[ns->n++], sizeof ns->seen[0], "%s=%s", name, sub);
    return true;
}

static tandem_err map(const char *yaml, size_t name_cap, size_t path_cap, struct names *ns,
                      char *err, size_t cap) {
    struct config_walk w = {.file = "m.yaml", .err = err, .errlen = cap};
    struct fy_document *doc = fy_document_build_from_string(NULL, yaml, FY_NT);
    cr_assert_not_null(doc);
    struct fy_node *root = fy_document_root(doc);
    void *items = config_walk_map_new(&w, root, "models", "model", 16);
    if (items)
        config_walk_map_each(&w, root, "models", name_cap, path_cap, note_entry, ns);
    mem_free(items);
    fy_document_destroy(doc);
    return w.e;
}

Test(config_walk, map_each_names_every_entry_in_order) {
    struct names ns = {0};
    char err[256] = "";
    cr_assert_eq(map("{b: 1, a: 2, c: 3}", 128, 384, &ns, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_eq(ns.n, 3);
    cr_expect_str_eq(ns.seen[0], "b=models.b");
    cr_expect_str_eq(ns.seen[1], "a=models.a");
    cr_expect_str_eq(ns.seen[2], "c=models.c");
}

Test(config_walk, map_new_wants_at_least_one_entry) {
    struct names ns = {0};
    char err[256] = "";
    cr_expect_eq(map("{}", 128, 384, &ns, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "m.yaml:0: models: expected a mapping of at least one model");
    cr_expect_eq(map("[a]", 128, 384, &ns, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "m.yaml:1: models: expected a mapping of at least one model");
    cr_expect_eq(ns.n, 0);
}

Test(config_walk, map_each_caps_keys_and_paths) {
    struct names ns = {0};
    char err[256] = "";
    cr_expect_eq(map("{abcd: 1}", 4, 384, &ns, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "m.yaml:1: models: value too long (4 bytes)");
    cr_assert_eq(map("{abcd: 1}", 5, 10, &ns, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_str_eq(ns.seen[0], "abcd=models.ab"); /* the path cut to 9 bytes */
}

Test(config_walk, map_each_stops_at_the_first_failure) {
    struct names ns = {0};
    char err[256] = "";
    cr_expect_eq(map("a: 1\nb: stop\nc: 3\n", 128, 384, &ns, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "m.yaml:2: models.b: stopped here");
    cr_expect_eq(ns.n, 1); /* c is not visited */
}
