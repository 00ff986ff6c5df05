/* store_quality.c: GET /v1/quality, the labelled requests of a window scored.
 *
 * One query per report part, each ordered so that a group's rows are
 * adjacent: per model x question, the labelled questions of requests answered
 * on a model; per pipeline, its labelled outcomes. Every answer is scored by
 * proto/metrics' metrics_summary_add(), the call `tandem eval` makes, on the
 * probabilities the client received (kept in the store as they were sent), so
 * `tandem eval --data store:WINDOW` on the same model files reports the same
 * numbers. A pipeline's outcome also scores its decider's distribution over
 * the candidates, and counts the verdicts: accepted and right (precision),
 * rejected although the decider's first choice was right, escalated. */
#include "serve/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "proto/metrics.h"

#define QUALITY_BUCKETS 24 /* points of "over_time" across the window */

static json_t *number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

bool store_row_answer(const char *options, const char *probabilities, json_t **keys, double **p,
                      size_t *n) {
    *keys = json_loads(options ? options : "", 0, NULL);
    json_t *probs = json_loads(probabilities ? probabilities : "", 0, NULL);
    *n = json_array_size(*keys);
    *p = NULL;
    bool ok = *n && json_array_size(probs) == *n && (*p = mem_calloc(*n, sizeof **p));
    for (size_t i = 0; ok && i < *n; i++) {
        json_t *v = json_array_get(probs, i);
        ok = json_is_number(v);
        (*p)[i] = json_number_value(v);
    }
    json_decref(probs);
    if (!ok) {
        json_decref(*keys);
        mem_free(*p);
        *keys = NULL;
        *p = NULL;
    }
    return ok;
}

/* One group's running scores: the summary and its accuracy over time. */
struct group {
    struct metrics_summary sum;
    uint64_t bucket_n[QUALITY_BUCKETS], bucket_right[QUALITY_BUCKETS];
};

struct window {
    int64_t from_ms, to_ms;
};

static size_t bucket_of(const struct window *w, int64_t t) {
    double span = (double)(w->to_ms - w->from_ms);
    double x = span > 0 ? (double)(t - w->from_ms) / span * QUALITY_BUCKETS : 0;
    return x < 0 ? 0 : x >= QUALITY_BUCKETS ? QUALITY_BUCKETS - 1 : (size_t)x;
}

/* Scores one labelled answer p[n] (gold index, optional target). */
static void group_add(struct group *g, const struct window *w, int64_t t, const double *p,
                      const double *target, size_t n, size_t gold, bool is_score) {
    metrics_summary_add(&g->sum, p, target, n, gold, is_score, 0);
    size_t b = bucket_of(w, t);
    g->bucket_n[b]++;
    g->bucket_right[b] += metrics_top(p, n) == gold;
}

static json_t *reliability(const struct metrics_calib *c) {
    json_t *bins = json_array();
    for (size_t b = 0; b < METRICS_ECE_BINS; b++) {
        double n = (double)c->n[b];
        json_array_append_new(
            bins, json_pack("{s:f, s:f, s:I, s:o, s:o}", "lo", (double)b / METRICS_ECE_BINS, "hi",
                            (double)(b + 1) / METRICS_ECE_BINS, "count", (json_int_t)c->n[b],
                            "confidence", number(c->n[b] ? c->conf_sum[b] / n : NAN),
                            "accuracy", number(c->n[b] ? c->correct[b] / n : NAN)));
    }
    return bins;
}

/* The group's numbers as JSON members added to o. */
static void group_json(json_t *o, const struct group *g, const struct window *w) {
    struct metrics_result r = metrics_summary_result(&g->sum);
    json_t *times = json_array();
    int64_t step = (w->to_ms - w->from_ms) / QUALITY_BUCKETS;
    for (size_t b = 0; b < QUALITY_BUCKETS; b++)
        json_array_append_new(
            times, json_pack("{s:I, s:I, s:o}", "from_ms", (json_int_t)(w->from_ms + (int64_t)b * step),
                             "count", (json_int_t)g->bucket_n[b], "accuracy",
                             number(g->bucket_n[b] ? (double)g->bucket_right[b] / (double)g->bucket_n[b]
                                                   : NAN)));
    json_object_set_new(o, "count", json_integer((json_int_t)g->sum.n));
    json_object_set_new(o, "accuracy", number(r.accuracy));
    json_object_set_new(o, "nll", number(r.nll));
    json_object_set_new(o, "ece", number(r.ece));
    json_object_set_new(o, "brier", number(r.brier));
    json_object_set_new(o, "mean_confidence", number(r.mean_conf));
    json_object_set_new(o, "reliability", reliability(&g->sum.calib));
    json_object_set_new(o, "over_time", times);
}

/* A labelled row's answer: p over its keys, its gold index and target. False
 * when the row is unreadable (skipped). */
struct scored {
    json_t *keys;
    double *p, *target;
    size_t n;
};

static bool read_scored(sqlite3_stmt *st, int options, int probs, int target, struct scored *a) {
    *a = (struct scored){0};
    if (!store_row_answer((const char *)sqlite3_column_text(st, options),
                          (const char *)sqlite3_column_text(st, probs), &a->keys, &a->p, &a->n))
        return false;
    const char *t = (const char *)sqlite3_column_text(st, target);
    json_t *tv = t ? json_loads(t, 0, NULL) : NULL;
    if (tv && json_array_size(tv) == a->n && (a->target = mem_calloc(a->n, sizeof *a->target)))
        for (size_t i = 0; i < a->n; i++)
            a->target[i] = json_number_value(json_array_get(tv, i));
    json_decref(tv);
    return true;
}

static void scored_deinit(struct scored *a) {
    json_decref(a->keys);
    mem_free(a->p);
    mem_free(a->target);
}

static bool same_text(sqlite3_stmt *st, int col, const char *prev) {
    const char *t = (const char *)sqlite3_column_text(st, col);
    return prev && t && !strcmp(prev, t);
}

/* Starts a walk over st's rows (prepared from a query whose one parameter is
 * the window's start) with a fresh group in *g (caller frees). False, with st
 * finalized, when either is missing. */
static bool start_walk(sqlite3_stmt *st, const struct window *w, struct group **g) {
    if (!st || !(*g = mem_calloc(1, sizeof **g))) {
        sqlite3_finalize(st);
        return false;
    }
    sqlite3_bind_int64(st, 1, w->from_ms);
    return true;
}

/* "models": per model x question x type. */
static json_t *model_groups(sqlite3 *db, const struct window *w, bool *ok) {
    sqlite3_stmt *st = store_prepare(
        db, "SELECT r.model, q.name, q.type, q.options, q.probabilities, l.gold_index, l.target,"
            " r.time_ms FROM labels l JOIN requests r ON r.id = l.request JOIN questions q"
            " ON q.request = l.request AND q.name = l.question WHERE r.time_ms >= ?"
            " AND r.pipeline IS NULL AND l.gold_index IS NOT NULL"
            " ORDER BY r.model, q.name, q.type, r.time_ms");
    json_t *out = json_array(), *cur = NULL;
    struct group *g = NULL;
    if (!(*ok = start_walk(st, w, &g)))
        return out;
    char model[256] = "", name[256] = "", type[16] = "";
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!cur || !same_text(st, 0, model) || !same_text(st, 1, name) || !same_text(st, 2, type)) {
            if (cur)
                group_json(cur, g, w);
            memset(g, 0, sizeof *g);
            metrics_summary_init(&g->sum);
            snprintf(model, sizeof model, "%s", sqlite3_column_text(st, 0));
            snprintf(name, sizeof name, "%s", sqlite3_column_text(st, 1));
            snprintf(type, sizeof type, "%s", sqlite3_column_text(st, 2));
            cur = json_pack("{s:s, s:s, s:s}", "model", model, "question", name, "type", type);
            json_array_append_new(out, cur);
        }
        struct scored a;
        size_t gold = (size_t)sqlite3_column_int64(st, 5);
        if (read_scored(st, 3, 4, 6, &a) && gold < a.n)
            group_add(g, w, sqlite3_column_int64(st, 7), a.p, a.target, a.n, gold,
                      !strcmp(type, "score"));
        scored_deinit(&a);
    }
    if (cur)
        group_json(cur, g, w);
    *ok = rc == SQLITE_DONE;
    sqlite3_finalize(st);
    mem_free(g);
    return out;
}

/* One pipeline's verdict counts. */
struct verdicts {
    uint64_t count, accepted, accepted_right, rejected, rejected_would_be_right, escalated,
        escalated_right;
};

static json_t *ratio(uint64_t a, uint64_t b) { return number(b ? (double)a / (double)b : NAN); }

static void pipeline_json(json_t *o, const struct verdicts *v, const struct group *g,
                          const struct window *w, const char *model, const char *question) {
    json_t *decide = json_pack("{s:s, s:s}", "model", model, "question", question);
    group_json(decide, g, w);
    json_t *counts = json_pack(
        "{s:I, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:o}", "count", (json_int_t)v->count,
        "accepted", (json_int_t)v->accepted, "accepted_right", (json_int_t)v->accepted_right,
        "precision", ratio(v->accepted_right, v->accepted), "rejected", (json_int_t)v->rejected,
        "rejected_would_be_right", (json_int_t)v->rejected_would_be_right, "escalated",
        (json_int_t)v->escalated, "escalated_right", (json_int_t)v->escalated_right,
        "escalated_precision", ratio(v->escalated_right, v->escalated));
    json_object_update(o, counts);
    json_decref(counts);
    json_object_set_new(o, "decide", decide);
}

/* Counts one labelled pipeline request: verdict, its choice, the outcome
 * (NULL: none of the candidates was right) and the decider's answer a. */
static void count_verdict(struct verdicts *v, const char *verdict, const char *choice,
                          const char *outcome, const struct scored *a) {
    bool right = choice && outcome && !strcmp(choice, outcome);
    v->count++;
    if (verdict && !strcmp(verdict, "accepted")) {
        v->accepted++;
        v->accepted_right += right;
    } else if (verdict && !strcmp(verdict, "escalated")) {
        v->escalated++;
        v->escalated_right += right;
    } else {
        const char *first = a->n ? json_string_value(json_array_get(a->keys, metrics_top(a->p, a->n)))
                                 : NULL;
        v->rejected++;
        v->rejected_would_be_right += first && outcome && !strcmp(first, outcome);
    }
}

/* "pipelines": per pipeline, its verdicts against the outcomes. */
static json_t *pipeline_groups(sqlite3 *db, const struct window *w, bool *ok) {
    sqlite3_stmt *st = store_prepare(
        db, "SELECT r.pipeline, r.model, q.name, q.options, q.probabilities, l.gold_index,"
            " l.target, r.time_ms, r.verdict, r.choice, json_extract(l.gold, '$')"
            " FROM labels l JOIN requests r ON r.id = l.request JOIN questions q"
            " ON q.request = l.request AND q.name = l.question WHERE r.time_ms >= ?"
            " AND r.pipeline IS NOT NULL ORDER BY r.pipeline, r.time_ms");
    json_t *out = json_array(), *cur = NULL;
    struct group *g = NULL;
    struct verdicts v = {0};
    if (!(*ok = start_walk(st, w, &g)))
        return out;
    char pipeline[256] = "", model[256] = "", question[256] = "";
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (!cur || !same_text(st, 0, pipeline)) {
            if (cur)
                pipeline_json(cur, &v, g, w, model, question);
            memset(g, 0, sizeof *g);
            metrics_summary_init(&g->sum);
            v = (struct verdicts){0};
            snprintf(pipeline, sizeof pipeline, "%s", sqlite3_column_text(st, 0));
            snprintf(model, sizeof model, "%s", sqlite3_column_text(st, 1));
            snprintf(question, sizeof question, "%s", sqlite3_column_text(st, 2));
            cur = json_pack("{s:s}", "pipeline", pipeline);
            json_array_append_new(out, cur);
        }
        struct scored a;
        bool readable = read_scored(st, 3, 4, 6, &a);
        bool has_gold = sqlite3_column_type(st, 5) != SQLITE_NULL;
        size_t gold = (size_t)sqlite3_column_int64(st, 5);
        if (readable && has_gold && gold < a.n)
            group_add(g, w, sqlite3_column_int64(st, 7), a.p, a.target, a.n, gold, false);
        if (readable)
            count_verdict(&v, (const char *)sqlite3_column_text(st, 8),
                          (const char *)sqlite3_column_text(st, 9),
                          has_gold ? (const char *)sqlite3_column_text(st, 10) : NULL, &a);
        scored_deinit(&a);
    }
    if (cur)
        pipeline_json(cur, &v, g, w, model, question);
    *ok = rc == SQLITE_DONE;
    sqlite3_finalize(st);
    mem_free(g);
    return out;
}

/* "store": the store's file and its requests in the window, labelled or not.
 * NULL on a database error. */
static json_t *store_part(sqlite3 *db, const char *path, const struct window *w) {
    sqlite3_stmt *st = store_prepare(
        db, "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM labels l"
            " WHERE l.request = r.id)) FROM requests r WHERE r.time_ms >= ?");
    json_t *part = NULL;
    if (st) {
        sqlite3_bind_int64(st, 1, w->from_ms);
        if (sqlite3_step(st) == SQLITE_ROW)
            part = json_pack("{s:s, s:s, s:I, s:I}", "state", "ok", "path", path, "requests",
                             (json_int_t)sqlite3_column_int64(st, 0), "labelled",
                             (json_int_t)sqlite3_column_int64(st, 1));
    }
    sqlite3_finalize(st);
    return part;
}

json_t *store_quality_run(sqlite3 *db, const char *path, int64_t since_ms, char *err,
                          size_t errlen) {
    int64_t now = store_now_ms();
    struct window w = {now - since_ms, now};
    bool ok_models = true, ok_pipelines = true;
    json_t *models = model_groups(db, &w, &ok_models);
    json_t *pipelines = pipeline_groups(db, &w, &ok_pipelines);
    json_t *store = store_part(db, path, &w);
    if (!ok_models || !ok_pipelines || !store) {
        json_decref(models);
        json_decref(pipelines);
        json_decref(store);
        store_db_fail(db, path, err, errlen);
        return NULL;
    }
    return json_pack("{s:I, s:I, s:I, s:o, s:o, s:o}", "since_ms", (json_int_t)since_ms,
                     "from_ms", (json_int_t)w.from_ms, "to_ms", (json_int_t)w.to_ms, "models",
                     models, "pipelines", pipelines, "store", store);
}
