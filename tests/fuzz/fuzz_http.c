/* libFuzzer target for the HTTP API: the input is one raw HTTP/1.1 request
 * (request line, headers, body). It is split the way libevent's evhttp
 * splits a request (lines end in LF or CRLF; "METHOD SP target SP
 * HTTP/x.y"; "name: value" headers with folded continuation lines; a body of
 * Content-Length bytes for POST, PUT and PATCH only), made a detached
 * http_req (http_req_new_detached) and handed to api_handle, the daemon's
 * router, with no socket. What libevent would refuse itself, before any
 * handler (an unknown method, a bad request line, header or Content-Length,
 * a chunked body, which it would join first), is skipped. The target is
 * lenient in one way: a body shorter than its Content-Length is taken as it
 * is (libevent would wait for the rest).
 *
 * The api is the daemon's, on a real config (three local models: two
 * openjev decision models and a generative one, an API key, an 8 KiB body
 * limit, the demo's decide-then-verify pipeline) and a real scheduler that
 * is shutting down from the start and never had an engine: every request
 * goes through authentication, routing, body decoding and validation, and
 * whatever would reach an engine is refused with 503 instead, so the
 * target never forks or opens a socket (checked: every model stays
 * unloaded).
 *
 * Beyond "no crash, no leak" (ASan, UBSan), every request must get exactly
 * one answer, before the loop has anything left to run and with no call
 * left in flight; its status must be one docs/serve.md documents for
 * these routes; it must carry x-request-id (the client's when valid, else a
 * generated req_<32 hex>) and x-tandem-node; an error's body must be
 * tandem's error shape with the status as its code (401 with
 * WWW-Authenticate, 405 with Allow, 503 with Retry-After); a JSON answer
 * must parse; it must vary with Origin, echo only the allowed origin in
 * Access-Control-Allow-Origin, and never on a 403 (the head check's
 * refusals: api_check_head). Built by `make fuzz`; `make test` replays the corpus
 * (tests/fuzz/replay.c). */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "serve/api.h"
#include "serve/s1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_API_KEY "fuzz-key"
#define FUZZ_NODE "fuzz-node"
#define FUZZ_ORIGIN "https://app.example" /* allowed_origins below */
#define FUZZ_MAX_BODY 8192 /* limits.max_body below */
#define N_MODELS 3

/* %s: the directory holding model.gguf (an empty file: the config only
 * checks that it exists; no engine ever reads it). */
static const char config_fmt[] =
    "api_keys: [" FUZZ_API_KEY "]\n"
    "allowed_hosts: [tandem.example]\n"
    "allowed_origins: [" FUZZ_ORIGIN "]\n"
    "node:\n  id: " FUZZ_NODE "\n"
    "defaults:\n  model: decider\n"
    "limits:\n  max_body: 8KiB\n  queue_depth: 4\n"
    "models:\n"
    "  decider:\n    path: %1$s/model.gguf\n    aliases: [smollm2-decider]\n"
    "  verifier:\n    path: %1$s/model.gguf\n"
    "  writer:\n    path: %1$s/model.gguf\n"
    "pipelines:\n"
    "  decide:\n"
    "    decide:\n      model: decider\n      instructions: Which response now?\n"
    "    verify:\n"
    "      - model: verifier\n"
    "        questions:\n"
    "          consistent:\n"
    "            type: noul\n"
    "            instructions: Is {{candidates[decide.choice]}} consistent?\n"
    "    verdict:\n"
    "      thresholds:\n        consistent: \">= 0.5\"\n"
    "      on_reject: next_best\n      max_attempts: 2\n";

static const char *const decision_types[N_MODELS] = {"openjev", "openjev", ""};

/* The daemon's objects, made once (libFuzzer calls the target many times). */
static struct {
    char dir[64];
    char model_path[96];
    struct event_base *base;
    struct config *cfg;
    struct prom *metrics;
    struct sched *sched;
    struct pipeline_set *pipelines;
    struct api *api;
    struct api_model models[N_MODELS];
    struct pipeline_model pmodels[N_MODELS];
} h;

static void die(const char *what) {
    fprintf(stderr, "fuzz_http: %s\n", what);
    abort();
}

static void teardown(void) {
    api_free(h.api);
    sched_free(h.sched);
    pipeline_set_free(h.pipelines);
    prom_free(h.metrics);
    config_free(h.cfg);
    if (h.base)
        event_base_free(h.base);
    unlink(h.model_path);
    rmdir(h.dir);
}

static void load_config(void) {
    snprintf(h.dir, sizeof h.dir, "/tmp/tandem-fuzz-http-XXXXXX");
    if (!mkdtemp(h.dir))
        die("cannot make a temporary directory");
    snprintf(h.model_path, sizeof h.model_path, "%s/model.gguf", h.dir);
    FILE *f = fopen(h.model_path, "w");
    if (!f || fclose(f))
        die("cannot create the model file");
    char yaml[sizeof config_fmt + 4 * sizeof h.dir], err[1024];
    int n = snprintf(yaml, sizeof yaml, config_fmt, h.dir);
    if (config_load_buffer("fuzz_http.yaml", yaml, (size_t)n, &h.cfg, err, sizeof err) !=
        TANDEM_OK)
        die(err);
    if (h.cfg->n_models != N_MODELS)
        die("the config's models changed");
}

/* The models as the api and the pipelines see them, and the scheduler's
 * specs: nothing is planned, since nothing is ever loaded. */
static void add_models(void) {
    for (size_t i = 0; i < N_MODELS; i++) {
        const struct config_model *cm = &h.cfg->models[i];
        struct sched_model_spec spec = {.name = cm->name, .path = cm->path,
                                        .settings = cm->settings, .device = PLACE_CPU,
                                        .keep_alive_ms = cm->keep_alive_ms,
                                        .load_timeout_ms = cm->load_timeout_ms};
        size_t index;
        if (sched_add_model(h.sched, &spec, &index) != TANDEM_OK)
            die("sched_add_model failed");
        h.models[i] = (struct api_model){.cm = cm, .sched_index = index,
                                         .remote_index = SIZE_MAX,
                                         .decision_type = decision_types[i], .arch = "llama",
                                         .n_ctx = 2048, .sha256 = "", .file_sha256 = ""};
        h.pmodels[i] = (struct pipeline_model){.sched_index = index, .remote_index = SIZE_MAX,
                                               .decision_type = decision_types[i],
                                               .max_options = s1_max_options(decision_types[i]),
                                               .file_sha256 = ""};
    }
}

static void setup(void) {
    load_config();
    struct sched_params sp = {.engine = "/nonexistent/llama-server", .log_dir = h.dir,
                              .host_budget = 1ull << 30, .queue_depth = h.cfg->queue_depth,
                              .group_limit = h.cfg->group_limit,
                              .max_wait_ms = h.cfg->starvation_ms,
                              .stop_grace_ms = h.cfg->stop_grace_ms,
                              .max_restarts = h.cfg->max_restarts};
    char err[1024];
    if (!(h.base = event_base_new()) || !(h.metrics = prom_new()))
        die("out of memory");
    sp.metrics = h.metrics;
    if (!(h.sched = sched_new(h.base, &sp)))
        die("sched_new failed");
    add_models();
    /* nothing can load from here on: whatever would need an engine is refused */
    sched_shutdown(h.sched, NULL, NULL);
    if (pipeline_set_new(h.cfg, h.pmodels, &h.pipelines, err, sizeof err) != TANDEM_OK)
        die(err);
    struct api_params ap = {.cfg = h.cfg, .models = h.models, .n_models = N_MODELS,
                            .default_model = 0, .sched = h.sched, .metrics = h.metrics,
                            .pipelines = h.pipelines};
    if (!(h.api = api_new(&ap)))
        die("api_new failed");
    api_set_phase(h.api, API_SERVING);
    atexit(teardown);
}

/* --- the request, split as libevent splits it ----------------------------------------- */

struct request {
    enum evhttp_cmd_type method;
    char *uri;
    struct evkeyvalq headers;
    const uint8_t *body;
    size_t len;
};

/* The next line of in[*pos, size) as evbuffer_readln(EVBUFFER_EOL_CRLF) reads
 * it (up to LF, without a CR before it), NUL-terminated (malloc'd; libevent's
 * parser reads it as a C string too); NULL when no LF is left. */
static char *read_line(const uint8_t *in, size_t size, size_t *pos) {
    const uint8_t *lf = memchr(in + *pos, '\n', size - *pos);
    if (!lf)
        return NULL;
    size_t n = (size_t)(lf - (in + *pos));
    char *line = malloc(n + 1);
    if (!line)
        die("out of memory");
    memcpy(line, in + *pos, n);
    if (n && line[n - 1] == '\r')
        n--;
    line[n] = '\0';
    *pos += (size_t)(lf - (in + *pos)) + 1;
    return line;
}

static bool method_of(const char *name, enum evhttp_cmd_type *out) {
    static const struct { const char *name; enum evhttp_cmd_type m; } methods[] = {
        {"GET", EVHTTP_REQ_GET}, {"POST", EVHTTP_REQ_POST}, {"HEAD", EVHTTP_REQ_HEAD},
        {"PUT", EVHTTP_REQ_PUT}, {"DELETE", EVHTTP_REQ_DELETE},
        {"OPTIONS", EVHTTP_REQ_OPTIONS}, {"TRACE", EVHTTP_REQ_TRACE},
        {"CONNECT", EVHTTP_REQ_CONNECT}, {"PATCH", EVHTTP_REQ_PATCH}};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (!strcmp(name, methods[i].name)) {
            *out = methods[i].m;
            return true;
        }
    return false; /* libevent answers 501 itself */
}

/* "METHOD SP target SP HTTP/x.y", x at most 1. */
static bool parse_request_line(char *line, struct request *rq) {
    char *method = strsep(&line, " ");
    char *uri = line ? strsep(&line, " ") : NULL;
    char *version = line ? strsep(&line, " ") : NULL;
    int major, minor;
    char extra;
    if (!version || line || sscanf(version, "HTTP/%d.%d%c", &major, &minor, &extra) != 2 ||
        major > 1 || !method_of(method, &rq->method))
        return false;
    rq->uri = strdup(uri);
    return rq->uri != NULL;
}

static void rtrim_lws(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
}

/* A folded line continues the last header's value, joined by one space. */
static bool append_to_last(struct evkeyvalq *headers, char *line) {
    struct evkeyval *last = TAILQ_LAST(headers, evkeyvalq);
    if (!last)
        return false;
    line += strspn(line, " \t");
    rtrim_lws(line);
    size_t old = strlen(last->value), add = strlen(line);
    char *v = realloc(last->value, old + add + 2);
    if (!v)
        die("out of memory");
    v[old] = ' ';
    memcpy(v + old + 1, line, add + 1);
    last->value = v;
    return true;
}

/* Header lines up to the empty one. */
static bool parse_headers(const uint8_t *in, size_t size, size_t *pos, struct evkeyvalq *h) {
    char *line;
    while ((line = read_line(in, size, pos))) {
        bool ok = true, end = !*line;
        if (!end && (*line == ' ' || *line == '\t')) {
            ok = append_to_last(h, line);
        } else if (!end) {
            char *value = line, *name = strsep(&value, ":");
            if (value) {
                value += strspn(value, " ");
                rtrim_lws(value);
            }
            ok = value && evhttp_add_header(h, name, value) == 0;
        }
        free(line);
        if (!ok || end)
            return ok;
    }
    return false; /* no empty line: libevent waits for more */
}

/* The body: Content-Length bytes (or what there is of them) for the methods
 * libevent reads one for; none without Content-Length. */
static bool take_body(const uint8_t *in, size_t size, size_t pos, struct request *rq) {
    rq->body = in + pos;
    rq->len = 0;
    if (rq->method != EVHTTP_REQ_POST && rq->method != EVHTTP_REQ_PUT &&
        rq->method != EVHTTP_REQ_PATCH)
        return true;
    const char *te = evhttp_find_header(&rq->headers, "Transfer-Encoding");
    if (te && !strcasecmp(te, "chunked"))
        return false; /* libevent joins the chunks before tandem sees the body */
    const char *cl = evhttp_find_header(&rq->headers, "Content-Length");
    const char *conn = evhttp_find_header(&rq->headers, "Connection");
    if (!cl)
        return !conn || !strcasecmp(conn, "close"); /* else libevent refuses it */
    char *end;
    long long n = strtoll(cl, &end, 10);
    if (!*cl || *end || n < 0)
        return false;
    rq->len = (unsigned long long)n < size - pos ? (size_t)n : size - pos;
    return true;
}

static bool parse_request(const uint8_t *in, size_t size, struct request *rq) {
    size_t pos = 0;
    char *line = read_line(in, size, &pos);
    bool ok = line && parse_request_line(line, rq);
    free(line);
    return ok && parse_headers(in, size, &pos, &rq->headers) && take_body(in, size, pos, rq);
}

/* --- the answer and its checks -------------------------------------------------------- */

struct answer {
    unsigned count;
    int status;
    struct evkeyvalq headers;
    char *body;
    size_t len;
};

static void on_reply(void *user, int status, const struct evkeyvalq *headers, const void *body,
                     size_t len) {
    struct answer *a = user;
    if (a->count++)
        return; /* a second answer: check_answer fails it */
    a->status = status;
    for (const struct evkeyval *kv = TAILQ_FIRST(headers); kv; kv = TAILQ_NEXT(kv, next))
        if (evhttp_add_header(&a->headers, kv->key, kv->value))
            die("an answer header cannot be copied");
    if (!(a->body = malloc(len + 1)))
        die("out of memory");
    memcpy(a->body, body, len);
    a->body[len] = '\0';
    a->len = len;
}

/* The statuses docs/serve.md gives these routes when no engine is reached (304: the
 * dashboard's files, revalidated by ETag: check_answer). */
static bool documented(int status) {
    static const int ok[] = {200, 202, 204, 304, 400, 401, 403, 404, 405, 409, 413, 415, 501,
                             503};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (status == ok[i])
            return true;
    return false;
}

static bool valid_id(const char *id) {
    if (!id || !*id || strlen(id) >= 64)
        return false;
    for (const char *p = id; *p; p++)
        if (*p <= ' ' || *p >= 0x7f)
            return false;
    return true;
}

static void check_request_id(const struct request *rq, const struct answer *a) {
    const char *got = evhttp_find_header(&a->headers, "x-request-id");
    const char *sent = evhttp_find_header(&rq->headers, "x-request-id");
    if (!valid_id(sent))
        sent = evhttp_find_header(&rq->headers, "x-typesafe-request-id");
    if (!got)
        die("an answer without x-request-id");
    if (valid_id(sent)) {
        if (strcmp(got, sent))
            die("x-request-id is not the client's");
        return;
    }
    bool generated = strlen(got) == 36 && !strncmp(got, "req_", 4);
    for (size_t i = 4; generated && i < 36; i++)
        generated = isxdigit((unsigned char)got[i]) && !isupper((unsigned char)got[i]);
    if (!generated)
        die("a generated x-request-id is not req_<32 hex digits>");
}

static void check_error_body(const struct answer *a) {
    json_t *b = json_loadb(a->body, a->len, 0, NULL);
    json_t *e = json_object_get(b, "error"), *d = json_object_get(b, "detail");
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    json_t *param = json_object_get(e, "param");
    if (!type || !*type || !msg || !*msg)
        die("an error body without error.type and error.message");
    if (json_integer_value(json_object_get(e, "code")) != a->status ||
        !json_is_integer(json_object_get(e, "code")))
        die("error.code is not the status");
    if (param && !json_is_string(param))
        die("error.param is not a string");
    if (!json_equal(json_object_get(d, "error_type"), json_object_get(e, "type")) ||
        !json_equal(json_object_get(d, "message"), json_object_get(e, "message")))
        die("detail differs from error");
    json_decref(b);
}

/* CORS: every answer varies with Origin; only the allowed origin is ever echoed, and
 * never on a 403 (a refused Host or Origin); 204 answers OPTIONS only. */
static void check_cors(const struct request *rq, const struct answer *a) {
    const char *acao = evhttp_find_header(&a->headers, "Access-Control-Allow-Origin");
    const char *origin = evhttp_find_header(&rq->headers, "Origin");
    const char *vary = evhttp_find_header(&a->headers, "Vary");
    if (!vary || strcasecmp(vary, "Origin"))
        die("an answer without Vary: Origin");
    if (acao && (!origin || strcasecmp(origin, FUZZ_ORIGIN) || strcmp(acao, origin)))
        die("Access-Control-Allow-Origin for an origin that is not allowed");
    if (acao && a->status == 403)
        die("a 403 with Access-Control-Allow-Origin");
    if (a->status == 204 && rq->method != EVHTTP_REQ_OPTIONS)
        die("204 for a method other than OPTIONS");
    if (a->status == 304 && (!evhttp_find_header(&rq->headers, "If-None-Match") || a->len))
        die("304 without an ETag to match, or with a body");
}

static void check_answer(const struct request *rq, const struct answer *a) {
    if (a->count != 1)
        die(a->count ? "a request answered twice" : "a request not answered");
    if (!documented(a->status))
        die("an undocumented status");
    check_request_id(rq, a);
    const char *node = evhttp_find_header(&a->headers, "x-tandem-node");
    const char *ct = evhttp_find_header(&a->headers, "Content-Type");
    if (!node || strcmp(node, FUZZ_NODE))
        die("an answer without x-tandem-node");
    if (a->status >= 400) {
        if (!ct || strcmp(ct, "application/json"))
            die("an error that is not application/json");
        check_error_body(a);
    }
    if (a->status == 401 && !evhttp_find_header(&a->headers, "WWW-Authenticate"))
        die("401 without WWW-Authenticate");
    if (a->status == 405 && !evhttp_find_header(&a->headers, "Allow"))
        die("405 without Allow");
    if (a->status == 503 && !evhttp_find_header(&a->headers, "Retry-After"))
        die("503 without Retry-After");
    check_cors(rq, a);
    if (ct && !strcmp(ct, "application/json")) {
        json_t *j = json_loadb(a->body, a->len, 0, NULL);
        if (!json_is_object(j))
            die("a JSON answer that does not parse as an object");
        json_decref(j);
    }
}

/* Nothing may have started an engine, and nothing may be left in flight. */
static void check_daemon(void) {
    if (api_calls_in_flight(h.api))
        die("a call is still in flight after its answer");
    for (size_t i = 0; i < N_MODELS; i++)
        if (sched_model_state(h.sched, i) != SCHED_UNLOADED)
            die("a model left the unloaded state: an engine would have started");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!h.api)
        setup();
    struct request rq = {0};
    TAILQ_INIT(&rq.headers);
    struct answer a = {0};
    TAILQ_INIT(&a.headers);
    struct http_req *r;
    if (parse_request(data, size, &rq) &&
        http_req_new_detached(&(struct http_detached_params){
                                  .method = rq.method, .uri = rq.uri, .headers = &rq.headers,
                                  .body = rq.body, .len = rq.len,
                                  .max_body_bytes = h.cfg->max_body_bytes, .reply = on_reply,
                                  .user = &a},
                              &r) == TANDEM_OK) {
        api_handle(r, h.api);
        event_base_loop(h.base, EVLOOP_NONBLOCK);
        check_answer(&rq, &a);
        check_daemon();
    }
    evhttp_clear_headers(&rq.headers);
    evhttp_clear_headers(&a.headers);
    free(rq.uri);
    free(a.body);
    return 0;
}
