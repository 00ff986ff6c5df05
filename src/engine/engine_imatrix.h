/* engine_imatrix.h: the pinned engine's llama-imatrix, as `tandem imatrix` uses it.
 *
 * Part of the engine module (only engine*.c know the engine's tools' flags and
 * logs). One run computes an importance matrix over a text file that already
 * holds the model's prompts as the engine renders them, special tokens
 * written out (cli/cmd_imatrix.c makes it). The run's own log is kept in a
 * file; when the tool fails, the line that says why is picked out of it. */
#ifndef TANDEM_ENGINE_IMATRIX_H
#define TANDEM_ENGINE_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The smallest chunk worth computing (tokens); the text must hold two. */
#define ENGINE_IMATRIX_MIN_CHUNK 16u
/* The chunk llama-imatrix uses by default, and the largest tandem asks for. */
#define ENGINE_IMATRIX_MAX_CHUNK 512u

/* One run of llama-imatrix. Everything is borrowed for the call. */
struct engine_imatrix_params {
    const char *tool;     /* the llama-imatrix binary */
    const char *model;    /* the GGUF */
    const char *text;     /* the text file (-f), parsed with --parse-special */
    const char *out;      /* where the tool writes its GGUF matrix (-o) */
    uint32_t chunk;       /* tokens per chunk: -c, and -b/-ub equal to it (one
                           * sequence per batch; see engine_imatrix.c) */
    bool no_add_eos;      /* override tokenizer.ggml.add_eos_token to false (the
                           * tool asserts on it; see engine_imatrix.c) */
    const char *log_path; /* the tool's stdout and stderr go here (created 0600) */
};

/* Chooses the chunk for a text of n_tokens tokens (as the model tokenizes it
 * with its special tokens parsed and its BOS added) and a model trained on
 * ctx_train tokens (0 = unknown): the smallest of ENGINE_IMATRIX_MAX_CHUNK,
 * ctx_train and n_tokens / 2 (llama-imatrix wants at least two chunks' worth
 * of tokens). Returns 0 when that is below ENGINE_IMATRIX_MIN_CHUNK. */
uint32_t engine_imatrix_chunk(uint64_t n_tokens, uint32_t ctx_train);

/* Runs llama-imatrix with p's flags (argv array, no shell, stdin from
 * /dev/null, --no-ppl -ngl 0) and waits. Returns TANDEM_OK when it exited 0;
 * TANDEM_ERR_UNSUPPORTED when it aborted (SIGABRT: a GGML_ASSERT, the tool
 * cannot handle this model), TANDEM_ERR_CHILD when it exited non-zero or
 * another signal ended it, each with err[errlen] holding
 * engine_imatrix_log_reason(); or
 * the spawn's errors (TANDEM_ERR_IO for the log, TANDEM_ERR_SPAWN). What the
 * tool wrote at p->out on failure is the caller's to remove. */
tandem_err engine_imatrix_run(const struct engine_imatrix_params *p, char *err, size_t errlen);


#endif
