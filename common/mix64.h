/* mix64.h — SplitMix64, the one 64-bit mixer behind the project's seeds,
 * counter-based random streams and integer hashes, on the host and (through
 * kernels.h) on the device. */
#ifndef NL_COMMON_MIX64_H
#define NL_COMMON_MIX64_H

#include <stdint.h>

#ifndef NL_HOST_DEVICE
#ifdef __CUDACC__
#define NL_HOST_DEVICE __host__ __device__
#else
#define NL_HOST_DEVICE
#endif
#endif

/* The golden-ratio increment of the SplitMix64 sequence. */
#define NL_MIX64_GAMMA 0x9e3779b97f4a7c15ull

/* SplitMix64's output function: a bijection of 64-bit words in which every
 * input bit moves every output bit, so counters and packed small ids spread
 * evenly. */
static inline NL_HOST_DEVICE uint64_t nl_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The next number of the SplitMix64 sequence whose state is *state. */
static inline uint64_t nl_splitmix64_next(uint64_t *state)
{
    *state += NL_MIX64_GAMMA;
    return nl_mix64(*state);
}

#endif
