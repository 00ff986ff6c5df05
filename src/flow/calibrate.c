/* calibrate.c: new temperatures for a decision model from served answers.
 *
 * The flow is model (gguf: architecture, decision type, temperatures as the
 * engine reads them) -> run (evalset + eval, every case answered once) ->
 * split (seeded, by case) -> fit (calib.c: per type, then per option-count
 * bucket) -> summary (one JSON object: the --json output, and the table is
 * rendered from it) -> write (gguf_edit: changed temperatures and the
 * tandem.calibration.* provenance keys, atomically).
 *
 * Invariant: the table `now` always holds the temperatures the copy will
 * carry, each as the engine will read it back, so every prediction (the
 * served p refitted with the power T_old / T_new of its question) is what the
 * engine serves from the copy. A fit is kept only if it lowers the held-out
 * NLL: a type fit against the served answers, a bucket fit against the
 * type's result.
 *
 * Failures are told in whole lines into the result's diag, as the command
 * shows them, so the command prints them unchanged and a caller without a
 * terminal keeps them. */
#include "flow/calibrate.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/host.h"
#include "proto/metrics.h"
#include "flow/dataset.h"
#include "flow/model_endpoint.h"
#include "gguf/gguf_edit.h"
#include "version.h"

#define DIAG_MAX (16u << 20)
#define RUN_ERR_MAX (64u * 1024)

struct calibrate_params calibrate_default_params(void) {
    return (struct calibrate_params){.command = "tandem calibrate",
                                     .eval = eval_default_params(),
                                     .holdout = CALIBRATE_DEFAULT_HOLDOUT,
                                     .seed = CALIBRATE_DEFAULT_SEED,
                                     .min_bucket = CALIBRATE_DEFAULT_MIN_BUCKET};
}

void calibrate_result_deinit(struct calibrate_result *r) {
    json_decref(r->summary);
    r->summary = NULL;
    mem_buf_deinit(&r->diag);
}

/* A JSON number, or null for NaN and infinities. */
static json_t *number(double x) { return isfinite(x) ? json_real(x) : json_null(); }

/* --- the model ------------------------------------------------------------------- */

/* The value the engine reads from a temperature key: its text form (floats
 * as "%f", std::to_string) parsed by strtof. Arrays are not in the engine's
 * metadata map: *skip. */
static double engine_value(const struct gguf_kv *kv, bool *skip) {
    char text[64] = "";
    double f;
    int64_t i;
    uint64_t u;
    struct gguf_str s;
    bool b;
    *skip = kv->type == GGUF_TYPE_ARRAY;
    if (kv->type == GGUF_TYPE_FLOAT32 && gguf_kv_f64(kv, &f) == TANDEM_OK)
        return calib_temp_engine((float)f);
    if (gguf_kv_f64(kv, &f) == TANDEM_OK)
        snprintf(text, sizeof text, "%f", f);
    else if (gguf_kv_str(kv, &s) == TANDEM_OK)
        snprintf(text, sizeof text, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    else if (gguf_kv_i64(kv, &i) == TANDEM_OK)
        snprintf(text, sizeof text, "%lld", (long long)i);
    else if (gguf_kv_u64(kv, &u) == TANDEM_OK)
        snprintf(text, sizeof text, "%llu", (unsigned long long)u);
    else if (gguf_kv_bool(kv, &b) == TANDEM_OK)
        snprintf(text, sizeof text, "%s", b ? "true" : "false");
    return strtof(text, NULL);
}

static int str_copy(struct gguf_str s, char *out, size_t cap) {
    if (s.len >= cap)
        return -1;
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return 0;
}

/* Reads every "{arch}.decision.temperature.*" key into m->temps. */
static tandem_err load_temperatures(struct calibrate_model *m, const char *path, char *err,
                                    size_t errlen) {
    char prefix[192];
    int plen = snprintf(prefix, sizeof prefix, "%s.decision.temperature.", m->arch);
    for (uint64_t i = 0; i < gguf_kv_count(m->g); i++) {
        const struct gguf_kv *kv = gguf_kv_at(m->g, i);
        char suffix[CALIB_MAX_SUFFIX];
        bool skip;
        if (kv->key.len <= (uint64_t)plen || memcmp(kv->key.ptr, prefix, (size_t)plen))
            continue;
        double v = engine_value(kv, &skip);
        struct gguf_str rest = {kv->key.ptr + plen, kv->key.len - (uint64_t)plen};
        if (skip)
            continue;
        if (!(v > 0) || str_copy(rest, suffix, sizeof suffix) || !calib_temps_put(&m->temps,
                                                                                  suffix, v)) {
            tandem_errmsg(err, errlen, "%s: %.*s: not a temperature the engine accepts (or too "
                          "many temperature keys)", path, (int)kv->key.len, kv->key.ptr);
            return TANDEM_ERR_FORMAT;
        }
    }
    return TANDEM_OK;
}

tandem_err calibrate_model_open(const char *path, struct calibrate_model *m, char *err,
                                size_t errlen) {
    char key[192];
    struct gguf_str s;
    *m = (struct calibrate_model){0};
    tandem_err e = gguf_open(path, &m->g, err, errlen);
    if (e)
        return e;
    if (gguf_get_str(m->g, "general.architecture", &s) != TANDEM_OK ||
        str_copy(s, m->arch, sizeof m->arch)) {
        tandem_errmsg(err, errlen, "%s: no general.architecture", path);
        return TANDEM_ERR_FORMAT;
    }
    snprintf(key, sizeof key, "%s.decision.type", m->arch);
    if (gguf_get_str(m->g, key, &s) != TANDEM_OK || str_copy(s, m->dtype, sizeof m->dtype)) {
        tandem_errmsg(err, errlen, "%s: not a decision model (no %s); calibrate fits the "
                      "temperatures of System One decision models", path, key);
        return TANDEM_ERR_FORMAT;
    }
    if (!strcmp(m->dtype, "lev")) {
        tandem_errmsg(err, errlen, "%s: decision type lev is not supported: lev averages two "
                      "option orders for choice questions and reads noul as an expected "
                      "rating, so its answers are not a power of one softmax and a temperature "
                      "refit cannot be predicted exactly", path);
        return TANDEM_ERR_UNSUPPORTED;
    }
    return load_temperatures(m, path, err, errlen);
}

void calibrate_model_close(struct calibrate_model *m) {
    gguf_free(m->g);
    m->g = NULL;
}

/* --- groups and fits --------------------------------------------------------------- */

/* One fit in progress. */
struct fitter {
    const struct calib_temps *served;
    const struct calibrate_answer *ans;
    size_t n_ans;
    unsigned min_bucket;
    struct calib_item *scratch; /* n_ans items */
    struct calibrate_fit *out;
};

static bool in_group(const struct calibrate_answer *a, enum s1q_type t, int bucket) {
    return a->type == t && (bucket < 0 || a->bucket == (size_t)bucket);
}

/* Gathers the answers of the group and split into f->scratch; returns how many. */
static size_t select_items(struct fitter *f, enum s1q_type t, int bucket, bool held) {
    size_t n = 0;
    for (size_t i = 0; i < f->n_ans; i++)
        if (f->ans[i].held == held && in_group(&f->ans[i], t, bucket))
            f->scratch[n++] = f->ans[i].it;
    return n;
}

/* The power that turns a served answer into the one served at temperatures ts. */
static double power_for(const struct calib_temps *served, const struct calib_temps *ts,
                        enum s1q_type t, size_t n) {
    const char *name = s1q_type_name(t);
    return calib_temps_lookup(served, name, n) / calib_temps_lookup(ts, name, n);
}

/* Held-out NLL and ECE of the group's answers when served at temperatures ts. */
static void held_metrics(const struct fitter *f, enum s1q_type t, int bucket,
                         const struct calib_temps *ts, double *nll, double *ece) {
    double q[S1Q_MAX_CHOICE_OPTIONS + 1], sum = 0;
    size_t n = 0;
    struct metrics_calib mc;
    metrics_calib_init(&mc);
    for (size_t i = 0; i < f->n_ans; i++) {
        const struct calibrate_answer *a = &f->ans[i];
        if (!a->held || !in_group(a, t, bucket))
            continue;
        calib_apply(a->it.p, a->it.n, power_for(f->served, ts, t, a->it.n), q);
        size_t top = metrics_top(q, a->it.n);
        sum += metrics_nll(q, a->it.target, a->it.n, a->it.gold);
        metrics_calib_add(&mc, q[top], top == a->it.gold);
        n++;
    }
    *nll = n ? sum / (double)n : NAN;
    *ece = n ? metrics_calib_ece(&mc) : NAN;
}

static void group_name(const struct calibrate_group *g, char *out, size_t cap) {
    if (g->bucket < 0)
        snprintf(out, cap, "%s", s1q_type_name(g->type));
    else
        snprintf(out, cap, "%s.%s", s1q_type_name(g->type),
                 calib_bucket_name((size_t)g->bucket));
}

/* A question with this many options falls in bucket b. */
static size_t bucket_probe(size_t b) { return b == 0 ? 2 : b == 1 ? 3 : b == 2 ? 6 : 11; }

/* The group's temperature in ts: the type's key, or what its bucket uses. */
static double group_temp(const struct calibrate_group *g, const struct calib_temps *ts) {
    const char *type = s1q_type_name(g->type);
    return g->bucket < 0 ? calib_temps_get(ts, type)
                         : calib_temps_lookup(ts, type, bucket_probe((size_t)g->bucket));
}

/* Fits the group on the training answers into the candidate table cand (a
 * copy of now, updated), measures the held-out split at now and at cand,
 * and adopts cand when its NLL is lower. A bucket's new temperature is its
 * served one over a: the fit is against the served answers. */
static void fit_group(struct fitter *f, struct calibrate_group *g) {
    const char *type = s1q_type_name(g->type);
    struct calib_temps *now = &f->out->now, cand = *now;
    g->a = calib_fit(f->scratch, select_items(f, g->type, g->bucket, false));
    g->fitted = true;
    bool ok = g->bucket < 0
                  ? calib_temps_scale_type(&cand, type, g->a)
                  : calib_temps_set_bucket(&cand, type, (size_t)g->bucket,
                                           group_temp(g, f->served) / g->a);
    g->t_old = group_temp(g, now);
    g->t_new = group_temp(g, &cand);
    held_metrics(f, g->type, g->bucket, now, &g->nll_before, &g->ece_before);
    held_metrics(f, g->type, g->bucket, &cand, &g->nll_after, &g->ece_after);
    g->kept = ok && g->t_new > 0 && g->nll_after < g->nll_before;
    if (g->kept)
        *now = cand;
    else if (!ok || !(g->t_new > 0))
        snprintf(g->note, sizeof g->note, "the temperature %g cannot be written", g->t_new);
    else
        snprintf(g->note, sizeof g->note, "held-out NLL %.3f -> %.3f", g->nll_before,
                 g->nll_after);
}

static struct calibrate_group *add_group(struct fitter *f, enum s1q_type t, int bucket) {
    struct calibrate_group *g = &f->out->groups[f->out->n_groups++];
    *g = (struct calibrate_group){.type = t, .bucket = bucket, .a = NAN, .t_old = NAN,
                                  .t_new = NAN, .nll_before = NAN, .nll_after = NAN,
                                  .ece_before = NAN, .ece_after = NAN};
    g->n_train = select_items(f, t, bucket, false);
    g->n_held = select_items(f, t, bucket, true);
    return g;
}

/* The bucket fits of type t: buckets with min_bucket answers in both
 * splits, when the type's answers span more than one bucket. */
static void fit_buckets(struct fitter *f, enum s1q_type t) {
    size_t used = 0, n[CALIB_BUCKETS][2] = {{0}};
    for (size_t i = 0; i < f->n_ans; i++)
        if (f->ans[i].type == t)
            n[f->ans[i].bucket][f->ans[i].held]++;
    for (size_t b = 0; b < CALIB_BUCKETS; b++)
        used += n[b][0] + n[b][1] > 0;
    for (size_t b = 0; used > 1 && b < CALIB_BUCKETS; b++)
        if (n[b][0] >= f->min_bucket && n[b][1] >= f->min_bucket)
            fit_group(f, add_group(f, t, (int)b));
}

/* Every type with answers, then its buckets. */
static void fit_all(struct fitter *f) {
    f->out->now = *f->served;
    for (int t = 0; t < S1Q_TYPE_COUNT; t++) {
        struct calibrate_group *g = add_group(f, (enum s1q_type)t, -1);
        if (!g->n_train && !g->n_held) {
            f->out->n_groups--;
            continue;
        }
        if (g->n_train < CALIBRATE_MIN_TYPE_TRAIN || g->n_held < CALIBRATE_MIN_TYPE_HELD) {
            snprintf(g->note, sizeof g->note, "too few answers: %zu training and %zu held-out, "
                     "a fit needs %d and %d", g->n_train, g->n_held, CALIBRATE_MIN_TYPE_TRAIN,
                     CALIBRATE_MIN_TYPE_HELD);
            continue;
        }
        fit_group(f, g);
        f->out->n_fitted++;
        fit_buckets(f, (enum s1q_type)t);
    }
}

tandem_err calibrate_fit(const struct calib_temps *served, const struct calibrate_answer *ans,
                         size_t n_ans, unsigned min_bucket, struct calibrate_fit *out) {
    struct fitter f = {.served = served, .ans = ans, .n_ans = n_ans, .min_bucket = min_bucket,
                       .out = out};
    f.scratch = mem_alloc_array(n_ans ? n_ans : 1, sizeof *f.scratch);
    if (!f.scratch)
        return TANDEM_ERR_NOMEM;
    out->n_groups = out->n_fitted = 0;
    fit_all(&f);
    mem_free(f.scratch);
    return TANDEM_OK;
}

/* --- the summary ------------------------------------------------------------------- */

json_t *calibrate_group_json(const struct calibrate_group *g) {
    char name[64];
    group_name(g, name, sizeof name);
    return json_pack("{s:s,s:s,s:o,s:I,s:I,s:b,s:o,s:o,s:o,s:b,s:o,s:o,s:o,s:o,s:o}", "group",
                     name, "type", s1q_type_name(g->type), "bucket",
                     g->bucket < 0 ? json_null()
                                   : json_string(calib_bucket_name((size_t)g->bucket)),
                     "n_train", (json_int_t)g->n_train, "n_held", (json_int_t)g->n_held,
                     "fitted", g->fitted, "a", number(g->a), "t_old", number(g->t_old),
                     "t_new", number(g->t_new), "kept", g->kept, "nll_before",
                     number(g->nll_before), "nll_after", number(g->nll_after), "ece_before",
                     number(g->ece_before), "ece_after", number(g->ece_after), "note",
                     *g->note ? json_string(g->note) : json_null());
}

json_t *calibrate_written_json(const char *arch, const struct calib_temps *now) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < now->n; i++) {
        const struct calib_temp *t = &now->t[i];
        char key[256];
        snprintf(key, sizeof key, "%s.decision.temperature.%s", arch, t->suffix);
        if (t->changed)
            json_object_set_new(o, key, json_real((double)t->written));
    }
    return o;
}

/* One calibration in progress. */
struct cal {
    const struct calibrate_params *p;
    struct calibrate_result *res;
    struct eval_params eval;         /* p->eval, pointed at the endpoint */
    char spec[PATH_MAX + 8];         /* file:MODEL; the endpoint's model may point into it */
    struct model_endpoints *daemons; /* serving MODEL.gguf without an endpoint */
    struct calibrate_model m;
    char model_sha[HASH_SHA256_HEX_LEN + 1], data_sha[HASH_SHA256_HEX_LEN + 1];
    struct evalset *set;
    struct eval_run *run;
    bool *held;                      /* per case */
    size_t n_held_cases;
    struct calibrate_answer *ans;
    size_t n_ans;
    struct calibrate_fit fit;
};

static json_t *question_prediction(const struct cal *k, size_t c, size_t q) {
    const struct evalset_question *qq = &k->set->cases[c].q[q];
    double p[S1Q_MAX_CHOICE_OPTIONS + 1];
    calib_apply(eval_run_dist(k->run, c, 0, q), qq->n_options,
                power_for(&k->m.temps, &k->fit.now, qq->type, qq->n_options), p);
    json_t *options = json_array(), *probs = json_array();
    for (size_t i = 0; i < qq->n_options; i++) {
        json_array_append_new(options, json_string(qq->options[i]));
        json_array_append_new(probs, json_real(p[i]));
    }
    return json_pack("{s:s,s:s,s:s,s:o,s:o}", "case", k->set->cases[c].id, "question", qq->id,
                     "type", s1q_type_name(qq->type), "options", options, "p", probs);
}

/* What the copy will serve for every question of the set, in dataset order. */
static json_t *predictions_json(const struct cal *k) {
    json_t *a = json_array();
    for (size_t c = 0; a && c < k->set->n_cases; c++)
        for (size_t q = 0; q < k->set->cases[c].n_questions; q++)
            json_array_append_new(a, question_prediction(k, c, q));
    return a;
}

static void split_text(const struct cal *k, char *out, size_t cap) {
    snprintf(out, cap, "seed %u, held-out %g: %zu of %zu cases", k->p->seed, k->p->holdout,
             k->n_held_cases, k->set->n_cases);
}

/* The documented --json object; the provenance keys are taken from it. */
static json_t *summary_json(const struct cal *k) {
    char split[160];
    split_text(k, split, sizeof split);
    json_t *groups = json_array();
    for (size_t i = 0; groups && i < k->fit.n_groups; i++)
        json_array_append_new(groups, calibrate_group_json(&k->fit.groups[i]));
    const struct calibrate_params *p = k->p;
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:s,s:I,s:I,"
                     "s:{s:I,s:f,s:I,s:s},s:f,s:o,s:o,s:s,s:o}",
                     "format", "tandem-calibrate/1", "model", p->model, "model_sha256",
                     k->model_sha, "architecture", k->m.arch, "decision_type", k->m.dtype,
                     "endpoint", k->run->url, "served_model",
                     k->eval.model ? json_string(k->eval.model) : json_null(), "data", p->data,
                     "data_sha256", k->data_sha, "cases", (json_int_t)k->set->n_cases,
                     "questions", (json_int_t)k->set->n_questions, "split", "seed",
                     (json_int_t)p->seed, "holdout", p->holdout, "held_out_cases",
                     (json_int_t)k->n_held_cases, "text", split, "seconds", k->run->seconds,
                     "groups", groups, "written", calibrate_written_json(k->m.arch, &k->fit.now),
                     "out", p->out, "predictions", predictions_json(k));
}

/* --- the copy ---------------------------------------------------------------------- */

static tandem_err set_str(struct gguf_edit *e, const char *key, const char *value, char *err,
                          size_t errlen) {
    size_t len = strlen(key) + strlen(value) + 8;
    char *spec = mem_alloc(len);
    if (!spec)
        return TANDEM_ERR_NOMEM;
    snprintf(spec, len, "%s=str:%s", key, value);
    tandem_err rc = gguf_edit_set_spec(e, spec, err, errlen);
    mem_free(spec);
    return rc;
}

/* The tandem.calibration.* keys, from the summary. */
static tandem_err set_provenance(struct gguf_edit *e, const json_t *s, char *err,
                                 size_t errlen) {
    char *metrics = json_dumps(json_object_get(s, "groups"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    const char *str = json_string_value(json_object_get(json_object_get(s, "split"), "text"));
    const char *keys[][2] = {
        {"tandem.calibration.tool", "tandem calibrate " TANDEM_VERSION},
        {"tandem.calibration.source_sha256", json_string_value(json_object_get(s, "model_sha256"))},
        {"tandem.calibration.data", host_base_name(json_string_value(json_object_get(s, "data")))},
        {"tandem.calibration.data_sha256", json_string_value(json_object_get(s, "data_sha256"))},
        {"tandem.calibration.split", str},
        {"tandem.calibration.metrics", metrics ? metrics : "[]"},
    };
    tandem_err rc = metrics ? TANDEM_OK : TANDEM_ERR_NOMEM;
    for (size_t i = 0; rc == TANDEM_OK && i < sizeof keys / sizeof keys[0]; i++)
        rc = set_str(e, keys[i][0], keys[i][1], err, errlen);
    free(metrics);
    return rc;
}

tandem_err calibrate_write(const struct calibrate_model *m, const struct calib_temps *now,
                           const json_t *summary, const char *out, char *err, size_t errlen) {
    char why[1024] = "", spec[320];
    struct gguf_edit *e = NULL;
    tandem_err rc = gguf_edit_new(m->g, &e);
    for (size_t i = 0; rc == TANDEM_OK && i < now->n; i++) {
        const struct calib_temp *t = &now->t[i];
        if (!t->changed)
            continue;
        snprintf(spec, sizeof spec, "%s.decision.temperature.%s=f32:%.9g", m->arch, t->suffix,
                 (double)t->written);
        rc = gguf_edit_set_spec(e, spec, why, sizeof why);
    }
    if (rc == TANDEM_OK)
        rc = set_provenance(e, summary, why, sizeof why);
    if (rc == TANDEM_OK)
        rc = gguf_edit_write(e, out, why, sizeof why);
    gguf_edit_free(e);
    if (rc != TANDEM_OK)
        tandem_errmsg(err, errlen, "%s: %s", out, *why ? why : tandem_strerror(rc));
    return rc;
}

/* --- the run ----------------------------------------------------------------------- */

/* Appends one line to d: "PREFIX: " (when prefix is not NULL), fmt, "\n". The
 * line is dropped when memory or the diag's maximum runs out. */
static void diag_line(struct mem_buf *d, const char *prefix, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *line = n >= 0 ? mem_alloc((size_t)n + 1) : NULL;
    if (line) {
        vsnprintf(line, (size_t)n + 1, fmt, again);
        bool ok = !prefix || (!mem_buf_append(d, prefix, strlen(prefix)) &&
                              !mem_buf_append(d, ": ", 2));
        if (ok && !mem_buf_append(d, line, (size_t)n))
            mem_buf_append(d, "\n", 1);
    }
    va_end(again);
    mem_free(line);
}

/* Appends one line to the diag, "COMMAND: " first when prefixed. */
__attribute__((format(printf, 3, 4))) static void say(struct cal *k, bool prefixed,
                                                      const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    diag_line(&k->res->diag, prefixed ? k->p->command : NULL, fmt, ap);
    va_end(ap);
}

/* Says "COMMAND: err" when e failed; returns e. */
static tandem_err said(struct cal *k, tandem_err e, const char *err) {
    if (e)
        say(k, true, "%s", err);
    return e;
}

/* out names the model file itself: TANDEM_ERR_INVAL, said. */
static tandem_err refuse_same_file(struct cal *k) {
    const char *model = k->p->model, *out = k->p->out;
    struct stat a, b;
    if (strcmp(model, out) && (stat(model, &a) || stat(out, &b) || a.st_dev != b.st_dev ||
                               a.st_ino != b.st_ino))
        return TANDEM_OK;
    say(k, true, "--out %s is the model itself; write the calibrated copy to another file", out);
    return TANDEM_ERR_INVAL;
}

/* Reads the model and hashes it and a data file (so that an unreadable one is
 * said before anything is served); a store's export is hashed as it loads. */
static tandem_err read_inputs(struct cal *k) {
    char err[1024];
    bool cached;
    tandem_err e = said(k, calibrate_model_open(k->p->model, &k->m, err, sizeof err), err);
    if (e || (e = refuse_same_file(k)))
        return e;
    e = hash_file_sha256_cached(k->p->model, k->model_sha, &cached, err, sizeof err);
    if (!e && !dataset_is_store(k->p->data))
        e = hash_file_sha256(k->p->data, k->data_sha, err, sizeof err);
    return said(k, e, err);
}

/* Points the run at p->eval.endpoint, or at the model itself on a private
 * daemon (file:MODEL.gguf). The endpoint says its own failures on stderr. */
static tandem_err start_endpoint(struct cal *k) {
    snprintf(k->spec, sizeof k->spec, "file:%s", k->p->model);
    struct model_endpoint ep = {.flag = "--endpoint",
                                .spec = k->eval.endpoint ? k->eval.endpoint : k->spec,
                                .model = k->eval.model};
    struct model_endpoints_params mp = {.command = k->p->command, .no_config = true,
                                        .llama_server = k->p->llama_server};
    tandem_err e = model_endpoints_start(&mp, &ep, 1, &k->daemons);
    k->eval.endpoint = ep.url;
    k->eval.model = ep.model;
    k->res->endpoint_refused = e == TANDEM_ERR_INVAL;
    return e == TANDEM_OK || e == TANDEM_ERR_INVAL ? e : TANDEM_ERR_SPAWN;
}

/* Says each failed request; TANDEM_ERR_HTTP when any failed. */
static tandem_err check_answers(struct cal *k) {
    for (size_t c = 0; c < k->set->n_cases && k->run->n_errors; c++) {
        const struct eval_answer *a = eval_run_answer(k->run, c, 0);
        if (a->status != TANDEM_OK)
            say(k, true, "case %s (line %zu): %s", k->set->cases[c].id, k->set->cases[c].line,
                a->error ? a->error : tandem_strerror(a->status));
    }
    if (!k->run->n_errors)
        return TANDEM_OK;
    say(k, true, "%zu of %zu requests failed; a fit needs every answer", k->run->n_errors,
        k->set->n_cases);
    return TANDEM_ERR_HTTP;
}

/* Loads the set and runs it once; every request must be answered. */
static tandem_err run_set(struct cal *k) {
    char *err = mem_alloc(RUN_ERR_MAX);
    if (!err)
        return said(k, TANDEM_ERR_NOMEM, "out of memory");
    bool store = dataset_is_store(k->p->data);
    tandem_err e = dataset_load(k->p->data, &(struct dataset_opts){.sha256 = store ? k->data_sha
                                                                                 : NULL},
                                &k->set, NULL, err, RUN_ERR_MAX);
    if (e)
        say(k, false, "%s", err);
    else if ((e = eval_run_new(k->set, &k->eval, &k->run, err, RUN_ERR_MAX)))
        say(k, true, "%s", err);
    mem_free(err);
    return e ? e : check_answers(k);
}

/* The scored answers of the run, with the split. */
static tandem_err collect_answers(struct cal *k) {
    const struct evalset *set = k->set;
    k->ans = mem_alloc_array(set->n_gold ? set->n_gold : 1, sizeof *k->ans);
    k->held = mem_calloc(set->n_cases, sizeof *k->held);
    if (!k->ans || !k->held)
        return said(k, TANDEM_ERR_NOMEM, "out of memory");
    k->n_held_cases = calib_split(set->n_cases, k->p->holdout, k->p->seed, k->held);
    for (size_t c = 0; c < set->n_cases; c++)
        for (size_t q = 0; q < set->cases[c].n_questions; q++) {
            const struct evalset_question *qq = &set->cases[c].q[q];
            if (!qq->has_gold)
                continue;
            k->ans[k->n_ans++] = (struct calibrate_answer){
                {eval_run_dist(k->run, c, 0, q), qq->target, qq->n_options, qq->gold},
                qq->type, calib_bucket(qq->n_options), k->held[c]};
        }
    return TANDEM_OK;
}

/* Fits; says why nothing could be fitted (TANDEM_ERR_RANGE). */
static tandem_err fit(struct cal *k) {
    if (calibrate_fit(&k->m.temps, k->ans, k->n_ans, k->p->min_bucket, &k->fit))
        return said(k, TANDEM_ERR_NOMEM, "out of memory");
    if (k->fit.n_fitted)
        return TANDEM_OK;
    say(k, true, "%s: no question type can be fitted:", k->p->data);
    for (size_t i = 0; i < k->fit.n_groups; i++)
        say(k, false, "  %s: %s", s1q_type_name(k->fit.groups[i].type),
            k->fit.groups[i].note);
    if (!k->fit.n_groups)
        say(k, false, "  no question has a gold answer");
    return TANDEM_ERR_RANGE;
}

/* Builds the summary and writes the copy from it. */
static tandem_err summarise_and_write(struct cal *k) {
    char err[PATH_MAX + 1100];
    json_t *summary = summary_json(k);
    if (!summary)
        return said(k, TANDEM_ERR_NOMEM, "out of memory");
    tandem_err e = calibrate_write(&k->m, &k->fit.now, summary, k->p->out, err, sizeof err);
    if (e)
        json_decref(summary);
    else
        k->res->summary = summary;
    return said(k, e, err);
}

static tandem_err calibrate(struct cal *k) {
    tandem_err e = read_inputs(k);
    if (!e)
        e = start_endpoint(k);
    if (!e)
        e = run_set(k);
    if (!e)
        e = collect_answers(k);
    if (!e)
        e = fit(k);
    if (!e)
        e = summarise_and_write(k);
    return e;
}

tandem_err calibrate_run(const struct calibrate_params *p, struct calibrate_result *out) {
    *out = (struct calibrate_result){0};
    mem_buf_init(&out->diag, DIAG_MAX);
    struct cal *k = mem_calloc(1, sizeof *k);
    if (!k) {
        mem_buf_append(&out->diag, p->command, strlen(p->command));
        mem_buf_append(&out->diag, ": out of memory\n", 16);
        return TANDEM_ERR_NOMEM;
    }
    k->p = p;
    k->res = out;
    k->eval = p->eval;
    tandem_err e = calibrate(k);
    eval_run_free(k->run);
    evalset_free(k->set);
    calibrate_model_close(&k->m);
    mem_free(k->ans);
    mem_free(k->held);
    model_endpoints_free(k->daemons);
    mem_free(k);
    return e;
}
