/* calib.h: the maths of `tandem calibrate`, refitting a decision model's temperatures.
 *
 * The engine answers a question with p = softmax(s / T), T the model's
 * temperature for the question's type (and option-count bucket). Serving the
 * same scores at T' gives p' proportional to p^a with a = T / T', so a new
 * temperature is fitted from served probabilities alone: find the power a
 * that minimises the NLL against the gold answers, and write T / a.
 *
 * Pure functions and plain data: no I/O, no allocation. Distributions follow
 * metrics.h (one double per option in the question's order). */
#ifndef TANDEM_CALIB_H
#define TANDEM_CALIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The range the power a is fitted in; a fit at either end hit the bound. */
#define CALIB_A_MIN (1.0 / 64)
#define CALIB_A_MAX 64.0

/* One scored answer as the fit sees it. */
struct calib_item {
    const double *p;      /* served distribution, n entries; borrowed */
    const double *target; /* gold target distribution (n entries), or NULL = one-hot gold */
    size_t n;             /* options */
    size_t gold;          /* gold index (used when target is NULL) */
};

/* Writes the power-law refit p^a / sum_i p^a of p[0..n) into out[0..n) (may
 * alias p). Zero entries stay zero; a must be > 0. When every p[i] is 0, out
 * is all zeros. */
void calib_apply(const double *p, size_t n, double a, double *out);

/* Returns the mean NLL (metrics_nll, nats) of items[0..n_items) after the
 * refit with power a; NaN when n_items is 0. */
double calib_nll(const struct calib_item *items, size_t n_items, double a);

/* Returns the power a in [CALIB_A_MIN, CALIB_A_MAX] minimising calib_nll of
 * items[0..n_items) (1 when n_items is 0). The NLL is convex in a (a
 * log-sum-exp of linear functions), so its derivative is bisected on log a.
 * The derivative leaves out metrics_nll's floor of METRICS_KL_EPSILON, which
 * only matters where a gold's refit probability falls below it. */
double calib_fit(const struct calib_item *items, size_t n_items);

/* Marks held_out[c] for a seeded random round(holdout * n_cases) of the
 * n_cases cases (Fisher-Yates over a splitmix64 stream of seed), the rest
 * false. holdout is in [0, 1]. Returns the number held out. */
size_t calib_split(size_t n_cases, double holdout, uint64_t seed, bool *held_out);

/* --- temperatures as the engine reads them ------------------------------------- */

#define CALIB_BUCKETS 4          /* option-count buckets "2", "3_5", "6_10", "11" */
#define CALIB_MAX_TEMPS 64       /* temperature keys a model may carry */
#define CALIB_MAX_SUFFIX 48      /* bytes of a key suffix, NUL included */

/* Returns the bucket index of a question with n options (n <= 2: 0, <= 5: 1,
 * <= 10: 2, else 3), as the engine groups them (lev's buckets differ). */
size_t calib_bucket(size_t n_options);

/* Returns the static name of bucket b ("2", "3_5", "6_10", "11"). */
const char *calib_bucket_name(size_t b);

/* One temperature key, named by what follows "{arch}.decision.temperature.". */
struct calib_temp {
    char suffix[CALIB_MAX_SUFFIX]; /* "choice", "noul.2", ... */
    double value;                  /* as the engine reads it (see calib_temp_engine) */
    float written;                 /* the float32 to write when changed */
    bool changed;                  /* set by the update functions below */
};

/* A model's temperature keys. Plain data, caller-allocated; start zeroed. */
struct calib_temps {
    struct calib_temp t[CALIB_MAX_TEMPS];
    size_t n;
};

/* Returns the value the engine reads from a float32 key holding v: it formats
 * the value with "%f" (std::to_string) and parses that with strtof. */
double calib_temp_engine(float v);

/* Returns the float32 to write for temperature t: t rounded to 6 decimals, so
 * that the engine's "%f" reading loses nothing it would not lose anyway. */
float calib_temp_round(double t);

/* Returns the temperature the engine uses for a question of type qtype with
 * n_options options: key "<qtype>.<bucket>", else "<qtype>", else 1. */
double calib_temps_lookup(const struct calib_temps *ts, const char *qtype, size_t n_options);

/* Returns the value of key suffix (e.g. "choice"), or 1 (the engine's default)
 * when absent. */
double calib_temps_get(const struct calib_temps *ts, const char *suffix);

/* Adds or replaces key suffix (NUL-terminated, shorter than CALIB_MAX_SUFFIX)
 * with engine value value, not marked changed (loading a model). Returns
 * false when the table is full or the suffix too long. */
bool calib_temps_put(struct calib_temps *ts, const char *suffix, double value);

/* A type fit with power a: every key of qtype ("<qtype>" and each
 * "<qtype>.<bucket>") becomes T / a, and "<qtype>" is created as 1 / a when
 * absent. Changed keys get written = calib_temp_round(T / a) and value =
 * calib_temp_engine(written). Returns false when the table is full. */
bool calib_temps_scale_type(struct calib_temps *ts, const char *qtype, double a);

/* A bucket fit: key "<qtype>.<bucket name of b>" becomes t (rounded as
 * above), created when absent. Returns false when the table is full. */
bool calib_temps_set_bucket(struct calib_temps *ts, const char *qtype, size_t b, double t);

#endif
