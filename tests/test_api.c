/* Unit tests for api: the routes the router answers (api_routes) and the
 * operations docs/openapi.yaml documents are the same set of (method, path)
 * pairs, every difference named both ways; and the router lists each pair
 * once. The contract's statuses, media types and schemas are checked against
 * a live daemon by tests/e2e/test_openapi.py (schemathesis). Then the head
 * check (api_check_head), every refusal and admission on a config of its own. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <libfyaml.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "serve/api.h"

#define CONTRACT "docs/openapi.yaml"
#define MAX_PAIRS 128

/* A set of "METHOD /path" strings (methods upper-case), owned. */
struct pairs {
    char *v[MAX_PAIRS];
    size_t n;
};

static void pairs_free(struct pairs *s) {
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i]);
    s->n = 0;
}

static bool pairs_has(const struct pairs *s, const char *pair) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], pair))
            return true;
    return false;
}

static void pairs_add(struct pairs *s, const char *method, size_t mlen, const char *path,
                      size_t plen) {
    cr_assert_lt(s->n, MAX_PAIRS, "more than %d routes", MAX_PAIRS);
    char *p = malloc(mlen + plen + 2);
    cr_assert_not_null(p);
    for (size_t i = 0; i < mlen; i++)
        p[i] = (char)toupper((unsigned char)method[i]);
    p[mlen] = ' ';
    memcpy(p + mlen + 1, path, plen);
    p[mlen + 1 + plen] = '\0';
    s->v[s->n++] = p;
}

/* The router's pairs: each route once per method it takes. */
static void code_pairs(struct pairs *s) {
    struct api_route r[MAX_PAIRS];
    size_t n = api_routes(r, MAX_PAIRS);
    cr_assert(n > 0 && n <= MAX_PAIRS, "api_routes: %zu routes", n);
    for (size_t i = 0; i < n; i++)
        for (const char *m = r[i].methods; *m; m += strspn(m, " ")) {
            size_t len = strcspn(m, " ");
            pairs_add(s, m, len, r[i].path, strlen(r[i].path));
            m += len;
        }
}

static bool is_http_method(const char *key, size_t len) {
    static const char *const methods[] = {"get",  "put",   "post",  "delete",
                                          "options", "head", "patch", "trace"};
    for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
        if (strlen(methods[i]) == len && !strncmp(methods[i], key, len))
            return true;
    return false;
}

/* The contract's pairs: every operation of every path item (a path item's
 * other keys, such as parameters or summary, are not operations). */
static void contract_pairs(struct fy_document *doc, struct pairs *s) {
    struct fy_node *paths = fy_node_mapping_lookup_by_string(fy_document_root(doc), "paths", FY_NT);
    cr_assert(paths && fy_node_is_mapping(paths), "%s: no paths mapping", CONTRACT);
    void *it = NULL;
    struct fy_node_pair *p;
    while ((p = fy_node_mapping_iterate(paths, &it))) {
        size_t plen, klen;
        const char *path = fy_node_get_scalar(fy_node_pair_key(p), &plen);
        struct fy_node *item = fy_node_pair_value(p);
        cr_assert(path && item && fy_node_is_mapping(item), "%s: a path is not a mapping",
                  CONTRACT);
        void *it2 = NULL;
        struct fy_node_pair *op;
        while ((op = fy_node_mapping_iterate(item, &it2))) {
            const char *key = fy_node_get_scalar(fy_node_pair_key(op), &klen);
            if (key && is_http_method(key, klen))
                pairs_add(s, key, klen, path, plen);
        }
    }
}

/* Appends to out[cap] every pair of a that b lacks, "; "-separated. */
static void missing_from(const struct pairs *a, const struct pairs *b, char *out, size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < a->n && used < cap; i++)
        if (!pairs_has(b, a->v[i]))
            used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "; " : "", a->v[i]);
}

Test(api, the_router_and_the_contract_have_the_same_routes) {
    struct fy_document *doc = fy_document_build_from_file(NULL, CONTRACT);
    cr_assert_not_null(doc, "%s cannot be read as YAML (run the unit tests from the repository root)",
                       CONTRACT);
    struct pairs code = {0}, contract = {0};
    code_pairs(&code);
    contract_pairs(doc, &contract);
    char only_code[2048], only_contract[2048];
    missing_from(&code, &contract, only_code, sizeof only_code);
    missing_from(&contract, &code, only_contract, sizeof only_contract);
    cr_expect_str_empty(only_code, "routes the code answers that %s lacks: %s", CONTRACT,
                        only_code);
    cr_expect_str_empty(only_contract, "routes %s documents that the code lacks: %s", CONTRACT,
                        only_contract);
    cr_expect_eq(code.n, contract.n, "the code has %zu (method, path) pairs, %s %zu", code.n,
                 CONTRACT, contract.n);
    pairs_free(&code);
    pairs_free(&contract);
    fy_document_destroy(doc);
}

Test(api, the_router_lists_each_route_and_method_once) {
    struct pairs code = {0};
    code_pairs(&code);
    for (size_t i = 0; i < code.n; i++)
        for (size_t k = i + 1; k < code.n; k++)
            cr_expect_str_neq(code.v[i], code.v[k], "%s is listed twice", code.v[i]);
    pairs_free(&code);
}

Test(api, api_routes_copies_no_more_than_asked) {
    struct api_route one[2] = {{NULL, NULL}, {"sentinel", "sentinel"}};
    size_t n = api_routes(one, 1);
    cr_expect_gt(n, 1);
    cr_expect_not_null(one[0].path);
    cr_expect_str_eq(one[1].path, "sentinel", "api_routes wrote past cap");
}

/* --- api_parse_sdk_timeout: the OpenAI SDK's x-stainless-read-timeout ---------------------- */

Test(api, sdk_timeout_reads_what_python_writes) {
    static const struct { const char *text; int64_t ms; } ok[] = {
        {"600", 600000},   {"600.0", 600000}, {"30.0", 30000}, {"0.25", 250},
        {"42.5", 42500},   {".5", 500},       {"1e-05", 1},    {"1e+03", 1000000},
        {"0.0004", 1},     {"0.0015", 2},     {"86400", 86400000}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        int64_t ms = -1;
        cr_expect_eq(api_parse_sdk_timeout(ok[i].text, &ms), TANDEM_OK, "\"%s\"", ok[i].text);
        cr_expect_eq(ms, ok[i].ms, "\"%s\": %lld ms, expected %lld", ok[i].text, (long long)ms,
                     (long long)ok[i].ms);
    }
}

Test(api, sdk_timeout_refuses_anything_else_and_leaves_the_output_alone) {
    static const struct { const char *text; tandem_err e; } bad[] = {
        {"", TANDEM_ERR_FORMAT},       {"soon", TANDEM_ERR_FORMAT},   {"-1", TANDEM_ERR_FORMAT},
        {"+5", TANDEM_ERR_FORMAT},     {" 5", TANDEM_ERR_FORMAT},     {"5 ", TANDEM_ERR_FORMAT},
        {"5s", TANDEM_ERR_FORMAT},     {"0x10", TANDEM_ERR_FORMAT},   {"inf", TANDEM_ERR_FORMAT},
        {"nan", TANDEM_ERR_FORMAT},    {"1e400", TANDEM_ERR_FORMAT},  {".", TANDEM_ERR_FORMAT},
        {"1.2.3", TANDEM_ERR_FORMAT},  {"1e", TANDEM_ERR_FORMAT},     {"0", TANDEM_ERR_RANGE},
        {"0.0", TANDEM_ERR_RANGE},     {"1e-400", TANDEM_ERR_RANGE},  {"86400.001", TANDEM_ERR_RANGE},
        {"1e9", TANDEM_ERR_RANGE}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t ms = 7;
        cr_expect_eq(api_parse_sdk_timeout(bad[i].text, &ms), bad[i].e, "\"%s\"", bad[i].text);
        cr_expect_eq(ms, 7, "\"%s\" changed the output", bad[i].text);
    }
    int64_t ms = 7;
    cr_expect_eq(api_parse_sdk_timeout(NULL, &ms), TANDEM_ERR_FORMAT);
    cr_expect_eq(ms, 7);
}

/* --- api_check_head: target, Host, Origin, Content-Type, key -------------------------------- */

#define MODELS "models:\n  kev: {path: model.gguf}\n"

static struct config *head_config(const char *yaml) {
    struct config *c = NULL;
    char err[1024] = "";
    cr_assert_eq(config_load_buffer("tests/data/config/inline.yaml", yaml, strlen(yaml), &c, err,
                                    sizeof err), TANDEM_OK, "%s", err);
    return c;
}

static struct api *head_api(const struct config *cfg) {
    struct api_params p = {.cfg = cfg, .default_model = SIZE_MAX};
    struct api *a = api_new(&p);
    cr_assert_not_null(a);
    return a;
}

/* api_check_head on method target with headers given as "Name: value" lines; the
 * document it wrote must be tandem's error shape with the status as its code, and, when
 * want_message is set, that message. Returns the status. */
static int head(struct api *a, const char *method, const char *target, const char *lines,
                const char *want_message) {
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", lines);
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char *v = strchr(l, ':');
        cr_assert_not_null(v, "bad test header %s", l);
        *v++ = '\0';
        cr_assert_eq(evhttp_add_header(&h, l, v + strspn(v, " ")), 0);
    }
    char body[API_CHECK_HEAD_BODY_MAX];
    strcpy(body, "untouched");
    int status = api_check_head(a, method, target, &h, false, body, sizeof body, NULL);
    evhttp_clear_headers(&h);
    if (!status) {
        cr_expect_str_eq(body, "untouched", "an admission wrote a body");
        return 0;
    }
    json_error_t e;
    json_t *doc = json_loads(body, 0, &e);
    cr_assert_not_null(doc, "%s %s: not JSON: %s", method, target, body);
    json_t *err = json_object_get(doc, "error");
    cr_expect_eq(json_integer_value(json_object_get(err, "code")), status);
    const char *msg = json_string_value(json_object_get(err, "message"));
    cr_expect(msg && *msg);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(doc, "detail"), "message")),
                     msg);
    if (want_message)
        cr_expect_str_eq(msg, want_message, "%s %s [%s]", method, target, lines);
    json_decref(doc);
    return status;
}

#define LOCAL "Host: 127.0.0.1:8090\n"
#define KEYED "Authorization: Bearer k1\n"

Test(api_head, host_names_this_daemon_or_is_refused) {
    struct config *cfg = head_config("listen: 127.0.0.2:8090\napi_keys: [k1]\n" MODELS);
    struct api *a = head_api(cfg);
    static const char *const ok[] = {
        "localhost", "localhost:8090", "LOCALHOST:1234", "127.0.0.1", "127.0.0.1:8090",
        "[::1]", "[::1]:8090", "127.0.0.2", "127.0.0.2:8090", /* the listen address */
        "10.1.2.3:8090", "[fd00::5]", "[::ffff:127.0.0.1]:1" /* IP literals: nothing to rebind */};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        char lines[200];
        snprintf(lines, sizeof lines, "Host: %s\n" KEYED, ok[i]);
        cr_expect_eq(head(a, "GET", "/v1/status", lines, NULL), 0, "Host %s", ok[i]);
    }
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: rebind.evil.example\n" KEYED,
                      "Host rebind.evil.example is not one of this daemon's names: add it to "
                      "allowed_hosts"), 403);
    cr_expect_eq(head(a, "GET", "/health", "Host: tandem.example:8090\n", NULL), 403);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: localhost.evil.example\n" KEYED, NULL), 403);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: 127.0.0.1.nip.io\n" KEYED, NULL), 403);
    cr_expect_eq(head(a, "GET", "/v1/status", KEYED,
                      "the request has no Host header (HTTP/1.1 requires one: RFC 9112 section "
                      "3.2)"), 400);
    cr_expect_eq(head(a, "GET", "/v1/status", LOCAL "Host: localhost\n" KEYED,
                      "the request has more than one Host header"), 400);
    static const char *const malformed[] = {"evil example", "[::1", "::1", "localhost:99999",
                                            "localhost:80a", "a/b", "[]:80", ":8090", "x:123456"};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        char lines[200];
        snprintf(lines, sizeof lines, "Host: %s\n" KEYED, malformed[i]);
        cr_expect_eq(head(a, "GET", "/v1/status", lines, NULL), 400, "Host %s", malformed[i]);
    }
    api_free(a);
    config_free(cfg);
}

Test(api_head, allowed_hosts_adds_names_and_star_admits_any) {
    struct config *cfg = head_config("allowed_hosts: [Tandem.Example]\n" MODELS);
    struct api *a = head_api(cfg);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: tandem.example:8090\n", NULL), 0);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: TANDEM.example\n", NULL), 0);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: other.example\n", NULL), 403);
    /* a reload applies at once */
    struct config *any = head_config("allowed_hosts: ['*']\n" MODELS);
    struct api_params p = {.cfg = any, .default_model = SIZE_MAX};
    api_set_params(a, &p);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: other.example\n", NULL), 0);
    cr_expect_eq(head(a, "GET", "/v1/status", "", NULL), 400); /* still one Host */
    api_free(a);
    config_free(cfg);
    config_free(any);
}

Test(api_head, origin_is_the_daemons_own_or_allowed) {
    struct config *cfg = head_config("allowed_origins: [https://app.example]\n" MODELS);
    struct api *a = head_api(cfg);
    cr_expect_eq(head(a, "POST", "/admin/models/kev/load", LOCAL "Origin: http://127.0.0.1:8090\n",
                      NULL), 0);
    cr_expect_eq(head(a, "POST", "/admin/models/kev/load",
                      "Host: localhost:8090\nOrigin: http://LOCALHOST:8090\n", NULL), 0);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: 127.0.0.1\nOrigin: http://127.0.0.1:80\n",
                      NULL), 0);
    cr_expect_eq(head(a, "GET", "/v1/status", "Host: [::1]:8090\nOrigin: http://[::1]:8090\n",
                      NULL), 0);
    cr_expect_eq(head(a, "POST", "/mcp", LOCAL "Origin: https://app.example\n", NULL), 0);
    cr_expect_eq(head(a, "POST", "/v1/systemone", LOCAL "Origin: http://evil.example\n",
                      "Origin http://evil.example may not use this daemon: it is neither its own "
                      "(http://127.0.0.1:8090) nor one of allowed_origins"), 403);
    static const char *const refused[] = {
        "http://127.0.0.1:3000", /* another local page: not this daemon's */
        "http://localhost:8090", /* another name for it is another origin */
        "https://127.0.0.1:8090", "http://127.0.0.1:8090/ui", "null", "file://",
        "https://app.example:8443", "http://app.example"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char lines[200];
        snprintf(lines, sizeof lines, LOCAL "Origin: %s\n", refused[i]);
        cr_expect_eq(head(a, "POST", "/mcp", lines, NULL), 403, "Origin %s", refused[i]);
    }
    api_free(a);
    config_free(cfg);
}

Test(api_head, a_body_is_json) {
    struct config *cfg = head_config(MODELS);
    struct api *a = head_api(cfg);
    static const char *const json[] = {"application/json", "application/json; charset=utf-8",
                                       "Application/JSON;charset=UTF-8", " application/json "};
    for (size_t i = 0; i < sizeof json / sizeof *json; i++) {
        char lines[200];
        snprintf(lines, sizeof lines, LOCAL "Content-Type: %s\nContent-Length: 12\n", json[i]);
        cr_expect_eq(head(a, "POST", "/v1/systemone", lines, NULL), 0, "%s", json[i]);
    }
    cr_expect_eq(head(a, "POST", "/v1/systemone", LOCAL "Content-Type: text/plain\nContent-Length: 12\n",
                      "Content-Type text/plain is not accepted: tandem takes application/json"),
                 415);
    static const char *const other[] = {"application/x-www-form-urlencoded",
                                        "multipart/form-data; boundary=x", "text/plain;charset=UTF-8",
                                        "application/jsonp", "application/json-seq", ""};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        char lines[200];
        snprintf(lines, sizeof lines, LOCAL "Content-Type: %s\nContent-Length: 12\n", other[i]);
        cr_expect_eq(head(a, "POST", "/v1/systemone", lines, NULL), 415, "%s", other[i]);
    }
    /* an empty form post still names its type: refused, body or not */
    cr_expect_eq(head(a, "POST", "/admin/models/kev/load",
                      LOCAL "Content-Type: text/plain\nContent-Length: 0\n", NULL), 415);
    cr_expect_eq(head(a, "POST", "/v1/systemone", LOCAL "Content-Length: 5\n",
                      "a request body needs Content-Type: application/json (none was sent)"), 415);
    cr_expect_eq(head(a, "POST", "/v1/systemone", LOCAL "Transfer-Encoding: chunked\n", NULL), 415);
    /* bodyless, no type: a load or an unload as curl -X POST sends it */
    cr_expect_eq(head(a, "POST", "/admin/models/kev/load", LOCAL, NULL), 0);
    cr_expect_eq(head(a, "POST", "/admin/models/kev/load", LOCAL "Content-Length: 0\n", NULL), 0);
    api_free(a);
    config_free(cfg);
}

Test(api_head, a_nul_in_the_path_is_refused) {
    struct config *cfg = head_config(MODELS);
    struct api *a = head_api(cfg);
    static const char *const nul[] = {"/v1/models%00x", "/v1/chat/completions%00/../props",
                                      "/%00", "/v1/sys%00temone?x=1"};
    for (size_t i = 0; i < sizeof nul / sizeof *nul; i++)
        cr_expect_eq(head(a, "GET", nul[i], LOCAL, "the path holds an encoded NUL byte (%00), "
                          "which no route has"), 400, "%s", nul[i]);
    cr_expect_eq(head(a, "GET", "/v1/status?q=%00", LOCAL, NULL), 0); /* a query is no path */
    cr_expect_eq(head(a, "GET", "/%2500", LOCAL, NULL), 0);           /* the text "%00" */
    api_free(a);
    config_free(cfg);
}

Test(api_head, the_key_is_checked_last_and_not_on_preflights) {
    struct config *cfg = head_config("api_keys: [k1, k2]\n" MODELS);
    struct api *a = head_api(cfg);
    cr_expect_eq(head(a, "GET", "/v1/status", LOCAL,
                      "a valid API key is required: Authorization: Bearer <key>"), 401);
    cr_expect_eq(head(a, "GET", "/v1/status", LOCAL "Authorization: Bearer k3\n", NULL), 401);
    cr_expect_eq(head(a, "GET", "/v1/status", LOCAL "Authorization: Bearer k2\n", NULL), 0);
    cr_expect_eq(head(a, "GET", "/nowhere", LOCAL, NULL), 401); /* no route: keyed too */
    cr_expect_eq(head(a, "GET", "/health", LOCAL, NULL), 0);
    cr_expect_eq(head(a, "GET", "/ui", LOCAL, NULL), 0);
    cr_expect_eq(head(a, "OPTIONS", "/v1/systemone", LOCAL, NULL), 0);
    /* the order: target, Host, Origin, Content-Type, key */
    cr_expect_eq(head(a, "POST", "/v1/x%00", "Host: evil.example\n", NULL), 400);
    cr_expect_eq(head(a, "POST", "/v1/systemone",
                      "Host: evil.example\nOrigin: http://evil.example\nContent-Type: text/plain\n",
                      "Host evil.example is not one of this daemon's names: add it to "
                      "allowed_hosts"), 403);
    cr_expect_eq(head(a, "POST", "/v1/systemone",
                      LOCAL "Origin: http://evil.example\nContent-Type: text/plain\n" KEYED,
                      NULL), 403);
    cr_expect_eq(head(a, "POST", "/v1/systemone", LOCAL "Content-Type: text/plain\n", NULL), 415);
    api_free(a);
    config_free(cfg);
}

Test(api_head, a_small_buffer_gets_a_shorter_document_or_none) {
    struct config *cfg = head_config(MODELS);
    struct api *a = head_api(cfg);
    struct evkeyvalq h;
    TAILQ_INIT(&h);
    evhttp_add_header(&h, "Host", "evil.example");
    char small[200], tiny[8];
    cr_expect_eq(api_check_head(a, "GET", "/v1/status", &h, false, small, sizeof small, NULL), 403);
    json_t *doc = json_loads(small, 0, NULL);
    cr_expect_not_null(doc, "%s", small);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(doc, "error"), "message")),
                     "refused");
    json_decref(doc);
    cr_expect_eq(api_check_head(a, "GET", "/v1/status", &h, false, tiny, sizeof tiny, NULL), 403);
    cr_expect_str_eq(tiny, "");
    cr_expect_eq(api_check_head(a, "GET", "/v1/status", &h, false, NULL, 0, NULL), 403);
    cr_expect_eq(api_check_head(a, "GET", "/v1/status", NULL, false, tiny, sizeof tiny, NULL), 400);
    evhttp_clear_headers(&h);
    api_free(a);
    config_free(cfg);
}
