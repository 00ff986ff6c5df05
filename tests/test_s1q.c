/* Unit tests for the System One question contract (proto/s1q): types, the
 * problem each bad question gets, its message, and the cross-check that the
 * daemon's request check (s1_validate_request on a parsed body, as api.c
 * parses it) and the dataset loader (evalset_load on a one-line file) reach
 * the same verdict on the same hostile questions. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/utf8.h"
#include "eval/evalset.h"
#include "proto/s1q.h"
#include "serve/s1.h"

/* --- the module alone ------------------------------------------------------------------ */

Test(s1q, type_names_round_trip) {
    for (unsigned t = 0; t < S1Q_TYPE_COUNT; t++) {
        enum s1q_type back = S1Q_TYPE_COUNT;
        cr_assert(s1q_type_parse(s1q_type_name((enum s1q_type)t), &back));
        cr_expect_eq(back, t);
    }
    cr_expect_str_eq(s1q_type_name(S1Q_TYPE_NOUL), "noul");
    cr_expect_str_eq(s1q_type_name((enum s1q_type)7), "?");
    enum s1q_type kept = S1Q_TYPE_SCORE;
    cr_expect_not(s1q_type_parse("Choice", &kept));
    cr_expect_not(s1q_type_parse("", &kept));
    cr_expect_not(s1q_type_parse(NULL, &kept));
    cr_expect_eq(kept, S1Q_TYPE_SCORE, "left alone on failure");
}

Test(s1q, fields_and_kinds) {
    cr_expect(s1q_field_known("type") && s1q_field_known("instructions") &&
              s1q_field_known("criteria"));
    cr_expect_not(s1q_field_known("kind"));
    cr_expect_not(s1q_field_known(""));
    json_t *v = json_pack("[s, {}, [], i, f, b, n]", "x", 1, 2.5, 1);
    static const char *const kinds[] = {"a string", "an object", "an array", "a number",
                                        "a number", "a boolean", "null"};
    for (size_t i = 0; i < json_array_size(v); i++) {
        cr_expect_str_eq(s1q_kind(json_array_get(v, i)), kinds[i], "%zu", i);
        cr_expect_eq(s1q_is_text(json_array_get(v, i)), i < 3, "%zu", i);
    }
    cr_expect_str_eq(s1q_kind(NULL), "nothing");
    cr_expect_not(s1q_is_text(NULL));
    json_decref(v);
}

/* Checks question text q (id qid) with the API's option limit. */
static tandem_err check(const char *qid, const char *q, struct s1q_problem *p, char *err,
                        size_t errlen) {
    json_error_t je;
    json_t *jq = json_loads(q, JSON_REJECT_DUPLICATES, &je);
    cr_assert(jq, "%s: %s", q, je.text);
    tandem_err e = s1q_check(qid, jq, S1Q_MAX_CHOICE_OPTIONS, p, err, errlen);
    json_decref(jq);
    return e;
}

Test(s1q, a_valid_question_reports_its_type) {
    struct s1q_problem p;
    char err[64] = "untouched";
    cr_assert_eq(check("r", "{\"type\": \"score\", \"instructions\": [1], \"criteria\": "
                            "[\"lo\", {\"k\": 1}], \"extra\": true}", &p, err, sizeof err),
                 TANDEM_OK);
    cr_expect_eq(p.fault, S1Q_FAULT_NONE);
    cr_expect_eq(p.type, S1Q_TYPE_SCORE);
    cr_expect_str_eq(err, "untouched");
    cr_expect_eq(check("r", "{\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": "
                            "{\"only\": null}}", NULL, NULL, 0), TANDEM_OK, "one option");
}

/* One bad question: what the check finds and the message it gives. */
struct fault_case {
    const char *qid, *question;
    enum s1q_fault fault;
    const char *key;      /* expected p.key, or NULL */
    size_t count;         /* expected p.count (criteria count faults) */
    const char *message;
};

static const struct fault_case FAULTS[] = {
    {"", "{}", S1Q_FAULT_ID_EMPTY, NULL, 0,
     "questions: a question id must be a non-empty string, got \"\""},
    {"q", "[1]", S1Q_FAULT_NOT_OBJECT, NULL, 0, "questions.q: expected an object, got an array"},
    {"q", "{\"instructions\": \"x\"}", S1Q_FAULT_TYPE_MISSING, NULL, 0,
     "questions.q.type: missing; expected \"choice\", \"score\" or \"noul\""},
    {"q", "{\"type\": 1}", S1Q_FAULT_TYPE_KIND, NULL, 0,
     "questions.q.type: expected \"choice\", \"score\" or \"noul\", got a number"},
    {"q", "{\"type\": \"pick\"}", S1Q_FAULT_TYPE_UNKNOWN, NULL, 0,
     "questions.q.type: expected \"choice\", \"score\" or \"noul\", got \"pick\""},
    {"q", "{\"type\": \"noul\"}", S1Q_FAULT_INSTRUCTIONS_MISSING, NULL, 0,
     "questions.q.instructions: missing; expected a string, object or array"},
    {"q", "{\"type\": \"noul\", \"instructions\": false}", S1Q_FAULT_INSTRUCTIONS_KIND, NULL, 0,
     "questions.q.instructions: expected a string, object or array, got a boolean"},
    {"q", "{\"type\": \"choice\", \"instructions\": \"x\"}", S1Q_FAULT_CRITERIA_MISSING, NULL, 0,
     "questions.q.criteria: missing; a choice question expects an object of option -> "
     "description"},
    {"q", "{\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": null}",
     S1Q_FAULT_CRITERIA_KIND, NULL, 0,
     "questions.q.criteria: a choice question expects an object of option -> description, got "
     "null"},
    {"q", "{\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {}}",
     S1Q_FAULT_CRITERIA_FEW, NULL, 0,
     "questions.q.criteria: expected at least 1 option, got an empty object"},
    {"q", "{\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"a\": 1}}",
     S1Q_FAULT_DESCRIPTION_KIND, "a", 0,
     "questions.q.criteria.a: expected a string, object, array or null, got a number"},
    {"q", "{\"type\": \"score\", \"instructions\": \"x\"}", S1Q_FAULT_CRITERIA_MISSING, NULL, 0,
     "questions.q.criteria: missing; a score question expects an array of 2 to 10 level "
     "descriptions, lowest first"},
    {"q", "{\"type\": \"score\", \"instructions\": \"x\", \"criteria\": {}}",
     S1Q_FAULT_CRITERIA_KIND, NULL, 0,
     "questions.q.criteria: a score question expects an array of 2 to 10 level descriptions, "
     "lowest first, got an object"},
    {"q", "{\"type\": \"score\", \"instructions\": \"x\", \"criteria\": [\"a\"]}",
     S1Q_FAULT_CRITERIA_FEW, NULL, 1, "questions.q.criteria: expected 2 to 10 levels, got 1"},
    {"q", "{\"type\": \"score\", \"instructions\": \"x\", \"criteria\": "
          "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}",
     S1Q_FAULT_CRITERIA_MANY, NULL, 11, "questions.q.criteria: expected 2 to 10 levels, got 11"},
    {"q", "{\"type\": \"score\", \"instructions\": \"x\", \"criteria\": [\"a\", null]}",
     S1Q_FAULT_DESCRIPTION_KIND, NULL, 0,
     "questions.q.criteria[1]: expected a string, object or array, got null"},
    {"q", "{\"type\": \"noul\", \"instructions\": \"x\", \"criteria\": \"yes\"}",
     S1Q_FAULT_CRITERIA_KIND, NULL, 0,
     "questions.q.criteria: a noul question expects an object with keys \"true\" and/or "
     "\"false\", got a string"},
    {"q", "{\"type\": \"noul\", \"instructions\": \"x\", \"criteria\": {\"true\": 1}}",
     S1Q_FAULT_DESCRIPTION_KIND, "true", 0,
     "questions.q.criteria.true: expected a string, object, array or null, got a number"},
    {"q", "{\"type\": \"noul\", \"instructions\": \"x\", \"criteria\": {\"maybe\": null}}",
     S1Q_FAULT_CRITERIA_KEY, "maybe", 0,
     "questions.q.criteria: unexpected key \"maybe\"; a noul question takes only \"true\" and "
     "\"false\""},
};

Test(s1q, each_fault_is_found_and_named) {
    for (size_t i = 0; i < sizeof FAULTS / sizeof *FAULTS; i++) {
        const struct fault_case *c = &FAULTS[i];
        struct s1q_problem p;
        char err[256] = "";
        cr_expect_eq(check(c->qid, c->question, &p, err, sizeof err), TANDEM_ERR_FORMAT, "%zu", i);
        cr_expect_eq(p.fault, c->fault, "%zu: %s", i, c->question);
        cr_expect_str_eq(err, c->message, "%zu", i);
        cr_expect_str_eq(p.qid, c->qid, "%zu", i);
        if (c->key)
            cr_expect(p.key && !strcmp(p.key, c->key), "%zu: key %s", i, p.key ? p.key : "NULL");
        if (c->fault == S1Q_FAULT_CRITERIA_FEW || c->fault == S1Q_FAULT_CRITERIA_MANY)
            cr_expect_eq(p.count, c->count, "%zu", i);
    }
}

/* The model's option limit counts: 53 options pass the API and fail openjev. */
Test(s1q, the_option_limit_is_the_callers) {
    json_t *crit = json_object();
    char name[8];
    for (int i = 0; i < 53; i++) {
        snprintf(name, sizeof name, "o%d", i);
        json_object_set_new(crit, name, json_null());
    }
    json_t *q = json_pack("{s:s, s:s, s:o}", "type", "choice", "instructions", "x", "criteria",
                          crit);
    struct s1q_problem p;
    char err[128];
    cr_expect_eq(s1q_check("q", q, S1Q_MAX_CHOICE_OPTIONS, &p, NULL, 0), TANDEM_OK);
    cr_expect_eq(s1q_check("q", q, S1Q_OPENJEV_MAX_CHOICE_OPTIONS, &p, err, sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_expect_eq(p.fault, S1Q_FAULT_CRITERIA_MANY);
    cr_expect_eq(p.count, 53);
    cr_expect_eq(p.max, S1Q_OPENJEV_MAX_CHOICE_OPTIONS);
    cr_expect_str_eq(err, "questions.q.criteria: 53 options, this model accepts at most 52");
    json_decref(q);
}

/* A message cut to fit never ends inside a UTF-8 sequence. */
Test(s1q, a_cut_message_stays_utf8) {
    const char *q = "{\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": "
                    "{\"\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\": 1}}";
    char full[256];
    cr_assert_eq(check("\xE2\x82\xAC", q, NULL, full, sizeof full), TANDEM_ERR_FORMAT);
    for (size_t cap = 1; cap <= strlen(full) + 1; cap++) {
        char err[256];
        memset(err, 'x', sizeof err);
        cr_assert_eq(check("\xE2\x82\xAC", q, NULL, err, cap), TANDEM_ERR_FORMAT);
        cr_expect(strlen(err) < cap, "cap %zu", cap);
        cr_expect_eq(strncmp(err, full, strlen(err)), 0, "cap %zu", cap);
        cr_expect_eq(utf8_bad_line((const unsigned char *)err, strlen(err)), 0, "cap %zu", cap);
    }
}

/* --- the cross-check: the daemon and the loader agree ---------------------------------- */

/* A growing text; every append must succeed. */
static void add(struct mem_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct mem_buf *b, const char *fmt, ...) {
    char piece[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(piece, sizeof piece, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof piece);
    cr_assert_eq(mem_buf_append(b, piece, (size_t)n), TANDEM_OK);
}

/* The daemon's verdict: the body parsed as api.c parses it (duplicate keys
 * refused), then s1_validate_request() with the API's option limit. */
static bool daemon_accepts(const char *questions, char *why, size_t whylen) {
    struct mem_buf b;
    mem_buf_init(&b, 1u << 26);
    add(&b, "{\"model\": \"m\", \"state\": \"s\", \"questions\": ");
    mem_buf_append(&b, questions, strlen(questions));
    add(&b, "}");
    json_error_t je;
    json_t *body = json_loadb(b.data, b.len, JSON_REJECT_DUPLICATES, &je);
    mem_buf_deinit(&b);
    if (!body) {
        snprintf(why, whylen, "invalid JSON: %s", je.text);
        return false;
    }
    tandem_err e = s1_validate_request(body, S1Q_MAX_CHOICE_OPTIONS, why, whylen);
    json_decref(body);
    return e == TANDEM_OK;
}

/* The loader's verdict: a one-line dataset in a temporary file. */
static bool loader_accepts(const char *questions, char *why, size_t whylen) {
    char path[] = "/tmp/tandem-s1q-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    cr_assert(f);
    fprintf(f, "{\"id\": \"c\", \"state\": \"s\", \"questions\": %s}\n", questions);
    cr_assert_eq(fclose(f), 0);
    struct evalset *set = NULL;
    tandem_err e = evalset_load(path, &set, why, whylen);
    unlink(path);
    evalset_free(set);
    return e == TANDEM_OK;
}

/* The questions object {"q": <question>}. */
static char *one(const char *question) {
    struct mem_buf b;
    mem_buf_init(&b, 1u << 26);
    add(&b, "{\"q\": ");
    mem_buf_append(&b, question, strlen(question));
    add(&b, "}");
    return b.data;
}

/* A choice question of n options, or a score question of n levels. */
static char *counted(bool choice, size_t n) {
    struct mem_buf b;
    mem_buf_init(&b, 1u << 26);
    add(&b, "{\"q\": {\"type\": \"%s\", \"instructions\": \"x\", \"criteria\": %c",
        choice ? "choice" : "score", choice ? '{' : '[');
    for (size_t i = 0; i < n; i++)
        if (choice)
            add(&b, "%s\"o%zu\": null", i ? ", " : "", i);
        else
            add(&b, "%s\"level %zu\"", i ? ", " : "", i);
    add(&b, "%c}}", choice ? '}' : ']');
    return b.data;
}

/* A question whose option name (or id, when as_id) is n bytes of 'k'. */
static char *long_key(bool as_id, size_t n) {
    char *key = mem_alloc(n + 1);
    cr_assert(key);
    memset(key, 'k', n);
    key[n] = '\0';
    struct mem_buf b;
    mem_buf_init(&b, 1u << 26);
    add(&b, "{\"");
    mem_buf_append(&b, as_id ? key : "q", as_id ? n : 1);
    add(&b, "\": {\"type\": \"choice\", \"instructions\": \"x\", \"criteria\": {\"");
    mem_buf_append(&b, as_id ? "a" : key, as_id ? 1 : n);
    add(&b, "\": null}}}");
    mem_free(key);
    return b.data;
}

struct verdict_case {
    const char *name;
    char *questions; /* the "questions" object's text, owned */
    bool accepted;
};

#define Q(type_and_more) one("{\"type\": " type_and_more "}")
#define CHOICE(criteria) Q("\"choice\", \"instructions\": \"x\", \"criteria\": " criteria)
#define SCORE(criteria) Q("\"score\", \"instructions\": \"x\", \"criteria\": " criteria)
#define NOUL(more) Q("\"noul\", \"instructions\": \"x\"" more)

/* The hostile questions, with the verdict both paths must give. */
static size_t verdict_cases(struct verdict_case *c) {
    size_t n = 0;
#define CASE(name_, text_, ok_) c[n++] = (struct verdict_case){name_, text_, ok_}
    /* options: one, empty, duplicate, over-long, too many, huge */
    CASE("one option", CHOICE("{\"only\": \"the one\"}"), true);
    CASE("no option", CHOICE("{}"), false);
    CASE("an empty option name", CHOICE("{\"\": \"nameless\"}"), true);
    CASE("an empty name among others", CHOICE("{\"a\": null, \"\": null}"), true);
    CASE("duplicate option", CHOICE("{\"a\": null, \"a\": \"again\"}"), false);
    CASE("duplicate field", one("{\"type\": \"noul\", \"type\": \"choice\", \"instructions\": "
                                "\"x\"}"), false);
    CASE("duplicate question id", mem_strdup("{\"q\": {\"type\": \"noul\", \"instructions\": "
                                             "\"x\"}, \"q\": {\"type\": \"noul\", "
                                             "\"instructions\": \"y\"}}"), false);
    CASE("a 64 KiB option name", long_key(false, 64 * 1024), true);
    CASE("a 64 KiB question id", long_key(true, 64 * 1024), true);
    CASE("an empty question id", mem_strdup("{\"\": {\"type\": \"noul\", \"instructions\": "
                                            "\"x\"}}"), false);
    CASE("255 options", counted(true, 255), true);
    CASE("256 options", counted(true, 256), false);
    CASE("100000 options", counted(true, 100000), false);
    CASE("10 levels", counted(false, 10), true);
    CASE("1 level", counted(false, 1), false);
    CASE("11 levels", counted(false, 11), false);
    CASE("100000 levels", counted(false, 100000), false);
    CASE("a huge integer description", CHOICE("{\"a\": 123456789012345678901234567890}"), false);
    CASE("a huge real description", CHOICE("{\"a\": 1e999}"), false);
    /* wrong types, unknown type */
    CASE("type a number", Q("7, \"instructions\": \"x\""), false);
    CASE("type null", Q("null, \"instructions\": \"x\""), false);
    CASE("type capitalised", Q("\"Choice\", \"instructions\": \"x\", \"criteria\": {\"a\": 1}"),
         false);
    CASE("type unknown", Q("\"pick\", \"instructions\": \"x\""), false);
    CASE("type empty", Q("\"\", \"instructions\": \"x\""), false);
    CASE("question a string", one("\"choice\""), false);
    CASE("question null", one("null"), false);
    CASE("questions an array", mem_strdup("[{\"type\": \"noul\", \"instructions\": \"x\"}]"),
         false);
    CASE("choice criteria an array", CHOICE("[\"a\", \"b\"]"), false);
    CASE("choice criteria null", CHOICE("null"), false);
    CASE("score criteria an object", SCORE("{\"a\": \"b\"}"), false);
    CASE("noul criteria an array", NOUL(", \"criteria\": [\"yes\"]"), false);
    CASE("noul criteria a key of its own", NOUL(", \"criteria\": {\"maybe\": null}"), false);
    CASE("noul criteria one key", NOUL(", \"criteria\": {\"false\": \"no\"}"), true);
    /* missing fields */
    CASE("no type", one("{\"instructions\": \"x\"}"), false);
    CASE("no instructions", Q("\"noul\""), false);
    CASE("choice without criteria", Q("\"choice\", \"instructions\": \"x\""), false);
    CASE("score without criteria", Q("\"score\", \"instructions\": \"x\""), false);
    CASE("noul without criteria", NOUL(""), true);
    CASE("noul with null criteria", NOUL(", \"criteria\": null"), true);
    CASE("an empty question", one("{}"), false);
    CASE("no questions", mem_strdup("{}"), false);
    /* text that is not text */
    CASE("instructions a number", Q("\"noul\", \"instructions\": 3"), false);
    CASE("instructions a boolean", Q("\"noul\", \"instructions\": true"), false);
    CASE("instructions null", Q("\"noul\", \"instructions\": null"), false);
    CASE("instructions an object", Q("\"noul\", \"instructions\": {\"ask\": [1]}"), true);
    CASE("an option description a number", CHOICE("{\"a\": null, \"b\": 2}"), false);
    CASE("an option description a boolean", CHOICE("{\"a\": false}"), false);
    CASE("a level null", SCORE("[\"lo\", null]"), false);
    CASE("a level a number", SCORE("[\"lo\", 1]"), false);
    CASE("a noul description a number", NOUL(", \"criteria\": {\"true\": 1}"), false);
    /* invalid UTF-8 and NUL */
    CASE("a stray byte in an option", CHOICE("{\"a\xFF\": null}"), false);
    CASE("an overlong slash in the instructions", Q("\"noul\", \"instructions\": \"\xC0\xAF\""),
         false);
    CASE("a cut sequence in the id", mem_strdup("{\"q\xE2\x82\": {\"type\": \"noul\", "
                                                "\"instructions\": \"x\"}}"), false);
    CASE("a lone surrogate escape", CHOICE("{\"\\ud800\": null}"), false);
    CASE("an escaped NUL in an option", CHOICE("{\"a\\u0000b\": null}"), false);
    CASE("valid multibyte names", mem_strdup("{\"\xE8\xB7\xAF\": {\"type\": \"choice\", "
                                             "\"instructions\": \"\xC3\xA9\", \"criteria\": "
                                             "{\"\xF0\x9F\xA6\x86\": null}}}"), true);
#undef CASE
    return n;
}

Test(s1q, the_daemon_and_the_loader_agree, .timeout = 60) {
    struct verdict_case cases[80];
    size_t n = verdict_cases(cases);
    cr_assert_leq(n, sizeof cases / sizeof *cases);
    for (size_t i = 0; i < n; i++) {
        char daemon_why[512] = "", loader_why[1024] = "";
        bool daemon = daemon_accepts(cases[i].questions, daemon_why, sizeof daemon_why);
        bool loader = loader_accepts(cases[i].questions, loader_why, sizeof loader_why);
        cr_expect_eq(daemon, cases[i].accepted, "daemon, %s: %s", cases[i].name, daemon_why);
        cr_expect_eq(loader, cases[i].accepted, "loader, %s: %s", cases[i].name, loader_why);
        if (!cases[i].accepted) {
            cr_expect(*daemon_why, "daemon, %s: a refusal says why", cases[i].name);
            cr_expect(strstr(loader_why, ":1: "), "loader, %s: %s", cases[i].name, loader_why);
        }
        mem_free(cases[i].questions);
    }
}

/* The one rule that is the dataset's alone: a question's fields beyond the
 * API's are refused there (a typo must not be sent silently) and passed
 * through by the daemon (clients add their own; the engine ignores them). */
Test(s1q, extra_fields_are_the_datasets_rule) {
    char *qs = NOUL(", \"criterai\": null");
    char why[512] = "";
    cr_expect(daemon_accepts(qs, why, sizeof why), "%s", why);
    cr_expect_not(loader_accepts(qs, why, sizeof why));
    cr_expect(strstr(why, "questions.q: unknown field \"criterai\""), "%s", why);
    mem_free(qs);
}
