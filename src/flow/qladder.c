/* qladder.c: the quantization ladder's run: the smallest quantization that keeps the decisions.
 *
 * The steps, each reusing the module that owns it:
 *   1. the source and the rungs (qladder_rungs.c): checked, sized by the
 *      engine's dry run and planned beside the partners by the placement
 *      search (qladder_plan); a rung that does not fit is never built;
 *   2. the reference answers the held-out cases once (a private daemon on
 *      file:SRC); too few sure answers to tell --max-flip-rate from zero at
 *      95% stops the ladder before anything is built;
 *   3. the importance matrix (--imatrix auto) comes from the calibration
 *      cases only (flow/imatrix), so no rung is judged on the text that shaped
 *      it;
 *   4. the search (eval/ladder) bisects over the fitting rungs; each judged
 *      rung is built atomically (cached by its inputs' hashes, qladder_cache,
 *      so a rerun resumes), served by the real engine, and compared with the
 *      reference by drift_compare. The gate: the Wilson 95% upper bound
 *      of the flip rate among answers the reference held with a margin >=
 *      --margin is at most --max-flip-rate. At or below 4 bits, auto builds
 *      the rung with and without the matrix and keeps the matrix only where
 *      it flipped fewer sure answers;
 *   5. one JSON summary (tandem-ladder/1), from which the command renders the
 *      table, --json, --report and --write-config.
 * Messages go to stderr as the command's own, prefixed "tandem quantize
 * --ladder: "; progress goes to the caller's callback. */
#include "flow/qladder.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/host.h"
#include "base/mem.h"
#include "eval/drift.h"
#include "eval/summary.h"
#include "flow/dataset.h"
#include "flow/imatrix.h"
#include "engine/engine.h"
#include "proto/metrics.h"
#include "flow/model_endpoint.h"
#include "flow/qladder_cache.h"
#include "flow/qladder_int.h"
#include "version.h"

#define ERR_PREFIX "tandem quantize --ladder: "

struct qladder_params qladder_default_params(void) {
    return (struct qladder_params){.imatrix = "auto", .types = QLADDER_DEFAULT_TYPES,
                                   .max_flip = 0.02, .margin = 0.1, .share = 0.5, .repeat = 1,
                                   .timeout_s = 120,
                                   .plan = {.settings = plan_default_settings()}};
}

/* --- progress --------------------------------------------------------------------------------- */

double qladder_now(void) { return (double)host_now_ms() / 1000.0; }

/* The rung, the phase, the time so far and, once a rung was judged, the time
 * the rest of the search should take (the judgements it may still need, at
 * the mean time of those done). */
void qladder_progress(const struct qladder *L, const char *type, const char *phase) {
    if (!L->o.progress)
        return;
    size_t left = 0;
    double eta = 0;
    if (L->n_judged) {
        left = L->o.all ? ladder_pending(L->states, L->n_rungs)
                        : ladder_remaining(L->states, L->n_rungs);
        eta = L->judge_seconds / (double)L->n_judged * (double)left;
    }
    L->o.progress(L->o.progress_user, type, phase, qladder_now() - L->t0, left, eta);
}

void qladder_progress_end(const struct qladder *L) {
    if (L->o.progress)
        L->o.progress(L->o.progress_user, NULL, NULL, qladder_now() - L->t0, 0, 0);
}

struct engine_quant_params qladder_quant_params(const struct qladder *L, const char *type,
                                                const char *imatrix, const char *log,
                                                const char *const *overrides) {
    return (struct engine_quant_params){
        .tool = L->tool, .src = L->o.src, .type = type, .imatrix = imatrix,
        .tensor_types = (const char *const *)L->protect, .overrides = overrides,
        .allow_requantize = strcmp(L->src_type, "F32") && strcmp(L->src_type, "F16") &&
                            strcmp(L->src_type, "BF16"),
        .log_path = log};
}

/* --- the cases -------------------------------------------------------------------------------- */

/* Loads --data (an eval set, an audit log or the store's traffic) and hashes it. */
static int load_cases(struct qladder *L) {
    static char err[16 * 1024];
    struct dataset_opts d = {.config_path = L->o.plan.config, .audit_ok = true,
                             .sha256 = L->data_sha};
    if (dataset_load(L->o.data, &d, &L->set, NULL, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", err);
        return 1;
    }
    return 0;
}

/* Splits the cases when an importance matrix is to be built or used: the
 * calibration share is never judged. Without one, every case is judged. */
static int split_cases(struct qladder *L, bool with_imatrix) {
    L->calibration = mem_calloc(L->set->n_cases, sizeof *L->calibration);
    L->judged.cases = mem_alloc_array(L->set->n_cases, sizeof *L->judged.cases);
    if (!L->calibration || !L->judged.cases) {
        fprintf(stderr, ERR_PREFIX "out of memory\n");
        return 1;
    }
    if (with_imatrix)
        evalset_split(L->set, L->o.seed, L->o.share, L->calibration);
    L->judged.path = L->set->path;
    for (size_t c = 0; c < L->set->n_cases; c++) {
        const struct evalset_case *cs = &L->set->cases[c];
        if (L->calibration[c]) {
            L->n_calibration++;
            continue;
        }
        L->judged.cases[L->judged.n_cases++] = *cs; /* a view: shares the case's contents */
        L->judged.n_questions += cs->n_questions;
        for (size_t q = 0; q < cs->n_questions; q++)
            L->judged.n_gold += cs->q[q].has_gold;
    }
    if (!L->judged.n_cases) {
        fprintf(stderr, ERR_PREFIX "%s: no case is left to judge after the "
                        "calibration share %.2f; lower --calibration-share\n",
                L->o.data, L->o.share);
        return 1;
    }
    return 0;
}

/* --- judging ---------------------------------------------------------------------------------- */

struct judge_progress {
    const struct qladder *L;
    const char *type;
};

static void on_eval_progress(void *user, size_t done, size_t total, double elapsed) {
    struct judge_progress *jp = user;
    char phase[96];
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    long left = rate > 0 ? (long)((double)(total - done) / rate + 0.5) : -1;
    if (left >= 0)
        snprintf(phase, sizeof phase, "judge %zu/%zu, this rung's ETA %ld:%02ld", done, total,
                 left / 60, left % 60);
    else
        snprintf(phase, sizeof phase, "judge %zu/%zu", done, total);
    qladder_progress(jp->L, jp->type, phase);
}

/* Serves path (a private daemon on file:path) and sends the judged cases. */
static tandem_err serve_and_run(struct qladder *L, const char *path, const char *label,
                                struct eval_run **out, char *err, size_t errlen) {
    char spec[PATH_MAX + 8];
    snprintf(spec, sizeof spec, "file:%s", path);
    struct model_endpoint ep = {.flag = label, .spec = spec};
    struct model_endpoints_params mp = {.command = "tandem quantize --ladder", .no_config = true,
                                        .llama_server = L->o.llama_server,
                                        .verbose = L->o.verbose};
    struct model_endpoints *d = NULL;
    if (model_endpoints_start(&mp, &ep, 1, &d) != TANDEM_OK) {
        tandem_errmsg(err, errlen, "the engine could not serve %s (its log is above)", path);
        return TANDEM_ERR_CHILD;
    }
    struct eval_params p = eval_default_params();
    struct judge_progress jp = {L, label};
    p.endpoint = ep.url;
    p.model = ep.model;
    p.repeat = L->o.repeat;
    p.timeout_ms = (long)L->o.timeout_s * 1000;
    p.progress = L->o.progress ? on_eval_progress : NULL;
    p.progress_user = &jp;
    tandem_err e = eval_run_new(&L->judged, &p, out, err, errlen);
    model_endpoints_free(d);
    return e;
}

/* The first failed request's message, for a run whose every request failed. */
static const char *first_error(const struct eval_run *run) {
    for (size_t c = 0; c < run->set->n_cases; c++) {
        const struct eval_answer *a = eval_run_answer(run, c, 0);
        if (a->status != TANDEM_OK)
            return a->error ? a->error : tandem_strerror(a->status);
    }
    return "no error";
}

/* The reference answers once; too few sure answers stop the ladder here. */
static int judge_reference(struct qladder *L) {
    char err[1024];
    qladder_progress(L, "reference", "serve");
    tandem_err e = serve_and_run(L, L->o.src, "reference", &L->ref, err, sizeof err);
    if (e != TANDEM_OK) {
        qladder_progress_end(L);
        fprintf(stderr, ERR_PREFIX "the reference: %s\n", err);
        return 1;
    }
    if (L->ref->n_errors == L->judged.n_cases * L->o.repeat) {
        qladder_progress_end(L);
        fprintf(stderr, ERR_PREFIX "%s cannot answer the questions of %s: %s\n",
                L->o.src, L->o.data, first_error(L->ref));
        return 1;
    }
    size_t correct = 0, gold = 0;
    for (size_t c = 0; c < L->judged.n_cases; c++)
        for (size_t q = 0; q < L->judged.cases[c].n_questions; q++) {
            const struct evalset_question *qq = &L->judged.cases[c].q[q];
            const double *p = eval_run_dist(L->ref, c, 0, q);
            if (!p)
                continue;
            L->ref_questions++;
            L->ref_sure += metrics_margin(p, qq->n_options) >= L->o.margin;
            if (qq->has_gold) {
                gold++;
                correct += metrics_top(p, qq->n_options) == qq->gold;
            }
        }
    L->ref_accuracy = gold ? (double)correct / (double)gold : NAN;
    size_t need = metrics_min_trials_for_rate(L->o.max_flip);
    if (L->ref_sure < need) {
        double z2 = METRICS_Z95 * METRICS_Z95;
        qladder_progress_end(L);
        if (!L->ref_sure) {
            fprintf(stderr, ERR_PREFIX "too few cases: the reference holds none "
                            "of the %zu held-out answers with a margin >= %g; lower --margin or "
                            "add cases to %s\n", L->ref_questions, L->o.margin, L->o.data);
            return 1;
        }
        fprintf(stderr,
                ERR_PREFIX "too few cases: the reference holds %zu of the %zu "
                "held-out answers with a margin >= %g, and telling a flip rate of %g from zero "
                "at 95%% needs at least %zu; add cases to %s, or raise --max-flip-rate to at "
                "least %.3f\n",
                L->ref_sure, L->ref_questions, L->o.margin, L->o.max_flip, need, L->o.data,
                z2 / ((double)L->ref_sure + z2) + 0.0005);
        return 1;
    }
    if (L->ref->n_errors) {
        qladder_progress_end(L);
        fprintf(stderr, ERR_PREFIX "the reference failed %zu requests; their "
                        "questions are skipped: %s\n", L->ref->n_errors, first_error(L->ref));
    }
    return 0;
}

/* --- building and judging a rung ------------------------------------------------------------- */

static void variant_path(const struct qladder *L, const struct qladder_rung *r, const struct qladder_variant *v,
                         char *out, size_t cap) {
    snprintf(out, cap, "%.3800s/%s-%s%s.gguf", L->out_dir, L->stem, r->type,
             v->imatrix ? "-imatrix" : "");
}

/* Builds v (unless the cache has it) with its provenance in its metadata. */
static tandem_err build_variant(struct qladder *L, struct qladder_rung *r, struct qladder_variant *v,
                                const char *key, json_t **side, char *err, size_t errlen) {
    if ((*side = qladder_cache_load(v->path, key)))
        return TANDEM_OK;
    char kv[6][200], log[PATH_MAX + 16];
    const char *ov[7];
    size_t n = 0;
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.source_sha256=str:%s", L->src_sha);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.type=str:%s", r->type);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.engine_build=int:%d", TANDEM_ENGINE_BUILD);
    snprintf(kv[n++], sizeof kv[0], "tandem.quantize.protected=str:%.120s", L->protect_note);
    if (v->imatrix) {
        snprintf(kv[n++], sizeof kv[0], "tandem.quantize.imatrix_sha256=str:%s", L->imatrix_sha);
        snprintf(kv[n++], sizeof kv[0], "tandem.quantize.imatrix_data=str:%.100s",
                 host_base_name(L->o.data));
    }
    for (size_t i = 0; i < n; i++)
        ov[i] = kv[i];
    ov[n] = NULL;
    snprintf(log, sizeof log, "%s.log", v->path);
    struct engine_quant_params p =
        qladder_quant_params(L, r->type, v->imatrix ? L->imatrix : NULL, log, ov);
    qladder_progress(L, r->type, v->imatrix ? "quantize with the importance matrix" : "quantize");
    tandem_err e = engine_quant_build(&p, v->path, err, errlen);
    if (e != TANDEM_OK) {
        size_t n = strlen(err);
        if (snprintf(err + n, errlen - n, " (the whole log: %s)", log) < 0)
            err[n] = '\0';
        return e;
    }
    unlink(log);
    *side = json_pack("{s:s,s:{}}", "build", key, "judged");
    return *side ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

/* The figures the table and the gate need, from a drift summary. */
static json_t *figures_of(const json_t *drift, double ref_accuracy) {
    static const char *const keep[] = {"compared", "flips", "flip_rate", "flip_ci95",
                                       "sure_compared", "sure_flips", "sure_flip_rate",
                                       "sure_ci95", "unstable", "kl_mean", "kl_max",
                                       "max_dp_max", "skipped"};
    json_t *f = json_object();
    for (size_t i = 0; f && i < sizeof keep / sizeof *keep; i++)
        json_object_set(f, keep[i], json_object_get(drift, keep[i]));
    const json_t *acc = json_object_get(json_object_get(drift, "cand"), "accuracy");
    json_object_set_new(f, "delta_accuracy",
                        summary_number(json_is_number(acc) ? json_number_value(acc) - ref_accuracy
                                                            : NAN));
    return f;
}

/* Serves v and compares it with the reference. */
static tandem_err judge_variant(struct qladder *L, struct qladder_rung *r, struct qladder_variant *v,
                                json_t **figures, char *err, size_t errlen) {
    struct eval_run *run = NULL;
    tandem_err e = serve_and_run(L, v->path, r->type, &run, err, errlen);
    if (e != TANDEM_OK)
        return e;
    if (run->n_errors == L->judged.n_cases * L->o.repeat) {
        tandem_errmsg(err, errlen, "every request failed: %s", first_error(run));
        eval_run_free(run);
        return TANDEM_ERR_CHILD;
    }
    struct drift_options o = {.top = 0, .margin = L->o.margin};
    json_t *drift = drift_compare(L->ref, NULL, run, NULL, &o);
    eval_run_free(run);
    *figures = drift ? figures_of(drift, L->ref_accuracy) : NULL;
    json_decref(drift);
    return *figures ? TANDEM_OK : TANDEM_ERR_NOMEM;
}

/* The gate on judged figures: the sure flips' upper bound within --max-flip-rate. */
static void verdict(const struct qladder *L, struct qladder_variant *v) {
    const json_t *ci = json_object_get(v->judged, "sure_ci95");
    double hi = json_number_value(json_array_get(ci, 1));
    json_int_t k = json_integer_value(json_object_get(v->judged, "sure_flips"));
    json_int_t n = json_integer_value(json_object_get(v->judged, "sure_compared"));
    bool pass = json_is_number(json_array_get(ci, 1)) && hi <= L->o.max_flip;
    v->state = pass ? LADDER_PASS : LADDER_FAIL;
    snprintf(v->reason, sizeof v->reason,
             "%lld of %lld sure answers flipped; the 95%% upper bound %.1f%% is %s %.1f%%",
             (long long)k, (long long)n, 100 * hi, pass ? "within" : "above",
             100 * L->o.max_flip);
}

static void run_variant(struct qladder *L, struct qladder_rung *r, struct qladder_variant *v) {
    char key[HASH_SHA256_HEX_LEN + 1], jkey[HASH_SHA256_HEX_LEN + 1], err[600];
    double t0 = qladder_now();
    variant_path(L, r, v, v->path, sizeof v->path);
    struct qladder_judge_inputs in = {L->src_sha, L->data_sha, L->o.seed,
                                      L->n_calibration ? L->o.share : 0.0, L->o.repeat,
                                      L->o.margin};
    qladder_cache_build_key(L->src_sha, r->type, v->imatrix ? L->imatrix_sha : NULL, L->protect,
                            L->n_protect, key);
    qladder_cache_judge_key(key, &in, jkey);
    json_t *side = NULL;
    tandem_err e = build_variant(L, r, v, key, &side, err, sizeof err);
    if (e == TANDEM_OK) {
        json_t *judged = json_object_get(json_object_get(side, "judged"), jkey);
        v->cached = judged != NULL;
        if (judged) {
            v->judged = json_incref(judged);
        } else if ((e = judge_variant(L, r, v, &v->judged, err, sizeof err)) == TANDEM_OK) {
            json_object_set_new(v->judged, "seconds", json_real(qladder_now() - t0));
            json_object_set(json_object_get(side, "judged"), jkey, v->judged);
            char werr[PATH_MAX + 128];
            if (qladder_cache_save(v->path, side, werr, sizeof werr) != TANDEM_OK)
                fprintf(stderr, ERR_PREFIX "%s; a rerun judges again\n", werr);
        }
    }
    json_decref(side);
    /* a cached judgement reports what it cost when it was made */
    v->seconds = v->judged ? json_number_value(json_object_get(v->judged, "seconds"))
                           : qladder_now() - t0;
    if (e != TANDEM_OK) {
        v->state = LADDER_ERROR;
        snprintf(v->reason, sizeof v->reason, "%s", err);
        return;
    }
    verdict(L, v);
}

/* Judges every variant of r; the rung passes when one does. With both, the
 * matrix is kept only where it flipped fewer sure answers. */
static void judge_rung(struct qladder *L, size_t i) {
    struct qladder_rung *r = &L->rungs[i];
    bool any_pass = false, any_fail = false;
    for (size_t k = 0; k < r->n_variants; k++) {
        if (r->v[k].imatrix && !L->imatrix[0]) {
            r->v[k].state = LADDER_ERROR;
            snprintf(r->v[k].reason, sizeof r->v[k].reason, "no importance matrix: %.500s",
                     L->imatrix_note);
            continue;
        }
        run_variant(L, r, &r->v[k]);
        L->judge_seconds += r->v[k].seconds;
        any_pass |= r->v[k].state == LADDER_PASS;
        any_fail |= r->v[k].state == LADDER_FAIL;
    }
    L->states[i] = any_pass ? LADDER_PASS : any_fail ? LADDER_FAIL : LADDER_ERROR;
    L->n_judged++;
}

/* The variant to recommend of a rung: the one with fewer sure flips, the
 * plain one on a tie. */
static const struct qladder_variant *chosen(const struct qladder_rung *r) {
    const struct qladder_variant *best = NULL;
    for (size_t k = 0; k < r->n_variants; k++) {
        const struct qladder_variant *v = &r->v[k];
        if (v->state != LADDER_PASS && v->state != LADDER_FAIL)
            continue;
        if (!best || json_integer_value(json_object_get(v->judged, "sure_flips")) <
                         json_integer_value(json_object_get(best->judged, "sure_flips")))
            best = v;
    }
    return best;
}

/* --- the importance matrix -------------------------------------------------------------------- */

static void imatrix_progress(void *user, const char *phase, size_t done, size_t total) {
    const struct qladder *L = user;
    char text[96];
    if (total)
        snprintf(text, sizeof text, "importance matrix: %s %zu/%zu", phase, done, total);
    else
        snprintf(text, sizeof text, "importance matrix: %s", phase);
    qladder_progress(L, "imatrix", text);
}

/* Sets L->imatrix: FILE as given, or built from the calibration cases
 * (cached under a name from the source's and the data's hashes, the split
 * and the engine build). */
static int prepare_imatrix(struct qladder *L) {
    char err[1024];
    bool cached;
    if (strcmp(L->o.imatrix, "auto")) {
        snprintf(L->imatrix, sizeof L->imatrix, "%s", L->o.imatrix);
    } else {
        char key[HASH_SHA256_HEX_LEN + 1];
        qladder_cache_imatrix_key(L->src_sha, L->data_sha, L->o.seed, L->o.share, key);
        snprintf(L->imatrix, sizeof L->imatrix, "%.3800s/%s.imatrix-%.12s.gguf", L->out_dir,
                 L->stem, key);
        if (access(L->imatrix, R_OK) != 0) {
            struct imatrix_params p = imatrix_default_params();
            p.model = L->o.src, p.set = L->set, p.use = L->calibration, p.out = L->imatrix;
            p.llama_server = L->o.llama_server, p.data_name = L->o.data;
            p.split_seed = L->o.seed, p.split_share = L->o.share, p.verbose = L->o.verbose;
            p.progress = imatrix_progress, p.progress_user = L;
            double t0 = qladder_now();
            tandem_err e = imatrix_build(&p, NULL, err, sizeof err);
            L->imatrix_seconds = qladder_now() - t0;
            if (e != TANDEM_OK) {
                snprintf(L->imatrix_note, sizeof L->imatrix_note, "%.500s", err);
                qladder_progress_end(L);
                fprintf(stderr, ERR_PREFIX "no importance matrix: %s; the "
                                "ladder goes on without one\n", err);
                L->imatrix[0] = '\0';
                return 0;
            }
        }
    }
    if (hash_file_sha256_cached(L->imatrix, L->imatrix_sha, &cached, err, sizeof err)) {
        fprintf(stderr, ERR_PREFIX "--imatrix: %s\n", err);
        return 1;
    }
    snprintf(L->imatrix_note, sizeof L->imatrix_note, "%.500s", L->imatrix);
    return 0;
}

/* Whether a rung the search may judge wants the matrix. */
static bool wants_imatrix(const struct qladder *L) {
    for (size_t i = 0; i < L->n_rungs; i++) {
        const struct qladder_rung *r = &L->rungs[i];
        if (L->states[i] != LADDER_NO_FIT && (r->n_variants == 2 || r->v[0].imatrix))
            return true;
    }
    return false;
}

/* --- the summary ------------------------------------------------------------------------------ */

static const char *state_name(enum ladder_state s) {
    switch (s) {
    case LADDER_PASS: return "passed";
    case LADDER_FAIL: return "failed";
    case LADDER_ERROR: return "error";
    case LADDER_NO_FIT: return "does not fit";
    default: return "skipped";
    }
}

static json_t *bytes_or_null(bool have, uint64_t b) {
    return have ? json_integer((json_int_t)b) : json_null();
}

static json_t *fallbacks_json(const struct engine_quant_size *s) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n_fallbacks; i++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "tensor", s->fallbacks[i].tensor,
                                           "wanted", s->fallbacks[i].wanted, "got",
                                           s->fallbacks[i].got));
    return a;
}

static const char *const figure_keys[] = {
    "compared", "flips", "flip_rate", "flip_ci95", "sure_compared", "sure_flips",
    "sure_flip_rate", "sure_ci95", "unstable", "kl_mean", "kl_max", "delta_accuracy"};

/* Where each partner runs beside r: null without partners, or when r does not fit. */
static json_t *partner_device_json(const struct qladder *L, const struct qladder_rung *r) {
    if (!L->plan.n_partners || !r->fit.fits)
        return json_null();
    json_t *a = json_array();
    for (size_t i = 0; a && i < L->plan.n_partners; i++)
        json_array_append_new(a, json_string(r->fit.partner_device[i]));
    return a;
}

/* One table row: variant v of rung r, whose search state is st. */
static json_t *variant_json(const struct qladder *L, const struct qladder_rung *r,
                            enum ladder_state st, const struct qladder_variant *v) {
    bool judged = v->judged != NULL;
    const char *status = st == LADDER_NO_FIT                   ? "does not fit"
                         : judged || v->state == LADDER_ERROR ? state_name(v->state)
                         : L->o.plan_only                     ? "fits"
                                                              : "skipped";
    const char *reason = st == LADDER_NO_FIT ? r->fit.reason
                         : v->reason[0]       ? v->reason
                         : r->skipped[0]      ? r->skipped
                                              : NULL;
    json_t *j = json_pack(
        "{s:s,s:b,s:I,s:f,s:f,s:I,s:o,s:b,s:o,s:o,s:o,s:s,s:o,s:o,s:o}", "type", r->type,
        "imatrix", v->imatrix, "bytes", (json_int_t)r->size.bytes, "mib",
        (double)r->size.bytes / QLADDER_MIB, "bpw", r->size.bpw, "vram_alone",
        (json_int_t)r->fit.mem_alone, "vram_pair",
        bytes_or_null(L->plan.n_partners > 0, r->fit.mem_pair), "fits", r->fit.fits,
        "partner_device", partner_device_json(L, r), "placement",
        r->fit.fits ? json_string(r->fit.placement) : json_null(), "fallbacks",
        fallbacks_json(&r->size), "status", status, "reason",
        reason ? json_string(reason) : json_null(), "seconds",
        judged || v->state == LADDER_ERROR ? json_real(v->seconds) : json_null(), "path",
        v->path[0] && (judged || v->cached) ? json_string(v->path) : json_null());
    for (size_t i = 0; j && i < sizeof figure_keys / sizeof *figure_keys; i++) {
        json_t *x = judged ? json_object_get(v->judged, figure_keys[i]) : NULL;
        json_object_set(j, figure_keys[i], x ? x : json_null());
    }
    json_object_set(j, "max_dp", judged ? json_object_get(v->judged, "max_dp_max") : json_null());
    json_object_set_new(j, "cached", json_boolean(v->cached));
    return j;
}

/* The recommendation and why the next rung down was not it. */
static json_t *recommendation_json(const struct qladder *L) {
    size_t b = ladder_best(L->states, L->n_rungs);
    if (b == SIZE_MAX)
        return json_null();
    const struct qladder_rung *r = &L->rungs[b];
    const struct qladder_variant *v = chosen(r);
    char why[1024];
    int n = snprintf(why, sizeof why, "%s%s is the smallest rung that fits and passes: %s.",
                     r->type, v->imatrix ? " (with the importance matrix)" : "", v->reason);
    for (size_t i = b + 1; i < L->n_rungs && n > 0 && (size_t)n < sizeof why; i++) {
        const struct qladder_rung *next = &L->rungs[i];
        const struct qladder_variant *nv = chosen(next);
        if (L->states[i] == LADDER_NO_FIT || L->states[i] == LADDER_PENDING)
            continue;
        snprintf(why + n, sizeof why - (size_t)n, " The next one down, %s, %s: %s.", next->type,
                 L->states[i] == LADDER_FAIL ? "failed" : "could not be judged",
                 nv ? nv->reason : next->v[0].reason);
        break;
    }
    return json_pack("{s:s,s:b,s:s,s:s}", "type", r->type, "imatrix", v->imatrix, "path",
                     v->path, "why", why);
}

static json_t *summary_json(const struct qladder *L) {
    json_t *rungs = json_array();
    for (size_t i = 0; rungs && i < L->n_rungs; i++) {
        const struct qladder_rung *r = &L->rungs[i];
        for (size_t k = 0; k < r->n_variants; k++)
            json_array_append_new(rungs, variant_json(L, r, L->states[i], &r->v[k]));
    }
    json_t *partner = json_null();
    if (L->plan.n_partners) {
        partner = json_array();
        for (size_t i = 0; i < L->plan.n_partners; i++)
            json_array_append_new(partner,
                                  json_pack("{s:s,s:s}", "name", L->plan.partners[i].name, "path",
                                            plan_model_path(L->plan.partner_pm[i])));
    }
    json_t *data = json_pack("{s:s,s:I,s:I,s:I,s:I,s:f}", "path", L->o.data ? L->o.data : "-",
                             "cases", (json_int_t)(L->set ? L->set->n_cases : 0), "judged",
                             (json_int_t)L->judged.n_cases, "calibration",
                             (json_int_t)L->n_calibration, "seed", (json_int_t)L->o.seed,
                             "share", L->n_calibration ? L->o.share : 0.0);
    json_t *reference =
        L->ref ? json_pack("{s:I,s:I,s:o,s:f,s:I}", "questions", (json_int_t)L->ref_questions,
                           "sure", (json_int_t)L->ref_sure, "accuracy",
                           summary_number(L->ref_accuracy), "seconds", L->ref->seconds,
                           "repeat", (json_int_t)L->o.repeat)
               : json_null();
    return json_pack(
        "{s:s,s:{s:s,s:s,s:f,s:s,s:s},s:o,s:o,s:s,s:f,s:f,s:o,s:o,s:o,s:o,s:o,s:f}",
        "format", "tandem-ladder/1", "source", "path", L->o.src, "type", L->src_type, "mib",
        (double)plan_model_weight_bytes(L->pm) / QLADDER_MIB, "sha256", L->src_sha, "protected",
        L->protect_note, "partner", partner, "budget_bytes",
        L->plan.budget.gpu ? json_integer((json_int_t)L->plan.budget.gpu_bytes)
                           : json_integer((json_int_t)L->plan.budget.host_bytes),
        "budget_source", L->plan.budget_source, "margin", L->o.margin, "max_flip_rate",
        L->o.max_flip, "data", data, "reference", reference, "imatrix",
        L->imatrix[0] ? json_pack("{s:s,s:s,s:f}", "path", L->imatrix, "sha256", L->imatrix_sha,
                                  "seconds", L->imatrix_seconds)
                      : (L->imatrix_note[0] ? json_pack("{s:s}", "unavailable", L->imatrix_note)
                                            : json_null()),
        "rungs", rungs, "recommendation", recommendation_json(L), "seconds", qladder_now() - L->t0);
}

/* --- the search ------------------------------------------------------------------------------- */

/* Judges rungs as the bisection asks (every one with --all), then says why
 * the others were skipped. */
static void search(struct qladder *L) {
    size_t i;
    for (i = 0; L->o.all && i < L->n_rungs; i++)
        if (L->states[i] == LADDER_PENDING)
            judge_rung(L, i);
    while ((i = ladder_next(L->states, L->n_rungs)) != SIZE_MAX)
        judge_rung(L, i);
    for (i = 0; i < L->n_rungs; i++) {
        struct qladder_rung *r = &L->rungs[i];
        if (L->states[i] != LADDER_PENDING)
            continue;
        int passed;
        size_t by = ladder_decided_by(L->states, L->n_rungs, i, &passed);
        char decider[16];
        if (by == SIZE_MAX)
            continue;
        memcpy(decider, L->rungs[by].type, sizeof decider);
        snprintf(r->skipped, sizeof r->skipped, "not built: %s %s %s",
                 passed ? "the smaller" : "the larger", decider,
                 passed ? "passed, so this one is taken to pass"
                        : "failed, so this one is taken to fail");
    }
    qladder_progress_end(L);
}

/* --- the run --------------------------------------------------------------------------------- */

static int prepare(struct qladder *L) {
    int rc;
    if ((rc = qladder_rungs_check_source(L)) || (rc = qladder_rungs_protect_head(L)) ||
        (!L->o.plan_only && (rc = load_cases(L))) ||
        (rc = qladder_plan_init(&L->plan, L->pm, &L->o.plan, L->o.with, L->o.model) != TANDEM_OK))
        return rc;
    char err[1024];
    bool cached;
    if (hash_file_sha256_cached(L->o.src, L->src_sha, &cached, err, sizeof err) != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", err);
        return 1;
    }
    const char *base = host_base_name(L->o.src);
    size_t n = strlen(base);
    if (n > 5 && !strcmp(base + n - 5, ".gguf"))
        n -= 5;
    snprintf(L->stem, sizeof L->stem, "%.*s", (int)(n < 100 ? n : 100), base);
    snprintf(L->out_dir, sizeof L->out_dir, "%s", L->o.out_dir ? L->o.out_dir : L->stem);
    if (!L->o.out_dir)
        strncat(L->out_dir, "-ladder", sizeof L->out_dir - strlen(L->out_dir) - 1);
    if (mkdir(L->out_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, ERR_PREFIX "%s: %s\n", L->out_dir, strerror(errno));
        return 1;
    }
    tandem_err e = engine_locate_tool(L->o.llama_server, TANDEM_ENGINE_BUILD, "llama-quantize",
                                      L->tool, sizeof L->tool);
    if (e != TANDEM_OK) {
        fprintf(stderr, ERR_PREFIX "%s: no executable llama-quantize; "
                        "scripts/build-engine.sh installs it beside llama-server\n", L->tool);
        return 1;
    }
    return 0;
}

static void ladder_free(struct qladder *L) {
    for (size_t i = 0; i < L->n_rungs; i++) {
        engine_quant_size_free(&L->rungs[i].size);
        for (size_t k = 0; k < 2; k++)
            json_decref(L->rungs[i].v[k].judged);
    }
    for (size_t i = 0; i < L->n_protect; i++)
        mem_free(L->protect[i]);
    qladder_plan_deinit(&L->plan);
    eval_run_free(L->ref);
    mem_free(L->judged.cases);
    mem_free(L->calibration);
    evalset_free(L->set);
    plan_model_free(L->pm);
    gguf_free(L->g);
    mem_free(L);
}

/* The steps up to the summary: 0, 1 (stopped) or 2 (a bad request). */
static int run(struct qladder *L, json_t **summary) {
    int rc;
    if ((rc = prepare(L)) || (rc = qladder_rungs_size(L)))
        return rc;
    if (!L->o.plan_only) {
        bool with_imatrix = strcmp(L->o.imatrix, "none") && wants_imatrix(L);
        if ((rc = split_cases(L, with_imatrix)) || (rc = judge_reference(L)) ||
            (with_imatrix && (rc = prepare_imatrix(L))))
            return rc;
        search(L);
    }
    if (!(*summary = summary_json(L))) {
        fprintf(stderr, ERR_PREFIX "out of memory\n");
        return 1;
    }
    return 0;
}

tandem_err qladder_run(const struct qladder_params *p, json_t **summary) {
    *summary = NULL;
    struct qladder *L = mem_calloc(1, sizeof *L);
    if (!L) {
        fprintf(stderr, ERR_PREFIX "out of memory\n");
        return TANDEM_ERR_NOMEM;
    }
    L->o = *p;
    L->t0 = qladder_now();
    int rc = run(L, summary);
    ladder_free(L);
    return rc == 0 ? TANDEM_OK : rc == 2 ? TANDEM_ERR_INVAL : TANDEM_ERR_CANCELLED;
}
