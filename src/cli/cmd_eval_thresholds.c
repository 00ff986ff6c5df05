/* cmd_eval_thresholds.c: thresholds chosen from data, written in the config.
 *
 * Every threshold is a cut of selective prediction (metrics.h): the answers
 * sorted by a score, accepted from the top down to the cut. A noul verify
 * question's score is P(true) (accepted when at least the threshold); when
 * the config's threshold for it is "<=" or "<", the score is -P(true), so the
 * same code accepts from the bottom. The decider's score is the engine's
 * confidence of each choice answer, (p_max - 1/n) / (1 - 1/n), which is what
 * min_confidence compares. Precision is the share of accepted answers that
 * are right (noul: gold true, or false for "<="; choice: the top answer is
 * gold), and the suggestion is the largest cut whose precision reaches the
 * target, i.e. metrics_coverage_at_risk at risk 1 - target. Only each case's
 * first answered repeat counts: repeats of one case are not new evidence.
 * The written value is the shortest decimal that accepts exactly the
 * answers of the cut, so the config does on the data what the report says. */
#include "cli/cmd_eval_thresholds.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/metrics.h"
#include "serve/config.h"
#include "serve/config_edit.h"

#define DECIDE_GROUP "min_confidence"
#define THRESHOLDS_LINE "      thresholds:\n" /* in the snippet, under pipelines.P.verdict */

/* The answers of one threshold: a noul question, or the pooled choice
 * questions standing for the decider. */
struct group {
    const char *question;     /* the noul question id; NULL for the decider */
    bool below;               /* accept P(true) <= threshold */
    struct metrics_answer *a; /* score and rightness, one per case */
    size_t n;
};

struct groups {
    struct group *g;
    size_t n, cap;
};

int cmd_eval_thresholds_check_args(struct cmd_eval_thresholds *th, const char *config) {
    if (config && th->apply && strcmp(config, th->apply)) {
        fprintf(stderr, "tandem eval: --config %s and --apply %s name different files\n",
                config, th->apply);
        return 2;
    }
    th->config = config ? config : th->apply;
    if (th->apply && !th->pipeline) {
        fprintf(stderr, "tandem eval: --apply %s needs --write-thresholds PIPELINE\n", th->apply);
        return 2;
    }
    if (th->pipeline && !th->config) {
        fprintf(stderr, "tandem eval: --write-thresholds %s needs the config that declares it: "
                        "--config F or --apply F\n", th->pipeline);
        return 2;
    }
    th->suggest |= th->pipeline != NULL;
    return 0;
}

void cmd_eval_thresholds_deinit(struct cmd_eval_thresholds *th) {
    config_free(th->cfg);
    th->cfg = NULL;
}

/* --- the groups ------------------------------------------------------------------------ */

static struct group *group_of(struct groups *gs, const char *question) {
    for (size_t i = 0; i < gs->n; i++)
        if (question ? gs->g[i].question && !strcmp(gs->g[i].question, question)
                     : !gs->g[i].question)
            return &gs->g[i];
    if (mem_array_grow((void **)&gs->g, &gs->cap, gs->n + 1, sizeof *gs->g, SIZE_MAX) !=
        TANDEM_OK)
        return NULL;
    gs->g[gs->n] = (struct group){.question = question};
    return &gs->g[gs->n++];
}

static void groups_free(struct groups *gs) {
    for (size_t i = 0; i < gs->n; i++)
        mem_free(gs->g[i].a);
    mem_free(gs->g);
}

/* The config's threshold of verify question id in pipeline pl, or NULL. */
static const struct config_threshold *config_threshold(const struct config_pipeline *pl,
                                                       const char *id) {
    for (size_t i = 0; pl && i < pl->n_thresholds; i++)
        if (!strcmp(pl->thresholds[i].question, id))
            return &pl->thresholds[i];
    return NULL;
}

/* "consistent, on_topic": the verify noul questions of pl. */
static void verify_names(const struct config_pipeline *pl, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (size_t s = 0; s < pl->n_verify; s++)
        for (size_t q = 0; q < pl->verify[s].n_questions && len < cap; q++)
            if (pl->verify[s].questions[q].type == CONFIG_Q_NOUL)
                len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "",
                                        pl->verify[s].questions[q].id);
}

/* Checks that question q of the dataset belongs to pipeline pl as a noul
 * verify question. Returns 0, or 1 with err. */
static int check_question(const struct config_pipeline *pl, const struct evalset *set,
                          const struct evalset_case *c, const struct evalset_question *q,
                          char *err, size_t errlen) {
    const struct config_question *cq = config_find_verify_question(pl, q->id);
    if (cq && cq->type == CONFIG_Q_NOUL)
        return 0;
    char names[512];
    verify_names(pl, names, sizeof names);
    if (cq)
        tandem_errmsg(err, errlen, "%s:%zu: question %s is a %s question of pipeline %s; "
                      "thresholds are suggested for its noul questions (%s)", set->path, c->line,
                      q->id, cq->type == CONFIG_Q_CHOICE ? "choice" : "score", pl->name, names);
    else
        tandem_errmsg(err, errlen, "%s:%zu: question %s is not a verify question of pipeline "
                      "%s (its noul verify questions: %s)", set->path, c->line, q->id, pl->name,
                      names);
    return 1;
}

/* Makes one group per noul question and one for the choice questions, with
 * room for one answer per case that has a gold answer for it. */
static int collect_groups(const struct evalset *set, const struct config_pipeline *pl,
                          struct groups *gs, char *err, size_t errlen) {
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t i = 0; i < set->cases[c].n_questions; i++) {
            const struct evalset_question *q = &set->cases[c].q[i];
            if (!q->has_gold || q->type == EVALSET_TYPE_SCORE)
                continue;
            bool noul = q->type == EVALSET_TYPE_NOUL;
            if (noul && pl && check_question(pl, set, &set->cases[c], q, err, errlen))
                return 1;
            struct group *g = group_of(gs, noul ? q->id : NULL);
            if (!g) {
                tandem_errmsg(err, errlen, "out of memory");
                return 1;
            }
            g->n++; /* counted here, filled by fill_groups() */
        }
    if (!gs->n)
        tandem_errmsg(err, errlen, "%s: no noul or choice question has a gold answer", set->path);
    return gs->n == 0;
}

static const char *group_name(const struct group *g) {
    return g->question ? g->question : "the decider's confidence (choice questions)";
}

/* Every group must hold enough answers to show the target precision. */
static int check_counts(const struct groups *gs, double target, const char *what, char *err,
                        size_t errlen) {
    size_t need = metrics_min_answers_for_precision(target), len = 0;
    char list[4096];
    for (size_t i = 0; i < gs->n && len < sizeof list; i++)
        if (gs->g[i].n < need)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s: %zu %s",
                                    len ? "; " : "", group_name(&gs->g[i]), gs->g[i].n, what);
    if (!len)
        return 0;
    tandem_errmsg(err, errlen, "too few cases for a precision of %.4g: %s; each needs at least "
                  "%zu (the fewest that, all right, show a precision of %.4g or more with 95%% "
                  "confidence)", target, list, need, target);
    return 1;
}

int cmd_eval_thresholds_check_set(const struct evalset *set, struct cmd_eval_thresholds *th,
                                  char *err, size_t errlen) {
    const struct config_pipeline *pl = NULL;
    if (th->pipeline) {
        if (config_load(th->config, &th->cfg, err, errlen) != TANDEM_OK)
            return 1;
        pl = config_find_pipeline(th->cfg, th->pipeline);
        if (!pl) {
            tandem_errmsg(err, errlen, "--write-thresholds %s: %s has no pipeline of that name",
                          th->pipeline, th->config);
            return 1;
        }
    }
    struct groups gs = {0};
    int rc = collect_groups(set, pl, &gs, err, errlen) ||
             check_counts(&gs, th->target_precision, "cases with a gold answer", err, errlen);
    groups_free(&gs);
    return rc;
}

/* --- the suggestion --------------------------------------------------------------------- */

/* The engine's confidence of a choice answer (TypeSafe's formula). */
static double choice_confidence(const double *p, size_t n) {
    if (n < 2)
        return 1;
    double u = 1.0 / (double)n, c = (p[metrics_top(p, n)] - u) / (1 - u);
    return c > 0 ? c : 0;
}

/* The first answered repeat of case c, or run->repeat when none was. */
static unsigned first_answered(const struct eval_run *run, size_t c) {
    for (unsigned r = 0; r < run->repeat; r++)
        if (eval_run_answer(run, c, r)->status == TANDEM_OK)
            return r;
    return run->repeat;
}

/* Fills the groups' answers from the run. */
static int fill_groups(const struct eval_run *run, const struct config_pipeline *pl,
                       struct groups *gs) {
    for (size_t i = 0; i < gs->n; i++) {
        struct group *g = &gs->g[i];
        const struct config_threshold *ct = g->question ? config_threshold(pl, g->question)
                                                        : NULL;
        g->below = ct && ct->op[0] == '<';
        g->a = mem_alloc_array(g->n ? g->n : 1, sizeof *g->a);
        if (!g->a)
            return 1;
        g->n = 0;
    }
    const struct evalset *set = run->set;
    for (size_t c = 0; c < set->n_cases; c++) {
        unsigned r = first_answered(run, c);
        for (size_t i = 0; r < run->repeat && i < set->cases[c].n_questions; i++) {
            const struct evalset_question *q = &set->cases[c].q[i];
            if (!q->has_gold || q->type == EVALSET_TYPE_SCORE)
                continue;
            const double *p = eval_run_dist(run, c, r, i);
            struct group *g = group_of(gs, q->type == EVALSET_TYPE_NOUL ? q->id : NULL);
            if (q->type == EVALSET_TYPE_CHOICE)
                g->a[g->n++] = (struct metrics_answer){choice_confidence(p, q->n_options),
                                                       metrics_top(p, q->n_options) == q->gold};
            else
                g->a[g->n++] = (struct metrics_answer){g->below ? -p[0] : p[0],
                                                       (q->gold == 0) != g->below};
        }
    }
    return 0;
}

/* A score as the config writes it: P(true) for noul, the confidence. */
static double shown(const struct group *g, double score) { return g->below ? -score : score; }

/* The written value of cut `cut` of sorted answers a[0..n): the shortest
 * decimal (2 to 9 places) that still accepts every answer of the cut and
 * none after it, as text into out[cap]; returns the value it reads as. */
static double written_value(const struct group *g, double cut, char *out, size_t cap) {
    double next = -INFINITY; /* the best score the cut leaves out */
    for (size_t i = 0; i < g->n; i++)
        if (g->a[i].conf < cut && g->a[i].conf > next)
            next = g->a[i].conf;
    for (int d = 2; d <= 9; d++) {
        double scale = pow(10, d), v = floor(cut * scale) / scale;
        snprintf(out, cap, "%.*f", d, shown(g, v));
        double back = shown(g, strtod(out, NULL));
        if (back > next && back <= cut)
            return strtod(out, NULL);
    }
    snprintf(out, cap, "%.17g", shown(g, cut));
    return strtod(out, NULL);
}

/* [lo, hi] of the threshold over bootstrap resamples, in the config's scale;
 * a resample that reaches the target nowhere counts as "accept nothing"
 * (JSON null). */
static json_t *threshold_interval(const struct group *g, double risk,
                                  const struct cmd_eval_scoring *sc) {
    if (!sc->bootstrap)
        return json_null();
    struct metrics_answer *scratch = mem_alloc_array(g->n, sizeof *scratch);
    double *values = mem_alloc_array(sc->bootstrap, sizeof *values), lo, hi;
    json_t *j = NULL;
    if (scratch && values &&
        metrics_bootstrap(g->a, g->n, metrics_stat_threshold, &risk, sc->seed, sc->bootstrap,
                          scratch, values, &lo, &hi)) {
        double a = shown(g, lo), b = shown(g, hi);
        j = g->below ? json_pack("[o,o]", cmd_eval_number(b), cmd_eval_number(a))
                     : json_pack("[o,o]", cmd_eval_number(a), cmd_eval_number(b));
    }
    mem_free(scratch);
    mem_free(values);
    return j ? j : json_null();
}

/* Precision and coverage of accepting the answers scored at least cut. */
static void cut_stats(const struct group *g, double cut, size_t *accepted, double *precision) {
    size_t right = 0;
    *accepted = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->a[i].conf >= cut) {
            ++*accepted;
            right += g->a[i].correct;
        }
    *precision = *accepted ? (double)right / (double)*accepted : NAN;
}

/* The most precise cut, when none reaches the target: {precision, coverage,
 * threshold}. */
static json_t *best_cut(const struct group *g) {
    size_t n_points = metrics_risk_coverage(g->a, g->n, NULL, 0);
    struct metrics_rc_point *pts = mem_alloc_array(n_points ? n_points : 1, sizeof *pts);
    if (!pts)
        return NULL;
    metrics_risk_coverage(g->a, g->n, pts, n_points);
    size_t best = 0;
    for (size_t i = 1; i < n_points; i++)
        if (pts[i].risk < pts[best].risk)
            best = i;
    json_t *j = n_points ? json_pack("{s:f,s:f,s:f}", "precision", 1 - pts[best].risk,
                                     "coverage", pts[best].coverage, "threshold",
                                     shown(g, pts[best].threshold))
                         : json_null();
    mem_free(pts);
    return j;
}

static json_t *group_json(struct group *g, double target, const struct cmd_eval_scoring *sc) {
    metrics_answers_sort(g->a, g->n);
    double risk = 1 - target, cut;
    size_t positives = 0;
    for (size_t i = 0; i < g->n; i++)
        positives += g->a[i].correct;
    metrics_coverage_at_risk(g->a, g->n, risk, &cut);
    const char *op = g->question ? (g->below ? "<=" : ">=") : NULL;
    json_t *j = json_pack("{s:o,s:s,s:o,s:I,s:I,s:o}", "question",
                          g->question ? json_string(g->question) : json_null(), "key",
                          g->question ? "thresholds" : DECIDE_GROUP, "op",
                          op ? json_string(op) : json_null(), "answers", (json_int_t)g->n,
                          "right", (json_int_t)positives, "interval",
                          threshold_interval(g, risk, sc));
    if (!j)
        return NULL;
    if (isnan(cut)) {
        json_object_set_new(j, "status", json_string("unreachable"));
        json_object_set_new(j, "best", best_cut(g));
        return j;
    }
    char text[64], value[80];
    double v = written_value(g, cut, text, sizeof text);
    size_t accepted;
    double precision;
    cut_stats(g, g->below ? -v : v, &accepted, &precision);
    if (op)
        snprintf(value, sizeof value, "%s %s", op, text);
    else
        snprintf(value, sizeof value, "%s", text);
    json_object_set_new(j, "status", json_string("ok"));
    json_object_set_new(j, "threshold", json_real(v));
    json_object_set_new(j, "value", json_string(value));
    json_object_set_new(j, "accepted", json_integer((json_int_t)accepted));
    json_object_set_new(j, "precision", cmd_eval_number(precision));
    json_object_set_new(j, "coverage", json_real((double)accepted / (double)g->n));
    return j;
}

/* The pipeline's YAML lines, or NULL when some group has no threshold
 * (*missing names the first). New string, caller frees with mem_free(). */
static char *yaml_snippet(const json_t *groups, const struct cmd_eval_thresholds *th,
                          const char *data, const char **missing) {
    struct mem_buf b;
    mem_buf_init(&b, 1u << 20);
    char line[512];
    int n = snprintf(line, sizeof line, "# tandem eval --suggest-thresholds: precision >= %.4g "
                     "on %s\npipelines:\n  %s:\n    verdict:\n", th->target_precision, data,
                     th->pipeline);
    mem_buf_append(&b, line, (size_t)n);
    size_t i;
    const json_t *g;
    bool header = false;
    *missing = NULL;
    json_array_foreach(groups, i, g) {
        const char *q = json_string_value(json_object_get(g, "question"));
        if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
            *missing = q ? q : DECIDE_GROUP;
            mem_buf_deinit(&b);
            return NULL;
        }
        const char *value = json_string_value(json_object_get(g, "value"));
        double prec = json_number_value(json_object_get(g, "precision"));
        double cov = json_number_value(json_object_get(g, "coverage"));
        if (q && !header)
            mem_buf_append(&b, THRESHOLDS_LINE, strlen(THRESHOLDS_LINE));
        header |= q != NULL;
        n = q ? snprintf(line, sizeof line, "        %s: \"%s\"  # precision %.3f, coverage "
                         "%.3f\n", q, value, prec, cov)
              : snprintf(line, sizeof line, "      min_confidence: %s  # precision %.3f, "
                         "coverage %.3f\n", value, prec, cov);
        mem_buf_append(&b, line, (size_t)n);
    }
    mem_buf_append(&b, "", 1);
    return b.data;
}

/* Orders the thresholds' groups: verify questions first, the decider last,
 * so that the YAML's thresholds block comes in one piece. */
static int by_kind(const void *x, const void *y) {
    const struct group *a = x, *b = y;
    return (a->question == NULL) - (b->question == NULL);
}

json_t *cmd_eval_thresholds_suggest(const struct eval_run *run,
                                    const struct cmd_eval_thresholds *th,
                                    const struct cmd_eval_scoring *sc, char *err, size_t errlen) {
    const struct config_pipeline *pl = th->cfg ? config_find_pipeline(th->cfg, th->pipeline)
                                               : NULL;
    struct groups gs = {0};
    json_t *out = NULL, *list = json_array();
    if (!list || collect_groups(run->set, pl, &gs, err, errlen))
        goto done;
    if (fill_groups(run, pl, &gs)) {
        tandem_errmsg(err, errlen, "out of memory");
        goto done;
    }
    if (check_counts(&gs, th->target_precision, "answered cases", err, errlen))
        goto done;
    qsort(gs.g, gs.n, sizeof *gs.g, by_kind);
    for (size_t i = 0; i < gs.n; i++)
        json_array_append_new(list, group_json(&gs.g[i], th->target_precision, sc));
    out = json_pack("{s:f,s:I,s:I,s:I,s:O}", "target_precision", th->target_precision,
                    "min_answers", (json_int_t)metrics_min_answers_for_precision(
                                       th->target_precision),
                    "resamples", (json_int_t)sc->bootstrap, "seed", (json_int_t)sc->seed,
                    "questions", list);
    if (out && th->pipeline) {
        const char *missing;
        char *yaml = yaml_snippet(list, th, run->set->path, &missing);
        json_object_set_new(out, "pipeline", json_string(th->pipeline));
        json_object_set_new(out, "yaml", yaml ? json_string(yaml) : json_null());
        mem_free(yaml);
    }
    if (!out)
        tandem_errmsg(err, errlen, "out of memory");
done:
    json_decref(list);
    groups_free(&gs);
    return out;
}

/* --- the output ------------------------------------------------------------------------- */

static void print_interval(const json_t *iv) {
    const json_t *lo = json_array_get(iv, 0), *hi = json_array_get(iv, 1);
    if (!json_is_array(iv))
        return;
    printf("  [");
    json_is_number(lo) ? printf("%.4f", json_number_value(lo)) : printf("none");
    printf(", ");
    json_is_number(hi) ? printf("%.4f", json_number_value(hi)) : printf("none");
    printf("]");
}

void cmd_eval_thresholds_print(const json_t *t) {
    if (!t)
        return;
    printf("\nthresholds for a precision of %.4g (each needs >= %lld answers; 95%% interval of "
           "the threshold from %lld resamples):\n",
           json_number_value(json_object_get(t, "target_precision")),
           (long long)json_integer_value(json_object_get(t, "min_answers")),
           (long long)json_integer_value(json_object_get(t, "resamples")));
    size_t i;
    const json_t *g;
    json_array_foreach(json_object_get(t, "questions"), i, g) {
        const char *q = json_string_value(json_object_get(g, "question"));
        printf("  %-22s %4lld answers: ", q ? q : "decide confidence",
               (long long)json_integer_value(json_object_get(g, "answers")));
        const json_t *best = json_object_get(g, "best");
        if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
            printf("no threshold reaches it");
            if (json_is_object(best))
                printf(" (the best, %.3f, at %.4f with coverage %.3f)",
                       json_number_value(json_object_get(best, "precision")),
                       json_number_value(json_object_get(best, "threshold")),
                       json_number_value(json_object_get(best, "coverage")));
            printf("\n");
            continue;
        }
        printf("%s%s: precision %.3f, coverage %.3f (%lld accepted)", q ? "" : "min_confidence ",
               json_string_value(json_object_get(g, "value")),
               json_number_value(json_object_get(g, "precision")),
               json_number_value(json_object_get(g, "coverage")),
               (long long)json_integer_value(json_object_get(g, "accepted")));
        print_interval(json_object_get(g, "interval"));
        printf("\n");
    }
}

/* The config values of the groups, as config_edit takes them; texts in buf. */
static size_t edit_values(const json_t *groups, struct config_edit_value *v, char (*buf)[96],
                          size_t cap) {
    size_t i, n = 0;
    const json_t *g;
    json_array_foreach(groups, i, g) {
        if (n == cap)
            break;
        const char *q = json_string_value(json_object_get(g, "question"));
        const char *value = json_string_value(json_object_get(g, "value"));
        snprintf(buf[n], sizeof buf[n], q ? "\"%s\"" : "%s", value);
        v[n] = (struct config_edit_value){q ? "thresholds" : NULL, q ? q : DECIDE_GROUP, buf[n]};
        n++;
    }
    return n;
}

/* Rewrites th->apply with the groups' values, after saving it as .bak. */
static int apply(const json_t *groups, const struct cmd_eval_thresholds *th) {
    enum { MAX_VALUES = 256 };
    struct config_edit_value v[MAX_VALUES];
    static char texts[MAX_VALUES][96];
    char err[4096], bak[4096];
    struct mem_buf b;
    mem_buf_init(&b, 16u << 20);
    char *out = NULL;
    size_t len = 0, n = edit_values(groups, v, texts, MAX_VALUES);
    struct config *check = NULL;
    int rc = 1;
    if (mem_buf_append_file(&b, th->apply) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply %s: cannot read: %s\n", th->apply, strerror(errno));
    else if (config_edit_verdict(th->apply, b.data, b.len, th->pipeline, v, n, &out, &len, err,
                                 sizeof err) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: %s\n", err);
    else if (config_load_buffer(th->apply, out, len, &check, err, sizeof err) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: the rewritten file would not load, so %s is "
                        "left as it was: %s\n", th->apply, err);
    else if (snprintf(bak, sizeof bak, "%s.bak", th->apply) >= (int)sizeof bak ||
             host_write_atomic(bak, b.data, b.len) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: cannot write %s: %s\n", bak, strerror(errno));
    else if (host_write_atomic(th->apply, out, len) != TANDEM_OK)
        fprintf(stderr, "tandem eval: --apply: cannot write %s: %s\n", th->apply,
                strerror(errno));
    else
        rc = 0;
    if (!rc)
        fprintf(stderr, "tandem eval: applied %zu value%s to pipeline %s in %s (the old file "
                        "is %s)\n", n, n == 1 ? "" : "s", th->pipeline, th->apply, bak);
    config_free(check);
    mem_free(out);
    mem_buf_deinit(&b);
    return rc;
}

int cmd_eval_thresholds_write(const json_t *t, const struct cmd_eval_thresholds *th,
                              bool as_json) {
    const json_t *groups = json_object_get(t, "questions");
    const char *yaml = json_string_value(json_object_get(t, "yaml"));
    if (!yaml) {
        size_t i;
        const json_t *g;
        json_array_foreach(groups, i, g)
            if (strcmp(json_string_value(json_object_get(g, "status")), "ok")) {
                const char *q = json_string_value(json_object_get(g, "question"));
                fprintf(stderr, "tandem eval: --write-thresholds %s: %s: no threshold reaches "
                        "a precision of %.4g on this data; nothing written (lower "
                        "--target-precision, or add cases)\n", th->pipeline,
                        q ? q : DECIDE_GROUP, th->target_precision);
                break;
            }
        return 1;
    }
    if (!as_json)
        printf("\n%s", yaml);
    return th->apply ? apply(groups, th) : 0;
}
