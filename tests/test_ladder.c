/* test_ladder.c: the ladder's ordering and bisection, on hand-worked cases. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "eval/ladder.h"

#define P LADDER_PENDING
#define OK LADDER_PASS
#define NO LADDER_FAIL
#define ERR LADDER_ERROR
#define NF LADDER_NO_FIT

Test(ladder, order_by_size_largest_first_stable) {
    /* Q4_K_M, Q8_0, Q2_K, IQ4_XS, Q4_K_S as the SmolLM2 dry run sizes them (bytes) */
    const uint64_t bytes[] = {103672832, 145293312, 70176768, 94035968, 94035968};
    size_t order[5];
    ladder_order(bytes, 5, order);
    const size_t want[] = {1, 0, 3, 4, 2}; /* the two equal sizes keep their input order */
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(order[i], want[i], "order[%zu] = %zu", i, order[i]);
    ladder_order(bytes, 0, order); /* nothing to do */
}

/* Runs the search against a ladder whose first `k` rungs pass, counting judgements. */
static size_t search(enum ladder_state *st, size_t n, size_t k, size_t *judged) {
    size_t i;
    *judged = 0;
    while ((i = ladder_next(st, n)) != SIZE_MAX) {
        cr_assert_eq(st[i], P);
        st[i] = i < k ? OK : NO;
        (*judged)++;
    }
    return ladder_best(st, n);
}

Test(ladder, bisection_finds_the_boundary_in_log_steps) {
    for (size_t k = 0; k <= 9; k++) {
        enum ladder_state st[9] = {P, P, P, P, P, P, P, P, P};
        size_t judged, best = search(st, 9, k, &judged);
        cr_assert_eq(best, k ? k - 1 : SIZE_MAX, "k=%zu: best %zu", k, best);
        cr_assert_leq(judged, 4, "k=%zu: %zu judgements", k, judged); /* ceil(log2(10)) */
        if (k < 9)
            cr_assert_eq(st[k], NO, "k=%zu: the rung below the best was judged", k);
    }
}

Test(ladder, first_pick_is_the_middle) {
    enum ladder_state st[9] = {P, P, P, P, P, P, P, P, P};
    cr_assert_eq(ladder_remaining(st, 9), 4); /* 9 -> 4 -> 2 -> 1 -> 0 */
    cr_assert_eq(ladder_pending(st, 9), 9);
    cr_assert_eq(ladder_next(st, 9), 4);
    st[4] = OK; /* 5, 6, 7, 8 left: the smaller of the two middles */
    cr_assert_eq(ladder_remaining(st, 9), 3);
    cr_assert_eq(ladder_next(st, 9), 7);
    st[7] = NO; /* 5, 6 */
    cr_assert_eq(ladder_next(st, 9), 6);
    st[6] = NO;
    cr_assert_eq(ladder_next(st, 9), 5);
    st[5] = OK;
    cr_assert_eq(ladder_next(st, 9), SIZE_MAX);
    cr_assert_eq(ladder_remaining(st, 9), 0);
    cr_assert_eq(ladder_pending(st, 9), 5); /* 0..3 and 8 never judged */
    cr_assert_eq(ladder_best(st, 9), 5);
}

Test(ladder, rungs_that_do_not_fit_or_fail_to_build_are_stepped_over) {
    enum ladder_state st[6] = {NF, NF, P, P, P, P};
    cr_assert_eq(ladder_next(st, 6), 4); /* pending 2..5: the third */
    st[4] = ERR;                          /* the engine crashed on it */
    cr_assert_eq(ladder_next(st, 6), 3); /* pending 2, 3, 5 */
    st[3] = OK;
    cr_assert_eq(ladder_next(st, 6), 5); /* 4 is stepped over */
    st[5] = NO;
    cr_assert_eq(ladder_next(st, 6), SIZE_MAX);
    cr_assert_eq(ladder_best(st, 6), 3);
    int passed;
    cr_assert_eq(ladder_decided_by(st, 6, 2, &passed), 3); /* skipped: Q below it passed */
    cr_assert_eq(passed, 1);
}

Test(ladder, nothing_fits_or_nothing_passes) {
    enum ladder_state none[3] = {NF, NF, NF};
    cr_assert_eq(ladder_next(none, 3), SIZE_MAX);
    cr_assert_eq(ladder_best(none, 3), SIZE_MAX);
    enum ladder_state st[4] = {P, P, P, P};
    size_t judged;
    cr_assert_eq(search(st, 4, 0, &judged), SIZE_MAX);
    cr_assert_eq(st[0], NO, "the largest rung was judged before giving up");
    int passed;
    cr_assert_eq(ladder_decided_by(st, 4, 3, &passed), 2); /* the nearest larger failure */
    cr_assert_eq(passed, 0);
    cr_assert_eq(ladder_decided_by(none, 3, 1, &passed), SIZE_MAX);
}
