/* evalset.c: loading and validating JSONL evaluation datasets.
 *
 * Each line is parsed by jansson (duplicate keys refused) and then checked
 * field by field against the /v1/systemone request contract (each question
 * by proto/s1q.c, the check the daemon makes too, worded here in the loader's
 * style) and the gold rules of docs/eval-format.md, so that a bad dataset
 * fails before any request is sent, with "file:line: field: reason". The
 * state and questions are kept as jansson references and sent as written;
 * only what scoring needs (option keys, gold index, target distribution) is
 * extracted into plain arrays.
 * An audit log kept with logs.bodies loads the same way: each served
 * /v1/systemone request becomes a case (id = request_id), through the same
 * line validation. evalset_split() is the seeded calibration/held-out split,
 * a pure function of (seed, case id, share).
 * Invariant: a case in a loaded set is fully valid, and every question's
 * gold index (when has_gold) is < n_options. */
#include "eval/evalset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "proto/s1gold.h"
#include "proto/s1q.h"

/* Context of one line's validation: where, and the caller's message buffer. */
struct ctx {
    const char *file;
    size_t line;
    char *err;
    size_t errlen;
};

__attribute__((format(printf, 2, 3))) static tandem_err fail(const struct ctx *x,
                                                             const char *fmt, ...) {
    if (x->err && x->errlen) {
        int n = snprintf(x->err, x->errlen, "%s:%zu: ", x->file, x->line);
        if (n >= 0 && (size_t)n < x->errlen) {
            va_list ap;
            va_start(ap, fmt);
            tandem_verrmsg(x->err + n, x->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return TANDEM_ERR_FORMAT;
}

static tandem_err nomem(const struct ctx *x) {
    tandem_errmsg(x->err, x->errlen, "%s:%zu: out of memory", x->file, x->line);
    return TANDEM_ERR_NOMEM;
}


static void question_deinit(struct evalset_question *q) {
    if (q->options)
        for (size_t i = 0; i < q->n_options; i++)
            mem_free(q->options[i]);
    mem_free(q->options);
    mem_free(q->target);
    mem_free(q->id);
    *q = (struct evalset_question){0};
}

void evalset_case_deinit(struct evalset_case *c) {
    if (!c)
        return;
    if (c->q)
        for (size_t i = 0; i < c->n_questions; i++)
            question_deinit(&c->q[i]);
    mem_free(c->q);
    mem_free(c->id);
    json_decref(c->state);
    json_decref(c->questions);
    *c = (struct evalset_case){0};
}

static tandem_err set_options(const struct ctx *x, struct evalset_question *q, size_t n) {
    q->options = mem_calloc(n, sizeof *q->options);
    if (!q->options)
        return nomem(x);
    q->n_options = n;
    return TANDEM_OK;
}

/* The "(got ...)" of a choice or score criteria count or kind problem. */
static void criteria_got(const struct s1q_problem *p, char *got, size_t cap) {
    const char *kind = p->value ? s1gold_kind(p->value) : "nothing";
    if (p->fault == S1Q_FAULT_CRITERIA_FEW && p->type == S1Q_TYPE_CHOICE)
        snprintf(got, cap, "an empty object");
    else if (p->fault == S1Q_FAULT_CRITERIA_FEW)
        snprintf(got, cap, "%s with fewer than %u", kind, p->min);
    else if (p->fault == S1Q_FAULT_CRITERIA_MANY)
        snprintf(got, cap, "%s with too many", kind);
    else
        snprintf(got, cap, "%s", kind);
}

/* The loader's words for a criteria problem: missing, of the wrong kind, or
 * a count out of range. */
static tandem_err criteria_fault(const struct ctx *x, const struct s1q_problem *p) {
    if (p->type == S1Q_TYPE_NOUL)
        return fail(x, "questions.%s.criteria: a noul question takes null or an object "
                       "{\"true\": ..., \"false\": ...}, not %s", p->qid, s1gold_kind(p->value));
    bool choice = p->type == S1Q_TYPE_CHOICE;
    char got[64];
    criteria_got(p, got, sizeof got);
    return fail(x, "questions.%s.criteria: a %s question needs %s of %u to %u %s (got %s)",
                p->qid, s1q_type_name(p->type), choice ? "an object" : "an array",
                choice ? S1Q_MIN_CHOICE_OPTIONS : S1Q_MIN_SCORE_LEVELS,
                choice ? S1Q_MAX_CHOICE_OPTIONS : S1Q_MAX_SCORE_LEVELS,
                choice ? "options" : "levels, lowest first", got);
}

/* The loader's words for the problem s1q_check() found in a question. */
static tandem_err question_fault(const struct ctx *x, const struct s1q_problem *p) {
    const char *id = p->qid;
    switch (p->fault) {
    case S1Q_FAULT_NONE: return TANDEM_OK;
    case S1Q_FAULT_ID_EMPTY: return fail(x, "questions: a question id must not be empty");
    case S1Q_FAULT_NOT_OBJECT:
        return fail(x, "questions.%s: must be an object, not %s", id, s1gold_kind(p->value));
    case S1Q_FAULT_TYPE_MISSING:
        return fail(x, "questions.%s: missing \"type\" (choice, score or noul)", id);
    case S1Q_FAULT_TYPE_KIND:
    case S1Q_FAULT_TYPE_UNKNOWN:
        return fail(x, "questions.%s.type: must be \"choice\", \"score\" or \"noul\"", id);
    case S1Q_FAULT_INSTRUCTIONS_MISSING:
        return fail(x, "questions.%s: missing \"instructions\"", id);
    case S1Q_FAULT_INSTRUCTIONS_KIND:
        return fail(x, "questions.%s.instructions: must be a string, object or array, not %s",
                    id, s1gold_kind(p->value));
    case S1Q_FAULT_CRITERIA_MISSING:
    case S1Q_FAULT_CRITERIA_KIND:
    case S1Q_FAULT_CRITERIA_FEW:
    case S1Q_FAULT_CRITERIA_MANY: return criteria_fault(x, p);
    case S1Q_FAULT_CRITERIA_KEY:
        return fail(x, "questions.%s.criteria: unknown key \"%s\" (a noul question takes only "
                       "\"true\" and \"false\")", id, p->key);
    case S1Q_FAULT_DESCRIPTION_KIND:
        if (p->type == S1Q_TYPE_SCORE)
            return fail(x, "questions.%s.criteria[%zu]: a level must be a string, object or "
                           "array, not %s", id, p->index, s1gold_kind(p->value));
        return fail(x, "questions.%s.criteria.%s: must be a string, object, array or null, "
                       "not %s", id, p->key, s1gold_kind(p->value));
    }
    return TANDEM_ERR_INVAL;
}

/* Fills q's answer keys from the criteria of a valid question of q->type:
 * the choice options in order, the score levels "0".."n-1", or noul's. */
static tandem_err set_answer_keys(const struct ctx *x, struct evalset_question *q, json_t *crit) {
    size_t n = q->type == S1Q_TYPE_CHOICE  ? json_object_size(crit)
               : q->type == S1Q_TYPE_SCORE ? json_array_size(crit)
                                           : 2;
    tandem_err e = set_options(x, q, n);
    if (e)
        return e;
    size_t i = 0;
    const char *key;
    json_t *v;
    char level[24]; /* any size_t */
    switch (q->type) {
    case S1Q_TYPE_CHOICE:
        json_object_foreach(crit, key, v) {
            if (!(q->options[i++] = mem_strdup(key)))
                return nomem(x);
        }
        break;
    case S1Q_TYPE_SCORE:
        for (; i < n; i++) {
            snprintf(level, sizeof level, "%zu", i);
            if (!(q->options[i] = mem_strdup(level)))
                return nomem(x);
        }
        break;
    case S1Q_TYPE_NOUL:
        if (!(q->options[0] = mem_strdup(S1Q_NOUL_TRUE)) ||
            !(q->options[1] = mem_strdup(S1Q_NOUL_FALSE)))
            return nomem(x);
        break;
    }
    return TANDEM_OK;
}

/* Checks questions.<qid> and fills q's id, type and options. The question is
 * the API's (s1q_check()), with one rule of the dataset format on top: no
 * fields beyond the API's, so that a typo is not sent silently. */
static tandem_err parse_question(const struct ctx *x, const char *qid, json_t *jq,
                                 struct evalset_question *q) {
    const char *key;
    json_t *v;
    if (*qid && json_is_object(jq))
        json_object_foreach(jq, key, v) {
            if (!s1q_field_known(key))
                return fail(x, "questions.%s: unknown field \"%s\" (expected type, instructions, "
                               "criteria)", qid, key);
        }
    struct s1q_problem p;
    if (s1q_check(qid, jq, S1Q_MAX_CHOICE_OPTIONS, &p, NULL, 0))
        return question_fault(x, &p);
    if (!(q->id = mem_strdup(qid)))
        return nomem(x);
    q->type = p.type;
    return set_answer_keys(x, q, json_object_get(jq, "criteria"));
}

/* Reads question q's gold value g (plain or with a target) at where. */
static tandem_err parse_gold_value(const struct ctx *x, struct evalset_question *q,
                                   const char *where, const json_t *g) {
    struct s1gold_question sq = {q->id, q->type, (const char *const *)q->options, q->n_options};
    if (!(q->target = mem_calloc(q->n_options, sizeof *q->target)))
        return nomem(x);
    struct s1gold gold;
    char msg[1024];
    if (s1gold_parse(&sq, g, where, &gold, q->target, msg, sizeof msg))
        return fail(x, "%s", msg);
    q->gold = gold.index;
    if (!gold.has_target) {
        mem_free(q->target);
        q->target = NULL;
    }
    return TANDEM_OK;
}

static tandem_err parse_gold(const struct ctx *x, struct evalset_case *c, json_t *gold) {
    if (!json_is_object(gold))
        return fail(x, "gold: must be an object, question id -> answer, not %s",
                    s1gold_kind(gold));
    const char *qid;
    json_t *g;
    json_object_foreach(gold, qid, g) {
        struct evalset_question *q = NULL;
        for (size_t i = 0; i < c->n_questions && !q; i++)
            if (!strcmp(c->q[i].id, qid))
                q = &c->q[i];
        if (!q)
            return fail(x, "gold.%s: no question \"%s\" in questions", qid, qid);
        char where[300];
        snprintf(where, sizeof where, "gold.%s", qid);
        tandem_err e = parse_gold_value(x, q, where, g);
        if (e)
            return e;
        q->has_gold = true;
    }
    return TANDEM_OK;
}

static tandem_err parse_case(const struct ctx *x, json_t *doc, struct evalset_case *c) {
    if (!json_is_object(doc))
        return fail(x, "a case must be a JSON object, not %s", s1gold_kind(doc));
    const char *key;
    json_t *v;
    json_object_foreach(doc, key, v) {
        if (strcmp(key, "id") && strcmp(key, "state") && strcmp(key, "questions") &&
            strcmp(key, "gold") && strcmp(key, "meta"))
            return fail(x, "unknown field \"%s\" (expected id, state, questions, gold, meta)",
                        key);
    }
    json_t *id = json_object_get(doc, "id");
    if (!id)
        return fail(x, "missing \"id\"");
    if (!json_is_string(id) || !*json_string_value(id))
        return fail(x, "id: must be a non-empty string, not %s",
                    json_is_string(id) ? "an empty one" : s1gold_kind(id));
    if (!(c->id = mem_strdup(json_string_value(id))))
        return nomem(x);
    json_t *state = json_object_get(doc, "state");
    if (!state)
        return fail(x, "missing \"state\"");
    if (!s1q_is_text(state))
        return fail(x, "state: must be a string, object or array, not %s", s1gold_kind(state));
    json_t *qs = json_object_get(doc, "questions");
    if (!qs)
        return fail(x, "missing \"questions\"");
    if (!json_is_object(qs) || json_object_size(qs) == 0)
        return fail(x, "questions: must be a non-empty object, id -> question, not %s",
                    json_is_object(qs) ? "an empty one" : s1gold_kind(qs));
    size_t n = json_object_size(qs);
    if (n > EVALSET_MAX_QUESTIONS)
        return fail(x, "questions: %zu questions, more than the limit of %u", n,
                    EVALSET_MAX_QUESTIONS);
    if (!(c->q = mem_calloc(n, sizeof *c->q)))
        return nomem(x);
    c->n_questions = n;
    size_t i = 0;
    json_object_foreach(qs, key, v) {
        tandem_err e = parse_question(x, key, v, &c->q[i++]);
        if (e)
            return e;
    }
    json_t *gold = json_object_get(doc, "gold");
    if (gold) {
        tandem_err e = parse_gold(x, c, gold);
        if (e)
            return e;
    }
    c->state = json_incref(state);
    c->questions = json_incref(qs);
    c->line = x->line;
    return TANDEM_OK;
}

tandem_err evalset_parse_line(const char *file, size_t line, const char *text, size_t len,
                              struct evalset_case *out, char *err, size_t errlen) {
    struct ctx x = {file, line, err, errlen};
    *out = (struct evalset_case){0};
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return fail(&x, "invalid JSON at column %d: %s", je.column, je.text);
    tandem_err e = parse_case(&x, doc, out);
    json_decref(doc);
    if (e)
        evalset_case_deinit(out);
    return e;
}

void evalset_free(struct evalset *s) {
    if (!s)
        return;
    if (s->cases)
        for (size_t i = 0; i < s->n_cases; i++)
            evalset_case_deinit(&s->cases[i]);
    mem_free(s->cases);
    mem_free(s->path);
    mem_free(s);
}

/* Collects the per-line messages of one load. */
struct report {
    struct mem_buf msgs;
    size_t n_bad;
};

static void report_add(struct report *r, const char *msg) {
    if (r->n_bad++ >= EVALSET_MAX_REPORTED_ERRORS)
        return;
    if (r->msgs.len)
        mem_buf_append(&r->msgs, "\n", 1);
    mem_buf_append(&r->msgs, msg, strlen(msg));
}

/* Reads one line (without its newline) into line; *eof set at end of file. */
static tandem_err read_line(FILE *f, struct mem_buf *line, bool *eof, bool *too_long) {
    char chunk[8192];
    line->len = 0;
    if (line->data)
        line->data[0] = '\0';
    *eof = false;
    *too_long = false;
    for (;;) {
        if (!fgets(chunk, sizeof chunk, f)) {
            if (ferror(f))
                return TANDEM_ERR_IO;
            *eof = line->len == 0 && !*too_long;
            return TANDEM_OK;
        }
        size_t n = strlen(chunk);
        bool nl = n && chunk[n - 1] == '\n';
        if (nl)
            n--;
        if (!*too_long) {
            tandem_err e = mem_buf_append(line, chunk, n);
            if (e == TANDEM_ERR_TOOBIG)
                *too_long = true;
            else if (e)
                return e;
        }
        if (nl)
            return TANDEM_OK;
    }
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

struct id_ref {
    const char *id;
    size_t line;
    size_t index; /* into the set's cases */
};

static int id_ref_cmp(const void *a, const void *b) {
    const struct id_ref *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

/* Reports every case whose id was used on an earlier line. */
static tandem_err check_unique_ids(const struct evalset *s, struct report *r) {
    if (s->n_cases < 2)
        return TANDEM_OK;
    struct id_ref *refs = mem_alloc_array(s->n_cases, sizeof *refs);
    if (!refs)
        return TANDEM_ERR_NOMEM;
    for (size_t i = 0; i < s->n_cases; i++)
        refs[i] = (struct id_ref){s->cases[i].id, s->cases[i].line, i};
    qsort(refs, s->n_cases, sizeof *refs, id_ref_cmp);
    size_t first = 0;
    for (size_t i = 1; i < s->n_cases; i++) {
        if (strcmp(refs[i].id, refs[first].id)) {
            first = i;
            continue;
        }
        char msg[512];
        snprintf(msg, sizeof msg, "%s:%zu: id: \"%s\" is already the id of line %zu", s->path,
                 refs[i].line, refs[i].id, refs[first].line);
        report_add(r, msg);
    }
    mem_free(refs);
    return TANDEM_OK;
}

/* How one line becomes a case: TANDEM_OK with the case in *c, TANDEM_ERR_FORMAT
 * with msg saying why, TANDEM_ERR_NOTFOUND for a line that holds no case (an
 * audit line skipped), or TANDEM_ERR_NOMEM. evalset_parse_line is one. */
typedef tandem_err (*line_fn)(const char *file, size_t line, const char *text, size_t len,
                              struct evalset_case *c, char *msg, size_t msglen);

/* What one load did besides its cases. */
struct load_state {
    struct report r;
    size_t lineno;
    size_t skipped; /* lines line_fn said hold no case */
};

/* Adds the case of one line (already read into text[len]) to s through parse. */
static tandem_err load_line(struct evalset *s, size_t *cap, line_fn parse, const char *text,
                            size_t len, struct load_state *st, char *err, size_t errlen) {
    if (s->n_cases >= EVALSET_MAX_CASES) {
        tandem_errmsg(err, errlen, "%s:%zu: more than %u cases", s->path, st->lineno,
                      EVALSET_MAX_CASES);
        return TANDEM_ERR_TOOBIG;
    }
    tandem_err e = mem_array_grow((void **)&s->cases, cap, s->n_cases + 1, sizeof *s->cases,
                                  SIZE_MAX);
    if (e)
        return e;
    struct evalset_case *c = &s->cases[s->n_cases];
    char msg[1024];
    e = parse(s->path, st->lineno, text, len, c, msg, sizeof msg);
    if (e == TANDEM_ERR_FORMAT)
        report_add(&st->r, msg);
    if (e == TANDEM_ERR_NOTFOUND)
        st->skipped++;
    if (e == TANDEM_ERR_FORMAT || e == TANDEM_ERR_NOTFOUND)
        return TANDEM_OK;
    if (e)
        return e;
    s->n_cases++;
    s->n_questions += c->n_questions;
    for (size_t i = 0; i < c->n_questions; i++)
        s->n_gold += c->q[i].has_gold;
    return TANDEM_OK;
}

/* Reads every line of f into s through parse, until the end, an error, or
 * too many bad lines. */
static tandem_err load_lines(FILE *f, struct evalset *s, line_fn parse, struct load_state *st,
                             char *err, size_t errlen) {
    struct mem_buf line;
    mem_buf_init(&line, EVALSET_MAX_LINE);
    size_t cap = 0;
    tandem_err e = TANDEM_OK;
    while (!e && st->r.n_bad < EVALSET_MAX_REPORTED_ERRORS) {
        bool eof, too_long;
        if ((e = read_line(f, &line, &eof, &too_long)) || eof)
            break;
        st->lineno++;
        if (too_long) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s:%zu: line longer than %u bytes", s->path, st->lineno,
                     EVALSET_MAX_LINE);
            report_add(&st->r, msg);
        } else if (!blank(line.data ? line.data : "", line.len)) {
            e = load_line(s, &cap, parse, line.data, line.len, st, err, errlen);
        }
    }
    mem_buf_deinit(&line);
    return e;
}

/* Turns a load's outcome into its return code and message. */
static tandem_err load_finish(const char *path, tandem_err e, struct load_state *st, char *err,
                              size_t errlen) {
    if (!e && st->r.n_bad) {
        if (st->r.n_bad >= EVALSET_MAX_REPORTED_ERRORS) {
            char more[96];
            int n = snprintf(more, sizeof more, "\n%s: stopped after %d bad lines", path,
                             EVALSET_MAX_REPORTED_ERRORS);
            mem_buf_append(&st->r.msgs, more, n > 0 ? strlen(more) : 0);
        }
        tandem_errmsg(err, errlen, "%s", st->r.msgs.data ? st->r.msgs.data : "");
        return TANDEM_ERR_FORMAT;
    }
    if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(err, errlen, "%s: out of memory", path);
    else if (e == TANDEM_ERR_IO)
        tandem_errmsg(err, errlen, "%s:%zu: read error", path, st->lineno);
    return e;
}

/* Opens path and a new set for it; *f and *out are set on success. */
static tandem_err load_open(const char *path, FILE **f, struct evalset **out, char *err,
                            size_t errlen) {
    *f = fopen(path, "r");
    if (!*f) {
        tandem_errmsg(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    struct evalset *s = mem_calloc(1, sizeof *s);
    if (!s || !(s->path = mem_strdup(path))) {
        mem_free(s);
        fclose(*f);
        tandem_errmsg(err, errlen, "%s: out of memory", path);
        return TANDEM_ERR_NOMEM;
    }
    *out = s;
    return TANDEM_OK;
}

/* What a format checks once its lines are read (load_set calls it only when
 * reading succeeded): messages go to st->r, other failures are returned. */
typedef tandem_err (*set_check_fn)(const char *path, struct evalset *s, struct load_state *st);

/* The body of both loaders: opens path, parses its lines with parse, runs
 * check, and reports as evalset_load() does; *skipped (optional) gets the
 * lines that held no case. */
static tandem_err load_set(const char *path, line_fn parse, set_check_fn check,
                           struct evalset **out, size_t *skipped, char *err, size_t errlen) {
    *out = NULL;
    FILE *f;
    struct evalset *s;
    tandem_err e = load_open(path, &f, &s, err, errlen);
    if (e)
        return e;
    struct load_state st = {0};
    mem_buf_init(&st.r.msgs, 64 * 1024);
    e = load_lines(f, s, parse, &st, err, errlen);
    fclose(f);
    if (!e)
        e = check(path, s, &st);
    e = load_finish(path, e, &st, err, errlen);
    mem_buf_deinit(&st.r.msgs);
    if (e) {
        evalset_free(s);
        return e;
    }
    if (skipped)
        *skipped = st.skipped;
    *out = s;
    return TANDEM_OK;
}

/* An eval set has at least one case, and unique ids. */
static tandem_err check_eval_set(const char *path, struct evalset *s, struct load_state *st) {
    if (st->r.n_bad == 0 && s->n_cases == 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: no cases (the file is empty or only blank lines)", path);
        report_add(&st->r, msg);
    }
    return st->r.n_bad < EVALSET_MAX_REPORTED_ERRORS ? check_unique_ids(s, &st->r) : TANDEM_OK;
}

tandem_err evalset_load(const char *path, struct evalset **out, char *err, size_t errlen) {
    return load_set(path, evalset_parse_line, check_eval_set, out, NULL, err, errlen);
}

/* --- audit logs ------------------------------------------------------------------ */

/* One audit line into a case (a line_fn): TANDEM_ERR_NOTFOUND for lines that
 * hold no usable /v1/systemone request. */
static tandem_err audit_parse_line(const char *file, size_t line, const char *text, size_t len,
                                   struct evalset_case *c, char *msg, size_t msglen) {
    json_error_t je;
    json_t *rec = json_loadb(text, len, 0, &je);
    if (!json_is_object(rec)) {
        snprintf(msg, msglen, "%s:%zu: not an audit record (a JSON object): %s", file, line,
                 rec ? "another JSON value" : je.text);
        json_decref(rec);
        return TANDEM_ERR_FORMAT;
    }
    const char *route = json_string_value(json_object_get(rec, "route"));
    const char *id = json_string_value(json_object_get(rec, "request_id"));
    const char *body = json_string_value(json_object_get(rec, "request_body"));
    json_int_t status = json_integer_value(json_object_get(rec, "status"));
    bool served = route && !strcmp(route, "systemone") && id && *id && body && status >= 200 &&
                  status < 300;
    json_t *req = served ? json_loads(body, 0, NULL) : NULL, *as_case = NULL;
    char *dumped = NULL;
    tandem_err e = TANDEM_ERR_NOTFOUND;
    if (json_is_object(req)) {
        as_case = json_pack("{s:s, s:O?, s:O?}", "id", id, "state", json_object_get(req, "state"),
                            "questions", json_object_get(req, "questions"));
        dumped = as_case ? json_dumps(as_case, JSON_COMPACT) : NULL;
        e = dumped ? evalset_parse_line(file, line, dumped, strlen(dumped), c, msg, msglen)
                   : TANDEM_ERR_NOMEM;
        if (e == TANDEM_ERR_FORMAT)
            e = TANDEM_ERR_NOTFOUND; /* served, but not a case this loader can keep */
    }
    free(dumped);
    json_decref(as_case);
    json_decref(req);
    json_decref(rec);
    return e;
}

/* Drops every case whose id an earlier line used (a retried request); adds
 * them to *skipped. */
static tandem_err drop_repeated_ids(struct evalset *s, size_t *skipped) {
    if (s->n_cases < 2)
        return TANDEM_OK;
    struct id_ref *refs = mem_alloc_array(s->n_cases, sizeof *refs);
    bool *drop = mem_calloc(s->n_cases, sizeof *drop);
    if (!refs || !drop) {
        mem_free(refs);
        mem_free(drop);
        return TANDEM_ERR_NOMEM;
    }
    for (size_t i = 0; i < s->n_cases; i++)
        refs[i] = (struct id_ref){s->cases[i].id, s->cases[i].line, i};
    qsort(refs, s->n_cases, sizeof *refs, id_ref_cmp);
    for (size_t i = 1; i < s->n_cases; i++)
        drop[refs[i].index] = !strcmp(refs[i].id, refs[i - 1].id);
    size_t kept = 0;
    for (size_t i = 0; i < s->n_cases; i++) {
        struct evalset_case *c = &s->cases[i];
        if (!drop[i]) {
            s->cases[kept++] = *c;
            continue;
        }
        s->n_questions -= c->n_questions;
        evalset_case_deinit(c);
        ++*skipped;
    }
    s->n_cases = kept;
    mem_free(refs);
    mem_free(drop);
    return TANDEM_OK;
}

/* An audit log's retried requests count once, and it holds at least one case. */
static tandem_err check_audit(const char *path, struct evalset *s, struct load_state *st) {
    tandem_err e = st->r.n_bad ? TANDEM_OK : drop_repeated_ids(s, &st->skipped);
    if (!e && st->r.n_bad == 0 && s->n_cases == 0) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "%s: no /v1/systemone request with its body among %zu line(s) (bodies are "
                 "logged only with logs.bodies: true)", path, st->lineno);
        report_add(&st->r, msg);
    }
    return e;
}

tandem_err evalset_load_audit(const char *path, struct evalset **out, size_t *skipped, char *err,
                              size_t errlen) {
    return load_set(path, audit_parse_line, check_audit, out, skipped, err, errlen);
}

/* --- sets written from stored traffic ------------------------------------------- */

/* One line of a written set (a line_fn): a line that is not a valid case is
 * skipped (TANDEM_ERR_NOTFOUND), not an error. */
static tandem_err lenient_parse_line(const char *file, size_t line, const char *text, size_t len,
                                     struct evalset_case *c, char *msg, size_t msglen) {
    tandem_err e = evalset_parse_line(file, line, text, len, c, msg, msglen);
    return e == TANDEM_ERR_FORMAT ? TANDEM_ERR_NOTFOUND : e;
}

/* A written set holds at least one case; a repeated id counts once. */
static tandem_err check_written(const char *path, struct evalset *s, struct load_state *st) {
    tandem_err e = drop_repeated_ids(s, &st->skipped);
    if (!e && s->n_cases == 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: no valid case among %zu line(s)", path, st->lineno);
        report_add(&st->r, msg);
    }
    return e;
}

tandem_err evalset_load_lenient(const char *path, struct evalset **out, size_t *skipped,
                                char *err, size_t errlen) {
    return load_set(path, lenient_parse_line, check_written, out, skipped, err, errlen);
}

tandem_err evalset_detect_audit(const char *path, bool *is_audit, char *err, size_t errlen) {
    *is_audit = false;
    FILE *f = fopen(path, "r");
    if (!f) {
        tandem_errmsg(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return TANDEM_ERR_IO;
    }
    struct mem_buf line;
    mem_buf_init(&line, EVALSET_MAX_LINE);
    bool eof = false, too_long = false;
    tandem_err e = TANDEM_OK;
    while (!(e = read_line(f, &line, &eof, &too_long)) && !eof && !too_long &&
           blank(line.data ? line.data : "", line.len)) {
    }
    fclose(f);
    if (e) {
        tandem_errmsg(err, errlen, "%s: read error", path);
    } else if (!eof && !too_long) {
        json_t *first = json_loadb(line.data, line.len, 0, NULL);
        *is_audit = json_is_object(first) && json_object_get(first, "request_id") &&
                    json_object_get(first, "route");
        json_decref(first);
    }
    mem_buf_deinit(&line);
    return e;
}

tandem_err evalset_load_any(const char *path, struct evalset **out, size_t *skipped, char *err,
                            size_t errlen) {
    bool audit;
    *out = NULL;
    if (skipped)
        *skipped = 0;
    tandem_err e = evalset_detect_audit(path, &audit, err, errlen);
    if (e)
        return e;
    return audit ? evalset_load_audit(path, out, skipped, err, errlen)
                 : evalset_load(path, out, err, errlen);
}

/* --- the calibration split ------------------------------------------------------- */

/* 64-bit FNV-1a of the NUL-terminated s. */
static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

bool evalset_split_case(const char *id, uint64_t seed, double calibration_share) {
    if (!(calibration_share > 0))
        return false;
    if (calibration_share >= 1)
        return true;
    uint64_t u = rng_mix64(fnv1a64(id) + rng_mix64(seed));
    return (double)(u >> 11) * 0x1.0p-53 < calibration_share;
}

size_t evalset_split(const struct evalset *s, uint64_t seed, double calibration_share,
                     bool *calibration) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_cases; i++)
        n += calibration[i] = evalset_split_case(s->cases[i].id, seed, calibration_share);
    return n;
}
