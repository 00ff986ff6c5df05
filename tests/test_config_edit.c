/* Unit tests for config_edit: verdict values replaced or added in place, every
 * other byte kept, flow style refused. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/mem.h"
#include "serve/config_edit.h"

static const char PIPELINE[] =
    "# a comment that must stay\n"
    "pipelines:\n"
    "  decide:\n"
    "    decide:\n"
    "      model: decider\n"
    "    verify:\n"
    "      - model: verifier\n"
    "        questions:\n"
    "          consistent: {type: noul, instructions: ok?}\n"
    "    verdict:\n"
    "      thresholds:\n"
    "        consistent: \">= 0.5\"   # keep me\n"
    "      on_reject: next_best\n"
    "  other:\n"
    "    decide: {model: decider}\n";

static char *edit(const char *text, const char *pipeline, const struct config_edit_value *v,
                  size_t n, tandem_err want) {
    char *out = NULL, err[512] = "";
    size_t len = 0;
    tandem_err e = config_edit_verdict("t.yaml", text, strlen(text), pipeline, v, n, &out, &len,
                                       err, sizeof err);
    cr_assert_eq(e, want, "%s", err);
    if (e == TANDEM_OK)
        cr_assert_eq(strlen(out), len);
    return e == TANDEM_OK ? out : mem_strdup(err);
}

Test(config_edit, replaces_a_value_and_keeps_its_comment) {
    struct config_edit_value v = {"thresholds", "consistent", "\">= 0.8734\""};
    char *out = edit(PIPELINE, "decide", &v, 1, TANDEM_OK);
    cr_assert(strstr(out, "        consistent: \">= 0.8734\"   # keep me\n"), "%s", out);
    cr_assert(strstr(out, "# a comment that must stay\n"));
    cr_assert_eq(strlen(out), strlen(PIPELINE) + 3);
    mem_free(out);
}

Test(config_edit, adds_missing_keys_where_they_belong) {
    struct config_edit_value v[] = {{"thresholds", "on_topic", "\">= 0.25\""},
                                    {NULL, "min_confidence", "0.12"}};
    char *out = edit(PIPELINE, "decide", v, 2, TANDEM_OK);
    cr_assert(strstr(out, "        consistent: \">= 0.5\"   # keep me\n"
                          "        on_topic: \">= 0.25\"\n"
                          "      on_reject: next_best\n"
                          "      min_confidence: 0.12\n"
                          "  other:\n"),
              "%s", out);
    mem_free(out);
}

Test(config_edit, adds_a_verdict_block_to_a_pipeline_without_one) {
    static const char text[] = "pipelines:\n  p:\n    decide:\n      model: d\n"
                               "    verify:\n      - model: v\n";
    struct config_edit_value v[] = {{"thresholds", "ok", "\">= 0.7\""},
                                    {NULL, "min_confidence", "0.3"}};
    char *out = edit(text, "p", v, 2, TANDEM_OK);
    cr_assert_str_eq(out, "pipelines:\n  p:\n    decide:\n      model: d\n"
                          "    verify:\n      - model: v\n"
                          "    verdict:\n      thresholds:\n        ok: \">= 0.7\"\n"
                          "      min_confidence: 0.3\n");
    mem_free(out);
}

Test(config_edit, a_file_without_a_final_newline) {
    static const char text[] = "pipelines:\n  p:\n    verdict:\n      min_confidence: 0.1";
    struct config_edit_value v[] = {{"thresholds", "ok", "\"<= 0.2\""}};
    char *out = edit(text, "p", v, 1, TANDEM_OK);
    cr_assert_str_eq(out, "pipelines:\n  p:\n    verdict:\n      min_confidence: 0.1\n"
                          "      thresholds:\n        ok: \"<= 0.2\"\n");
    mem_free(out);
}

Test(config_edit, flow_style_and_missing_pipelines_are_refused) {
    struct config_edit_value v = {"thresholds", "ok", "\">= 0.7\""};
    static const char flow[] = "pipelines:\n  p:\n    verdict: {thresholds: {ok: \">= 0.5\"}}\n";
    char *msg = edit(flow, "p", &v, 1, TANDEM_ERR_FORMAT);
    cr_assert(strstr(msg, "t.yaml: pipelines.p.verdict: is in flow style"), "%s", msg);
    mem_free(msg);
    msg = edit(PIPELINE, "nope", &v, 1, TANDEM_ERR_FORMAT);
    cr_assert(strstr(msg, "pipelines.nope: not found"), "%s", msg);
    mem_free(msg);
}

Test(config_edit, text_that_does_not_parse_is_refused) {
    struct config_edit_value v = {NULL, "min_confidence", "0.1"};
    static const char text[] = "pipelines:\n  p: [\n";
    char *out = NULL, err[256] = "";
    size_t len = 0;
    cr_assert_eq(config_edit_verdict("t.yaml", text, sizeof text - 1, "p", &v, 1, &out, &len,
                                     err, sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_assert_null(out);
    cr_assert(strstr(err, "the YAML does not parse"), "%s", err);
    static const char bad[] = "pipelines:\n  p:\n%\xf0\xaf\xbf&\x84\0";
    cr_assert_eq(config_edit_verdict("t.yaml", bad, sizeof bad - 1, "p", &v, 1, &out, &len, err,
                                     sizeof err),
                 TANDEM_ERR_FORMAT);
    cr_assert_str_eq(err, "t.yaml:3: not valid UTF-8 (or a NUL byte)");
}
