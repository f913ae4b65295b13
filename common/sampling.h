/* sampling.h — what "sampling a token" means, defined once for the leader,
 * the wire and every backend: the per-step controls (nl_sample_row), the
 * sampler's exact semantics, and the counter-based random race that makes a
 * seeded request reproducible whatever it is batched with.
 *
 * The public nl_sampling_params (which also holds stop strings, max_tokens
 * and other leader-only controls) becomes an nl_sample_row in one place,
 * sampling_row_from_params().  Backends implement the semantics below; the
 * CPU and CUDA samplers are held to each other by tests.
 */
#ifndef NL_COMMON_SAMPLING_H
#define NL_COMMON_SAMPLING_H

#include <math.h>
#include <stdint.h>

#include "common/limits.h"
#include "common/mix64.h"
#include "nanollm.h"

/* One request's sampling controls for one step: what the leader sends on
 * the wire (ipc/wire.h) and what the backends read, one per logits row, from
 * backend memory.  Fixed width, the same bytes on host and device.
 *
 * The sampler is defined exactly so that backends agree and a seeded request
 * gives the same tokens whatever it is batched with:
 *   logprobs reported = log_softmax(raw logits) (before temperature); the
 *   chosen token's is always reported, the top-N only when n_logprobs > 0;
 *   temperature == 0  -> argmax (lowest id on ties);
 *   otherwise p = softmax(logits / temperature), and the kept set is cut
 *   from the order "p descending, lower id first on ties":
 *     top_k > 0 keeps the first top_k tokens of that order (so a tie at the
 *       boundary keeps the lower ids);
 *     top_p < 1 then keeps the shortest prefix of that order, within the
 *       top_k kept, whose mass renormalised over them reaches top_p (always
 *       at least one token; tied tokens are taken in id order);
 *     min_p > 0 then drops every token with p < min_p * p_max;
 *   and the kept token with the largest p_i / E_i wins (lowest id on ties),
 *   E_i = -log1p(-v_i) an Exp(1) variable from v_i = nl_rng_race_uniform()
 *   of (seed, offset, i).  This exponential race picks token i with
 *   probability p_i / sum of kept p, needs no order when no filter is active
 *   (top_k <= 0 or >= vocab, top_p >= 1, min_p <= 0), and splits across
 *   threads freely: it is an argmax.  Backends compare the race in log
 *   form, nl_race_score(logit, 1 / temperature, v) = logit / T - ln E. */
typedef struct nl_sample_row {
    float temperature;
    float top_p;
    float min_p;
    int32_t top_k;
    uint64_t seed;
    uint64_t offset;      /* tokens this request has generated so far        */
    int32_t n_logprobs;   /* top-N to report, 0..NL_MAX_LOGPROBS             */
    int32_t pad_;
} nl_sample_row;
/* Host and device read the same bytes: no implicit padding may differ. */
static_assert(sizeof(nl_sample_row) == 40, "nl_sample_row is 40 bytes on host and device");

/* Whether the row's top_k cuts it (0, negative or past the vocabulary: no cut). */
static inline NL_HOST_DEVICE bool nl_sample_cuts_by_k(const nl_sample_row *sr, int32_t vocab)
{
    return sr->top_k > 0 && sr->top_k < vocab;
}


/* Counter-based generator shared by all backends: the sampler's randomness
 * for a token depends on (seed, offset, token id) alone, so it does not
 * depend on the batch, the backend or how a row is split across threads.
 * Everything up to the uniform is integer arithmetic or exact conversions,
 * bit-identical on host and device. */
static inline NL_HOST_DEVICE uint64_t nl_rng_mix(uint64_t z)
{
    return nl_mix64(z + NL_MIX64_GAMMA); /* one SplitMix64 step from state z */
}
/* The key of one sampling step of one request. */
static inline NL_HOST_DEVICE uint64_t nl_rng_row_key(uint64_t seed, uint64_t offset)
{
    return nl_rng_mix(nl_rng_mix(seed) ^ offset);
}
/* 32 random bits for token i: output i + 1 of the SplitMix64 stream whose
 * state starts at key. */
static inline NL_HOST_DEVICE uint32_t nl_rng_race_bits(uint64_t key, uint32_t i)
{
    return (uint32_t)(nl_rng_mix(key + (uint64_t)i * NL_MIX64_GAMMA) >> 32);
}
/* v in [2^-32, 1 - 2^-24] from 32 bits, by exact conversions only: the
 * smallest v keep 32-bit resolution because E = -log1p(-v) ~ v is where the
 * race is decided (the winner of a flat 150k-token row has E ~ 1e-5); v never
 * reaches 0 (E = 0 would win whatever p) nor 1 (E = inf would never win). */
static inline NL_HOST_DEVICE float nl_rng_race_uniform(uint32_t bits)
{
    return bits >= (1u << 24) ? (float)(bits >> 8) * (1.0f / 16777216.0f)
                              : (float)(bits | 1u) * (1.0f / 4294967296.0f);
}
/* The race in log form: ln(p_i / E_i) up to a constant of the row. */
static inline NL_HOST_DEVICE float nl_race_score(float logit, float inv_t, float v)
{
    return logit * inv_t - logf(-log1pf(-v));
}

/* The race's shortcut, shared by the samplers.  A token's score is x - ln E
 * with x = logit / T and E = -log1p(-v) >= v >= 2^-(1 + clz(bits)) (v =
 * nl_rng_race_uniform(bits)), so x + ln2 (1 + clz(bits)) bounds it, and
 * x + 32 ln2 whatever the bits; the slack covers the float rounding of the
 * score.  A token out of reach of the best score so far cannot win (nor
 * tie), so a sampler may skip hashing its bits (nl_race_out_of_reach) or
 * taking its logarithms (nl_race_bits_out_of_reach). */
#define NL_RACE_LN2 0.693147182f
static inline NL_HOST_DEVICE float nl_race_slack(float x)
{
    return 0.01f + fabsf(x) * 1e-6f;
}
static inline NL_HOST_DEVICE bool nl_race_out_of_reach(float x, float best)
{
    return x + 32.0f * NL_RACE_LN2 + nl_race_slack(x) < best;
}
static inline NL_HOST_DEVICE bool nl_race_bits_out_of_reach(float x, uint32_t bits, float best)
{
#ifdef __CUDA_ARCH__
    const int zeros = __clz(bits | 1u);
#else
    const int zeros = __builtin_clz(bits | 1u);
#endif
    return x + NL_RACE_LN2 * (float)(1 + zeros) + nl_race_slack(x) < best;
}

#ifndef __CUDACC__ /* a C function of the leader; device code only reads rows */
/* The row for the step after a request has generated `generated` tokens;
 * seed is params->seed or, for an unseeded request, the engine's pick. */
nl_sample_row sampling_row_from_params(const nl_sampling_params *params, uint64_t seed,
                                       uint64_t generated);
#endif

#endif
