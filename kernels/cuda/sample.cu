/* sample.cu — the sampler of kernels.h on the GPU: log-softmax, top-N
 * logprobs, greedy argmax and the seeded exponential race with optional
 * top-k / top-p / min-p cuts.
 *
 * Two kernels.  kernel_sample_scan reads every row once, split into several
 * blocks per row so that even a small batch fills the GPU: each block reduces
 * its slice to a partial (max, sum of exp) of the raw logits, the argmax, and
 * -- for rows with no cut -- the best (race score, id) of the slice.  The
 * race and the softmax share that single pass; a token whose score cannot
 * beat its thread's best so far skips the logarithms (see race_visit).
 * kernel_sample_finish, one block per row, combines a row's partials, which
 * is all a greedy or uncut row needs.
 *
 * Rows with cuts or top-N logprobs are finished by the block reading the row
 * again.  Every cut the sampler makes is a prefix of one order: logits
 * descending, lower id first on ties (p is monotone in the logit).  So
 * instead of sorting a 150k-entry row, each cut is found by a radix search on
 * the logit's order-preserving 32-bit key: four 8-bit passes, each a
 * shared-memory histogram of the weight (1 for a count, exp((l - max) / T)
 * for a mass) of the tokens still matching the key prefix, narrow to the one
 * key at which the running total crosses the target; ties on that key are
 * then walked in id order.  top_k is a count crossing, top_p a mass crossing
 * (measured after top_k has cut, as on the CPU), min_p a threshold; the race
 * then runs over the tokens kept.
 *
 * The partials live in the backend's step scratch, which the sampler has to
 * itself while it runs: ops are ordered on the one stream and none keeps
 * partials there past its own last kernel.
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


/* ---- the single pass -------------------------------------------------------- */

#define SCAN_THREADS 256
#define SCAN_MAX_SPLITS 64
#define SCAN_MIN_CHUNK 1024 /* logits per block, at least */

static __device__ __forceinline__ bool row_has_cuts(const nl_sample_row &sp, int vocab)
{
    return (sp.top_k > 0 && sp.top_k < vocab) || sp.top_p < 1.0f || sp.min_p > 0.0f;
}

/* What one thread, block or row slice has seen.  sum is of exp(l - max);
 * argmax and race_id take the lowest id on ties, as the definition does. */
struct scan_part {
    float max, sum;
    int argmax;
    float race;   /* best race score, -inf before any */
    int race_id;  /* NO_ID before any                 */
};

static __device__ __forceinline__ scan_part scan_merge(scan_part a, scan_part b)
{
    scan_part o;
    o.max = fmaxf(a.max, b.max);
    o.sum = a.sum * expf(a.max - o.max) + b.sum * expf(b.max - o.max);
    o.argmax = a.max > b.max || (a.max == b.max && a.argmax < b.argmax) ? a.argmax : b.argmax;
    bool ra = a.race > b.race || (a.race == b.race && a.race_id < b.race_id);
    o.race = ra ? a.race : b.race;
    o.race_id = ra ? a.race_id : b.race_id;
    return o;
}

static __device__ __forceinline__ scan_part warp_merge(scan_part p)
{
    for (int o = 16; o > 0; o >>= 1) {
        scan_part q;
        q.max = __shfl_xor_sync(0xffffffffu, p.max, o);
        q.sum = __shfl_xor_sync(0xffffffffu, p.sum, o);
        q.argmax = __shfl_xor_sync(0xffffffffu, p.argmax, o);
        q.race = __shfl_xor_sync(0xffffffffu, p.race, o);
        q.race_id = __shfl_xor_sync(0xffffffffu, p.race_id, o);
        p = scan_merge(p, q);
    }
    return p;
}

static __device__ __forceinline__ scan_part scan_empty(void)
{
    /* -FLT_MAX rather than -inf: exp(l - max) stays 0, never NaN, for l = -inf */
    return scan_part{-3.402823466e38f, 0.0f, NO_ID, -INFINITY, NO_ID};
}

/* Token i in the race: the hash and the logarithms run only when the
 * score's bound reaches the thread's best (common/sampling.h), so skipping
 * never changes the winner. */
static __device__ __forceinline__ void race_visit(scan_part &p, float l, int i, float inv_t,
                                                  uint64_t key)
{
    float x = l * inv_t;
    if (nl_race_out_of_reach(x, p.race)) return;
    uint32_t bits = nl_rng_race_bits(key, (uint32_t)i);
    if (nl_race_bits_out_of_reach(x, bits, p.race)) return;
    float score = nl_race_score(l, inv_t, nl_rng_race_uniform(bits));
    if (score > p.race || (score == p.race && i < p.race_id)) {
        p.race = score;
        p.race_id = i;
    }
}

static __device__ __forceinline__ void scan_visit(scan_part &p, float l, int i, bool race,
                                                  float inv_t, uint64_t key)
{
    if (l > p.max) {
        p.sum = p.sum * expf(p.max - l) + 1.0f;
        p.max = l;
        p.argmax = i;
    } else {
        p.sum += expf(l - p.max);
    }
    if (race) race_visit(p, l, i, inv_t, key);
}

/* grid (splits, m): block (s, r) reduces logits [s chunk, (s + 1) chunk) of
 * row r into parts[r * splits + s]. */
__global__ void __launch_bounds__(SCAN_THREADS)
    kernel_sample_scan(const float *logits, int vocab, const nl_sample_row *rows, int chunk,
                       bool vec4, scan_part *parts)
{
    pdl_wait();
    pdl_release();
    __shared__ scan_part warp_parts[SCAN_THREADS / 32];
    const int r = blockIdx.y;
    const nl_sample_row sp = rows[r];
    const bool race = sp.temperature > 0.0f && !row_has_cuts(sp, vocab);
    const float inv_t = race ? 1.0f / sp.temperature : 1.0f;
    const uint64_t key = nl_rng_row_key(sp.seed, sp.offset);
    const float *row = logits + (size_t)r * vocab;
    const int begin = blockIdx.x * chunk, end = min(vocab, begin + chunk);

    scan_part p = scan_empty();
    if (vec4) {
        /* begin and end are multiples of 4: two 16-byte loads in flight per
         * thread before any arithmetic */
        const float4 *q = reinterpret_cast<const float4 *>(row + begin);
        const int n4 = (end - begin) >> 2, B = blockDim.x;
        for (int j = threadIdx.x; j < n4; j += 2 * B) {
            float4 a = __ldg(q + j);
            bool has_b = j + B < n4;
            float4 b = has_b ? __ldg(q + j + B) : a;
            int i = begin + 4 * j;
            scan_visit(p, a.x, i, race, inv_t, key);
            scan_visit(p, a.y, i + 1, race, inv_t, key);
            scan_visit(p, a.z, i + 2, race, inv_t, key);
            scan_visit(p, a.w, i + 3, race, inv_t, key);
            if (has_b) {
                i += 4 * B;
                scan_visit(p, b.x, i, race, inv_t, key);
                scan_visit(p, b.y, i + 1, race, inv_t, key);
                scan_visit(p, b.z, i + 2, race, inv_t, key);
                scan_visit(p, b.w, i + 3, race, inv_t, key);
            }
        }
    } else {
        for (int i = begin + threadIdx.x; i < end; i += blockDim.x)
            scan_visit(p, __ldg(row + i), i, race, inv_t, key);
    }
    p = warp_merge(p);
    if ((threadIdx.x & 31) == 0) warp_parts[threadIdx.x >> 5] = p;
    __syncthreads();
    if (threadIdx.x < 32) {
        p = threadIdx.x < (blockDim.x >> 5) ? warp_parts[threadIdx.x] : scan_empty();
        p = warp_merge(p);
        if (threadIdx.x == 0) parts[(size_t)r * gridDim.x + blockIdx.x] = p;
    }
}

/* ---- finishing a row -------------------------------------------------------- */

/* The race over the tokens a cut row keeps: the block's argmax of (score, -id). */
static __device__ int race_over_kept(const row_view &v, const nl_sample_row &sp,
                                     sample_shared *sh)
{
    const uint64_t key = nl_rng_row_key(sp.seed, sp.offset);
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < v.vocab; i += blockDim.x) {
        float l = v.row[i];
        if (!v.takes_part(order_key(l), i, l)) continue;
        /* + 0.0f: -0 and +0 are one score, as in a float comparison */
        float score = nl_race_score(l, v.inv_t, nl_rng_race_uniform(nl_rng_race_bits(key, i))) + 0.0f;
        unsigned long long c = ((unsigned long long)order_key(score) << 32) | (uint32_t)(NO_ID - i);
        best = c > best ? c : best;
    }
    best = block_max_u64(best, sh);
    return NO_ID - (int)(uint32_t)(best & 0xffffffffu);
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    kernel_sample_finish(const float *logits, int vocab, const nl_sample_row *rows,
                         const scan_part *parts, int splits, int32_t *ids, float *logprobs,
                         int32_t *top_ids, float *top_logprobs)
{
    pdl_wait();
    pdl_release();
    __shared__ sample_shared sh;
    __shared__ scan_part whole;
    const int r = blockIdx.x;
    const float *row = logits + (size_t)r * vocab;
    const nl_sample_row sp = rows[r];

    if (threadIdx.x < 32) {
        scan_part p = scan_empty();
        for (int s = threadIdx.x; s < splits; s += 32)
            p = scan_merge(p, parts[(size_t)r * splits + s]);
        p = warp_merge(p);
        if (threadIdx.x == 0) whole = p;
    }
    __syncthreads();
    const int argmax = whole.argmax == NO_ID ? 0 : whole.argmax; /* NO_ID: all -inf */
    const float lmax = row[argmax];
    const float lse = whole.max + logf(whole.sum);

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
    } else if (threadIdx.x < NL_MAX_LOGPROBS) {
        top_ids[(size_t)r * NL_MAX_LOGPROBS + threadIdx.x] = -1;
        top_logprobs[(size_t)r * NL_MAX_LOGPROBS + threadIdx.x] = 0.0f;
    }

    int chosen = argmax;
    if (sp.temperature > 0.0f && !row_has_cuts(sp, vocab)) {
        chosen = whole.race_id;
    } else if (sp.temperature > 0.0f) {
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
        chosen = race_over_kept(v, sp, &sh);
    }
    if (threadIdx.x == 0) {
        ids[r] = chosen;
        logprobs[r] = row[chosen] - lse;
    }
}

nl_status cuda_sample(nl_backend *b, const float *logits, int32_t m, int32_t vocab,
                      const nl_sample_row *rows, int32_t *ids, float *logprobs,
                      int32_t *top_ids, float *top_logprobs)
{
    cuda_backend *be = cuda_be(b);
    if (m <= 0) return NL_OK;
    if (vocab <= 0 || vocab >= NO_ID)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: sample vocab %d", vocab);
    if (m > 65535) return nl_error(NL_ERR_INVALID_ARG, "cuda: sample %d rows (limit 65535)", m);
    /* About four blocks per SM in all, each at least SCAN_MIN_CHUNK logits. */
    int splits = (4 * be->num_sms + m - 1) / m;
    splits = min(splits, min(SCAN_MAX_SPLITS, (vocab + SCAN_MIN_CHUNK - 1) / SCAN_MIN_CHUNK));
    size_t fit = be->step_scratch_bytes / ((size_t)m * sizeof(scan_part));
    if ((size_t)splits > fit) splits = (int)fit;
    if (splits < 1)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: sample %d rows need more scratch than %zu bytes",
                        m, be->step_scratch_bytes);
    int chunk = ((vocab + splits - 1) / splits + 3) & ~3;
    splits = (vocab + chunk - 1) / chunk;
    bool vec4 = vocab % 4 == 0 && ((uintptr_t)logits & 15) == 0;
    scan_part *parts = reinterpret_cast<scan_part *>(be->step_scratch);
    NL_CUDA_CHECK(cuda_launch(be, kernel_sample_scan, dim3(splits, m), SCAN_THREADS, 0, logits, vocab,
                              rows, chunk, vec4, parts));
    NL_CUDA_CHECK(cuda_launch(be, kernel_sample_finish, m, SAMPLE_THREADS, 0, logits, vocab, rows,
                              parts, splits, ids, logprobs, top_ids, top_logprobs));
    return NL_OK;
}
