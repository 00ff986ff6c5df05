/* Unit tests for api: the routes the router answers (api_routes) and the
 * operations docs/openapi.yaml documents are the same set of (method, path)
 * pairs, every difference named both ways; and the router lists each pair
 * once. The contract's statuses, media types and schemas are checked against
 * a live daemon by tests/e2e/test_openapi.py (schemathesis). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <libfyaml.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
