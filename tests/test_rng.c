/* Unit tests for rng: splitmix64's reference outputs and the uniform range. */
#include <criterion/criterion.h>

#include "base/rng.h"

Test(rng, splitmix64_reference_outputs) {
    uint64_t state = 0;
    cr_assert_eq(rng_next(&state), 0xE220A8397B1DCDAFull);
    cr_assert_eq(rng_next(&state), 0x6E789E6AA1B965F4ull);
    cr_assert_eq(rng_next(&state), 0x06C45D188009454Full);
    cr_assert_eq(rng_mix64(0), 0);
}

Test(rng, uniform_is_in_the_unit_interval) {
    uint64_t state = 42;
    double lo = 1, hi = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = rng_uniform(&state);
        cr_assert(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    cr_assert(lo < 1e-3 && hi > 1 - 1e-3);
    cr_assert_float_eq(sum / 100000, 0.5, 0.01);
}
