/* Unit tests for tmpl: every compile case of tests/data/tmpl/compile.jsonl and
 * every render case of tests/data/tmpl/render.jsonl with its exact result,
 * then what holds for all of them (no message buffer, truncated messages end
 * on a character, every name an "unknown reference" message lists compiles),
 * appending to a used buffer, out-of-memory at every allocation without a
 * leak, tmpl_free(NULL) and tmpl_is_literal.
 *
 * compile.jsonl holds one case per line:
 *   {"name": "...", "text": "<template>", "scope": SCOPE,
 *    "error": "<the exact message>" | null, "literal": true|false (optional)}
 * render.jsonl:
 *   {"name": "...", "text": "<template>", "scope": SCOPE, "values": VALUES,
 *    "out": "<the exact rendering>" | "error": "<the exact message>",
 *    "code": "TOOBIG" (optional, default NOTFOUND), "max": N (optional)}
 * SCOPE is {"decided": bool, "decide_ids": [...], "verify_ids": [...],
 * "renders_instructions": bool (optional)}, an absent list meaning NULL.
 * VALUES is struct tmpl_values as JSON: "state", "instructions", "candidates", "decide_answers", "verify_answers" (absent or
 * null: NULL), "choice" (a string, absent or null: NULL), "confidence",
 * "probability" and "attempt" (absent: 0). `make fuzz` seeds fuzz_tmpl with
 * the compile texts. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "serve/tmpl.h"

#define COMPILE_CASES "tests/data/tmpl/compile.jsonl"
#define RENDER_CASES "tests/data/tmpl/render.jsonl"
#define MAX_CASES 256
#define MAX_IDS 16

struct tcase {
    const char *name;
    const char *text;
    struct tmpl_scope scope;
    const char *decide_ids[MAX_IDS + 1], *verify_ids[MAX_IDS + 1];
    const char *error; /* NULL: compiles (compile) or renders (render) */
    int literal;       /* -1: not stated */
    struct tmpl_values values;
    const char *out;
    tandem_err code;
    size_t max;
    size_t lineno;
    json_t *line; /* owns every pointer above */
};

static struct tcase cases[MAX_CASES];
static size_t n_cases;

/* Fills ids[] from the JSON array list; NULL when list is absent. */
static const char *const *read_ids(const json_t *list, const char **ids, const char *where) {
    if (!list)
        return NULL;
    cr_assert(json_is_array(list) && json_array_size(list) <= MAX_IDS, "%s: bad id list", where);
    size_t i;
    json_t *id;
    json_array_foreach(list, i, id) {
        ids[i] = json_string_value(id);
        cr_assert_not_null(ids[i], "%s: an id is not a string", where);
    }
    ids[json_array_size(list)] = NULL;
    return ids;
}

static void read_scope(struct tcase *c, const json_t *scope) {
    cr_assert(json_is_object(scope), "%s: no \"scope\"", c->name);
    c->scope.decided = json_is_true(json_object_get(scope, "decided"));
    c->scope.decide_ids = read_ids(json_object_get(scope, "decide_ids"), c->decide_ids, c->name);
    c->scope.verify_ids = read_ids(json_object_get(scope, "verify_ids"), c->verify_ids, c->name);
    c->scope.renders_instructions = json_is_true(json_object_get(scope, "renders_instructions"));
}

/* A JSON member as a borrowed pointer, NULL for absent or null. */
static const json_t *member(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static void read_values(struct tcase *c, const json_t *v) {
    cr_assert(json_is_object(v), "%s: no \"values\"", c->name);
    c->values = (struct tmpl_values){
        .state = member(v, "state"),
        .instructions = member(v, "instructions"),
        .candidates = member(v, "candidates"),
        .choice = json_string_value(json_object_get(v, "choice")),
        .confidence = json_number_value(json_object_get(v, "confidence")),
        .probability = json_number_value(json_object_get(v, "probability")),
        .decide_answers = member(v, "decide_answers"),
        .verify_answers = member(v, "verify_answers"),
        .attempt = (unsigned)json_integer_value(json_object_get(v, "attempt")),
    };
}

static tandem_err code_named(const char *name) {
    for (int e = 0; e < TANDEM_ERR_COUNT_; e++)
        if (!strcmp(tandem_errname((tandem_err)e), name))
            return (tandem_err)e;
    cr_assert_fail("unknown code %s", name);
    return TANDEM_OK;
}

static void read_case(struct tcase *c, const json_t *line, bool render) {
    c->name = json_string_value(json_object_get(line, "name"));
    cr_assert_not_null(c->name, "line %zu: no \"name\"", c->lineno);
    c->text = json_string_value(json_object_get(line, "text"));
    cr_assert_not_null(c->text, "%s: no \"text\"", c->name);
    read_scope(c, json_object_get(line, "scope"));
    const json_t *error = json_object_get(line, "error");
    cr_assert(!error || json_is_string(error) || json_is_null(error), "%s: bad error", c->name);
    c->error = json_string_value(error);
    const json_t *literal = json_object_get(line, "literal");
    c->literal = literal ? json_is_true(literal) : -1;
    if (!render)
        return;
    read_values(c, json_object_get(line, "values"));
    c->out = json_string_value(json_object_get(line, "out"));
    cr_assert(!c->out != !c->error, "%s: exactly one of \"out\" and \"error\"", c->name);
    const char *code = json_string_value(json_object_get(line, "code"));
    c->code = code ? code_named(code) : TANDEM_ERR_NOTFOUND;
    const json_t *max = json_object_get(line, "max");
    c->max = max ? (size_t)json_integer_value(max) : 1 << 20;
}

/* Loads path into cases[]; each test runs in its own process, so the cases
 * and their JSON are left to the process's exit. */
static void load_cases(const char *path, bool render) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "run the unit tests from the repository root");
    char *buf = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    n_cases = 0;
    while ((len = getline(&buf, &cap, f)) > 0) {
        lineno++;
        if (strspn(buf, " \t\r\n") == (size_t)len)
            continue;
        json_error_t je;
        json_t *line = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        cr_assert_not_null(line, "%s:%zu: %s", path, lineno, je.text);
        cr_assert_lt(n_cases, MAX_CASES);
        struct tcase *c = &cases[n_cases++];
        c->lineno = lineno;
        c->line = line;
        read_case(c, line, render);
        for (size_t j = 0; j + 1 < n_cases; j++)
            cr_expect_str_neq(c->name, cases[j].name, "%s:%zu: name used twice", path, lineno);
    }
    free(buf); /* getline's buffer */
    fclose(f);
}

/* --- compile ------------------------------------------------------------- */

Test(tmpl, compile_cases_give_their_exact_result) {
    load_cases(COMPILE_CASES, false);
    size_t n_ok = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const struct tcase *c = &cases[i];
        char err[1024] = "untouched";
        struct tmpl *t = (struct tmpl *)&err; /* must be overwritten */
        tandem_err e = tmpl_compile(c->text, &c->scope, &t, err, sizeof err);
        if (!c->error) {
            n_ok++;
            cr_expect_eq(e, TANDEM_OK, "%s: rejected: %s", c->name, err);
            cr_expect_str_eq(err, "untouched", "%s: a valid template wrote a message", c->name);
            if (e == TANDEM_OK && c->literal >= 0)
                cr_expect_eq(tmpl_is_literal(t), c->literal, "%s: literal", c->name);
        } else {
            cr_expect_eq(e, TANDEM_ERR_FORMAT, "%s: accepted", c->name);
            cr_expect_null(t, "%s: *out set on failure", c->name);
            cr_expect_str_eq(err, c->error, "%s", c->name);
        }
        tmpl_free(e == TANDEM_OK ? t : NULL);
    }
    cr_expect_geq(n_cases, 80);
    cr_expect_geq(n_ok, 30);
}

Test(tmpl, compile_without_message_buffer_same_result) {
    load_cases(COMPILE_CASES, false);
    for (size_t i = 0; i < n_cases; i++) {
        const struct tcase *c = &cases[i];
        tandem_err want = c->error ? TANDEM_ERR_FORMAT : TANDEM_OK;
        struct tmpl *t;
        cr_expect_eq(tmpl_compile(c->text, &c->scope, &t, NULL, 0), want, "%s", c->name);
        tmpl_free(t);
        cr_expect_eq(tmpl_compile(c->text, &c->scope, &t, NULL, 64), want, "%s", c->name);
        tmpl_free(t);
        char err[8] = "keep";
        cr_expect_eq(tmpl_compile(c->text, &c->scope, &t, err, 0), want, "%s", c->name);
        cr_expect_str_eq(err, "keep", "%s: errlen 0 wrote to err", c->name);
        tmpl_free(t);
    }
}

/* Every errlen up to the message's length + 1 gives the longest prefix that
 * fits and ends on a character boundary, and nothing past errlen. */
Test(tmpl, truncated_messages_end_on_a_character) {
    load_cases(COMPILE_CASES, false);
    for (size_t i = 0; i < n_cases; i++) {
        const struct tcase *c = &cases[i];
        if (!c->error)
            continue;
        size_t len = strlen(c->error);
        for (size_t errlen = 1; errlen <= len + 1; errlen++) {
            char err[1024];
            memset(err, 'X', sizeof err);
            struct tmpl *t;
            cr_assert_eq(tmpl_compile(c->text, &c->scope, &t, err, errlen), TANDEM_ERR_FORMAT);
            size_t want = errlen - 1 < len ? errlen - 1 : len;
            while (want > 0 && want < len && ((unsigned char)c->error[want] & 0xC0) == 0x80)
                want--;
            cr_expect_eq(strlen(err), want, "%s, errlen %zu: \"%s\"", c->name, errlen, err);
            cr_expect(!strncmp(err, c->error, want), "%s, errlen %zu", c->name, errlen);
            cr_expect_eq(err[errlen], 'X', "%s, errlen %zu: wrote past errlen", c->name, errlen);
        }
    }
}

/* What an "unknown reference" message offers must be accepted as written. */
Test(tmpl, every_listed_known_reference_compiles) {
    load_cases(COMPILE_CASES, false);
    size_t n_checked = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const struct tcase *c = &cases[i];
        const char *known = c->error ? strstr(c->error, "(known: ") : NULL;
        if (!known)
            continue;
        char list[1024];
        snprintf(list, sizeof list, "%s", known + strlen("(known: "));
        cr_assert_eq(list[strlen(list) - 1], ')', "%s", c->name);
        list[strlen(list) - 1] = '\0';
        for (char *save, *name = strtok_r(list, ",", &save); name;
             name = strtok_r(NULL, ",", &save)) {
            char text[256], err[512] = "";
            snprintf(text, sizeof text, "{{%s}}", name + (*name == ' '));
            struct tmpl *t;
            cr_expect_eq(tmpl_compile(text, &c->scope, &t, err, sizeof err), TANDEM_OK,
                         "%s: %s: %s", c->name, text, err);
            tmpl_free(t);
            n_checked++;
        }
    }
    cr_expect_geq(n_checked, 100);
}

Test(tmpl, null_text_is_invalid_and_null_scope_is_empty) {
    struct tmpl *t;
    char err[256] = "";
    cr_expect_eq(tmpl_compile(NULL, NULL, &t, err, sizeof err), TANDEM_ERR_INVAL);
    cr_expect_null(t);
    cr_expect_str_eq(err, "no template text");
    cr_expect_eq(tmpl_compile("{{state}} {{attempt}}", NULL, &t, NULL, 0), TANDEM_OK);
    tmpl_free(t);
    cr_expect_eq(tmpl_compile("{{decide.choice}}", NULL, &t, err, sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "decide.choice is only known in verify stages");
    cr_expect_eq(tmpl_compile("{{verify.x}}", NULL, &t, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_str_eq(err, "verify.x: not answered before this stage");
}

Test(tmpl, free_null_and_is_literal) {
    tmpl_free(NULL);
    struct tmpl *t;
    cr_assert_eq(tmpl_compile("plain }} text {", NULL, &t, NULL, 0), TANDEM_OK);
    cr_expect(tmpl_is_literal(t));
    tmpl_free(t);
    cr_assert_eq(tmpl_compile("", NULL, &t, NULL, 0), TANDEM_OK);
    cr_expect(tmpl_is_literal(t));
    tmpl_free(t);
    cr_assert_eq(tmpl_compile("x {{ attempt }}", NULL, &t, NULL, 0), TANDEM_OK);
    cr_expect_not(tmpl_is_literal(t));
    tmpl_free(t);
}

/* --- render -------------------------------------------------------------- */

Test(tmpl, render_cases_give_their_exact_result) {
    load_cases(RENDER_CASES, true);
    size_t n_ok = 0;
    for (size_t i = 0; i < n_cases; i++) {
        const struct tcase *c = &cases[i];
        char err[1024] = "untouched";
        struct tmpl *t;
        cr_assert_eq(tmpl_compile(c->text, &c->scope, &t, err, sizeof err), TANDEM_OK,
                     "%s: %s", c->name, err);
        struct mem_buf b;
        mem_buf_init(&b, c->max);
        tandem_err e = tmpl_render(t, &c->values, &b, err, sizeof err);
        if (c->out) {
            n_ok++;
            cr_expect_eq(e, TANDEM_OK, "%s: %s", c->name, err);
            cr_expect_str_eq(b.data ? b.data : "", c->out, "%s", c->name);
            cr_expect_eq(b.len, strlen(c->out), "%s", c->name);
            cr_expect_str_eq(err, "untouched", "%s: a rendering wrote a message", c->name);
        } else {
            cr_expect_eq(e, c->code, "%s: %s", c->name, tandem_errname(e));
            cr_expect_str_eq(err, c->error, "%s", c->name);
            cr_expect_leq(b.len, c->max, "%s", c->name);
        }
        mem_buf_deinit(&b);
        tmpl_free(t);
    }
    cr_expect_geq(n_cases, 60);
    cr_expect_geq(n_ok, 40);
}

/* Rendering appends: what the buffer held stays in front. */
Test(tmpl, render_appends_to_the_buffer) {
    struct tmpl *t;
    cr_assert_eq(tmpl_compile("[{{attempt}}]", NULL, &t, NULL, 0), TANDEM_OK);
    struct mem_buf b;
    mem_buf_init(&b, 64);
    cr_assert_eq(mem_buf_append(&b, "head ", 5), TANDEM_OK);
    struct tmpl_values v = {.attempt = 7};
    cr_expect_eq(tmpl_render(t, &v, &b, NULL, 0), TANDEM_OK);
    cr_expect_eq(tmpl_render(t, &v, &b, NULL, 0), TANDEM_OK);
    cr_expect_str_eq(b.data, "head [7][7]");
    /* The maximum counts what was already there: 11 + 3 fits 14, then not. */
    b.max = 14;
    cr_expect_eq(tmpl_render(t, &v, &b, NULL, 0), TANDEM_OK);
    cr_expect_eq(tmpl_render(t, &v, &b, NULL, 0), TANDEM_ERR_TOOBIG);
    cr_expect_leq(b.len, 14);
    mem_buf_deinit(&b);
    tmpl_free(t);
}

Test(tmpl, literal_renders_without_values) {
    struct tmpl *t;
    cr_assert_eq(tmpl_compile("caf\xc3\xa9 }} {", NULL, &t, NULL, 0), TANDEM_OK);
    struct mem_buf b;
    mem_buf_init(&b, 64);
    cr_expect_eq(tmpl_render(t, NULL, &b, NULL, 0), TANDEM_OK);
    cr_expect_str_eq(b.data, "caf\xc3\xa9 }} {");
    mem_buf_deinit(&b);
    tmpl_free(t);
}

/* A description past the maximum stops the JSON dump at the maximum. */
Test(tmpl, toobig_inside_a_large_json_value) {
    json_t *state = json_object();
    for (int i = 0; i < 1000; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        json_object_set_new(state, key, json_integer(i));
    }
    struct tmpl *t;
    cr_assert_eq(tmpl_compile("{{state}}", NULL, &t, NULL, 0), TANDEM_OK);
    struct mem_buf b;
    mem_buf_init(&b, 100);
    struct tmpl_values v = {.state = state};
    char err[128];
    cr_expect_eq(tmpl_render(t, &v, &b, err, sizeof err), TANDEM_ERR_TOOBIG);
    cr_expect_str_eq(err, "the rendered text passes its limit of 100 bytes");
    cr_expect_leq(b.len, 100);
    cr_expect(b.len > 0 && !strncmp(b.data, "{\"k0\":0,\"k1\":1,", 15), "%s", b.data);
    mem_buf_deinit(&b);
    tmpl_free(t);
    json_decref(state);
}

/* --- out of memory ------------------------------------------------------- */

static void disarm(void) { mem_fail_after(-1); }

static const char full[] = "S {{state}} I {{instructions}}\n{{candidates}} {{decide.choice}} "
                           "{{candidates[decide.choice]}} {{decide.confidence}} "
                           "{{decide.probability}} {{decide.q}} {{verify.v}} {{attempt}} tail";
static const char *const q_ids[] = {"q", NULL}, *const v_ids[] = {"v", NULL};

Test(tmpl, compile_out_of_memory_is_reported_without_leak, .fini = disarm) {
    const struct tmpl_scope scope = {.decided = true, .decide_ids = q_ids, .verify_ids = v_ids};
    bool succeeded = false;
    for (long n = 0; n < 64 && !succeeded; n++) {
        struct mem_stats a, b;
        mem_stats_get(&a);
        struct tmpl *t = NULL;
        char err[128] = "";
        mem_fail_after(n);
        tandem_err e = tmpl_compile(full, &scope, &t, err, sizeof err);
        disarm();
        cr_expect(e == TANDEM_OK || e == TANDEM_ERR_NOMEM, "n=%ld e=%d", n, e);
        if (e == TANDEM_ERR_NOMEM) {
            cr_expect_null(t);
            cr_expect_str_eq(err, "out of memory");
        }
        succeeded = e == TANDEM_OK;
        tmpl_free(t);
        mem_stats_get(&b);
        cr_expect_eq(b.allocs - a.allocs, b.frees - a.frees, "n=%ld leaked", n);
    }
    cr_expect(succeeded, "still failing after 64 allocations");
}

Test(tmpl, render_out_of_memory_is_reported_without_leak, .fini = disarm) {
    const struct tmpl_scope scope = {.decided = true, .decide_ids = q_ids, .verify_ids = v_ids};
    struct tmpl *t;
    cr_assert_eq(tmpl_compile(full, &scope, &t, NULL, 0), TANDEM_OK);
    json_t *vals = json_loads("{\"state\": {\"a\": [1, 2]}, \"ins\": \"Pick.\","
                              "\"cands\": {\"x\": \"X\", \"y\": null},"
                              "\"d\": {\"q\": {\"type\": \"noul\", \"noul\": 0.5}},"
                              "\"v\": {\"v\": {\"type\": \"choice\", \"choice\": \"yes\"}}}",
                              0, NULL);
    cr_assert_not_null(vals);
    const struct tmpl_values v = {
        json_object_get(vals, "state"), json_object_get(vals, "ins"),
        json_object_get(vals, "cands"), "x", 0.9, 0.6, json_object_get(vals, "d"),
        json_object_get(vals, "v"), 1,
    };
    static const char want[] = "S {\"a\":[1,2]} I Pick.\n- x: X\n- y\n x X 0.90 0.60 0.50 yes "
                               "1 tail";
    bool succeeded = false;
    for (long n = 0; n < 16 && !succeeded; n++) {
        struct mem_stats a, b;
        mem_stats_get(&a);
        struct mem_buf out;
        mem_buf_init(&out, 1 << 16);
        char err[128] = "";
        mem_fail_after(n);
        tandem_err e = tmpl_render(t, &v, &out, err, sizeof err);
        disarm();
        cr_expect(e == TANDEM_OK || e == TANDEM_ERR_NOMEM, "n=%ld e=%d", n, e);
        if (e == TANDEM_OK)
            cr_expect_str_eq(out.data, want);
        else
            cr_expect_str_eq(err, "out of memory");
        succeeded = e == TANDEM_OK;
        mem_buf_deinit(&out);
        mem_stats_get(&b);
        cr_expect_eq(b.allocs - a.allocs, b.frees - a.frees, "n=%ld leaked", n);
    }
    cr_expect(succeeded);
    tmpl_free(t);
    json_decref(vals);
}
