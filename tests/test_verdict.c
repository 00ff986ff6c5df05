/* Unit tests for verdict: the verdict word read off a chosen arrangement,
 * and how fit's answer is settled with the placement's. Arrangements are
 * written by hand; each model has 4 layers, so 5 GPU layers is all of it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/verdict.h"
#include "test_helpers.h"

#define ALL 5

static struct plan_model *model(void) {
    struct spec sp = {"llama", {NULL}, true};
    return open_model(&sp);
}

struct fixture {
    struct plan_model *a, *b;
    struct place_model pm[2];
    struct place_budget gpu; /* one GPU */
    struct place_budget cpu; /* no GPU */
    struct fit_model fm[2];  /* fit's side, for verdict_settle */
    struct fit_model_result fr[2];
    struct fit_result res;
    struct place_result *placed; /* the placement's side (large: on the heap) */
};

static struct fixture f;

static void setup(void) {
    memset(&f, 0, sizeof f);
    f.a = model();
    f.b = model();
    cr_assert(f.a && f.b);
    cr_assert_eq(plan_model_n_layer(f.a) + 1, ALL);
    f.pm[0] = (struct place_model){.name = "kev", .model = f.a,
                                   .settings = plan_default_settings(), .gpu = PLACE_ANY_GPU};
    f.pm[1] = (struct place_model){.name = "laya", .model = f.b,
                                   .settings = plan_default_settings(), .gpu = PLACE_ANY_GPU};
    f.gpu = (struct place_budget){.n_gpus = 1, .gpu_bytes = {6ull << 30},
                                  .host_bytes = 16ull << 30};
    f.cpu = (struct place_budget){.n_gpus = 0, .host_bytes = 16ull << 30};
    f.placed = calloc(1, sizeof *f.placed);
    cr_assert(f.placed);
}

static void teardown(void) {
    plan_model_free(f.a);
    plan_model_free(f.b);
    free(f.placed);
}

TestSuite(verdict, .init = setup, .fini = teardown);

/* An arrangement that fits, kev and laya on (device, ngl, rotates) each. */
static struct place_arrangement arrange(int32_t dev_a, int32_t ngl_a, bool rot_a, int32_t dev_b,
                                        int32_t ngl_b, bool rot_b) {
    struct place_arrangement a;
    memset(&a, 0, sizeof a);
    a.fits = true;
    a.slot[0] = (struct place_slot){.device = dev_a, .ngl = ngl_a, .rotates = rot_a};
    a.slot[1] = (struct place_slot){.device = dev_b, .ngl = ngl_b, .rotates = rot_b};
    snprintf(a.label, sizeof a.label, "kev %d/%d, laya %d/%d", dev_a, ngl_a, dev_b, ngl_b);
    return a;
}

static enum fit_verdict of(const struct place_budget *b, struct place_arrangement a) {
    return verdict_of_arrangement(f.pm, 2, b, &a);
}

Test(verdict, every_layer_on_the_gpu_is_co_resident) {
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, false, 0, ALL, false)), FIT_CO_RESIDENT);
}

Test(verdict, a_model_that_rotates_makes_it_rotate) {
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, true, 0, ALL, true)), FIT_ROTATE);
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, false, 0, ALL, true)), FIT_ROTATE);
    /* rotation outranks a model on the CPU */
    cr_expect_eq(of(&f.gpu, arrange(0, 3, true, PLACE_CPU, 0, false)), FIT_ROTATE);
}

Test(verdict, fewer_layers_or_the_cpu_make_it_partial) {
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, false, 0, 3, false)), FIT_PARTIAL);
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, false, PLACE_CPU, 0, false)), FIT_PARTIAL);
    cr_expect_eq(of(&f.gpu, arrange(PLACE_CPU, 0, false, PLACE_CPU, 0, false)), FIT_PARTIAL);
}

Test(verdict, what_a_model_asks_for_is_not_partial) {
    f.pm[1].want = PLACE_WANT_CPU;
    cr_expect_eq(of(&f.gpu, arrange(0, ALL, false, PLACE_CPU, 0, false)), FIT_CO_RESIDENT);
    f.pm[0].settings.ngl = 3;
    cr_expect_eq(of(&f.gpu, arrange(0, 3, false, PLACE_CPU, 0, false)), FIT_CO_RESIDENT);
    cr_expect_eq(of(&f.gpu, arrange(0, 2, false, PLACE_CPU, 0, false)), FIT_PARTIAL);
}

Test(verdict, without_a_gpu_the_cpu_is_the_device) {
    cr_expect_eq(of(&f.cpu, arrange(PLACE_CPU, 0, false, PLACE_CPU, 0, false)), FIT_CO_RESIDENT);
    cr_expect_eq(of(&f.cpu, arrange(PLACE_CPU, 0, true, PLACE_CPU, 0, true)), FIT_ROTATE);
}

Test(verdict, an_arrangement_that_does_not_fit_is_no_fit) {
    struct place_arrangement a = arrange(0, ALL, false, 0, ALL, false);
    a.fits = false;
    cr_expect_eq(of(&f.gpu, a), FIT_NO_FIT);
}

/* fit's answer for kev and laya: both whole on the GPU, with verdict v. */
static void fit_said(enum fit_verdict v) {
    f.fm[0] = (struct fit_model){"kev", f.a, plan_default_settings(), false};
    f.fm[1] = (struct fit_model){"laya", f.b, plan_default_settings(), false};
    memset(f.fr, 0, sizeof f.fr);
    f.fr[0].ngl = f.fr[1].ngl = ALL;
    f.res = (struct fit_result){.verdict = v, .need_gpu = 7, .need_host = 9};
    snprintf(f.res.reason, sizeof f.res.reason, "each fits alone, but together they need more");
    snprintf(f.res.alternative, sizeof f.res.alternative, "co-resident if laya keeps 3 of 5");
}

/* Settles fit's answer with the placement's and expects verdict v and reason. */
static void expect_settled(enum fit_verdict v, const char *reason) {
    verdict_settle(f.fm, f.fr, 2, f.pm, &f.gpu, f.placed, &f.res);
    cr_expect_eq(f.res.verdict, v);
    cr_expect_str_eq(f.res.reason, reason);
}

Test(verdict, the_placement_overrules_a_rotate_that_it_avoided) {
    fit_said(FIT_ROTATE);
    f.placed->best = arrange(0, ALL, false, 0, 3, false);
    f.placed->alts[0] = arrange(0, 4, false, 0, ALL, false);
    f.placed->alts[0].fits = false; /* skipped: it does not fit */
    f.placed->alts[1] = arrange(0, 4, false, 0, ALL, false);
    snprintf(f.placed->alts[1].reason, sizeof f.placed->alts[1].reason, "slower: 1.000 s");
    f.placed->n_alts = 2;
    expect_settled(FIT_PARTIAL, "laya keeps 3 of 5 layers on gpu:0 (slowdown: heavy), so "
                                "that nothing rotates; each fits alone, but together they "
                                "need more");
    cr_expect_str_eq(f.res.alternative, "kev 0/4, laya 0/5: slower: 1.000 s");
    cr_expect_eq(f.res.need_gpu, 7);
    cr_expect_eq(f.res.need_host, 9);
}

Test(verdict, a_model_on_the_cpu_is_named) {
    fit_said(FIT_ROTATE);
    f.placed->best = arrange(0, ALL, false, PLACE_CPU, 0, false);
    expect_settled(FIT_PARTIAL, "laya runs on the CPU, so that nothing rotates; each fits "
                                "alone, but together they need more");
    cr_expect_str_eq(f.res.alternative, "");
    /* asked for: co-resident, and the reason still says where laya runs */
    fit_said(FIT_CO_RESIDENT);
    f.pm[1].want = PLACE_WANT_CPU;
    expect_settled(FIT_CO_RESIDENT, "laya runs on the CPU (as asked), and every model stays "
                                    "resident; each fits alone, but together they need more");
}

Test(verdict, fit_keeps_its_words_where_it_agrees) {
    fit_said(FIT_ROTATE);
    /* fit's models in the other order: matched by their plan_model */
    struct fit_model fm = f.fm[0];
    struct fit_model_result fr = f.fr[0];
    f.fm[0] = f.fm[1], f.fr[0] = f.fr[1];
    f.fm[1] = fm, f.fr[1] = fr;
    f.fr[0].ngl = 3; /* laya */
    f.placed->best = arrange(0, ALL, true, 0, 3, true);
    expect_settled(FIT_ROTATE, "each fits alone, but together they need more");
    cr_expect_str_eq(f.res.alternative, "co-resident if laya keeps 3 of 5");
    /* the same word about another arrangement: the placement's words */
    f.placed->best = arrange(0, ALL, true, 0, ALL, true);
    expect_settled(FIT_ROTATE, "kev rotates on gpu:0, laya rotates on gpu:0; each fits "
                               "alone, but together they need more");
}

Test(verdict, no_fit_gives_the_placements_reason) {
    fit_said(FIT_PARTIAL);
    f.placed->best = arrange(0, ALL, false, 0, ALL, false);
    f.placed->best.fits = false;
    snprintf(f.placed->best.reason, sizeof f.placed->best.reason,
             "does not fit: gpu:0 needs 7 GiB of 6 GiB");
    expect_settled(FIT_NO_FIT, "does not fit: gpu:0 needs 7 GiB of 6 GiB; each fits alone, "
                               "but together they need more");
}
