/* Unit tests for mcp: the Model Context Protocol core, message in, action out.
 *
 * The handshake (initialize, notifications/initialized, the revisions), ping,
 * every JSON-RPC error with its code and id, the current stateless revision
 * (the params._meta envelope, server/discover, -32022 for a revision outside
 * the session's era, subscriptions/listen, the HTTP headers and statuses),
 * the tools built from a catalog (GET /v1/pipelines and GET /v1/models
 * bodies) and whether they changed, tools/call turned into the route's
 * request, notifications/cancelled, the route's answers made tool results
 * (docs/pipelines.md's answer with its exact summary, a rejection, System
 * One, status, each error status, bytes that are not UTF-8), progress and
 * list_changed, the phase of a call from GET /v1/status, and what jansson
 * allocates being released. Each test builds its own session; nothing needs
 * a daemon. tests/fuzz/fuzz_mcp.c checks the same contracts on any input. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/mcp.h"
#include "version.h"

#define PIPELINES                                                                              \
    "{\"pipelines\":[{\"name\":\"decide\",\"description\":\"Pick a fix\","                     \
    "\"decide\":{\"model\":\"decider\",\"questions\":[]},"                                     \
    "\"verify\":[{\"model\":\"verifier\",\"questions\":[]}]}]}"
#define MODELS                                                                                 \
    "{\"data\":[{\"id\":\"decider\",\"decision_type\":\"openjev\"},"                           \
    "{\"id\":\"chat\",\"decision_type\":\"\"},"                                                \
    "{\"id\":\"verifier\",\"decision_type\":\"openjev\"}]}"

/* docs/pipelines.md, POST /v1/pipelines/{name}: the 200 answer, the elided
 * numbers written out. */
#define ACCEPTED                                                                               \
    "{\"pipeline\": \"decide\", \"request_id\": \"req_7\", \"verdict\": \"accepted\","         \
    " \"choice\": \"stop\", \"reason\": \"stop passed every threshold (attempt 1)\","          \
    " \"decide\": {\"model\": \"decider\", \"answers\": {\"choice\": {\"type\": \"choice\","   \
    " \"choice\": \"stop\", \"probabilities\": {\"reduce\": 0.3264938593177823,"               \
    " \"stop\": 0.37902133899104984, \"nothing\": 0.2944848016911678},"                         \
    " \"confidence\": 0.06853200848657477}}},"                                                 \
    " \"attempts\": [{\"attempt\": 1, \"candidate\": \"stop\", \"decide\": {\"type\":"         \
    " \"choice\", \"choice\": \"stop\", \"probabilities\": {\"reduce\": 0.3264938593177823,"   \
    " \"stop\": 0.37902133899104984, \"nothing\": 0.2944848016911678},"                         \
    " \"confidence\": 0.06853200848657477},"                                                   \
    " \"verify\": [{\"stage\": 0, \"model\": \"verifier\", \"questions\": {"                   \
    "\"consistent\": {\"answer\": {\"type\": \"noul\", \"noul\": 0.9400501158817478},"         \
    " \"threshold\": \">= 0.5\", \"passed\": true},"                                           \
    " \"on_topic\": {\"answer\": {\"type\": \"noul\", \"noul\": 0.861306765208157},"           \
    " \"threshold\": \">= 0.5\", \"passed\": true}}, \"passed\": true}], \"passed\": true}],"  \
    " \"models\": [{\"role\": \"decide\", \"name\": \"decider\", \"sha256\": \"58b13e3a\"},"   \
    " {\"role\": \"verify\", \"name\": \"verifier\", \"sha256\": \"9d583a3e\"}],"              \
    " \"timing\": {\"total_ms\": 2101, \"queued_ms\": 10, \"loading_ms\": 880,"                \
    " \"running_ms\": 1211, \"stages\": [{\"stage\": \"decide\", \"model\": \"decider\","      \
    " \"queued_ms\": 8, \"loading_ms\": 210, \"running_ms\": 540}]},"                          \
    " \"usage\": {\"input_tokens\": 356}}"

/* --- helpers ------------------------------------------------------------------------------ */

static json_t *parse(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    cr_assert_not_null(j, "bad test JSON: %s: %s", je.text, text);
    return j;
}

static void handle(struct mcp *m, const char *msg, struct mcp_out *out) {
    mcp_handle(m, msg, strlen(msg), out);
}

/* Handles msg, which must be answered at once; returns the answer (caller owns). */
static json_t *answer(struct mcp *m, const char *msg) {
    struct mcp_out out;
    handle(m, msg, &out);
    cr_assert_eq(out.action, MCP_SEND, "%s: action %d", msg, out.action);
    cr_assert_not_null(out.msg, "%s: MCP_SEND without a message", msg);
    cr_assert_null(out.id);
    cr_assert_null(out.call.id);
    return out.msg;
}

/* Handles msg, which must be a call; fills *call (caller clears it). */
static void call(struct mcp *m, const char *msg, struct mcp_call *c) {
    struct mcp_out out;
    handle(m, msg, &out);
    cr_assert_eq(out.action, MCP_CALL, "%s: action %d", msg, out.action);
    cr_assert_null(out.msg);
    *c = out.call;
}

static void assert_nothing(struct mcp *m, const char *msg) {
    struct mcp_out out;
    handle(m, msg, &out);
    cr_assert_eq(out.action, MCP_NOTHING, "%s: action %d", msg, out.action);
    cr_assert_null(out.msg);
    cr_assert_null(out.id);
    cr_assert_null(out.call.id);
}

static void assert_json_eq(const json_t *got, const char *want) {
    json_t *w = parse(want);
    char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    cr_assert(json_equal(got, w), "got %s\nwant %s", g ? g : "(null)", want);
    free(g); /* jansson's default allocator */
    json_decref(w);
}

static const json_t *get(const json_t *j, const char *key) { return json_object_get(j, key); }

static const json_t *result(const json_t *msg) {
    cr_assert_str_eq(json_string_value(get(msg, "jsonrpc")), "2.0");
    cr_assert_null(get(msg, "error"));
    const json_t *r = get(msg, "result");
    cr_assert(json_is_object(r));
    return r;
}

/* Asserts msg is a JSON-RPC error with code and id (NULL: null); returns its message. */
static const char *error_of(const json_t *msg, int code, const json_t *id) {
    cr_assert_str_eq(json_string_value(get(msg, "jsonrpc")), "2.0");
    cr_assert_null(get(msg, "result"));
    const json_t *e = get(msg, "error");
    cr_assert_eq(json_integer_value(get(e, "code")), code, "code %lld, want %d",
                 (long long)json_integer_value(get(e, "code")), code);
    if (id)
        cr_assert(json_equal(get(msg, "id"), (json_t *)id));
    else
        cr_assert(json_is_null(get(msg, "id")));
    const char *text = json_string_value(get(e, "message"));
    cr_assert_not_null(text);
    cr_assert_gt(strlen(text), 0);
    return text;
}

/* Handles msg, which must be answered with the error code for the integer id;
 * returns the answer (caller owns). */
static json_t *answer_error(struct mcp *m, const char *msg, int code, json_int_t id) {
    json_t *a = answer(m, msg), *want = json_integer(id);
    error_of(a, code, want);
    json_decref(want);
    return a;
}

static void assert_error(struct mcp *m, const char *msg, int code, const json_t *id) {
    json_t *a = answer(m, msg);
    error_of(a, code, id);
    json_decref(a);
}

/* A session that finished the handshake at version. */
static struct mcp *session_at(const char *version) {
    struct mcp *m = mcp_new();
    cr_assert_not_null(m);
    char msg[256];
    snprintf(msg, sizeof msg,
             "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
             "\"protocolVersion\":\"%s\",\"capabilities\":{},"
             "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}",
             version);
    json_decref(answer(m, msg));
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    return m;
}

/* A session at version with the PIPELINES/MODELS catalog. */
static struct mcp *catalog_at(const char *version) {
    struct mcp *m = session_at(version);
    json_t *p = parse(PIPELINES), *mo = parse(MODELS);
    cr_assert(mcp_set_catalog(m, p, mo));
    json_decref(p);
    json_decref(mo);
    return m;
}

/* A session of the current revision (its first request, server/discover, had
 * the envelope) with the PIPELINES/MODELS catalog. */
static struct mcp *catalog_at_modern(void) {
    struct mcp *m = mcp_new();
    cr_assert_not_null(m);
    json_decref(answer(m, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"server/discover\","
                          "\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                          "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}"));
    json_t *p = parse(PIPELINES), *mo = parse(MODELS);
    cr_assert(mcp_set_catalog(m, p, mo));
    json_decref(p);
    json_decref(mo);
    return m;
}

/* tools/list's tools (caller decrefs *msg). */
static const json_t *tools_list(struct mcp *m, json_t **msg) {
    *msg = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
    const json_t *tools = get(result(*msg), "tools");
    cr_assert(json_is_array(tools));
    return tools;
}

/* Asserts the tools' names, in order, are the JSON array want. */
static void assert_tool_names(const json_t *tools, const char *want) {
    json_t *names = json_array();
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) json_array_append(names, json_object_get(t, "name"));
    assert_json_eq(names, want);
    json_decref(names);
}

static const json_t *tool_named(const json_t *tools, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        if (!strcmp(json_string_value(get(t, "name")), name))
            return t;
    }
    cr_assert_fail("no tool %s", name);
    return NULL;
}

/* A call as mcp_handle makes it, for mcp_call_result. */
static struct mcp_call made_call(enum mcp_tool_kind kind, const char *tool, const char *version) {
    struct mcp_call c;
    memset(&c, 0, sizeof c);
    c.id = json_integer(9);
    c.kind = kind;
    snprintf(c.tool, sizeof c.tool, "%s", tool);
    snprintf(c.version, sizeof c.version, "%s", version);
    c.method = kind == MCP_TOOL_STATUS ? "GET" : "POST";
    return c;
}

/* mcp_call_result on body; asserts the response's shape and isError, returns the
 * message (caller owns) and its text in *text. */
static json_t *tool_result(const struct mcp_call *c, int status, const char *body, long retry,
                           bool is_error, const char **text) {
    json_t *msg = mcp_call_result(c, status, body, body ? strlen(body) : 0, retry);
    cr_assert_not_null(msg, "status %d: no result", status);
    cr_assert(json_equal(get(msg, "id"), c->id));
    const json_t *r = result(msg);
    cr_assert_eq(json_is_true(get(r, "isError")), is_error);
    cr_assert(json_is_boolean(get(r, "isError")));
    const json_t *content = get(r, "content");
    cr_assert_eq(json_array_size(content), 1);
    cr_assert_str_eq(json_string_value(get(json_array_get(content, 0), "type")), "text");
    *text = json_string_value(get(json_array_get(content, 0), "text"));
    cr_assert_not_null(*text);
    if (is_error)
        cr_assert_null(get(r, "structuredContent"));
    return msg;
}

/* --- the handshake ------------------------------------------------------------------------ */

Test(mcp, initialize_echoes_a_known_version_and_names_the_server) {
    struct mcp *m = mcp_new();
    struct mcp_out out;
    handle(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
              "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{}}}", &out);
    cr_assert_eq(out.action, MCP_SEND);
    cr_assert(out.handshake, "an accepted initialize begins a handshake");
    json_t *a = out.msg;
    cr_assert_eq(json_integer_value(get(a, "id")), 1);
    const json_t *r = result(a);
    cr_assert_str_eq(json_string_value(get(r, "protocolVersion")), "2025-06-18");
    cr_assert(json_is_true(get(get(get(r, "capabilities"), "tools"), "listChanged")));
    cr_assert_str_eq(json_string_value(get(get(r, "serverInfo"), "name")), "tandem");
    cr_assert_str_eq(json_string_value(get(get(r, "serverInfo"), "version")), TANDEM_VERSION);
    cr_assert(json_is_string(get(r, "instructions")));
    json_decref(a);
    mcp_free(m);
}

Test(mcp, initialize_echoes_every_revision_of_the_handshake) {
    cr_assert_str_eq(MCP_PROTOCOL_VERSIONS[0], "2025-11-25");
    size_t n = 0;
    for (; MCP_PROTOCOL_VERSIONS[n]; n++) {
        struct mcp *m = mcp_new();
        char msg[200];
        snprintf(msg, sizeof msg,
                 "{\"jsonrpc\":\"2.0\",\"id\":\"i\",\"method\":\"initialize\",\"params\":{"
                 "\"protocolVersion\":\"%s\"}}",
                 MCP_PROTOCOL_VERSIONS[n]);
        json_t *a = answer(m, msg);
        cr_assert_str_eq(json_string_value(get(result(a), "protocolVersion")),
                         MCP_PROTOCOL_VERSIONS[n]);
        json_decref(a);
        mcp_free(m);
    }
    cr_assert_eq(n, 4);
}

Test(mcp, initialize_answers_the_newest_revision_for_an_unknown_one) {
    struct mcp *m = mcp_new();
    json_t *a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                          "\"protocolVersion\":\"1999-01-01\"}}");
    cr_assert_str_eq(json_string_value(get(result(a), "protocolVersion")), "2025-11-25");
    json_decref(a);
    mcp_free(m);
}

Test(mcp, initialize_without_a_protocol_version_is_invalid_params) {
    struct mcp *m = mcp_new();
    json_t *id = json_integer(4);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{}}",
                 MCP_INVALID_PARAMS, id);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\"}", MCP_INVALID_PARAMS, id);
    struct mcp_out out;
    handle(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{}}", &out);
    cr_assert_not(out.handshake, "a refused initialize begins nothing");
    json_decref(out.msg);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"initialize\",\"params\":{"
                    "\"protocolVersion\":20250618}}",
                 MCP_INVALID_PARAMS, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, notifications_initialized_finishes_the_handshake_and_is_not_answered) {
    struct mcp *m = mcp_new();
    cr_assert_not(mcp_initialized(m));
    json_decref(answer(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                          "\"protocolVersion\":\"2025-06-18\"}}"));
    cr_assert_not(mcp_initialized(m));
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    cr_assert(mcp_initialized(m));
    mcp_free(m);
}

Test(mcp, notifications_and_responses_produce_nothing) {
    struct mcp *m = mcp_new();
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}");
    /* a request's method without an id is a notification: never answered */
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"status\"}}");
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"no/such/method\"}");
    /* responses to requests tandem never sent */
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{}}");
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-1,\"message\":\"m\"}}");
    cr_assert_not(mcp_initialized(m));
    mcp_free(m);
}

Test(mcp, set_version_takes_only_a_known_revision) {
    struct mcp *m = mcp_new();
    cr_assert_not(mcp_set_version(m, "1999-01-01"));
    cr_assert_not(mcp_set_version(m, NULL));
    cr_assert_not(mcp_set_version(m, "2026-07-28"));
    cr_assert(mcp_set_version(m, "2024-11-05"));
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"status\"}}", &c);
    cr_assert_str_eq(c.version, "2024-11-05");
    mcp_call_clear(&c);
    cr_assert_not(mcp_set_version(m, "bogus"));
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"status\"}}", &c);
    cr_assert_str_eq(c.version, "2024-11-05", "a refused revision changed nothing");
    mcp_call_clear(&c);
    mcp_free(m);
}

/* --- ping and errors ---------------------------------------------------------------------- */

Test(mcp, ping_answers_an_empty_result_with_the_same_id) {
    struct mcp *m = mcp_new();
    json_t *a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"method\":\"ping\"}");
    assert_json_eq(a, "{\"jsonrpc\":\"2.0\",\"id\":\"a-1\",\"result\":{}}");
    json_decref(a);
    a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\",\"params\":{}}");
    assert_json_eq(a, "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}");
    json_decref(a);
    a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":-7,\"method\":\"ping\"}");
    assert_json_eq(a, "{\"jsonrpc\":\"2.0\",\"id\":-7,\"result\":{}}");
    json_decref(a);
    mcp_free(m);
}

Test(mcp, garbage_is_a_parse_error_with_a_null_id) {
    struct mcp *m = mcp_new();
    static const char *const bad[] = {"not json", "{\"jsonrpc\":\"2.0\",\"id\":1,",
                                      "", "42", "\"ping\"",
                                      "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"ping\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *a = answer(m, bad[i]);
        const char *text = error_of(a, MCP_PARSE_ERROR, NULL);
        cr_assert(!strncmp(text, "parse error", 11), "%s: %s", bad[i], text);
        json_decref(a);
    }
    mcp_free(m);
}

Test(mcp, bytes_past_len_are_not_read) {
    struct mcp *m = mcp_new();
    static const char msg[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}garbage";
    struct mcp_out out;
    mcp_handle(m, msg, strlen(msg) - strlen("garbage"), &out);
    cr_assert_eq(out.action, MCP_SEND);
    assert_json_eq(out.msg, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    json_decref(out.msg);
    mcp_free(m);
}

Test(mcp, a_batch_is_an_invalid_request) {
    struct mcp *m = mcp_new();
    assert_error(m, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"},"
                    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}]",
                 MCP_INVALID_REQUEST, NULL);
    assert_error(m, "[]", MCP_INVALID_REQUEST, NULL);
    mcp_free(m);
}

Test(mcp, a_wrong_jsonrpc_or_method_is_an_invalid_request_keeping_a_valid_id) {
    struct mcp *m = mcp_new();
    json_t *id = json_integer(1);
    assert_error(m, "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, id);
    assert_error(m, "{\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, id);
    assert_error(m, "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"ping\"}", MCP_INVALID_REQUEST, id);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":1}", MCP_INVALID_REQUEST, id);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", MCP_INVALID_REQUEST, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, an_id_that_is_not_a_string_or_an_integer_is_an_invalid_request) {
    struct mcp *m = mcp_new();
    static const char *const ids[] = {"1.5", "{}", "{\"a\":1}", "[1]", "true", "null"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        char msg[128];
        snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"ping\"}", ids[i]);
        json_t *a = answer(m, msg);
        error_of(a, MCP_INVALID_REQUEST, NULL);
        cr_assert(strstr(json_string_value(get(get(a, "error"), "message")), "\"id\""), "%s", msg);
        json_decref(a);
    }
    mcp_free(m);
}

Test(mcp, an_unknown_method_is_method_not_found_naming_it) {
    struct mcp *m = mcp_new();
    json_t *a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":\"r\",\"method\":\"resources/list\"}");
    json_t *id = json_string("r");
    const char *text = error_of(a, MCP_METHOD_NOT_FOUND, id);
    cr_assert(strstr(text, "\"resources/list\""), "%s", text);
    json_decref(id);
    json_decref(a);
    mcp_free(m);
}

Test(mcp, params_that_are_not_an_object_are_invalid_params) {
    struct mcp *m = mcp_new();
    json_t *id = json_integer(2);
    static const char *const methods[] = {"ping", "initialize", "tools/list", "tools/call",
                                          "resources/list"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        char msg[160];
        snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"%s\",\"params\":[1]}",
                 methods[i]);
        json_t *a = answer(m, msg);
        const char *text = error_of(a, MCP_INVALID_PARAMS, id);
        cr_assert(strstr(text, methods[i]), "%s", text);
        json_decref(a);
    }
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"params\":\"x\"}",
                 MCP_INVALID_PARAMS, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, a_deeply_nested_message_is_a_parse_error) {
    struct mcp *m = mcp_new();
    size_t n = 100000;
    char *deep = malloc(n + 1);
    cr_assert_not_null(deep);
    memset(deep, '[', n);
    deep[n] = '\0';
    assert_error(m, deep, MCP_PARSE_ERROR, NULL);
    /* the same depth inside a well-formed request's params */
    static const char head[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"a\":";
    char *msg = malloc(sizeof head + n);
    cr_assert_not_null(msg);
    memcpy(msg, head, sizeof head - 1);
    memset(msg + sizeof head - 1, '[', n);
    msg[sizeof head - 1 + n] = '\0';
    assert_error(m, msg, MCP_PARSE_ERROR, NULL);
    free(msg);
    free(deep);
    mcp_free(m);
}

Test(mcp, error_builds_a_json_rpc_error) {
    json_t *e = mcp_error(NULL, MCP_PARSE_ERROR, "line too long");
    assert_json_eq(e, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,"
                      "\"message\":\"line too long\"}}");
    json_decref(e);
    json_t *id = json_string("q");
    e = mcp_error(id, MCP_INVALID_REQUEST, "x");
    assert_json_eq(e, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"error\":{\"code\":-32600,\"message\":\"x\"}}");
    json_decref(e);
    json_decref(id);
}

/* An error message that quotes what the client sent may be cut; it must still
 * be a message (valid UTF-8), never a MCP_SEND with no message. */
Test(mcp, a_long_multibyte_tool_name_still_gets_an_error_message) {
    struct mcp *m = mcp_new();
    char msg[2048];
    size_t n = (size_t)snprintf(msg, sizeof msg,
                                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "\xc3\xa9"); /* é */
    snprintf(msg + n, sizeof msg - n, "\"}}");
    json_t *id = json_integer(1);
    assert_error(m, msg, MCP_INVALID_PARAMS, id);
    /* the same for a method name */
    n = (size_t)snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"");
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(msg + n, sizeof msg - n, "\xc3\xa9");
    snprintf(msg + n, sizeof msg - n, "\"}");
    assert_error(m, msg, MCP_METHOD_NOT_FOUND, id);
    json_decref(id);
    mcp_free(m);
}

/* --- the current revision (2026-07-28): stateless, an envelope per request ------------- */

#define ENVELOPE(version)                                                                      \
    "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"" version "\","                  \
    "\"io.modelcontextprotocol/clientCapabilities\":{}}"

Test(mcp, server_discover_lists_every_revision_newest_first) {
    struct mcp *m = mcp_new();
    struct mcp_out out;
    handle(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\",\"params\":{"
              ENVELOPE("2026-07-28") "}}", &out);
    cr_assert_eq(out.action, MCP_SEND);
    cr_assert(out.modern);
    cr_assert_str_eq(MCP_MODERN_VERSION, "2026-07-28");
    const json_t *r = result(out.msg);
    assert_json_eq(get(r, "supportedVersions"), "[\"2026-07-28\",\"2025-11-25\",\"2025-06-18\","
                                                "\"2025-03-26\",\"2024-11-05\"]");
    cr_assert(json_is_true(get(get(get(r, "capabilities"), "tools"), "listChanged")));
    cr_assert_str_eq(json_string_value(get(r, "resultType")), "complete");
    cr_assert_str_eq(json_string_value(get(get(get(r, "_meta"), "io.modelcontextprotocol/serverInfo"),
                                           "name")), "tandem");
    cr_assert_eq(mcp_http_status(out.msg), 200);
    json_decref(out.msg);
    mcp_free(m);
}

Test(mcp, a_request_of_the_current_revision_needs_its_envelope) {
    struct mcp *m = mcp_new();
    /* server/discover is always of the current revision */
    json_t *a = answer_error(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}",
                             MCP_INVALID_PARAMS, 1);
    const char *text = json_string_value(get(get(a, "error"), "message"));
    cr_assert(strstr(text, "io.modelcontextprotocol/protocolVersion"), "%s", text);
    cr_assert_eq(mcp_http_status(a), 400);
    json_decref(a);
    a = answer_error(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                     "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}", MCP_INVALID_PARAMS, 1);
    text = json_string_value(get(get(a, "error"), "message"));
    cr_assert(strstr(text, "io.modelcontextprotocol/clientCapabilities"), "%s", text);
    json_decref(a);
    mcp_free(m);
}

Test(mcp, an_envelope_naming_a_handshake_revision_is_unsupported_with_the_revisions) {
    struct mcp *m = mcp_new();
    json_t *a = answer_error(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{"
                             ENVELOPE("2025-06-18") "}}", MCP_UNSUPPORTED_VERSION, 2);
    cr_assert_eq(MCP_UNSUPPORTED_VERSION, -32022);
    const json_t *data = get(get(a, "error"), "data");
    assert_json_eq(get(data, "supported"), "[\"2026-07-28\",\"2025-11-25\",\"2025-06-18\","
                                           "\"2025-03-26\",\"2024-11-05\"]");
    cr_assert_str_eq(json_string_value(get(data, "requested")), "2025-06-18");
    json_decref(a);
    mcp_free(m);
}

Test(mcp, a_session_stays_in_the_era_it_started_in) {
    /* current revision first: a later initialize is refused, naming only it */
    struct mcp *m = catalog_at_modern();
    json_t *a = answer_error(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"initialize\",\"params\":{"
                             "\"protocolVersion\":\"2025-06-18\"}}", MCP_UNSUPPORTED_VERSION, 3);
    assert_json_eq(get(get(get(a, "error"), "data"), "supported"), "[\"2026-07-28\"]");
    json_decref(a);
    /* ... and a request without the envelope is one of the current revision too */
    json_t *id = json_integer(3);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}", MCP_INVALID_PARAMS, id);
    mcp_free(m);
    /* handshake first: the envelope is refused */
    m = session_at("2025-06-18");
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{"
                    ENVELOPE("2026-07-28") "}}",
                 MCP_INVALID_REQUEST, id);
    json_t *l;
    tools_list(m, &l); /* the handshake's own requests still work */
    json_decref(l);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, the_current_revision_stamps_results_and_has_no_ping) {
    struct mcp *m = catalog_at_modern();
    json_t *a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\",\"params\":{"
                          ENVELOPE("2026-07-28") "}}");
    const json_t *r = result(a);
    cr_assert_eq(json_array_size(get(r, "tools")), 4);
    cr_assert_not_null(get(json_array_get(get(r, "tools"), 0), "outputSchema"));
    cr_assert_str_eq(json_string_value(get(r, "cacheScope")), "private");
    cr_assert_eq(json_integer_value(get(r, "ttlMs")), 0);
    cr_assert_str_eq(json_string_value(get(r, "resultType")), "complete");
    cr_assert_str_eq(json_string_value(get(get(get(r, "_meta"), "io.modelcontextprotocol/serverInfo"),
                                           "version")), TANDEM_VERSION);
    json_decref(a);
    a = answer_error(m, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"params\":{"
                     ENVELOPE("2026-07-28") "}}", MCP_METHOD_NOT_FOUND, 4);
    cr_assert_eq(mcp_http_status(a), 404);
    json_decref(a);
    mcp_free(m);
}

Test(mcp, a_tool_call_of_the_current_revision_gets_a_stamped_structured_result) {
    struct mcp *m = catalog_at_modern();
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"decide_decide\",\"arguments\":{\"state\":\"s\"},"
            "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
            "\"io.modelcontextprotocol/clientCapabilities\":{},\"progressToken\":\"t\"}}}",
         &c);
    cr_assert_str_eq(c.version, "2026-07-28");
    cr_assert_str_eq(json_string_value(c.progress_token), "t");
    const char *text;
    json_t *msg = tool_result(&c, 200, ACCEPTED, -1, false, &text);
    const json_t *r = result(msg);
    cr_assert_str_eq(json_string_value(get(get(r, "structuredContent"), "choice")), "stop");
    cr_assert_str_eq(json_string_value(get(r, "resultType")), "complete");
    cr_assert_eq(mcp_http_status(msg), 200);
    json_decref(msg);
    mcp_call_clear(&c);
    mcp_free(m);
}

Test(mcp, subscriptions_listen_keeps_a_subscription_for_list_changes) {
    struct mcp *m = mcp_new();
    struct mcp_out out;
    handle(m, "{\"jsonrpc\":\"2.0\",\"id\":\"sub-1\",\"method\":\"subscriptions/listen\",\"params\":{"
              ENVELOPE("2026-07-28") ",\"notifications\":{\"toolsListChanged\":true,\"other\":true}}}",
           &out);
    cr_assert_eq(out.action, MCP_LISTEN);
    cr_assert(out.modern);
    cr_assert_str_eq(json_string_value(out.id), "sub-1");
    assert_json_eq(out.msg, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\","
                            "\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":\"sub-1\"},"
                            "\"notifications\":{\"toolsListChanged\":true}}}");
    json_t *changed = mcp_listen_changed(out.id);
    assert_json_eq(changed, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\","
                            "\"params\":{\"_meta\":{\"io.modelcontextprotocol/subscriptionId\":\"sub-1\"}}}");
    json_t *closed = mcp_listen_close(out.id);
    cr_assert_str_eq(json_string_value(get(closed, "id")), "sub-1");
    cr_assert_str_eq(json_string_value(get(get(get(closed, "result"), "_meta"),
                                           "io.modelcontextprotocol/subscriptionId")), "sub-1");
    cr_assert_str_eq(json_string_value(get(get(closed, "result"), "resultType")), "complete");
    json_decref(changed);
    json_decref(closed);
    json_decref(out.msg);
    json_decref(out.id);
    /* ending it: notifications/cancelled with its id */
    handle(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
              "\"requestId\":\"sub-1\"}}", &out);
    cr_assert_eq(out.action, MCP_CANCEL);
    cr_assert_str_eq(json_string_value(out.id), "sub-1");
    json_decref(out.id);
    /* a handshake session has no subscriptions/listen */
    mcp_free(m);
    m = session_at("2025-11-25");
    json_t *id = json_integer(6);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"subscriptions/listen\",\"params\":{}}",
                 MCP_METHOD_NOT_FOUND, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, http_headers_must_match_the_envelope) {
    static const char list[] = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{"
                               ENVELOPE("2026-07-28") "}}";
    json_t *id = json_integer(7);
    struct mcp *m = mcp_new();
    mcp_expect_headers(m, "2026-07-28", "tools/call");
    json_t *a = answer(m, list);
    error_of(a, MCP_HEADER_MISMATCH, id);
    cr_assert_eq(MCP_HEADER_MISMATCH, -32020);
    cr_assert_eq(mcp_http_status(a), 400);
    json_decref(a);
    mcp_expect_headers(m, "2025-11-25", "tools/list");
    assert_error(m, list, MCP_HEADER_MISMATCH, id);
    mcp_expect_headers(m, NULL, NULL);
    assert_error(m, list, MCP_HEADER_MISMATCH, id);
    mcp_expect_headers(m, "2026-07-28", "tools/list");
    a = answer(m, list);
    result(a);
    json_decref(a);
    mcp_free(m);
    /* stdio sets no headers: the envelope alone counts */
    m = mcp_new();
    a = answer(m, list);
    result(a);
    json_decref(a);
    mcp_free(m);
    json_decref(id);
}

Test(mcp, http_status_of_an_answer) {
    json_t *e = mcp_error(NULL, MCP_METHOD_NOT_FOUND, "m");
    cr_assert_eq(mcp_http_status(e), 404);
    json_decref(e);
    e = mcp_error(NULL, MCP_PARSE_ERROR, "m");
    cr_assert_eq(mcp_http_status(e), 400);
    json_decref(e);
    e = mcp_error(NULL, MCP_UNSUPPORTED_VERSION, "m");
    cr_assert_eq(mcp_http_status(e), 400);
    json_decref(e);
    json_t *r = parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":true}}");
    cr_assert_eq(mcp_http_status(r), 200, "a tool's error is a result");
    json_decref(r);
}

/* --- the tools ---------------------------------------------------------------------------- */

Test(mcp, a_new_session_lists_only_status) {
    struct mcp *m = mcp_new();
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    assert_tool_names(tools, "[\"status\",\"feedback\"]");
    cr_assert_eq(json_integer_value(get(msg, "id")), 3);
    json_decref(msg);
    mcp_free(m);
}

Test(mcp, the_catalog_gives_a_tool_per_pipeline_systemone_and_status) {
    struct mcp *m = catalog_at("2025-11-25");
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    assert_tool_names(tools, "[\"decide_decide\",\"systemone\",\"status\",\"feedback\"]");

    const json_t *d = tool_named(tools, "decide_decide");
    cr_assert_str_eq(json_string_value(get(d, "description")), "Pick a fix");
    const json_t *in = get(d, "inputSchema");
    cr_assert_str_eq(json_string_value(get(in, "type")), "object");
    assert_json_eq(get(in, "required"), "[\"state\",\"candidates\"]");
    cr_assert(json_is_false(get(in, "additionalProperties")));
    cr_assert_not_null(get(get(in, "properties"), "timeout_ms"));
    cr_assert_str_eq(json_string_value(get(get(d, "outputSchema"), "type")), "object");

    const json_t *s1 = tool_named(tools, "systemone");
    assert_json_eq(get(get(get(get(s1, "inputSchema"), "properties"), "model"), "enum"),
                   "[\"decider\",\"verifier\"]");
    assert_json_eq(get(get(s1, "inputSchema"), "required"), "[\"state\",\"questions\"]");

    const json_t *st = tool_named(tools, "status");
    assert_json_eq(get(get(st, "inputSchema"), "properties"), "{}");

    const json_t *fb = tool_named(tools, "feedback");
    assert_json_eq(get(get(fb, "inputSchema"), "required"), "[\"request_id\"]");

    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *an = get(t, "annotations");
        bool writes = t == fb; /* feedback keeps labels: not read-only, still idempotent */
        cr_assert(json_is_boolean(get(an, "readOnlyHint")) &&
                      json_is_true(get(an, "readOnlyHint")) == !writes,
                  "%s", json_string_value(get(t, "name")));
        cr_assert(json_is_true(get(an, "idempotentHint")), "%s", json_string_value(get(t, "name")));
        cr_assert(json_is_false(get(an, "destructiveHint")), "%s", json_string_value(get(t, "name")));
        cr_assert(json_is_string(get(t, "title")));
        cr_assert(json_is_object(get(t, "outputSchema")));
    }
    json_decref(msg);
    mcp_free(m);
}

Test(mcp, a_pipeline_without_description_gets_one_naming_its_decider) {
    struct mcp *m = mcp_new();
    json_t *p = parse("{\"pipelines\":[{\"name\":\"triage\",\"decide\":{\"model\":\"kev\"}},"
                      "{\"name\":\"nodecider\"},{\"decide\":{\"model\":\"kev\"}}]}");
    cr_assert(mcp_set_catalog(m, p, NULL));
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    assert_tool_names(tools, "[\"decide_triage\",\"status\",\"feedback\"]"); /* no name or decider: skipped */
    const char *desc = json_string_value(get(tool_named(tools, "decide_triage"), "description"));
    cr_assert(strstr(desc, "\"triage\"") && strstr(desc, "kev"), "%s", desc);
    json_decref(msg);
    json_decref(p);
    mcp_free(m);
}

Test(mcp, set_catalog_says_whether_the_tools_changed) {
    struct mcp *m = mcp_new();
    json_t *p = parse(PIPELINES), *mo = parse(MODELS);
    cr_assert_not(mcp_set_catalog(m, NULL, NULL), "a new session already lists status");
    cr_assert(mcp_set_catalog(m, p, mo));
    cr_assert_not(mcp_set_catalog(m, p, mo));
    json_t *p2 = json_deep_copy(p), *mo2 = json_deep_copy(mo);
    cr_assert_not(mcp_set_catalog(m, p2, mo2), "an equal catalog is no change");
    json_object_set_new(json_array_get(get(p2, "pipelines"), 0), "description", json_string("Another"));
    cr_assert(mcp_set_catalog(m, p2, mo2));
    json_array_remove(json_object_get(mo2, "data"), 2);
    cr_assert(mcp_set_catalog(m, p2, mo2), "a decision model gone changes systemone's enum");
    cr_assert(mcp_set_catalog(m, NULL, NULL));
    cr_assert_not(mcp_set_catalog(m, NULL, NULL));
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    assert_tool_names(tools, "[\"status\",\"feedback\"]");
    json_decref(msg);
    json_decref(p);
    json_decref(mo);
    json_decref(p2);
    json_decref(mo2);
    mcp_free(m);
}

Test(mcp, a_catalog_of_the_wrong_shape_counts_as_empty) {
    struct mcp *m = mcp_new();
    json_t *p = parse("{\"pipelines\":{\"name\":\"x\"}}"), *mo = parse("{\"data\":\"decider\"}");
    cr_assert_not(mcp_set_catalog(m, p, mo));
    json_decref(p);
    json_decref(mo);
    p = parse("[1,2]");
    mo = parse("{\"data\":[{\"id\":\"chat\"},{\"id\":5,\"decision_type\":\"openjev\"},"
               "{\"id\":\"x\",\"decision_type\":null}]}");
    cr_assert_not(mcp_set_catalog(m, p, mo), "no decision model: no systemone");
    json_decref(p);
    json_decref(mo);
    mcp_free(m);
}

Test(mcp, tools_list_before_2025_06_18_has_no_output_schema) {
    struct mcp *m = catalog_at("2025-03-26");
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    assert_tool_names(tools, "[\"decide_decide\",\"systemone\",\"status\",\"feedback\"]");
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        cr_assert_null(get(t, "outputSchema"), "%s", json_string_value(get(t, "name")));
        cr_assert_not_null(get(t, "inputSchema"));
    }
    json_decref(msg);
    mcp_free(m);
}

/* The old revision's list must not change the session's tools: the daemon sets
 * the revision per request (MCP-Protocol-Version), and a list already sent must
 * not change under its holder. */
Test(mcp, tools_list_for_an_old_revision_leaves_the_session_tools_alone) {
    struct mcp *m = catalog_at("2025-03-26");
    json_t *old;
    tools_list(m, &old);
    cr_assert(mcp_set_version(m, "2025-06-18"));
    json_t *msg;
    const json_t *tools = tools_list(m, &msg);
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        cr_assert_not_null(get(t, "outputSchema"), "%s lost its outputSchema",
                           json_string_value(get(t, "name")));
    }
    json_array_foreach(get(result(old), "tools"), i, t) cr_assert_null(get(t, "outputSchema"));
    json_decref(msg);
    json_decref(old);
    mcp_free(m);
}

/* --- tools/call --------------------------------------------------------------------------- */

Test(mcp, calling_an_unknown_tool_is_invalid_params_naming_it) {
    struct mcp *m = catalog_at("2025-11-25");
    json_t *a = answer(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
                          "\"name\":\"decide_nope\",\"arguments\":{}}}");
    json_t *id = json_integer(5);
    const char *text = error_of(a, MCP_INVALID_PARAMS, id);
    cr_assert(strstr(text, "\"decide_nope\""), "%s", text);
    json_decref(a);
    /* "decide" alone, without the prefix, is no tool */
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"decide\"}}",
                 MCP_INVALID_PARAMS, id);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":7}}",
                 MCP_INVALID_PARAMS, id);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\"}", MCP_INVALID_PARAMS, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, systemone_is_no_tool_without_a_decision_model) {
    struct mcp *m = mcp_new();
    json_t *id = json_integer(5);
    assert_error(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{"
                    "\"name\":\"systemone\",\"arguments\":{}}}",
                 MCP_INVALID_PARAMS, id);
    json_decref(id);
    mcp_free(m);
}

Test(mcp, arguments_that_are_not_an_object_are_invalid_params) {
    struct mcp *m = catalog_at("2025-11-25");
    json_t *id = json_string("c");
    static const char *const args[] = {"[]", "\"state\"", "1", "null"};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char msg[200];
        snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"method\":\"tools/call\",\"params\":{"
                                  "\"name\":\"decide_decide\",\"arguments\":%s}}", args[i]);
        json_t *a = answer(m, msg);
        const char *text = error_of(a, MCP_INVALID_PARAMS, id);
        cr_assert(strstr(text, "arguments"), "%s", text);
        json_decref(a);
    }
    json_decref(id);
    mcp_free(m);
}

Test(mcp, a_pipeline_call_is_a_post_to_the_pipeline_route) {
    struct mcp *m = catalog_at("2025-06-18");
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"decide_decide\",\"_meta\":{\"progressToken\":\"tok-1\"},\"arguments\":{"
            "\"state\":\"The build server is swapping.\","
            "\"candidates\":{\"reduce\":\"Fewer jobs.\",\"stop\":null},"
            "\"instructions\":\"Pick one.\",\"timeout_ms\":5000}}}",
         &c);
    cr_assert_eq(json_integer_value(c.id), 11);
    cr_assert_eq(c.kind, MCP_TOOL_PIPELINE);
    cr_assert_str_eq(c.tool, "decide_decide");
    cr_assert_str_eq(c.version, "2025-06-18");
    cr_assert_str_eq(c.method, "POST");
    cr_assert_str_eq(c.path, "/v1/pipelines/decide");
    assert_json_eq(c.body, "{\"state\":\"The build server is swapping.\","
                           "\"candidates\":{\"reduce\":\"Fewer jobs.\",\"stop\":null},"
                           "\"instructions\":\"Pick one.\"}");
    cr_assert_eq(c.timeout_ms, 5000);
    assert_json_eq(c.models, "[\"decider\",\"verifier\"]");
    cr_assert_str_eq(json_string_value(c.progress_token), "tok-1");
    mcp_call_clear(&c);
    cr_assert_null(c.id);
    cr_assert_null(c.body);
    cr_assert_null(c.models);
    cr_assert_null(c.progress_token);
    mcp_free(m);
}

Test(mcp, a_pipeline_call_carries_the_overrides_and_leaves_checks_to_the_route) {
    struct mcp *m = catalog_at("2025-11-25");
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"decide_decide\",\"_meta\":{\"progressToken\":17},\"arguments\":{"
            "\"state\":[1],\"candidates\":{\"a\":\"b\"},\"max_attempts\":0,\"min_confidence\":0.2}}}",
         &c);
    assert_json_eq(c.body, "{\"state\":[1],\"candidates\":{\"a\":\"b\"},\"max_attempts\":0,"
                           "\"min_confidence\":0.2}");
    cr_assert_eq(c.timeout_ms, 0);
    cr_assert_eq(json_integer_value(c.progress_token), 17);
    cr_assert_str_eq(json_string_value(c.id), "p");
    mcp_call_clear(&c);
    /* no arguments at all, and a progress token of the wrong type */
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"decide_decide\",\"_meta\":{\"progressToken\":1.5}}}",
         &c);
    assert_json_eq(c.body, "{}");
    cr_assert_null(c.progress_token);
    mcp_call_clear(&c);
    mcp_free(m);
}

Test(mcp, a_systemone_call_is_a_post_to_systemone) {
    struct mcp *m = catalog_at("2025-11-25");
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"systemone\",\"arguments\":{\"model\":\"verifier\",\"state\":\"s\","
            "\"questions\":{\"ok\":{\"type\":\"noul\",\"instructions\":\"Fine?\"}}}}}",
         &c);
    cr_assert_eq(c.kind, MCP_TOOL_SYSTEMONE);
    cr_assert_str_eq(c.tool, "systemone");
    cr_assert_str_eq(c.method, "POST");
    cr_assert_str_eq(c.path, "/v1/systemone");
    assert_json_eq(c.body, "{\"model\":\"verifier\",\"state\":\"s\","
                           "\"questions\":{\"ok\":{\"type\":\"noul\",\"instructions\":\"Fine?\"}}}");
    assert_json_eq(c.models, "[\"verifier\"]");
    cr_assert_eq(c.timeout_ms, 0);
    cr_assert_null(c.progress_token);
    mcp_call_clear(&c);
    /* without a model: the daemon's default, no model to watch */
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"systemone\",\"arguments\":{\"state\":\"s\",\"questions\":{},\"timeout_ms\":1}}}",
         &c);
    assert_json_eq(c.models, "[]");
    cr_assert_eq(c.timeout_ms, 1);
    mcp_call_clear(&c);
    mcp_free(m);
}

Test(mcp, a_status_call_is_a_get_without_body) {
    struct mcp *m = catalog_at("2025-11-25");
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/call\",\"params\":{\"name\":\"status\","
            "\"arguments\":{}}}",
         &c);
    cr_assert_eq(c.kind, MCP_TOOL_STATUS);
    cr_assert_str_eq(c.method, "GET");
    cr_assert_str_eq(c.path, "/v1/status");
    cr_assert_null(c.body);
    cr_assert_eq(json_array_size(c.models), 0);
    mcp_call_clear(&c);
    mcp_free(m);
}

Test(mcp, a_bad_timeout_is_a_tool_error_naming_timeout_ms) {
    struct mcp *m = catalog_at("2025-11-25");
    static const char *const bad[] = {"\"soon\"", "0", "-5", "1.5", "null", "true"};
    static const char *const tools[] = {"decide_decide", "systemone", "status"};
    for (size_t t = 0; t < 3; t++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char msg[256];
            snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"tools/call\",\"params\":{"
                                      "\"name\":\"%s\",\"arguments\":{\"state\":\"s\",\"timeout_ms\":%s}}}",
                     tools[t], bad[i]);
            json_t *a = answer(m, msg);
            cr_assert_eq(json_integer_value(get(a, "id")), 14);
            const json_t *r = result(a);
            cr_assert(json_is_true(get(r, "isError")), "%s", msg);
            const char *text = json_string_value(get(json_array_get(get(r, "content"), 0), "text"));
            cr_assert(text && strstr(text, "timeout_ms"), "%s: %s", msg, text ? text : "(null)");
            cr_assert_null(get(r, "structuredContent"));
            json_decref(a);
        }
    mcp_free(m);
}

/* The input schemas say additionalProperties: false; a call says which
 * argument is extra and what the tool takes. */
Test(mcp, an_unknown_argument_is_a_tool_error_naming_it) {
    struct mcp *m = catalog_at("2025-11-25");
    static const struct {
        const char *tool, *args, *want;
    } cases[] = {
        {"decide_decide", "{\"state\":\"s\",\"candidates\":{},\"_extra\":1}",
         "unknown argument \"_extra\": decide_decide takes state, candidates, instructions, "
         "max_attempts, min_confidence, timeout_ms"},
        {"systemone", "{\"other\":1}",
         "unknown argument \"other\": systemone takes model, state, questions, timeout_ms"},
        {"status", "{\"verbose\":true}", "unknown argument \"verbose\": status takes timeout_ms"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[512];
        snprintf(msg, sizeof msg, "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/call\","
                 "\"params\":{\"name\":\"%s\",\"arguments\":%s}}", cases[i].tool, cases[i].args);
        json_t *a = answer(m, msg);
        const json_t *r = result(a);
        cr_assert(json_is_true(get(r, "isError")), "%s", msg);
        cr_assert_str_eq(json_string_value(get(json_array_get(get(r, "content"), 0), "text")),
                         cases[i].want);
        json_decref(a);
    }
    mcp_free(m);
}

Test(mcp, notifications_cancelled_cancels_the_call_by_its_id) {
    struct mcp *m = mcp_new();
    struct mcp_out out;
    handle(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
              "\"requestId\":7,\"reason\":\"user\"}}",
           &out);
    cr_assert_eq(out.action, MCP_CANCEL);
    cr_assert_null(out.msg);
    cr_assert(json_is_integer(out.id));
    cr_assert_eq(json_integer_value(out.id), 7);
    json_decref(out.id);
    handle(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
              "\"requestId\":\"r-2\"}}",
           &out);
    cr_assert_eq(out.action, MCP_CANCEL);
    cr_assert_str_eq(json_string_value(out.id), "r-2");
    json_decref(out.id);
    assert_nothing(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{"
                      "\"requestId\":1.5}}");
    mcp_free(m);
}

/* --- results ------------------------------------------------------------------------------ */

Test(mcp, a_pipeline_answer_becomes_its_verdict_and_summary) {
    struct mcp *m = catalog_at("2025-11-25");
    struct mcp_call c;
    call(m, "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"tools/call\",\"params\":{"
            "\"name\":\"decide_decide\",\"arguments\":{\"state\":\"s\",\"candidates\":{}}}}",
         &c);
    const char *text;
    json_t *msg = tool_result(&c, 200, ACCEPTED, -1, false, &text);
    cr_assert_eq(json_integer_value(get(msg, "id")), 21);
    cr_assert_str_eq(text, "accepted: stop (0.38); verifier consistent 0.94 \xe2\x89\xa5 0.5, "
                           "on_topic 0.86 \xe2\x89\xa5 0.5");
    const json_t *s = get(result(msg), "structuredContent");
    assert_json_eq(s, "{\"pipeline\":\"decide\",\"verdict\":\"accepted\",\"choice\":\"stop\","
                      "\"reason\":\"stop passed every threshold (attempt 1)\","
                      "\"probabilities\":{\"reduce\":0.3264938593177823,\"stop\":0.37902133899104984,"
                      "\"nothing\":0.2944848016911678},\"confidence\":0.06853200848657477,"
                      "\"checks\":[{\"stage\":0,\"model\":\"verifier\",\"question\":\"consistent\","
                      "\"answer\":null,\"score\":0.9400501158817478,\"threshold\":\">= 0.5\",\"passed\":true},"
                      "{\"stage\":0,\"model\":\"verifier\",\"question\":\"on_topic\",\"answer\":null,"
                      "\"score\":0.861306765208157,\"threshold\":\">= 0.5\",\"passed\":true}],"
                      "\"attempts\":[{\"candidate\":\"stop\",\"passed\":true}],"
                      "\"timing\":{\"total_ms\":2101,\"queued_ms\":10,\"loading_ms\":880,\"running_ms\":1211},"
                      "\"request_id\":\"req_7\"}");
    /* the numbers are the route's, unrounded */
    cr_assert_eq(json_real_value(get(get(s, "probabilities"), "stop")), 0.37902133899104984);
    cr_assert_eq(json_real_value(get(json_array_get(get(s, "checks"), 0), "score")), 0.9400501158817478);
    json_decref(msg);
    mcp_call_clear(&c);
    mcp_free(m);
}

Test(mcp, a_rejected_answer_names_the_last_candidate_and_the_failed_check) {
    struct mcp_call c = made_call(MCP_TOOL_PIPELINE, "decide_decide", "2025-11-25");
    static const char body[] =
        "{\"pipeline\":\"decide\",\"verdict\":\"rejected\",\"choice\":null,"
        "\"reason\":\"no candidate passed every threshold\","
        "\"decide\":{\"model\":\"decider\",\"answers\":{\"act\":{\"type\":\"choice\",\"choice\":\"reduce\","
        "\"probabilities\":{\"reduce\":0.3264938593177823,\"stop\":0.67},\"confidence\":0.1}}},"
        "\"attempts\":[{\"attempt\":1,\"candidate\":\"stop\",\"passed\":false,\"verify\":[]},"
        "{\"attempt\":2,\"candidate\":\"reduce\",\"passed\":false,\"verify\":["
        "{\"stage\":0,\"model\":\"verifier\",\"questions\":{"
        "\"consistent\":{\"answer\":{\"type\":\"noul\",\"noul\":0.7},\"threshold\":\">= 0.5\",\"passed\":true}},"
        "\"passed\":true},"
        "{\"stage\":1,\"model\":\"judge\",\"questions\":{"
        "\"tone\":{\"answer\":{\"type\":\"choice\",\"choice\":\"calm\",\"probabilities\":{\"calm\":0.8,"
        "\"angry\":0.2}},\"threshold\":null,\"passed\":null},"
        "\"urgency\":{\"answer\":{\"type\":\"score\",\"score\":1.5},\"threshold\":\">= 2\",\"passed\":false},"
        "\"risk\":{\"answer\":{\"type\":\"noul\",\"noul\":0.41},\"threshold\":\"<= 0.25\",\"passed\":false}},"
        "\"passed\":false}]}],"
        "\"timing\":{\"total_ms\":5}}";
    const char *text;
    json_t *msg = tool_result(&c, 200, body, -1, false, &text);
    cr_assert_str_eq(text, "rejected: no candidate passed every threshold; last tried reduce (0.33); "
                           "verifier consistent 0.70 \xe2\x89\xa5 0.5; judge tone calm 0.80, "
                           "urgency 1.50, needs \xe2\x89\xa5 2, risk 0.41, needs \xe2\x89\xa4 0.25");
    const json_t *s = get(result(msg), "structuredContent");
    cr_assert(json_is_null(get(s, "choice")));
    cr_assert_str_eq(json_string_value(get(s, "verdict")), "rejected");
    assert_json_eq(get(s, "attempts"), "[{\"candidate\":\"stop\",\"passed\":false},"
                                       "{\"candidate\":\"reduce\",\"passed\":false}]");
    assert_json_eq(json_array_get(get(s, "checks"), 1),
                   "{\"stage\":1,\"model\":\"judge\",\"question\":\"tone\",\"answer\":\"calm\","
                   "\"score\":0.8,\"threshold\":null,\"passed\":null}");
    assert_json_eq(get(s, "timing"), "{\"total_ms\":5}");
    cr_assert_null(get(s, "request_id"));
    json_decref(msg);
    mcp_call_clear(&c);
}

Test(mcp, a_systemone_answer_becomes_its_answers_and_summary) {
    struct mcp_call c = made_call(MCP_TOOL_SYSTEMONE, "systemone", "2025-11-25");
    static const char body[] =
        "{\"model\":\"decider\",\"answers\":{\"route\":{\"type\":\"choice\",\"choice\":\"billing\","
        "\"probabilities\":{\"billing\":0.9,\"tech\":0.1},\"confidence\":0.8},"
        "\"angry\":{\"type\":\"noul\",\"noul\":0.82},"
        "\"urgency\":{\"type\":\"score\",\"score\":2.28,\"probabilities\":[0.1,0.5,0.4]}},"
        "\"usage\":{\"input_tokens\":12},\"request_id\":\"r\"}";
    const char *text;
    json_t *msg = tool_result(&c, 200, body, -1, false, &text);
    cr_assert_str_eq(text, "decider: route billing (0.90); angry 0.82; urgency 2.28");
    json_t *want = parse(body);
    json_object_del(want, "request_id");
    cr_assert(json_equal(get(result(msg), "structuredContent"), want));
    json_decref(want);
    json_decref(msg);
    mcp_call_clear(&c);
}

#define STATUS                                                                                 \
    "{\"budget\":{\"gpu_bytes\":838860800,\"host_bytes\":4294967296,"                          \
    "\"devices\":[{\"device\":\"gpu:0\",\"budget_bytes\":838860800,\"used_bytes\":614252544},"  \
    "{\"device\":\"host\",\"budget_bytes\":4294967296,\"used_bytes\":210000000}]},"             \
    "\"queue\":{\"waiting\":3,\"depth\":64},"                                                  \
    "\"models\":[{\"name\":\"decider\",\"state\":\"resident\",\"device\":\"gpu:0\",\"ngl\":31,"  \
    "\"pid\":16523,\"running\":1,\"queued\":2,\"pinned\":false,\"until_ms\":null,"             \
    "\"planned\":{\"gpu_bytes\":1},\"measured\":null,"                                         \
    "\"progress\":{\"phase\":\"ready\",\"fraction\":1.0,\"elapsed_ms\":212}},"                 \
    "{\"name\":\"verifier\",\"state\":\"unloaded\",\"device\":\"cpu\",\"running\":0,"          \
    "\"queued\":0,\"progress\":null}],"                                                        \
    "\"serving\":true,\"calls_in_flight\":0}"

Test(mcp, a_status_answer_becomes_the_models_queue_and_budget) {
    struct mcp_call c = made_call(MCP_TOOL_STATUS, "status", "2025-11-25");
    const char *text;
    json_t *msg = tool_result(&c, 200, STATUS, -1, false, &text);
    cr_assert_str_eq(text, "decider resident on gpu:0 (1 running, 2 queued), verifier unloaded; "
                           "3 waiting (queue depth 64)");
    const json_t *s = get(result(msg), "structuredContent");
    assert_json_eq(get(s, "models"),
                   "[{\"name\":\"decider\",\"state\":\"resident\",\"device\":\"gpu:0\",\"running\":1,"
                   "\"queued\":2,\"pinned\":false,\"until_ms\":null,\"planned\":{\"gpu_bytes\":1},"
                   "\"measured\":null,\"progress\":{\"phase\":\"ready\",\"fraction\":1.0,\"elapsed_ms\":212}},"
                   "{\"name\":\"verifier\",\"state\":\"unloaded\",\"device\":\"cpu\",\"running\":0,"
                   "\"queued\":0,\"progress\":null}]");
    assert_json_eq(get(s, "queue"), "{\"waiting\":3,\"depth\":64}");
    json_t *st = parse(STATUS);
    cr_assert(json_equal(get(s, "budget"), get(st, "budget")));
    json_decref(st);
    json_decref(msg);

    msg = tool_result(&c, 200, "{\"models\":[],\"queue\":{\"waiting\":0,\"depth\":8}}", -1, false, &text);
    cr_assert_str_eq(text, "0 waiting (queue depth 8)");
    json_decref(msg);
    mcp_call_clear(&c);
}

/* GET /v1/status has the memory per device in budget.devices (docs/serve.md,
 * sched_status_json); there is no top-level "devices". */
Test(mcp, the_status_tool_reports_the_devices_of_v1_status) {
    struct mcp_call c = made_call(MCP_TOOL_STATUS, "status", "2025-11-25");
    const char *text;
    json_t *msg = tool_result(&c, 200, STATUS, -1, false, &text);
    json_t *st = parse(STATUS);
    const json_t *devices = get(get(result(msg), "structuredContent"), "devices");
    cr_assert_eq(json_array_size(devices), 2, "structuredContent.devices is empty");
    cr_assert(json_equal((json_t *)devices, get(get(st, "budget"), "devices")));
    json_decref(st);
    json_decref(msg);
    mcp_call_clear(&c);
}

Test(mcp, results_before_2025_06_18_have_no_structured_content) {
    static const char *const old[] = {"2025-03-26", "2024-11-05"};
    for (size_t i = 0; i < 2; i++) {
        struct mcp_call c = made_call(MCP_TOOL_PIPELINE, "decide_decide", old[i]);
        const char *text;
        json_t *msg = tool_result(&c, 200, ACCEPTED, -1, false, &text);
        cr_assert_null(get(result(msg), "structuredContent"));
        cr_assert_str_eq(text, "accepted: stop (0.38); verifier consistent 0.94 \xe2\x89\xa5 0.5, "
                               "on_topic 0.86 \xe2\x89\xa5 0.5");
        json_decref(msg);
        mcp_call_clear(&c);
    }
}

/* The route's error (status, body, Retry-After) as the tool's error result: its
 * text is want, or with prefix starts with it. */
static void assert_error_text(const struct mcp_call *c, int status, const char *body, long retry,
                              const char *want, bool prefix) {
    const char *text;
    json_t *msg = tool_result(c, status, body, retry, true, &text);
    if (prefix)
        cr_assert(!strncmp(text, want, strlen(want)), "status %d: %s", status, text);
    else
        cr_assert_str_eq(text, want, "status %d", status);
    json_decref(msg);
}

Test(mcp, a_400_names_the_bad_argument) {
    struct mcp_call c = made_call(MCP_TOOL_PIPELINE, "decide_decide", "2025-11-25");
    assert_error_text(&c, 400, "{\"error\":{\"message\":\"needs at least 2 candidates\","
                               "\"type\":\"invalid_request_error\",\"param\":\"candidates\"}}",
                      -1, "bad argument \"candidates\": needs at least 2 candidates", false);
    assert_error_text(&c, 400, "{\"error\":{\"message\":\"body is not JSON\"}}", -1,
                      "bad arguments: body is not JSON", false);
    assert_error_text(&c, 422, "{\"error\":{\"message\":\"m\",\"param\":\"state\"}}", -1,
                      "bad argument \"state\": m", false);
    mcp_call_clear(&c);
}

Test(mcp, each_error_status_says_what_to_do) {
    struct mcp_call c = made_call(MCP_TOOL_PIPELINE, "decide_decide", "2025-11-25");
    static const struct {
        int status;
        long retry;
        const char *text;
    } cases[] = {
        {429, 3, "the queue is full: queue full; retry in 3 s"},
        {529, -1, "the queue is full: queue full"},
        {504, -1, "the deadline passed: queue full"},
        {503, 10, "the model cannot be loaded now: queue full; retry in 10 s"},
        {502, -1, "the engine failed: queue full"},
        {404, -1, "not found: queue full"},
        {401, -1, "not authorized (401): queue full; set TANDEM_API_KEY to a key of the daemon"},
        {403, -1, "not authorized (403): queue full; set TANDEM_API_KEY to a key of the daemon"},
        {500, -1, "decide_decide failed (500): queue full"},
        {429, 0, "the queue is full: queue full; retry in 0 s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_error_text(&c, cases[i].status, "{\"error\":{\"message\":\"queue full\",\"retry_after\":3}}",
                          cases[i].retry, cases[i].text, false);
    mcp_call_clear(&c);
}

Test(mcp, no_answer_and_a_non_json_body_are_errors_quoting_the_text) {
    struct mcp_call c = made_call(MCP_TOOL_SYSTEMONE, "systemone", "2025-11-25");
    assert_error_text(&c, 0, "Connection refused", -1, "tandem did not answer: Connection refused", false);
    assert_error_text(&c, 0, NULL, -1, "tandem did not answer: ", false);
    /* status 0 never reads the body as an answer, even when it is JSON */
    assert_error_text(&c, 0, "{\"model\":\"decider\",\"answers\":{}}", -1, "tandem did not answer: ", true);
    assert_error_text(&c, 502, "<html>Bad Gateway</html>", -1, "the engine failed: <html>Bad Gateway</html>",
                      false);
    /* a 200 that is not a JSON object is no answer */
    assert_error_text(&c, 200, "OK", -1, "systemone failed (200): OK", false);
    assert_error_text(&c, 200, "[1]", -1, "systemone failed (200): [1]", false);
    /* a long body is quoted up to 200 bytes */
    char big[400], want[300];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    snprintf(want, sizeof want, "systemone failed (500): %.200s", big);
    assert_error_text(&c, 500, big, -1, want, false);
    mcp_call_clear(&c);
}

/* The transport hands over whatever bytes came back; the result must still be
 * a message (mcp_call_result returns NULL only on OOM). */
Test(mcp, a_body_that_is_not_utf8_or_is_cut_inside_a_character_still_gives_a_result) {
    struct mcp_call c = made_call(MCP_TOOL_STATUS, "status", "2025-11-25");
    assert_error_text(&c, 502, "bad \xff\xfe gateway", -1, "the engine failed: bad ", true);
    char body[256];
    memset(body, 'a', 199);
    strcpy(body + 199, "\xc3\xa9 and more"); /* é across the 200-byte cut */
    assert_error_text(&c, 0, body, -1, "tandem did not answer: aaa", true);
    mcp_call_clear(&c);
}

/* --- progress, list_changed, phase -------------------------------------------------------- */

Test(mcp, progress_and_list_changed_have_their_shapes) {
    json_t *token = json_string("tok-1");
    json_t *p = mcp_progress(token, 3, "loading decider: reading weights");
    assert_json_eq(p, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{"
                      "\"progressToken\":\"tok-1\",\"progress\":3,"
                      "\"message\":\"loading decider: reading weights\"}}");
    cr_assert_null(get(p, "id"));
    json_decref(p);
    json_decref(token);
    token = json_integer(17);
    p = mcp_progress(token, 0, "queued");
    assert_json_eq(p, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{"
                      "\"progressToken\":17,\"progress\":0,\"message\":\"queued\"}}");
    json_decref(p);
    json_decref(token);
    json_t *l = mcp_list_changed();
    assert_json_eq(l, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}");
    json_decref(l);
}

static const char *phase(const char *status, const char *models, char *detail, size_t cap) {
    json_t *s = parse(status), *m = parse(models);
    const char *p = mcp_phase(s, m, detail, cap);
    json_decref(s);
    json_decref(m);
    return p;
}

Test(mcp, phase_is_loading_while_a_needed_model_loads) {
    char detail[128];
    const char *p = phase("{\"models\":[{\"name\":\"verifier\",\"state\":\"resident\",\"running\":1},"
                          "{\"name\":\"decider\",\"state\":\"loading\",\"running\":0,"
                          "\"progress\":{\"phase\":\"reading weights\",\"fraction\":0.4}}]}",
                          "[\"decider\",\"verifier\"]", detail, sizeof detail);
    cr_assert_str_eq(p, "loading");
    cr_assert_str_eq(detail, "loading decider: reading weights");
    p = phase("{\"models\":[{\"name\":\"decider\",\"state\":\"loading\",\"progress\":null}]}",
              "[\"decider\"]", detail, sizeof detail);
    cr_assert_str_eq(p, "loading");
    cr_assert_str_eq(detail, "loading decider");
}

Test(mcp, phase_is_running_while_a_needed_model_runs) {
    char detail[128];
    const char *p = phase("{\"models\":[{\"name\":\"decider\",\"state\":\"resident\",\"running\":0},"
                          "{\"name\":\"verifier\",\"state\":\"resident\",\"running\":2}]}",
                          "[\"decider\",\"verifier\"]", detail, sizeof detail);
    cr_assert_str_eq(p, "running");
    cr_assert_str_eq(detail, "running on verifier");
}

Test(mcp, phase_is_queued_otherwise_and_ignores_models_not_needed) {
    char detail[128];
    const char *p = phase("{\"models\":[{\"name\":\"writer\",\"state\":\"loading\","
                          "\"progress\":{\"phase\":\"spawn\"}},"
                          "{\"name\":\"chat\",\"state\":\"resident\",\"running\":3},"
                          "{\"name\":\"decider\",\"state\":\"resident\",\"running\":0}]}",
                          "[\"decider\"]", detail, sizeof detail);
    cr_assert_str_eq(p, "queued");
    cr_assert_str_eq(detail, "queued");
    p = phase("{\"models\":[{\"name\":\"decider\",\"state\":\"loading\"}]}", "[]", detail, sizeof detail);
    cr_assert_str_eq(p, "queued");
    p = phase("{\"queue\":{}}", "[\"decider\"]", detail, sizeof detail);
    cr_assert_str_eq(p, "queued");
    cr_assert_str_eq(mcp_phase(NULL, NULL, detail, sizeof detail), "queued");
    /* the detail fits its buffer */
    char small[8];
    memset(small, 'z', sizeof small);
    p = phase("{\"models\":[{\"name\":\"decider\",\"state\":\"loading\","
              "\"progress\":{\"phase\":\"reading weights\"}}]}",
              "[\"decider\"]", small, sizeof small);
    cr_assert_str_eq(p, "loading");
    cr_assert_str_eq(small, "loading");
}

Test(mcp, free_null_is_a_no_op) { mcp_free(NULL); }

/* --- what jansson allocates is released --------------------------------------------------- */

static long live; /* jansson allocations not yet freed */

static void *count_malloc(size_t n) {
    void *p = malloc(n);
    live += p != NULL;
    return p;
}

static void count_free(void *p) {
    live -= p != NULL;
    free(p);
}

/* Counts jansson's allocations from here on; call before making any JSON. */
static void count_json(void) {
    json_set_alloc_funcs(count_malloc, count_free);
    live = 0;
}

Test(mcp, results_release_everything_they_allocate) {
    count_json();
    static const struct {
        enum mcp_tool_kind kind;
        int status;
        const char *body;
    } cases[] = {
        {MCP_TOOL_PIPELINE, 200, ACCEPTED},
        /* an escalated answer without reason or decide choice */
        {MCP_TOOL_PIPELINE, 200, "{\"pipeline\":\"decide\",\"verdict\":\"escalated\",\"choice\":null,"
                                 "\"attempts\":[],\"timing\":{}}"},
        {MCP_TOOL_PIPELINE, 200, "{}"},
        {MCP_TOOL_SYSTEMONE, 200, "{\"model\":\"m\",\"answers\":{\"a\":{\"type\":\"noul\",\"noul\":1}}}"},
        {MCP_TOOL_STATUS, 200, STATUS},
        {MCP_TOOL_STATUS, 200, "{\"models\":[{\"name\":\"x\"}],\"devices\":[],\"queue\":{},\"budget\":{}}"},
        {MCP_TOOL_STATUS, 200, "{}"},
        {MCP_TOOL_PIPELINE, 400, "{\"error\":{\"message\":\"m\",\"param\":\"state\"}}"},
        {MCP_TOOL_STATUS, 0, "refused"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct mcp_call c = made_call(cases[i].kind, "t", "2025-11-25");
        json_t *msg = mcp_call_result(&c, cases[i].status, cases[i].body, strlen(cases[i].body), -1);
        cr_assert_not_null(msg);
        json_decref(msg);
        mcp_call_clear(&c);
        cr_assert_eq(live, 0, "case %zu (%s): %ld allocations leaked", i, cases[i].body, live);
    }
}

Test(mcp, handling_messages_releases_everything_it_allocates) {
    count_json();
    struct mcp *m = mcp_new();
    json_t *p = parse(PIPELINES), *mo = parse(MODELS);
    mcp_set_catalog(m, p, mo);
    json_decref(p);
    json_decref(mo);
    long base = live;
    static const char *const msgs[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"x\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"decide_decide\","
        "\"_meta\":{\"progressToken\":\"t\"},\"arguments\":{\"state\":\"s\",\"timeout_ms\":5}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"status\","
        "\"arguments\":{\"timeout_ms\":\"soon\"}}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"a\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"subscriptions/listen\",\"params\":{"
        ENVELOPE("2026-07-28") "}}",
        "[1]",
        "nope",
    };
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        struct mcp_out out;
        handle(m, msgs[i], &out);
        json_decref(out.msg);
        json_decref(out.id);
        mcp_call_clear(&out.call);
        cr_assert_eq(live, base, "%s: %ld allocations leaked", msgs[i], live - base);
    }
    mcp_free(m);
}

Test(mcp, progress_next_sends_each_phase_once) {
    struct mcp_progress_state st = {0};
    json_t *token = json_string("t"), *models = parse("[\"decider\"]");
    json_t *loading = parse("{\"models\":[{\"name\":\"decider\",\"state\":\"loading\","
                            "\"progress\":{\"phase\":\"spawn\"}}]}");
    json_t *p = mcp_progress_next(&st, token, NULL, models); /* no status yet: queued */
    assert_json_eq(p, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{"
                      "\"progressToken\":\"t\",\"progress\":1,\"message\":\"queued\"}}");
    json_decref(p);
    cr_assert_null(mcp_progress_next(&st, token, NULL, models), "queued again: nothing new");
    p = mcp_progress_next(&st, token, loading, models);
    assert_json_eq(p, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{"
                      "\"progressToken\":\"t\",\"progress\":2,"
                      "\"message\":\"loading decider: spawn\"}}");
    json_decref(p);
    cr_assert_null(mcp_progress_next(&st, token, loading, models));
    cr_assert_eq(st.sent, 2);
    cr_assert_str_eq(st.phase, "loading decider: spawn");
    json_decref(loading);
    json_decref(models);
    json_decref(token);
}

/* --- sessions ---------------------------------------------------------------------------------- */

Test(mcp, a_session_is_needed_after_initialize_in_the_handshake_revisions_only) {
#define NEEDS(msg, version) mcp_needs_session(msg, strlen(msg), version)
    cr_expect(!NEEDS("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{}}", NULL));
    cr_expect(NEEDS("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", NULL));
    cr_expect(NEEDS("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}", "2025-11-25"));
    cr_expect(NEEDS("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\","
                    "\"params\":{\"requestId\":1}}", "2025-06-18"));
    /* the current revision is stateless */
    cr_expect(!NEEDS("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", "2026-07-28"));
    cr_expect(!NEEDS("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server/discover\"}", NULL));
    cr_expect(!NEEDS("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"_meta\":"
                     "{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}", NULL));
    /* not a message with a method: the protocol answers it */
    cr_expect(!NEEDS("not json", NULL));
    cr_expect(!NEEDS("[{\"method\":\"ping\"}]", NULL));
#undef NEEDS
}

Test(mcp, sessions_are_known_until_ended_or_idle) {
    struct mcp_sessions *s = mcp_sessions_new(4, 1000);
    cr_assert(s);
    cr_expect(!mcp_sessions_use(s, "a", 0));
    cr_expect(!mcp_sessions_use(s, NULL, 0) && !mcp_sessions_use(s, "", 0));
    mcp_sessions_add(s, "a", 0);
    mcp_sessions_add(s, "b", 0);
    cr_expect(mcp_sessions_use(s, "a", 900));  /* used at 900: alive until 1900 */
    cr_expect(!mcp_sessions_use(s, "b", 1000)); /* idle for 1000 ms: gone */
    cr_expect(mcp_sessions_use(s, "a", 1800));
    cr_expect(mcp_sessions_end(s, "a", 1800));
    cr_expect(!mcp_sessions_use(s, "a", 1800) && !mcp_sessions_end(s, "a", 1800));
    mcp_sessions_free(s);
    mcp_sessions_free(NULL);
}

Test(mcp, a_full_session_table_drops_the_least_recently_used) {
    struct mcp_sessions *s = mcp_sessions_new(3, 1000000);
    mcp_sessions_add(s, "s1", 10);
    mcp_sessions_add(s, "s2", 20);
    mcp_sessions_add(s, "s3", 30);
    cr_expect(mcp_sessions_use(s, "s1", 40)); /* s2 is now the least recently used */
    for (int i = 0; i < 1000; i++) {          /* the table never grows */
        char id[16];
        snprintf(id, sizeof id, "x%d", i);
        mcp_sessions_add(s, id, 50 + i);
    }
    cr_expect(!mcp_sessions_use(s, "s1", 2000) && !mcp_sessions_use(s, "s2", 2000));
    cr_expect(mcp_sessions_use(s, "x999", 2000) && mcp_sessions_use(s, "x998", 2000));
    mcp_sessions_free(s);
    s = mcp_sessions_new(3, 1000000);
    mcp_sessions_add(s, "s1", 10);
    mcp_sessions_add(s, "s2", 20);
    mcp_sessions_add(s, "s3", 30);
    cr_expect(mcp_sessions_use(s, "s1", 40));
    mcp_sessions_add(s, "s4", 50);
    cr_expect(mcp_sessions_use(s, "s1", 60) && !mcp_sessions_use(s, "s2", 60));
    cr_expect(mcp_sessions_use(s, "s3", 60) && mcp_sessions_use(s, "s4", 60));
    cr_expect_null(mcp_sessions_new(0, 1));
    mcp_sessions_free(s);
}
