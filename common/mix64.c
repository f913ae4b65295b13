/* mix64.c — nanollm.h's SplitMix64 (nl_random_next), for front-ends that
 * draw reproducible workloads with the engine's own mixer; the mixer
 * itself is mix64.h's. */
#include "common/mix64.h"

#include "nanollm.h"

uint64_t nl_random_next(uint64_t *state)
{
    return nl_splitmix64_next(state);
}
