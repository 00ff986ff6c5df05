/* libFuzzer target for the Model Context Protocol core (serve/mcp.c): the
 * input is one message, as a line of `tandem mcp`'s stdio or a POST /mcp
 * body, handled by a fresh session whose catalog has the pipeline decide
 * (decider, then verifier) and those two decision models; then again on a
 * session that expects the HTTP headers of a current-revision tools/call;
 * then, when it has several lines, line by line on one session (a stdio
 * conversation, which can cross from one era to the other). Every message
 * gets an action: MCP_SEND carries a JSON-RPC 2.0 response that serializes
 * (never NULL: a client waits for it) and has an HTTP status of 200, 400 or
 * 404; MCP_CALL a request for tandem's API (an id, a method, a /v1/ path, a
 * body exactly for a POST, the models as an array); MCP_CANCEL an id;
 * MCP_LISTEN an acknowledgement and an id whose change notification and
 * closing response can be made; MCP_NOTHING nothing. A call's answer is the
 * same bytes again, as a 200, a 400, a 429 with Retry-After and a status 0
 * (the transport's error text): each must give a result with the call's id.
 * The input as GET /v1/status gives the call's phase, and that phase's line
 * a notifications/progress when the client asked for progress. Last, the
 * input is the catalog itself (GET /v1/pipelines and GET /v1/models at once):
 * setting it twice is no change, tools/list must answer and a tools/call of
 * each tool must act. Seeded by tests/fuzz/make_seeds.py (target "mcp"): the
 * handshake, every tool's call with the route's answer in the same message,
 * the current revision's envelope, conversations, cancellation, errors.
 * Built by `make fuzz`. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile size_t sink;

static const char pipelines_body[] =
    "{\"pipelines\":[{\"name\":\"decide\",\"description\":\"Pick a fix\","
    "\"decide\":{\"model\":\"decider\",\"questions\":[]},"
    "\"verify\":[{\"model\":\"verifier\",\"questions\":[]}]}]}";
static const char models_body[] =
    "{\"data\":[{\"id\":\"decider\",\"decision_type\":\"openjev\"},"
    "{\"id\":\"chat\",\"decision_type\":\"\"},"
    "{\"id\":\"verifier\",\"decision_type\":\"openjev\"}]}";

/* A session with the catalog pipelines_body + models_body; NULL on OOM. */
static struct mcp *new_session(void) {
    struct mcp *m = mcp_new();
    if (!m)
        return NULL;
    json_t *pipelines = json_loads(pipelines_body, 0, NULL);
    json_t *models = json_loads(models_body, 0, NULL);
    mcp_set_catalog(m, pipelines, models);
    json_decref(pipelines);
    json_decref(models);
    return m;
}

/* msg serializes, as the transport will write it. */
static void serialize(const json_t *msg) {
    char *s = json_dumps(msg, JSON_COMPACT);
    if (!s)
        abort();
    sink += strlen(s);
    free(s); /* jansson's default allocator */
}

/* A JSON-RPC 2.0 response: "2.0", an id, exactly one of result and error. */
static void check_response(const json_t *msg) {
    if (!json_is_object(msg) ||
        strcmp(json_string_value(json_object_get(msg, "jsonrpc")) ?: "", "2.0") ||
        !json_object_get(msg, "id") ||
        !json_object_get(msg, "result") == !json_object_get(msg, "error"))
        abort();
    const json_t *e = json_object_get(msg, "error");
    if (e && (!json_is_integer(json_object_get(e, "code")) ||
              !json_is_string(json_object_get(e, "message"))))
        abort();
    serialize(msg);
}

/* A tool result for call: a response with its id, one text content, isError. */
static void check_result(const struct mcp_call *call, const json_t *msg, bool is_error) {
    check_response(msg);
    const json_t *r = json_object_get(msg, "result");
    const json_t *text = json_object_get(json_array_get(json_object_get(r, "content"), 0), "text");
    if (!json_equal(json_object_get(msg, "id"), call->id) || !json_is_string(text) ||
        !json_is_boolean(json_object_get(r, "isError")))
        abort();
    if (is_error && (!json_is_true(json_object_get(r, "isError")) ||
                     json_object_get(r, "structuredContent")))
        abort();
}

static void check_call(const struct mcp_call *c) {
    bool post = c->method && !strcmp(c->method, "POST");
    bool get = c->method && !strcmp(c->method, "GET");
    if (!c->id || (!post && !get) || strncmp(c->path, "/v1/", 4) || !c->body != get ||
        (c->body && !json_is_object(c->body)) || !json_is_array(c->models) || c->timeout_ms < 0 ||
        !c->tool[0] || !c->version[0])
        abort();
    if (c->progress_token && !json_is_string(c->progress_token) &&
        !json_is_integer(c->progress_token))
        abort();
}

/* Runs call against the input as the route's answer, in every way it can end. */
static void answer_call(const struct mcp_call *c, const uint8_t *data, size_t size) {
    static const struct {
        int status;
        long retry_after_s;
    } answers[] = {{200, -1}, {400, -1}, {429, 3}, {0, -1}};
    for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++) {
        json_t *r = mcp_call_result(c, answers[i].status, (const char *)data, size,
                                    answers[i].retry_after_s);
        if (!r)
            abort(); /* NULL only on OOM */
        check_result(c, r, answers[i].status != 200);
        json_decref(r);
    }
    json_t *status = json_loadb((const char *)data, size, 0, NULL);
    char detail[160];
    memset(detail, 'x', sizeof detail);
    const char *phase = mcp_phase(status, c->models, detail, sizeof detail);
    if (strcmp(phase, "queued") && strcmp(phase, "loading") && strcmp(phase, "running"))
        abort();
    if (!memchr(detail, '\0', sizeof detail))
        abort();
    if (c->progress_token) {
        json_t *p = mcp_progress(c->progress_token, 1, detail);
        if (!p || !json_equal(json_object_get(json_object_get(p, "params"), "progressToken"),
                              c->progress_token))
            abort();
        serialize(p);
        json_decref(p);
    }
    json_decref(status);
}

static bool id_valid(const json_t *id) { return json_is_string(id) || json_is_integer(id); }

/* A subscription's acknowledgement, change notification and closing response. */
static void check_listen(const struct mcp_out *out) {
    if (!json_is_object(out->msg) || json_object_get(out->msg, "id"))
        abort();
    serialize(out->msg);
    json_t *changed = mcp_listen_changed(out->id);
    json_t *closed = mcp_listen_close(out->id);
    if (!changed || !closed || !json_equal(json_object_get(closed, "id"), out->id))
        abort();
    serialize(changed);
    check_response(closed);
    json_decref(changed);
    json_decref(closed);
}

/* Handles msg[len] on m and checks the action; answers a call with data. */
static void handle(struct mcp *m, const char *msg, size_t len, const uint8_t *data, size_t size) {
    struct mcp_out out;
    mcp_handle(m, msg, len, &out);
    switch (out.action) {
    case MCP_NOTHING:
        if (out.msg || out.id || out.call.id)
            abort();
        break;
    case MCP_SEND:
        if (!out.msg || out.id || out.call.id)
            abort();
        check_response(out.msg);
        int status = mcp_http_status(out.msg);
        if (status != 200 && status != 400 && status != 404)
            abort();
        break;
    case MCP_CALL:
        if (out.msg || out.id)
            abort();
        check_call(&out.call);
        answer_call(&out.call, data, size);
        break;
    case MCP_CANCEL:
        if (out.msg || out.call.id || !id_valid(out.id))
            abort();
        break;
    case MCP_LISTEN:
        if (!out.msg || out.call.id || !id_valid(out.id))
            abort();
        check_listen(&out);
        break;
    default:
        abort();
    }
    json_decref(out.msg);
    json_decref(out.id);
    mcp_call_clear(&out.call);
}

/* Each line of the input in turn on one session, as `tandem mcp` reads stdio:
 * the handshake, then requests, in either era. Each call is answered with
 * its own line. */
static void as_lines(const uint8_t *data, size_t size) {
    if (!memchr(data, '\n', size))
        return;
    struct mcp *m = new_session();
    if (!m)
        return;
    const uint8_t *p = data, *end = data + size;
    while (p < end) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        handle(m, (const char *)p, n, p, n);
        p += n + 1;
    }
    mcp_free(m);
}

/* The input as the daemon's catalog: the tools it gives must list and act. */
static void as_catalog(const json_t *catalog, const uint8_t *data, size_t size) {
    struct mcp *m = mcp_new();
    if (!m)
        return;
    mcp_set_catalog(m, catalog, catalog);
    if (mcp_set_catalog(m, catalog, catalog))
        abort(); /* the same catalog again changes nothing */
    static const char list[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
    struct mcp_out out;
    mcp_handle(m, list, sizeof list - 1, &out);
    if (out.action != MCP_SEND || !out.msg)
        abort();
    check_response(out.msg);
    size_t i;
    const json_t *t;
    json_array_foreach(json_object_get(json_object_get(out.msg, "result"), "tools"), i, t) {
        json_t *call = json_pack("{sssiss s{sO s{ss s{ss}}}}", "jsonrpc", "2.0", "id", 2,
                                 "method", "tools/call", "params", "name",
                                 json_object_get(t, "name"), "arguments", "state", "s",
                                 "candidates", "a", "b");
        char *text = call ? json_dumps(call, JSON_COMPACT) : NULL;
        if (text)
            handle(m, text, strlen(text), data, size);
        free(text);
        json_decref(call);
    }
    json_decref(out.msg);
    mcp_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct mcp *m = new_session();
    if (!m)
        return 0;
    handle(m, (const char *)data, size, data, size);
    sink += mcp_initialized(m);
    mcp_free(m);

    /* over HTTP, with the headers of a current-revision tool call */
    m = new_session();
    if (!m)
        return 0;
    mcp_expect_headers(m, MCP_MODERN_VERSION, "tools/call");
    handle(m, (const char *)data, size, data, size);
    mcp_free(m);

    as_lines(data, size);

    json_t *catalog = json_loadb((const char *)data, size, 0, NULL);
    if (catalog)
        as_catalog(catalog, data, size);
    json_decref(catalog);
    return 0;
}
