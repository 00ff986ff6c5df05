/* thresholds.c: thresholds chosen from data.
 *
 * Every threshold is a cut of selective prediction (metrics.h): the answers
 * sorted by a score, accepted from the top down to the cut. A noul verify
 * question's score is P(true) (accepted when at least the threshold); when
 * its threshold is "<=" or "<" (params' below), the score is -P(true), so
 * the same code accepts from the bottom. The decider's score is the engine's
 * confidence of each choice answer, (p_max - 1/n) / (1 - 1/n), which is what
 * min_confidence compares. Precision is the share of accepted answers that
 * are right (noul: gold true, or false for "<="; choice: the top answer is
 * gold), and the suggestion is the largest cut whose precision reaches the
 * target, i.e. metrics_coverage_at_risk at risk 1 - target. Only each case's
 * first answered repeat counts: repeats of one case are not new evidence.
 * The written value is the shortest decimal that accepts exactly the
 * answers of the cut, so the config does on the data what the report says. */
#include "eval/thresholds.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "proto/metrics.h"
#include "eval/summary.h"

/* --- the groups ------------------------------------------------------------------------ */

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

/* Whether noul question id's threshold accepts from below. */
static bool accepts_below(const struct thresholds_params *p, const char *id) {
    for (size_t i = 0; p->below && i < p->n_below; i++)
        if (!strcmp(p->below[i], id))
            return true;
    return false;
}

/* Makes one group per noul question and one for the choice questions, with
 * room for one answer per case that has a gold answer for it. */
static tandem_err collect_groups(const struct evalset *set, struct groups *gs, char *err,
                                 size_t errlen) {
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t i = 0; i < set->cases[c].n_questions; i++) {
            const struct evalset_question *q = &set->cases[c].q[i];
            if (!q->has_gold || q->type == S1Q_TYPE_SCORE)
                continue;
            struct group *g = group_of(gs, q->type == S1Q_TYPE_NOUL ? q->id : NULL);
            if (!g) {
                tandem_errmsg(err, errlen, "out of memory");
                return TANDEM_ERR_NOMEM;
            }
            g->n++; /* counted here, filled by fill_groups() */
        }
    if (gs->n)
        return TANDEM_OK;
    tandem_errmsg(err, errlen, "%s: no noul or choice question has a gold answer", set->path);
    return TANDEM_ERR_INVAL;
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

struct thresholds_params thresholds_default_params(void) {
    return (struct thresholds_params){.target_precision = 0.95, .bootstrap = 1000, .seed = 1};
}

tandem_err thresholds_check_set(const struct evalset *set, double target_precision, char *err,
                                size_t errlen) {
    struct groups gs = {0};
    tandem_err e = collect_groups(set, &gs, err, errlen);
    if (e == TANDEM_OK &&
        check_counts(&gs, target_precision, "cases with a gold answer", err, errlen))
        e = TANDEM_ERR_INVAL;
    groups_free(&gs);
    return e;
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
static int fill_groups(const struct eval_run *run, const struct thresholds_params *p,
                       struct groups *gs) {
    for (size_t i = 0; i < gs->n; i++) {
        struct group *g = &gs->g[i];
        g->below = g->question && accepts_below(p, g->question);
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
            if (!q->has_gold || q->type == S1Q_TYPE_SCORE)
                continue;
            const double *d = eval_run_dist(run, c, r, i);
            struct group *g = group_of(gs, q->type == S1Q_TYPE_NOUL ? q->id : NULL);
            if (q->type == S1Q_TYPE_CHOICE)
                g->a[g->n++] = (struct metrics_answer){choice_confidence(d, q->n_options),
                                                       metrics_top(d, q->n_options) == q->gold};
            else
                g->a[g->n++] = (struct metrics_answer){g->below ? -d[0] : d[0],
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
                                  const struct thresholds_params *p) {
    if (!p->bootstrap)
        return json_null();
    struct metrics_answer *scratch = mem_alloc_array(g->n, sizeof *scratch);
    double *values = mem_alloc_array(p->bootstrap, sizeof *values), lo, hi;
    json_t *j = NULL;
    if (scratch && values &&
        metrics_bootstrap(g->a, g->n, metrics_stat_threshold, &risk, p->seed, p->bootstrap,
                          scratch, values, &lo, &hi)) {
        double a = shown(g, lo), b = shown(g, hi);
        j = g->below ? json_pack("[o,o]", summary_number(b), summary_number(a))
                     : json_pack("[o,o]", summary_number(a), summary_number(b));
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

static json_t *group_json(struct group *g, const struct thresholds_params *p) {
    metrics_answers_sort(g->a, g->n);
    double risk = 1 - p->target_precision, cut;
    size_t positives = 0;
    for (size_t i = 0; i < g->n; i++)
        positives += g->a[i].correct;
    metrics_coverage_at_risk(g->a, g->n, risk, &cut);
    const char *op = g->question ? (g->below ? "<=" : ">=") : NULL;
    json_t *j = json_pack("{s:o,s:s,s:o,s:I,s:I,s:o}", "question",
                          g->question ? json_string(g->question) : json_null(), "key",
                          g->question ? "thresholds" : THRESHOLDS_DECIDER_KEY, "op",
                          op ? json_string(op) : json_null(), "answers", (json_int_t)g->n,
                          "right", (json_int_t)positives, "interval",
                          threshold_interval(g, risk, p));
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
    json_object_set_new(j, "precision", summary_number(precision));
    json_object_set_new(j, "coverage", json_real((double)accepted / (double)g->n));
    return j;
}

/* Orders the thresholds' groups: verify questions first, the decider last,
 * so that the YAML's thresholds block comes in one piece. */
static int by_kind(const void *x, const void *y) {
    const struct group *a = x, *b = y;
    return (a->question == NULL) - (b->question == NULL);
}

json_t *thresholds_suggest(const struct eval_run *run, const struct thresholds_params *p,
                           char *err, size_t errlen) {
    struct groups gs = {0};
    json_t *out = NULL, *list = json_array();
    if (!list || collect_groups(run->set, &gs, err, errlen) != TANDEM_OK)
        goto done;
    if (fill_groups(run, p, &gs)) {
        tandem_errmsg(err, errlen, "out of memory");
        goto done;
    }
    if (check_counts(&gs, p->target_precision, "answered cases", err, errlen))
        goto done;
    qsort(gs.g, gs.n, sizeof *gs.g, by_kind);
    for (size_t i = 0; i < gs.n; i++)
        json_array_append_new(list, group_json(&gs.g[i], p));
    out = json_pack("{s:f,s:I,s:I,s:I,s:O}", "target_precision", p->target_precision,
                    "min_answers", (json_int_t)metrics_min_answers_for_precision(
                                       p->target_precision),
                    "resamples", (json_int_t)p->bootstrap, "seed", (json_int_t)p->seed,
                    "questions", list);
    if (!out)
        tandem_errmsg(err, errlen, "out of memory");
done:
    json_decref(list);
    groups_free(&gs);
    return out;
}
