/* rng.h: splitmix64, the seeded random numbers of eval's resampling, splits
 * and permutations.
 *
 * Every random draw in tandem is a pure function of a seed the user gives, so
 * a run repeats exactly; splitmix64 (Steele, Lea and Flood, 2014) is small,
 * fast and passes BigCrush, which is more than resampling needs. */
#ifndef TANDEM_RNG_H
#define TANDEM_RNG_H

#include <stdint.h>

/* Returns splitmix64's output function of z: a 64-bit mix with full avalanche.
 * Good for deriving independent seeds from (seed, index) pairs. */
uint64_t rng_mix64(uint64_t z);

/* Advances the stream *state and returns its next number. */
uint64_t rng_next(uint64_t *state);

/* Returns a uniform double in [0, 1) from the stream *state (53 bits). */
double rng_uniform(uint64_t *state);

#endif
