/* config.c: tandem.yaml into struct config, validated in full.
 *
 * libfyaml builds the document (its diagnostics are collected, not printed,
 * and become "<file>:<line>: <message>"). The tree is then walked once by the
 * schema's tables (config_schema.c, over config_walk.c): an unknown key is
 * always an error (with the closest known key as a suggestion) and every
 * error names the key path and the line of the offending node. The checks
 * that span sections (model names and aliases, pipelines against the models
 * and each other) run here after the walk. Nothing is applied piecemeal: on
 * any error the partial config is freed. */
#include "serve/config.h"

#include <errno.h>
#include <libfyaml.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cache.h"
#include "base/mem.h"
#include "base/utf8.h"
#include "serve/config_schema.h"
#include "serve/config_walk.h"

/* --- cross-checks ------------------------------------------------------------------------------ */

/* How many names (model names and aliases) equal name. */
static size_t name_count(const struct config *c, const char *name) {
    size_t n = 0;
    for (size_t i = 0; i < c->n_models; i++) {
        n += !strcmp(c->models[i].name, name);
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            n += !strcmp(c->models[i].aliases[a], name);
    }
    return n;
}

static bool reserved_name(const char *name) {
    return !strncmp(name, CONFIG_PIPELINE_MODEL_PREFIX, strlen(CONFIG_PIPELINE_MODEL_PREFIX));
}

static bool check_names(struct config_walk *w, struct config *c, struct fy_node *root) {
    for (size_t i = 0; i < c->n_models; i++) {
        const struct config_model *m = &c->models[i];
        char p[300];
        if (reserved_name(m->name)) {
            snprintf(p, sizeof p, "models.%s", m->name);
            w->line = (int)m->line;
            return config_walk_fail(
                w, TANDEM_ERR_FORMAT, NULL, p,
                "a model name may not begin with \"" CONFIG_PIPELINE_MODEL_PREFIX
                "\" (that calls a pipeline)");
        }
        for (size_t a = 0; a < m->n_aliases; a++) {
            const char *alias = m->aliases[a];
            bool reserved = reserved_name(alias);
            if (!reserved && name_count(c, alias) == 1)
                continue;
            snprintf(p, sizeof p, "models.%s.aliases[%zu]", m->name, a);
            w->line = (int)m->line;
            return config_walk_fail(
                w, TANDEM_ERR_FORMAT, NULL, p,
                reserved ? "\"%s\" may not begin with \"" CONFIG_PIPELINE_MODEL_PREFIX
                           "\" (that calls a pipeline)"
                         : "\"%s\" already names another model or alias",
                alias);
        }
    }
    if (c->default_model && !config_find_model(c, c->default_model))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, root, "defaults.model",
                                "\"%s\" is not a model or alias", c->default_model);
    return true;
}

const struct config_question *config_find_verify_question(const struct config_pipeline *pl,
                                                          const char *id) {
    for (size_t s = 0; s < pl->n_verify; s++)
        for (size_t q = 0; q < pl->verify[s].n_questions; q++)
            if (!strcmp(pl->verify[s].questions[q].id, id))
                return &pl->verify[s].questions[q];
    return NULL;
}

/* Checks a pipeline against the models and itself: stage models exist, verify
 * question ids are unique, thresholds name a verify question and suit its
 * type, an escalation names something that exists. */
static bool check_stage_model(struct config_walk *w, const struct config *c,
                              const struct config_stage *st, const char *path) {
    if (config_find_model(c, st->model))
        return true;
    w->line = (int)st->model_line;
    return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, path, "\"%s\" is not a model or alias",
                            st->model);
}

static bool check_threshold(struct config_walk *w, const struct config_pipeline *pl,
                            const struct config_threshold *th) {
    char p[400];
    snprintf(p, sizeof p, "pipelines.%s.verdict.thresholds.%s", pl->name, th->question);
    w->line = (int)th->line;
    const struct config_question *q = config_find_verify_question(pl, th->question);
    if (!q)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p, "no verify question has this id");
    bool eq = !strcmp(th->op, "==");
    if (q->type == S1Q_TYPE_CHOICE && !eq)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                "a choice question takes \"== OPTION\"");
    if (q->type != S1Q_TYPE_CHOICE && eq)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p, "a %s question takes >=, >, <= or <",
                                s1q_type_name(q->type));
    if (eq) {
        for (size_t i = 0; i < q->n_criteria; i++)
            if (!strcmp(q->keys[i], th->option))
                return true;
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p, "\"%s\" is not an option of %s",
                                th->option, q->id);
    }
    if (q->type == S1Q_TYPE_NOUL && (th->value < 0 || th->value > 1))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                "a noul is a probability: 0 to 1, got %g", th->value);
    return true;
}

/* Follows escalate.pipeline from pl; a chain that comes back is a cycle. */
static bool check_escalation(struct config_walk *w, const struct config *c,
                             const struct config_pipeline *pl) {
    char p[300];
    snprintf(p, sizeof p, "pipelines.%s.verdict.escalate", pl->name);
    w->line = (int)pl->verdict_line;
    if (pl->on_reject == CONFIG_ON_REJECT_ESCALATE && !pl->escalate_pipeline && !pl->escalate_model)
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                "is required with on_reject: escalate");
    if (pl->escalate_model && !config_find_model(c, pl->escalate_model))
        return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                "model \"%s\" is not a model or alias", pl->escalate_model);
    const struct config_pipeline *next = pl;
    for (size_t hops = 0; next && next->escalate_pipeline; hops++) {
        const char *to = next->escalate_pipeline;
        if (!(next = config_find_pipeline(c, to)))
            return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p, "pipeline \"%s\" does not exist",
                                    to);
        if (next == pl || hops > c->n_pipelines)
            return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                    "escalation comes back to %s (a cycle)", pl->name);
    }
    return true;
}

static bool check_pipeline(struct config_walk *w, const struct config *c,
                           const struct config_pipeline *pl) {
    char p[400];
    snprintf(p, sizeof p, "pipelines.%s.decide.model", pl->name);
    if (!check_stage_model(w, c, &pl->decide, p))
        return false;
    for (size_t q = 0; q < pl->decide.n_questions; q++)
        if (!strcmp(pl->decide.questions[q].id, CONFIG_DECIDE_CHOICE_ID)) {
            w->line = (int)pl->decide.questions[q].line;
            snprintf(p, sizeof p, "pipelines.%s.decide.questions.%s", pl->name,
                     CONFIG_DECIDE_CHOICE_ID);
            return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                    "this id is the decision itself; choose another");
        }
    for (size_t s = 0; s < pl->n_verify; s++) {
        snprintf(p, sizeof p, "pipelines.%s.verify[%zu].model", pl->name, s);
        if (!check_stage_model(w, c, &pl->verify[s], p))
            return false;
        for (size_t q = 0; q < pl->verify[s].n_questions; q++) {
            const struct config_question *qq = &pl->verify[s].questions[q];
            if (config_find_verify_question(pl, qq->id) != qq) {
                w->line = (int)qq->line;
                snprintf(p, sizeof p, "pipelines.%s.verify[%zu].questions.%s", pl->name, s, qq->id);
                return config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, p,
                                        "an earlier verify stage has a question with this id");
            }
        }
    }
    for (size_t i = 0; i < pl->n_thresholds; i++)
        if (!check_threshold(w, pl, &pl->thresholds[i]))
            return false;
    return check_escalation(w, c, pl);
}

/* Stores the defaults: the schema's, and those that have no row in its
 * tables. False after an error in w (a default its own field refuses). */
static bool set_defaults(struct config_walk *w, struct config *c) {
    snprintf(c->listen_host, sizeof c->listen_host, "127.0.0.1");
    c->listen_port = 8090;
    if (gethostname(c->node_id, sizeof c->node_id) != 0 || !c->node_id[0])
        snprintf(c->node_id, sizeof c->node_id, "tandem");
    c->node_id[sizeof c->node_id - 1] = '\0';
    return config_schema_defaults(w, c);
}

static tandem_err finish_logs(struct config *c) {
    if (!c->log_dir) {
        char dir[PATH_MAX];
        if (cache_path(dir, sizeof dir, "logs") != TANDEM_OK || !(c->log_dir = mem_strdup(dir)))
            return TANDEM_ERR_NOMEM;
    }
    if (c->audit_path && !strcmp(c->audit_path, "off")) {
        mem_free(c->audit_path);
        c->audit_path = NULL;
    } else if (!c->audit_path) {
        size_t n = strlen(c->log_dir) + sizeof "/audit.jsonl";
        if (!(c->audit_path = mem_alloc(n)))
            return TANDEM_ERR_NOMEM;
        snprintf(c->audit_path, n, "%s/audit.jsonl", c->log_dir);
    }
    if (c->store_path && !strcmp(c->store_path, "off")) {
        mem_free(c->store_path);
        c->store_path = NULL;
    } else if (!c->store_path) {
        size_t n = strlen(c->log_dir) + sizeof "/store.db";
        if (!(c->store_path = mem_alloc(n)))
            return TANDEM_ERR_NOMEM;
        snprintf(c->store_path, n, "%s/store.db", c->log_dir);
    }
    return TANDEM_OK;
}

/* libfyaml's diagnostics, captured instead of printed: the first one wins. */
struct yaml_diag {
    char text[384];
};

static void capture_diag(struct fy_diag *diag, void *user, const char *buf, size_t len) {
    (void)diag;
    struct yaml_diag *d = user;
    if (d->text[0])
        return;
    size_t n = len < sizeof d->text - 1 ? len : sizeof d->text - 1;
    memcpy(d->text, buf, n);
    d->text[n] = '\0';
    d->text[strcspn(d->text, "\n")] = '\0';
}

/* libfyaml prints "<input>:<line>:<col>: error: <message>", 1-based. */
static void yaml_error(struct config_walk *w, const struct yaml_diag *d) {
    int line = 0, col = 0, used = 0;
    const char *msg = d->text[0] ? d->text : "cannot parse";
    const char *pos = d->text[0] == '<' ? strstr(d->text, ">:") : NULL;
    pos = pos ? pos + 2 : d->text;
    if (sscanf(pos, "%d:%d: %n", &line, &col, &used) == 2 && used > 0)
        msg = pos + used;
    if (!strncmp(msg, "error: ", 7))
        msg += 7;
    tandem_errmsg(w->err, w->errlen, "%s:%d: YAML: %s", w->file, line, msg);
    w->e = TANDEM_ERR_FORMAT;
}

/* Parses data[len] and walks it into c, whose defaults are stored; the first
 * error, if any, is left in w. */
static void load_text(struct config_walk *w, const char *data, size_t len, struct config *c) {
    struct yaml_diag captured = {""};
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = capture_diag;
    dcfg.user = &captured;
    dcfg.colorize = false;
    dcfg.show_source = false;
    dcfg.show_type = true;
    dcfg.show_module = false;
    dcfg.show_position = true;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_DEFAULT_PARSE, .diag = diag};
    /* YAML must be UTF-8, and libfyaml 0.7.12 can loop forever on some invalid
     * sequences (found by fuzzing): such text is refused before it parses */
    int bad = (int)utf8_bad_line((const unsigned char *)data, len);
    struct fy_document *doc = len && !bad ? fy_document_build_from_string(&pcfg, data, len) : NULL;
    struct fy_node *root = doc ? fy_document_root(doc) : NULL;
    if (bad && (w->line = bad))
        config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, "(text)", "not valid UTF-8 (or a NUL byte)");
    else if (len && !doc)
        yaml_error(w, &captured);
    else if (!root)
        config_walk_fail(w, TANDEM_ERR_FORMAT, NULL, "(root)",
                         "the file is empty: at least models: is needed");
    else if (config_schema_walk(w, root, c) && !c->n_models)
        config_walk_fail(w, TANDEM_ERR_FORMAT, root, "models", "is required: at least one model");
    if (w->e == TANDEM_OK)
        check_names(w, c, root);
    for (size_t i = 0; w->e == TANDEM_OK && i < c->n_pipelines; i++)
        check_pipeline(w, c, &c->pipelines[i]);
    if (w->e == TANDEM_OK)
        w->e = finish_logs(c);
    fy_document_destroy(doc);
    if (diag)
        fy_diag_unref(diag);
}

tandem_err config_load_buffer(const char *name, const char *data, size_t len, struct config **out,
                              char *err, size_t errlen) {
    *out = NULL;
    struct config_walk w = {.file = name, .err = err, .errlen = errlen, .e = TANDEM_OK};
    const char *slash = strrchr(name, '/');
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%.*s", slash ? (int)(slash - name) : 1, slash ? name : ".");
    if (!realpath(rel[0] ? rel : "/", w.dir)) /* relative model paths become absolute */
        snprintf(w.dir, sizeof w.dir, "%s", rel);
    struct config *c = mem_calloc(1, sizeof *c);
    if (!c || !(c->path = mem_strdup(name))) {
        mem_free(c);
        return TANDEM_ERR_NOMEM;
    }
    if (set_defaults(&w, c))
        load_text(&w, data, len, c);
    if (w.e != TANDEM_OK) {
        config_free(c);
        return w.e;
    }
    *out = c;
    return TANDEM_OK;
}

tandem_err config_load(const char *path, struct config **out, char *err, size_t errlen) {
    *out = NULL;
    struct mem_buf b;
    mem_buf_init(&b, 16u << 20);
    tandem_err e = mem_buf_append_file(&b, path);
    if (e != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: %s", path,
                      e == TANDEM_ERR_IO      ? strerror(errno)
                      : e == TANDEM_ERR_TOOBIG ? "larger than 16 MiB"
                                               : tandem_strerror(e));
    else
        e = config_load_buffer(path, b.data, b.len, out, err, errlen);
    mem_buf_deinit(&b);
    return e;
}

static void free_stage(struct config_stage *st) {
    for (size_t q = 0; st->questions && q < st->n_questions; q++) {
        struct config_question *qq = &st->questions[q];
        mem_free(qq->id);
        mem_free(qq->instructions.text);
        for (size_t i = 0; i < qq->n_criteria; i++)
            mem_free(qq->criteria[i].text);
        mem_free(qq->criteria);
        config_walk_list_free(qq->keys, qq->keys ? qq->n_criteria : 0);
    }
    mem_free(st->questions);
    mem_free(st->model);
    mem_free(st->instructions.text);
}

static void free_pipeline(struct config_pipeline *pl) {
    mem_free(pl->name);
    mem_free(pl->description);
    free_stage(&pl->decide);
    for (size_t s = 0; pl->verify && s < pl->n_verify; s++)
        free_stage(&pl->verify[s]);
    mem_free(pl->verify);
    for (size_t i = 0; pl->thresholds && i < pl->n_thresholds; i++) {
        mem_free(pl->thresholds[i].question);
        mem_free(pl->thresholds[i].option);
    }
    mem_free(pl->thresholds);
    mem_free(pl->escalate_pipeline);
    mem_free(pl->escalate_model);
}

static void free_upstream(struct config_upstream *u) {
    if (!u)
        return;
    config_walk_list_free(u->urls, u->n_urls);
    mem_free(u->api_key_env);
    if (u->api_key)
        explicit_bzero(u->api_key, strlen(u->api_key));
    mem_free(u->api_key);
    mem_free(u->health);
    mem_free(u);
}

/* The config's listen address as a URL a client can reach ("" for port 0). */
void config_listen_url(const struct config *cfg, char *out, size_t cap) {
    const char *h = cfg->listen_host;
    if (!strcmp(h, "0.0.0.0"))
        h = "127.0.0.1";
    else if (!strcmp(h, "::"))
        h = "::1";
    bool v6 = strchr(h, ':') != NULL;
    if (cfg->listen_port)
        snprintf(out, cap, "http://%s%s%s:%u", v6 ? "[" : "", h, v6 ? "]" : "",
                 (unsigned)cfg->listen_port);
    else
        out[0] = '\0';
}

void config_free(struct config *c) {
    if (!c)
        return;
    for (size_t i = 0; c->pipelines && i < c->n_pipelines; i++)
        free_pipeline(&c->pipelines[i]);
    mem_free(c->pipelines);
    for (size_t i = 0; c->models && i < c->n_models; i++) {
        struct config_model *m = &c->models[i];
        mem_free(m->name);
        mem_free(m->path);
        free_upstream(m->upstream);
        config_walk_list_free(m->aliases, m->n_aliases);
        config_walk_list_free(m->extra_args, m->n_extra_args);
    }
    mem_free(c->models);
    config_walk_list_free(c->api_keys, c->n_api_keys);
    config_walk_list_free(c->allowed_hosts, c->n_allowed_hosts);
    config_walk_list_free(c->allowed_origins, c->n_allowed_origins);
    config_walk_list_free(c->warnings, c->n_warnings);
    mem_free(c->path);
    mem_free(c->default_model);
    mem_free(c->log_dir);
    mem_free(c->audit_path);
    mem_free(c->store_path);
    mem_free(c->llama_server);
    mem_free(c);
}

const struct config_model *config_find_model(const struct config *c, const char *name) {
    for (size_t i = 0; i < c->n_models; i++) {
        if (!strcmp(c->models[i].name, name))
            return &c->models[i];
        for (size_t a = 0; a < c->models[i].n_aliases; a++)
            if (!strcmp(c->models[i].aliases[a], name))
                return &c->models[i];
    }
    return NULL;
}

const struct config_pipeline *config_find_pipeline(const struct config *c, const char *name) {
    for (size_t i = 0; i < c->n_pipelines; i++)
        if (!strcmp(c->pipelines[i].name, name))
            return &c->pipelines[i];
    return NULL;
}
