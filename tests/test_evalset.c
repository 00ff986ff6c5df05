/* Unit tests for evalset: valid cases, every malformed line of
 * tests/data/eval/malformed.txt with its exact message, whole-file loading
 * (all bad lines reported, duplicate ids, blank lines), the shipped dataset,
 * allocation failures, and random mutations of a valid line (never a crash,
 * always a "file:line:" message or a valid case). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/evalset.h"
#include "base/mem.h"

static const char GOOD[] =
    "{\"id\": \"c1\", \"state\": {\"cpu\": 0.9}, \"questions\": {"
    "\"route\": {\"type\": \"choice\", \"instructions\": \"Pick.\", \"criteria\": "
    "{\"billing\": \"money\", \"shipping\": null, \"technical\": [\"bugs\"]}},"
    "\"urgency\": {\"type\": \"score\", \"instructions\": \"How urgent?\", \"criteria\": "
    "[\"later\", \"today\", \"now\"]},"
    "\"angry\": {\"type\": \"noul\", \"instructions\": \"Angry?\", \"criteria\": {\"true\": \"yes\"}},"
    "\"free\": {\"type\": \"noul\", \"instructions\": \"Unscored.\"}},"
    "\"gold\": {\"route\": {\"target\": {\"billing\": 0.25, \"shipping\": 0.75}}, \"urgency\": 2, "
    "\"angry\": false}, \"meta\": {\"anything\": [1, 2]}}";

Test(evalset, parses_a_valid_case) {
    struct evalset_case c;
    char err[512] = "";
    cr_assert_eq(evalset_parse_line("f.jsonl", 3, GOOD, strlen(GOOD), &c, err, sizeof err),
                 TANDEM_OK, "%s", err);
    cr_expect_str_eq(c.id, "c1");
    cr_expect_eq(c.line, 3);
    cr_assert_eq(c.n_questions, 4);
    const struct evalset_question *r = &c.q[0], *u = &c.q[1], *a = &c.q[2], *f = &c.q[3];
    cr_expect_str_eq(r->id, "route");
    cr_expect_eq(r->type, S1Q_TYPE_CHOICE);
    cr_assert_eq(r->n_options, 3);
    cr_expect_str_eq(r->options[2], "technical");
    cr_expect(r->has_gold);
    cr_expect_eq(r->gold, 1); /* the target's most probable option */
    cr_assert(r->target);
    cr_expect_eq(r->target[0], 0.25);
    cr_expect_eq(r->target[2], 0);
    cr_expect_eq(u->type, S1Q_TYPE_SCORE);
    cr_expect_str_eq(u->options[1], "1");
    cr_expect_eq(u->gold, 2);
    cr_expect_eq(a->type, S1Q_TYPE_NOUL);
    cr_expect_eq(a->gold, 1); /* false */
    cr_expect(!f->has_gold);
    cr_expect(json_is_object(c.state));
    cr_expect_eq(json_object_size(c.questions), 4);
    evalset_case_deinit(&c);
    evalset_case_deinit(&c); /* idempotent */
    evalset_case_deinit(NULL);
}

Test(evalset, every_malformed_line_gives_its_reason) {
    FILE *f = fopen("tests/data/eval/malformed.txt", "r");
    cr_assert(f, "run the unit tests from the repository root");
    char *line = NULL;
    size_t cap = 0, n = 0, lineno = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[0] == '#')
            continue;
        if (line[len - 1] == '\n')
            line[--len] = '\0';
        char *tab = strchr(line, '\t');
        cr_assert(tab, "malformed.txt:%zu: no tab", lineno);
        *tab = '\0';
        const char *json = tab + 1;
        struct evalset_case c;
        char err[1024], want[1200];
        cr_expect_eq(evalset_parse_line("bad.jsonl", 7, json, strlen(json), &c, err, sizeof err),
                     TANDEM_ERR_FORMAT, "malformed.txt:%zu was accepted", lineno);
        snprintf(want, sizeof want, "bad.jsonl:7: %s", line);
        cr_expect(!strcmp(err, want), "malformed.txt:%zu: got \"%s\"", lineno, err);
        cr_expect_null(c.id);
        n++;
    }
    free(line); /* getline's buffer */
    fclose(f);
    cr_expect_geq(n, 40);
}

static char *write_temp(const char *text) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/tandem-evalset-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

Test(evalset, load_reports_every_bad_line_and_duplicate_ids) {
    char text[4096];
    snprintf(text, sizeof text,
             "%s\n\n   \n{\"id\": \"c2\"}\n%s\nnot json\n", GOOD, GOOD);
    char *path = write_temp(text);
    struct evalset *s = (void *)1;
    char err[4096];
    cr_expect_eq(evalset_load(path, &s, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_null(s);
    char want[4096];
    snprintf(want, sizeof want,
             "%s:4: missing \"state\"\n%s:6: invalid JSON at column 3: '[' or '{' expected "
             "near 'not'\n%s:5: id: \"c1\" is already the id of line 1",
             path, path, path);
    cr_expect_str_eq(err, want);
    unlink(path);
}

Test(evalset, load_empty_and_missing_files) {
    char *path = write_temp("\n\n");
    struct evalset *s;
    char err[512];
    cr_expect_eq(evalset_load(path, &s, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect(strstr(err, "no cases"), "%s", err);
    unlink(path);
    cr_expect_eq(evalset_load("/nonexistent/x.jsonl", &s, err, sizeof err), TANDEM_ERR_IO);
    cr_expect(strstr(err, "/nonexistent/x.jsonl: cannot open"), "%s", err);
    evalset_free(NULL);
}

Test(evalset, loads_the_shipped_set) {
    struct evalset *s;
    char err[4096];
    cr_assert_eq(evalset_load("tests/data/eval/decisions.jsonl", &s, err, sizeof err), TANDEM_OK,
                 "%s", err);
    cr_expect_geq(s->n_cases, 55);
    cr_expect_eq(s->n_gold, s->n_questions, "every shipped question has a gold answer");
    size_t types[S1Q_TYPE_COUNT] = {0};
    for (size_t i = 0; i < s->n_cases; i++)
        for (size_t q = 0; q < s->cases[i].n_questions; q++)
            types[s->cases[i].q[q].type]++;
    for (int t = 0; t < S1Q_TYPE_COUNT; t++)
        cr_expect_geq(types[t], 10, "%s questions", s1q_type_name((enum s1q_type)t));
    evalset_free(s);
}

Test(evalset, allocation_failures_are_reported_not_crashed) {
    for (long n = 0; n < 200; n++) {
        struct evalset_case c;
        char err[512];
        mem_fail_after(n);
        tandem_err e = evalset_parse_line("f", 1, GOOD, strlen(GOOD), &c, err, sizeof err);
        mem_fail_after(-1);
        if (e == TANDEM_OK) {
            evalset_case_deinit(&c);
            return;
        }
        cr_expect_eq(e, TANDEM_ERR_NOMEM, "n=%ld: %s", n, err);
    }
    cr_assert_fail("still failing after 200 allocations");
}

/* splitmix64: a fixed stream of mutations, so a failure reproduces. */
static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

Test(evalset, random_mutations_never_crash, .timeout = 60) {
    static const char alphabet[] = "{}[]\":,0123456789.-eE truefalsnul\\\t\xff\x01";
    uint64_t seed = 42;
    size_t n = strlen(GOOD), accepted = 0;
    char buf[sizeof GOOD + 64];
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(buf, GOOD, n);
        size_t len = n;
        int edits = 1 + (int)(next_rand(&seed) % 4);
        for (int k = 0; k < edits && len > 1; k++) {
            size_t at = next_rand(&seed) % len;
            switch (next_rand(&seed) % 3) {
            case 0: buf[at] = alphabet[next_rand(&seed) % (sizeof alphabet - 1)]; break;
            case 1: memmove(buf + at, buf + at + 1, len - at - 1); len--; break;
            default: len = at + 1; break; /* truncate */
            }
        }
        struct evalset_case c;
        char err[1024] = "";
        tandem_err e = evalset_parse_line("m.jsonl", 9, buf, len, &c, err, sizeof err);
        if (e == TANDEM_OK) {
            accepted++;
            cr_assert(c.id && c.n_questions > 0);
            for (size_t q = 0; q < c.n_questions; q++)
                cr_assert(!c.q[q].has_gold || c.q[q].gold < c.q[q].n_options);
            evalset_case_deinit(&c);
        } else {
            cr_assert_eq(e, TANDEM_ERR_FORMAT);
            cr_assert(!strncmp(err, "m.jsonl:9: ", 11), "message without position: %s", err);
        }
    }
    cr_expect_gt(accepted, 0); /* some mutations only touch strings */
}

/* --- the calibration split ------------------------------------------------------- */

/* A set of n cases with ids "case-0".."case-<n-1>" (only ids are filled). */
static struct evalset *ids_set(size_t n, bool reversed) {
    struct evalset *s = mem_calloc(1, sizeof *s);
    s->cases = mem_calloc(n, sizeof *s->cases);
    s->n_cases = n;
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "case-%zu", reversed ? n - 1 - i : i);
        s->cases[i].id = mem_strdup(id);
    }
    return s;
}

Test(evalset, split_is_a_pure_function_of_seed_and_id) {
    enum { N = 2000 };
    struct evalset *a = ids_set(N, false), *b = ids_set(N, true), *half = ids_set(N / 2, false);
    bool *ca = mem_calloc(N, 1), *cb = mem_calloc(N, 1), *ch = mem_calloc(N, 1);
    size_t na = evalset_split(a, 7, 0.5, ca);
    cr_expect_eq(evalset_split(b, 7, 0.5, cb), na, "reordering keeps the count");
    evalset_split(half, 7, 0.5, ch);
    for (size_t i = 0; i < N; i++) {
        cr_expect_eq(ca[i], cb[N - 1 - i], "case %zu moves with its id", i);
        if (i < N / 2)
            cr_expect_eq(ca[i], ch[i], "case %zu does not depend on the others", i);
        cr_expect_eq(ca[i], evalset_split_case(a->cases[i].id, 7, 0.5));
    }
    /* the same call twice */
    bool again[N];
    cr_expect_eq(evalset_split(a, 7, 0.5, again), na);
    cr_expect_arr_eq(again, ca, N);
    evalset_free(a);
    evalset_free(b);
    evalset_free(half);
    mem_free(ca);
    mem_free(cb);
    mem_free(ch);
}

Test(evalset, split_respects_the_share_and_the_seed) {
    enum { N = 4000 };
    struct evalset *s = ids_set(N, false);
    bool *c0 = mem_calloc(N, 1), *c1 = mem_calloc(N, 1);
    const double shares[] = {0.1, 0.25, 0.5, 0.9};
    for (size_t k = 0; k < sizeof shares / sizeof shares[0]; k++) {
        size_t n = evalset_split(s, 0, shares[k], c0);
        /* binomial: 4 standard deviations at most 4 * sqrt(N / 4) = 126 */
        cr_expect_leq(fabs((double)n - shares[k] * N), 126, "share %.2f gave %zu of %d",
                      shares[k], n, N);
    }
    size_t n0 = evalset_split(s, 0, 0.5, c0), n1 = evalset_split(s, 1, 0.5, c1), same = 0;
    for (size_t i = 0; i < N; i++)
        same += c0[i] == c1[i];
    cr_expect(n0 > 0 && n1 > 0);
    cr_expect_leq(fabs((double)same - N / 2.0), 126, "seeds 0 and 1 agree on %zu of %d", same,
                  N);
    /* a larger share only adds cases: each case's draw is fixed */
    evalset_split(s, 3, 0.3, c0);
    evalset_split(s, 3, 0.6, c1);
    for (size_t i = 0; i < N; i++)
        cr_expect(!c0[i] || c1[i], "case %zu left calibration when the share grew", i);
    cr_expect_eq(evalset_split(s, 9, 1.0, c0), N, "share 1 takes every case");
    cr_expect_eq(evalset_split(s, 9, 0.0, c0), 0, "share 0 takes none");
    cr_expect_eq(evalset_split(s, 9, NAN, c0), 0);
    evalset_free(s);
    mem_free(c0);
    mem_free(c1);
}

/* The default split (seed 0, share 0.5) of tests/data/eval/decisions.jsonl, also
 * computed by an independent Python rendering of the rule in evalset.h. */
#define SHIPPED_SPLIT_N 36
#define SHIPPED_SPLIT_FIRST "route-lost-parcel,route-crash,route-password"

Test(evalset, split_of_the_shipped_set_is_pinned) {
    /* the ladder judges the cases imatrix left out: a change of the hash would
     * silently move cases between the sides, so the default split is pinned */
    struct evalset *s;
    char err[4096];
    cr_assert_eq(evalset_load("tests/data/eval/decisions.jsonl", &s, err, sizeof err), TANDEM_OK);
    bool *c = mem_calloc(s->n_cases, 1);
    size_t n = evalset_split(s, 0, 0.5, c);
    char first[256] = "";
    for (size_t i = 0, k = 0; i < s->n_cases && k < 3; i++)
        if (c[i]) {
            strcat(first, s->cases[i].id);
            strcat(first, k++ < 2 ? "," : "");
        }
    cr_log_info("default split: %zu of %zu, first %s", n, s->n_cases, first);
    cr_expect_eq(n, SHIPPED_SPLIT_N, "%zu", n);
    cr_expect_str_eq(first, SHIPPED_SPLIT_FIRST);
    mem_free(c);
    evalset_free(s);
}

/* --- audit logs ------------------------------------------------------------------- */

/* An audit line with the systemone request of GOOD's state and one question. */
static void audit_line(char *out, size_t cap, const char *id, const char *route, int status,
                       bool body) {
    const char *req = "{\\\"state\\\": \\\"disk full\\\", \\\"questions\\\": {\\\"q\\\": "
                      "{\\\"type\\\": \\\"noul\\\", \\\"instructions\\\": \\\"Alert?\\\"}}}";
    snprintf(out, cap,
             "{\"time\": \"2026-01-01T00:00:00Z\", \"request_id\": \"%s\", \"route\": \"%s\", "
             "\"method\": \"POST\", \"status\": %d%s%s%s}\n",
             id, route, status, body ? ", \"request_body\": \"" : "", body ? req : "",
             body ? "\"" : "");
}

Test(evalset, loads_the_requests_of_an_audit_log) {
    char text[8192] = "", line[1024];
    audit_line(line, sizeof line, "r1", "systemone", 200, true);
    strcat(text, line);
    audit_line(line, sizeof line, "r2", "chat", 200, true); /* another route */
    strcat(text, line);
    audit_line(line, sizeof line, "r3", "systemone", 400, true); /* failed */
    strcat(text, line);
    audit_line(line, sizeof line, "r4", "systemone", 200, false); /* no body */
    strcat(text, line);
    audit_line(line, sizeof line, "r1", "systemone", 200, true); /* retried */
    strcat(text, line);
    strcat(text, "{\"request_id\": \"r5\", \"route\": \"systemone\", \"status\": 200, "
                 "\"request_body\": \"{\\\"state\\\": \\\"cut sh\"}\n"); /* cut body */
    audit_line(line, sizeof line, "r6", "systemone", 200, true);
    strcat(text, line);
    char *path = write_temp(text);
    bool audit = false;
    char err[1024] = "";
    cr_assert_eq(evalset_detect_audit(path, &audit, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect(audit);
    struct evalset *s;
    size_t skipped = 99;
    cr_assert_eq(evalset_load_any(path, &s, &skipped, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(s->n_cases, 2);
    cr_expect_str_eq(s->cases[0].id, "r1");
    cr_expect_eq(s->cases[0].line, 1);
    cr_expect_str_eq(s->cases[1].id, "r6");
    cr_expect_str_eq(json_string_value(s->cases[1].state), "disk full");
    cr_expect_eq(s->n_questions, 2);
    cr_expect_eq(s->n_gold, 0);
    cr_expect_eq(skipped, 5);
    evalset_free(s);
    unlink(path);
}

Test(evalset, an_audit_log_without_bodies_says_why) {
    char text[2048] = "", line[1024];
    audit_line(line, sizeof line, "r1", "systemone", 200, false);
    strcat(text, line);
    strcat(text, "[1]\n");
    char *path = write_temp(text);
    struct evalset *s = (void *)1;
    char err[1024] = "";
    cr_expect_eq(evalset_load_audit(path, &s, NULL, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect_null(s);
    cr_expect(strstr(err, ":2: not an audit record"), "%s", err);
    unlink(path);
    text[0] = '\0';
    strcat(text, line);
    path = write_temp(text);
    cr_expect_eq(evalset_load_any(path, &s, NULL, err, sizeof err), TANDEM_ERR_FORMAT);
    cr_expect(strstr(err, "logs.bodies"), "%s", err);
    unlink(path);
    bool audit = true;
    cr_expect_eq(evalset_detect_audit("tests/data/eval/decisions.jsonl", &audit, err, sizeof err),
                 TANDEM_OK);
    cr_expect(!audit);
    cr_expect_eq(evalset_detect_audit("/nonexistent/x.jsonl", &audit, err, sizeof err),
                 TANDEM_ERR_IO);
}
