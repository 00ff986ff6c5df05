/* Unit tests for the ladder's rung planning (qladder_plan.c): the seed case
 * in miniature, on footprints set by hand so that every number can be worked
 * out on paper. The source A is 400 MiB + 720 MiB per GPU layer (4000 MiB
 * whole; 3000 MiB on the CPU), its partner B 400 + 80 per layer (800 MiB;
 * 400 MiB on the CPU), on a 4500 MiB GPU: co-resident they need 4800 MiB,
 * so the old co-residency rule refused A at its full size. A rung scales A's
 * weights (here all of its bytes) by its size. Each model has 4 layers, so 5
 * GPU layers is all of it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flow/qladder_plan.h"
#include "test_helpers.h"

#define MIB (1ull << 20)
#define ALL 5

struct hand {
    const struct plan_model *a, *b;
};

static tandem_err by_hand(const struct plan_model *m, const struct plan_settings *st,
                          struct plan_footprint *out, void *user) {
    const struct hand *h = user;
    uint64_t base = 400 * MIB, per = m == h->a ? 720 * MIB : 80 * MIB;
    uint64_t cpu = m == h->a ? 3000 * MIB : 400 * MIB;
    memset(out, 0, sizeof *out);
    int32_t ngl = st->gpu ? st->ngl : 0;
    if (ngl > 0)
        out->bytes[PLAN_DEVICE_GPU][PLAN_PART_WEIGHTS] = base + per * (uint64_t)ngl;
    out->bytes[PLAN_DEVICE_HOST][PLAN_PART_WEIGHTS] = cpu * (uint64_t)(ALL - ngl) / ALL;
    out->ngl = ngl;
    out->n_ctx_slot = 1024;
    return TANDEM_OK;
}

static struct cost_model costs(double gpu_token, double cpu_token, double gpu_load,
                               double cpu_load) {
    return (struct cost_model){.on = {[COST_GPU] = {.token_s = gpu_token, .load_s = gpu_load},
                                      [COST_CPU] = {.token_s = cpu_token, .load_s = cpu_load}}};
}

struct fixture {
    struct plan_model *a;
    struct qladder_plan p;
    struct hand h;
};

/* A beside B (--with B) on a 5000 MiB GPU less 500 MiB reserve, 16000 MiB
 * of host RAM; ram sets the host RAM instead when non-zero. */
static void setup(struct fixture *f, uint64_t ram) {
    struct spec sp = {"llama", {NULL}, true};
    char partner[4096];
    memset(f, 0, sizeof *f);
    f->a = open_model(&sp);
    snprintf(partner, sizeof partner, "%s", write_model(&sp));
    struct plan_cli cli = {.settings = plan_default_settings(), .vram = 5000 * MIB,
                           .reserve = 500 * MIB, .ram = ram ? ram : 16000 * MIB,
                           .have_vram = true, .have_reserve = true, .have_ram = true};
    cr_assert_eq(qladder_plan_init(&f->p, f->a, &cli, partner, NULL), 0);
    unlink(partner);
    cr_assert_eq(f->p.n_partners, 1);
    cr_assert_eq(f->p.place.n_gpus, 1);
    cr_assert_eq(f->p.place.gpu_bytes[0], 4500 * MIB);
    f->h = (struct hand){f->a, f->p.partner_pm[0]};
    f->p.fn = by_hand;
    f->p.fn_user = &f->h;
    /* B computes 20 times slower on the CPU; a rotation costs 10 s of loads per
     * request, so B on the CPU is the best arrangement in which nothing rotates */
    f->p.models[0].cost = costs(0.001, 0.1, 8, 1);
    f->p.models[1].cost = costs(0.0001, 0.002, 2, 0.5);
}

static void teardown(struct fixture *f) {
    qladder_plan_deinit(&f->p);
    plan_model_free(f->a);
}

/* Plans a rung named name of scale times A's weights. */
static struct qladder_fit plan_at(struct fixture *f, const char *name, double scale) {
    struct qladder_fit fit;
    uint64_t bytes = (uint64_t)((double)plan_model_weight_bytes(f->a) * scale + 0.5);
    cr_assert_eq(qladder_plan_rung(&f->p, name, bytes, &fit), TANDEM_OK);
    return fit;
}

Test(qladder_plan, a_rung_too_big_to_share_runs_beside_its_partner_on_the_cpu) {
    struct fixture f;
    setup(&f, 0);
    struct qladder_fit fit = plan_at(&f, "Q8_0", 1);
    cr_expect_eq(fit.mem_alone, 4000 * MIB);
    cr_expect_eq(fit.mem_pair, 4800 * MIB); /* over 4500: not co-resident */
    cr_expect(fit.fits, "%s", fit.reason);
    cr_expect_str_eq(fit.partner_device[0], "cpu");
    cr_expect(strstr(fit.placement, "Q8_0 gpu:0"), "%s", fit.placement);
    cr_expect_str_eq(fit.reason, "");
    teardown(&f);
}

Test(qladder_plan, a_small_rung_keeps_its_partner_on_the_gpu) {
    struct fixture f;
    setup(&f, 0);
    struct qladder_fit fit = plan_at(&f, "Q4_K_M", 0.5);
    cr_expect_eq(fit.mem_alone, 2000 * MIB);
    cr_expect_eq(fit.mem_pair, 2800 * MIB);
    cr_expect(fit.fits);
    cr_expect_str_eq(fit.partner_device[0], "gpu:0");
    teardown(&f);
}

Test(qladder_plan, a_rung_that_cannot_run_whole_does_not_fit) {
    struct fixture f;
    setup(&f, 0);
    /* 4800 MiB alone: it would fit only cut to a partial offload, and a rung runs whole */
    struct qladder_fit fit = plan_at(&f, "F16", 1.2);
    /* 1.2 times the weights, to the byte the rung's size was rounded to */
    cr_expect(fit.mem_alone > 4799 * MIB && fit.mem_alone < 4801 * MIB, "%llu",
              (unsigned long long)fit.mem_alone);
    cr_expect_not(fit.fits);
    cr_expect(strstr(fit.reason, "does not fit"), "%s", fit.reason);
    cr_expect_str_eq(fit.placement, "");
    teardown(&f);
}

Test(qladder_plan, a_partner_that_only_rotates_does_not_fit) {
    struct fixture f;
    /* 300 MiB of host RAM: B cannot go to the CPU (400 MiB) nor keep a share of
     * its layers there; beside a whole A it can only rotate */
    setup(&f, 300 * MIB);
    struct qladder_fit fit = plan_at(&f, "Q8_0", 1);
    cr_expect_not(fit.fits);
    cr_expect(strstr(fit.reason, "does not fit"), "%s", fit.reason);
    teardown(&f);
}

Test(qladder_plan, the_pick_is_the_first_arrangement_that_fits_with_nothing_rotating) {
    struct place_result *r = calloc(1, sizeof *r);
    cr_assert(r);
    r->best.fits = true; /* fits, but B rotates */
    r->best.slot[1].rotates = true;
    r->n_alts = 3;
    r->alts[0].fits = false;
    r->alts[1].fits = true; /* the one */
    r->alts[2].fits = true;
    cr_expect_eq(qladder_plan_pick(r, 2), &r->alts[1]);
    r->alts[1].slot[0].rotates = true;
    cr_expect_eq(qladder_plan_pick(r, 2), &r->alts[2]);
    r->alts[2].fits = false;
    cr_expect_null(qladder_plan_pick(r, 2));
    r->best.slot[1].rotates = false;
    cr_expect_eq(qladder_plan_pick(r, 2), &r->best);
    free(r);
}
