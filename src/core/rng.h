/* Deterministic RNG (splitmix64 seeding + xoshiro256**), with uniform and normal draws.
 * The state is a plain value: checkpoints can save and restore it exactly. */
#ifndef HYLA_CORE_RNG_H
#define HYLA_CORE_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } hyla_rng;

void hyla_rng_seed(hyla_rng *r, uint64_t seed);
uint64_t hyla_rng_next(hyla_rng *r);
double hyla_rng_uniform(hyla_rng *r);          /* [0, 1) with 53 random bits */
double hyla_rng_normal(hyla_rng *r);           /* standard normal (Box-Muller, no caching) */

#endif
