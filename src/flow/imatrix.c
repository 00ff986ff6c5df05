/* imatrix.c: an importance matrix computed from the user's own decision
 * requests by the pinned engine's llama-imatrix (`tandem imatrix`, and the
 * ladder's --imatrix auto).
 *
 * The text must be what the model reads in service, so tandem does not
 * render it: the engine does. A render server (engine_imatrix.c: one
 * llama-server for the model on the CPU, one slot, showing its prompts on
 * GET /slots) is started; each question of each selected case is sent
 * alone as a /v1/systemone request, and the prompt the engine rendered for
 * it is read back from slot 0. The prompts, each followed by "\n", make the
 * text; /tokenize on the same server counts its tokens, which picks the
 * chunk (engine_imatrix_chunk). engine_imatrix.c knows the requests and the
 * answers; this file does the HTTP (eval/s1client over the server's unix
 * socket). The server is stopped, llama-imatrix runs (engine_imatrix.c has
 * its flags and why), and its matrix is copied into the output with
 * imatrix.datasets naming the data (the tool records its temporary text
 * file) and tandem.imatrix.* provenance, through gguf_edit_write's temporary
 * file and rename.
 *
 * Flow: check model -> locate tools -> temp dir -> start server -> render
 * each prompt -> count tokens -> stop server -> llama-imatrix -> write out
 * -> remove the temp dir (always). No step leaves a file outside the temp
 * dir unless the whole build succeeded. */
#include "flow/imatrix.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "engine/engine_child.h"
#include "engine/engine_rundir.h"
#include "engine/engine_imatrix.h"
#include "eval/s1client.h"
#include "gguf/gguf.h"
#include "gguf/gguf_edit.h"
#include "plan/plan.h"
#include "version.h"

/* How long one request to the render server may take, and its stop's grace. */
#define RENDER_REQUEST_MS 600000
#define RENDER_STOP_MS 5000
/* The most text one build renders. */
#define TEXT_MAX (256u << 20)
/* Texts up to this size are tokenized to count; larger ones hold far more
 * than the two chunks llama-imatrix needs. */
#define TOKENIZE_MAX (1u << 20)

/* The state of one build. */
struct build {
    const struct imatrix_params *p;
    struct imatrix_stats st;
    char *err;
    size_t errlen;
    const char *model_name;  /* the model's file name, for messages */
    struct plan_model *m;
    bool add_eos;            /* tokenizer.ggml.add_eos_token */
    char server[4096], tool[4096];
    char dir[4096];          /* the temp dir; "" until made */
    char text_path[4300], server_log[4300], tool_log[4300], tool_out[4300];
    struct engine_child *child;
    struct engine_rundir *run; /* the render server's socket */
    struct s1client *decide, *slots, *tokenize;
    int64_t last_task;       /* slot 0's id_task after the previous prompt */
    struct mem_buf text;
};

struct imatrix_params imatrix_default_params(void) {
    return (struct imatrix_params){.split_seed = IMATRIX_DEFAULT_SEED};
}

static void progress(const struct build *b, const char *phase, size_t done, size_t total) {
    if (b->p->progress)
        b->p->progress(b->p->progress_user, phase, done, total);
}

/* --- the model ------------------------------------------------------------------- */

/* Checks that the model is a decision model the engine can render requests
 * for, and reads what the run needs from it. */
static tandem_err check_model(struct build *b) {
    const char *path = b->p->model;
    tandem_err e = plan_model_open(path, &b->m, b->err, b->errlen);
    if (e)
        return e == TANDEM_ERR_UNSUPPORTED ? TANDEM_ERR_FORMAT : e;
    if (!plan_model_decision_type(b->m)[0]) {
        tandem_errmsg(b->err, b->errlen, "%s: not a decision model (no %s.decision.type); "
                      "an importance matrix is built from /v1/systemone requests", b->model_name,
                      plan_model_arch(b->m));
        return TANDEM_ERR_INVAL;
    }
    struct gguf *g;
    if ((e = gguf_open(path, &g, b->err, b->errlen)))
        return e;
    bool has_template = gguf_kv_find(g, "tokenizer.chat_template.systemone") != NULL;
    b->add_eos = false;
    gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b->add_eos);
    gguf_free(g);
    if (!has_template) {
        tandem_errmsg(b->err, b->errlen, "%s: decision model without "
                      "tokenizer.chat_template.systemone: the engine cannot render its requests",
                      b->model_name);
        return TANDEM_ERR_INVAL;
    }
    return TANDEM_OK;
}

/* Finds llama-server and the llama-imatrix beside it. */
static tandem_err locate_engine(struct build *b) {
    enum engine_source src;
    if (engine_locate(b->p->llama_server, TANDEM_ENGINE_BUILD, b->server, sizeof b->server,
                      &src) != TANDEM_OK) {
        tandem_errmsg(b->err, b->errlen, "no llama-server at %s (run `make deps`, or see "
                      "tandem doctor)", b->server);
        return TANDEM_ERR_NOTFOUND;
    }
    tandem_err e = engine_locate_tool(b->p->llama_server, TANDEM_ENGINE_BUILD, "llama-imatrix",
                                      b->tool, sizeof b->tool);
    if (e)
        tandem_errmsg(b->err, b->errlen, "%s: no executable llama-imatrix; "
                      "scripts/build-engine.sh installs it beside llama-server", b->tool);
    return e;
}

/* --- the temp dir ---------------------------------------------------------------- */

static tandem_err make_dir(struct build *b) {
    const char *tmp = getenv("TMPDIR");
    snprintf(b->dir, sizeof b->dir, "%s/tandem-imatrix-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(b->dir)) {
        tandem_errmsg(b->err, b->errlen, "%s: cannot create a temporary folder: %s", b->dir,
                      strerror(errno));
        b->dir[0] = '\0';
        return TANDEM_ERR_IO;
    }
    const char *data = b->p->data_name ? b->p->data_name : b->p->set->path;
    snprintf(b->text_path, sizeof b->text_path, "%s/%s.prompts.txt", b->dir, host_base_name(data));
    snprintf(b->server_log, sizeof b->server_log, "%s/llama-server.log", b->dir);
    snprintf(b->tool_log, sizeof b->tool_log, "%s/llama-imatrix.log", b->dir);
    snprintf(b->tool_out, sizeof b->tool_out, "%s/imatrix.gguf", b->dir);
    return TANDEM_OK;
}

static void remove_dir(struct build *b) {
    if (b->dir[0])
        host_remove_tree(b->dir);
    b->dir[0] = '\0';
}

/* Copies the file at path to stderr (the engine's log, with --verbose). */
static void echo_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    fclose(f);
}

/* --- the render server ----------------------------------------------------------- */

static tandem_err new_client(struct build *b, const char *sock, const char *path,
                             struct s1client **out) {
    struct s1client_params cp = s1client_default_params();
    cp.endpoint = "http://localhost";
    cp.unix_socket = sock;
    cp.path = path;
    cp.timeout_ms = RENDER_REQUEST_MS;
    return s1client_new(&cp, out, b->err, b->errlen);
}

/* Starts the render server and opens the clients for its routes. */
static tandem_err start_server(struct build *b) {
    char sock[256];
    tandem_err e = engine_rundir_new(&b->run, b->err, b->errlen);
    if (!e)
        e = engine_rundir_socket(b->run, 0, sock, sizeof sock, b->err, b->errlen);
    if (e)
        return e;
    struct engine_imatrix_render_params rp = {.server = b->server, .model_path = b->p->model,
                                              .m = b->m, .socket = sock,
                                              .log_path = b->server_log};
    e = engine_imatrix_render_start(&rp, &b->child, b->err, b->errlen);
    if (!e)
        e = new_client(b, sock, NULL, &b->decide);
    if (!e)
        e = new_client(b, sock, ENGINE_IMATRIX_SLOTS_PATH, &b->slots);
    if (!e)
        e = new_client(b, sock, ENGINE_IMATRIX_TOKENIZE_PATH, &b->tokenize);
    return e;
}

static void stop_server(struct build *b) {
    s1client_free(b->decide);
    s1client_free(b->slots);
    s1client_free(b->tokenize);
    b->decide = b->slots = b->tokenize = NULL;
    if (b->child)
        engine_child_stop(b->child, RENDER_STOP_MS, NULL);
    engine_child_free(b->child);
    b->child = NULL;
    engine_rundir_free(b->run);
    b->run = NULL;
    if (b->p->verbose)
        echo_file(b->server_log);
}

/* Sets err for a failed exchange with the render server: its own message, or
 * what its log says when it died. */
static tandem_err server_failed(struct build *b, tandem_err e, const char *what) {
    char last[512] = "", msg[512];
    snprintf(msg, sizeof msg, "%s", b->err && b->errlen ? b->err : "");
    bool exited = false;
    int status = 0;
    if (b->child)
        engine_child_poll(b->child, &exited, &status);
    if (exited) {
        char why[96];
        engine_child_log_tail(b->child, last, sizeof last);
        tandem_errmsg(b->err, b->errlen, "%s: llama-server %s: %s", what,
                      engine_child_describe_status(status, why, sizeof why), last);
        return TANDEM_ERR_CHILD;
    }
    tandem_errmsg(b->err, b->errlen, "%s: %s", what, msg[0] ? msg : tandem_strerror(e));
    return e;
}

/* --- rendering ------------------------------------------------------------------- */

/* Sends question q of case c alone; a refusal names the case and question. */
static tandem_err send_question(struct build *b, const struct evalset_case *c,
                                const struct evalset_question *q) {
    char *text = engine_imatrix_question_body(c->state, q->id,
                                              json_object_get(c->questions, q->id));
    if (!text) {
        tandem_errmsg(b->err, b->errlen, "out of memory");
        return TANDEM_ERR_NOMEM;
    }
    long status = 0;
    json_t *answer = NULL;
    char where[600];
    snprintf(where, sizeof where, "%s:%zu: case %s, question %s", b->p->set->path, c->line,
             c->id, q->id);
    tandem_err e = s1client_post(b->decide, text, strlen(text), &status, &answer, b->err,
                                 b->errlen);
    free(text);
    if (e)
        return server_failed(b, e, where);
    if (status != 200) {
        tandem_errmsg(b->err, b->errlen, "%s: %s cannot answer it (HTTP %ld): %s", where,
                      b->model_name, status, engine_imatrix_error_message(answer));
        e = TANDEM_ERR_INVAL;
    }
    json_decref(answer);
    return e;
}

/* Appends slot 0's last prompt (and "\n") to the text; checks that it is a
 * new task's. */
static tandem_err take_prompt(struct build *b) {
    long status = 0;
    json_t *slots = NULL;
    tandem_err e = s1client_get(b->slots, &status, &slots, b->err, b->errlen);
    if (e)
        return server_failed(b, e, "GET /slots");
    const char *prompt;
    e = engine_imatrix_slots_prompt(status, slots, b->last_task, &prompt, &b->last_task, b->err,
                                    b->errlen);
    if (!e)
        e = mem_buf_append(&b->text, prompt, strlen(prompt));
    if (!e)
        e = mem_buf_append(&b->text, "\n", 1);
    if (e == TANDEM_ERR_TOOBIG)
        tandem_errmsg(b->err, b->errlen, "the rendered text passes %u MiB; use fewer cases "
                      "(--calibration-share)", TEXT_MAX >> 20);
    else if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(b->err, b->errlen, "out of memory");
    json_decref(slots);
    return e;
}

/* The number of prompts the selected cases make (one per question). */
static size_t count_prompts(const struct imatrix_params *p, size_t *n_cases) {
    size_t n = 0;
    *n_cases = 0;
    for (size_t i = 0; i < p->set->n_cases; i++)
        if (!p->use || p->use[i]) {
            ++*n_cases;
            n += p->set->cases[i].n_questions;
        }
    return n;
}

static tandem_err render_all(struct build *b) {
    const struct evalset *set = b->p->set;
    size_t total = count_prompts(b->p, &b->st.n_cases);
    progress(b, "render", 0, total);
    b->last_task = -1;
    for (size_t i = 0; i < set->n_cases; i++) {
        if (b->p->use && !b->p->use[i])
            continue;
        const struct evalset_case *c = &set->cases[i];
        for (size_t k = 0; k < c->n_questions; k++) {
            tandem_err e = send_question(b, c, &c->q[k]);
            if (!e)
                e = take_prompt(b);
            if (e)
                return e;
            progress(b, "render", ++b->st.n_prompts, total);
        }
    }
    return TANDEM_OK;
}

/* Counts the text's tokens as llama-imatrix will (BOS added, special tokens
 * parsed) on the render server; leaves 0 for texts over TOKENIZE_MAX. */
static tandem_err count_tokens(struct build *b) {
    b->st.n_tokens = 0;
    if (b->text.len > TOKENIZE_MAX)
        return TANDEM_OK;
    char *text = engine_imatrix_tokenize_body(b->text.data, b->text.len);
    if (!text) {
        tandem_errmsg(b->err, b->errlen, "out of memory");
        return TANDEM_ERR_NOMEM;
    }
    long status = 0;
    json_t *answer = NULL;
    tandem_err e = s1client_post(b->tokenize, text, strlen(text), &status, &answer, b->err,
                                 b->errlen);
    free(text);
    if (e)
        return server_failed(b, e, "POST /tokenize");
    e = engine_imatrix_tokenize_count(status, answer, &b->st.n_tokens, b->err, b->errlen);
    json_decref(answer);
    return e;
}

/* --- the matrix ------------------------------------------------------------------ */

/* Picks the chunk; TANDEM_ERR_RANGE when the text is too short for two. */
static tandem_err choose_chunk(struct build *b) {
    uint32_t train = plan_model_ctx_train(b->m);
    if (!b->st.n_tokens) {
        b->st.chunk = train && train < ENGINE_IMATRIX_MAX_CHUNK ? train : ENGINE_IMATRIX_MAX_CHUNK;
        return TANDEM_OK;
    }
    /* with add_eos overridden the tool sees one token fewer than /tokenize counted */
    uint64_t n = b->st.n_tokens - (b->add_eos ? 1 : 0);
    b->st.chunk = engine_imatrix_chunk(n, train);
    if (!b->st.chunk) {
        tandem_errmsg(b->err, b->errlen, "%zu prompt(s) make only %llu tokens; llama-imatrix "
                      "needs two chunks of at least %u: use more cases", b->st.n_prompts,
                      (unsigned long long)n, ENGINE_IMATRIX_MIN_CHUNK);
        return TANDEM_ERR_RANGE;
    }
    b->st.n_chunks = (uint32_t)(n / b->st.chunk);
    return TANDEM_OK;
}

static tandem_err run_tool(struct build *b) {
    struct engine_imatrix_params ip = {
        .tool = b->tool, .model = b->p->model, .text = b->text_path, .out = b->tool_out,
        .chunk = b->st.chunk, .no_add_eos = b->add_eos, .log_path = b->tool_log};
    progress(b, "imatrix", 0, b->st.n_chunks);
    char why[1024];
    tandem_err e = engine_imatrix_run(&ip, why, sizeof why);
    if (b->p->verbose)
        echo_file(b->tool_log);
    if (e == TANDEM_ERR_UNSUPPORTED) {
        tandem_errmsg(b->err, b->errlen, "%s: llama-imatrix cannot compute an importance matrix "
                      "for this model (%s%s, decision type %s): %s", b->model_name,
                      plan_model_arch(b->m), plan_model_is_encoder(b->m) ? " encoder" : "",
                      plan_model_decision_type(b->m), why);
    } else if (e) {
        tandem_errmsg(b->err, b->errlen, "%s: llama-imatrix failed: %s", b->model_name, why);
    } else {
        progress(b, "imatrix", b->st.n_chunks, b->st.n_chunks);
    }
    return e;
}

/* Adds the spec fmt ("key=type:value", as gguf_edit_set_spec takes) to ed,
 * unless e already failed; returns the result. */
__attribute__((format(printf, 4, 5))) static tandem_err set_spec(struct build *b,
                                                                 struct gguf_edit *ed,
                                                                 tandem_err e, const char *fmt,
                                                                 ...) {
    if (e)
        return e;
    char spec[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(spec, sizeof spec, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof spec) {
        tandem_errmsg(b->err, b->errlen, "the data's name is too long to record");
        return TANDEM_ERR_TOOBIG;
    }
    return gguf_edit_set_spec(ed, spec, b->err, b->errlen);
}

/* Writes the tool's matrix to p->out with the data's name as its dataset (the
 * tool recorded its temporary text file) and tandem.imatrix.* provenance. */
static tandem_err write_out(struct build *b) {
    const char *data = b->p->data_name ? b->p->data_name : b->p->set->path;
    json_t *names = json_pack("[s]", data);
    char *names_text = names ? json_dumps(names, JSON_COMPACT) : NULL;
    json_decref(names);
    struct gguf *g = NULL;
    struct gguf_edit *ed = NULL;
    tandem_err e = names_text ? gguf_open(b->tool_out, &g, b->err, b->errlen) : TANDEM_ERR_NOMEM;
    if (!e)
        e = gguf_edit_new(g, &ed);
    e = set_spec(b, ed, e, "imatrix.datasets=arr[str]:%s", names_text);
    e = set_spec(b, ed, e, "tandem.imatrix.cases=u32:%zu", b->st.n_cases);
    e = set_spec(b, ed, e, "tandem.imatrix.engine_build=u32:%d", TANDEM_ENGINE_BUILD);
    if (b->p->split_share > 0) {
        e = set_spec(b, ed, e, "tandem.imatrix.seed=u64:%llu",
                     (unsigned long long)b->p->split_seed);
        e = set_spec(b, ed, e, "tandem.imatrix.calibration_share=f64:%.17g", b->p->split_share);
    }
    if (!e)
        e = gguf_edit_write(ed, b->p->out, b->err, b->errlen);
    if (e == TANDEM_ERR_NOMEM)
        tandem_errmsg(b->err, b->errlen, "out of memory");
    gguf_edit_free(ed);
    gguf_free(g);
    free(names_text);
    return e;
}

/* --- the build ------------------------------------------------------------------- */

/* Writes the rendered text to path atomically; says which path failed. */
static tandem_err write_text(struct build *b, const char *path) {
    tandem_err e = host_write_atomic(path, b->text.data, b->text.len);
    if (e)
        tandem_errmsg(b->err, b->errlen, "%s: cannot write: %s", path, strerror(errno));
    return e;
}

/* Starts the server, renders, counts, and stops it again (always). */
static tandem_err render(struct build *b) {
    int64_t t0 = host_now_ms();
    tandem_err e = start_server(b);
    if (!e)
        e = render_all(b);
    if (!e)
        e = count_tokens(b);
    stop_server(b);
    b->st.render_s = (double)(host_now_ms() - t0) / 1000.0;
    return e ? e : write_text(b, b->text_path);
}

static tandem_err compute(struct build *b) {
    int64_t t0 = host_now_ms();
    tandem_err e = choose_chunk(b);
    if (!e)
        e = run_tool(b);
    b->st.imatrix_s = (double)(host_now_ms() - t0) / 1000.0;
    if (!e)
        e = write_out(b);
    if (!e && b->p->text_out && (e = write_text(b, b->p->text_out)))
        unlink(b->p->out); /* all or nothing: no matrix without the text asked for */
    return e;
}

tandem_err imatrix_build(const struct imatrix_params *p, struct imatrix_stats *stats, char *err,
                         size_t errlen) {
    struct build b = {.p = p, .err = err, .errlen = errlen, .model_name = host_base_name(p->model)};
    mem_buf_init(&b.text, TEXT_MAX);
    size_t n_cases;
    tandem_err e = check_model(&b);
    if (!e && count_prompts(p, &n_cases) == 0) {
        tandem_errmsg(err, errlen, "%s: no case selected for calibration", p->set->path);
        e = TANDEM_ERR_INVAL;
    }
    if (!e)
        e = locate_engine(&b);
    if (!e)
        e = make_dir(&b);
    if (!e)
        e = render(&b);
    if (!e)
        e = compute(&b);
    remove_dir(&b);
    mem_buf_deinit(&b.text);
    plan_model_free(b.m);
    if (stats)
        *stats = b.st;
    return e;
}
