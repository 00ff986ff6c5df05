/* store_internal.h: what store.c, store_feedback.c, store_quality.c and store_export.c
 * share. INTERNAL: no other module includes it; serve/store.h is the store's interface.
 *
 * The store is one module in four files:
 *   store.c           the writer thread, its queue and replies, the database's schema
 *                     and health, answered requests parsed into rows, retention;
 *   store_feedback.c  POST /v1/feedback: the body's shape, then labels checked against
 *                     the stored request;
 *   store_quality.c   GET /v1/quality: the labelled requests scored;
 *   store_export.c    the reading side: stored requests as eval-format cases. */
#ifndef TANDEM_STORE_INTERNAL_H
#define TANDEM_STORE_INTERNAL_H

#include <sqlite3.h>

#include "serve/store.h"

/* A statement's failure: SQLite's message with the store's path, into err[errlen].
 * Returns false, so that a step can `return store_db_fail(...)`. */
bool store_db_fail(sqlite3 *db, const char *path, char *err, size_t errlen);

/* Prepares sql on db; NULL on failure (store_db_fail says why). */
sqlite3_stmt *store_prepare(sqlite3 *db, const char *sql);

/* Checks the schema version of an open database: TANDEM_OK for
 * STORE_SCHEMA_VERSION, or 0 when create is true (the tables are then made);
 * TANDEM_ERR_FORMAT with err naming both versions for a newer or an unknown
 * one; TANDEM_ERR_IO for SQLite's errors. */
tandem_err store_schema(sqlite3 *db, const char *path, bool create, char *err, size_t errlen);

/* The writer's side of a feedback: validates fb against the stored request (a
 * request answered more than retention_ms ago is expired, swept or not) and
 * writes its labels inside the writer's open transaction. Sets *status and
 * *out (a 200 body or an error body). Returns false on a database error (err
 * says which; the batch is rolled back). */
bool store_feedback_run(sqlite3 *db, const char *path, const json_t *fb, int64_t retention_ms,
                        int *status, json_t **out, char *err, size_t errlen);

/* The writer's side of a quality report over [now - since_ms, now]. Returns the
 * report (caller owns), or NULL on a database error (err says which). */
json_t *store_quality_run(sqlite3 *db, const char *path, int64_t since_ms, char *err,
                          size_t errlen);

/* The Unix epoch in ms. */
int64_t store_now_ms(void);

/* An answer's key list and probabilities from the JSON array texts of a questions row:
 * n keys (borrowed from *keys, a new array the caller frees) and p[n] (mem_alloc'd).
 * False when they are malformed or do not match. */
bool store_row_answer(const char *options, const char *probabilities, json_t **keys, double **p,
                      size_t *n);

#endif
