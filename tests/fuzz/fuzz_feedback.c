/* libFuzzer target for POST /v1/feedback bodies: arbitrary bytes through the
 * route's two steps. store_feedback_parse() must accept or refuse with a
 * non-empty message and a field; an accepted body then runs through the
 * writer's validation (store_feedback_run) against a stored System One
 * request (choice, score and noul questions) and a stored pipeline request,
 * in an in-memory database that every input starts from afresh (a savepoint
 * rolled back), so a crash reproduces from its input alone. The verdict must
 * be 200 (with the three lists), 404, 409 or 422, with the error shape; a
 * database error is a bug here. The one test that includes a module's private
 * header: the writer's side needs no thread to be fuzzed. Seeded by
 * tests/fuzz/make_seeds.py. Built by `make fuzz`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char SEED_ROWS[] =
    "INSERT INTO requests(id, request_id, time_ms, node, model, body) VALUES"
    " (1, 'r1', 0, 'n', 'm', NULL);"
    "INSERT INTO questions VALUES (1, 'act', 'choice', '[\"reduce\",\"stop\",\"nothing\"]',"
    " '[0.2,0.5,0.3]', 'stop', 0.25),"
    " (1, 'sev', 'score', '[\"0\",\"1\",\"2\"]', '[0.3,0.4,0.3]', '1', 0.1),"
    " (1, 'urgent', 'noul', '[\"true\",\"false\"]', '[0.6,0.4]', 'true', NULL);"
    "INSERT INTO labels VALUES (1, 'act', '\"stop\"', 1, NULL, 0);"
    "INSERT INTO requests(id, request_id, time_ms, node, model, pipeline, verdict, choice)"
    " VALUES (2, 'p1', 0, 'n', 'm', 'decide', 'accepted', 'stop');"
    "INSERT INTO questions VALUES (2, 'choice', 'choice', '[\"reduce\",\"stop\",\"nothing\"]',"
    " '[0.2,0.5,0.3]', 'stop', 0.25);"
    "INSERT INTO expired VALUES ('old', 0);";

static sqlite3 *db(void) {
    static sqlite3 *d;
    char err[256];
    if (!d && (sqlite3_open(":memory:", &d) != SQLITE_OK ||
               store_schema(d, ":memory:", true, err, sizeof err) != TANDEM_OK ||
               sqlite3_exec(d, SEED_ROWS, NULL, NULL, NULL) != SQLITE_OK))
        abort();
    return d;
}

static void check_refusal(const json_t *body, int status) {
    const json_t *e = json_object_get(body, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (json_integer_value(json_object_get(e, "code")) != status || !msg || !*msg)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "", param[128] = "";
    json_t *fb = store_feedback_parse((const char *)data, size, param, sizeof param, err,
                                      sizeof err);
    if (!fb) {
        if (!param[0] || !err[0])
            abort();
        return 0;
    }
    sqlite3 *d = db();
    if (sqlite3_exec(d, "SAVEPOINT fuzz", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    int status = 0;
    json_t *out = NULL;
    if (!store_feedback_run(d, ":memory:", fb, INT64_MAX / 2, &status, &out, err, sizeof err))
        abort(); /* no database error on a healthy in-memory database */
    if (status == 200) {
        if (!json_is_array(json_object_get(out, "labelled")) ||
            !json_is_array(json_object_get(out, "unchanged")) ||
            !json_is_array(json_object_get(out, "replaced")))
            abort();
    } else if (status == 404 || status == 409 || status == 422) {
        check_refusal(out, status);
    } else {
        abort();
    }
    if (sqlite3_exec(d, "ROLLBACK TO fuzz; RELEASE fuzz", NULL, NULL, NULL) != SQLITE_OK)
        abort();
    json_decref(out);
    json_decref(fb);
    return 0;
}
