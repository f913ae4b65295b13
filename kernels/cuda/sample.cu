/* sample.cu — the sampler of kernels.h on the GPU: log-softmax, top-N
 * logprobs, greedy argmax and seeded temperature / top-k / top-p / min-p
 * sampling, one block per logits row.
 *
 * Every cut the sampler makes is a prefix of one order: logits descending,
 * lower id first on ties (p is monotone in the logit).  So instead of sorting
 * a 150k-entry row, each cut is found by a radix search on the logit's
 * order-preserving 32-bit key: four 8-bit passes, each a shared-memory
 * histogram of the weight (1 for a count, exp((l - max) / T) for a mass) of
 * the tokens still matching the key prefix, narrow to the one key at which
 * the running total crosses the target; ties on that key are then walked in
 * id order.  top_k is a count crossing, top_p a mass crossing, min_p a
 * threshold, and the sample itself the mass crossing at u * kept mass inside
 * the kept prefix.  As on the CPU, top_p is measured after top_k has cut.  Only the block's own row is read; no scratch memory.
 */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"

#define SAMPLE_THREADS 1024
#define NO_ID 0x7fffffff

static __device__ __forceinline__ uint32_t order_key(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

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

struct sample_shared {
    float hist[256];
    int hist_n[256];
    float red_f[32];
    unsigned long long red_u[32];
    int red_i[32];
    int sel;
    float above;
    int n_sel;    /* tokens in the selected bucket */
    int n_top;
    int top_id[NL_MAX_LOGPROBS];
};

static __device__ float block_sum(float v, sample_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh->red_f[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? sh->red_f[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) sh->red_f[0] = v;
    __syncthreads();
    v = sh->red_f[0];
    __syncthreads();
    return v;
}

static __device__ unsigned long long block_max_u64(unsigned long long v, sample_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    if ((threadIdx.x & 31) == 0) sh->red_u[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? sh->red_u[threadIdx.x] : 0ull;
        for (int o = 16; o > 0; o >>= 1) {
            unsigned long long w = __shfl_xor_sync(0xffffffffu, v, o);
            v = w > v ? w : v;
        }
        if (threadIdx.x == 0) sh->red_u[0] = v;
    }
    __syncthreads();
    v = sh->red_u[0];
    __syncthreads();
    return v;
}

static __device__ int block_min_i(int v, sample_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) sh->red_i[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? sh->red_i[threadIdx.x] : NO_ID;
        for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (threadIdx.x == 0) sh->red_i[0] = v;
    }
    __syncthreads();
    v = sh->red_i[0];
    __syncthreads();
    return v;
}

/* Inclusive prefix sum over the block in thread order; *total gets the sum. */
static __device__ float block_scan(float v, float *total, sample_shared *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        float w = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += w;
    }
    if (lane == 31) sh->red_f[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < (blockDim.x >> 5) ? sh->red_f[lane] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            float w = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += w;
        }
        sh->red_f[lane] = s; /* inclusive over warps */
    }
    __syncthreads();
    if (warp > 0) v += sh->red_f[warp - 1];
    *total = sh->red_f[(blockDim.x >> 5) - 1];
    __syncthreads();
    return v;
}

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

/* The first element, in order, at which the running weight reaches target
 * (>= target; with strict, > target).  found is false when the total stays
 * short of the target. */
static __device__ bool find_crossing(const row_view &v, float target, bool strict, cut *out,
                                     sample_shared *sh)
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
        for (int base = 0; base < v.vocab; base += blockDim.x) {
            int i = base + threadIdx.x;
            int b = -1;
            float w = 0.0f;
            if (i < v.vocab) {
                float l = v.row[i];
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
        }
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
            for (int i = threadIdx.x; i < v.vocab; i += blockDim.x) {
                float l = v.row[i];
                if (order_key(l) == prefix && v.takes_part(prefix, i, l)) id = i;
            }
            out->key = prefix;
            out->id = block_min_i(id, sh);
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
        float incl = block_scan(w, &total, sh);
        bool hit = tied && (strict ? above + incl > target : above + incl >= target);
        int first = block_min_i(hit ? i : NO_ID, sh);
        if (first != NO_ID) {
            out->key = prefix;
            out->id = first;
            return true;
        }
        int lt = block_min_i(tied ? -i : NO_ID, sh);
        if (lt != NO_ID) last = -lt;
        above += total;
    }
    /* Rounding left the walk just short: the last tied token is the cut. */
    if (last == NO_ID) return false;
    out->key = prefix;
    out->id = last;
    return true;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    kernel_sample(const float *logits, int vocab, const nl_sample_row *rows, int32_t *ids,
                  float *logprobs, int32_t *top_ids, float *top_logprobs)
{
    __shared__ sample_shared sh;
    const int r = blockIdx.x;
    const float *row = logits + (size_t)r * vocab;
    const nl_sample_row sp = rows[r];

    /* Argmax, lowest id on ties: the max of (key, ~id). */
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        unsigned long long c =
            ((unsigned long long)order_key(row[i]) << 32) | (uint32_t)(NO_ID - i);
        best = c > best ? c : best;
    }
    best = block_max_u64(best, &sh);
    const int argmax = NO_ID - (int)(uint32_t)(best & 0xffffffffu);
    const float lmax = row[argmax];

    float se = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) se += expf(row[i] - lmax);
    const float lse = lmax + logf(block_sum(se, &sh));

    row_view v;
    v.row = row;
    v.vocab = vocab;
    v.lmax = lmax;
    v.inv_t = 1.0f;
    v.mass = false;
    v.limit.key = 0;
    v.limit.id = NO_ID;
    v.min_ratio = 0.0f;

    int n_top = min(min(sp.n_logprobs, NL_MAX_LOGPROBS), vocab);
    if (n_top > 0) {
        cut c;
        bool ok = find_crossing(v, (float)n_top, false, &c, &sh);
        if (threadIdx.x == 0) sh.n_top = 0;
        __syncthreads();
        if (ok) {
            for (int i = threadIdx.x; i < vocab; i += blockDim.x)
                if (through(order_key(row[i]), i, c)) {
                    int at = atomicAdd(&sh.n_top, 1);
                    if (at < NL_MAX_LOGPROBS) sh.top_id[at] = i;
                }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int n = min(sh.n_top, NL_MAX_LOGPROBS);
            /* At most 20 entries: an insertion sort into the order. */
            for (int a = 1; a < n; a++) {
                int id = sh.top_id[a], b = a - 1;
                uint32_t k = order_key(row[id]);
                while (b >= 0 && !through(order_key(row[sh.top_id[b]]), sh.top_id[b],
                                          cut{k, id})) {
                    sh.top_id[b + 1] = sh.top_id[b];
                    b--;
                }
                sh.top_id[b + 1] = id;
            }
            for (int a = 0; a < NL_MAX_LOGPROBS; a++) {
                bool valid = a < n;
                top_ids[(size_t)r * NL_MAX_LOGPROBS + a] = valid ? sh.top_id[a] : -1;
                top_logprobs[(size_t)r * NL_MAX_LOGPROBS + a] =
                    valid ? row[sh.top_id[a]] - lse : 0.0f;
            }
        }
        __syncthreads();
    }

    int chosen = argmax;
    if (sp.temperature > 0.0f) {
        v.inv_t = 1.0f / sp.temperature;
        cut c;
        if (sp.top_k > 0 && sp.top_k < vocab && find_crossing(v, (float)sp.top_k, false, &c, &sh))
            v.limit = c;
        v.mass = true;
        if (sp.top_p < 1.0f) {
            /* top_p is measured on the distribution renormalised over the
             * top_k survivors. */
            float z = 0.0f;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
                float l = row[i];
                if (v.takes_part(order_key(l), i, l)) z += v.weight(l);
            }
            z = block_sum(z, &sh);
            if (find_crossing(v, sp.top_p * z, false, &c, &sh)) v.limit = earlier(v.limit, c);
        }
        v.min_ratio = sp.min_p > 0.0f ? sp.min_p : 0.0f;

        float kept = 0.0f;
        int last = NO_ID; /* the kept token latest in the order, as a fallback */
        unsigned long long worst = ~0ull;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            float l = row[i];
            uint32_t k = order_key(l);
            if (!v.takes_part(k, i, l)) continue;
            kept += v.weight(l);
            unsigned long long c2 = ((unsigned long long)k << 32) | (uint32_t)(NO_ID - i);
            worst = c2 < worst ? c2 : worst;
        }
        kept = block_sum(kept, &sh);
        worst = ~block_max_u64(~worst, &sh);
        last = NO_ID - (int)(uint32_t)(worst & 0xffffffffu);

        float u = nl_rng_uniform(sp.seed, sp.offset);
        chosen = find_crossing(v, u * kept, true, &c, &sh) ? c.id : last;
    }
    if (threadIdx.x == 0) {
        ids[r] = chosen;
        logprobs[r] = row[chosen] - lse;
    }
}

nl_status cuda_sample(cuda_backend *be, const float *logits, int32_t m, int32_t vocab,
                      const nl_sample_row *rows, int32_t *ids, float *logprobs,
                      int32_t *top_ids, float *top_logprobs)
{
    if (m <= 0) return NL_OK;
    if (vocab <= 0 || vocab >= NO_ID)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: sample vocab %d", vocab);
    kernel_sample<<<m, SAMPLE_THREADS, 0, be->stream>>>(logits, vocab, rows, ids, logprobs,
                                                        top_ids, top_logprobs);
    NL_CUDA_CHECK_LAUNCH();
    return NL_OK;
}
