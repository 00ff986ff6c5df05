/* engine_imatrix.h: the pinned engine's llama-imatrix, as `tandem imatrix` uses it,
 * and the llama-server that renders its text.
 *
 * Part of the engine module (only engine*.c know the engine's tools' flags,
 * routes and logs). One run computes an importance matrix over a text file
 * that already holds the model's prompts as the engine renders them, special
 * tokens written out (flow/imatrix.c makes it). The run's own log is kept in
 * a file; when the tool fails, the line that says why is picked out of it.
 *
 * The text comes from a render server: llama-server for the model on the
 * CPU, one slot, with LLAMA_SERVER_SLOTS_DEBUG=1, under which GET /slots
 * shows each slot's last task's prompt detokenized with its special tokens.
 * This module starts it and knows its requests and answers (the question
 * sent alone, /slots, /tokenize); the caller does the HTTP over its socket. */
#ifndef TANDEM_ENGINE_IMATRIX_H
#define TANDEM_ENGINE_IMATRIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "engine/engine_child.h"
#include "plan/plan.h"

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

/* --- the render server ------------------------------------------------------------ */

/* Its routes, relative to the socket's root: the prompts read back, and the
 * token count. Questions go to the engine's /v1/systemone (the client's
 * default path). */
#define ENGINE_IMATRIX_SLOTS_PATH "/slots"
#define ENGINE_IMATRIX_TOKENIZE_PATH "/tokenize"

/* One render server. Everything is borrowed for the call. */
struct engine_imatrix_render_params {
    const char *server;         /* the llama-server binary */
    const char *model_path;     /* the GGUF */
    const struct plan_model *m; /* the same model, opened: its training context */
    const char *socket;         /* the unix socket to listen on (engine_rundir) */
    const char *log_path;       /* its output goes here (appended, created 0600) */
};

/* Starts a render server: llama-server for p's model on the CPU (no GPU
 * layers), one slot, no warmup, a context of the training context capped at
 * 8192 tokens (an encoder: its own window), --slots, and
 * LLAMA_SERVER_SLOTS_DEBUG=1 in its environment; then waits (at most 300 s)
 * until it answers on p->socket. *out (output) is set as soon as the child
 * is spawned, also when the wait then fails: the caller stops it
 * (engine_child_stop) and frees it. Returns TANDEM_OK; TANDEM_ERR_NOMEM with
 * err "cannot prepare the engine's arguments"; or engine_child_spawn's and
 * engine_child_wait_ready's errors, with err[errlen] set. */
tandem_err engine_imatrix_render_start(const struct engine_imatrix_render_params *p,
                                       struct engine_child **out, char *err, size_t errlen);

/* The /v1/systemone body that asks question qid alone, for a case with
 * state: {"state":STATE,"questions":{QID:QUESTION}}, compact. state and
 * question are borrowed (their reference counts are restored before
 * returning). Returns a string the caller frees with free() (jansson's
 * allocation), or NULL when out of memory or an argument is missing. */
char *engine_imatrix_question_body(json_t *state, const char *qid, json_t *question);

/* The engine's message in an error answer ({"error":{"message":...}}), or
 * "" when answer (borrowed, may be NULL) holds none. Valid while answer is. */
const char *engine_imatrix_error_message(const json_t *answer);

/* Reads slot 0 from a GET /slots answer: HTTP status and the body as parsed
 * (borrowed, may be NULL or any JSON). On TANDEM_OK, *prompt (output) is its
 * last task's prompt, borrowed from answer, and *task (output) that task's
 * id, which differs from last_task (the id seen after the previous request;
 * -1 = none). Returns TANDEM_ERR_ENGINE, with err[errlen] saying why, when
 * the status is not 200, slot 0 shows no prompt or no integer id_task
 * (LLAMA_SERVER_SLOTS_DEBUG not honoured), or the task is last_task (the
 * slot did not serve the last request). */
tandem_err engine_imatrix_slots_prompt(long status, const json_t *answer, int64_t last_task,
                                       const char **prompt, int64_t *task, char *err,
                                       size_t errlen);

/* The POST /tokenize body for the text's len bytes (text need not be
 * NUL-terminated), counting as llama-imatrix will: BOS added, special tokens
 * parsed. Returns a string the caller frees with free() (jansson's
 * allocation), or NULL when out of memory or the text is not UTF-8. */
char *engine_imatrix_tokenize_body(const char *text, size_t len);

/* Reads the token count from a POST /tokenize answer: HTTP status and the
 * body as parsed (borrowed, may be NULL or any JSON). Returns TANDEM_OK with
 * *n_tokens (output) the length of its "tokens" array, or TANDEM_ERR_ENGINE
 * with err[errlen] saying why (not 200, or no array). */
tandem_err engine_imatrix_tokenize_count(long status, const json_t *answer, uint64_t *n_tokens,
                                         char *err, size_t errlen);

#endif
