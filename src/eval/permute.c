/* permute.c: the option-order test of `tandem eval --permute K`.
 *
 * A model without position bias picks the same option whatever order the
 * options come in. To measure that, every choice question of the set is
 * asked again in k seeded orders (but one of a single option, which has no
 * other order), and each answer is compared with the
 * original order's answer, option by option (by name, not by position).
 *
 * How: permute_orders() draws each question's k orders (splitmix64 +
 * Fisher-Yates, seeded per (seed, case, question)). The permuted copy of the
 * set is built in memory, order-major (order 0 of every case, then order 1,
 * ...): each copy is the case's JSON with only its choice questions, their
 * "criteria" objects rebuilt with the keys in the asked order, serialized
 * and parsed back with evalset_parse_line(), so that the copy's option list
 * and the request body come from the same text, exactly as a dataset line
 * would. One eval_run_new() sends the copy. Position j of order t asks the
 * original option perms[t * n + j], which maps every answer back.
 *
 * Invariant: a (question, order) pair is counted only when both its request
 * and the original order's request were answered; the others are counted as
 * failed, and the permuted requests that failed are listed. */
#include "eval/permute.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/rng.h"
#include "proto/metrics.h"

#define MAX_DRAWS 10000 /* shuffles tried for one order before a repeat is accepted */

/* --- seeded orders ------------------------------------------------------------- */

/* min(n!, cap). */
static size_t factorial_capped(size_t n, size_t cap) {
    size_t f = 1;
    for (size_t i = 2; i <= n && f < cap; i++)
        f = f > cap / i ? cap : f * i;
    return f < cap ? f : cap;
}

/* A uniform shuffle of 0..n-1 into p (Fisher-Yates; the modulo bias of a
 * 64-bit draw over at most 255 options is below 2^-56). */
static void shuffle(uint64_t *state, size_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(rng_next(state) % (i + 1)), tmp = p[i];
        p[i] = p[j];
        p[j] = tmp;
    }
}

static bool is_identity(const size_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != i)
            return false;
    return true;
}

/* Whether order t of perms equals one of the orders from..t-1. */
static bool repeats_earlier(const size_t *perms, size_t from, size_t t, size_t n) {
    for (size_t u = from; u < t; u++)
        if (!memcmp(perms + u * n, perms + t * n, n * sizeof *perms))
            return true;
    return false;
}

void permute_orders(uint64_t seed, size_t case_index, size_t question, size_t n, unsigned k,
                    size_t *perms) {
    uint64_t state = rng_mix64(rng_mix64(rng_mix64(seed) ^ case_index) ^ question);
    size_t round = factorial_capped(n, (size_t)k + 1) - 1; /* non-identity orders, at most k */
    for (size_t t = 0; t < k; t++) {
        size_t *p = perms + t * n, from = t - t % round;
        for (unsigned d = 0; d < MAX_DRAWS; d++) {
            shuffle(&state, p, n);
            if (!is_identity(p, n) && !repeats_earlier(perms, from, t, n))
                break;
        }
    }
}

/* --- the permuted copy of a case ----------------------------------------------- */

/* Whether q is asked in other orders: a choice question of two or more
 * options (the contract allows one, which has no other order). */
static bool permutable(const struct evalset_question *q) {
    return q->type == S1Q_TYPE_CHOICE && q->n_options >= 2;
}

/* A copy of choice question jq (borrowed) whose criteria keys follow perm. */
static json_t *permuted_question(const json_t *jq, const struct evalset_question *q,
                                 const size_t *perm) {
    json_t *copy = json_copy((json_t *)jq), *criteria = json_object();
    const json_t *orig = json_object_get(jq, "criteria");
    int bad = !copy || !criteria;
    for (size_t j = 0; !bad && j < q->n_options; j++) {
        const char *name = q->options[perm[j]];
        bad = json_object_set(criteria, name, json_object_get(orig, name));
    }
    if (bad) {
        json_decref(criteria);
        criteria = NULL;
    }
    if (json_object_set_new(copy, "criteria", criteria)) { /* steals criteria, also on failure */
        json_decref(copy);
        return NULL;
    }
    return copy;
}

/* The case's JSON asked in order t: {"id", "state", "questions", "gold"}. */
static json_t *permuted_case_json(const struct evalset_case *c, const size_t *const *perms,
                                  unsigned t) {
    json_t *doc = json_object(), *qs = json_object(), *gold = json_object();
    int bad = !doc || !qs || !gold;
    for (size_t i = 0; !bad && i < c->n_questions; i++) {
        const struct evalset_question *q = &c->q[i];
        if (!permutable(q))
            continue;
        bad = json_object_set_new(qs, q->id, permuted_question(
                                      json_object_get(c->questions, q->id), q,
                                      perms[i] + (size_t)t * q->n_options));
        if (!bad && q->has_gold)
            bad = json_object_set_new(gold, q->id, json_string(q->options[q->gold]));
    }
    bad = bad || json_object_set_new(doc, "id", json_string(c->id)) ||
          json_object_set(doc, "state", c->state) || json_object_set(doc, "questions", qs) ||
          (json_object_size(gold) && json_object_set(doc, "gold", gold));
    json_decref(qs);
    json_decref(gold);
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static bool has_choice(const struct evalset_case *c) {
    for (size_t i = 0; i < c->n_questions; i++)
        if (permutable(&c->q[i]))
            return true;
    return false;
}

tandem_err permute_case_new(const struct evalset_case *c, const size_t *const *perms, unsigned t,
                            struct evalset_case *out, char *err, size_t errlen) {
    *out = (struct evalset_case){0};
    if (!has_choice(c)) {
        tandem_errmsg(err, errlen, "case %s has no choice question", c->id);
        return TANDEM_ERR_INVAL;
    }
    json_t *doc = permuted_case_json(c, perms, t);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text) {
        tandem_errmsg(err, errlen, "out of memory");
        return TANDEM_ERR_NOMEM;
    }
    tandem_err e = evalset_parse_line("(permuted)", c->line, text, strlen(text), out, err,
                                      errlen);
    free(text);
    return e;
}

/* --- the plan: which questions, in which orders -------------------------------- */

/* One choice question of the base set and its k orders. */
struct item {
    size_t c, q;   /* case and question index in the base set */
    size_t n;      /* options */
    size_t *perms; /* k orders, as permute_orders() writes them */
};

struct plan {
    unsigned k;
    size_t n_items;
    struct item *items;  /* the set's choice questions, in dataset order */
    size_t n_cases;
    size_t *cases;       /* base index of each case with a choice question */
    size_t *first;       /* [n_cases + 1]: its items are items[first[i] .. first[i + 1]) */
};

static void plan_deinit(struct plan *pl) {
    for (size_t i = 0; pl->items && i < pl->n_items; i++)
        mem_free(pl->items[i].perms);
    mem_free(pl->items);
    mem_free(pl->cases);
    mem_free(pl->first);
    *pl = (struct plan){0};
}

/* Adds case c's choice questions (case index ci) to pl, with their orders. */
static tandem_err plan_add_case(struct plan *pl, const struct evalset_case *c, size_t ci,
                                uint64_t seed) {
    pl->cases[pl->n_cases] = ci;
    pl->first[pl->n_cases++] = pl->n_items;
    for (size_t qi = 0; qi < c->n_questions; qi++) {
        size_t n = c->q[qi].n_options;
        if (!permutable(&c->q[qi]))
            continue;
        struct item *it = &pl->items[pl->n_items];
        *it = (struct item){.c = ci, .q = qi, .n = n,
                            .perms = mem_alloc_array((size_t)pl->k * n, sizeof *it->perms)};
        if (!it->perms)
            return TANDEM_ERR_NOMEM;
        pl->n_items++;
        permute_orders(seed, ci, qi, n, pl->k, it->perms);
    }
    pl->first[pl->n_cases] = pl->n_items;
    return TANDEM_OK;
}

static tandem_err plan_init(struct plan *pl, const struct evalset *set, unsigned k,
                            uint64_t seed) {
    *pl = (struct plan){.k = k};
    pl->items = mem_calloc(set->n_questions, sizeof *pl->items);
    pl->cases = mem_calloc(set->n_cases, sizeof *pl->cases);
    pl->first = mem_calloc(set->n_cases + 1, sizeof *pl->first);
    tandem_err e = pl->items && pl->cases && pl->first ? TANDEM_OK : TANDEM_ERR_NOMEM;
    for (size_t ci = 0; !e && ci < set->n_cases; ci++)
        if (has_choice(&set->cases[ci]))
            e = plan_add_case(pl, &set->cases[ci], ci, seed);
    if (e)
        plan_deinit(pl);
    return e;
}

/* The permuted copy: case pc = t * pl->n_cases + i asks plan case i in order t. */
static tandem_err permuted_set_new(const struct evalset *base, const struct plan *pl,
                                   struct evalset **out, char *err, size_t errlen) {
    struct evalset *set = mem_calloc(1, sizeof *set);
    size_t total = (size_t)pl->k * pl->n_cases;
    if (set) {
        set->path = mem_strdup(base->path);
        set->cases = mem_calloc(total, sizeof *set->cases);
    }
    tandem_err e = set && set->path && set->cases ? TANDEM_OK : TANDEM_ERR_NOMEM;
    if (e)
        tandem_errmsg(err, errlen, "out of memory");
    for (size_t pc = 0; !e && pc < total; pc++) {
        size_t i = pc % pl->n_cases;
        const struct evalset_case *c = &base->cases[pl->cases[i]];
        const size_t *perms[EVALSET_MAX_QUESTIONS] = {0};
        for (size_t it = pl->first[i]; it < pl->first[i + 1]; it++)
            perms[pl->items[it].q] = pl->items[it].perms;
        e = permute_case_new(c, perms, (unsigned)(pc / pl->n_cases), &set->cases[pc], err,
                             errlen);
        set->n_cases += !e;
        set->n_questions += e ? 0 : set->cases[pc].n_questions;
    }
    if (e) {
        evalset_free(set);
        return e;
    }
    *out = set;
    return TANDEM_OK;
}

/* --- the metrics --------------------------------------------------------------- */

struct tally {
    size_t pairs, failed, flips, dp_n, n_pos;
    double dp_sum;
    size_t *chosen;   /* [n_pos]: answers whose top option stood at position j */
    double *expected; /* [n_pos]: sum of 1/n over answered pairs with n > j */
    json_t *flipped;  /* [{"case", "question", "orders", "flips", "max_dp"}] */
};

static json_t *real_or_null(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* The base run's distribution of question q of case c: its first answered repeat. */
static const double *base_dist(const struct eval_run *base, size_t c, size_t q) {
    for (unsigned r = 0; r < base->repeat; r++) {
        const double *p = eval_run_dist(base, c, r, q);
        if (p)
            return p;
    }
    return NULL;
}

/* Counts one answered pair: orig in the original order, asked in order perm.
 * Returns whether the chosen option changed; *max_dp grows to its largest |dp|. */
static bool tally_pair(struct tally *ty, const double *orig, const double *asked,
                       const size_t *perm, size_t n, double *max_dp) {
    size_t pos = metrics_top(asked, n);
    ty->pairs++;
    ty->chosen[pos]++;
    for (size_t j = 0; j < n; j++) {
        double dp = fabs(asked[j] - orig[perm[j]]);
        ty->expected[j] += 1.0 / (double)n;
        ty->dp_sum += dp;
        *max_dp = dp > *max_dp ? dp : *max_dp;
    }
    ty->dp_n += n;
    return perm[pos] != metrics_top(orig, n);
}

/* Counts every order of item it (plan case i, its qi-th choice question). */
static int tally_item(struct tally *ty, const struct eval_run *base,
                      const struct eval_run *asked, const struct plan *pl, size_t i, size_t qi) {
    const struct item *it = &pl->items[pl->first[i] + qi];
    const double *orig = base_dist(base, it->c, it->q);
    unsigned flips = 0, answered = 0;
    double max_dp = 0;
    for (unsigned t = 0; t < pl->k; t++) {
        const double *p = eval_run_dist(asked, (size_t)t * pl->n_cases + i, 0, qi);
        if (!orig || !p) {
            ty->failed++;
            continue;
        }
        answered++;
        flips += tally_pair(ty, orig, p, it->perms + (size_t)t * it->n, it->n, &max_dp);
    }
    ty->flips += flips;
    if (!flips)
        return 0;
    const struct evalset_case *c = &base->set->cases[it->c];
    return json_array_append_new(
        ty->flipped, json_pack("{s:s, s:s, s:I, s:I, s:f}", "case", c->id, "question",
                               c->q[it->q].id, "orders", (json_int_t)answered, "flips",
                               (json_int_t)flips, "max_dp", max_dp));
}

/* Writes "A".."Z", "AA".. for 0-based position j into buf[8]. */
static void position_label(size_t j, char *buf) {
    char tmp[8];
    size_t n = 0;
    do {
        tmp[n++] = (char)('A' + j % 26);
        j = j / 26;
    } while (j-- > 0 && n < sizeof tmp - 1);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = '\0';
}

/* "positions", "chi_square", "df" and "p_value" of the tally, into out. */
static int positions_json(const struct tally *ty, json_t *out) {
    json_t *rows = json_array();
    double chi2 = 0;
    unsigned cells = 0;
    int bad = !rows;
    for (size_t j = 0; !bad && j < ty->n_pos && ty->expected[j] > 0; j++) {
        char label[8];
        double o = (double)ty->chosen[j], e = ty->expected[j];
        position_label(j, label);
        chi2 += (o - e) * (o - e) / e;
        cells++;
        bad = json_array_append_new(
            rows, json_pack("{s:I, s:s, s:I, s:f, s:f, s:f}", "position", (json_int_t)j, "label",
                            label, "chosen", (json_int_t)ty->chosen[j], "expected", e, "rate",
                            o / (double)ty->pairs, "uniform_rate", e / (double)ty->pairs));
    }
    if (bad)
        json_decref(rows);
    bad = bad || json_object_set_new(out, "positions", rows);
    unsigned df = cells ? cells - 1 : 0;
    return bad || json_object_set_new(out, "chi_square", real_or_null(cells ? chi2 : NAN)) ||
           json_object_set_new(out, "df", json_integer(df)) ||
           json_object_set_new(out, "p_value", real_or_null(df ? metrics_chi2_sf(chi2, df)
                                                               : NAN));
}

/* The permuted requests that failed: [{"case", "line", "order", "http_status", "error"}]. */
static json_t *errors_json(const struct eval_run *asked, const struct plan *pl) {
    json_t *errors = json_array();
    for (size_t pc = 0; errors && pc < asked->set->n_cases; pc++) {
        const struct eval_answer *a = eval_run_answer(asked, pc, 0);
        const struct evalset_case *c = &asked->set->cases[pc];
        if (a->status != TANDEM_OK &&
            json_array_append_new(
                errors, json_pack("{s:s, s:I, s:I, s:I, s:s}", "case", c->id, "line",
                                  (json_int_t)c->line, "order", (json_int_t)(pc / pl->n_cases + 1),
                                  "http_status", (json_int_t)a->http_status, "error",
                                  a->error ? a->error : tandem_strerror(a->status)))) {
            json_decref(errors);
            return NULL;
        }
    }
    return errors;
}

/* The "permutation" object of a finished tally. */
static json_t *summary_json(const struct tally *ty, const struct eval_run *asked,
                            const struct plan *pl, uint64_t seed) {
    double pairs = (double)ty->pairs;
    json_t *out = json_pack(
        "{s:I, s:I, s:I, s:{s:I, s:I, s:I}, s:I, s:I, s:I, s:o, s:o}", "k", (json_int_t)pl->k,
        "seed", (json_int_t)seed, "choice_questions", (json_int_t)pl->n_items, "requests",
        "total", (json_int_t)asked->set->n_cases, "ok",
        (json_int_t)(asked->set->n_cases - asked->n_errors), "errors",
        (json_int_t)asked->n_errors, "orders_asked", (json_int_t)ty->pairs, "orders_failed",
        (json_int_t)ty->failed, "flips", (json_int_t)ty->flips, "flip_rate",
        real_or_null((double)ty->flips / pairs), "mean_abs_dp",
        real_or_null(ty->dp_sum / (double)ty->dp_n));
    if (!out || positions_json(ty, out) ||
        json_object_set(out, "flipped", ty->flipped) ||
        json_object_set_new(out, "errors", errors_json(asked, pl))) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* Compares every answered pair and returns the "permutation" object, or NULL (no memory). */
static json_t *summarize(const struct eval_run *base, const struct eval_run *asked,
                         const struct plan *pl, uint64_t seed) {
    struct tally ty = {.flipped = json_array()};
    for (size_t i = 0; i < pl->n_items; i++)
        ty.n_pos = pl->items[i].n > ty.n_pos ? pl->items[i].n : ty.n_pos;
    ty.chosen = mem_calloc(ty.n_pos, sizeof *ty.chosen);
    ty.expected = mem_calloc(ty.n_pos, sizeof *ty.expected);
    int bad = !ty.flipped || !ty.chosen || !ty.expected;
    for (size_t i = 0; !bad && i < pl->n_cases; i++)
        for (size_t qi = 0; !bad && qi < pl->first[i + 1] - pl->first[i]; qi++)
            bad = tally_item(&ty, base, asked, pl, i, qi);
    json_t *out = bad ? NULL : summary_json(&ty, asked, pl, seed);
    json_decref(ty.flipped);
    mem_free(ty.chosen);
    mem_free(ty.expected);
    return out;
}

tandem_err permute_set_new(const struct evalset *base, unsigned k, uint64_t seed,
                           struct evalset **out, char *err, size_t errlen) {
    *out = NULL;
    struct plan pl;
    if (k == 0) {
        tandem_errmsg(err, errlen, "k must be at least 1");
        return TANDEM_ERR_INVAL;
    }
    if (plan_init(&pl, base, k, seed) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "out of memory");
        return TANDEM_ERR_NOMEM;
    }
    tandem_err e = TANDEM_ERR_INVAL;
    if (pl.n_items == 0)
        tandem_errmsg(err, errlen, "%s has no choice question: the option-order test "
                      "reorders the options of choice questions", base->path);
    else
        e = permuted_set_new(base, &pl, out, err, errlen);
    plan_deinit(&pl);
    return e;
}

json_t *permute_summarize(const struct eval_run *base, const struct eval_run *asked, unsigned k,
                          uint64_t seed) {
    struct plan pl;
    if (plan_init(&pl, base->set, k, seed) != TANDEM_OK)
        return NULL;
    json_t *out = summarize(base, asked, &pl, seed);
    plan_deinit(&pl);
    return out;
}

tandem_err permute_run(const struct eval_run *base, const struct eval_params *params, unsigned k,
                       uint64_t seed, json_t **out, char *err, size_t errlen) {
    *out = NULL;
    struct evalset *set = NULL;
    struct eval_run *asked = NULL;
    struct eval_params p = *params;
    p.repeat = 1;
    tandem_err e = permute_set_new(base->set, k, seed, &set, err, errlen);
    if (!e)
        e = eval_run_new(set, &p, &asked, err, errlen);
    if (!e && !(*out = permute_summarize(base, asked, k, seed))) {
        tandem_errmsg(err, errlen, "out of memory");
        e = TANDEM_ERR_NOMEM;
    }
    eval_run_free(asked);
    evalset_free(set);
    return e;
}
