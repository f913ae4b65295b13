/* sample_head.cuh — the head of a row in order: the finishing block's way
 * to make a row's cuts and find its top-N logprobs in two passes over the
 * row.
 *
 * Each of those is a prefix of the order (logits descending, lower id first
 * on ties): top_k keeps k tokens, top_p keeps tokens until their mass
 * reaches p, the logprobs report N.  Such a prefix lies within some
 * distance below the row's largest logit, and in the distributions a model
 * samples from, that head holds a few hundred tokens at most.  So the first
 * pass bins the row by the distance (HEAD_BINS_PER_LOGIT bins a logit, one
 * last bin for all further down), counting tokens and, for top_p without a
 * top_k, their mass; prefix sums over the bins name the nearest bin through
 * which the head holds the count needed and the mass needed (with a margin
 * far above the float sums' rounding).  The second pass gathers that head
 * into shared memory, a bitonic sort puts it in order, and the cuts, the
 * race and the logprobs read it there.  A head over HEAD_MAX tokens (a
 * nearly flat row, a top_k above HEAD_MAX) goes to the radix search of
 * sample_radix.cuh instead.
 */
#ifndef NL_KERNELS_CUDA_SAMPLE_HEAD_CUH
#define NL_KERNELS_CUDA_SAMPLE_HEAD_CUH

#include "common/sampling.h"
#include "kernels/cuda/sample_block.cuh"

#define HEAD_BINS (2 * SAMPLE_THREADS) /* two a thread for the prefix sums */
#define HEAD_BINS_PER_LOGIT 16.0f      /* 128 logits below the max binned  */
#define HEAD_MAX 4096                  /* tokens sorted in shared memory   */
#define HEAD_PER_THREAD (HEAD_MAX / SAMPLE_THREADS)
#define HEAD_MASS_MARGIN 1.001         /* bins' float sums err by < 1e-4   */

struct head_shared {
    union {
        struct {
            int count[HEAD_BINS];
            float mass[HEAD_BINS]; /* of exp((l - lmax) / T), last bin left out */
        } bins;
        unsigned long long token[HEAD_MAX]; /* ranked_token words, sorted descending */
    };
    int n_gathered;
    int n_head;
};

static __device__ __forceinline__ int head_bin(float l, float lmax)
{
    float d = (lmax - l) * HEAD_BINS_PER_LOGIT;
    if (!(d < (float)(HEAD_BINS - 1))) return HEAD_BINS - 1; /* far below, or NaN */
    return d > 0.0f ? (int)d : 0;
}

static __device__ void sort_descending(unsigned long long *t, int size)
{
    for (int k = 2; k <= size; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < size; i += blockDim.x) {
                int p = i ^ j;
                if (p <= i) continue;
                unsigned long long a = t[i], b = t[p];
                if ((i & k) == 0 ? a < b : a > b) {
                    t[i] = b;
                    t[p] = a;
                }
            }
            __syncthreads();
        }
}

/* The first bin, over the bins held two a thread (b0, b0 + 1 with running
 * totals through them), at which the running total reaches target; NO_ID if
 * none. */
template <typename T>
static __device__ int first_bin_reaching(T incl, T second, T target, block_scratch *bs)
{
    const int b0 = 2 * threadIdx.x;
    int first = incl - second >= target ? b0 : incl >= target ? b0 + 1 : NO_ID;
    return block_min_i(first, bs);
}

/* Sorts into hs->token the row's head that holds at least need tokens and,
 * with top_p < 1, the mass top_p of the row at 1 / inv_t (whose total goes
 * to *row_mass); returns its size, or -1 when that head is over HEAD_MAX. */
static __device__ int head_sort(const float *row, int vocab, float lmax, int need, float top_p,
                                float inv_t, double *row_mass, head_shared *hs, block_scratch *bs)
{
    const int lane = threadIdx.x & 31;
    const bool by_mass = top_p < 1.0f;
    for (int b = threadIdx.x; b < HEAD_BINS; b += blockDim.x) {
        hs->bins.count[b] = 0;
        hs->bins.mass[b] = 0.0f;
    }
    __syncthreads();
    double z = 0.0;
    for_each_logit(row, vocab, [&](int i, float l) {
        const int bin = i < vocab ? head_bin(l, lmax) : -1;
        float w = 0.0f;
        if (by_mass && i < vocab) {
            w = expf((l - lmax) * inv_t);
            z += w;
        }
        /* the tail past the binned range is one address: a warp adds once */
        const unsigned far = __ballot_sync(0xffffffffu, bin == HEAD_BINS - 1);
        if (bin >= 0 && bin < HEAD_BINS - 1) {
            atomicAdd(&hs->bins.count[bin], 1);
            if (by_mass) atomicAdd(&hs->bins.mass[bin], w);
        }
        if (lane == 0 && far) atomicAdd(&hs->bins.count[HEAD_BINS - 1], __popc(far));
    });
    __syncthreads();
    if (by_mass) z = block_sum(z, bs);

    const int b0 = 2 * threadIdx.x;
    int c1 = hs->bins.count[b0 + 1], c_total;
    int c_incl = block_scan(hs->bins.count[b0] + c1, &c_total, bs);
    int last = first_bin_reaching(c_incl, c1, need, bs);
    if (by_mass) {
        float m1 = hs->bins.mass[b0 + 1], m_total;
        float m_incl = block_scan(hs->bins.mass[b0] + m1, &m_total, bs);
        int by_p = first_bin_reaching(m_incl, m1, (float)(top_p * z * HEAD_MASS_MARGIN), bs);
        last = max(last, by_p);
    }
    if (last >= HEAD_BINS) last = HEAD_BINS - 1; /* NO_ID: the whole row */
    if (threadIdx.x == last >> 1) hs->n_head = last & 1 ? c_incl : c_incl - c1;
    if (threadIdx.x == 0) hs->n_gathered = 0;
    __syncthreads(); /* the bins are read: hs->token may overwrite them */
    const int n = hs->n_head;
    if (n > HEAD_MAX) return -1;

    for_each_logit(row, vocab, [&](int i, float l) {
        const bool take = i < vocab && head_bin(l, lmax) <= last;
        const unsigned takers = __ballot_sync(0xffffffffu, take);
        if (takers == 0) return;
        int at = 0;
        if (lane == 0) at = atomicAdd(&hs->n_gathered, __popc(takers));
        at = __shfl_sync(0xffffffffu, at, 0) + __popc(takers & ((1u << lane) - 1));
        if (take && at < HEAD_MAX) hs->token[at] = ranked_token(l, i);
    });
    __syncthreads();
    int size = 32;
    while (size < n) size <<= 1;
    for (int j = n + threadIdx.x; j < size; j += blockDim.x) hs->token[j] = 0ull;
    __syncthreads();
    sort_descending(hs->token, size);
    *row_mass = z;
    return n;
}

/* The race over the kept prefix of a sorted head of n tokens: top_k, then
 * top_p over the top_k kept (over the whole row, of mass row_mass, without
 * a top_k), then min_p.  Returns the winner, or -1 when top_p's crossing
 * lies past a head that is not the whole row (rounding at the margin). */
static __device__ int head_race(const head_shared *hs, int n, int vocab, const nl_sample_row &sp,
                                float lmax, double row_mass, block_scratch *bs)
{
    const float inv_t = 1.0f / sp.temperature;
    const bool by_k = nl_sample_cuts_by_k(&sp, vocab);
    int kept = by_k ? min(sp.top_k, n) : n;
    if (sp.top_p < 1.0f) {
        /* running mass in order, in double as on the CPU: thread t holds
         * entries [t HEAD_PER_THREAD, (t + 1) HEAD_PER_THREAD) */
        const int j0 = threadIdx.x * HEAD_PER_THREAD;
        double w[HEAD_PER_THREAD], own = 0.0;
        for (int q = 0; q < HEAD_PER_THREAD; q++) {
            int j = j0 + q;
            w[q] = j < kept ? (double)expf((ranked_logit(hs->token[j]) - lmax) * inv_t) : 0.0;
            own += w[q];
        }
        double kept_mass;
        double cum = block_scan(own, &kept_mass, bs) - own;
        double target = (double)sp.top_p * (by_k ? kept_mass : row_mass);
        int first = NO_ID;
        for (int q = 0; q < HEAD_PER_THREAD && first == NO_ID; q++) {
            cum += w[q];
            if (j0 + q < kept && cum >= target) first = j0 + q;
        }
        first = block_min_i(first, bs);
        if (first != NO_ID)
            kept = first + 1;
        else if (!by_k && n < vocab)
            return -1;
    }
    const uint64_t key = nl_rng_row_key(sp.seed, sp.offset);
    unsigned long long best = 0;
    for (int j = threadIdx.x; j < kept; j += blockDim.x) {
        float l = ranked_logit(hs->token[j]);
        int id = ranked_id(hs->token[j]);
        if (sp.min_p > 0.0f && expf((l - lmax) * inv_t) < sp.min_p) continue;
        best = max(best, race_entry(l, id, inv_t, key));
    }
    return ranked_id(block_max_u64(best, bs));
}

#endif
