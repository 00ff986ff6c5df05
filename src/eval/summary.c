/* summary.c: scoring a finished run, the `tandem eval --json` object.
 *
 * One pass over the cases fills the metric groups (metrics.h; overall and
 * one per question type), the list of scored answers that selective
 * prediction and the bootstrap resample, each question's stability over the
 * repeats, and the per-question results and per-request errors. Scoring
 * counts every successful repeat as one answer; stability compares each
 * question's repeats with exact equality of the returned probabilities (the
 * verdict "deterministic" allows no difference at all). A failed request is
 * never scored: it is listed under "errors". */
#include "eval/summary.h"

#include <math.h>
#include <stdbool.h>

#include "base/mem.h"
#include "proto/metrics.h"

const char *const summary_group_names[SUMMARY_N_GROUPS] = {"overall", "choice", "score", "noul"};

json_t *summary_number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

json_t *summary_answer_json(const struct evalset_question *q, size_t i) {
    switch (q->type) {
    case S1Q_TYPE_CHOICE: return json_string(q->options[i]);
    case S1Q_TYPE_SCORE: return json_integer((json_int_t)i);
    case S1Q_TYPE_NOUL: return json_boolean(i == 0);
    }
    return json_null();
}

static json_t *group_json(const struct metrics_summary *s) {
    struct metrics_result r = metrics_summary_result(s);
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "n", (json_int_t)s->n, "accuracy",
                     summary_number(r.accuracy), "brier", summary_number(r.brier), "nll",
                     summary_number(r.nll), "ece", summary_number(r.ece), "low_confidence_rate",
                     summary_number(r.low_conf_rate), "mean_confidence",
                     summary_number(r.mean_conf), "mae", summary_number(r.mae));
}

static json_t *reliability_json(const struct metrics_calib *c) {
    json_t *bins = json_array();
    for (size_t b = 0; bins && b < METRICS_ECE_BINS; b++) {
        double n = (double)c->n[b];
        json_array_append_new(
            bins, json_pack("{s:f,s:f,s:I,s:o,s:o}", "lo", (double)b / METRICS_ECE_BINS, "hi",
                            (double)(b + 1) / METRICS_ECE_BINS, "n", (json_int_t)c->n[b],
                            "confidence", summary_number(c->n[b] ? c->conf_sum[b] / n : NAN),
                            "accuracy", summary_number(c->n[b] ? c->correct[b] / n : NAN)));
    }
    return bins;
}

/* The scored answers of the run, every repeat, as selective prediction sees
 * them: the top-answer confidence and whether it was right. */
struct answers {
    struct metrics_answer *a;
    size_t n;
};

static void answers_add(struct answers *as, const double *p, size_t n, size_t gold) {
    size_t top = metrics_top(p, n);
    as->a[as->n++] = (struct metrics_answer){n ? p[top] : 0, top == gold};
}

static json_t *interval_json(const struct answers *as, metrics_stat_fn stat, void *arg,
                             const struct summary_scoring *sc, struct metrics_answer *scratch,
                             double *values) {
    double lo, hi;
    if (!metrics_bootstrap(as->a, as->n, stat, arg, sc->seed, sc->bootstrap, scratch, values,
                           &lo, &hi))
        return json_null();
    return json_pack("[o,o]", summary_number(lo), summary_number(hi));
}

/* Bootstrap 95% intervals of accuracy, ECE and the coverage at the target
 * risk; null without --bootstrap or answers. */
static json_t *intervals_json(const struct answers *as, const struct summary_scoring *sc) {
    if (!sc->bootstrap || !as->n)
        return json_null();
    struct metrics_answer *scratch = mem_alloc_array(as->n, sizeof *scratch);
    double *values = mem_alloc_array(sc->bootstrap, sizeof *values);
    double risk = sc->target_risk;
    json_t *j = NULL;
    if (scratch && values)
        j = json_pack("{s:I,s:I,s:o,s:o,s:o}", "resamples", (json_int_t)sc->bootstrap, "seed",
                      (json_int_t)sc->seed, "accuracy",
                      interval_json(as, metrics_stat_accuracy, NULL, sc, scratch, values), "ece",
                      interval_json(as, metrics_stat_ece, NULL, sc, scratch, values),
                      "coverage_at_target_risk",
                      interval_json(as, metrics_stat_coverage, &risk, sc, scratch, values));
    mem_free(scratch);
    mem_free(values);
    return j;
}

/* Selective prediction over every scored answer (sorted here): AURC, the
 * coverage at the target risk with its threshold, and the curve. */
static json_t *selective_json(struct answers *as, const struct summary_scoring *sc) {
    metrics_answers_sort(as->a, as->n);
    size_t n_points = metrics_risk_coverage(as->a, as->n, NULL, 0);
    struct metrics_rc_point *pts = mem_alloc_array(n_points ? n_points : 1, sizeof *pts);
    if (!pts)
        return NULL;
    metrics_risk_coverage(as->a, as->n, pts, n_points);
    json_t *curve = json_array();
    for (size_t i = 0; curve && i < n_points; i++)
        json_array_append_new(curve, json_pack("{s:f,s:f,s:f}", "coverage", pts[i].coverage,
                                               "risk", pts[i].risk, "threshold",
                                               pts[i].threshold));
    mem_free(pts);
    double threshold, coverage = metrics_coverage_at_risk(as->a, as->n, sc->target_risk,
                                                          &threshold);
    return json_pack("{s:f,s:o,s:f,s:o,s:o}", "target_risk", sc->target_risk, "aurc",
                     summary_number(metrics_aurc(as->a, as->n)), "coverage_at_target_risk",
                     coverage, "threshold", summary_number(threshold), "curve", curve);
}

/* Stability of one question over the run's repeats. */
struct stab {
    unsigned ok;        /* repeats answered */
    double max_dp;      /* max over options of (max - min) across repeats */
    unsigned flips;     /* answered repeats whose top answer differs from the first's */
    int identical;      /* every answered repeat has exactly the same distribution */
    size_t first_top;   /* top answer of the first answered repeat */
    unsigned first_r;   /* that repeat */
};

static struct stab stability_of(const struct eval_run *run, size_t c, size_t q) {
    struct stab st = {.identical = 1};
    size_t n = run->set->cases[c].q[q].n_options;
    const double *first = NULL;
    for (unsigned r = 0; r < run->repeat; r++) {
        const double *p = eval_run_dist(run, c, r, q);
        if (!p)
            continue;
        st.ok++;
        if (!first) {
            first = p;
            st.first_top = metrics_top(p, n);
            st.first_r = r;
            continue;
        }
        if (metrics_top(p, n) != st.first_top)
            st.flips++;
        for (size_t i = 0; i < n; i++)
            if (p[i] != first[i])
                st.identical = 0;
    }
    for (size_t i = 0; i < n && st.ok > 1; i++) {
        double lo = INFINITY, hi = -INFINITY;
        for (unsigned r = 0; r < run->repeat; r++) {
            const double *p = eval_run_dist(run, c, r, q);
            if (p) {
                lo = p[i] < lo ? p[i] : lo;
                hi = p[i] > hi ? p[i] : hi;
            }
        }
        if (hi - lo > st.max_dp)
            st.max_dp = hi - lo;
    }
    return st;
}

/* {"answer": count, ...} of the top answers over the repeats of question q. */
static json_t *top_counts(const struct eval_run *run, size_t c, size_t q) {
    const struct evalset_question *qq = &run->set->cases[c].q[q];
    unsigned counts[S1Q_MAX_CHOICE_OPTIONS] = {0};
    for (unsigned r = 0; r < run->repeat; r++) {
        const double *p = eval_run_dist(run, c, r, q);
        if (p)
            counts[metrics_top(p, qq->n_options)]++;
    }
    json_t *o = json_object();
    for (size_t i = 0; o && i < qq->n_options; i++)
        if (counts[i])
            json_object_set_new(o, qq->options[i], json_integer(counts[i]));
    return o;
}

/* What one pass over the run gathers: the metric groups, the scored answers
 * of selective prediction, the stability tallies and the JSON lists. */
struct pass {
    const struct eval_run *run;
    double low;                                   /* the low-confidence threshold */
    struct metrics_summary groups[SUMMARY_N_GROUPS];
    struct answers as;
    json_t *results, *unstable, *errors;
    double max_dp;
    size_t q_flipped, flips, q_identical, q_measured, answered_cases;
    int any_difference;
};

/* Scores every answered repeat of question q of case c, when it has gold. */
static void score_question(struct pass *ps, size_t c, size_t q) {
    const struct evalset_question *qq = &ps->run->set->cases[c].q[q];
    size_t grp = 1 + (size_t)qq->type;
    bool is_score = qq->type == S1Q_TYPE_SCORE;
    for (unsigned r = 0; qq->has_gold && r < ps->run->repeat; r++) {
        const double *p = eval_run_dist(ps->run, c, r, q);
        if (!p)
            continue;
        metrics_summary_add(&ps->groups[0], p, qq->target, qq->n_options, qq->gold, is_score,
                            ps->low);
        metrics_summary_add(&ps->groups[grp], p, qq->target, qq->n_options, qq->gold, is_score,
                            ps->low);
        answers_add(&ps->as, p, qq->n_options, qq->gold);
    }
}

/* The "results" item of question q of case c: its first answered repeat
 * against the gold answer, and its stability st. */
static json_t *result_json(const struct eval_run *run, size_t c, size_t q,
                           const struct stab *st) {
    const struct evalset_case *cs = &run->set->cases[c];
    const struct evalset_question *qq = &cs->q[q];
    json_t *item = json_pack("{s:s,s:s,s:s}", "case", cs->id, "question", qq->id, "type",
                             s1q_type_name(qq->type));
    json_object_set_new(item, "gold",
                        qq->has_gold ? summary_answer_json(qq, qq->gold) : json_null());
    const double *p = st->ok ? eval_run_dist(run, c, st->first_r, q) : NULL;
    if (p) {
        json_object_set_new(item, "answer", summary_answer_json(qq, st->first_top));
        json_object_set_new(item, "p", json_real(p[st->first_top]));
        json_object_set_new(item, "correct", qq->has_gold
                                                 ? json_boolean(st->first_top == qq->gold)
                                                 : json_null());
        json_object_set_new(
            item, "brier",
            qq->has_gold ? json_real(metrics_brier(p, qq->target, qq->n_options, qq->gold))
                         : json_null());
    } else {
        json_object_set_new(item, "answer", json_null());
        json_object_set_new(item, "p", json_null());
        json_object_set_new(item, "correct", json_null());
        json_object_set_new(item, "brier", json_null());
    }
    json_object_set_new(item, "answered", json_integer(st->ok));
    json_object_set_new(item, "max_dp", json_real(st->max_dp));
    json_object_set_new(item, "flips", json_integer(st->flips));
    return item;
}

/* Scores question q of case c, tallies its stability and lists its result
 * (and, when its repeats differ, its top answers). */
static void add_question(struct pass *ps, size_t c, size_t q) {
    const struct evalset_case *cs = &ps->run->set->cases[c];
    score_question(ps, c, q);
    struct stab st = stability_of(ps->run, c, q);
    if (st.ok > 1) {
        ps->q_measured++;
        ps->q_identical += st.identical;
        ps->any_difference |= !st.identical;
    }
    if (st.max_dp > ps->max_dp)
        ps->max_dp = st.max_dp;
    ps->flips += st.flips;
    ps->q_flipped += st.flips > 0;
    json_array_append_new(ps->results, result_json(ps->run, c, q, &st));
    if (st.ok > 1 && !st.identical)
        json_array_append_new(
            ps->unstable, json_pack("{s:s,s:s,s:f,s:I,s:o}", "case", cs->id, "question",
                                    cs->q[q].id, "max_dp", st.max_dp, "flips",
                                    (json_int_t)st.flips, "answers", top_counts(ps->run, c, q)));
}

/* Lists the failed requests of case c, repeat by repeat. */
static void add_errors(struct pass *ps, size_t c) {
    const struct evalset_case *cs = &ps->run->set->cases[c];
    for (unsigned r = 0; r < ps->run->repeat; r++) {
        const struct eval_answer *a = eval_run_answer(ps->run, c, r);
        if (a->status == TANDEM_OK)
            continue;
        json_array_append_new(
            ps->errors, json_pack("{s:s,s:I,s:I,s:I,s:s}", "case", cs->id, "line",
                                  (json_int_t)cs->line, "repeat", (json_int_t)r + 1,
                                  "http_status", (json_int_t)a->http_status, "error",
                                  a->error ? a->error : tandem_strerror(a->status)));
    }
}

/* The "stability" object; takes ps->unstable. */
static json_t *stability_json(struct pass *ps) {
    const struct eval_run *run = ps->run;
    const char *verdict = run->repeat < 2      ? "not measured"
                          : ps->any_difference ? "nondeterministic"
                          : run->n_errors      ? "incomplete"
                                               : "deterministic";
    return json_pack("{s:I,s:s,s:I,s:I,s:f,s:I,s:I,s:o}", "repeat", (json_int_t)run->repeat,
                     "verdict", verdict, "questions_measured", (json_int_t)ps->q_measured,
                     "questions_identical", (json_int_t)ps->q_identical, "max_dp", ps->max_dp,
                     "questions_with_flips", (json_int_t)ps->q_flipped, "flips",
                     (json_int_t)ps->flips, "unstable", ps->unstable);
}

/* The summary's top-level facts: the run, the set and the request counts. */
static json_t *facts_json(const struct pass *ps, const char *model, unsigned concurrency) {
    const struct eval_run *run = ps->run;
    const struct evalset *set = run->set;
    size_t total = (size_t)run->repeat * set->n_cases;
    return json_pack(
        "{s:s,s:s,s:o,s:s,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:{s:I,s:I,s:I,s:I}}", "format",
        "tandem-eval/1", "endpoint", run->url, "model", model ? json_string(model) : json_null(),
        "data", set->path, "cases", (json_int_t)set->n_cases, "questions",
        (json_int_t)set->n_questions, "scored_questions", (json_int_t)set->n_gold, "repeat",
        (json_int_t)run->repeat, "concurrency", (json_int_t)concurrency,
        "low_confidence_threshold", ps->low, "seconds", run->seconds, "requests", "total",
        (json_int_t)total, "ok", (json_int_t)(total - run->n_errors), "errors",
        (json_int_t)run->n_errors, "cases_answered", (json_int_t)ps->answered_cases);
}

json_t *summary_build(const struct eval_run *run, const char *model,
                      const struct summary_scoring *sc, unsigned concurrency) {
    const struct evalset *set = run->set;
    struct pass ps = {.run = run, .low = sc->low};
    ps.as.a = mem_alloc_array(set->n_gold ? (size_t)set->n_gold * run->repeat : 1,
                              sizeof *ps.as.a);
    if (!ps.as.a)
        return NULL;
    for (size_t g = 0; g < SUMMARY_N_GROUPS; g++)
        metrics_summary_init(&ps.groups[g]);
    ps.results = json_array(), ps.unstable = json_array(), ps.errors = json_array();
    for (size_t c = 0; c < set->n_cases; c++) {
        unsigned ok_repeats = 0;
        for (unsigned r = 0; r < run->repeat; r++)
            ok_repeats += eval_run_answer(run, c, r)->status == TANDEM_OK;
        ps.answered_cases += ok_repeats > 0;
        for (size_t q = 0; q < set->cases[c].n_questions; q++)
            add_question(&ps, c, q);
        add_errors(&ps, c);
    }
    json_t *metrics = json_object();
    for (size_t g = 0; metrics && g < SUMMARY_N_GROUPS; g++)
        json_object_set_new(metrics, summary_group_names[g], group_json(&ps.groups[g]));
    json_t *out = facts_json(&ps, model, concurrency);
    if (!out || !metrics || !ps.results || !ps.unstable || !ps.errors) {
        mem_free(ps.as.a);
        json_decref(out);
        json_decref(metrics);
        json_decref(ps.results);
        json_decref(ps.unstable);
        json_decref(ps.errors);
        return NULL;
    }
    json_object_set_new(out, "metrics", metrics);
    json_object_set_new(out, "intervals", intervals_json(&ps.as, sc));
    json_object_set_new(out, "selective", selective_json(&ps.as, sc));
    mem_free(ps.as.a);
    json_object_set_new(out, "reliability", reliability_json(&ps.groups[0].calib));
    json_object_set_new(out, "stability", stability_json(&ps));
    json_object_set_new(out, "errors", ps.errors);
    json_object_set_new(out, "results", ps.results);
    return out;
}
