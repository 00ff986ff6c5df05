/* drift.c: two runs of one dataset compared question by question.
 *
 * Each question answered by both sides is compared: KL(ref || cand) in nats
 * (metrics_kl: candidate probabilities below 1e-12 are raised to it), max
 * |dp| over the options, and whether the top answers agree. A question
 * either side failed on is counted as skipped, never compared. Beside the
 * raw flip rate, the flips among "sure" answers (the reference's top-two
 * margin at least the options' margin) are counted: a near-tie flips on
 * rounding alone. Rates carry Wilson 95% intervals. The comparison fills one
 * aggregate overall and one per question type from the same items, so the
 * rows always add up. */
#include "eval/drift.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/mem.h"
#include "proto/metrics.h"
#include "eval/summary.h"

struct item {
    size_t c, q;
    unsigned flipped;   /* repeats whose top answer differed from the reference's */
    double kl, max_dp;  /* KL averaged over the repeats; max |dp| over them */
    bool agree;         /* flipped in at most half the repeats */
    bool sure;          /* the reference's margin reached the threshold */
};

static int worst_first(const void *a, const void *b) {
    const struct item *x = a, *y = b;
    if (x->kl != y->kl)
        return x->kl < y->kl ? 1 : -1;
    if (x->max_dp != y->max_dp)
        return x->max_dp < y->max_dp ? 1 : -1;
    return x->c != y->c ? (x->c < y->c ? -1 : 1) : (x->q < y->q ? -1 : x->q > y->q);
}

struct agg {
    size_t n, flips, sure, sure_flips, unstable;
    double kl_sum, kl_max, dp_sum, dp_max;
};

static void agg_add(struct agg *a, const struct item *it) {
    a->n++;
    a->flips += !it->agree;
    a->sure += it->sure;
    a->sure_flips += it->sure && !it->agree;
    a->unstable += it->agree && it->flipped;
    a->kl_sum += it->kl;
    a->dp_sum += it->max_dp;
    if (it->kl > a->kl_max)
        a->kl_max = it->kl;
    if (it->max_dp > a->dp_max)
        a->dp_max = it->max_dp;
}

/* [lo, hi]: the Wilson 95% interval of k in n, or null when n is 0. */
static json_t *interval_json(size_t k, size_t n) {
    double lo, hi;
    metrics_wilson(k, n, &lo, &hi);
    return n ? json_pack("[f,f]", lo, hi) : json_null();
}

static json_t *rate_json(size_t k, size_t n) {
    return summary_number(n ? (double)k / (double)n : NAN);
}

static json_t *agg_json(const struct agg *a) {
    double n = (double)a->n;
    return json_pack("{s:I,s:I,s:o,s:o,s:I,s:I,s:o,s:o,s:I,s:o,s:o,s:o,s:o}", "compared",
                     (json_int_t)a->n, "flips", (json_int_t)a->flips, "flip_rate",
                     rate_json(a->flips, a->n), "flip_ci95", interval_json(a->flips, a->n),
                     "sure_compared", (json_int_t)a->sure, "sure_flips", (json_int_t)a->sure_flips,
                     "sure_flip_rate", rate_json(a->sure_flips, a->sure), "sure_ci95",
                     interval_json(a->sure_flips, a->sure), "unstable", (json_int_t)a->unstable,
                     "kl_mean",
                     summary_number(a->n ? a->kl_sum / n : NAN), "kl_max",
                     summary_number(a->n ? a->kl_max : NAN), "max_dp_mean",
                     summary_number(a->n ? a->dp_sum / n : NAN), "max_dp_max",
                     summary_number(a->n ? a->dp_max : NAN));
}

static json_t *item_json(const struct eval_run *ref, const struct eval_run *cand,
                         const struct item *it) {
    const struct evalset_case *cs = &ref->set->cases[it->c];
    const struct evalset_question *q = &cs->q[it->q];
    const double *p = eval_run_dist(ref, it->c, 0, it->q);
    const double *r = eval_run_dist(cand, it->c, 0, it->q);
    size_t tp = metrics_top(p, q->n_options), tr = metrics_top(r, q->n_options);
    json_t *j = json_pack("{s:s,s:s,s:s,s:f,s:f,s:b,s:b,s:o,s:f,s:o,s:f}", "case", cs->id,
                          "question", q->id, "type", s1q_type_name(q->type), "kl", it->kl,
                          "max_dp", it->max_dp, "agree", it->agree, "sure", it->sure,
                          "ref_answer", summary_answer_json(q, tp), "ref_p", p[tp],
                          "cand_answer", summary_answer_json(q, tr), "cand_p", r[tr]);
    if (j && cand->repeat > 1)
        json_object_set_new(j, "flipped_repeats", json_integer(it->flipped));
    return j;
}

/* Compares question q of case c: the reference's repeat 0 against run's
 * repeats from..repeat-1. False when a request of either failed. */
static bool compare_one(const struct eval_run *ref, const struct eval_run *run, unsigned from,
                        size_t c, size_t q, double margin, struct item *it) {
    const double *p = eval_run_dist(ref, c, 0, q);
    size_t n = ref->set->cases[c].q[q].n_options;
    if (!p || from >= run->repeat)
        return false;
    *it = (struct item){.c = c, .q = q, .sure = metrics_margin(p, n) >= margin};
    for (unsigned r = from; r < run->repeat; r++) {
        const double *d = eval_run_dist(run, c, r, q);
        if (!d)
            return false;
        it->kl += metrics_kl(p, d, n) / (run->repeat - from);
        it->max_dp = fmax(it->max_dp, metrics_max_abs_diff(p, d, n));
        it->flipped += metrics_top(p, n) != metrics_top(d, n);
    }
    it->agree = 2 * it->flipped <= run->repeat - from;
    return true;
}

/* The reference against itself: its repeats 1.. against its repeat 0, the
 * noise a candidate's flips are to be told from. */
static json_t *noise_json(const struct eval_run *ref, double margin) {
    struct agg a = {0};
    struct item it;
    for (size_t c = 0; c < ref->set->n_cases; c++)
        for (size_t q = 0; q < ref->set->cases[c].n_questions; q++)
            if (compare_one(ref, ref, 1, c, q, margin, &it))
                agg_add(&a, &it);
    return agg_json(&a);
}

/* The side's facts: endpoint, model, failed requests and accuracy on the gold questions. */
static json_t *side_json(const struct eval_run *run, const char *model) {
    size_t n = 0, correct = 0;
    const struct evalset *set = run->set;
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            const struct evalset_question *qq = &set->cases[c].q[q];
            const double *p = eval_run_dist(run, c, 0, q);
            if (!qq->has_gold || !p)
                continue;
            n++;
            correct += metrics_top(p, qq->n_options) == qq->gold;
        }
    return json_pack("{s:s,s:o,s:I,s:I,s:o,s:f}", "endpoint", run->url, "model",
                     model ? json_string(model) : json_null(), "errors",
                     (json_int_t)run->n_errors, "scored", (json_int_t)n, "accuracy",
                     summary_number(n ? (double)correct / (double)n : NAN), "seconds",
                     run->seconds);
}

static json_t *errors_json(const struct eval_run *run, const char *side) {
    json_t *a = json_array();
    for (size_t c = 0; a && c < run->set->n_cases; c++) {
        const struct eval_answer *ans = eval_run_answer(run, c, 0);
        if (ans->status == TANDEM_OK)
            continue;
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:I,s:I,s:s}", "side", side, "case", run->set->cases[c].id,
                         "line", (json_int_t)run->set->cases[c].line, "http_status",
                         (json_int_t)ans->http_status, "error",
                         ans->error ? ans->error : tandem_strerror(ans->status)));
    }
    return a;
}

struct drift_options drift_default_options(void) {
    return (struct drift_options){.top = DRIFT_DEFAULT_TOP, .margin = DRIFT_DEFAULT_MARGIN};
}

json_t *drift_compare(const struct eval_run *ref, const char *ref_model,
                      const struct eval_run *cand, const char *cand_model,
                      const struct drift_options *o) {
    const struct evalset *set = ref->set;
    struct item *items = mem_alloc_array(set->n_questions ? set->n_questions : 1, sizeof *items);
    if (!items)
        return NULL;
    size_t n = 0, skipped = 0;
    struct agg all = {0}, by_type[S1Q_TYPE_COUNT] = {{0}};
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            struct item it;
            if (!compare_one(ref, cand, 0, c, q, o->margin, &it)) {
                skipped++;
                continue;
            }
            items[n++] = it;
            agg_add(&all, &it);
            agg_add(&by_type[set->cases[c].q[q].type], &it);
        }
    json_t *questions = json_array(), *worst = json_array(), *types = json_object();
    for (size_t i = 0; questions && i < n; i++)
        json_array_append_new(questions, item_json(ref, cand, &items[i]));
    qsort(items, n, sizeof *items, worst_first);
    for (size_t i = 0; worst && i < n && i < o->top; i++)
        json_array_append_new(worst, item_json(ref, cand, &items[i]));
    for (int t = 0; types && t < S1Q_TYPE_COUNT; t++)
        json_object_set_new(types, s1q_type_name((enum s1q_type)t), agg_json(&by_type[t]));
    mem_free(items);
    json_t *errors = errors_json(ref, "ref"), *cerr = errors_json(cand, "cand");
    json_array_extend(errors, cerr);
    json_decref(cerr);
    json_t *out = json_pack("{s:s,s:s,s:I,s:I,s:o,s:o,s:I,s:s,s:f,s:I}", "format",
                            "tandem-drift/1", "data", set->path, "cases", (json_int_t)set->n_cases,
                            "questions", (json_int_t)set->n_questions, "ref",
                            side_json(ref, ref_model), "cand", side_json(cand, cand_model),
                            "skipped", (json_int_t)skipped, "kl_direction",
                            "KL(ref || cand), nats", "margin", o->margin, "repeat",
                            (json_int_t)cand->repeat);
    if (out && ref->repeat > 1)
        json_object_set_new(out, "ref_noise", noise_json(ref, o->margin));
    if (!out || !questions || !worst || !types || !errors) {
        json_decref(out);
        json_decref(questions);
        json_decref(worst);
        json_decref(types);
        json_decref(errors);
        return NULL;
    }
    json_t *overall = agg_json(&all); /* compared, flips, flip_rate, kl_*, max_dp_* */
    json_object_update(out, overall);
    json_decref(overall);
    json_object_set_new(out, "by_type", types);
    json_object_set_new(out, "worst", worst);
    json_object_set_new(out, "errors", errors);
    json_object_set_new(out, "results", questions);
    return out;
}
