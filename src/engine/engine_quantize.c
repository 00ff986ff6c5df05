/* engine_quantize.c: llama-quantize's dry run read as exact sizes, and atomic builds.
 *
 * The dry run prints one line per tensor (src/llama-quant.cpp, b11434):
 *   [  3/ 272] blk.0.attn_k.weight - [   576,    192,      1,      1], type =   q4_1,
 *              size =     0.07 MiB ->     0.07 MiB (q5_0)
 * (the part from "->" only when the type changes), and, before them, one
 *   warning: NAME - ncols N not divisible by B (required for type T) -> falling back to U
 * per tensor whose rows do not divide into the target's blocks. The MiB it
 * prints are rounded, so the bytes are recomputed here from each tensor's
 * shape and resulting type with the ggml type table. The tool is always run
 * from an argv array with its output in a log file, never through a shell. */
#include "engine/engine_quantize.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "engine/engine.h"
#include "gguf/ggml_types.h"
#include "gguf/gguf.h"

#define MAX_ARGS 64
#define MAX_LOG (64u << 20)

void engine_quant_size_free(struct engine_quant_size *s) {
    if (!s)
        return;
    mem_free(s->fallbacks);
    memset(s, 0, sizeof *s);
}

/* Copies the next whitespace-delimited word of *p into out[cap]; false when none. */
static bool next_word(const char **p, char *out, size_t cap) {
    const char *s = *p + strspn(*p, " \t");
    size_t n = strcspn(s, " \t),");
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    *p = s + n;
    return true;
}

/* One "warning: NAME - ncols ... (required for type T) -> falling back to U" line. */
static tandem_err parse_fallback(const char *line, struct engine_quant_size *out) {
    const char *p = line + strlen("warning:");
    struct engine_quant_fallback f = {0};
    const char *req = strstr(line, "(required for type"), *fb = strstr(line, "falling back to");
    if (!next_word(&p, f.tensor, sizeof f.tensor) || !req || !fb)
        return TANDEM_ERR_FORMAT;
    req += strlen("(required for type");
    fb += strlen("falling back to");
    if (!next_word(&req, f.wanted, sizeof f.wanted) || !next_word(&fb, f.got, sizeof f.got))
        return TANDEM_ERR_FORMAT;
    struct engine_quant_fallback *grown =
        mem_realloc(out->fallbacks, (out->n_fallbacks + 1) * sizeof *grown);
    if (!grown)
        return TANDEM_ERR_NOMEM;
    out->fallbacks = grown;
    out->fallbacks[out->n_fallbacks++] = f;
    return TANDEM_OK;
}

/* One "[ i/ n] NAME - [ne0, ne1, ne2, ne3], type = T, size = ... (-> ... (U))" line. */
static tandem_err parse_tensor(const char *line, struct engine_quant_size *out) {
    int64_t ne[4];
    const char *shape = strstr(line, " - ["), *type = strstr(line, "type =");
    if (!shape || !type ||
        sscanf(shape, " - [ %" SCNd64 " , %" SCNd64 " , %" SCNd64 " , %" SCNd64, &ne[0], &ne[1],
               &ne[2], &ne[3]) != 4)
        return TANDEM_ERR_FORMAT;
    char name[16];
    const char *p = type + strlen("type =");
    if (!next_word(&p, name, sizeof name))
        return TANDEM_ERR_FORMAT;
    const char *arrow = strstr(p, "->"), *paren = arrow ? strchr(arrow, '(') : NULL;
    if (paren) {
        p = paren + 1;
        if (!next_word(&p, name, sizeof name))
            return TANDEM_ERR_FORMAT;
    }
    uint32_t id;
    uint64_t bytes;
    if (ggml_type_find(name, &id) != TANDEM_OK ||
        ggml_type_tensor_bytes(id, ne, 4, &bytes) != TANDEM_OK)
        return TANDEM_ERR_FORMAT;
    out->bytes += bytes;
    out->elements += (uint64_t)(ne[0] * ne[1] * ne[2] * ne[3]);
    out->n_tensors++;
    return TANDEM_OK;
}

static tandem_err parse_line(const char *line, struct engine_quant_size *out) {
    if (!strncmp(line, "warning:", 8) && strstr(line, "falling back to"))
        return parse_fallback(line, out);
    if (line[0] == '[' && strstr(line, "type ="))
        return parse_tensor(line, out);
    if (strstr(line, "will require an imatrix"))
        out->needs_imatrix = true;
    return TANDEM_OK;
}

tandem_err engine_quant_parse_log(const char *text, size_t len, struct engine_quant_size *out,
                                  char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    char line[1024];
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t n = nl ? (size_t)(nl - text - i) : len - i;
        size_t keep = n < sizeof line - 1 ? n : sizeof line - 1;
        memcpy(line, text + i, keep);
        line[keep] = '\0';
        tandem_err e = parse_line(line, out);
        if (e != TANDEM_OK) {
            tandem_errmsg(err, errlen, "llama-quantize --dry-run: cannot read the line \"%.200s\"",
                          line);
            engine_quant_size_free(out);
            return e;
        }
        i += n + 1;
    }
    if (!out->n_tensors) {
        tandem_errmsg(err, errlen, "llama-quantize --dry-run listed no tensors");
        return TANDEM_ERR_FORMAT;
    }
    out->bpw = (double)out->bytes * 8.0 / (double)out->elements;
    return TANDEM_OK;
}

/* argv for p, writing to out ("--dry-run" when out is NULL). */
static size_t build_argv(const struct engine_quant_params *p, const char *out, char **argv) {
    size_t n = 0;
    argv[n++] = (char *)p->tool;
    if (!out)
        argv[n++] = "--dry-run";
    if (p->allow_requantize)
        argv[n++] = "--allow-requantize";
    if (p->imatrix) {
        argv[n++] = "--imatrix";
        argv[n++] = (char *)p->imatrix;
    }
    for (size_t i = 0; p->tensor_types && p->tensor_types[i] && n < MAX_ARGS - 8; i++) {
        argv[n++] = "--tensor-type";
        argv[n++] = (char *)p->tensor_types[i];
    }
    for (size_t i = 0; p->overrides && p->overrides[i] && n < MAX_ARGS - 6; i++) {
        argv[n++] = "--override-kv";
        argv[n++] = (char *)p->overrides[i];
    }
    argv[n++] = (char *)p->src;
    if (out)
        argv[n++] = (char *)out;
    argv[n++] = (char *)p->type;
    argv[n] = NULL;
    return n;
}

/* Runs the tool; TANDEM_ERR_CHILD with "exit status N: last line" when it failed. */
static tandem_err run(const struct engine_quant_params *p, const char *out, char *err,
                      size_t errlen) {
    char *argv[MAX_ARGS];
    build_argv(p, out, argv);
    int code;
    tandem_err e = engine_run_tool_logged(argv, p->log_path, &code, err, errlen);
    if (e != TANDEM_OK)
        return e;
    if (code != 0) {
        char last[400];
        engine_log_file_reason(p->log_path, last, sizeof last);
        tandem_errmsg(err, errlen, "llama-quantize %s (exit status %d): %s", p->type, code,
                      last[0] ? last : "no output");
        return TANDEM_ERR_CHILD;
    }
    return TANDEM_OK;
}

tandem_err engine_quant_dry_run(const struct engine_quant_params *p, struct engine_quant_size *out,
                                char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    tandem_err e = run(p, NULL, err, errlen);
    if (e != TANDEM_OK)
        return e;
    struct mem_buf log;
    mem_buf_init(&log, MAX_LOG);
    e = mem_buf_append_file(&log, p->log_path);
    if (e != TANDEM_OK) {
        tandem_errmsg(err, errlen, "%s: cannot read: %s", p->log_path, tandem_strerror(e));
        mem_buf_deinit(&log);
        return e;
    }
    e = engine_quant_parse_log(log.data ? log.data : "", log.len, out, err, errlen);
    mem_buf_deinit(&log);
    return e;
}

tandem_err engine_quant_build(const struct engine_quant_params *p, const char *out, char *err,
                              size_t errlen) {
    char part[4096];
    if (snprintf(part, sizeof part, "%s.part", out) >= (int)sizeof part) {
        tandem_errmsg(err, errlen, "%s: path too long", out);
        return TANDEM_ERR_TOOBIG;
    }
    unlink(part);
    tandem_err e = run(p, part, err, errlen);
    struct gguf *g = NULL;
    char why[400];
    if (e == TANDEM_OK && gguf_open(part, &g, why, sizeof why) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "llama-quantize %s wrote a file that does not read back: %s",
                      p->type, why);
        e = TANDEM_ERR_FORMAT;
    }
    gguf_free(g);
    if (e == TANDEM_OK && rename(part, out) != 0) {
        tandem_errmsg(err, errlen, "%s: cannot rename into place: %s", out, strerror(errno));
        e = TANDEM_ERR_IO;
    }
    if (e != TANDEM_OK)
        unlink(part);
    return e;
}
