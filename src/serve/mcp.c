/* mcp.c: the Model Context Protocol's messages, tools and results.
 *
 * Design: a pure function of messages. mcp_handle parses one JSON-RPC
 * message and answers it at once (initialize, ping, tools/list, errors) or
 * turns a tools/call into one request to tandem's own HTTP API (struct
 * mcp_call), which the transport runs however it runs requests (a thread and
 * libcurl in `tandem mcp`, a detached request in the daemon).
 * mcp_call_result makes the route's answer a tool result. Nothing here
 * validates arguments the route validates: the route's 400 names the field,
 * and that message is what the agent reads. The tool list is rebuilt from
 * the daemon's catalog; its serialized form tells whether it changed. */
#include "serve/mcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jstr.h"
#include "base/mem.h"
#include "version.h"

const char *const MCP_PROTOCOL_VERSIONS[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                             "2024-11-05", NULL};
#define STRUCTURED_SINCE "2025-06-18" /* structuredContent and outputSchema */

enum era { ERA_NONE, ERA_HANDSHAKE, ERA_MODERN };

struct mcp {
    json_t *tools;       /* the tools/list array */
    json_t *pipelines;   /* GET /v1/pipelines' body: each tool's models */
    char *tools_text;    /* its compact form, to see a change */
    char version[16];
    enum era era;        /* set by the first initialize or enveloped request */
    bool initialized;
    bool expect;         /* HTTP: the headers below must match a current-revision request */
    char expect_version[32], expect_method[64];
};

/* --- sessions ----------------------------------------------------------------------------- */

struct mcp *mcp_new(void) {
    struct mcp *m = mem_calloc(1, sizeof *m);
    if (!m)
        return NULL;
    snprintf(m->version, sizeof m->version, "%s", MCP_PROTOCOL_VERSIONS[0]);
    mcp_set_catalog(m, NULL, NULL);
    if (!m->tools) {
        mcp_free(m);
        return NULL;
    }
    return m;
}

void mcp_free(struct mcp *m) {
    if (!m)
        return;
    json_decref(m->tools);
    json_decref(m->pipelines);
    free(m->tools_text);
    mem_free(m);
}

bool mcp_initialized(const struct mcp *m) { return m->initialized; }

static bool known_version(const char *v) {
    for (size_t i = 0; v && MCP_PROTOCOL_VERSIONS[i]; i++)
        if (!strcmp(v, MCP_PROTOCOL_VERSIONS[i]))
            return true;
    return false;
}

bool mcp_set_version(struct mcp *m, const char *version) {
    if (!known_version(version))
        return false;
    snprintf(m->version, sizeof m->version, "%s", version);
    return true;
}

void mcp_expect_headers(struct mcp *m, const char *version, const char *method) {
    m->expect = true;
    snprintf(m->expect_version, sizeof m->expect_version, "%s", version ? version : "");
    snprintf(m->expect_method, sizeof m->expect_method, "%s", method ? method : "");
}

/* Whether results for version carry structuredContent (revisions sort as dates). */
static bool structured(const char *version) { return strcmp(version, STRUCTURED_SINCE) >= 0; }

void mcp_call_clear(struct mcp_call *c) {
    json_decref(c->id);
    json_decref(c->progress_token);
    json_decref(c->body);
    json_decref(c->models);
    memset(c, 0, sizeof *c);
}

/* --- the tools ---------------------------------------------------------------------------- */

#define PIPELINE_PREFIX "decide_"

static json_t *state_schema(void) {
    return json_pack("{s[sss]ss}", "type", "string", "object", "array", "description",
                     "The situation the answer is about: text, or data as an object or array.");
}

static json_t *timeout_schema(void) {
    return json_pack("{sssisiss}", "type", "integer", "minimum", 1, "maximum", 86400000,
                     "description", "Deadline for the whole call in milliseconds (default: the daemon's request_timeout).");
}

static json_t *annotations(const char *title, bool read_only) {
    return json_pack("{sssbsbsbsb}", "title", title, "readOnlyHint", read_only, "destructiveHint",
                     0, "idempotentHint", 1, "openWorldHint", 0);
}

static json_t *tool_of(const char *name, const char *title, const char *description,
                       json_t *input, json_t *output, bool read_only) {
    return json_pack("{sssssssososo}", "name", name, "title", title, "description", description,
                     "inputSchema", input, "outputSchema", output, "annotations",
                     annotations(title, read_only));
}

static json_t *tool(const char *name, const char *title, const char *description, json_t *input,
                    json_t *output) {
    return tool_of(name, title, description, input, output, true);
}

static json_t *nullable(const char *type) { return json_pack("{s[ss]}", "type", type, "null"); }

/* decide_<pipeline>'s result: what an agent acts on, from the pipeline's answer. */
static json_t *pipeline_output_schema(void) {
    json_t *check = json_pack(
        "{sss{s{ss}s{ss}s{ss}sos{ss}soso}s[ssssss]}", "type", "object", "properties", "stage",
        "type", "integer", "model", "type", "string", "question", "type", "string", "answer",
        nullable("string"), "score", "type", "number", "threshold", nullable("string"), "passed",
        nullable("boolean"), "required", "stage", "model", "question", "score", "threshold", "passed");
    json_t *attempt = json_pack("{sss{s{ss}s{ss}}s[ss]}", "type", "object", "properties",
                                "candidate", "type", "string", "passed", "type", "boolean",
                                "required", "candidate", "passed");
    json_t *timing = json_pack("{sss{s{ss}s{ss}s{ss}s{ss}}}", "type", "object", "properties",
                               "total_ms", "type", "integer", "queued_ms", "type", "integer",
                               "loading_ms", "type", "integer", "running_ms", "type", "integer");
    return json_pack(
        "{sss{s{ss}s{s[sss]}sos{ss}s{sss{ss}}sos{ssso}s{ssso}sos{ss}}s[ssssssss]}", "type",
        "object", "properties", "pipeline", "type", "string", "verdict", "enum", "accepted",
        "rejected", "escalated", "choice", nullable("string"), "reason", "type", "string",
        "probabilities", "type", "object", "additionalProperties", "type", "number",
        "confidence", nullable("number"), "checks", "type", "array", "items", check,
        "attempts", "type", "array", "items", attempt, "timing", timing, "request_id", "type",
        "string", "required", "pipeline", "verdict", "choice", "reason", "probabilities",
        "checks", "attempts", "timing");
}

static json_t *pipeline_tool(const json_t *pl) {
    const char *name = json_string_value(json_object_get(pl, "name"));
    const char *desc = json_string_value(json_object_get(pl, "description"));
    const char *decider =
        json_string_value(json_object_get(json_object_get(pl, "decide"), "model"));
    if (!name || !decider)
        return NULL;
    char tname[160], title[200], fallback[600];
    snprintf(tname, sizeof tname, PIPELINE_PREFIX "%s", name);
    snprintf(title, sizeof title, "Decide, then verify: %s", name);
    if (!desc || !*desc) {
        snprintf(fallback, sizeof fallback,
                 "Runs tandem's pipeline \"%s\": the model %s chooses among the candidates, "
                 "then verifiers check the choice against thresholds. Returns the verdict "
                 "(accepted, rejected or escalated), the choice and every probability.",
                 name, decider);
        desc = fallback;
    }
    json_t *input = json_pack(
        "{sss{sos{sssisss{s[ssss]}}s{ssss}s{sssisiss}s{sssisiss}so}s[ss]sb}", "type", "object",
        "properties", "state", state_schema(), "candidates", "type", "object", "minProperties",
        2, "description", "The options to choose from: name -> description (text, data or null).",
        "additionalProperties", "type", "string", "object", "array", "null", "instructions",
        "type", "string", "description", "Overrides the pipeline's decide instructions.",
        "max_attempts", "type", "integer", "minimum", 1, "maximum", 64, "description",
        "Candidates verified at most.", "min_confidence", "type", "number", "minimum", 0,
        "maximum", 1, "description", "A decide confidence below this rejects.", "timeout_ms",
        timeout_schema(), "required", "state", "candidates", "additionalProperties", 0);
    return tool(tname, title, desc, input, pipeline_output_schema());
}

static json_t *systemone_tool(const json_t *names) {
    json_t *model = json_pack("{sssOss}", "type", "string", "enum", names, "description",
                              "The decision model that answers (default: the daemon's default model).");
    json_t *question = json_pack(
        "{sss{s{s[sss]}s{ss}s{ss}}s[ss]}", "type", "object", "properties", "type", "enum",
        "choice", "score", "noul", "instructions", "description",
        "What to decide: text, or data as an object or array.", "criteria", "description",
        "choice: option -> description; score: level descriptions, lowest first; noul: "
        "optional {\"true\": ..., \"false\": ...}.",
        "required", "type", "instructions");
    json_t *input = json_pack("{sss{sosos{sssisoss}so}s[ss]sb}", "type", "object", "properties",
                              "model", model, "state", state_schema(), "questions", "type",
                              "object", "minProperties", 1, "additionalProperties", question,
                              "description", "Typed questions, id -> question; each is answered "
                              "with a probability for every answer.",
                              "timeout_ms", timeout_schema(), "required", "state", "questions",
                              "additionalProperties", 0);
    json_t *output = json_pack("{sss{s{ss}s{ss}s{ss}}s[ss]}", "type", "object", "properties",
                               "model", "type", "string", "answers", "type", "object", "usage",
                               "type", "object", "required", "model", "answers");
    return tool("systemone", "Ask a decision model",
                "Asks one of tandem's decision models typed questions (choice, score, noul) "
                "about a state, as POST /v1/systemone does, and returns every answer's "
                "probabilities.",
                input, output);
}

static json_t *status_tool(void) {
    json_t *input = json_pack("{sss{}sb}", "type", "object", "properties", "additionalProperties", 0);
    json_t *output = json_pack("{sss{s{ss}s{ss}s{ss}s{ss}}s[ssss]}", "type", "object",
                               "properties", "models", "type", "array", "devices", "type",
                               "array", "queue", "type", "object", "budget", "type", "object",
                               "required", "models", "devices", "queue", "budget");
    return tool("status", "tandem status",
                "What tandem has resident, loading and unloaded, the memory per device, and "
                "the queue, as `tandem ps` shows it.",
                input, output);
}

static json_t *feedback_tool(void) {
    json_t *input = json_pack(
        "{sss{s{ssss}s{ssss}s{s[ss]ss}s{ssss}so}s[s]sb}", "type", "object", "properties",
        "request_id", "type", "string", "description",
        "The request_id of the answer (a pipeline's or systemone's result).", "gold", "type",
        "object", "description",
        "A systemone request: question -> the right answer (an option, true/false, a level, or "
        "{\"answer\": A, \"target\": {option: p}}).",
        "outcome", "type", "string", "null", "description",
        "A pipeline request: the candidate that was right, or null when none was.", "replace",
        "type", "boolean", "description", "Change a label given before.", "timeout_ms",
        timeout_schema(), "required", "request_id", "additionalProperties", 0);
    json_t *list = json_pack("{sss{ss}}", "type", "array", "items", "type", "string");
    json_t *output = json_pack("{sss{s{ss}sOsOso}s[ssss]}", "type", "object", "properties",
                               "request_id", "type", "string", "labelled", list, "unchanged",
                               list, "replaced", list, "required", "request_id", "labelled",
                               "unchanged", "replaced");
    return tool_of("feedback", "Report how a decision went",
                   "Tells tandem the outcome of an earlier decision: the right answers of a "
                   "systemone request's questions (gold), or the candidate that was right for a "
                   "pipeline (outcome, null when none). tandem scores its live accuracy and "
                   "calibration on these labels (GET /v1/quality).",
                   input, output, false);
}

/* The decision models' names in GET /v1/models' body. */
static json_t *decision_models(const json_t *models) {
    json_t *names = json_array();
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(models, "data"), i, e) {
        const char *type = json_string_value(json_object_get(e, "decision_type"));
        const char *id = json_string_value(json_object_get(e, "id"));
        if (type && *type && id)
            json_array_append_new(names, json_string(id));
    }
    return names;
}

bool mcp_set_catalog(struct mcp *m, const json_t *pipelines, const json_t *models) {
    json_t *tools = json_array();
    size_t i;
    const json_t *pl;
    json_array_foreach(json_object_get(pipelines, "pipelines"), i, pl) {
        json_t *t = pipeline_tool(pl);
        if (t)
            json_array_append_new(tools, t);
    }
    json_t *names = decision_models(models);
    if (json_array_size(names))
        json_array_append_new(tools, systemone_tool(names));
    json_decref(names);
    json_array_append_new(tools, status_tool());
    json_array_append_new(tools, feedback_tool());
    char *text = json_dumps(tools, JSON_COMPACT);
    if (!text) {
        json_decref(tools);
        return false;
    }
    bool changed = !m->tools_text || strcmp(text, m->tools_text);
    json_decref(m->pipelines);
    m->pipelines = pipelines ? json_deep_copy(pipelines) : json_object();
    json_decref(m->tools);
    free(m->tools_text);
    m->tools = tools;
    m->tools_text = text;
    return changed;
}

static const json_t *find_tool(const struct mcp *m, const char *name) {
    size_t i;
    const json_t *t;
    json_array_foreach(m->tools, i, t) {
        if (!strcmp(json_string_value(json_object_get(t, "name")), name))
            return t;
    }
    return NULL;
}

/* --- messages ----------------------------------------------------------------------------- */

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPABILITIES "io.modelcontextprotocol/clientCapabilities"
#define META_SERVER_INFO "io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION "io.modelcontextprotocol/subscriptionId"
#define INSTRUCTIONS                                                                              \
    "tandem runs local decision models. decide_<pipeline> decides among candidates and "        \
    "verifies the choice; systemone asks one model typed questions; status shows what is "      \
    "loaded; feedback reports how an earlier decision went."

/* s as a JSON string: bytes that are not UTF-8 (a name cut at a buffer's
 * end, a body quoted as is) become U+FFFD, so that the message always exists. */
json_t *mcp_error(const json_t *id, int code, const char *message) {
    return json_pack("{sssOs{siso}}", "jsonrpc", "2.0", "id", id ? id : json_null(), "error",
                     "code", code, "message", jstr_lossy(message, strlen(message)));
}

static json_t *server_info(void) {
    return json_pack("{ssssss}", "name", "tandem", "title", "tandem", "version", TANDEM_VERSION);
}

static bool modern(const char *version) { return !strcmp(version, MCP_MODERN_VERSION); }

/* The response carrying result (stolen) for a session at version: the
 * current revision stamps every result with its type and the server. */
static json_t *response(const json_t *id, json_t *result, const char *version) {
    if (result && modern(version)) {
        json_t *meta = json_object_get(result, "_meta");
        if (!meta)
            json_object_set_new(result, "_meta", meta = json_object());
        json_object_set_new(meta, META_SERVER_INFO, server_info());
        json_object_set_new(result, "resultType", json_string("complete"));
    }
    return json_pack("{sssOso}", "jsonrpc", "2.0", "id", id, "result", result);
}

static void send(struct mcp_out *out, json_t *msg) {
    out->action = MCP_SEND;
    out->msg = msg;
}

static void fail(struct mcp_out *out, const json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(struct mcp_out *out, const json_t *id, int code, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    send(out, mcp_error(id, code, text));
}

/* Every revision tandem speaks, the current one first, or only that one. */
static json_t *versions(bool modern_only) {
    json_t *all = json_pack("[s]", MCP_MODERN_VERSION);
    for (size_t i = 0; !modern_only && MCP_PROTOCOL_VERSIONS[i]; i++)
        json_array_append_new(all, json_string(MCP_PROTOCOL_VERSIONS[i]));
    return all;
}

/* -32022: the revision asked for is not one this session speaks. */
static void unsupported(struct mcp_out *out, const json_t *id, const char *asked, bool modern_only) {
    char text[200];
    snprintf(text, sizeof text, "protocol revision \"%.40s\" is not one tandem speaks here", asked);
    json_t *msg = mcp_error(id, MCP_UNSUPPORTED_VERSION, text);
    json_object_set_new(json_object_get(msg, "error"), "data",
                        json_pack("{soso}", "supported", versions(modern_only), "requested",
                                  jstr_lossy(asked, strlen(asked))));
    send(out, msg);
}

static void initialize(struct mcp *m, const json_t *id, const json_t *params, struct mcp_out *out) {
    const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
    if (!asked) {
        fail(out, id, MCP_INVALID_PARAMS, "initialize: params.protocolVersion must be a string");
        return;
    }
    if (m->era == ERA_MODERN) { /* a client that timed out on discover: it re-probes */
        unsupported(out, id, asked, true);
        return;
    }
    m->era = ERA_HANDSHAKE;
    mcp_set_version(m, known_version(asked) ? asked : MCP_PROTOCOL_VERSIONS[0]);
    send(out, response(id, json_pack("{sss{s{sb}}soss}", "protocolVersion", m->version,
                                     "capabilities", "tools", "listChanged", 1, "serverInfo",
                                     server_info(), "instructions", INSTRUCTIONS),
                       m->version));
    out->handshake = true;
}

static void discover(struct mcp *m, const json_t *id, struct mcp_out *out) {
    send(out, response(id, json_pack("{sos{s{sb}}sssssi}", "supportedVersions", versions(false),
                                     "capabilities", "tools", "listChanged", 1, "instructions",
                                     INSTRUCTIONS, "cacheScope", "private", "ttlMs", 0),
                       m->version));
}

/* subscriptions/listen: tandem has one kind of notification, the tool list's. */
static void listen(const json_t *id, const json_t *params, struct mcp_out *out) {
    const json_t *asked = json_object_get(params, "notifications");
    json_t *honored = json_object();
    if (json_is_true(json_object_get(asked, "toolsListChanged")))
        json_object_set_new(honored, "toolsListChanged", json_true());
    out->action = MCP_LISTEN;
    out->id = json_incref((json_t *)id);
    out->msg = json_pack("{sssss{s{sO}so}}", "jsonrpc", "2.0", "method",
                         "notifications/subscriptions/acknowledged", "params", "_meta",
                         META_SUBSCRIPTION, id, "notifications", honored);
}

/* Checks the envelope of a request of the current revision (params._meta,
 * and the HTTP headers when there are some). Returns false after the error. */
static bool envelope_ok(struct mcp *m, const json_t *id, const char *method, const json_t *meta,
                        struct mcp_out *out) {
    const char *asked = json_string_value(json_object_get(meta, META_VERSION));
    if (!asked) {
        fail(out, id, MCP_INVALID_PARAMS, "params._meta must carry \"%s\" (a string)", META_VERSION);
    } else if (!json_is_object(json_object_get(meta, META_CAPABILITIES))) {
        fail(out, id, MCP_INVALID_PARAMS, "params._meta must carry \"%s\" (an object)",
             META_CAPABILITIES);
    } else if (m->expect && (strcmp(m->expect_version, asked) || strcmp(m->expect_method, method))) {
        fail(out, id, MCP_HEADER_MISMATCH, "the MCP-Protocol-Version and Mcp-Method headers must "
             "match params._meta and the method (%s)", method);
    } else if (!modern(asked)) {
        unsupported(out, id, asked, false);
    } else if (m->era == ERA_HANDSHAKE) {
        fail(out, id, MCP_INVALID_REQUEST, "this session negotiated %s with initialize: send "
             "requests without the 2026-07-28 envelope", m->version);
    } else {
        m->era = ERA_MODERN;
        snprintf(m->version, sizeof m->version, "%s", MCP_MODERN_VERSION);
        return true;
    }
    return false;
}

static json_t *tool_result(const struct mcp_call *call, const char *text,
                           json_t *structured_content, bool is_error);

/* Copies the named optional members of args into body. */
static void copy_members(json_t *body, const json_t *args, const char *const *keys) {
    for (size_t i = 0; keys[i]; i++) {
        json_t *v = json_object_get(args, keys[i]);
        if (v)
            json_object_set(body, keys[i], v);
    }
}

/* The models a pipeline tool needs, from its catalog entry. */
static json_t *pipeline_models(const char *pipeline, const json_t *pipelines) {
    json_t *names = json_array();
    size_t i, v;
    const json_t *pl, *stage;
    json_array_foreach(json_object_get(pipelines, "pipelines"), i, pl) {
        if (strcmp(json_string_value(json_object_get(pl, "name")) ?: "", pipeline))
            continue;
        json_array_append(names, json_object_get(json_object_get(pl, "decide"), "model"));
        json_array_foreach(json_object_get(pl, "verify"), v, stage)
            json_array_append(names, json_object_get(stage, "model"));
    }
    return names;
}

/* Whether args has only the named members and timeout_ms; else err[cap]
 * names the first other one. */
static bool known_arguments(const struct mcp_call *c, const json_t *args,
                            const char *const *keys, char *err, size_t cap) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)args, k, v) {
        bool known = !strcmp(k, "timeout_ms");
        for (size_t i = 0; keys[i] && !known; i++)
            known = !strcmp(k, keys[i]);
        if (!known) {
            size_t n = (size_t)snprintf(err, cap, "unknown argument \"%s\": %s takes", k, c->tool);
            for (size_t i = 0; keys[i] && n < cap; i++)
                n += (size_t)snprintf(err + n, cap - n, " %s,", keys[i]);
            if (n < cap)
                snprintf(err + n, cap - n, " timeout_ms");
            return false;
        }
    }
    return true;
}

/* Fills c's request (method, path, body, deadline, models) from a tool's
 * arguments. Returns false after an error message in err[cap]. */
static bool build_call(struct mcp_call *c, const json_t *args, char *err, size_t cap) {
    static const char *const pipeline_keys[] = {"state", "candidates", "instructions",
                                                "max_attempts", "min_confidence", NULL};
    static const char *const s1_keys[] = {"model", "state", "questions", NULL};
    static const char *const feedback_keys[] = {"request_id", "gold", "outcome", "replace", NULL};
    static const char *const no_keys[] = {NULL};
    const char *const *keys = c->kind == MCP_TOOL_PIPELINE    ? pipeline_keys
                              : c->kind == MCP_TOOL_SYSTEMONE ? s1_keys
                              : c->kind == MCP_TOOL_FEEDBACK  ? feedback_keys
                                                              : no_keys;
    const json_t *t = json_object_get(args, "timeout_ms");
    if (t && (!json_is_integer(t) || json_integer_value(t) < 1)) {
        snprintf(err, cap, "timeout_ms must be a positive integer (milliseconds)");
        return false;
    }
    if (!known_arguments(c, args, keys, err, cap))
        return false;
    c->timeout_ms = t ? (long)json_integer_value(t) : 0;
    c->models = json_array();
    if (c->kind == MCP_TOOL_STATUS) {
        c->method = "GET";
        snprintf(c->path, sizeof c->path, "/v1/status");
        return true;
    }
    c->method = "POST";
    c->body = json_object();
    copy_members(c->body, args, keys);
    if (c->kind == MCP_TOOL_FEEDBACK) {
        snprintf(c->path, sizeof c->path, "/v1/feedback");
    } else if (c->kind == MCP_TOOL_SYSTEMONE) {
        snprintf(c->path, sizeof c->path, "/v1/systemone");
        if (json_is_string(json_object_get(args, "model")))
            json_array_append(c->models, json_object_get(args, "model"));
    } else {
        snprintf(c->path, sizeof c->path, "/v1/pipelines/%s", c->tool + strlen(PIPELINE_PREFIX));
    }
    return true;
}

static void call_tool(struct mcp *m, const json_t *id, const json_t *params, struct mcp_out *out) {
    const char *name = json_string_value(json_object_get(params, "name"));
    const json_t *args = json_object_get(params, "arguments");
    if (!name) {
        fail(out, id, MCP_INVALID_PARAMS, "tools/call: params.name must be a string");
        return;
    }
    if (!find_tool(m, name)) {
        fail(out, id, MCP_INVALID_PARAMS, "unknown tool \"%s\" (tools/list names them)", name);
        return;
    }
    if (args && !json_is_object(args)) {
        fail(out, id, MCP_INVALID_PARAMS, "tools/call: params.arguments must be an object");
        return;
    }
    struct mcp_call *c = &out->call;
    c->kind = !strcmp(name, "status")      ? MCP_TOOL_STATUS
              : !strcmp(name, "systemone") ? MCP_TOOL_SYSTEMONE
              : !strcmp(name, "feedback")  ? MCP_TOOL_FEEDBACK
                                           : MCP_TOOL_PIPELINE;
    snprintf(c->tool, sizeof c->tool, "%s", name);
    snprintf(c->version, sizeof c->version, "%s", m->version);
    c->id = json_incref((json_t *)id);
    json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
    if (json_is_string(token) || json_is_integer(token))
        c->progress_token = json_incref(token);
    char err[256];
    json_t *empty = json_object();
    bool ok = build_call(c, args ? args : empty, err, sizeof err);
    json_decref(empty);
    if (!ok) {
        send(out, tool_result(c, err, NULL, true));
        mcp_call_clear(c);
        return;
    }
    if (c->kind == MCP_TOOL_PIPELINE) {
        json_decref(c->models);
        c->models = pipeline_models(name + strlen(PIPELINE_PREFIX), m->pipelines);
    }
    out->action = MCP_CALL;
}

static void request(struct mcp *m, const json_t *id, const char *method, const json_t *params,
                    struct mcp_out *out) {
    const json_t *meta = json_object_get(params, "_meta");
    out->modern = json_object_get(meta, META_VERSION) || !strcmp(method, "server/discover") ||
                  (m->expect && modern(m->expect_version)) ||
                  (m->era == ERA_MODERN && strcmp(method, "initialize"));
    if (params && !json_is_object(params)) {
        fail(out, id, MCP_INVALID_PARAMS, "%s: params must be an object", method);
    } else if (!strcmp(method, "initialize") && !json_object_get(meta, META_VERSION)) {
        initialize(m, id, params, out);
    } else if (out->modern && !envelope_ok(m, id, method, meta, out)) {
        ; /* answered */
    } else if (!strcmp(method, "ping") && !out->modern) { /* the current revision has none */
        send(out, response(id, json_object(), m->version));
    } else if (!strcmp(method, "tools/list")) {
        json_t *tools = json_deep_copy(m->tools);
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            if (!structured(m->version))
                json_object_del(t, "outputSchema");
        }
        json_t *result = json_pack("{so}", "tools", tools);
        if (out->modern) {
            json_object_set_new(result, "cacheScope", json_string("private"));
            json_object_set_new(result, "ttlMs", json_integer(0));
        }
        send(out, response(id, result, m->version));
    } else if (!strcmp(method, "tools/call")) {
        call_tool(m, id, params, out);
    } else if (!strcmp(method, "server/discover")) {
        discover(m, id, out);
    } else if (!strcmp(method, "subscriptions/listen") && out->modern) {
        listen(id, params, out);
    } else {
        fail(out, id, MCP_METHOD_NOT_FOUND, "method \"%s\" not found (tandem serves tools only)", method);
    }
}

static void notification(struct mcp *m, const char *method, const json_t *params, struct mcp_out *out) {
    if (!strcmp(method, "notifications/initialized")) {
        m->initialized = true;
    } else if (!strcmp(method, "notifications/cancelled")) {
        const json_t *id = json_object_get(params, "requestId");
        if (json_is_string(id) || json_is_integer(id)) {
            out->action = MCP_CANCEL;
            out->id = json_incref((json_t *)id);
        }
    }
}

void mcp_handle(struct mcp *m, const char *msg, size_t len, struct mcp_out *out) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *j = json_loadb(msg, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!j) {
        char text[300];
        snprintf(text, sizeof text, "parse error at line %d, column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        send(out, mcp_error(NULL, MCP_PARSE_ERROR, text));
        return;
    }
    const json_t *id = json_object_get(j, "id");
    const char *method = json_string_value(json_object_get(j, "method"));
    bool id_ok = json_is_string(id) || json_is_integer(id);
    if (json_is_array(j))
        fail(out, NULL, MCP_INVALID_REQUEST, "batches are not part of this revision: send one message at a time");
    else if (!json_is_object(j))
        fail(out, NULL, MCP_INVALID_REQUEST, "a message must be a JSON object");
    else if (strcmp(json_string_value(json_object_get(j, "jsonrpc")) ?: "", "2.0"))
        fail(out, id_ok ? id : NULL, MCP_INVALID_REQUEST, "\"jsonrpc\" must be \"2.0\"");
    else if (!method && (json_object_get(j, "result") || json_object_get(j, "error")))
        ; /* a response to nothing we asked */
    else if (!method)
        fail(out, id_ok ? id : NULL, MCP_INVALID_REQUEST, "\"method\" must be a string");
    else if (id && !id_ok)
        fail(out, NULL, MCP_INVALID_REQUEST, "\"id\" must be a string or an integer");
    else if (!id)
        notification(m, method, json_object_get(j, "params"), out);
    else
        request(m, id, method, json_object_get(j, "params"), out);
    json_decref(j);
}

/* --- results ------------------------------------------------------------------------------ */

json_t *mcp_progress(const json_t *token, unsigned progress, const char *message) {
    return json_pack("{sssss{sOsIso}}", "jsonrpc", "2.0", "method", "notifications/progress",
                     "params", "progressToken", token, "progress", (json_int_t)progress, "message",
                     jstr_lossy(message, strlen(message)));
}

json_t *mcp_list_changed(void) {
    return json_pack("{ssss}", "jsonrpc", "2.0", "method", "notifications/tools/list_changed");
}

json_t *mcp_listen_changed(const json_t *id) {
    return json_pack("{sssss{s{sO}}}", "jsonrpc", "2.0", "method",
                     "notifications/tools/list_changed", "params", "_meta", META_SUBSCRIPTION, id);
}

json_t *mcp_listen_close(const json_t *id) {
    return response(id, json_pack("{s{sO}}", "_meta", META_SUBSCRIPTION, id), MCP_MODERN_VERSION);
}

int mcp_http_status(const json_t *msg) {
    const json_t *e = json_object_get(msg, "error");
    if (!e)
        return 200;
    return json_integer_value(json_object_get(e, "code")) == MCP_METHOD_NOT_FOUND ? 404 : 400;
}

/* A threshold as a reader writes it: ">= 0.5" -> "≥ 0.5". */
static void threshold_text(const char *th, char *out, size_t cap) {
    const char *op = !strncmp(th, ">=", 2) ? "\u2265" : !strncmp(th, "<=", 2) ? "\u2264" : NULL;
    if (op)
        snprintf(out, cap, "%s%s", op, th + 2);
    else
        snprintf(out, cap, "%s", th);
}

/* A verify answer's number: P(true), the score, or the chosen option's p. */
static double answer_value(const json_t *a, const char **choice) {
    const char *type = json_string_value(json_object_get(a, "type"));
    *choice = NULL;
    if (type && !strcmp(type, "choice")) {
        *choice = json_string_value(json_object_get(a, "choice"));
        return json_number_value(json_object_get(json_object_get(a, "probabilities"), *choice ?: ""));
    }
    return json_number_value(json_object_get(a, type && !strcmp(type, "score") ? "score" : "noul"));
}

/* The checks of one attempt, flattened: one per verify question. */
static json_t *attempt_checks(const json_t *attempt) {
    json_t *checks = json_array();
    size_t i;
    const json_t *stage;
    json_array_foreach(json_object_get(attempt, "verify"), i, stage) {
        const char *q;
        const json_t *v;
        json_object_foreach((json_t *)json_object_get(stage, "questions"), q, v) {
            const char *choice;
            double x = answer_value(json_object_get(v, "answer"), &choice);
            json_array_append_new(
                checks, json_pack("{sOsOsssosfsOsO}", "stage", json_object_get(stage, "stage"),
                                  "model", json_object_get(stage, "model"), "question", q,
                                  "answer", choice ? json_string(choice) : json_null(), "score",
                                  x, "threshold", json_object_get(v, "threshold") ?: json_null(),
                                  "passed", json_object_get(v, "passed") ?: json_null()));
        }
    }
    return checks;
}

/* The decide stage's choice answer (the first of type choice). */
static const json_t *decide_choice(const json_t *answer) {
    const char *q;
    const json_t *a;
    json_object_foreach((json_t *)json_object_get(json_object_get(answer, "decide"), "answers"), q, a) {
        if (!strcmp(json_string_value(json_object_get(a, "type")) ?: "", "choice"))
            return a;
    }
    return NULL;
}

static json_t *pipeline_structured(const json_t *answer) {
    const json_t *choice = decide_choice(answer);
    json_t *attempts = json_array();
    size_t i;
    const json_t *at, *last = NULL;
    json_array_foreach(json_object_get(answer, "attempts"), i, at) {
        json_array_append_new(attempts, json_pack("{sOsb}", "candidate", json_object_get(at, "candidate"),
                                                  "passed", json_is_true(json_object_get(at, "passed"))));
        last = at;
    }
    const json_t *timing = json_object_get(answer, "timing");
    json_t *t = json_object();
    static const char *const keys[] = {"total_ms", "queued_ms", "loading_ms", "running_ms", NULL};
    copy_members(t, timing, keys);
    const json_t *probs = json_object_get(choice, "probabilities");
    json_t *s = json_pack("{sOsOsOsososOsososo}", "pipeline", json_object_get(answer, "pipeline"),
                          "verdict", json_object_get(answer, "verdict"), "choice",
                          json_object_get(answer, "choice") ?: json_null(), "reason",
                          json_string(json_string_value(json_object_get(answer, "reason")) ?: ""),
                          "probabilities", probs ? json_deep_copy(probs) : json_object(), "confidence",
                          json_object_get(choice, "confidence") ?: json_null(), "checks",
                          last ? attempt_checks(last) : json_array(), "attempts", attempts,
                          "timing", t);
    const json_t *rid = json_object_get(answer, "request_id");
    if (json_is_string(rid))
        json_object_set(s, "request_id", (json_t *)rid);
    return s;
}

/* Appends printf-style text to buf[cap] at *n. */
static void add(char *buf, size_t cap, size_t *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0)
        *n = *n + (size_t)k < cap ? *n + (size_t)k : cap;
}

/* "accepted: stop (0.38); verifier consistent 0.94 ≥ 0.5, on_topic 0.86 ≥ 0.5" */
static void pipeline_summary(const json_t *s, char *buf, size_t cap) {
    size_t n = 0;
    const char *verdict = json_string_value(json_object_get(s, "verdict")) ?: "?";
    const char *choice = json_string_value(json_object_get(s, "choice"));
    const json_t *attempts = json_object_get(s, "attempts");
    const char *tried = json_string_value(
        json_object_get(json_array_get(attempts, json_array_size(attempts) - 1), "candidate"));
    const json_t *probs = json_object_get(s, "probabilities");
    if (choice)
        add(buf, cap, &n, "%s: %s (%.2f)", verdict, choice,
            json_number_value(json_object_get(probs, choice)));
    else
        add(buf, cap, &n, "%s: %s", verdict, json_string_value(json_object_get(s, "reason")) ?: "");
    if (!choice && tried)
        add(buf, cap, &n, "; last tried %s (%.2f)", tried,
            json_number_value(json_object_get(probs, tried)));
    const char *model = NULL;
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(s, "checks"), i, c) {
        const char *m = json_string_value(json_object_get(c, "model")) ?: "?";
        bool same = model && !strcmp(model, m);
        add(buf, cap, &n, same ? ", " : "; %s ", m);
        model = m;
        const char *th = json_string_value(json_object_get(c, "threshold"));
        const char *ans = json_string_value(json_object_get(c, "answer"));
        char thr[300] = "";
        if (th)
            threshold_text(th, thr, sizeof thr);
        add(buf, cap, &n, "%s %s%s%.2f", json_string_value(json_object_get(c, "question")),
            ans ? ans : "", ans ? " " : "", json_number_value(json_object_get(c, "score")));
        if (th)
            add(buf, cap, &n, json_is_false(json_object_get(c, "passed")) ? ", needs %s" : " %s", thr);
    }
}

/* "route billing (0.90); angry 0.82; urgency 2.28" */
static void systemone_summary(const json_t *answer, char *buf, size_t cap) {
    size_t n = 0;
    add(buf, cap, &n, "%s:", json_string_value(json_object_get(answer, "model")) ?: "?");
    const char *q;
    const json_t *a;
    bool first = true;
    json_object_foreach((json_t *)json_object_get(answer, "answers"), q, a) {
        const char *choice;
        double x = answer_value(a, &choice);
        add(buf, cap, &n, "%s %s", first ? "" : ";", q);
        if (choice)
            add(buf, cap, &n, " %s (%.2f)", choice, x);
        else
            add(buf, cap, &n, " %.2f", x);
        first = false;
    }
}

static json_t *status_structured(const json_t *status) {
    static const char *const model_keys[] = {"name", "state", "device", "running", "queued",
                                             "planned", "measured", "pinned", "until_ms",
                                             "progress", NULL};
    json_t *models = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(status, "models"), i, m) {
        json_t *e = json_object();
        copy_members(e, m, model_keys);
        json_array_append_new(models, e);
    }
    const json_t *budget = json_object_get(status, "budget");
    const json_t *devices = json_object_get(budget, "devices");
    const json_t *queue = json_object_get(status, "queue");
    return json_pack("{sosososo}", "models", models, "devices",
                     json_is_array(devices) ? json_deep_copy(devices) : json_array(), "queue",
                     json_is_object(queue) ? json_deep_copy(queue) : json_object(), "budget",
                     json_is_object(budget) ? json_deep_copy(budget) : json_object());
}

/* "decider resident on cpu, verifier unloaded; 0 waiting (queue depth 64)" */
static void status_summary(const json_t *s, char *buf, size_t cap) {
    size_t n = 0;
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(s, "models"), i, m) {
        const char *state = json_string_value(json_object_get(m, "state")) ?: "?";
        add(buf, cap, &n, "%s%s %s", i ? ", " : "", json_string_value(json_object_get(m, "name")) ?: "?", state);
        if (strcmp(state, "unloaded"))
            add(buf, cap, &n, " on %s", json_string_value(json_object_get(m, "device")) ?: "?");
        json_int_t run = json_integer_value(json_object_get(m, "running"));
        json_int_t queued = json_integer_value(json_object_get(m, "queued"));
        if (run || queued)
            add(buf, cap, &n, " (%lld running, %lld queued)", (long long)run, (long long)queued);
    }
    const json_t *q = json_object_get(s, "queue");
    add(buf, cap, &n, "%s%lld waiting (queue depth %lld)", n ? "; " : "",
        (long long)json_integer_value(json_object_get(q, "waiting")),
        (long long)json_integer_value(json_object_get(q, "depth")));
}

static json_t *tool_result(const struct mcp_call *call, const char *text, json_t *structured_content,
                           bool is_error) {
    json_t *r = json_pack("{s[{ssso}]sb}", "content", "type", "text", "text",
                          jstr_lossy(text, strlen(text)), "isError", is_error);
    if (structured_content && structured(call->version))
        json_object_set(r, "structuredContent", structured_content);
    json_decref(structured_content);
    return response(call->id, r, call->version);
}

/* The route's error as an agent acts on it. */
static void error_text(const struct mcp_call *call, int status, const json_t *body,
                       const char *raw, size_t len, long retry_after_s, char *buf, size_t cap) {
    const json_t *e = json_object_get(body, "error");
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *param = json_string_value(json_object_get(e, "param"));
    char fallback[300];
    if (!msg) {
        snprintf(fallback, sizeof fallback, "%.*s", (int)(len < 200 ? len : 200), raw ? raw : "");
        msg = fallback;
    }
    size_t n = 0;
    if (status == 0)
        add(buf, cap, &n, "tandem did not answer: %s", msg);
    else if (status == 400 || status == 422)
        add(buf, cap, &n, param ? "bad argument \"%s\": " : "bad arguments: ", param), add(buf, cap, &n, "%s", msg);
    else if (status == 401 || status == 403)
        add(buf, cap, &n, "not authorized (%d): %s; set TANDEM_API_KEY to a key of the daemon", status, msg);
    else if (status == 404)
        add(buf, cap, &n, "not found: %s", msg);
    else if (status == 409)
        add(buf, cap, &n, "a different label is already kept: %s", msg);
    else if (status == 429 || status == 529)
        add(buf, cap, &n, "the queue is full: %s", msg);
    else if (status == 503)
        add(buf, cap, &n, "the model cannot be loaded now: %s", msg);
    else if (status == 504)
        add(buf, cap, &n, "the deadline passed: %s", msg);
    else if (status == 502)
        add(buf, cap, &n, "the engine failed: %s", msg);
    else
        add(buf, cap, &n, "%s failed (%d): %s", call->tool, status, msg);
    if (retry_after_s >= 0)
        add(buf, cap, &n, "; retry in %ld s", retry_after_s);
}

/* "req_1: labelled route; unchanged -; replaced -". */
static void feedback_summary(const json_t *s, char *buf, size_t cap) {
    static const char *const lists[] = {"labelled", "unchanged", "replaced"};
    size_t n = 0;
    add(buf, cap, &n, "%s:", json_string_value(json_object_get(s, "request_id")) ?: "?");
    for (size_t k = 0; k < 3; k++) {
        const json_t *list = json_object_get(s, lists[k]);
        size_t i;
        const json_t *q;
        add(buf, cap, &n, "%s %s", k ? ";" : "", lists[k]);
        json_array_foreach(list, i, q) add(buf, cap, &n, "%s%s", i ? ", " : " ", json_string_value(q));
        if (!json_array_size(list))
            add(buf, cap, &n, " -");
    }
}

json_t *mcp_call_result(const struct mcp_call *call, int status, const char *body, size_t len,
                        long retry_after_s) {
    json_t *answer = body && status ? json_loadb(body, len, 0, NULL) : NULL;
    char text[2048];
    json_t *msg;
    if (status < 200 || status > 299 || !json_is_object(answer)) {
        error_text(call, status, answer, body, len, retry_after_s, text, sizeof text);
        msg = tool_result(call, text, NULL, true);
    } else if (call->kind == MCP_TOOL_PIPELINE) {
        json_t *s = pipeline_structured(answer);
        pipeline_summary(s, text, sizeof text);
        msg = tool_result(call, text, s, false);
    } else if (call->kind == MCP_TOOL_FEEDBACK) {
        static const char *const keys[] = {"request_id", "labelled", "unchanged", "replaced", NULL};
        json_t *s = json_object();
        copy_members(s, answer, keys);
        feedback_summary(s, text, sizeof text);
        msg = tool_result(call, text, s, false);
    } else if (call->kind == MCP_TOOL_SYSTEMONE) {
        static const char *const keys[] = {"model", "answers", "usage", NULL};
        json_t *s = json_object();
        copy_members(s, answer, keys);
        systemone_summary(s, text, sizeof text);
        msg = tool_result(call, text, s, false);
    } else {
        json_t *s = status_structured(answer);
        status_summary(s, text, sizeof text);
        msg = tool_result(call, text, s, false);
    }
    json_decref(answer);
    return msg;
}

json_t *mcp_progress_next(struct mcp_progress_state *st, const json_t *token,
                          const json_t *status, const json_t *models) {
    char detail[sizeof st->phase];
    mcp_phase(status, models, detail, sizeof detail);
    if (!strcmp(detail, st->phase))
        return NULL;
    memcpy(st->phase, detail, sizeof detail);
    return mcp_progress(token, ++st->sent, detail);
}

const char *mcp_phase(const json_t *status, const json_t *models, char *detail, size_t cap) {
    size_t i, k;
    const json_t *m, *want;
    const char *phase = "queued";
    snprintf(detail, cap, "queued");
    json_array_foreach(json_object_get(status, "models"), i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        const char *state = json_string_value(json_object_get(m, "state"));
        bool needed = false;
        json_array_foreach(models, k, want) needed |= name && json_is_string(want) && !strcmp(name, json_string_value(want));
        if (!needed || !state)
            continue;
        if (!strcmp(state, "loading")) {
            const json_t *p = json_object_get(m, "progress");
            const char *what = json_string_value(json_object_get(p, "phase"));
            snprintf(detail, cap, "loading %s%s%s", name, what ? ": " : "", what ? what : "");
            return "loading";
        }
        if (json_integer_value(json_object_get(m, "running")) > 0) {
            snprintf(detail, cap, "running on %s", name);
            phase = "running";
        }
    }
    return phase;
}

/* --- sessions (the handshake revisions over HTTP) ------------------------------------------ */

bool mcp_needs_session(const char *msg, size_t len, const char *version) {
    if (version && modern(version))
        return false;
    json_t *j = json_loadb(msg, len, 0, NULL);
    const char *method = json_string_value(json_object_get(j, "method"));
    const json_t *meta = json_object_get(json_object_get(j, "params"), "_meta");
    bool needs = method && strcmp(method, "initialize") && strcmp(method, "server/discover") &&
                 !json_object_get(meta, META_VERSION);
    json_decref(j);
    return needs;
}

struct mcp_session {
    char id[MCP_SESSION_ID_MAX + 1]; /* "" = a free slot */
    int64_t used_ms;
};

struct mcp_sessions {
    size_t cap;
    int64_t idle_ms;
    struct mcp_session slot[]; /* cap of them */
};

struct mcp_sessions *mcp_sessions_new(size_t cap, int64_t idle_ms) {
    if (!cap || cap > (SIZE_MAX - sizeof(struct mcp_sessions)) / sizeof(struct mcp_session))
        return NULL;
    struct mcp_sessions *s = mem_calloc(1, sizeof *s + cap * sizeof(struct mcp_session));
    if (s)
        s->cap = cap, s->idle_ms = idle_ms;
    return s;
}

void mcp_sessions_free(struct mcp_sessions *s) { mem_free(s); }

static struct mcp_session *session_find(struct mcp_sessions *s, const char *id, int64_t now_ms) {
    for (size_t i = 0; id && *id && i < s->cap; i++) {
        struct mcp_session *x = &s->slot[i];
        if (x->id[0] && now_ms - x->used_ms >= s->idle_ms)
            x->id[0] = '\0'; /* expired */
        else if (!strcmp(x->id, id))
            return x;
    }
    return NULL;
}

void mcp_sessions_add(struct mcp_sessions *s, const char *id, int64_t now_ms) {
    struct mcp_session *pick = &s->slot[0];
    for (size_t i = 0; i < s->cap; i++) {
        struct mcp_session *x = &s->slot[i];
        if (!x->id[0] || now_ms - x->used_ms >= s->idle_ms) {
            pick = x;
            break;
        }
        if (x->used_ms < pick->used_ms)
            pick = x; /* the least recently used, should all be live */
    }
    snprintf(pick->id, sizeof pick->id, "%s", id);
    pick->used_ms = now_ms;
}

bool mcp_sessions_use(struct mcp_sessions *s, const char *id, int64_t now_ms) {
    struct mcp_session *x = session_find(s, id, now_ms);
    if (x)
        x->used_ms = now_ms;
    return x;
}

bool mcp_sessions_end(struct mcp_sessions *s, const char *id, int64_t now_ms) {
    struct mcp_session *x = session_find(s, id, now_ms);
    if (x)
        x->id[0] = '\0';
    return x;
}
