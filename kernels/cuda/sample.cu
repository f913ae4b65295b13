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
 * again.  Every such cut is a prefix of one order (logits descending, lower
 * id first on ties; p is monotone in the logit), and the prefix a real
 * distribution needs is short: the block gathers the row's head that holds
 * it and sorts that in shared memory (sample_head.cuh), two passes over the
 * row.  A row whose head would be too large (a nearly flat row, a huge
 * top_k) is cut instead by radix searches over the whole row
 * (sample_radix.cuh), about ten passes; for top_p alone the scan's
 * tempered mass often shows that before the head's passes are spent.
 * min_p alone is a threshold: one pass, no order.
 *
 * The partials live in the backend's step scratch, which the sampler has to
 * itself while it runs: ops are ordered on the one stream and none keeps
 * partials there past its own last kernel.
 */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/sample_block.cuh"
#include "kernels/cuda/sample_head.cuh"
#include "kernels/cuda/sample_radix.cuh"

/* ---- the single pass -------------------------------------------------------- */

#define SCAN_THREADS 256
#define SCAN_MAX_SPLITS 64
#define SCAN_MIN_CHUNK 1024 /* logits per block, at least */

static __device__ __forceinline__ bool row_has_cuts(const nl_sample_row &sp, int vocab)
{
    return nl_sample_cuts_by_k(&sp, vocab) || sp.top_p < 1.0f || sp.min_p > 0.0f;
}

/* top_p without a top_k: the head must hold the mass top_p of the row */
static __device__ __forceinline__ bool cut_by_mass_alone(const nl_sample_row &sp, int vocab)
{
    return sp.top_p < 1.0f && !nl_sample_cuts_by_k(&sp, vocab);
}

/* What one thread, block or row slice has seen.  sum is of exp(l - max),
 * tmass of exp((l - max) / T) for a row cut by top_p alone (0 otherwise):
 * it tells the finish when no head of HEAD_MAX tokens can hold top_p's
 * mass (sample_head.cuh), a flat row whose head passes would be wasted.
 * argmax and race_id take the lowest id on ties, as the definition does. */
struct scan_part {
    float max, sum, tmass;
    int argmax;
    float race;   /* best race score, -inf before any */
    int race_id;  /* NO_ID before any                 */
};

/* tmass: the row keeps a tempered mass (at inv_t); other rows skip its
 * exponentials, which lengthen a merge's chain of dependent steps. */
static __device__ __forceinline__ scan_part scan_merge(scan_part a, scan_part b, bool tmass,
                                                       float inv_t)
{
    scan_part o;
    o.max = fmaxf(a.max, b.max);
    o.sum = a.sum * expf(a.max - o.max) + b.sum * expf(b.max - o.max);
    o.tmass = 0.0f;
    if (tmass)
        o.tmass = a.tmass * expf((a.max - o.max) * inv_t) + b.tmass * expf((b.max - o.max) * inv_t);
    o.argmax = a.max > b.max || (a.max == b.max && a.argmax < b.argmax) ? a.argmax : b.argmax;
    bool ra = a.race > b.race || (a.race == b.race && a.race_id < b.race_id);
    o.race = ra ? a.race : b.race;
    o.race_id = ra ? a.race_id : b.race_id;
    return o;
}

static __device__ __forceinline__ scan_part warp_merge(scan_part p, bool tmass, float inv_t)
{
    for (int o = 16; o > 0; o >>= 1) {
        scan_part q;
        q.max = __shfl_xor_sync(0xffffffffu, p.max, o);
        q.sum = __shfl_xor_sync(0xffffffffu, p.sum, o);
        q.tmass = tmass ? __shfl_xor_sync(0xffffffffu, p.tmass, o) : 0.0f; /* tmass: warp-uniform */
        q.argmax = __shfl_xor_sync(0xffffffffu, p.argmax, o);
        q.race = __shfl_xor_sync(0xffffffffu, p.race, o);
        q.race_id = __shfl_xor_sync(0xffffffffu, p.race_id, o);
        p = scan_merge(p, q, tmass, inv_t);
    }
    return p;
}

static __device__ __forceinline__ scan_part scan_empty(void)
{
    /* -FLT_MAX rather than -inf: exp(l - max) stays 0, never NaN, for l = -inf */
    return scan_part{-3.402823466e38f, 0.0f, 0.0f, NO_ID, -INFINITY, NO_ID};
}

/* Token i in the race: the hash and the logarithms run only when the
 * score's bound reaches the best score seen so far, the thread's own or
 * bar, its warp's (common/sampling.h): the row's winner scores at least
 * that, so skipping never changes it.  bar rises 32 times as fast as a
 * thread's own best, which matters most for the logarithms, whose bound
 * is tight: early in a thread's slice most tokens would reach its own. */
static __device__ __forceinline__ void race_visit(scan_part &p, float l, int i, float inv_t,
                                                  uint64_t key, float bar)
{
    const float x = l * inv_t, reach = fmaxf(p.race, bar);
    if (nl_race_out_of_reach(x, reach)) return;
    uint32_t bits = nl_rng_race_bits(key, (uint32_t)i);
    if (nl_race_bits_out_of_reach(x, bits, reach)) return;
    float score = nl_race_score(l, inv_t, nl_rng_race_uniform(bits));
    if (score > p.race || (score == p.race && i < p.race_id)) {
        p.race = score;
        p.race_id = i;
    }
}

static __device__ __forceinline__ void scan_visit(scan_part &p, float l, int i, bool race,
                                                  bool tmass, float inv_t, uint64_t key, float bar)
{
    if (l > p.max) {
        p.sum = p.sum * expf(p.max - l) + 1.0f;
        if (tmass) p.tmass = p.tmass * expf((p.max - l) * inv_t) + 1.0f;
        p.max = l;
        p.argmax = i;
    } else {
        p.sum += expf(l - p.max);
        if (tmass) p.tmass += expf((l - p.max) * inv_t);
    }
    if (race) race_visit(p, l, i, inv_t, key, bar);
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
    const bool tmass = sp.temperature > 0.0f && cut_by_mass_alone(sp, vocab);
    const float inv_t = race || tmass ? 1.0f / sp.temperature : 1.0f;
    const uint64_t key = nl_rng_row_key(sp.seed, sp.offset);
    const float *row = logits + (size_t)r * vocab;
    const int begin = blockIdx.x * chunk, end = min(vocab, begin + chunk);

    scan_part p = scan_empty();
    /* The warp's lanes take the same number of turns (lanes past the end
     * visit nothing), so after each the warp can share its best race score. */
    const int lane = threadIdx.x & 31, B = blockDim.x;
    float bar = -INFINITY;
    auto share_best = [&]() {
        if (!race) return;
        float b = p.race;
        for (int o = 16; o > 0; o >>= 1) b = fmaxf(b, __shfl_xor_sync(0xffffffffu, b, o));
        bar = b;
    };
    if (vec4) {
        /* begin and end are multiples of 4: two 16-byte loads in flight per
         * thread before any arithmetic */
        const float4 *q = reinterpret_cast<const float4 *>(row + begin);
        const int n4 = (end - begin) >> 2;
        for (int base = threadIdx.x - lane; base < n4; base += 2 * B) {
            const int j = base + lane;
            const bool has_a = j < n4, has_b = j + B < n4;
            float4 a = has_a ? __ldg(q + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float4 b = has_b ? __ldg(q + j + B) : a;
            int i = begin + 4 * j;
            if (has_a) {
                scan_visit(p, a.x, i, race, tmass, inv_t, key, bar);
                scan_visit(p, a.y, i + 1, race, tmass, inv_t, key, bar);
                scan_visit(p, a.z, i + 2, race, tmass, inv_t, key, bar);
                scan_visit(p, a.w, i + 3, race, tmass, inv_t, key, bar);
            }
            if (has_b) {
                i += 4 * B;
                scan_visit(p, b.x, i, race, tmass, inv_t, key, bar);
                scan_visit(p, b.y, i + 1, race, tmass, inv_t, key, bar);
                scan_visit(p, b.z, i + 2, race, tmass, inv_t, key, bar);
                scan_visit(p, b.w, i + 3, race, tmass, inv_t, key, bar);
            }
            share_best();
        }
    } else {
        for (int base = begin + threadIdx.x - lane; base < end; base += B) {
            const int i = base + lane;
            if (i < end) scan_visit(p, __ldg(row + i), i, race, tmass, inv_t, key, bar);
            share_best();
        }
    }
    p = warp_merge(p, tmass, inv_t);
    if ((threadIdx.x & 31) == 0) warp_parts[threadIdx.x >> 5] = p;
    __syncthreads();
    if (threadIdx.x < 32) {
        p = threadIdx.x < (blockDim.x >> 5) ? warp_parts[threadIdx.x] : scan_empty();
        p = warp_merge(p, tmass, inv_t);
        if (threadIdx.x == 0) parts[(size_t)r * gridDim.x + blockIdx.x] = p;
    }
}

/* ---- finishing a row -------------------------------------------------------- */

/* The top-N logprobs of row r from the n_top ids found (in order), -1 and 0
 * past them, by the first NL_MAX_LOGPROBS threads. */
static __device__ void write_top(int r, const int *top_id, int n_top, const float *row, float lse,
                                 int32_t *top_ids, float *top_logprobs)
{
    if (threadIdx.x >= NL_MAX_LOGPROBS) return;
    const int a = threadIdx.x;
    const size_t at = (size_t)r * NL_MAX_LOGPROBS + a;
    top_ids[at] = a < n_top ? top_id[a] : -1;
    top_logprobs[at] = a < n_top ? row[top_id[a]] - lse : 0.0f;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    kernel_sample_finish(const float *logits, int vocab, const nl_sample_row *rows,
                         const scan_part *parts, int splits, int32_t *ids, float *logprobs,
                         int32_t *top_ids, float *top_logprobs)
{
    pdl_wait();
    pdl_release();
    __shared__ head_shared head;
    __shared__ radix_shared radix;
    __shared__ block_scratch bs;
    __shared__ scan_part whole;
    __shared__ int top_id[NL_MAX_LOGPROBS];
    const int r = blockIdx.x;
    const float *row = logits + (size_t)r * vocab;
    const nl_sample_row sp = rows[r];
    const bool sampled = sp.temperature > 0.0f;

    if (threadIdx.x < 32) {
        const bool tmass = sampled && cut_by_mass_alone(sp, vocab);
        const float inv_t = sampled ? 1.0f / sp.temperature : 1.0f;
        scan_part p = scan_empty();
        for (int s = threadIdx.x; s < splits; s += 32)
            p = scan_merge(p, parts[(size_t)r * splits + s], tmass, inv_t);
        p = warp_merge(p, tmass, inv_t);
        if (threadIdx.x == 0) whole = p;
    }
    __syncthreads();
    const int argmax = whole.argmax == NO_ID ? 0 : whole.argmax; /* NO_ID: all -inf */
    const float lmax = row[argmax];
    const float lse = whole.max + logf(whole.sum);

    const int n_top = max(0, min(min(sp.n_logprobs, NL_MAX_LOGPROBS), vocab));
    const bool cut = sampled && row_has_cuts(sp, vocab);
    const bool by_k = nl_sample_cuts_by_k(&sp, vocab);
    const bool ordered = sampled && (by_k || sp.top_p < 1.0f); /* cuts needing the order */
    int chosen = sampled && !cut ? whole.race_id : argmax;

    int n_found = 0;
    bool top_found = n_top == 0, cut_made = !cut;
    if (!top_found || ordered) {
        /* One head serves both: at least n_top tokens, and top_k's or top_p's. */
        const int need = max(n_top, ordered && by_k ? sp.top_k : 0);
        const float top_p = ordered && !by_k ? sp.top_p : 1.0f;
        double row_mass = 0.0;
        /* Each token's share of the row's mass at T is at most 1 / tmass,
         * so a head of HEAD_MAX tokens holds at most HEAD_MAX / tmass of it
         * (the factor covers tmass's float rounding).  tmass is 0 unless
         * the row is cut by top_p alone, the rows whose top_p is below 1 here. */
        const bool head_too_light = HEAD_MAX < 0.999 * top_p * whole.tmass;
        int n = need > HEAD_MAX || head_too_light
                    ? -1
                    : head_sort(row, vocab, lmax, need, top_p, 1.0f / sp.temperature, &row_mass,
                                &head, &bs);
        if (n >= 0) {
            if (threadIdx.x < n_top) top_id[threadIdx.x] = ranked_id(head.token[threadIdx.x]);
            n_found = n_top;
            top_found = true;
            if (ordered) {
                int c = head_race(&head, n, vocab, sp, lmax, row_mass, &bs);
                if (c >= 0) {
                    chosen = c;
                    cut_made = true;
                }
            }
        }
    }
    const row_view v = whole_row(row, vocab, lmax);
    if (!top_found) n_found = radix_top(v, n_top, top_id, &radix, &bs);
    /* min_p alone also ends here: a threshold, no crossing, one race pass */
    if (!cut_made) chosen = radix_cut_race(v, sp, &radix, &bs);
    /* Rows come checked (the CPU backend refuses a min_p above 1, which
     * keeps no token); should one keep nothing, the row's argmax stands in
     * rather than an id past the row. */
    if ((unsigned)chosen >= (unsigned)vocab) chosen = argmax;
    __syncthreads(); /* top_id complete */
    write_top(r, top_id, n_found, row, lse, top_ids, top_logprobs);
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
