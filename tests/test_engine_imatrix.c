/* Unit tests for engine_imatrix: the chunk chosen for a text, and the reason
 * picked out of llama-imatrix's logs (an abort with ggml's debugger
 * backtrace after it, copied from a real run of b11434; an exit with an
 * error line; plain output); the render server's start (a shell script
 * stands in for llama-server and shows its argv and environment), its
 * request bodies, and its /slots and /tokenize answers read back, hostile
 * ones included. The run itself is covered end to end by
 * tests/e2e/test_imatrix.py. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/host.h"
#include "engine/engine.h"
#include "engine/engine_imatrix.h"
#include "test_helpers.h"

Test(engine_imatrix, chunk_fits_two_in_the_text_and_the_training_context) {
    cr_expect_eq(engine_imatrix_chunk(8678, 8192), 512);
    cr_expect_eq(engine_imatrix_chunk(8678, 0), 512, "unknown training context");
    cr_expect_eq(engine_imatrix_chunk(8678, 256), 256);
    cr_expect_eq(engine_imatrix_chunk(1000, 8192), 500, "two chunks need 1000 tokens");
    cr_expect_eq(engine_imatrix_chunk(1001, 8192), 500);
    cr_expect_eq(engine_imatrix_chunk(32, 8192), 16);
    cr_expect_eq(engine_imatrix_chunk(31, 8192), 0, "below two chunks of 16");
    cr_expect_eq(engine_imatrix_chunk(0, 512), 0);
    cr_expect_eq(engine_imatrix_chunk(100000, 8), 0, "a context below the smallest chunk");
}

/* The end of a real log: kev-tiny with -c 512 and the default -b 2048. */
static const char ABORT_LOG[] =
    "0.00.659.016 W embeddings enabled: setting n_batch = n_ubatch = 512\n"
    "0.00.665.737 I compute_imatrix: tokenizing the input ..\n"
    "/root/.cache/tandem/engine/b11434/src/tools/imatrix/imatrix.cpp:1477: "
    "GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed\n"
    "0.00.680.418 I compute_imatrix: tokenization took 17.177 ms\n"
    "[New LWP 23814]\n"
    "[Thread debugging using libthread_db enabled]\n"
    "Using host libthread_db library \"/lib/x86_64-linux-gnu/libthread_db.so.1\".\n"
    "0x00007fe8faef1c17 in __GI___wait4 (pid=23862, stat_loc=0x0, options=0, usage=0x0) at "
    "../sysdeps/unix/sysv/linux/wait4.c:30\n"
    "30\t../sysdeps/unix/sysv/linux/wait4.c: No such file or directory.\n"
    "#0  0x00007fe8faef1c17 in __GI___wait4 (pid=23862) at wait4.c:30\n"
    "30\tin ../sysdeps/unix/sysv/linux/wait4.c\n"
    "#1  0x00005596c45899eb in ggml_print_backtrace ()\n"
    "#4  0x00005596c3ff3078 in main ()\n"
    "[Inferior 1 (process 23812) detached]\n";

Test(engine_imatrix, the_assert_line_is_the_reason_not_the_backtrace) {
    char why[256];
    engine_log_reason(ABORT_LOG, strlen(ABORT_LOG), why, sizeof why);
    cr_expect_str_eq(why, "imatrix.cpp:1477: GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed");
}

Test(engine_imatrix, an_error_line_loses_its_timestamp) {
    static const char log[] =
        "0.00.066.933 I compute_imatrix: computing over 0 chunks\n"
        "0.00.066.934 E compute_imatrix: you need at least 1024 tokens for a context of 512 "
        "tokens\n"
        "0.00.066.935 E compute_imatrix: the data file you provided tokenizes to only 900 "
        "tokens\r\n"
        "\n   \n";
    char why[256];
    engine_log_reason(log, strlen(log), why, sizeof why);
    cr_expect_str_eq(why, "compute_imatrix: the data file you provided tokenizes to only 900 "
                          "tokens");
}

Test(engine_imatrix, without_an_error_line_the_last_line_is_taken) {
    static const char log[] = "loading model\nsomething odd happened\n#0 0x1 in main ()\n";
    char why[64];
    engine_log_reason(log, strlen(log), why, sizeof why);
    cr_expect_str_eq(why, "something odd happened");
    engine_log_reason("", 0, why, sizeof why);
    cr_expect_str_eq(why, "");
    engine_log_reason(log, strlen(log), why, 8);
    cr_expect_str_eq(why, "somethi", "cut to the buffer");
}

Test(engine_imatrix, the_log_file_is_read_from_its_end) {
    char path[] = "/tmp/tandem-imatrix-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 20000; i++) /* far more than the tail that is read */
        fprintf(f, "0.00.000.%03d I line %d\n", i % 1000, i);
    fputs(ABORT_LOG, f);
    fclose(f);
    char why[256];
    engine_log_file_reason(path, why, sizeof why);
    cr_expect_str_eq(why, "imatrix.cpp:1477: GGML_ASSERT(params.n_ctx == n_seq * n_ctx) failed");
    unlink(path);
    engine_log_file_reason("/nonexistent/log", why, sizeof why);
    cr_expect_str_eq(why, "");
}

/* --- the render server ------------------------------------------------------------ */

Test(engine_imatrix, the_render_server_starts_on_the_cpu_with_slots_shown) {
    char dir[] = "/tmp/tandem-render-XXXXXX", server[64], log[64], text[4096] = "";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(server, sizeof server, "%s/llama-server", dir);
    snprintf(log, sizeof log, "%s/server.log", dir);
    FILE *f = fopen(server, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\necho \"args: $*\"\necho \"debug: $LLAMA_SERVER_SLOTS_DEBUG\"\nexit 3\n", f);
    fclose(f);
    cr_assert_eq(chmod(server, 0700), 0);
    struct plan_model *m = open_model(&(struct spec){.arch = "llama"}); /* trained on 1024 */
    struct engine_imatrix_render_params p = {.server = server, .model_path = "/m.gguf", .m = m,
                                             .socket = "/tmp/tandem-render-test.sock",
                                             .log_path = log};
    struct engine_child *c = NULL;
    char err[512] = "";
    cr_expect_eq(engine_imatrix_render_start(&p, &c, err, sizeof err), TANDEM_ERR_CHILD);
    cr_expect_not_null(c, "the child is the caller's once spawned");
    cr_expect(strstr(err, "exited with status 3") != NULL, "%s", err);
    engine_child_free(c);
    plan_model_free(m);
    f = fopen(log, "r");
    cr_assert_not_null(f);
    cr_assert(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    const char *want[] = {"-m /m.gguf --host /tmp/tandem-render-test.sock", " -c 1024 ",
                          " -ngl 0 ", " -np 1 ", "--device none", "--no-warmup",
                          "--alias imatrix", " --slots\n", "debug: 1\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_expect(strstr(text, want[i]) != NULL, "%s not in %s", want[i], text);
    host_remove_tree(dir);
}

Test(engine_imatrix, a_question_is_sent_alone_with_its_case_state) {
    json_t *state = json_pack("{s:s}", "text", "a \"quoted\" day");
    json_t *questions = json_pack("{s:{s:s},s:{s:s}}", "q1", "type", "noul", "q2", "type",
                                  "score");
    char *body = engine_imatrix_question_body(state, "q2", json_object_get(questions, "q2"));
    cr_assert_not_null(body);
    cr_expect_str_eq(body, "{\"state\":{\"text\":\"a \\\"quoted\\\" day\"},"
                           "\"questions\":{\"q2\":{\"type\":\"score\"}}}");
    free(body);
    cr_expect_eq(state->refcount, 1, "the state's reference is given back");
    cr_expect_eq(json_object_get(questions, "q2")->refcount, 1);
    cr_expect_null(engine_imatrix_question_body(state, "q3", json_object_get(questions, "q3")),
                   "a question that is not there");
    cr_expect_null(engine_imatrix_question_body(NULL, "q1", json_object_get(questions, "q1")));
    json_decref(state);
    json_decref(questions);
}

/* Parses text as the answer of GET /slots with status; returns its verdict. */
static tandem_err slots(long status, const char *text, int64_t last, const char **prompt,
                        int64_t *task, char *err, size_t errlen) {
    json_t *answer = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    cr_assert(!text || answer, "bad test JSON: %s", text);
    static json_t *keep; /* the prompt is borrowed from the answer */
    json_decref(keep);
    keep = answer;
    return engine_imatrix_slots_prompt(status, answer, last, prompt, task, err, errlen);
}

Test(engine_imatrix, slot_zero_gives_the_prompt_and_a_new_task) {
    const char *prompt = NULL;
    int64_t task = -7;
    char err[256] = "";
    cr_assert_eq(slots(200, "[{\"id\":0,\"id_task\":41,\"prompt\":\"<s>[INST] hi\"},"
                            "{\"id\":1,\"id_task\":2,\"prompt\":\"other\"}]",
                       -1, &prompt, &task, err, sizeof err),
                 TANDEM_OK, "%s", err);
    cr_expect_str_eq(prompt, "<s>[INST] hi");
    cr_expect_eq(task, 41);
    cr_expect_eq(slots(200, "[{\"id_task\":9007199254740993,\"prompt\":\"\"}]", 41, &prompt,
                       &task, err, sizeof err),
                 TANDEM_OK, "an empty prompt is a prompt");
    cr_expect_eq(task, 9007199254740993LL);
}

Test(engine_imatrix, a_slot_without_a_prompt_or_a_new_task_is_refused) {
    static const struct {
        long status;
        const char *text;
        const char *want;
    } cases[] = {
        {200, NULL, " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "{\"prompt\":\"x\",\"id_task\":1}", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[null]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[\"prompt\"]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[{\"id_task\":3}]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[{\"prompt\":7,\"id_task\":3}]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[{\"prompt\":\"x\"}]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[{\"prompt\":\"x\",\"id_task\":\"3\"}]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "[{\"prompt\":\"x\",\"id_task\":3.0}]", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {200, "\"[{}]\"", " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)"},
        {501, "{\"error\":{\"code\":501,\"message\":\"This server does not support slots "
              "endpoint.\"}}", ": This server does not support slots endpoint."},
        {404, "[{\"prompt\":\"x\",\"id_task\":3}]", ": "},
        {500, "{\"error\":\"flat\"}", ": "},
        {500, "{\"error\":{\"message\":[1]}}", ": "},
        {0, NULL, ": "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *prompt = "unset";
        int64_t task = -7;
        char err[256] = "", want[256];
        cr_expect_eq(slots(cases[i].status, cases[i].text, -1, &prompt, &task, err, sizeof err),
                     TANDEM_ERR_ENGINE, "%s", cases[i].text);
        snprintf(want, sizeof want, "GET /slots (HTTP %ld) shows no prompt in slot 0%s",
                 cases[i].status, cases[i].want);
        cr_expect_str_eq(err, want, "%s", cases[i].text);
        cr_expect_str_eq(prompt, "unset", "no output on failure");
        cr_expect_eq(task, -7);
    }
    const char *prompt = "unset";
    int64_t task = -7;
    char err[256] = "";
    cr_expect_eq(slots(200, "[{\"prompt\":\"x\",\"id_task\":12}]", 12, &prompt, &task, err,
                       sizeof err),
                 TANDEM_ERR_ENGINE);
    cr_expect_str_eq(err, "GET /slots: slot 0 did not serve the last request");
    cr_expect_eq(task, -7);
}

Test(engine_imatrix, the_tokenize_body_adds_bos_and_parses_special_tokens) {
    static const char text[] = "<|im_start|>user\n\"x\"\\<|im_end|>\nrest";
    char *body = engine_imatrix_tokenize_body(text, sizeof text - 5); /* "rest" left out */
    cr_assert_not_null(body);
    cr_expect_str_eq(body, "{\"content\":\"<|im_start|>user\\n\\\"x\\\"\\\\<|im_end|>\\n\","
                           "\"add_special\":true,\"parse_special\":true}");
    free(body);
    cr_expect_null(engine_imatrix_tokenize_body("\xff\xfe", 2), "not UTF-8");
}

/* Parses text as the answer of POST /tokenize with status; returns its verdict. */
static tandem_err tokens(long status, const char *text, uint64_t *n, char *err, size_t errlen) {
    json_t *answer = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    cr_assert(!text || answer, "bad test JSON: %s", text);
    tandem_err e = engine_imatrix_tokenize_count(status, answer, n, err, errlen);
    json_decref(answer);
    return e;
}

Test(engine_imatrix, tokenize_counts_the_tokens_array) {
    uint64_t n = 99;
    char err[256] = "";
    cr_expect_eq(tokens(200, "{\"tokens\":[1,15043,29889]}", &n, err, sizeof err), TANDEM_OK);
    cr_expect_eq(n, 3);
    cr_expect_eq(tokens(200, "{\"tokens\":[{\"id\":1,\"piece\":\"<s>\"}]}", &n, err, sizeof err),
                 TANDEM_OK, "with pieces, each entry is still one token");
    cr_expect_eq(n, 1);
    cr_expect_eq(tokens(200, "{\"tokens\":[]}", &n, err, sizeof err), TANDEM_OK);
    cr_expect_eq(n, 0);
}

Test(engine_imatrix, a_tokenize_answer_without_tokens_is_refused) {
    static const struct {
        long status;
        const char *text, *want;
    } cases[] = {
        {200, NULL, "POST /tokenize (HTTP 200): "},
        {200, "[]", "POST /tokenize (HTTP 200): "},
        {200, "{}", "POST /tokenize (HTTP 200): "},
        {200, "{\"tokens\":3}", "POST /tokenize (HTTP 200): "},
        {200, "{\"tokens\":{\"0\":1}}", "POST /tokenize (HTTP 200): "},
        {200, "{\"tokens\":null}", "POST /tokenize (HTTP 200): "},
        {400, "{\"tokens\":[1],\"error\":{\"message\":\"bad\"}}", "POST /tokenize (HTTP 400): bad"},
        {500, "{\"error\":{\"message\":\"Failed to tokenize\"}}",
         "POST /tokenize (HTTP 500): Failed to tokenize"},
        {503, "\"loading\"", "POST /tokenize (HTTP 503): "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t n = 99;
        char err[256] = "";
        cr_expect_eq(tokens(cases[i].status, cases[i].text, &n, err, sizeof err),
                     TANDEM_ERR_ENGINE, "%s", cases[i].text);
        cr_expect_str_eq(err, cases[i].want);
        cr_expect_eq(n, 99, "no count on failure");
    }
}

Test(engine_imatrix, the_error_message_is_read_only_where_the_engine_puts_it) {
    json_t *a = json_loads("{\"error\":{\"message\":\"the question type is not enabled\"}}", 0,
                           NULL);
    cr_expect_str_eq(engine_imatrix_error_message(a), "the question type is not enabled");
    json_decref(a);
    const char *odd[] = {"{\"error\":\"flat\"}", "{\"message\":\"top\"}", "[]", "3",
                         "{\"error\":{\"message\":false}}"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        a = json_loads(odd[i], JSON_DECODE_ANY, NULL);
        cr_expect_str_eq(engine_imatrix_error_message(a), "", "%s", odd[i]);
        json_decref(a);
    }
    cr_expect_str_eq(engine_imatrix_error_message(NULL), "");
}
