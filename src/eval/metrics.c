/* metrics.c: accuracy, Brier, ECE, MAE, KL and |dp| over probability vectors.
 *
 * Everything here is a pure function of its arguments, so the numbers can be
 * checked against hand-computed fixtures (tests/test_metrics.c) and against
 * numpy (tests/e2e/test_metrics.py). Sums run in index order in double
 * precision (numpy sums pairwise; the two agree far inside the 1e-9 the test
 * demands). docs/eval.md states each formula. */
#include "eval/metrics.h"

#include <math.h>

size_t metrics_top(const double *p, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (p[i] > p[best])
            best = i;
    return best;
}

double metrics_brier(const double *p, const double *target, size_t n, size_t gold) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double y = target ? target[i] : (i == gold ? 1.0 : 0.0);
        double d = p[i] - y;
        s += d * d;
    }
    return s;
}

size_t metrics_ece_bin(double c) {
    if (!(c > 0)) /* also NaN */
        return 0;
    double b = floor(c * METRICS_ECE_BINS);
    if (b >= METRICS_ECE_BINS - 1)
        return METRICS_ECE_BINS - 1;
    return (size_t)b;
}

void metrics_calib_init(struct metrics_calib *c) { *c = (struct metrics_calib){0}; }

void metrics_calib_add(struct metrics_calib *c, double conf, bool correct) {
    size_t b = metrics_ece_bin(conf);
    c->n[b]++;
    c->conf_sum[b] += conf;
    c->correct[b] += correct ? 1.0 : 0.0;
    c->total++;
}

double metrics_calib_ece(const struct metrics_calib *c) {
    if (c->total == 0)
        return 0;
    double ece = 0;
    for (size_t b = 0; b < METRICS_ECE_BINS; b++) {
        if (c->n[b] == 0)
            continue;
        double nb = (double)c->n[b];
        ece += nb / (double)c->total * fabs(c->correct[b] / nb - c->conf_sum[b] / nb);
    }
    return ece;
}

double metrics_kl(const double *p, const double *q, size_t n) {
    double kl = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(p[i] > 0))
            continue;
        double qi = q[i] > METRICS_KL_EPSILON ? q[i] : METRICS_KL_EPSILON;
        kl += p[i] * log(p[i] / qi);
    }
    return kl > 0 ? kl : 0;
}

double metrics_max_abs_diff(const double *p, const double *q, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(p[i] - q[i]);
        if (d > m)
            m = d;
    }
    return m;
}

double metrics_expected_level(const double *p, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)i * p[i];
    return s;
}

void metrics_summary_init(struct metrics_summary *s) {
    *s = (struct metrics_summary){0};
    metrics_calib_init(&s->calib);
}

void metrics_summary_add(struct metrics_summary *s, const double *p, const double *target,
                         size_t n, size_t gold, bool is_score, double low_threshold) {
    size_t top = metrics_top(p, n);
    double conf = n ? p[top] : 0;
    bool correct = top == gold;
    s->n++;
    s->correct += correct;
    s->brier_sum += metrics_brier(p, target, n, gold);
    s->low_conf += conf < low_threshold;
    s->conf_sum += conf;
    if (is_score) {
        s->n_score++;
        s->abs_err_sum += fabs(metrics_expected_level(p, n) - (double)gold);
    }
    metrics_calib_add(&s->calib, conf, correct);
}

struct metrics_result metrics_summary_result(const struct metrics_summary *s) {
    struct metrics_result r = {NAN, NAN, NAN, NAN, NAN, NAN};
    if (s->n) {
        double n = (double)s->n;
        r.accuracy = (double)s->correct / n;
        r.brier = s->brier_sum / n;
        r.ece = metrics_calib_ece(&s->calib);
        r.low_conf_rate = (double)s->low_conf / n;
        r.mean_conf = s->conf_sum / n;
    }
    if (s->n_score)
        r.mae = s->abs_err_sum / (double)s->n_score;
    return r;
}
