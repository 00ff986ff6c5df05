/* Unit tests for flow/calibrate: what it reads from a model (temperatures as
 * the engine reads them, and the models it refuses), what the fit keeps
 * (a fit is adopted only when the held-out split agrees, buckets only with
 * enough answers), what the copy gets (only the changed temperatures, and
 * the tandem.calibration.* provenance, in a GGUF written in a temp dir), and
 * what calibrate_run tells when it fails before or during the run. Nothing
 * here needs an engine: a run against a served model is
 * tests/e2e/test_calibrate.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/host.h"
#include "flow/calibrate.h"
#include "gguf/gguf_edit.h"
#include "version.h"

#define TEMP "qwen35.decision.temperature."

static char dir[64];

static void setup(void) {
    strcpy(dir, "/tmp/tandem-calibrate-test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) { host_remove_tree(dir); }

TestSuite(calibrate, .init = setup, .fini = teardown);

/* dir/name (static buffer, one of four in turn). */
static const char *in_dir(const char *name) {
    static char paths[4][128];
    static int turn;
    char *p = paths[turn++ % 4];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

/* Writes a GGUF of the given key specs (NULL-terminated) at dir/name, no
 * tensors; returns its path. */
static const char *write_gguf(const char *name, ...) {
    struct gguf_edit *e;
    char err[256] = "";
    cr_assert_eq(gguf_edit_new(NULL, &e), TANDEM_OK);
    va_list ap;
    va_start(ap, name);
    for (const char *spec; (spec = va_arg(ap, const char *));)
        cr_assert_eq(gguf_edit_set_spec(e, spec, err, sizeof err), TANDEM_OK, "%s: %s", spec, err);
    va_end(ap);
    const char *path = in_dir(name);
    cr_assert_eq(gguf_edit_write(e, path, err, sizeof err), TANDEM_OK, "%s", err);
    gguf_edit_free(e);
    return path;
}

/* A kev model: choice at 2, noul.2 at 0.5, score written as text, and an
 * array under the prefix (not in the engine's metadata map). */
static const char *kev_model(void) {
    return write_gguf("kev.gguf", "general.architecture=str:qwen35",
                      "qwen35.decision.type=str:kev", TEMP "choice=f32:2.0",
                      TEMP "noul.2=f32:0.5", TEMP "score=str:1.5",
                      TEMP "table=arr[f32]:[1.0, 2.0]", NULL);
}

/* --- the model ------------------------------------------------------------------- */

Test(calibrate, the_temperatures_are_read_as_the_engine_reads_them) {
    struct calibrate_model m;
    char err[512] = "";
    cr_assert_eq(calibrate_model_open(kev_model(), &m, err, sizeof err), TANDEM_OK, "%s", err);
    cr_expect_str_eq(m.arch, "qwen35");
    cr_expect_str_eq(m.dtype, "kev");
    cr_expect_eq(m.temps.n, 3, "the array is skipped");
    cr_expect_eq(calib_temps_get(&m.temps, "choice"), 2.0);
    cr_expect_eq(calib_temps_get(&m.temps, "noul.2"), 0.5);
    cr_expect_eq(calib_temps_get(&m.temps, "score"), 1.5, "text parsed with strtof");
    cr_expect_eq(calib_temps_lookup(&m.temps, "noul", 2), 0.5);
    calibrate_model_close(&m);
    cr_expect_null(m.g);
}

Test(calibrate, models_calibrate_cannot_refit_are_refused_in_one_line) {
    static const struct {
        const char *spec1, *spec2, *spec3;
        tandem_err e;
        const char *why;
    } cases[] = {
        {"general.name=str:x", NULL, NULL, TANDEM_ERR_FORMAT, "no general.architecture"},
        {"general.architecture=str:qwen35", NULL, NULL, TANDEM_ERR_FORMAT,
         "not a decision model (no qwen35.decision.type); calibrate fits the temperatures of "
         "System One decision models"},
        {"general.architecture=str:qwen35", "qwen35.decision.type=str:lev", NULL,
         TANDEM_ERR_UNSUPPORTED,
         "decision type lev is not supported: lev averages two option orders for choice "
         "questions and reads noul as an expected rating, so its answers are not a power of "
         "one softmax and a temperature refit cannot be predicted exactly"},
        {"general.architecture=str:qwen35", "qwen35.decision.type=str:kev", TEMP "choice=f32:0",
         TANDEM_ERR_FORMAT,
         TEMP "choice: not a temperature the engine accepts (or too many temperature keys)"},
        {"general.architecture=str:qwen35", "qwen35.decision.type=str:kev",
         TEMP "noul=str:warm", TANDEM_ERR_FORMAT,
         TEMP "noul: not a temperature the engine accepts (or too many temperature keys)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = write_gguf("bad.gguf", cases[i].spec1, cases[i].spec2,
                                      cases[i].spec3, NULL);
        struct calibrate_model m;
        char err[512] = "", want[512];
        cr_expect_eq(calibrate_model_open(path, &m, err, sizeof err), cases[i].e, "%zu", i);
        snprintf(want, sizeof want, "%s: %s", path, cases[i].why);
        cr_expect_str_eq(err, want);
        calibrate_model_close(&m);
    }
    struct calibrate_model m;
    char err[512] = "";
    cr_expect_neq(calibrate_model_open(in_dir("missing.gguf"), &m, err, sizeof err), TANDEM_OK);
    cr_expect(strstr(err, "missing.gguf") != NULL, "%s", err);
    calibrate_model_close(&m);
}

/* --- the fit --------------------------------------------------------------------- */

/* Served answers of n options (p of option 0 is p0, the rest share 1 - p0),
 * gold option 0 in gold_in_10 of every 10, every third one held out. */
struct answers {
    double p[200][12];
    struct calibrate_answer a[200];
    size_t n;
};

static void add_answers(struct answers *s, enum s1q_type type, size_t n_options, double p0,
                        int gold_in_10, size_t count) {
    for (size_t i = 0; i < count; i++) {
        size_t k = s->n++;
        cr_assert_lt(s->n, 200);
        for (size_t o = 0; o < n_options; o++)
            s->p[k][o] = o == 0 ? p0 : (1 - p0) / (double)(n_options - 1);
        s->a[k] = (struct calibrate_answer){
            {s->p[k], NULL, n_options, (int)(i % 10) < gold_in_10 ? 0 : 1}, type,
            calib_bucket(n_options), i % 3 == 0};
    }
}

static struct calib_temps served(void) {
    struct calib_temps t = {0};
    cr_assert(calib_temps_put(&t, "choice", 2.0));
    cr_assert(calib_temps_put(&t, "noul.2", 0.5));
    return t;
}

Test(calibrate, an_overconfident_type_gets_a_higher_temperature) {
    static struct answers s;
    add_answers(&s, S1Q_TYPE_CHOICE, 2, 0.95, 7, 60); /* says 95 %, right 70 % */
    struct calib_temps t = served();
    static struct calibrate_fit f;
    cr_assert_eq(calibrate_fit(&t, s.a, s.n, 30, &f), TANDEM_OK);
    cr_assert_eq(f.n_fitted, 1);
    cr_assert_eq(f.n_groups, 1, "one bucket used: no bucket fit");
    const struct calibrate_group *g = &f.groups[0];
    cr_expect_eq(g->type, S1Q_TYPE_CHOICE);
    cr_expect_eq(g->bucket, -1);
    cr_expect_eq(g->n_train, 40);
    cr_expect_eq(g->n_held, 20);
    cr_expect(g->fitted && g->kept);
    /* the training split is right 28 of 40 times: p^a / sum = 0.7 */
    double a = log(0.7 / 0.3) / log(0.95 / 0.05);
    cr_expect(fabs(g->a - a) < 1e-4, "a = %g, want %g", g->a, a);
    cr_expect_eq(g->t_old, 2.0);
    cr_expect(fabs(g->t_new - 2.0 / a) < 1e-3, "t_new = %g", g->t_new);
    cr_expect_lt(g->nll_after, g->nll_before);
    cr_expect_str_eq(g->note, "");
    cr_expect_eq(calib_temps_get(&f.now, "choice"), g->t_new);
    cr_expect_eq(calib_temps_get(&f.now, "noul.2"), 0.5, "another type's key stays");
    json_t *w = calibrate_written_json("qwen35", &f.now);
    cr_expect_eq(json_object_size(w), 1, "only the changed key is written");
    cr_expect_eq(json_real_value(json_object_get(w, TEMP "choice")),
                 (double)calib_temp_round(g->t_new));
    json_decref(w);
}

Test(calibrate, a_fit_the_held_out_split_does_not_confirm_is_not_kept) {
    static struct answers s;
    /* training answers always right, held-out ones right 70 % of the time */
    for (size_t i = 0; i < 45; i++) {
        add_answers(&s, S1Q_TYPE_NOUL, 2, 0.8, 10, 1);
        s.a[s.n - 1].held = i % 3 == 0;
        s.a[s.n - 1].it.gold = i % 3 == 0 && i % 2 ? 1 : 0;
    }
    struct calib_temps t = served();
    static struct calibrate_fit f;
    cr_assert_eq(calibrate_fit(&t, s.a, s.n, 30, &f), TANDEM_OK);
    cr_assert_eq(f.n_groups, 1);
    const struct calibrate_group *g = &f.groups[0];
    cr_expect(g->fitted && !g->kept);
    cr_expect_gt(g->a, 1, "the training split asks for more confidence");
    char want[64];
    snprintf(want, sizeof want, "held-out NLL %.3f -> %.3f", g->nll_before, g->nll_after);
    cr_expect_str_eq(g->note, want);
    cr_expect_geq(g->nll_after, g->nll_before);
    json_t *w = calibrate_written_json("qwen35", &f.now);
    cr_expect_eq(json_object_size(w), 0, "nothing changed, nothing written");
    json_decref(w);
    cr_expect_eq(calib_temps_lookup(&f.now, "noul", 2), 0.5);
}

Test(calibrate, too_few_answers_leave_the_type_alone) {
    static struct answers s;
    add_answers(&s, S1Q_TYPE_SCORE, 3, 0.9, 7, 5);
    struct calib_temps t = served();
    static struct calibrate_fit f;
    cr_assert_eq(calibrate_fit(&t, s.a, s.n, 30, &f), TANDEM_OK);
    cr_expect_eq(f.n_fitted, 0);
    cr_assert_eq(f.n_groups, 1);
    cr_expect(!f.groups[0].fitted && isnan(f.groups[0].a));
    cr_expect_str_eq(f.groups[0].note, "too few answers: 3 training and 2 held-out, a fit needs "
                                       "10 and 5");
    json_t *j = calibrate_group_json(&f.groups[0]);
    cr_expect_str_eq(json_string_value(json_object_get(j, "group")), "score");
    cr_expect(json_is_null(json_object_get(j, "a")), "NaN is null");
    cr_expect(json_is_null(json_object_get(j, "bucket")));
    json_decref(j);
    cr_assert_eq(calibrate_fit(&t, s.a, 0, 30, &f), TANDEM_OK);
    cr_expect_eq(f.n_groups, 0, "a type without answers has no group");
}

Test(calibrate, buckets_are_fitted_when_each_split_has_enough_answers) {
    static struct answers s;
    add_answers(&s, S1Q_TYPE_CHOICE, 2, 0.95, 7, 90);  /* 60 training, 30 held out */
    add_answers(&s, S1Q_TYPE_CHOICE, 4, 0.4, 9, 90);
    add_answers(&s, S1Q_TYPE_CHOICE, 11, 0.5, 5, 15); /* too few for its bucket */
    struct calib_temps t = served();
    static struct calibrate_fit f;
    cr_assert_eq(calibrate_fit(&t, s.a, s.n, 30, &f), TANDEM_OK);
    cr_expect_eq(f.n_fitted, 1, "types, not buckets, are counted");
    cr_assert_eq(f.n_groups, 3);
    const char *names[] = {"choice", "choice.2", "choice.3_5"};
    for (size_t i = 0; i < 3; i++) {
        json_t *j = calibrate_group_json(&f.groups[i]);
        cr_expect_str_eq(json_string_value(json_object_get(j, "group")), names[i]);
        json_decref(j);
    }
    cr_expect_eq(f.groups[1].n_train, 60);
    cr_expect_eq(f.groups[1].n_held, 30);
    /* a bucket's temperature is the served one over its own power */
    cr_expect(f.groups[1].kept, "the type's compromise is worse for two options");
    cr_expect(fabs(calib_temps_lookup(&f.now, "choice", 2) -
                   calib_temp_engine(calib_temp_round(2.0 / f.groups[1].a))) < 1e-9);
    cr_assert_eq(calibrate_fit(&t, s.a, s.n, 31, &f), TANDEM_OK);
    cr_expect_eq(f.n_groups, 1, "30 held-out answers are below --min-bucket 31");
}

/* --- the copy ---------------------------------------------------------------------- */

static const char *str_of(const struct gguf *g, const char *key, char *buf, size_t cap) {
    struct gguf_str s;
    cr_assert_eq(gguf_get_str(g, key, &s), TANDEM_OK, "%s", key);
    snprintf(buf, cap, "%.*s", (int)s.len, s.ptr);
    return buf;
}

Test(calibrate, the_copy_gets_the_changed_temperatures_and_the_provenance) {
    struct calibrate_model m;
    char err[512] = "", buf[1024];
    cr_assert_eq(calibrate_model_open(kev_model(), &m, err, sizeof err), TANDEM_OK, "%s", err);
    struct calib_temps now = m.temps;
    cr_assert(calib_temps_scale_type(&now, "choice", 0.3));
    struct calibrate_group g = {.type = S1Q_TYPE_CHOICE, .bucket = -1, .n_train = 40,
                                .n_held = 20, .fitted = true, .kept = true, .a = 0.3,
                                .t_old = 2, .t_new = 2 / 0.3, .nll_before = 0.9,
                                .nll_after = 0.6, .ece_before = NAN, .ece_after = 0.1};
    json_t *groups = json_pack("[o]", calibrate_group_json(&g));
    json_t *summary = json_pack("{s:s,s:s,s:s,s:{s:s},s:O}", "model_sha256", "ab12",
                                "data", "/data/sets/tickets.jsonl", "data_sha256", "cd34",
                                "split", "text", "seed 1, held-out 0.3: 3 of 10 cases",
                                "groups", groups);
    const char *out = in_dir("out.gguf");
    cr_assert_eq(calibrate_write(&m, &now, summary, out, err, sizeof err), TANDEM_OK, "%s", err);
    struct gguf *c;
    cr_assert_eq(gguf_open(out, &c, err, sizeof err), TANDEM_OK, "%s", err);
    const struct gguf_kv *kv = gguf_kv_find(c, TEMP "choice");
    double v;
    cr_assert(kv && kv->type == GGUF_TYPE_FLOAT32);
    cr_assert_eq(gguf_kv_f64(kv, &v), TANDEM_OK);
    cr_expect_eq((float)v, calib_temp_round(2 / 0.3));
    kv = gguf_kv_find(c, TEMP "noul.2");
    cr_assert(kv && gguf_kv_f64(kv, &v) == TANDEM_OK);
    cr_expect_eq(v, 0.5, "unchanged keys stay as they were");
    cr_expect_str_eq(str_of(c, TEMP "score", buf, sizeof buf), "1.5");
    cr_expect_str_eq(str_of(c, "tandem.calibration.tool", buf, sizeof buf),
                     "tandem calibrate " TANDEM_VERSION);
    cr_expect_str_eq(str_of(c, "tandem.calibration.source_sha256", buf, sizeof buf), "ab12");
    cr_expect_str_eq(str_of(c, "tandem.calibration.data", buf, sizeof buf), "tickets.jsonl");
    cr_expect_str_eq(str_of(c, "tandem.calibration.data_sha256", buf, sizeof buf), "cd34");
    cr_expect_str_eq(str_of(c, "tandem.calibration.split", buf, sizeof buf),
                     "seed 1, held-out 0.3: 3 of 10 cases");
    char *metrics = json_dumps(groups, JSON_COMPACT | JSON_PRESERVE_ORDER);
    cr_expect_str_eq(str_of(c, "tandem.calibration.metrics", buf, sizeof buf), metrics);
    cr_expect(strstr(metrics, "\"ece_before\":null") != NULL, "%s", metrics);
    free(metrics);
    gguf_free(c);
    const char *nowhere = "/nonexistent-tandem-dir/out.gguf";
    cr_expect_neq(calibrate_write(&m, &now, summary, nowhere, err, sizeof err), TANDEM_OK);
    cr_expect_eq(strncmp(err, nowhere, strlen(nowhere)), 0, "%s", err);
    cr_expect_eq(access(nowhere, F_OK), -1);
    json_decref(groups);
    json_decref(summary);
    calibrate_model_close(&m);
}

/* --- the run's failures ------------------------------------------------------------ */

/* Runs p; returns its error, with the diag copied into diag. */
static tandem_err run(const struct calibrate_params *p, char *diag, size_t cap, bool *refused) {
    struct calibrate_result r;
    tandem_err e = calibrate_run(p, &r);
    snprintf(diag, cap, "%s", r.diag.data ? r.diag.data : "");
    *refused = r.endpoint_refused;
    cr_expect(e ? r.summary == NULL : r.summary != NULL);
    calibrate_result_deinit(&r);
    return e;
}

static struct calibrate_params params(const char *model, const char *data, const char *out) {
    struct calibrate_params p = calibrate_default_params();
    p.model = model;
    p.data = data;
    p.out = out;
    p.eval.retries = 0;
    return p;
}

Test(calibrate, the_run_refuses_a_model_it_cannot_refit_before_serving_it) {
    const char *model = write_gguf("plain.gguf", "general.architecture=str:qwen2", NULL);
    struct calibrate_params p = params(model, model, in_dir("out.gguf"));
    char diag[2048], want[2048];
    bool refused = true;
    cr_expect_eq(run(&p, diag, sizeof diag, &refused), TANDEM_ERR_FORMAT);
    snprintf(want, sizeof want, "tandem calibrate: %s: not a decision model (no "
             "qwen2.decision.type); calibrate fits the temperatures of System One decision "
             "models\n", model);
    cr_expect_str_eq(diag, want);
    cr_expect(!refused);
}

Test(calibrate, the_run_will_not_write_over_the_model) {
    const char *model = kev_model();
    struct calibrate_params p = params(model, model, model);
    p.command = "calibrate-test";
    char diag[2048], want[2048];
    bool refused = true;
    cr_expect_eq(run(&p, diag, sizeof diag, &refused), TANDEM_ERR_INVAL);
    snprintf(want, sizeof want, "calibrate-test: --out %s is the model itself; write the "
             "calibrated copy to another file\n", model);
    cr_expect_str_eq(diag, want);
    cr_expect(!refused);
}

Test(calibrate, an_unreadable_dataset_is_said_before_any_serving) {
    struct calibrate_params p = params(kev_model(), in_dir("none.jsonl"), in_dir("out.gguf"));
    p.eval.endpoint = "not-an-endpoint"; /* never reached */
    char diag[2048];
    bool refused = true;
    cr_expect_neq(run(&p, diag, sizeof diag, &refused), TANDEM_OK);
    cr_expect_eq(strncmp(diag, "tandem calibrate: ", 18), 0, "%s", diag);
    cr_expect(strstr(diag, "none.jsonl") != NULL, "%s", diag);
    cr_expect_eq(strchr(diag, '\n'), diag + strlen(diag) - 1, "one line: %s", diag);
    cr_expect(!refused);
}

/* Runs the kev model against endpoint with data_text as dir/set.jsonl;
 * returns its error, with the diag copied into diag. */
static tandem_err run_set(const char *data_text, const char *endpoint, char *diag, size_t cap,
                          bool *refused) {
    const char *data = in_dir("set.jsonl");
    cr_assert_eq(host_write_atomic(data, data_text, strlen(data_text)), TANDEM_OK);
    struct calibrate_params p = params(kev_model(), data, in_dir("out.gguf"));
    p.eval.endpoint = endpoint;
    p.eval.timeout_ms = 5000;
    return run(&p, diag, cap, refused);
}

Test(calibrate, an_endpoint_refused_as_given_is_a_usage_error) {
    char diag[2048];
    bool refused = false;
    cr_expect_eq(run_set("{}\n", "not-an-endpoint", diag, sizeof diag, &refused),
                 TANDEM_ERR_INVAL);
    cr_expect(refused);
    cr_expect_str_eq(diag, "", "the endpoint said it on stderr");
}

Test(calibrate, a_malformed_dataset_is_said_as_the_loader_says_it) {
    char diag[4096];
    bool refused = true;
    cr_expect_neq(run_set("{\"id\": \"c1\"\n", "http://127.0.0.1:9", diag, sizeof diag,
                          &refused),
                  TANDEM_OK);
    const char *data = in_dir("set.jsonl");
    cr_expect_eq(strncmp(diag, data, strlen(data)), 0, "the loader's own line: %s", diag);
    cr_expect(!refused);
    cr_expect_eq(access(in_dir("out.gguf"), F_OK), -1);
}

Test(calibrate, every_failed_request_is_named, .timeout = 30) {
    static const char set[] =
        "{\"id\": \"c1\", \"state\": {}, \"questions\": {\"q\": {\"type\": \"noul\", "
        "\"instructions\": \"Yes?\"}}, \"gold\": {\"q\": true}}\n"
        "{\"id\": \"c2\", \"state\": {}, \"questions\": {\"q\": {\"type\": \"noul\", "
        "\"instructions\": \"Yes?\"}}, \"gold\": {\"q\": false}}\n";
    char diag[4096];
    bool refused = true;
    /* the discard port: nothing listens */
    cr_expect_eq(run_set(set, "http://127.0.0.1:9", diag, sizeof diag, &refused),
                 TANDEM_ERR_HTTP);
    cr_expect_eq(strncmp(diag, "tandem calibrate: case c1 (line 1): ", 36), 0, "%s", diag);
    const char *c2 = strstr(diag, "\ntandem calibrate: case c2 (line 2): ");
    cr_expect_not_null(c2, "%s", diag);
    const char *last = "\ntandem calibrate: 2 of 2 requests failed; a fit needs every answer\n";
    cr_expect(strlen(diag) > strlen(last) &&
                  !strcmp(diag + strlen(diag) - strlen(last), last), "%s", diag);
    cr_expect(!refused);
    cr_expect_eq(access(in_dir("out.gguf"), F_OK), -1);
}
