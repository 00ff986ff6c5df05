/* store_export.c: stored requests read back as eval-format cases.
 *
 * The reading side of the store, for `tandem export` and `--data store:`: it
 * opens the file read-only (WAL lets it read while a daemon writes), checks
 * the schema version, and walks the window's requests oldest first in one
 * query, their labels folded in by SQLite's json_group_object. A request is
 * replayable only with its body (store.bodies); one kept without is counted
 * and skipped. A pipeline's request, whichever route it came by, becomes the
 * System One request of the model "pipelines/NAME": one choice question whose
 * options are the candidates, its outcome as the gold answer. */
#include "serve/store_internal.h"

#include <stdio.h>
#include <string.h>

/* The case of a model's request: its state and questions. */
static json_t *model_case(json_t *body, json_t *labels, const char *decide_q) {
    (void)decide_q;
    json_t *c = json_pack("{s:O, s:O}", "state", json_object_get(body, "state"), "questions",
                          json_object_get(body, "questions"));
    if (c && json_object_size(labels))
        json_object_set(c, "gold", labels);
    return c;
}

/* The case of a pipeline's request: its one choice question (the client's, on
 * /v1/systemone; else decide_q over the candidates), gold from the outcome. */
static json_t *pipeline_case(json_t *body, json_t *labels, const char *decide_q) {
    json_t *questions = json_object_get(body, "questions");
    json_t *q;
    const char *name = decide_q;
    if (json_is_object(questions)) {
        void *it = json_object_iter(questions);
        if (!it)
            return NULL;
        name = json_object_iter_key(it);
        q = json_deep_copy(json_object_iter_value(it));
    } else {
        json_t *instructions = json_object_get(body, "instructions");
        q = json_pack("{s:s, s:o, s:O}", "type", "choice", "instructions",
                      instructions ? json_incref(instructions) : json_string(""), "criteria",
                      json_object_get(body, "candidates"));
    }
    json_t *c = json_pack("{s:O, s:{s:o}}", "state", json_object_get(body, "state"), "questions",
                          name ? name : "choice", q);
    json_t *outcome = decide_q ? json_object_get(labels, decide_q) : NULL;
    if (c && json_is_string(outcome))
        json_object_set_new(c, "gold", json_pack("{s:O}", name ? name : "choice", outcome));
    return c;
}

static const char EXPORT_SQL[] =
    "SELECT r.request_id, r.time_ms, r.node, r.model, r.pipeline, r.body,"
    " (SELECT json_group_object(question, json(gold)) FROM labels WHERE request = r.id),"
    " (SELECT name FROM questions WHERE request = r.id LIMIT 1)"
    " FROM requests r WHERE r.time_ms >= ?1"
    " AND r.id IN (SELECT max(id) FROM requests GROUP BY request_id)"
    " AND (?2 IS NULL OR r.model = ?2)"
    " AND (?3 = 0 OR EXISTS (SELECT 1 FROM labels l WHERE l.request = r.id))"
    " ORDER BY r.time_ms, r.id";

/* One row into its case, handed to fn. False when fn stops (err set). */
static bool export_row(sqlite3_stmt *st, store_case_fn fn, void *user, size_t *exported,
                       size_t *skipped, char *err, size_t errlen) {
    const char *body_text = (const char *)sqlite3_column_text(st, 5);
    json_t *body = body_text ? json_loads(body_text, 0, NULL) : NULL;
    const char *labels_text = (const char *)sqlite3_column_text(st, 6);
    json_t *labels = labels_text ? json_loads(labels_text, 0, NULL) : json_object();
    const char *pipeline = (const char *)sqlite3_column_text(st, 4);
    const char *decide_q = (const char *)sqlite3_column_text(st, 7);
    json_t *c = json_is_object(body) ? (pipeline ? pipeline_case : model_case)(body, labels, decide_q)
                                     : NULL;
    bool ok = true;
    json_t *line = c ? json_pack("{s:s}", "id", (const char *)sqlite3_column_text(st, 0)) : NULL;
    if (line && !json_object_update(line, c)) {
        json_t *meta = json_pack("{s:s, s:s, s:I}", "model", sqlite3_column_text(st, 3), "node",
                                 sqlite3_column_text(st, 2), "time_ms",
                                 (json_int_t)sqlite3_column_int64(st, 1));
        if (pipeline)
            json_object_set_new(meta, "pipeline", json_string(pipeline));
        json_object_set_new(line, "meta", meta);
        ok = fn(user, line, err, errlen);
        *exported += ok;
    } else {
        (*skipped)++;
    }
    json_decref(line);
    json_decref(c);
    json_decref(body);
    json_decref(labels);
    return ok;
}

tandem_err store_export(const char *path, const struct store_export_opts *o, store_case_fn fn,
                        void *user, size_t *exported, size_t *skipped, char *err, size_t errlen) {
    sqlite3 *db = NULL;
    size_t n_skipped = 0, n_exported = 0;
    tandem_err e = TANDEM_OK;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        store_db_fail(db, path, err, errlen);
        sqlite3_close(db);
        return TANDEM_ERR_IO;
    }
    sqlite3_busy_timeout(db, 5000);
    if ((e = store_schema(db, path, false, err, errlen)) != TANDEM_OK) {
        sqlite3_close(db);
        return e;
    }
    sqlite3_stmt *st = store_prepare(db, EXPORT_SQL);
    if (!st) {
        store_db_fail(db, path, err, errlen);
        sqlite3_close(db);
        return TANDEM_ERR_IO;
    }
    sqlite3_bind_int64(st, 1, store_now_ms() - o->since_ms);
    if (o->model)
        sqlite3_bind_text(st, 2, o->model, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 3, o->labelled);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (!export_row(st, fn, user, &n_exported, &n_skipped, err, errlen)) {
            e = TANDEM_ERR_INVAL;
            break;
        }
    if (!e && rc != SQLITE_DONE) {
        store_db_fail(db, path, err, errlen);
        e = TANDEM_ERR_IO;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (exported)
        *exported = n_exported;
    if (skipped)
        *skipped = n_skipped;
    return e;
}
