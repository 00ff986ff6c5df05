/* rng.c: splitmix64. The stream adds the golden-ratio increment to its state
 * and mixes the result; the constants are the published ones, so the numbers
 * match every other splitmix64 (tests/test_rng.c checks the reference
 * output). */
#include "base/rng.h"

uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t rng_next(uint64_t *state) { return rng_mix64(*state += 0x9E3779B97F4A7C15ull); }

double rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1.0p-53; }
