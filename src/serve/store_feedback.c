/* store_feedback.c: POST /v1/feedback, an outcome checked against the stored request.
 *
 * Two steps. store_feedback_parse() checks the body's shape on the loop (a 400
 * names the field). store_feedback_run() runs on the writer inside its batch:
 * it finds the latest request with the id (404: unknown, or expired by
 * retention, told apart by the `expired` table), resolves every label against
 * that request's questions and answer keys by the rules of a dataset's gold
 * (proto/s1gold: 422 with the valid questions or keys), compares each with a
 * label already kept (409 unless "replace"; the same label again is a no-op),
 * and only when every label passed writes them. So a feedback is all or
 * nothing, and its 200 follows the commit. */
#include "serve/store_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "proto/s1gold.h"
#include "serve/s1.h"

#define FEEDBACK_MAX_LABELS 256 /* questions one feedback may label */

json_t *store_feedback_parse(const char *text, size_t len, char *param, size_t paramlen,
                             char *err, size_t errlen) {
    const char *field = "body";
    json_error_t je;
    json_t *fb = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!fb) {
        snprintf(err, errlen, "body: not valid JSON: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        goto fail;
    }
    if (!json_is_object(fb)) {
        snprintf(err, errlen, "body: must be a JSON object {\"request_id\", \"gold\" or "
                              "\"outcome\"}");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(fb, key, v) {
        if (strcmp(key, "request_id") && strcmp(key, "gold") && strcmp(key, "outcome") &&
            strcmp(key, "replace")) {
            field = *key ? key : "body"; /* "" cannot name a field of its own */
            snprintf(err, errlen, "%s: unknown field \"%.64s\" (expected request_id, gold, "
                                  "outcome, replace)", field, key);
            goto fail;
        }
    }
    const char *id = json_string_value(json_object_get(fb, "request_id"));
    json_t *gold = json_object_get(fb, "gold"), *replace = json_object_get(fb, "replace");
    json_t *o = json_object_get(fb, "outcome");
    if (!id || !*id) {
        field = "request_id";
        snprintf(err, errlen, "request_id: required, a non-empty string (the x-request-id of "
                              "the answer)");
    } else if (!gold == !o) {
        field = gold ? "outcome" : "gold";
        snprintf(err, errlen, "%s", gold ? "outcome: give either gold or outcome, not both"
                                         : "gold: required (question -> answer), or outcome for "
                                           "a pipeline request");
    } else if (gold && (!json_is_object(gold) || !json_object_size(gold) ||
                        json_object_size(gold) > FEEDBACK_MAX_LABELS)) {
        field = "gold";
        snprintf(err, errlen, "gold: must be an object of 1 to %d questions, question -> answer",
                 FEEDBACK_MAX_LABELS);
    } else if (o && !json_is_string(o) && !json_is_null(o)) {
        field = "outcome";
        snprintf(err, errlen, "outcome: must be a candidate's key, or null when none was right");
    } else if (replace && !json_is_boolean(replace)) {
        field = "replace";
        snprintf(err, errlen, "replace: must be true or false");
    } else {
        return fb;
    }
fail:
    if (param && paramlen)
        snprintf(param, paramlen, "%s", field);
    json_decref(fb);
    return NULL;
}

/* --- the writer's side ---------------------------------------------------------------------- */

/* One label to write: a question of the request and its resolved gold. */
struct label {
    const char *question;
    char *gold;      /* compact JSON, keys sorted: what "the same label" compares */
    long long index; /* -1: an outcome of null (no candidate was right) */
    json_t *target;  /* array or NULL */
    enum { LABEL_NEW, LABEL_SAME, LABEL_REPLACED } fate;
};

/* The stored request feedback refers to. */
struct target_request {
    sqlite3_int64 id;
    int64_t time_ms;    /* when it was answered */
    char pipeline[128]; /* "" for a model's request */
    json_t *questions;  /* name -> {"type", "keys"} */
};

static json_t *refusal(int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static json_t *refusal(int status, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return s1_error_body(status, NULL, msg, param);
}

/* Finds the latest request with id rid. Returns 1 found, 0 not, -1 on a database error. */
static int find_request(sqlite3 *db, const char *rid, struct target_request *t) {
    sqlite3_stmt *st = store_prepare(db, "SELECT id, pipeline, time_ms FROM requests"
                                         " WHERE request_id = ? ORDER BY id DESC LIMIT 1");
    if (!st)
        return -1;
    sqlite3_bind_text(st, 1, rid, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), found = rc == SQLITE_ROW;
    if (found) {
        t->id = sqlite3_column_int64(st, 0);
        const unsigned char *p = sqlite3_column_text(st, 1);
        snprintf(t->pipeline, sizeof t->pipeline, "%s", p ? (const char *)p : "");
        t->time_ms = sqlite3_column_int64(st, 2);
    }
    sqlite3_finalize(st);
    if (found || rc == SQLITE_DONE) {
        if (found && !(t->questions = json_object()))
            return -1;
        return found;
    }
    return -1;
}

/* Loads the request's questions into t->questions. False on a database error. */
static bool load_questions(sqlite3 *db, struct target_request *t) {
    sqlite3_stmt *st = store_prepare(db, "SELECT name, type, options FROM questions WHERE request = ?");
    if (!st)
        return false;
    sqlite3_bind_int64(st, 1, t->id);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *keys = (const char *)sqlite3_column_text(st, 2);
        json_t *q = json_pack("{s:s, s:o}", "type", (const char *)sqlite3_column_text(st, 1),
                              "keys", json_loads(keys ? keys : "[]", 0, NULL));
        json_object_set_new(t->questions, (const char *)sqlite3_column_text(st, 0), q);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE;
}

static json_t *expired(const char *rid) {
    return refusal(404, "request_id", "request %s expired: it is older than store.retention "
                   "(or the store's size cap), and its record is deleted", rid);
}

/* A 404 that says whether rid expired or was never stored here. */
static json_t *not_found(sqlite3 *db, const char *rid, bool *db_error) {
    sqlite3_stmt *st = store_prepare(db, "SELECT time_ms FROM expired WHERE request_id = ?");
    if (!st) {
        *db_error = true;
        return NULL;
    }
    sqlite3_bind_text(st, 1, rid, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW)
        return expired(rid);
    *db_error = rc != SQLITE_DONE;
    return refusal(404, "request_id", "no request %s in this node's store: unknown here (a "
                   "request another node answered? send feedback to the node named by the "
                   "answer's x-tandem-node)", rid);
}

/* The request's question names, "a, b", into buf[cap]. */
static void question_list(const json_t *questions, char *buf, size_t cap) {
    size_t used = 0;
    const char *k;
    json_t *v;
    buf[0] = '\0';
    json_object_foreach((json_t *)questions, k, v) {
        int n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", k);
        if (n < 0 || (size_t)n >= cap - used)
            return;
        used += (size_t)n;
    }
}

/* Resolves one label against question q ({"type", "keys"}). NULL when it is
 * valid (l filled), else the 422 body. */
static json_t *resolve(const char *name, const json_t *q, const json_t *value, bool outcome,
                       struct label *l) {
    *l = (struct label){.question = name, .index = -1};
    json_t *keys = json_object_get(q, "keys");
    size_t n = json_array_size(keys);
    const char *opts[S1Q_MAX_CHOICE_OPTIONS + 1];
    for (size_t i = 0; i < n && i <= S1Q_MAX_CHOICE_OPTIONS; i++)
        opts[i] = json_string_value(json_array_get(keys, i));
    enum s1q_type type;
    if (!s1q_type_parse(json_string_value(json_object_get(q, "type")), &type) ||
        n > S1Q_MAX_CHOICE_OPTIONS || !n)
        return refusal(422, "request_id", "the stored question %s is unreadable", name);
    struct s1gold_question sq = {name, type, opts, n};
    if (!(l->gold = json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15))))
        return refusal(500, NULL, "out of memory");
    if (outcome && json_is_null(value))
        return NULL;
    double target[S1Q_MAX_CHOICE_OPTIONS];
    struct s1gold g;
    char where[300], msg[1024];
    snprintf(where, sizeof where, outcome ? "outcome" : "gold.%s", name);
    if (s1gold_parse(&sq, value, where, &g, target, msg, sizeof msg))
        return s1_error_body(422, NULL, msg, outcome ? "outcome" : "gold");
    l->index = (long long)g.index;
    if (g.has_target) {
        l->target = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(l->target, json_real(target[i]));
    }
    return NULL;
}

/* Compares l with the label kept for the same question: fate set; a 409 body
 * when they differ and replace is false. *db_error on a database error. */
static json_t *compare(sqlite3 *db, sqlite3_int64 request, struct label *l, bool replace,
                       bool *db_error) {
    sqlite3_stmt *st = store_prepare(db, "SELECT gold FROM labels WHERE request = ? AND question = ?");
    if (!st) {
        *db_error = true;
        return NULL;
    }
    sqlite3_bind_int64(st, 1, request);
    sqlite3_bind_text(st, 2, l->question, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    json_t *body = NULL;
    if (rc == SQLITE_ROW) {
        const char *kept = (const char *)sqlite3_column_text(st, 0);
        if (kept && !strcmp(kept, l->gold))
            l->fate = LABEL_SAME;
        else if (replace)
            l->fate = LABEL_REPLACED;
        else
            body = refusal(409, "replace", "question %s already has the label %s, and this "
                           "feedback says %s: send \"replace\": true to change it", l->question,
                           kept ? kept : "?", l->gold);
    } else {
        *db_error = rc != SQLITE_DONE;
    }
    sqlite3_finalize(st);
    return body;
}

static bool write_label(sqlite3 *db, sqlite3_int64 request, const struct label *l) {
    sqlite3_stmt *st = store_prepare(db, "INSERT OR REPLACE INTO labels(request, question, gold,"
                                         " gold_index, target, time_ms) VALUES(?,?,?,?,?,?)");
    if (!st)
        return false;
    char *target = l->target ? json_dumps(l->target, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    sqlite3_bind_int64(st, 1, request);
    sqlite3_bind_text(st, 2, l->question, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, l->gold, -1, SQLITE_STATIC);
    if (l->index >= 0)
        sqlite3_bind_int64(st, 4, l->index);
    if (target)
        sqlite3_bind_text(st, 5, target, -1, free);
    sqlite3_bind_int64(st, 6, store_now_ms());
    bool ok = sqlite3_step(st) == SQLITE_DONE;
    sqlite3_finalize(st);
    return ok;
}

/* The labels the feedback asks for, resolved; NULL when they are valid, else
 * the refusal. *n gets how many were filled (to free). */
static json_t *resolve_all(const json_t *fb, const struct target_request *t, struct label *ls,
                           size_t *n) {
    const char *rid = json_string_value(json_object_get(fb, "request_id"));
    json_t *gold = json_object_get(fb, "gold");
    char names[1024];
    question_list(t->questions, names, sizeof names);
    if (t->pipeline[0] && gold)
        return refusal(422, "gold", "request %s was answered by pipeline %s: report how it went "
                       "as \"outcome\" (a candidate's key, or null when none was right)", rid,
                       t->pipeline);
    if (!t->pipeline[0] && !gold)
        return refusal(422, "outcome", "request %s was answered by a model, not a pipeline: "
                       "label its questions with \"gold\" (%s)", rid, names);
    if (t->pipeline[0]) {
        void *it = json_object_iter(t->questions);
        if (!it)
            return refusal(422, "request_id", "request %s kept no decision to label", rid);
        *n = 1;
        return resolve(json_object_iter_key(it), json_object_iter_value(it),
                       json_object_get(fb, "outcome"), true, &ls[0]);
    }
    const char *name;
    json_t *value;
    json_object_foreach(gold, name, value) {
        json_t *q = json_object_get(t->questions, name);
        if (!q)
            return refusal(422, "gold", "gold.%s: request %s did not ask question %s (its "
                           "questions: %s)", name, rid, name, names);
        json_t *bad = resolve(name, q, value, false, &ls[(*n)++]);
        if (bad)
            return bad;
    }
    return NULL;
}

/* The 200 body: each question by what happened to its label. */
static json_t *accepted(const char *rid, const struct label *ls, size_t n) {
    json_t *lists[3] = {json_array(), json_array(), json_array()};
    for (size_t i = 0; i < n; i++)
        json_array_append_new(lists[ls[i].fate], json_string(ls[i].question));
    return json_pack("{s:s, s:o, s:o, s:o}", "request_id", rid, "labelled", lists[LABEL_NEW],
                     "unchanged", lists[LABEL_SAME], "replaced", lists[LABEL_REPLACED]);
}

bool store_feedback_run(sqlite3 *db, const char *path, const json_t *fb, int64_t retention_ms,
                        int *status, json_t **out, char *err, size_t errlen) {
    const char *rid = json_string_value(json_object_get(fb, "request_id"));
    bool replace = json_is_true(json_object_get(fb, "replace")), db_error = false;
    struct target_request t = {0};
    struct label ls[FEEDBACK_MAX_LABELS];
    size_t n = 0;
    int found = find_request(db, rid, &t);
    json_t *body = NULL;
    if (found < 0 || (found && !load_questions(db, &t)))
        db_error = true;
    else if (!found)
        body = not_found(db, rid, &db_error);
    else if (t.time_ms < store_now_ms() - retention_ms) /* past retention, not yet swept */
        body = expired(rid);
    else
        body = resolve_all(fb, &t, ls, &n);
    for (size_t i = 0; !body && !db_error && i < n; i++)
        body = compare(db, t.id, &ls[i], replace, &db_error);
    for (size_t i = 0; !body && !db_error && i < n; i++)
        if (ls[i].fate != LABEL_SAME && !write_label(db, t.id, &ls[i]))
            db_error = true;
    if (!body && !db_error)
        body = accepted(rid, ls, n);
    for (size_t i = 0; i < n; i++) {
        free(ls[i].gold);
        json_decref(ls[i].target);
    }
    json_decref(t.questions);
    if (db_error) {
        json_decref(body);
        return store_db_fail(db, path, err, errlen);
    }
    *status = (int)json_integer_value(json_object_get(json_object_get(body, "error"), "code"));
    *status = *status ? *status : 200;
    *out = body;
    return true;
}
