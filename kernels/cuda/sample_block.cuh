/* sample_block.cuh — what the sampler's finishing block is built from: the
 * order every cut is a prefix of (logits descending, lower id first on
 * ties) as 32- and 64-bit keys, and block-wide reductions and prefix sums
 * over the block's threads.  Included by sample.cu and the two ways it puts
 * a row in order (sample_head.cuh, sample_radix.cuh).
 */
#ifndef NL_KERNELS_CUDA_SAMPLE_BLOCK_CUH
#define NL_KERNELS_CUDA_SAMPLE_BLOCK_CUH

#include <stdint.h>

#include "common/sampling.h"

#define NO_ID 0x7fffffff
#define SAMPLE_THREADS 1024 /* the finishing block's */

/* The logit's order-preserving key: ascending keys are ascending logits.
 * + 0.0f makes -0 into +0: equal floats get one key, so ties go by id. */
static __device__ __forceinline__ uint32_t order_key(float f)
{
    uint32_t u = __float_as_uint(f + 0.0f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The logit a key came from. */
static __device__ __forceinline__ float key_logit(uint32_t k)
{
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* Token (l, id) as one 64-bit word whose descending order is the sampler's
 * order; 0 is below every token (NO_ID - id > 0), so it pads a sort. */
static __device__ __forceinline__ unsigned long long ranked_token(float l, int id)
{
    return ((unsigned long long)order_key(l) << 32) | (uint32_t)(NO_ID - id);
}
static __device__ __forceinline__ int ranked_id(unsigned long long t)
{
    return NO_ID - (int)(uint32_t)(t & 0xffffffffu);
}
static __device__ __forceinline__ float ranked_logit(unsigned long long t)
{
    return key_logit((uint32_t)(t >> 32));
}

/* Token id's entry in the race, as a word whose largest value over the
 * kept tokens is the winner: its score (+ 0.0f: -0 and +0 are one score,
 * as in a float comparison), then the lower id. */
static __device__ __forceinline__ unsigned long long race_entry(float l, int id, float inv_t,
                                                                uint64_t key)
{
    float score = nl_race_score(l, inv_t, nl_rng_race_uniform(nl_rng_race_bits(key, id))) + 0.0f;
    return ranked_token(score, id);
}

/* Calls visit(i, l) for every logit of the row, each thread taking ids
 * threadIdx.x + j * blockDim.x.  One block reads a whole row, so each
 * thread loads ROW_LOADS logits before it looks at any: a loop of one load
 * an iteration waits out the memory's latency each time.  Every thread
 * calls visit the same number of times (ids past the row read as -inf with
 * i >= vocab), so visit may use warp votes and shuffles. */
#define ROW_LOADS 8
template <typename F>
static __device__ __forceinline__ void for_each_logit(const float *row, int vocab, F &&visit)
{
    for (int base = threadIdx.x; base - (int)threadIdx.x < vocab; base += ROW_LOADS * blockDim.x) {
        float l[ROW_LOADS];
#pragma unroll
        for (int u = 0; u < ROW_LOADS; u++) {
            const int i = base + u * blockDim.x;
            l[u] = i < vocab ? __ldg(row + i) : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < ROW_LOADS; u++) visit(base + u * (int)blockDim.x, l[u]);
    }
}

/* One slot per warp for each kind of block reduction. */
struct block_scratch {
    float f[32];
    double d[32];
    unsigned long long u[32];
    int i[32];
};

template <typename T> static __device__ __forceinline__ T *scratch_of(block_scratch *s);
template <> __device__ __forceinline__ float *scratch_of<float>(block_scratch *s) { return s->f; }
template <> __device__ __forceinline__ double *scratch_of<double>(block_scratch *s) { return s->d; }
template <> __device__ __forceinline__ int *scratch_of<int>(block_scratch *s) { return s->i; }

template <typename T> static __device__ T block_sum(T v, block_scratch *s)
{
    T *red = scratch_of<T>(s);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : T(0);
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) red[0] = v;
    }
    __syncthreads();
    v = red[0];
    __syncthreads();
    return v;
}

static __device__ unsigned long long block_max_u64(unsigned long long v, block_scratch *s)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    if ((threadIdx.x & 31) == 0) s->u[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? s->u[threadIdx.x] : 0ull;
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
            v = w > v ? w : v;
        }
        if (threadIdx.x == 0) s->u[0] = v;
    }
    __syncthreads();
    v = s->u[0];
    __syncthreads();
    return v;
}

static __device__ int block_min_i(int v, block_scratch *s)
{
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) s->i[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? s->i[threadIdx.x] : NO_ID;
        for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (threadIdx.x == 0) s->i[0] = v;
    }
    __syncthreads();
    v = s->i[0];
    __syncthreads();
    return v;
}

/* Inclusive prefix sum over the block in thread order; *total gets the sum. */
template <typename T> static __device__ T block_scan(T v, T *total, block_scratch *s)
{
    T *red = scratch_of<T>(s);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        T w = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += w;
    }
    if (lane == 31) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T sum = lane < (blockDim.x >> 5) ? red[lane] : T(0);
        for (int o = 1; o < 32; o <<= 1) {
            T w = __shfl_up_sync(0xffffffffu, sum, o);
            if (lane >= o) sum += w;
        }
        red[lane] = sum; /* inclusive over warps */
    }
    __syncthreads();
    if (warp > 0) v += red[warp - 1];
    *total = red[(blockDim.x >> 5) - 1];
    __syncthreads();
    return v;
}

#endif
