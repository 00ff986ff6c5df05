/* engine_imatrix.c: running llama-imatrix (b11434) on a rendered text.
 *
 * The flags, and why each is there (read from tools/imatrix/imatrix.cpp and
 * common/common.cpp of the pinned tree, then confirmed by running it):
 *   --parse-special   the text holds the chat template's special tokens as
 *                     text; they must become the special tokens again.
 *   --no-ppl          perplexity is meaningless for decision heads (kev reads
 *                     a pointer head, laya has no logits) and costs time.
 *   -c N -b N -ub N   decision models of type kev and laya run in embedding
 *                     mode, where common_init clamps n_batch to n_ubatch after
 *                     imatrix sized its sequences from n_batch; with the
 *                     default -b 2048 and -c 512 that trips
 *                     GGML_ASSERT(params.n_ctx == n_seq * n_ctx). One sequence
 *                     per batch avoids it, for every model alike.
 *   --override-kv tokenizer.ggml.add_eos_token=bool:false
 *                     the tool asserts !add_eos unless pooling is "last", and
 *                     decision models always run with pooling none (the Laya
 *                     converter sets add_eos). The flag only drops the one EOS
 *                     the tokenizer would append after the whole text, which
 *                     holds each prompt's own end tokens already.
 * The tool aborts through GGML_ASSERT when it meets a model it cannot handle,
 * and ggml's crash handler then appends a debugger backtrace to the log; the
 * reason is the assert line above it, which engine_log_reason picks out.
 *
 * The render server: under LLAMA_SERVER_SLOTS_DEBUG=1, GET /slots shows each
 * slot's last task's prompt detokenized with its special tokens
 * (tools/server/server-context.cpp, server_slot::to_json). With one slot, and
 * each question sent alone as a /v1/systemone request, the prompt in slot 0
 * afterwards is exactly that question's (the chat template
 * `tokenizer.chat_template.systemone` and the per-type rules of
 * server-decision.cpp, after kev's escaping and laya's trimming); id_task
 * changing proves that the slot served it. /tokenize with add_special and
 * parse_special counts the tokens as llama-imatrix will read the text. */
#include "engine/engine_imatrix.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"
#include "engine/engine.h"

/* The render server's context: enough for any decision prompt we have seen,
 * without a KV cache sized for a 32k-token training context. */
#define RENDER_CTX_MAX 8192u
#define RENDER_READY_MS 300000

uint32_t engine_imatrix_chunk(uint64_t n_tokens, uint32_t ctx_train) {
    uint64_t c = ENGINE_IMATRIX_MAX_CHUNK;
    if (ctx_train && ctx_train < c)
        c = ctx_train;
    if (n_tokens / 2 < c)
        c = n_tokens / 2;
    return c < ENGINE_IMATRIX_MIN_CHUNK ? 0 : (uint32_t)c;
}

tandem_err engine_imatrix_run(const struct engine_imatrix_params *p, char *err, size_t errlen) {
    char chunk[16], threads[16];
    snprintf(chunk, sizeof chunk, "%u", p->chunk);
    snprintf(threads, sizeof threads, "%u", host_cpus()); /* its default ignores affinity */
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)p->tool;
    argv[n++] = "-m";
    argv[n++] = (char *)p->model;
    argv[n++] = "-f";
    argv[n++] = (char *)p->text;
    argv[n++] = "--parse-special";
    argv[n++] = "-o";
    argv[n++] = (char *)p->out;
    argv[n++] = "--no-ppl";
    argv[n++] = "-ngl";
    argv[n++] = "0";
    argv[n++] = "-c";
    argv[n++] = chunk;
    argv[n++] = "-b";
    argv[n++] = chunk;
    argv[n++] = "-ub";
    argv[n++] = chunk;
    argv[n++] = "-t";
    argv[n++] = threads;
    if (p->no_add_eos) {
        argv[n++] = "--override-kv";
        argv[n++] = "tokenizer.ggml.add_eos_token=bool:false";
    }
    argv[n] = NULL;
    int code = 0;
    tandem_err e = engine_run_tool_logged(argv, p->log_path, &code, err, errlen);
    if (e != TANDEM_OK || code == 0)
        return e;
    char why[512];
    engine_log_file_reason(p->log_path, why, sizeof why);
    /* engine_run_tool_logged reports a signal as 128 + its number; an abort
     * is GGML_ASSERT meeting a model the tool does not handle */
    if (code == 128 + SIGABRT) {
        tandem_errmsg(err, errlen, "%s", why[0] ? why : "llama-imatrix aborted");
        return TANDEM_ERR_UNSUPPORTED;
    }
    if (code > 128)
        tandem_errmsg(err, errlen, "killed by signal %d (%s): %s", code - 128,
                      strsignal(code - 128), why);
    else
        tandem_errmsg(err, errlen, "exit status %d: %s", code, why);
    return TANDEM_ERR_CHILD;
}


/* --- the render server ------------------------------------------------------------ */

tandem_err engine_imatrix_render_start(const struct engine_imatrix_render_params *p,
                                       struct engine_child **out, char *err, size_t errlen) {
    struct plan_settings want = plan_default_settings(), s;
    want.gpu = false;
    want.ngl = 0;
    want.parallel = 1;
    want.no_warmup = true;
    uint32_t ctx = plan_model_ctx_train(p->m);
    if (!ctx || ctx > RENDER_CTX_MAX)
        ctx = RENDER_CTX_MAX;
    want.ctx = plan_model_is_encoder(p->m) ? 0 : ctx; /* encoders: their training window */
    plan_model_resolve(p->m, &want, &s);
    char *extra[] = {"--slots", NULL};
    char *env[] = {"LLAMA_SERVER_SLOTS_DEBUG=1", NULL};
    char **argv = NULL;
    *out = NULL;
    if (engine_child_argv(p->server, p->model_path, "imatrix", &s, p->socket, NULL, extra,
                          &argv) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "cannot prepare the engine's arguments");
        return TANDEM_ERR_NOMEM;
    }
    tandem_err e = engine_child_spawn(argv, env, p->log_path, p->socket, out, err, errlen);
    engine_child_argv_free(argv);
    if (!e)
        e = engine_child_wait_ready(*out, RENDER_READY_MS, err, errlen);
    return e;
}

char *engine_imatrix_question_body(json_t *state, const char *qid, json_t *question) {
    json_t *body = json_pack("{s:O, s:{s:O}}", "state", state, "questions", qid, question);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text;
}

const char *engine_imatrix_error_message(const json_t *answer) {
    const char *m = json_string_value(json_object_get(json_object_get(answer, "error"),
                                                      "message"));
    return m ? m : "";
}

tandem_err engine_imatrix_slots_prompt(long status, const json_t *answer, int64_t last_task,
                                       const char **prompt, int64_t *task, char *err,
                                       size_t errlen) {
    const json_t *slot = json_array_get(answer, 0);
    const char *text = json_string_value(json_object_get(slot, "prompt"));
    const json_t *id = json_object_get(slot, "id_task");
    if (status != 200 || !text || !json_is_integer(id)) {
        tandem_errmsg(err, errlen, "GET /slots (HTTP %ld) shows no prompt in slot 0%s%s", status,
                      status != 200 ? ": " : " (is LLAMA_SERVER_SLOTS_DEBUG honoured?)",
                      status != 200 ? engine_imatrix_error_message(answer) : "");
        return TANDEM_ERR_ENGINE;
    }
    if (json_integer_value(id) == last_task) {
        tandem_errmsg(err, errlen, "GET /slots: slot 0 did not serve the last request");
        return TANDEM_ERR_ENGINE;
    }
    *prompt = text;
    *task = json_integer_value(id);
    return TANDEM_OK;
}

char *engine_imatrix_tokenize_body(const char *text, size_t len) {
    json_t *body = json_pack("{s:s%, s:b, s:b}", "content", text, len, "add_special", 1,
                             "parse_special", 1);
    char *out = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return out;
}

tandem_err engine_imatrix_tokenize_count(long status, const json_t *answer, uint64_t *n_tokens,
                                         char *err, size_t errlen) {
    const json_t *tokens = json_object_get(answer, "tokens");
    if (status != 200 || !json_is_array(tokens)) {
        tandem_errmsg(err, errlen, "POST /tokenize (HTTP %ld): %s", status,
                      engine_imatrix_error_message(answer));
        return TANDEM_ERR_ENGINE;
    }
    *n_tokens = json_array_size(tokens);
    return TANDEM_OK;
}
