/* pipeline_set.c: a config's pipelines, compiled once (see pipeline_internal.h for the
 * module's three files).
 *
 * pipeline_set_new turns each config_pipeline into stages of compiled templates, resolving
 * every model to its config index once and checking what the config module cannot:
 * template references (tmpl, with the scope each stage may see: the decide stage nothing
 * decided yet, verify stage k the decision and the questions of stages before k), that
 * stage and escalation models are decision models, and option counts against each
 * model's limit. Every error names the config file, the line and the key path. A set
 * that compiled is never changed again, so runs only read it and a request can fail only
 * for what it carries or for what happens at run time. The listing (GET /v1/pipelines)
 * is rendered from the same compiled stages. */
#include <stdio.h>
#include <string.h>

#include "base/mem.h"
#include "serve/pipeline_internal.h"

/* --- compiled pipelines ---------------------------------------------------------------- */

static void free_stage(struct cstage *st) {
    for (size_t i = 0; st->qs && i < st->n; i++) {
        tmpl_free(st->qs[i].instructions);
        for (size_t c = 0; st->qs[i].criteria && c < st->qs[i].q->n_criteria; c++)
            tmpl_free(st->qs[i].criteria[c]);
        mem_free(st->qs[i].criteria);
    }
    mem_free(st->qs);
}

void pipeline_set_free(struct pipeline_set *s) {
    if (!s)
        return;
    for (size_t i = 0; s->p && i < s->n; i++) {
        struct cpipeline *cp = &s->p[i];
        tmpl_free(cp->instructions);
        free_stage(&cp->decide);
        for (size_t v = 0; cp->verify && v < cp->pl->n_verify; v++)
            free_stage(&cp->verify[v]);
        mem_free(cp->verify);
    }
    mem_free(s->p);
    mem_free(s);
}

/* Compilation context: where errors point. */
struct cc {
    const struct config *cfg;
    const struct pipeline_model *models;
    char *err;
    size_t errlen;
};

static size_t model_index(const struct config *cfg, const char *name) {
    const struct config_model *m = config_find_model(cfg, name);
    return m ? (size_t)(m - cfg->models) : SIZE_MAX;
}

static tandem_err compile_text(struct cc *cc, const struct config_text *t,
                               const struct tmpl_scope *scope, const char *path,
                               struct tmpl **out) {
    char why[512];
    tandem_err e = tmpl_compile(t->text, scope, out, why, sizeof why);
    if (e == TANDEM_ERR_FORMAT)
        tandem_errmsg(cc->err, cc->errlen, "%s:%u: %s: %s", cc->cfg->path, t->line, path, why);
    return e;
}

static const struct config_threshold *threshold_of(const struct config_pipeline *pl,
                                                   const char *id) {
    for (size_t i = 0; i < pl->n_thresholds; i++)
        if (!strcmp(pl->thresholds[i].question, id))
            return &pl->thresholds[i];
    return NULL;
}

/* A stage model must exist (config checked it) and answer System One. */
static tandem_err check_decision_model(struct cc *cc, size_t model, uint32_t line,
                                       const char *path) {
    if (cc->models[model].decision_type[0])
        return TANDEM_OK;
    tandem_errmsg(cc->err, cc->errlen, "%s:%u: %s: %s is not a decision model (no decision "
                  "metadata), so it cannot answer a pipeline stage", cc->cfg->path, line, path,
                  cc->cfg->models[model].name);
    return TANDEM_ERR_FORMAT;
}

static tandem_err compile_question(struct cc *cc, const struct config_pipeline *pl,
                                   const struct config_question *q, const struct tmpl_scope *scope,
                                   const char *path, unsigned max_options, struct cquestion *out) {
    char sub[1024];
    out->q = q;
    out->threshold = threshold_of(pl, q->id);
    if (q->type == S1Q_TYPE_CHOICE && q->n_criteria > max_options) {
        tandem_errmsg(cc->err, cc->errlen, "%s:%u: %s.criteria: %zu options, but the model "
                      "takes at most %u", cc->cfg->path, q->line, path, q->n_criteria, max_options);
        return TANDEM_ERR_FORMAT;
    }
    snprintf(sub, sizeof sub, "%s.instructions", path);
    tandem_err e = compile_text(cc, &q->instructions, scope, sub, &out->instructions);
    if (e == TANDEM_OK && q->n_criteria &&
        !(out->criteria = mem_calloc(q->n_criteria, sizeof *out->criteria)))
        e = TANDEM_ERR_NOMEM;
    for (size_t i = 0; e == TANDEM_OK && i < q->n_criteria; i++) {
        if (q->keys)
            snprintf(sub, sizeof sub, "%s.criteria.%s", path, q->keys[i]);
        else
            snprintf(sub, sizeof sub, "%s.criteria[%zu]", path, i);
        e = compile_text(cc, &q->criteria[i], scope, sub, &out->criteria[i]);
    }
    return e;
}

static tandem_err compile_stage(struct cc *cc, const struct config_pipeline *pl,
                                const struct config_stage *st, const struct tmpl_scope *scope,
                                const char *path, struct cstage *out) {
    char sub[600];
    out->model = model_index(cc->cfg, st->model);
    snprintf(sub, sizeof sub, "%s.model", path);
    tandem_err e = check_decision_model(cc, out->model, st->model_line, sub);
    if (e == TANDEM_OK && st->n_questions &&
        !(out->qs = mem_calloc(st->n_questions, sizeof *out->qs)))
        e = TANDEM_ERR_NOMEM;
    for (size_t i = 0; e == TANDEM_OK && i < st->n_questions; i++) {
        snprintf(sub, sizeof sub, "%s.questions.%s", path, st->questions[i].id);
        e = compile_question(cc, pl, &st->questions[i], scope, sub,
                             cc->models[out->model].max_options, &out->qs[i]);
        out->n = i + 1;
    }
    return e;
}

/* The NULL-terminated ids of a stage's questions (borrowed from the config). */
static const char **stage_ids(const struct config_stage *st, size_t n_stages) {
    size_t n = 0;
    for (size_t s = 0; s < n_stages; s++)
        n += st[s].n_questions;
    const char **ids = mem_calloc(n + 1, sizeof *ids);
    for (size_t s = 0, k = 0; ids && s < n_stages; s++)
        for (size_t q = 0; q < st[s].n_questions; q++)
            ids[k++] = st[s].questions[q].id;
    return ids;
}

static tandem_err compile_verify(struct cc *cc, struct cpipeline *cp, const char **decide_ids) {
    const struct config_pipeline *pl = cp->pl;
    tandem_err e = TANDEM_OK;
    for (size_t v = 0; e == TANDEM_OK && v < pl->n_verify; v++) {
        const char **earlier = stage_ids(pl->verify, v);
        if (!earlier)
            return TANDEM_ERR_NOMEM;
        struct tmpl_scope scope = {.decided = true, .decide_ids = decide_ids,
                                   .verify_ids = earlier};
        char path[300];
        snprintf(path, sizeof path, "pipelines.%s.verify[%zu]", pl->name, v);
        e = compile_stage(cc, pl, &pl->verify[v], &scope, path, &cp->verify[v]);
        mem_free(earlier);
    }
    return e;
}

static tandem_err compile_pipeline(struct cc *cc, const struct config_pipeline *pl,
                                   struct cpipeline *cp) {
    char path[300];
    cp->pl = pl;
    cp->escalate_model = pl->escalate_model ? model_index(cc->cfg, pl->escalate_model) : SIZE_MAX;
    if (!(cp->verify = mem_calloc(pl->n_verify, sizeof *cp->verify)))
        return TANDEM_ERR_NOMEM;
    struct tmpl_scope undecided = {.decided = false};
    snprintf(path, sizeof path, "pipelines.%s.decide", pl->name);
    tandem_err e = compile_stage(cc, pl, &pl->decide, &undecided, path, &cp->decide);
    snprintf(path, sizeof path, "pipelines.%s.decide.instructions", pl->name);
    struct tmpl_scope own = {.renders_instructions = true};
    if (e == TANDEM_OK && pl->decide.instructions.text)
        e = compile_text(cc, &pl->decide.instructions, &own, path, &cp->instructions);
    if (e == TANDEM_OK && cp->escalate_model != SIZE_MAX) {
        snprintf(path, sizeof path, "pipelines.%s.verdict.escalate.model", pl->name);
        e = check_decision_model(cc, cp->escalate_model, pl->verdict_line, path);
    }
    if (e != TANDEM_OK)
        return e;
    const char **decide_ids = stage_ids(&pl->decide, 1);
    if (!decide_ids)
        return TANDEM_ERR_NOMEM;
    e = compile_verify(cc, cp, decide_ids);
    mem_free(decide_ids);
    return e;
}

tandem_err pipeline_set_new(const struct config *cfg, const struct pipeline_model *models,
                            struct pipeline_set **out, char *err, size_t errlen) {
    *out = NULL;
    struct pipeline_set *s = mem_calloc(1, sizeof *s);
    if (!s || (cfg->n_pipelines && !(s->p = mem_calloc(cfg->n_pipelines, sizeof *s->p)))) {
        mem_free(s);
        return TANDEM_ERR_NOMEM;
    }
    s->cfg = cfg;
    s->models = models;
    struct cc cc = {cfg, models, err, errlen};
    tandem_err e = TANDEM_OK;
    for (size_t i = 0; e == TANDEM_OK && i < cfg->n_pipelines; i++) {
        s->n = i + 1;
        e = compile_pipeline(&cc, &cfg->pipelines[i], &s->p[i]);
    }
    if (e != TANDEM_OK) {
        if (e == TANDEM_ERR_NOMEM)
            tandem_errmsg(err, errlen, "%s: out of memory compiling pipelines", cfg->path);
        pipeline_set_free(s);
        return e;
    }
    *out = s;
    return TANDEM_OK;
}

const struct cpipeline *pipeline_set_find(const struct pipeline_set *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->p[i].pl->name, name))
            return &s->p[i];
    return NULL;
}

size_t pipeline_decide_model(const struct pipeline_set *s, const char *name) {
    const struct cpipeline *cp = pipeline_set_find(s, name);
    return cp ? cp->decide.model : SIZE_MAX;
}

/* --- listing ------------------------------------------------------------------------------ */

static const char *on_reject_name(enum config_on_reject r) {
    return r == CONFIG_ON_REJECT_NEXT_BEST ? "next_best"
           : r == CONFIG_ON_REJECT_REJECT  ? "reject"
                                           : "escalate";
}

char *pipeline_threshold_text(const struct config_threshold *th, char *buf, size_t cap) {
    if (th->option)
        snprintf(buf, cap, "== %s", th->option);
    else
        snprintf(buf, cap, "%s %g", th->op, th->value);
    return buf;
}

static json_t *stage_json(const struct pipeline_set *s, const struct cstage *st) {
    json_t *qs = json_array();
    for (size_t i = 0; i < st->n; i++) {
        char th[300];
        const struct cquestion *q = &st->qs[i];
        json_array_append_new(qs, json_pack("{ssssso}", "id", q->q->id, "type",
                                            s1q_type_name(q->q->type), "threshold",
                                            q->threshold ? json_string(pipeline_threshold_text(
                                                               q->threshold, th, sizeof th))
                                                         : json_null()));
    }
    return json_pack("{ssso}", "model", s->cfg->models[st->model].name, "questions", qs);
}

json_t *pipeline_set_list_json(const struct pipeline_set *s) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < s->n; i++) {
        const struct cpipeline *cp = &s->p[i];
        const struct config_pipeline *pl = cp->pl;
        json_t *verify = json_array();
        for (size_t v = 0; v < pl->n_verify; v++)
            json_array_append_new(verify, stage_json(s, &cp->verify[v]));
        json_t *escalate = pl->escalate_pipeline ? json_pack("{ss}", "pipeline", pl->escalate_pipeline)
                           : pl->escalate_model  ? json_pack("{ss}", "model", pl->escalate_model)
                                                 : json_null();
        json_array_append_new(
            list, json_pack("{ssss*sosos{sfsssiso}}", "name", pl->name, "description",
                            pl->description, "decide", stage_json(s, &cp->decide), "verify", verify,
                            "verdict", "min_confidence", pl->min_confidence, "on_reject",
                            on_reject_name(pl->on_reject), "max_attempts", (int)pl->max_attempts,
                            "escalate", escalate));
    }
    return json_pack("{so}", "pipelines", list);
}
