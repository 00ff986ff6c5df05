/* store.c: the request store's writer thread, schema and rows.
 *
 * The event loop never touches the database. store_record() copies an answered
 * request's texts into a job and appends it to a queue (bounded: past
 * STORE_QUEUE_MAX a record is dropped and counted); feedback and quality
 * requests are jobs too, with a reply. The writer takes the whole queue at
 * once and runs it as one transaction, so a burst costs one commit; a reply
 * is posted only after its transaction committed, so an acknowledged label is
 * in the WAL when the client reads 200 (synchronous=NORMAL: it survives the
 * daemon's death, kill -9 included; a power cut may lose the last commits).
 * Replies travel back through a list and one byte on a pipe that libevent
 * watches. Parsing the request and answer texts into rows also happens on the
 * writer, off the request path. Retention and the size cap run on the writer
 * every STORE_MAINTAIN_MS. */
#include "serve/store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/cache.h"
#include "base/hash.h"
#include "base/host.h"
#include "base/mem.h"
#include "serve/s1.h"

#define STORE_MAINTAIN_MS 60000 /* retention and the size cap, at most this often */
#define STORE_BUSY_MS 1000      /* SQLite's wait for another process's lock */
#define STORE_CAP_SHARE 0.9     /* the size cap deletes down to this share of it */

enum job_kind { JOB_RECORD, JOB_FEEDBACK, JOB_QUALITY };

struct job {
    enum job_kind kind;
    struct job *next;
    /* JOB_RECORD: one string block, each field a NUL-terminated part of it */
    char *text;
    const char *request_id, *model, *sha256, *path, *pipeline, *request, *answer;
    size_t request_len, answer_len;
    int64_t time_ms;
    /* JOB_FEEDBACK, JOB_QUALITY */
    json_t *in;
    int64_t since_ms;
    store_reply_fn fn;
    void *user;
    int status;
    json_t *out;
};

struct job_list {
    struct job *head, *tail;
};

struct store {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started, stop;
    struct job_list queue, done; /* to the writer; replies to the loop */
    struct job *running;         /* the batch the writer runs */
    size_t queued, queued_records, queued_bytes;
    int wake_rd, wake_wr;
    struct event *wake;
    /* the writer's own */
    sqlite3 *db;
    sqlite3_stmt *ins_request, *ins_question;
    char *path, *node;
    bool bodies;
    int64_t retention_ms;
    uint64_t max_bytes;
    int64_t tried_ms, maintained_ms;
    /* shared, under mu */
    bool failed;
    char error[256];
    uint64_t records, errors, dropped, expired;
};

int64_t store_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool store_db_fail(sqlite3 *db, const char *path, char *err, size_t errlen) {
    if (err && errlen)
        snprintf(err, errlen, "store: %s (%s)", db ? sqlite3_errmsg(db) : "cannot open", path);
    return false;
}

sqlite3_stmt *store_prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return NULL;
    }
    return st;
}

static const char SCHEMA[] =
    "CREATE TABLE requests(id INTEGER PRIMARY KEY, request_id TEXT NOT NULL,"
    " time_ms INTEGER NOT NULL, node TEXT NOT NULL, model TEXT NOT NULL, sha256 TEXT,"
    " pipeline TEXT, verdict TEXT, choice TEXT, attempts TEXT, body TEXT);"
    "CREATE INDEX requests_request_id ON requests(request_id);"
    "CREATE INDEX requests_time ON requests(time_ms);"
    "CREATE TABLE questions(request INTEGER NOT NULL, name TEXT NOT NULL, type TEXT NOT NULL,"
    " options TEXT NOT NULL, probabilities TEXT NOT NULL, choice TEXT, confidence REAL,"
    " PRIMARY KEY(request, name)) WITHOUT ROWID;"
    "CREATE TABLE labels(request INTEGER NOT NULL, question TEXT NOT NULL, gold TEXT NOT NULL,"
    " gold_index INTEGER, target TEXT, time_ms INTEGER NOT NULL,"
    " PRIMARY KEY(request, question)) WITHOUT ROWID;"
    "CREATE TABLE expired(request_id TEXT PRIMARY KEY, time_ms INTEGER NOT NULL) WITHOUT ROWID;";

tandem_err store_schema(sqlite3 *db, const char *path, bool create, char *err, size_t errlen) {
    sqlite3_stmt *st = store_prepare(db, "PRAGMA user_version");
    if (!st || sqlite3_step(st) != SQLITE_ROW) {
        store_db_fail(db, path, err, errlen);
        sqlite3_finalize(st);
        return TANDEM_ERR_IO;
    }
    int version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (version == STORE_SCHEMA_VERSION)
        return TANDEM_OK;
    if (version != 0 || !create) {
        snprintf(err, errlen,
                 "store: %s has schema version %d, and this tandem reads version %d%s", path,
                 version, STORE_SCHEMA_VERSION,
                 version > STORE_SCHEMA_VERSION ? " (written by a newer tandem: upgrade tandem, "
                                                  "or set store.path to another file)"
                                                : "");
        return TANDEM_ERR_FORMAT;
    }
    char sql[sizeof SCHEMA + 64];
    snprintf(sql, sizeof sql, "BEGIN IMMEDIATE;%sPRAGMA user_version=%d;COMMIT;", SCHEMA,
             STORE_SCHEMA_VERSION);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        store_db_fail(db, path, err, errlen);
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
        return TANDEM_ERR_IO;
    }
    return TANDEM_OK;
}

/* --- the database's health (writer thread) ------------------------------------------------ */

static void set_failed(struct store *s, const char *why) {
    pthread_mutex_lock(&s->mu);
    s->failed = true;
    s->errors++;
    snprintf(s->error, sizeof s->error, "%s", why);
    pthread_mutex_unlock(&s->mu);
}

static void close_db(struct store *s) {
    sqlite3_finalize(s->ins_request);
    sqlite3_finalize(s->ins_question);
    s->ins_request = s->ins_question = NULL;
    sqlite3_close(s->db);
    s->db = NULL;
}

/* Creates the file (mode 0600: SQLite gives its WAL the same) and its folder. */
static bool make_file(const char *path, char *err, size_t errlen) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        if (cache_mkdir_p(dir) != TANDEM_OK) {
            tandem_errmsg(err, errlen, "store: cannot create the folder %s: %s", dir, strerror(errno));
            return false;
        }
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        tandem_errmsg(err, errlen, "store: cannot open %s: %s", path, strerror(errno));
        return false;
    }
    close(fd);
    return true;
}

static bool open_db(struct store *s, char *err, size_t errlen) {
    if (!make_file(s->path, err, errlen))
        return false;
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK)
        return store_db_fail(s->db, s->path, err, errlen);
    sqlite3_busy_timeout(s->db, STORE_BUSY_MS);
    sqlite3_stmt *st = store_prepare(s->db, "PRAGMA journal_mode=WAL");
    bool wal = st && sqlite3_step(st) == SQLITE_ROW &&
               !strcmp((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    if (!wal)
        return store_db_fail(s->db, s->path, err, errlen);
    if (sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) != SQLITE_OK)
        return store_db_fail(s->db, s->path, err, errlen);
    if (store_schema(s->db, s->path, true, err, errlen) != TANDEM_OK)
        return false;
    s->ins_request = store_prepare(
        s->db, "INSERT INTO requests(request_id, time_ms, node, model, sha256, pipeline, verdict,"
               " choice, attempts, body) VALUES(?,?,?,?,?,?,?,?,?,?)");
    s->ins_question = store_prepare(
        s->db, "INSERT OR REPLACE INTO questions(request, name, type, options, probabilities,"
               " choice, confidence) VALUES(?,?,?,?,?,?,?)");
    if (!s->ins_request || !s->ins_question)
        return store_db_fail(s->db, s->path, err, errlen);
    return true;
}

/* Opens the database when it is not open, at most every STORE_RETRY_MS. */
static void ensure_open(struct store *s) {
    int64_t now = host_now_ms();
    if (s->db || (s->tried_ms && now - s->tried_ms < STORE_RETRY_MS))
        return;
    s->tried_ms = now;
    char err[256] = "";
    if (open_db(s, err, sizeof err)) {
        pthread_mutex_lock(&s->mu);
        s->failed = false;
        s->error[0] = '\0';
        pthread_mutex_unlock(&s->mu);
        fprintf(stderr, "tandem: store: %s\n", s->path);
        return;
    }
    close_db(s);
    bool said = s->failed && !strcmp(s->error, err);
    set_failed(s, err);
    if (!said)
        fprintf(stderr, "tandem: %s; decisions are served, but not stored, and feedback gets "
                        "503 (retrying every %ds)\n", err, STORE_RETRY_MS / 1000);
}

/* --- answered requests into rows (writer thread) ---------------------------------------- */

static void bind_text(sqlite3_stmt *st, int i, const char *s) {
    if (s && *s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* Binds v (may be NULL) compact, as JSON text. */
static void bind_json(sqlite3_stmt *st, int i, const json_t *v) {
    char *t = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;
    if (t)
        sqlite3_bind_text(st, i, t, -1, free);
    else
        sqlite3_bind_null(st, i);
}

static bool step_done(sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE;
}

/* One answered question: its answer keys and their probabilities, in order. */
struct row {
    const char *name, *type;
    json_t *keys, *p; /* arrays, owned */
    const char *choice;
    double confidence;
    bool has_confidence;
};

static void row_deinit(struct row *r) {
    json_decref(r->keys);
    json_decref(r->p);
}

/* Fills r's probabilities from answer a over r->keys (probabilities by key; a
 * noul's P(true)). False when a key has no number. */
static bool fill_probabilities(struct row *r, const json_t *a) {
    if (!strcmp(r->type, "noul")) {
        double p = json_number_value(json_object_get(a, "noul"));
        r->choice = p >= 0.5 ? "true" : "false";
        return json_is_number(json_object_get(a, "noul")) &&
               !json_array_append_new(r->p, json_real(p)) &&
               !json_array_append_new(r->p, json_real(1 - p));
    }
    json_t *probs = json_object_get(a, "probabilities");
    size_t i;
    json_t *k;
    double best = -1;
    json_array_foreach(r->keys, i, k) {
        json_t *v = json_object_get(probs, json_string_value(k));
        if (!json_is_number(v) || json_array_append(r->p, v))
            return false;
        if (json_number_value(v) > best) {
            best = json_number_value(v);
            r->choice = json_string_value(k);
        }
    }
    json_t *c = json_object_get(a, "confidence");
    r->has_confidence = json_is_number(c);
    r->confidence = json_number_value(c);
    return true;
}

/* The answer keys of question q (from the request): a choice's option names
 * in order, a score's levels "0".."n-1", a noul's "true", "false". */
static json_t *question_keys(const char *type, const json_t *q) {
    json_t *keys = json_array(), *criteria = json_object_get(q, "criteria");
    if (!strcmp(type, "choice")) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)criteria, k, v) json_array_append_new(keys, json_string(k));
    } else if (!strcmp(type, "score")) {
        for (size_t i = 0; i < json_array_size(criteria); i++) {
            char level[24];
            snprintf(level, sizeof level, "%zu", i);
            json_array_append_new(keys, json_string(level));
        }
    } else {
        json_array_append_new(keys, json_string("true"));
        json_array_append_new(keys, json_string("false"));
    }
    return keys;
}

static bool insert_row(struct store *s, sqlite3_int64 request, const struct row *r) {
    sqlite3_stmt *st = s->ins_question;
    sqlite3_bind_int64(st, 1, request);
    sqlite3_bind_text(st, 2, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, r->type, -1, SQLITE_TRANSIENT);
    bind_json(st, 4, r->keys);
    bind_json(st, 5, r->p);
    bind_text(st, 6, r->choice);
    if (r->has_confidence)
        sqlite3_bind_double(st, 7, r->confidence);
    return step_done(st);
}

/* Inserts each question row of a /v1/systemone answer: the request's questions,
 * answered in "answers". Returns false on a database error. */
static bool insert_answers(struct store *s, sqlite3_int64 id, const json_t *request,
                           const json_t *answers) {
    const char *name;
    json_t *q;
    json_object_foreach((json_t *)json_object_get(request, "questions"), name, q) {
        json_t *a = json_object_get(answers, name);
        const char *type = json_string_value(json_object_get(a, "type"));
        if (!type)
            continue;
        struct row r = {.name = name, .type = type, .keys = question_keys(type, q),
                        .p = json_array()};
        bool ok = !fill_probabilities(&r, a) || insert_row(s, id, &r);
        row_deinit(&r);
        if (!ok)
            return false;
    }
    return true;
}

/* Inserts a pipeline's decide question: the decider's one choice answer, its
 * keys the candidates in the answer's order. */
static bool insert_decide(struct store *s, sqlite3_int64 id, const json_t *answer) {
    json_t *answers = json_object_get(json_object_get(answer, "decide"), "answers");
    void *it = json_object_iter(answers);
    if (!it)
        return true;
    json_t *a = json_object_iter_value(it);
    struct row r = {.name = json_object_iter_key(it), .type = "choice", .keys = json_array(),
                    .p = json_array()};
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(a, "probabilities"), k, v)
        json_array_append_new(r.keys, json_string(k));
    bool ok = !fill_probabilities(&r, a) || insert_row(s, id, &r);
    row_deinit(&r);
    return ok;
}

/* The SHA-256 of the model file at path into hex, through base/hash's digest
 * cache (a file is read in full once); NULL when it cannot be read. */
static const char *file_hash(const char *path, char hex[HASH_SHA256_HEX_LEN + 1]) {
    bool cached;
    return hash_file_sha256_cached(path, hex, &cached, NULL, 0) == TANDEM_OK ? hex : NULL;
}

/* A pipeline's decider, from its answer's "models": name and file hash. */
static void decider(const json_t *answer, const char **model, const char **sha256) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(answer, "models"), i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "decide")) {
            const char *name = json_string_value(json_object_get(m, "name"));
            *model = name ? name : *model;
            *sha256 = json_string_value(json_object_get(m, "sha256"));
            return;
        }
    }
}

/* Stores one answered request (j->status = 1 when stored; 0 for an answer that
 * does not parse, dropped). Returns false on a database error. */
static bool insert_record(struct store *s, struct job *j) {
    json_t *request = json_loadb(j->request, j->request_len, 0, NULL);
    json_t *answer = json_loadb(j->answer, j->answer_len, 0, NULL);
    bool ok = true;
    if (!json_is_object(request) || !json_is_object(answer))
        goto out;
    sqlite3_stmt *st = s->ins_request;
    bool pipeline = *j->pipeline;
    const char *model = j->model, *sha256 = j->sha256;
    char hex[HASH_SHA256_HEX_LEN + 1];
    if (pipeline)
        decider(answer, &model, &sha256);
    else if (!*sha256 && *j->path)
        sha256 = file_hash(j->path, hex);
    sqlite3_bind_text(st, 1, j->request_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, j->time_ms);
    sqlite3_bind_text(st, 3, s->node, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, model, -1, SQLITE_STATIC);
    bind_text(st, 5, sha256);
    bind_text(st, 6, pipeline ? j->pipeline : NULL);
    bind_text(st, 7, pipeline ? json_string_value(json_object_get(answer, "verdict")) : NULL);
    bind_text(st, 8, pipeline ? json_string_value(json_object_get(answer, "choice")) : NULL);
    bind_json(st, 9, pipeline ? json_object_get(answer, "attempts") : NULL);
    if (s->bodies)
        sqlite3_bind_text(st, 10, j->request, (int)j->request_len, SQLITE_STATIC);
    if (!(ok = step_done(st)))
        goto out;
    sqlite3_int64 id = sqlite3_last_insert_rowid(s->db);
    ok = pipeline ? insert_decide(s, id, answer)
                  : insert_answers(s, id, request, json_object_get(answer, "answers"));
    j->status = ok;
out:
    json_decref(request);
    json_decref(answer);
    return ok;
}

/* --- retention and the size cap (writer thread) ------------------------------------------ */

/* Deletes the requests answered before cutoff (their questions and labels with
 * them), remembering their ids in `expired` for a 404 that says so. Returns
 * the requests deleted, or -1 on a database error. */
static int64_t expire_before(struct store *s, int64_t cutoff) {
    static const char *const sql[] = {
        ("INSERT OR REPLACE INTO expired(request_id, time_ms) SELECT request_id, time_ms"
         " FROM requests WHERE time_ms < ?1"),
        "DELETE FROM questions WHERE request IN (SELECT id FROM requests WHERE time_ms < ?1)",
        "DELETE FROM labels WHERE request IN (SELECT id FROM requests WHERE time_ms < ?1)",
        "DELETE FROM requests WHERE time_ms < ?1",
    };
    int64_t deleted = 0;
    for (size_t i = 0; i < sizeof sql / sizeof *sql; i++) {
        sqlite3_stmt *st = store_prepare(s->db, sql[i]);
        if (!st)
            return -1;
        sqlite3_bind_int64(st, 1, cutoff);
        bool ok = sqlite3_step(st) == SQLITE_DONE;
        deleted = sqlite3_changes(s->db);
        sqlite3_finalize(st);
        if (!ok)
            return -1;
    }
    return deleted;
}

static int64_t query_int(struct store *s, const char *sql) {
    sqlite3_stmt *st = store_prepare(s->db, sql);
    int64_t v = st && sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
}

/* The time before which requests go so that the file's used pages fall under
 * the cap: the oldest share of requests over it. 0 when under the cap. */
static int64_t cap_cutoff(struct store *s) {
    int64_t pages = query_int(s, "PRAGMA page_count"), free_pages = query_int(s, "PRAGMA freelist_count");
    int64_t page = query_int(s, "PRAGMA page_size"), n = query_int(s, "SELECT count(*) FROM requests");
    if (pages < 0 || free_pages < 0 || page <= 0 || n <= 0)
        return 0;
    double used = (double)(pages - free_pages) * (double)page;
    if (used <= (double)s->max_bytes)
        return 0;
    int64_t drop = (int64_t)((double)n * (1 - STORE_CAP_SHARE * (double)s->max_bytes / used)) + 1;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT time_ms FROM requests ORDER BY time_ms LIMIT 1 OFFSET %lld",
             (long long)(drop < n ? drop : n - 1));
    int64_t t = query_int(s, sql);
    return t > 0 ? t + (drop >= n) : 0;
}

static void maintain(struct store *s) {
    int64_t now = host_now_ms();
    int64_t every = s->retention_ms / 10 < STORE_MAINTAIN_MS ? s->retention_ms / 10
                                                             : STORE_MAINTAIN_MS;
    if (!s->db || now - s->maintained_ms < (every > 100 ? every : 100))
        return;
    s->maintained_ms = now;
    int64_t wall = store_now_ms();
    char err[256];
    if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        store_db_fail(s->db, s->path, err, sizeof err);
        set_failed(s, err);
        return;
    }
    int64_t a = expire_before(s, wall - s->retention_ms);
    int64_t cut = a >= 0 ? cap_cutoff(s) : 0;
    int64_t b = cut > 0 ? expire_before(s, cut) : 0;
    sqlite3_stmt *st = store_prepare(s->db, "DELETE FROM expired WHERE time_ms < ?");
    if (st) {
        sqlite3_bind_int64(st, 1, wall - 2 * s->retention_ms);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    if (a < 0 || b < 0 || sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        store_db_fail(s->db, s->path, err, sizeof err);
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        set_failed(s, err);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->expired += (uint64_t)(a + b);
    pthread_mutex_unlock(&s->mu);
}

/* --- the writer ---------------------------------------------------------------------------- */

static void job_free(struct job *j) {
    if (!j)
        return;
    mem_free(j->text);
    json_decref(j->in);
    json_decref(j->out);
    mem_free(j);
}

/* Sets a reply job's answer to 503 with why. */
static void refuse(struct job *j, const char *why) {
    json_decref(j->out);
    j->status = 503;
    j->out = s1_error_body(503, NULL, why, NULL);
}

/* Runs one job inside the batch's transaction. False on a database error. */
static bool run_job(struct store *s, struct job *j, char *err, size_t errlen) {
    switch (j->kind) {
    case JOB_RECORD:
        return insert_record(s, j) || store_db_fail(s->db, s->path, err, errlen);
    case JOB_FEEDBACK:
        return store_feedback_run(s->db, s->path, j->in, s->retention_ms, &j->status, &j->out,
                                  err, errlen);
    case JOB_QUALITY:
        j->status = 200;
        return (j->out = store_quality_run(s->db, s->path, j->since_ms, err, errlen)) != NULL;
    }
    return false;
}

/* Runs a batch as one transaction: every job, then one commit. On a database
 * error everything rolls back: records are dropped, replies say 503 and why. */
static void run_batch(struct store *s, struct job *batch) {
    char err[256] = "";
    bool ok = s->db != NULL;
    if (!ok)
        snprintf(err, sizeof err, "%s", s->error);
    else if (sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        ok = store_db_fail(s->db, s->path, err, sizeof err);
    for (struct job *j = batch; ok && j; j = j->next)
        ok = run_job(s, j, err, sizeof err);
    if (ok && sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        ok = store_db_fail(s->db, s->path, err, sizeof err);
    if (!ok && s->db)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    uint64_t stored = 0, lost = 0;
    for (struct job *j = batch; j; j = j->next) {
        if (j->kind != JOB_RECORD && !ok)
            refuse(j, err);
        else if (j->kind == JOB_RECORD && ok && j->status)
            stored++;
        else if (j->kind == JOB_RECORD)
            lost++;
    }
    pthread_mutex_lock(&s->mu);
    s->records += stored;
    s->dropped += lost;
    if (!ok) {
        if (s->db) {
            s->errors++;
            s->failed = true;
            snprintf(s->error, sizeof s->error, "%s", err);
        }
    } else if (s->db) {
        s->failed = false;
        s->error[0] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
}

/* Hands the batch's replies to the loop (records are freed here). */
static void post_replies(struct store *s, struct job *batch) {
    bool any = false;
    pthread_mutex_lock(&s->mu);
    s->running = NULL;
    for (struct job *j = batch, *next; j; j = next) {
        next = j->next;
        j->next = NULL;
        if (j->kind == JOB_RECORD) {
            job_free(j);
            continue;
        }
        if (s->done.tail)
            s->done.tail->next = j;
        else
            s->done.head = j;
        s->done.tail = j;
        any = true;
    }
    pthread_mutex_unlock(&s->mu);
    if (any) {
        char b = 1;
        ssize_t w = write(s->wake_wr, &b, 1); /* a full pipe already wakes the loop */
        (void)w;
    }
}

static void *writer_main(void *arg) {
    struct store *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        if (!s->queue.head && !s->stop) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&s->cv, &s->mu, &until);
        }
        struct job *batch = s->queue.head;
        bool stop = s->stop;
        s->queue = (struct job_list){0};
        s->queued = s->queued_records = s->queued_bytes = 0;
        s->running = batch;
        pthread_mutex_unlock(&s->mu);
        ensure_open(s);
        if (batch) {
            run_batch(s, batch);
            post_replies(s, batch);
        }
        maintain(s);
        if (stop && !batch)
            break;
    }
    close_db(s);
    return NULL;
}

/* --- the loop's side ------------------------------------------------------------------------ */

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct store *s = arg;
    char buf[64];
    while (read(fd, buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&s->mu);
    struct job *j = s->done.head;
    s->done = (struct job_list){0};
    pthread_mutex_unlock(&s->mu);
    for (struct job *next; j; j = next) {
        next = j->next;
        if (j->fn) {
            json_t *out = j->out;
            j->out = NULL;
            j->fn(j->user, j->status, out);
        }
        job_free(j);
    }
}

/* Appends j to the writer's queue. False (j untouched) when the store is
 * stopping or a record finds the queue full. */
static bool enqueue(struct store *s, struct job *j) {
    pthread_mutex_lock(&s->mu);
    size_t bytes = j->request_len + j->answer_len;
    bool full = j->kind == JOB_RECORD && (s->queued_records >= STORE_QUEUE_MAX ||
                                          s->queued_bytes + bytes > STORE_QUEUE_MAX_BYTES);
    bool ok = !s->stop && !full;
    if (ok) {
        if (s->queue.tail)
            s->queue.tail->next = j;
        else
            s->queue.head = j;
        s->queue.tail = j;
        s->queued++;
        s->queued_records += j->kind == JOB_RECORD;
        s->queued_bytes += bytes;
        pthread_cond_signal(&s->cv);
    } else if (j->kind == JOB_RECORD) {
        s->dropped++;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

tandem_err store_new(const struct store_params *p, struct store **out, char *err, size_t errlen) {
    struct store *s = mem_calloc(1, sizeof *s);
    int fds[2] = {-1, -1};
    if (!s || !(s->path = mem_strdup(p->path)) || !(s->node = mem_strdup(p->node))) {
        store_free(s);
        return TANDEM_ERR_NOMEM;
    }
    s->bodies = p->bodies;
    s->retention_ms = p->retention_ms;
    s->max_bytes = p->max_bytes;
    s->wake_rd = s->wake_wr = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(err, errlen, "store: pipe: %s", strerror(errno));
        store_free(s);
        return TANDEM_ERR_IO;
    }
    s->wake_rd = fds[0];
    s->wake_wr = fds[1];
    if (!(s->wake = event_new(p->base, s->wake_rd, EV_READ | EV_PERSIST, on_wake, s)) ||
        event_add(s->wake, NULL) != 0) {
        store_free(s);
        return TANDEM_ERR_NOMEM;
    }
    if (pthread_create(&s->thread, NULL, writer_main, s) != 0) {
        snprintf(err, errlen, "store: cannot start its writer thread");
        store_free(s);
        return TANDEM_ERR_IO;
    }
    s->started = true;
    *out = s;
    return TANDEM_OK;
}

void store_free(struct store *s) {
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (struct job *j = s->done.head, *next; j; j = next) {
        next = j->next;
        job_free(j);
    }
    if (s->wake)
        event_free(s->wake);
    if (s->wake_rd >= 0)
        close(s->wake_rd);
    if (s->wake_wr >= 0)
        close(s->wake_wr);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    mem_free(s->path);
    mem_free(s->node);
    mem_free(s);
}

/* Copies the parts into one block: j->text, each part NUL-terminated. */
static bool copy_texts(struct job *j, const struct store_answer *a) {
    const char *parts[] = {a->request_id, a->model ? a->model : "", a->sha256 ? a->sha256 : "",
                           a->path ? a->path : "", a->pipeline ? a->pipeline : "",
                           a->request, a->answer};
    const char **at[] = {&j->request_id, &j->model, &j->sha256, &j->path, &j->pipeline,
                         &j->request, &j->answer};
    enum { N_PARTS = sizeof parts / sizeof *parts };
    size_t lens[N_PARTS], total = 0;
    for (size_t i = 0; i < N_PARTS; i++) {
        lens[i] = i == N_PARTS - 2 ? a->request_len : i == N_PARTS - 1 ? a->answer_len
                                                                         : strlen(parts[i]);
        total += lens[i] + 1;
    }
    if (!(j->text = mem_alloc(total)))
        return false;
    char *w = j->text;
    for (size_t i = 0; i < N_PARTS; i++) {
        memcpy(w, parts[i], lens[i]);
        w[lens[i]] = '\0';
        *at[i] = w;
        w += lens[i] + 1;
    }
    j->request_len = a->request_len;
    j->answer_len = a->answer_len;
    return true;
}

bool store_record(struct store *s, const struct store_answer *a) {
    struct job *j = mem_calloc(1, sizeof *j);
    if (j && copy_texts(j, a)) {
        j->kind = JOB_RECORD;
        j->time_ms = store_now_ms();
        if (enqueue(s, j))
            return true;
        job_free(j);
        return false;
    }
    job_free(j);
    pthread_mutex_lock(&s->mu);
    s->dropped++;
    pthread_mutex_unlock(&s->mu);
    return false;
}

static tandem_err submit_reply_job(struct store *s, struct job *j) {
    if (enqueue(s, j))
        return TANDEM_OK;
    job_free(j);
    return TANDEM_ERR_CANCELLED;
}

tandem_err store_feedback(struct store *s, json_t *fb, store_reply_fn fn, void *user) {
    struct job *j = s ? mem_calloc(1, sizeof *j) : NULL;
    if (!j) {
        json_decref(fb);
        return s ? TANDEM_ERR_NOMEM : TANDEM_ERR_INVAL;
    }
    *j = (struct job){.kind = JOB_FEEDBACK, .in = fb, .fn = fn, .user = user};
    return submit_reply_job(s, j);
}

tandem_err store_quality(struct store *s, int64_t since_ms, store_reply_fn fn, void *user) {
    struct job *j = s ? mem_calloc(1, sizeof *j) : NULL;
    if (!j)
        return s ? TANDEM_ERR_NOMEM : TANDEM_ERR_INVAL;
    *j = (struct job){.kind = JOB_QUALITY, .since_ms = since_ms, .fn = fn, .user = user};
    return submit_reply_job(s, j);
}

void store_cancel(struct store *s, const void *user) {
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    struct job *lists[] = {s->queue.head, s->running, s->done.head};
    for (size_t i = 0; i < 3; i++)
        for (struct job *j = lists[i]; j; j = j->next)
            if (j->user == user)
                j->fn = NULL;
    pthread_mutex_unlock(&s->mu);
}

void store_stats(struct store *s, struct store_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = (struct store_stats){.state = s->failed ? "failed" : "ok", .queue = s->queued,
                                .records = s->records, .errors = s->errors,
                                .dropped = s->dropped, .expired = s->expired};
    snprintf(out->error, sizeof out->error, "%s", s->error);
    pthread_mutex_unlock(&s->mu);
}
