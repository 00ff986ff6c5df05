/* engine_quantize.h: the pinned engine's llama-quantize, as the ladder uses it.
 *
 * Part of the engine module (only engine*.c know the engine's tools' flags and
 * output). A dry run (`--dry-run`) says, tensor by tensor, the type each one
 * would get; engine_quant_dry_run turns that into exact byte counts with the
 * ggml type table and lists the tensors that fell back to another type
 * because their rows do not divide into the type's blocks. engine_quant_build
 * writes a file atomically: the tool writes OUT.part, which is renamed to OUT
 * only after it exited 0 and the result reads back as GGUF. */
#ifndef TANDEM_ENGINE_QUANTIZE_H
#define TANDEM_ENGINE_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* One run of llama-quantize. Everything is borrowed for the call. */
struct engine_quant_params {
    const char *tool;                 /* the llama-quantize binary */
    const char *src;                  /* the GGUF to quantize */
    const char *type;                 /* the target, as llama-quantize names it: "Q4_K_M" */
    const char *imatrix;              /* an importance matrix file; NULL = none */
    const char *const *tensor_types;  /* "REGEX=type" overrides (--tensor-type),
                                       * NULL-terminated; NULL = none */
    const char *const *overrides;     /* "key=str:value" metadata (--override-kv),
                                       * NULL-terminated; NULL = none */
    bool allow_requantize;            /* --allow-requantize */
    const char *log_path;             /* the tool's stdout and stderr go here */
};

/* A tensor whose type is not the one the target asked for. */
struct engine_quant_fallback {
    char tensor[96];
    char wanted[16], got[16]; /* ggml's spelling: "q4_K", "q5_0" */
};

/* What a dry run says the output would hold. */
struct engine_quant_size {
    uint64_t bytes;      /* tensor data of the output, summed from each tensor's
                          * resulting type and shape (exact; no padding) */
    uint64_t elements;   /* elements of every tensor */
    double bpw;          /* bits per weight: bytes * 8 / elements */
    bool needs_imatrix;  /* the tool refuses to build this without an importance matrix */
    size_t n_tensors;
    size_t n_fallbacks;
    struct engine_quant_fallback *fallbacks; /* [n_fallbacks], owned; free with
                                              * engine_quant_size_free */
};

/* Runs `llama-quantize --dry-run` with p's flags and parses its log into *out
 * (output; release with engine_quant_size_free). Returns TANDEM_ERR_CHILD when
 * the tool failed (err has its last log line), TANDEM_ERR_FORMAT when its log
 * names a tensor line or type this parser cannot read (err quotes it), or
 * engine_run_tool_logged's errors. */
tandem_err engine_quant_dry_run(const struct engine_quant_params *p, struct engine_quant_size *out,
                                char *err, size_t errlen);

/* Parses a dry run's log text (exposed for unit tests and the fuzzer) into
 * *out as engine_quant_dry_run does. */
tandem_err engine_quant_parse_log(const char *text, size_t len, struct engine_quant_size *out,
                                  char *err, size_t errlen);

/* Releases what *s owns; safe on a zeroed struct. */
void engine_quant_size_free(struct engine_quant_size *s);

/* Quantizes p->src into out (atomically, through out.part) and checks the
 * result reads back as GGUF. On failure nothing is left at out or out.part:
 * TANDEM_ERR_CHILD when the tool exited non-zero or was killed (err: "exit
 * status N: <its last log line>"), TANDEM_ERR_FORMAT when the output does not
 * read back, TANDEM_ERR_IO when the rename fails, or the spawn's errors. */
tandem_err engine_quant_build(const struct engine_quant_params *p, const char *out, char *err,
                              size_t errlen);

#endif
