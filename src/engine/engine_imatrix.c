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
 * reason is the assert line above it, which engine_log_reason picks out. */
#include "engine/engine_imatrix.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"
#include "engine/engine.h"

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

