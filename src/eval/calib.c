/* calib.c: temperature refits of decision models (`tandem calibrate`'s maths).
 *
 * Served probabilities p = softmax(s / T) become p^a / sum p^a at the
 * temperature T / a. With z_i = ln p_i over the options with p_i > 0, the
 * NLL of one answer is sum_i y_i (LSE_j(a z_j) - a z_i), a sum of convex
 * functions of a, so the mean over a group is convex and its derivative
 * E_q[z] - sum_i y_i z_i is increasing: the fit bisects that derivative's
 * sign on log a. Options with p_i = 0 stay at 0 under any power; a gold on
 * one costs the constant -ln METRICS_KL_EPSILON, as metrics_nll counts it.
 *
 * The temperature table mirrors the engine (tools/server/server-decision.cpp
 * of the pinned build): it reads every "{arch}.decision.temperature.*" key
 * as text, a float32 formatted by std::to_string ("%f"), and parses it with
 * strtof; a question uses "<type>.<bucket>", else "<type>", else 1. Every
 * value in the table is the one the engine will use, so predictions made
 * from it match the served copy exactly. */
#include "eval/calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "proto/metrics.h"

#define FIT_STEPS 200

void calib_apply(const double *p, size_t n, double a, double *out) {
    double m = 0, sum = 0;
    for (size_t i = 0; i < n; i++)
        m = p[i] > m ? p[i] : m;
    if (m <= 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = 0;
        return;
    }
    double lm = log(m);
    for (size_t i = 0; i < n; i++) {
        out[i] = p[i] > 0 ? exp(a * (log(p[i]) - lm)) : 0;
        sum += out[i];
    }
    for (size_t i = 0; i < n; i++)
        out[i] /= sum;
}

static double weight(const struct calib_item *it, size_t i) {
    return it->target ? it->target[i] : (i == it->gold ? 1.0 : 0.0);
}

/* ln sum_j p_j^a, shifted by a * ln max p (lm); the largest p_j > 0. */
static double log_norm(const struct calib_item *it, double a, double lm) {
    double s = 0;
    for (size_t j = 0; j < it->n; j++)
        if (it->p[j] > 0)
            s += exp(a * (log(it->p[j]) - lm));
    return log(s);
}

static double max_p(const struct calib_item *it) {
    double m = 0;
    for (size_t j = 0; j < it->n; j++)
        m = it->p[j] > m ? it->p[j] : m;
    return m;
}

/* NLL of one answer after the refit, as metrics_nll computes it. */
static double item_nll(const struct calib_item *it, double a) {
    double m = max_p(it), floor_ln = log(METRICS_KL_EPSILON), s = 0;
    double lm = m > 0 ? log(m) : 0, ln_norm = m > 0 ? log_norm(it, a, lm) : 0;
    for (size_t i = 0; i < it->n; i++) {
        double y = weight(it, i);
        if (y <= 0)
            continue;
        double lq = it->p[i] > 0 ? a * (log(it->p[i]) - lm) - ln_norm : floor_ln;
        s -= y * (lq > floor_ln ? lq : floor_ln);
    }
    return s;
}

double calib_nll(const struct calib_item *items, size_t n_items, double a) {
    if (!n_items)
        return NAN;
    double s = 0;
    for (size_t k = 0; k < n_items; k++)
        s += item_nll(&items[k], a);
    return s / (double)n_items;
}

/* d/da of one answer's NLL: E_q[z] - sum_{i: p_i > 0} y_i z_i (times the
 * mass of y on options with p_i > 0). */
static double item_slope(const struct calib_item *it, double a) {
    double m = max_p(it);
    if (m <= 0)
        return 0;
    double lm = log(m), w_sum = 0, wz = 0, y_sum = 0, yz = 0;
    for (size_t i = 0; i < it->n; i++) {
        if (it->p[i] <= 0)
            continue;
        double z = log(it->p[i]) - lm, w = exp(a * z), y = weight(it, i);
        w_sum += w;
        wz += w * z;
        y_sum += y;
        yz += y * z;
    }
    return y_sum * (wz / w_sum) - yz;
}

static double slope(const struct calib_item *items, size_t n_items, double a) {
    double s = 0;
    for (size_t k = 0; k < n_items; k++)
        s += item_slope(&items[k], a);
    return s;
}

double calib_fit(const struct calib_item *items, size_t n_items) {
    if (!n_items)
        return 1;
    double lo = log(CALIB_A_MIN), hi = log(CALIB_A_MAX);
    if (slope(items, n_items, CALIB_A_MIN) >= 0)
        return CALIB_A_MIN;
    if (slope(items, n_items, CALIB_A_MAX) <= 0)
        return CALIB_A_MAX;
    for (int i = 0; i < FIT_STEPS && hi - lo > 1e-14; i++) {
        double mid = 0.5 * (lo + hi);
        if (slope(items, n_items, exp(mid)) < 0)
            lo = mid;
        else
            hi = mid;
    }
    return exp(0.5 * (lo + hi));
}

/* Selection sampling (Knuth's algorithm S): each case is taken with
 * probability (still needed) / (still left), which draws a uniform subset of
 * exactly k cases in one pass without a permutation array. */
size_t calib_split(size_t n_cases, double holdout, uint64_t seed, bool *held_out) {
    size_t k = (size_t)floor(holdout * (double)n_cases + 0.5), taken = 0;
    uint64_t state = seed;
    for (size_t c = 0; c < n_cases; c++) {
        double u = rng_uniform(&state);
        held_out[c] = u * (double)(n_cases - c) < (double)(k - taken);
        taken += held_out[c];
    }
    return taken;
}

/* --- temperatures ---------------------------------------------------------------- */

static const char *const bucket_names[CALIB_BUCKETS] = {"2", "3_5", "6_10", "11"};

size_t calib_bucket(size_t n) { return n <= 2 ? 0 : n <= 5 ? 1 : n <= 10 ? 2 : 3; }

const char *calib_bucket_name(size_t b) { return b < CALIB_BUCKETS ? bucket_names[b] : "?"; }

double calib_temp_engine(float v) {
    char text[64];
    snprintf(text, sizeof text, "%f", (double)v);
    return (double)strtof(text, NULL);
}

float calib_temp_round(double t) {
    char text[64];
    snprintf(text, sizeof text, "%.6f", t);
    return strtof(text, NULL);
}

/* Returns the index of key suffix in ts, or ts->n when absent. */
static size_t find(const struct calib_temps *ts, const char *suffix) {
    size_t i = 0;
    while (i < ts->n && strcmp(ts->t[i].suffix, suffix))
        i++;
    return i;
}

static struct calib_temp *find_or_add(struct calib_temps *ts, const char *suffix) {
    size_t i = find(ts, suffix);
    if (i < ts->n)
        return &ts->t[i];
    if (ts->n == CALIB_MAX_TEMPS || strlen(suffix) >= CALIB_MAX_SUFFIX)
        return NULL;
    struct calib_temp *t = &ts->t[ts->n++];
    memset(t, 0, sizeof *t);
    strcpy(t->suffix, suffix);
    t->value = 1.0;
    return t;
}

double calib_temps_lookup(const struct calib_temps *ts, const char *qtype, size_t n_options) {
    char name[CALIB_MAX_SUFFIX];
    snprintf(name, sizeof name, "%s.%s", qtype, calib_bucket_name(calib_bucket(n_options)));
    return find(ts, name) < ts->n ? calib_temps_get(ts, name) : calib_temps_get(ts, qtype);
}

double calib_temps_get(const struct calib_temps *ts, const char *suffix) {
    size_t i = find(ts, suffix);
    return i < ts->n ? ts->t[i].value : 1.0;
}

bool calib_temps_put(struct calib_temps *ts, const char *suffix, double value) {
    struct calib_temp *t = find_or_add(ts, suffix);
    if (t)
        t->value = value;
    return t != NULL;
}

static void set_value(struct calib_temp *t, double value) {
    t->written = calib_temp_round(value);
    t->value = calib_temp_engine(t->written);
    t->changed = true;
}

bool calib_temps_scale_type(struct calib_temps *ts, const char *qtype, double a) {
    struct calib_temp *type_key = find_or_add(ts, qtype);
    if (!type_key)
        return false;
    size_t len = strlen(qtype);
    for (size_t i = 0; i < ts->n; i++) {
        struct calib_temp *t = &ts->t[i];
        if (!strncmp(t->suffix, qtype, len) && (!t->suffix[len] || t->suffix[len] == '.'))
            set_value(t, t->value / a);
    }
    return true;
}

bool calib_temps_set_bucket(struct calib_temps *ts, const char *qtype, size_t b, double t) {
    char name[CALIB_MAX_SUFFIX];
    snprintf(name, sizeof name, "%s.%s", qtype, calib_bucket_name(b));
    struct calib_temp *key = find_or_add(ts, name);
    if (key)
        set_value(key, t);
    return key != NULL;
}
