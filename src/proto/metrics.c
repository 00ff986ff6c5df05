/* metrics.c: accuracy, Brier, ECE, MAE, KL and |dp| over probability vectors.
 *
 * Everything here is a pure function of its arguments, so the numbers can be
 * checked against hand-computed fixtures (tests/test_metrics.c) and against
 * numpy (tests/e2e/test_metrics.py). Sums run in index order in double
 * precision (numpy sums pairwise; the two agree far inside the 1e-9 the test
 * demands). docs/eval.md states each formula. */
#include "proto/metrics.h"

#include <math.h>
#include <stdlib.h>

#include "base/rng.h"

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
    s->nll_sum += metrics_nll(p, target, n, gold);
    s->low_conf += conf < low_threshold;
    s->conf_sum += conf;
    if (is_score) {
        s->n_score++;
        s->abs_err_sum += fabs(metrics_expected_level(p, n) - (double)gold);
    }
    metrics_calib_add(&s->calib, conf, correct);
}

struct metrics_result metrics_summary_result(const struct metrics_summary *s) {
    struct metrics_result r = {NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    if (s->n) {
        double n = (double)s->n;
        r.accuracy = (double)s->correct / n;
        r.brier = s->brier_sum / n;
        r.nll = s->nll_sum / n;
        r.ece = metrics_calib_ece(&s->calib);
        r.low_conf_rate = (double)s->low_conf / n;
        r.mean_conf = s->conf_sum / n;
    }
    if (s->n_score)
        r.mae = s->abs_err_sum / (double)s->n_score;
    return r;
}

double metrics_nll(const double *p, const double *target, size_t n, size_t gold) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double y = target ? target[i] : (i == gold ? 1.0 : 0.0);
        if (y > 0)
            s -= y * log(p[i] > METRICS_KL_EPSILON ? p[i] : METRICS_KL_EPSILON);
    }
    return s;
}

/* --- selective prediction ------------------------------------------------------------------- */

static int by_conf_desc(const void *x, const void *y) {
    const struct metrics_answer *a = x, *b = y;
    return (a->conf < b->conf) - (a->conf > b->conf);
}

void metrics_answers_sort(struct metrics_answer *a, size_t n) {
    if (n > 1)
        qsort(a, n, sizeof *a, by_conf_desc);
}

/* The end of the tie group that starts at i (one past its last answer). */
static size_t group_end(const struct metrics_answer *a, size_t n, size_t i) {
    size_t j = i + 1;
    while (j < n && a[j].conf == a[i].conf)
        j++;
    return j;
}

size_t metrics_risk_coverage(const struct metrics_answer *a, size_t n,
                             struct metrics_rc_point *out, size_t cap) {
    size_t points = 0, wrong = 0;
    for (size_t i = 0; i < n;) {
        size_t end = group_end(a, n, i);
        for (; i < end; i++)
            wrong += !a[i].correct;
        if (points < cap)
            out[points] = (struct metrics_rc_point){(double)end / (double)n,
                                                    (double)wrong / (double)end, a[end - 1].conf};
        points++;
    }
    return points;
}

double metrics_aurc(const struct metrics_answer *a, size_t n) {
    if (n == 0)
        return NAN;
    double sum = 0;
    size_t wrong = 0;
    for (size_t i = 0; i < n;) {
        size_t start = i, end = group_end(a, n, i);
        for (; i < end; i++)
            wrong += !a[i].correct;
        sum += (double)(end - start) * (double)wrong / (double)end;
    }
    return sum / (double)n;
}

double metrics_coverage_at_risk(const struct metrics_answer *a, size_t n, double target,
                                double *threshold) {
    double best = 0, at = NAN;
    size_t wrong = 0;
    for (size_t i = 0; i < n;) {
        size_t end = group_end(a, n, i);
        for (; i < end; i++)
            wrong += !a[i].correct;
        if ((double)wrong / (double)end <= target)
            best = (double)end / (double)n, at = a[end - 1].conf;
    }
    if (threshold)
        *threshold = at;
    return best;
}

/* --- bootstrap ------------------------------------------------------------------------------ */

static int by_value(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The q-quantile of sorted v[0..n), linear between order statistics. */
static double quantile(const double *v, size_t n, double q) {
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n || v[lo] == v[lo + 1]) /* equal ends: exact, also when infinite */
        return v[lo < n ? lo : n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

bool metrics_bootstrap(const struct metrics_answer *a, size_t n, metrics_stat_fn stat,
                       void *arg, uint64_t seed, size_t resamples,
                       struct metrics_answer *scratch, double *values, double *lo,
                       double *hi) {
    *lo = *hi = NAN;
    if (n == 0 || resamples == 0)
        return false;
    uint64_t state = seed;
    for (size_t r = 0; r < resamples; r++) {
        for (size_t i = 0; i < n; i++)
            scratch[i] = a[rng_next(&state) % n];
        values[r] = stat(scratch, n, arg);
    }
    qsort(values, resamples, sizeof *values, by_value);
    *lo = quantile(values, resamples, 0.025);
    *hi = quantile(values, resamples, 0.975);
    return true;
}

double metrics_stat_accuracy(struct metrics_answer *a, size_t n, void *arg) {
    (void)arg;
    size_t right = 0;
    for (size_t i = 0; i < n; i++)
        right += a[i].correct;
    return n ? (double)right / (double)n : NAN;
}

double metrics_stat_ece(struct metrics_answer *a, size_t n, void *arg) {
    (void)arg;
    struct metrics_calib c;
    metrics_calib_init(&c);
    for (size_t i = 0; i < n; i++)
        metrics_calib_add(&c, a[i].conf, a[i].correct);
    return metrics_calib_ece(&c);
}

double metrics_stat_coverage(struct metrics_answer *a, size_t n, void *arg) {
    metrics_answers_sort(a, n);
    return metrics_coverage_at_risk(a, n, *(const double *)arg, NULL);
}

double metrics_stat_threshold(struct metrics_answer *a, size_t n, void *arg) {
    double threshold;
    metrics_answers_sort(a, n);
    metrics_coverage_at_risk(a, n, *(const double *)arg, &threshold);
    return isnan(threshold) ? INFINITY : threshold;
}

size_t metrics_min_answers_for_precision(double target) {
    if (!(target > 0))
        return 1;
    if (!(target < 1))
        return SIZE_MAX;
    return (size_t)ceil(log(0.05) / log(target) - 1e-9);
}

void metrics_wilson(size_t k, size_t n, double *lo, double *hi) {
    if (n == 0) {
        *lo = *hi = NAN;
        return;
    }
    const double z2 = METRICS_Z95 * METRICS_Z95, nn = (double)n, rate = (double)k / nn;
    const double centre = rate + z2 / (2 * nn);
    const double spread = METRICS_Z95 * sqrt(rate * (1 - rate) / nn + z2 / (4 * nn * nn));
    const double scale = 1 + z2 / nn;
    *lo = fmax(0, (centre - spread) / scale);
    *hi = fmin(1, (centre + spread) / scale);
}

size_t metrics_min_trials_for_rate(double max_rate) {
    if (!(max_rate > 0))
        return SIZE_MAX;
    if (max_rate >= 1)
        return 1;
    return (size_t)floor(METRICS_Z95 * METRICS_Z95 * (1 - max_rate) / max_rate) + 1;
}

double metrics_margin(const double *p, size_t n) {
    double first = 0, second = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] > first) {
            second = first;
            first = p[i];
        } else if (p[i] > second) {
            second = p[i];
        }
    }
    return first - second;
}

/* The chi-square survival function is the regularized upper incomplete gamma
 * function Q(a, x) = Gamma(a, x) / Gamma(a), a = df/2, x = chi2/2; the
 * expansions are those of Numerical Recipes' gser and gcf. */
#define GAMMA_EPS 1e-15
#define GAMMA_TINY 1e-300
#define GAMMA_MAX_TERMS 10000

/* P(a, x) = 1 - Q(a, x) by its series; converges fast for x < a + 1. */
static double gamma_p_series(double a, double x) {
    double ap = a, term = 1 / a, sum = term;
    for (int i = 0; i < GAMMA_MAX_TERMS && fabs(term) > fabs(sum) * GAMMA_EPS; i++) {
        ap += 1;
        term *= x / ap;
        sum += term;
    }
    return sum * exp(-x + a * log(x) - lgamma(a));
}

/* Q(a, x) by its continued fraction (modified Lentz); for x >= a + 1. */
static double gamma_q_fraction(double a, double x) {
    double b = x + 1 - a, c = 1 / GAMMA_TINY, d = 1 / b, h = d;
    for (int i = 1; i < GAMMA_MAX_TERMS; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < GAMMA_TINY ? GAMMA_TINY : d;
        c = b + an / c;
        c = fabs(c) < GAMMA_TINY ? GAMMA_TINY : c;
        d = 1 / d;
        double delta = d * c;
        h *= delta;
        if (fabs(delta - 1) < GAMMA_EPS)
            break;
    }
    return exp(-x + a * log(x) - lgamma(a)) * h;
}

double metrics_chi2_sf(double x, unsigned df) {
    if (df == 0 || isnan(x))
        return NAN;
    if (x <= 0)
        return 1;
    double a = df / 2.0, hx = x / 2;
    return hx < a + 1 ? 1 - gamma_p_series(a, hx) : gamma_q_fraction(a, hx);
}
