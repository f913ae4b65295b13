/* sample_radix.cuh — a row's cuts found without sorting it: the finishing
 * block's way for a row whose kept tokens are too many to sort in shared
 * memory (a nearly flat row, a top_k above HEAD_MAX; sample_head.cuh
 * handles every other row).
 *
 * Every cut is a prefix of the order (logits descending, lower id first on
 * ties), so each is found by a radix search on the logit's order key: four
 * 8-bit passes, each a shared-memory histogram of the weight (1 for a
 * count, exp((l - max) / T) for a mass) of the tokens still matching the
 * key prefix, narrow to the one key at which the running total crosses the
 * target; ties on that key are then walked in id order.  top_k is a count
 * crossing, top_p a mass crossing (measured after top_k has cut, as on the
 * CPU), min_p a threshold; the race then runs over the tokens kept.  About
 * ten passes over the row: correct for any row, slow for every row.
 */
#ifndef NL_KERNELS_CUDA_SAMPLE_RADIX_CUH
#define NL_KERNELS_CUDA_SAMPLE_RADIX_CUH

#include "common/sampling.h"
#include "kernels/cuda/sample_block.cuh"

/* A position in the order: the element (key, id).  "Through c" means every
 * element up to and including c. */
struct cut {
    uint32_t key;
    int32_t id;
};

static __device__ __forceinline__ bool through(uint32_t key, int32_t id, cut c)
{
    return key > c.key || (key == c.key && id <= c.id);
}

static __device__ __forceinline__ cut earlier(cut a, cut b)
{
    return through(a.key, a.id, b) ? a : b;
}

struct radix_shared {
    float hist[256];
    int hist_n[256];
    int sel;
    float above;
    int n_sel; /* tokens in the selected bucket */
    int n_top;
};

/* What a crossing search counts: which tokens take part and their weight. */
struct row_view {
    const float *row;
    int vocab;
    float lmax;    /* the row's largest logit                                */
    float inv_t;   /* 1 / temperature                                        */
    bool mass;     /* weight exp((l - lmax) / T); otherwise 1                */
    cut limit;     /* only tokens through limit take part                    */
    float min_ratio; /* and only those with exp((l - lmax) / T) >= min_ratio */

    __device__ float weight(float l) const { return mass ? expf((l - lmax) * inv_t) : 1.0f; }
    __device__ bool takes_part(uint32_t k, int i, float l) const
    {
        if (!through(k, i, limit)) return false;
        return min_ratio <= 0.0f || expf((l - lmax) * inv_t) >= min_ratio;
    }
};

/* Every token of the row takes part, weighed by count. */
static __device__ row_view whole_row(const float *row, int vocab, float lmax)
{
    row_view v;
    v.row = row;
    v.vocab = vocab;
    v.lmax = lmax;
    v.inv_t = 1.0f;
    v.mass = false;
    v.limit.key = 0;
    v.limit.id = NO_ID;
    v.min_ratio = 0.0f;
    return v;
}

/* The first element, in order, at which the running weight reaches target
 * (>= target; with strict, > target).  found is false when the total stays
 * short of the target. */
static __device__ bool find_crossing(const row_view &v, float target, bool strict, cut *out,
                                     radix_shared *sh, block_scratch *bs)
{
    uint32_t prefix = 0, mask = 0;
    float above = 0.0f;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) {
            sh->hist[b] = 0.0f;
            sh->hist_n[b] = 0;
        }
        __syncthreads();
        /* Logits crowd into a few buckets (the top byte is sign and
         * exponent), so lanes of a warp that share a bucket add up first and
         * one of them does the shared-memory atomics. */
        for_each_logit(v.row, v.vocab, [&](int i, float l) {
            int b = -1;
            float w = 0.0f;
            if (i < v.vocab) {
                uint32_t k = order_key(l);
                if ((k & mask) == prefix && v.takes_part(k, i, l)) {
                    b = (k >> shift) & 255;
                    w = v.weight(l);
                }
            }
            unsigned peers = __match_any_sync(0xffffffffu, b);
            if (peers == 0xffffffffu) {
                for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
            } else if (b >= 0) {
                float sum = 0.0f;
                for (unsigned rest = peers; rest; rest &= rest - 1)
                    sum += __shfl_sync(peers, w, __ffs(rest) - 1);
                w = sum;
            }
            if (b >= 0 && (threadIdx.x & 31) == __ffs(peers) - 1) {
                atomicAdd(&sh->hist[b], w);
                atomicAdd(&sh->hist_n[b], __popc(peers));
            }
        });
        __syncthreads();
        if (threadIdx.x == 0) {
            float acc = above;
            int sel = -1;
            for (int b = 255; b >= 0; b--) {
                if (sh->hist_n[b] == 0) continue;
                float next = acc + sh->hist[b];
                if (strict ? next > target : next >= target) {
                    sel = b;
                    break;
                }
                acc = next;
            }
            sh->sel = sel;
            sh->above = acc;
            sh->n_sel = sel >= 0 ? sh->hist_n[sel] : 0;
        }
        __syncthreads();
        int sel = sh->sel;
        above = sh->above;
        int n_tied = sh->n_sel;
        __syncthreads();
        if (sel < 0) return false;
        prefix |= (uint32_t)sel << shift;
        mask |= 0xffu << shift;
        if (shift == 0 && n_tied == 1) {
            /* The usual case: one token has this exact logit. */
            int id = NO_ID;
            for_each_logit(v.row, v.vocab, [&](int i, float l) {
                if (i < v.vocab && order_key(l) == prefix && v.takes_part(prefix, i, l)) id = min(id, i);
            });
            out->key = prefix;
            out->id = block_min_i(id, bs);
            return true;
        }
    }
    /* Several tokens share the key: walk them in id order. */
    int last = NO_ID;
    for (int base = 0; base < v.vocab; base += blockDim.x) {
        int i = base + threadIdx.x;
        bool tied = false;
        float w = 0.0f;
        if (i < v.vocab) {
            float l = v.row[i];
            tied = order_key(l) == prefix && v.takes_part(prefix, i, l);
            if (tied) w = v.weight(l);
        }
        float total;
        float incl = block_scan(w, &total, bs);
        bool hit = tied && (strict ? above + incl > target : above + incl >= target);
        int first = block_min_i(hit ? i : NO_ID, bs);
        if (first != NO_ID) {
            out->key = prefix;
            out->id = first;
            return true;
        }
        int lt = block_min_i(tied ? -i : NO_ID, bs);
        if (lt != NO_ID) last = -lt;
        above += total;
    }
    /* Rounding left the walk just short: the last tied token is the cut. */
    if (last == NO_ID) return false;
    out->key = prefix;
    out->id = last;
    return true;
}

/* The race over the tokens v lets take part: the block's argmax of
 * (score, -id), one pass over the row. */
static __device__ int race_over_kept(const row_view &v, const nl_sample_row &sp, block_scratch *bs)
{
    const uint64_t key = nl_rng_row_key(sp.seed, sp.offset);
    unsigned long long best = 0;
    for_each_logit(v.row, v.vocab, [&](int i, float l) {
        if (i < v.vocab && v.takes_part(order_key(l), i, l)) best = max(best, race_entry(l, i, v.inv_t, key));
    });
    return ranked_id(block_max_u64(best, bs));
}

/* The row's first n_top tokens in order (n_top <= NL_MAX_LOGPROBS) into
 * top_id; returns how many were found. */
static __device__ int radix_top(const row_view &v, int n_top, int *top_id, radix_shared *sh,
                                block_scratch *bs)
{
    cut c;
    bool ok = find_crossing(v, (float)n_top, false, &c, sh, bs);
    if (threadIdx.x == 0) sh->n_top = 0;
    __syncthreads();
    if (ok) {
        for_each_logit(v.row, v.vocab, [&](int i, float l) {
            if (i < v.vocab && through(order_key(l), i, c)) {
                int at = atomicAdd(&sh->n_top, 1);
                if (at < NL_MAX_LOGPROBS) top_id[at] = i;
            }
        });
    }
    __syncthreads();
    int n = min(sh->n_top, NL_MAX_LOGPROBS);
    if (threadIdx.x == 0) {
        /* At most 20 entries: an insertion sort into the order. */
        for (int a = 1; a < n; a++) {
            int id = top_id[a], b = a - 1;
            uint32_t k = order_key(v.row[id]);
            while (b >= 0 && !through(order_key(v.row[top_id[b]]), top_id[b], cut{k, id})) {
                top_id[b + 1] = top_id[b];
                b--;
            }
            top_id[b + 1] = id;
        }
    }
    __syncthreads();
    return n;
}

/* The race after top_k, top_p and min_p, top_k's and top_p's cuts found
 * by crossing searches over the whole row (min_p is a threshold: with it
 * alone this is one race pass). */
static __device__ int radix_cut_race(row_view v, const nl_sample_row &sp, radix_shared *sh,
                                     block_scratch *bs)
{
    v.inv_t = 1.0f / sp.temperature;
    cut c;
    if (nl_sample_cuts_by_k(&sp, v.vocab) && find_crossing(v, (float)sp.top_k, false, &c, sh, bs))
        v.limit = c;
    v.mass = true;
    if (sp.top_p < 1.0f) {
        /* top_p is measured on the distribution renormalised over the
         * top_k survivors. */
        float z = 0.0f;
        for_each_logit(v.row, v.vocab, [&](int i, float l) {
            if (i < v.vocab && v.takes_part(order_key(l), i, l)) z += v.weight(l);
        });
        z = block_sum(z, bs);
        if (find_crossing(v, sp.top_p * z, false, &c, sh, bs)) v.limit = earlier(v.limit, c);
    }
    v.min_ratio = sp.min_p > 0.0f ? sp.min_p : 0.0f;
    return race_over_kept(v, sp, bs);
}

#endif
