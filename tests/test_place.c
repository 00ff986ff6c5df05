/* Unit tests for the cost model (cost.c), the placement search (place.c)
 * and the thread split (placement.c): hand-computed cases on footprints and
 * costs set by the test, so that every expected number can be worked out on
 * paper. Each model has 4 layers, so 5 GPU layers is all of it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/cost.h"
#include "plan/place.h"
#include "serve/placement.h"
#include "test_helpers.h"

#define MIB (1ull << 20)
#define ALL 5 /* n_layer + 1 */

/* A model's memory, by hand: on a GPU, base + per_layer x ngl; on a CPU
 * engine, cpu bytes of host RAM (a partial offload keeps the share of
 * layers not on the GPU there). */
struct shape {
    const struct plan_model *m;
    uint64_t base, per_layer, cpu;
};

struct shapes {
    struct shape s[4];
    size_t n;
};

static tandem_err by_hand(const struct plan_model *m, const struct plan_settings *st,
                          struct plan_footprint *out, void *user) {
    const struct shapes *sh = user;
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < sh->n; i++) {
        const struct shape *s = &sh->s[i];
        if (s->m != m)
            continue;
        int32_t ngl = st->gpu ? st->ngl : 0;
        if (ngl > 0)
            out->bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS] = s->base + s->per_layer * (uint64_t)ngl;
        out->bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS] = s->cpu * (uint64_t)(ALL - ngl) / ALL;
        out->ngl = ngl;
        out->n_ctx_slot = 1024;
        return TANDEM_OK;
    }
    return TANDEM_ERR_INVAL;
}

static struct plan_model *model(void) {
    struct spec sp = {"llama", {NULL}, true};
    return open_model(&sp);
}

static struct cost_model costs(double gpu_token, double cpu_token, double gpu_load,
                               double cpu_load) {
    return (struct cost_model){.on = {[COST_GPU] = {.token_s = gpu_token, .load_s = gpu_load},
                                      [COST_CPU] = {.token_s = cpu_token, .load_s = cpu_load}}};
}

static struct place_model place_model(const char *name, const struct plan_model *m,
                                      struct cost_model c) {
    return (struct place_model){.name = name, .model = m, .settings = plan_default_settings(),
                                .gpu = PLACE_ANY_GPU, .cost = c};
}

struct fixture {
    struct plan_model *a, *b;
    struct shapes sh;
    struct place_model pm[2];
    struct place_work pipeline;
    struct place_budget budget;
    struct place_params params;
    struct place_result *r;
};

/* The seed case in miniature: a decider A of 4000 MiB on the GPU (3000 MiB
 * on the CPU) and a verifier B of 800 MiB (400 MiB); together 4800 MiB on a
 * 4500 MiB GPU. Requests have 100 tokens; the pipeline is A then B. */
static void setup(struct fixture *f) {
    memset(f, 0, sizeof *f);
    f->a = model();
    f->b = model();
    f->sh = (struct shapes){{{f->a, 400 * MIB, 720 * MIB, 3000 * MIB},
                             {f->b, 400 * MIB, 80 * MIB, 400 * MIB}},
                            2};
    f->pm[0] = place_model("A", f->a, costs(0.001, 0.1, 8, 1));
    f->pm[1] = place_model("B", f->b, costs(0.0001, 0.002, 2, 0.5));
    f->pipeline = (struct place_work){.name = "p", .pipeline = true, .models = {0, 1}, .n = 2};
    f->budget = (struct place_budget){.n_gpus = 1, .gpu_bytes = {4500 * MIB},
                                      .host_bytes = 16000 * MIB};
    f->params = (struct place_params){.tokens = 100, .clients = 1, .group_limit = 16};
    f->r = calloc(1, sizeof *f->r);
    cr_assert(f->r);
}

static void teardown(struct fixture *f) {
    plan_model_free(f->a);
    plan_model_free(f->b);
    free(f->r);
}

static void choose(struct fixture *f) {
    cr_assert_eq(place_choose(f->pm, 2, &f->pipeline, 1, &f->budget, &f->params, by_hand,
                              &f->sh, f->r),
                 TANDEM_OK);
}

/* The arrangement among best and alternatives whose label is label. */
static const struct place_arrangement *find(const struct place_result *r, const char *label) {
    if (!strcmp(r->best.label, label))
        return &r->best;
    for (size_t k = 0; k < r->n_alts; k++)
        if (!strcmp(r->alts[k].label, label))
            return &r->alts[k];
    cr_assert_fail("no arrangement \"%s\" (best: %s)", label, r->best.label);
    return NULL;
}

Test(place, the_verifier_goes_to_the_cpu_when_its_cost_is_below_a_switch) {
    struct fixture f;
    setup(&f);
    choose(&f);
    /* A on the GPU: 0.01 + 100 x 0.001; B on the CPU: 0.01 + 100 x 0.002 */
    cr_expect_str_eq(f.r->best.label, "A gpu:0, B cpu");
    cr_expect_float_eq(f.r->best.score, 0.11 + 0.21, 1e-9);
    cr_expect_float_eq(f.r->best.loads[0], 0, 1e-12);
    cr_expect(f.r->best.fits);
    cr_expect_eq(f.r->best.gpu_need[0], 4000 * MIB);
    cr_expect_eq(f.r->best.host_need, 400 * MIB);
    /* rotation: both on the GPU, two loads (8 + 2 s) per request */
    const struct place_arrangement *rot = find(f.r, "A gpu:0 (rotates), B gpu:0 (rotates)");
    cr_expect_float_eq(rot->score, 0.11 + 0.02 + 10, 1e-9);
    cr_expect_float_eq(rot->loads[0], 2, 1e-12);
    cr_expect_eq(rot->gpu_need[0], 4000 * MIB); /* the larger of the two at a time */
    /* A cut to 4 layers beside B: 400 + 720 x 4 = 3280 <= 4500 - 800 */
    const struct place_arrangement *share = find(f.r, "A gpu:0 4/5 layers, B gpu:0");
    cr_expect_float_eq(share->score, 0.01 + 100 * (0.8 * 0.001 + 0.2 * 0.1) + 0.02, 1e-9);
    cr_expect(strstr(share->reason, "slower"), "%s", share->reason);
    teardown(&f);
}

Test(place, rotation_wins_when_the_cpu_is_slower_than_a_switch) {
    struct fixture f;
    setup(&f);
    f.pm[0].cost.on[COST_CPU].token_s = 1.0; /* A's partial offload is now slow */
    f.pm[1].cost.on[COST_CPU].token_s = 0.2; /* B on the CPU: 20.01 s */
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A gpu:0 (rotates), B gpu:0 (rotates)");
    cr_expect_float_eq(f.r->best.score, 10.13, 1e-9);
    const struct place_arrangement *cpu = find(f.r, "A gpu:0, B cpu");
    cr_expect_float_eq(cpu->score, 0.11 + 20.01, 1e-9);
    teardown(&f);
}

Test(place, concurrent_clients_share_a_load) {
    struct fixture f;
    setup(&f);
    f.pm[0].cost.on[COST_CPU].token_s = 1.0;
    f.pm[1].cost.on[COST_CPU].token_s = 0.2;
    f.params.clients = 4; /* four requests in flight: one load serves four */
    choose(&f);
    cr_expect_float_eq(f.r->best.score, 0.13 + 10.0 / 4, 1e-9);
    cr_expect_float_eq(f.r->best.loads[0], 0.5, 1e-12);
    f.params.group_limit = 2; /* but a load serves at most group_limit */
    choose(&f);
    cr_expect_float_eq(f.r->best.score, 0.13 + 10.0 / 2, 1e-9);
    teardown(&f);
}

Test(place, both_fit_so_both_stay_on_the_gpu) {
    struct fixture f;
    setup(&f);
    f.budget.gpu_bytes[0] = 5000 * MIB;
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A gpu:0, B gpu:0");
    cr_expect_eq(f.r->best.gpu_need[0], 4800 * MIB);
    cr_expect_float_eq(f.r->best.score, 0.11 + 0.02, 1e-9);
    teardown(&f);
}

Test(place, a_device_want_is_obeyed) {
    struct fixture f;
    setup(&f);
    f.budget.gpu_bytes[0] = 5000 * MIB;
    f.pm[1].want = PLACE_WANT_CPU;
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A gpu:0, B cpu");
    for (size_t k = 0; k < f.r->n_alts; k++)
        cr_expect_eq(f.r->alts[k].slot[1].device, PLACE_CPU, "%s", f.r->alts[k].label);
    f.pm[1].want = PLACE_WANT_AUTO;
    f.pm[0].want = PLACE_WANT_GPU;
    f.pm[0].gpu = 1; /* gpu:1 on a machine with two */
    f.budget.n_gpus = 2;
    f.budget.gpu_bytes[1] = 4000 * MIB;
    choose(&f);
    cr_expect_eq(f.r->best.slot[0].device, 1);
    cr_expect_eq(f.r->best.slot[1].device, 0, "%s", f.r->best.label);
    teardown(&f);
}

Test(place, a_pinned_model_never_rotates_nor_is_cut) {
    struct fixture f;
    setup(&f);
    f.pm[0].cost.on[COST_CPU].token_s = 1.0;
    f.pm[1].cost.on[COST_CPU].token_s = 0.2;
    f.pm[0].pinned = true;
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A gpu:0, B cpu"); /* B cannot rotate beside pinned A */
    for (size_t k = 0; k < f.r->n_alts; k++)
        cr_expect(!f.r->alts[k].slot[0].rotates && (f.r->alts[k].slot[0].device == PLACE_CPU ||
                                                    f.r->alts[k].slot[0].ngl == ALL),
                  "%s", f.r->alts[k].label);
    teardown(&f);
}

Test(place, a_partial_offload_below_half_the_layers_is_not_offered) {
    struct fixture f;
    setup(&f);
    f.budget.gpu_bytes[0] = 1600 * MIB; /* A: 400 + 720 x 1 only: 1 of 5 layers */
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A cpu, B gpu:0");
    for (size_t k = 0; k < f.r->n_alts; k++)
        cr_expect(!strstr(f.r->alts[k].label, "1/5") && !strstr(f.r->alts[k].label, "2/5"),
                  "%s", f.r->alts[k].label);
    teardown(&f);
}

Test(place, host_ram_short_makes_cpu_models_rotate_or_not_fit) {
    struct fixture f;
    setup(&f);
    f.budget.n_gpus = 0;
    f.budget.host_bytes = 3200 * MIB; /* 3000 + 400 do not fit; each alone does */
    choose(&f);
    cr_expect_str_eq(f.r->best.label, "A cpu (rotates), B cpu (rotates)");
    cr_expect(f.r->best.fits);
    cr_expect_float_eq(f.r->best.score, 0.01 + 10 + 0.21 + 1 + 0.5, 1e-9);
    f.budget.host_bytes = 2000 * MIB; /* A alone does not fit */
    choose(&f);
    cr_expect(!f.r->best.fits);
    cr_expect(strstr(f.r->best.reason, "does not fit: host RAM needs"), "%s", f.r->best.reason);
    teardown(&f);
}

Test(place, without_work_each_model_is_asked_alone_in_turn) {
    struct fixture f;
    setup(&f);
    f.pm[0].cost.on[COST_CPU].token_s = 1.0;
    f.pm[1].cost.on[COST_CPU].token_s = 0.2;
    cr_assert_eq(place_choose(f.pm, 2, NULL, 0, &f.budget, &f.params, by_hand, &f.sh, f.r),
                 TANDEM_OK);
    /* two rotating models, requests alternate: each loads with probability 1/2 */
    const struct place_arrangement *rot = find(f.r, "A gpu:0 (rotates), B gpu:0 (rotates)");
    cr_expect_float_eq(rot->work_s[0], 0.11 + 0.5 * 8, 1e-9);
    cr_expect_float_eq(rot->work_s[1], 0.02 + 0.5 * 2, 1e-9);
    cr_expect_float_eq(rot->score, (4.11 + 1.02) / 2, 1e-9);
    teardown(&f);
}

Test(place, bad_input_is_refused) {
    struct fixture f;
    setup(&f);
    struct place_work bad = {.name = "x", .models = {0, 7}, .n = 2};
    cr_expect_eq(place_choose(f.pm, 2, &bad, 1, &f.budget, &f.params, by_hand, &f.sh, f.r),
                 TANDEM_ERR_INVAL);
    cr_expect_eq(place_choose(f.pm, 0, NULL, 0, &f.budget, &f.params, by_hand, &f.sh, f.r),
                 TANDEM_ERR_INVAL);
    f.pm[0].want = PLACE_WANT_GPU;
    f.pm[0].gpu = 1; /* the budget has one GPU */
    choose(&f);
    cr_expect(!f.r->best.fits);
    cr_expect(strstr(f.r->best.reason, "names no GPU"), "%s", f.r->best.reason);
    enum place_want w;
    int32_t g;
    cr_expect_eq(place_want_parse("gpu:2", &w, &g), TANDEM_OK);
    cr_expect(w == PLACE_WANT_GPU && g == 2);
    cr_expect_eq(place_want_parse("cpu", &w, &g), TANDEM_OK);
    cr_expect(w == PLACE_WANT_CPU && g == PLACE_ANY_GPU);
    const char *bad_text[] = {"gpu:", "gpu:x", "gpu:-1", "gpu:1x", "GPU", "", "gpu:99"};
    for (size_t i = 0; i < sizeof bad_text / sizeof *bad_text; i++)
        cr_expect_eq(place_want_parse(bad_text[i], &w, &g), TANDEM_ERR_INVAL, "%s", bad_text[i]);
    teardown(&f);
}

/* --- the cost model ------------------------------------------------------------------------- */

Test(cost, the_estimate_scales_with_parameters_and_bytes) {
    struct plan_model *m = model();
    struct cost_figure g, c;
    cost_estimate(m, COST_GPU, 1e12, &g);
    cost_estimate(m, COST_CPU, 1e10, &c);
    double params = (double)plan_model_n_params(m);
    /* 1000 x 256 embeddings, twice (output), 4 layers of 256 x 256 */
    cr_expect_float_eq(params, 2 * 1000 * 256 + 4 * 256 * 256, 0.5);
    cr_expect_eq(plan_model_weight_bytes(m), (uint64_t)params * 2);
    cr_expect_float_eq(g.token_s, 2 * params / 1e12, 1e-15);
    cr_expect_float_eq(c.token_s, 2 * params / 1e10, 1e-15);
    cr_expect_float_eq(g.load_s, COST_SPAWN_S + COST_GPU_INIT_S + params * 2 / COST_GPU_LOAD_BPS,
                       1e-12);
    cr_expect_float_eq(c.load_s, COST_SPAWN_S + params * 2 / COST_CPU_LOAD_BPS, 1e-12);
    cr_expect(!g.token_measured && !g.load_measured);
    cr_expect_float_eq(cost_request_s(&c, 100), COST_REQUEST_S + 100 * c.token_s, 1e-15);
    plan_model_free(m);
}

static void fresh_cache(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    setenv("TANDEM_CACHE", dir, 1);
}

Test(cost, measurements_replace_the_estimate_and_calibrate_the_cpu) {
    fresh_cache("/tmp/tandem-cost-test");
    struct plan_model *m = model();
    struct cost_record r;
    cr_expect_eq(cost_record_load(m, 11434, COST_CPU, &r), TANDEM_ERR_NOTFOUND);
    /* two loads of 300 and 500 ms, a first answer of 60 ms for 10 tokens,
     * then 4 answers: 200 tokens in 100 ms */
    struct cost_record a = {.loads = 1, .load_ms = 300, .firsts = 1, .first_tokens = 10,
                            .first_ms = 60, .requests = 4, .tokens = 200, .request_ms = 100};
    struct cost_record b = {.loads = 1, .load_ms = 500};
    char err[256];
    cr_assert_eq(cost_record_add(m, 11434, COST_CPU, &a, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(cost_record_add(m, 11434, COST_CPU, &b, err, sizeof err), TANDEM_OK, "%s", err);
    cr_assert_eq(cost_record_load(m, 11434, COST_CPU, &r), TANDEM_OK);
    cr_expect_eq(r.loads, 2);
    cr_expect_float_eq(r.load_ms, 800, 1e-9);
    cr_expect_eq(cost_record_load(m, 11434, COST_GPU, &r), TANDEM_ERR_NOTFOUND);
    struct cost_model c;
    cost_of(m, 11434, true, cost_cpu_flops(11434, true, NULL), &c);
    const struct cost_figure *cpu = &c.on[COST_CPU];
    cr_expect(cpu->token_measured && cpu->load_measured);
    cr_expect_float_eq(cpu->token_s, 0.1 / 200, 1e-12);
    /* 0.4 s per load, plus the first answer's 0.06 s beyond a warm one of 10
     * tokens (0.01 + 10 x 0.0005) */
    cr_expect_float_eq(cpu->load_s, 0.4 + (0.06 - 0.015), 1e-12);
    cr_expect(!c.on[COST_GPU].token_measured);
    /* the host's CPU FLOP/s now come from this model: 2 x params x 200 / 0.1 s */
    bool measured;
    double flops = cost_cpu_flops(11434, true, &measured);
    cr_expect(measured);
    cr_expect_float_eq(flops, 2 * (double)plan_model_n_params(m) * 200 / 0.1, 1);
    cr_expect(!cost_cpu_flops(11000, true, &measured) || !measured); /* another build: default */
    cr_expect(cost_cpu_flops(11434, false, &measured) > 0 && !measured); /* not asked */
    /* without measurements, the estimate */
    cost_of(m, 11434, false, cost_cpu_flops(11434, false, NULL), &c);
    cr_expect(!c.on[COST_CPU].token_measured);
    plan_model_free(m);
}

Test(cost, sums_decay_past_the_kept_samples) {
    fresh_cache("/tmp/tandem-cost-decay");
    struct plan_model *m = model();
    struct cost_record one = {.requests = COST_KEEP, .tokens = 100 * COST_KEEP,
                              .request_ms = 10.0 * COST_KEEP};
    char err[256];
    cr_assert_eq(cost_record_add(m, 1, COST_GPU, &one, err, sizeof err), TANDEM_OK);
    struct cost_record more = {.requests = 2, .tokens = 200, .request_ms = 20};
    cr_assert_eq(cost_record_add(m, 1, COST_GPU, &more, err, sizeof err), TANDEM_OK);
    struct cost_record r;
    cr_assert_eq(cost_record_load(m, 1, COST_GPU, &r), TANDEM_OK);
    cr_expect_eq(r.requests, (COST_KEEP + 2) / 2);
    cr_expect_float_eq(r.request_ms / (double)r.tokens, 0.1, 1e-9); /* the rate is kept */
    plan_model_free(m);
}

/* --- threads ------------------------------------------------------------------------------------ */

Test(placement, threads_never_oversubscribe_the_cores) {
    struct plan_model *a = model(), *b = model();
    struct plan_model *pm[2] = {a, b};
    struct place_arrangement arr;
    memset(&arr, 0, sizeof arr);
    arr.slot[0] = (struct place_slot){.device = 0, .ngl = ALL};
    arr.slot[1] = (struct place_slot){.device = PLACE_CPU};
    uint32_t t[2];
    placement_threads(&arr, pm, 2, 8, false, 1, t);
    cr_expect(t[0] == 1 && t[1] == 7, "%u %u", t[0], t[1]);
    arr.slot[1] = (struct place_slot){.device = 0, .ngl = ALL};
    placement_threads(&arr, pm, 2, 8, false, 1, t); /* all on the GPU: the cores shared */
    cr_expect(t[0] == 4 && t[1] == 4, "%u %u", t[0], t[1]);
    arr.slot[0] = arr.slot[1] = (struct place_slot){.device = PLACE_CPU};
    placement_threads(&arr, pm, 2, 8, false, 1, t); /* one at a time: each all of them */
    cr_expect(t[0] == 8 && t[1] == 8, "%u %u", t[0], t[1]);
    placement_threads(&arr, pm, 2, 8, false, 4, t); /* at once: halves */
    cr_expect(t[0] == 4 && t[1] == 4, "%u %u", t[0], t[1]);
    arr.slot[0] = (struct place_slot){.device = 0, .ngl = 3}; /* partial: computes on the CPU */
    placement_threads(&arr, pm, 2, 2, false, 4, t);
    cr_expect(t[0] == 1 && t[1] == 1, "%u %u", t[0], t[1]);
    arr.slot[0] = (struct place_slot){.device = 0, .ngl = ALL};
    placement_threads(&arr, pm, 2, 2, true, 1, t); /* simulated: both really on the CPU */
    cr_expect(t[0] == 2 && t[1] == 2, "%u %u", t[0], t[1]);
    plan_model_free(a);
    plan_model_free(b);
}
