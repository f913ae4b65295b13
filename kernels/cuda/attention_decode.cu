/* attention_decode.cu — decode attention (one new token per sequence) over the
 * paged KV cache, built to run at the HBM copy rate.
 *
 * A block owns one (context split, sequence, kv head) and up to G query heads
 * of that kv head's group, so every K/V byte is read from memory once.  Each
 * token's head row is read in 16-byte pieces (8 bf16, or 16 fp8 of an e4m3
 * cache), one per lane, inside a power-of-two lane group (head_dim 80 and 96
 * leave the top lanes of the group idle, so the xor reductions stay inside
 * it); a warp thus covers 32 / group tokens per load and unrolls U loads of
 * K and of V before using any, which keeps U * 32 bytes per lane in flight.
 * An fp8 lane's 16 values halve the lanes, shuffles and exponentials per key
 * (the work that bounds the kernel once the bytes halve); where the larger
 * merge buffer that brings would not fit, fp8 lanes take 8-byte pieces with
 * twice the loads in flight.  Each lane group keeps its own online softmax
 * state (base-2 domain, fp32); the block merges its groups in shared memory.
 *
 * Splits: the host picks their number from the batch's block count alone
 * (dec_splits: a few waves of blocks when the sequences alone do not fill
 * one, none otherwise), never from its maximum context, which under CUDA
 * graphs is max_model_len.  Each block then sizes its split from its own
 * sequence's context_lens (dec_chunk, at least min_chunk keys) and exits at once
 * when its split starts past the end; so padding rows (context 1, block 0)
 * cost one early exit per split.  With more than one split, blocks write
 * unnormalised partials (o, m, l) and kernel_decode_merge combines the
 * splits that exist for each sequence.
 *
 * Tiny batches of short contexts (at most DEC_EARLY_SEQS sequences, the
 * host's bound on their contexts at most DEC_CLUSTER_MAX splits of
 * DEC_MIN_CHUNK_EARLY keys) launch the splits of each (sequence, kv head)
 * as one thread-block cluster instead: the splits merge through each
 * other's shared memory, and the step loses the merge kernel, a dependent
 * step of its own on a one-token critical path.
 *
 * Larger batches at head_dim 128 (block sizes powers of two from 16) take
 * the tensor-core kernel of attention_decode_mma.cu instead of this file's
 * batch kernel; the splits, their order and the merge are the same.
 */
#include "kernels/cuda/attention_decode.cuh"

#define DEC_MIN_CHUNK 128    /* keys per split at least, and in batches of at */
#define DEC_MIN_CHUNK_EARLY 64 /* most DEC_EARLY_SEQS (batch 1: 128 ~3% slower) */
#define DEC_TARGET_WAVES 4   /* waves of resident blocks a split batch aims at */
#define DEC_MAX_SPLITS 64
#define DEC_EARLY_SEQS 4     /* batches this small take the early-load kernel */

static __device__ __forceinline__ uint2 dec_load(const fp8 *p, uint2)
{
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ uint4 dec_load(const fp8 *p, uint4)
{
    return load_stream16(p);
}

static __device__ __forceinline__ uint4 dec_load(const bf16 *p, uint4)
{
    return load_stream16(p);
}

/* A lane's EPL elements of a K or V row as loaded: 16 or 8 bytes. */
template <int BYTES> struct dec_raw { typedef uint4 type; };
template <> struct dec_raw<8> { typedef uint2 type; };

/* An e4m3 cache's products are taken in fp16 pairs (HFMA2): the
 * conversion yields fp16 pairs anyway, and a float product per element
 * made the kernel bound by instructions, not bytes (at 256 sequences of
 * 1,000 keys it moved half of bf16's bytes in 73% of its time).  q is
 * held as fp16 scaled by 1 / DEC_FP8_Q_DOWN so that a lane's sums of at
 * most 8 products stay inside fp16's range (65,504) unless |q| * scale_log2
 * exceeds ~290 against keys at e4m3's largest value, 448; each score is
 * widened to fp32 and scaled back before the softmax.  Probabilities (at
 * most 1) meet V as fp16 pairs over one iteration's U keys, then add into
 * fp32 o.  fp16's 11-bit rounding of these sums is far below the 4-bit
 * significand of the e4m3 values themselves. */
#define DEC_FP8_Q_DOWN 16.0f

/* e4m3 pairs to fp16 pairs, exactly: every e4m3 value is an fp16 value. */
template <typename RAW>
static __device__ __forceinline__ void dec_fp8_to_half2(const RAW &v, __half2 *h)
{
    const __nv_fp8x2_storage_t *p = (const __nv_fp8x2_storage_t *)&v;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(RAW) / 2); i++)
        h[i] = __half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3));
}

/* Resident blocks an SM that the register budget must allow (0: as the
 * compiler likes).  The e4m3 batch kernel of groups up to 2 (4 loads in
 * flight, launch_decode) fits 5 blocks in 96 registers with an 8-byte
 * spill: nano-vllm's workload 33.9k tok/s, against 32.9k at the 117
 * registers (4 blocks) it takes unbounded and 30.2k at 6 blocks (a
 * 124-byte spill).  Groups of 4 fit 3 instead of 2.  Wider groups would
 * spill hundreds of bytes, and the bf16 kernels fit 6 (groups up to 2) and
 * 4 (groups of 4) unbounded. */
template <typename KV, int G, bool EARLY>
static __host__ __device__ constexpr int dec_min_blocks()
{
    return sizeof(KV) != 1 || EARLY ? 0 : G <= 2 ? 5 : G == 4 ? 3 : 0;
}

/* EPL: elements of a row each lane loads (8 for bf16; 8 or 16 for fp8, whose
 * 16 fill a 16-byte load and halve the lanes, shuffles and softmax work per
 * key).  EARLY: the block's first K/V loads go out before the wait for the
 * kernel before it (dec_launch says when that pays).  CLUSTER: the grid's
 * splits are clusters and merge as dec_cluster says (every block stays to
 * the end, even one whose split is empty). */
template <int HD, int G, int U, typename KV, int EPL, bool EARLY, bool CLUSTER = false>
__global__ void __launch_bounds__(DEC_WARPS * 32, dec_min_blocks<KV, G, EARLY>()) kernel_decode(dec_params p)
{
    typedef typename dec_raw<EPL * (int)sizeof(KV)>::type raw;
    constexpr int LIVE = HD / EPL;          /* lanes that load a token's row */
    constexpr int LPT = pow2_ceil(LIVE); /* lanes per token              */
    constexpr int TPW = 32 / LPT;           /* tokens per warp per load      */
    constexpr int PARTS = DEC_WARPS * TPW;  /* softmax states per block      */
    constexpr int STEP = PARTS * U;         /* keys per loop iteration       */
    constexpr bool FP8 = sizeof(KV) == 1;   /* products in fp16 pairs      */
    static_assert(HD % EPL == 0, "a row splits into whole pieces");
    __shared__ float sh_o[PARTS][G][HD];
    __shared__ float sh_m[PARTS][G], sh_l[PARTS][G];
    /* CLUSTER: the partials pushed to this block, [split][output of the
     * slice] (n * per <= G * HD + n - 1 floats) and [split][head][m, l] */
    __shared__ float cl_o[CLUSTER ? G * HD + DEC_CLUSTER_MAX : 1];
    __shared__ float cl_ml[CLUSTER ? DEC_CLUSTER_MAX : 1][G][2];
    if constexpr (CLUSTER) dec_cluster_arrive(false);

    const dec_share d = dec_share_of(p);
    const int split = d.split, seq = d.seq, kvh = d.kvh, slice = d.slice;
    const int ctx = d.ctx, k_begin = d.k_begin, k_end = d.k_end;
    if (k_begin >= k_end && !CLUSTER) return;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int sub = lane / LPT, li = lane % LPT;
    const bool live = li < LIVE;
    const int part = warp * TPW + sub;
    const int tok = p.cu_seqlens_q[seq];
    const int h0 = kvh * p.group + slice * G; /* first query head served   */
    const int nh = min(G, p.group - slice * G);

    const int32_t *table = p.block_tables + (size_t)seq * p.max_blocks_per_seq;
    const size_t row_stride = (size_t)p.hk * HD;
    const size_t head_off = (size_t)kvh * HD + (live ? li : 0) * EPL;
    auto key_of = [&](int base, int u) { return base + (warp * U + u) * TPW + sub; };
    auto load_key = [&](int key, raw &k, raw &v) {
        int bi, bo;
        if (p.block_shift >= 0) {
            bi = key >> p.block_shift;
            bo = key & (p.block_size - 1);
        } else {
            bi = key / p.block_size;
            bo = key - bi * p.block_size;
        }
        const size_t off = ((size_t)table[bi] * p.block_size + bo) * row_stride + head_off;
        k = dec_load((const KV *)p.k_cache + off, raw{});
        v = dec_load((const KV *)p.v_cache + off, raw{});
    };

    /* EARLY: the cache holds every key but the newest (ctx - 1), which the
     * kernel before this one stores: the first keys' loads go out before
     * the wait for it, the newest one's after. */
    const int newest = ctx - 1;
    raw kr[U], vr[U];
    if constexpr (EARLY) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int key = key_of(k_begin, u);
            kr[u] = vr[u] = raw{};
            if (key < k_end && key != newest && live) load_key(key, kr[u], vr[u]);
        }
    }
    pdl_wait();
    pdl_release();
    if constexpr (EARLY) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (key_of(k_begin, u) == newest && live) load_key(newest, kr[u], vr[u]);
    }

    float q[G][EPL];
    const bf16 *qrow = p.qkv + (size_t)tok * (p.hq + 2 * p.hk) * HD;
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        if (gi < nh && live) {
#pragma unroll
            for (int c = 0; c < EPL / 8; c++)
                bf16x8_to_float(*(const uint4 *)(qrow + (size_t)(h0 + gi) * HD + li * EPL + c * 8),
                                q[gi] + 8 * c);
#pragma unroll
            for (int i = 0; i < EPL; i++) q[gi][i] *= p.scale_log2;
        } else {
#pragma unroll
            for (int i = 0; i < EPL; i++) q[gi][i] = 0.0f;
        }
    }
    __half2 qh[G][EPL / 2]; /* FP8: q * scale_log2 / DEC_FP8_Q_DOWN */
#pragma unroll
    for (int gi = 0; gi < G; gi++)
#pragma unroll
        for (int i = 0; i < EPL / 2; i++)
            qh[gi][i] = __floats2half2_rn(q[gi][2 * i] * (1.0f / DEC_FP8_Q_DOWN),
                                          q[gi][2 * i + 1] * (1.0f / DEC_FP8_Q_DOWN));

    float m[G], l[G], o[G][EPL];
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        m[gi] = -INFINITY;
        l[gi] = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) o[gi][i] = 0.0f;
    }

    for (int base = k_begin; base < k_end; base += STEP) {
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int key = key_of(base, u);
            ok[u] = key < k_end;
            if (!EARLY || base != k_begin) { /* EARLY: the first keys are loaded */
                kr[u] = vr[u] = raw{};
                if (ok[u] && live) load_key(key, kr[u], vr[u]);
            }
        }

        float s[U][G];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if constexpr (FP8) {
                __half2 kh[EPL / 2];
                dec_fp8_to_half2(kr[u], kh);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    __half2 acc = __hmul2(qh[gi][0], kh[0]);
#pragma unroll
                    for (int i = 1; i < EPL / 2; i++) acc = __hfma2(qh[gi][i], kh[i], acc);
                    const float2 f = __half22float2(acc);
                    s[u][gi] = (f.x + f.y) * DEC_FP8_Q_DOWN;
                }
            } else {
                float kf[EPL];
                bf16x8_to_float(kr[u], kf);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    float acc = 0.0f;
#pragma unroll
                    for (int i = 0; i < EPL; i++) acc = fmaf(q[gi][i], kf[i], acc);
                    s[u][gi] = acc;
                }
            }
        }
        /* Sum over the token's lanes; xor offsets below LPT stay inside it. */
#pragma unroll
        for (int off = LPT / 2; off > 0; off >>= 1)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int gi = 0; gi < G; gi++)
                    s[u][gi] += __shfl_xor_sync(0xffffffffu, s[u][gi], off);

        float m_use[G];
#pragma unroll
        for (int gi = 0; gi < G; gi++) {
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!ok[u]) s[u][gi] = -INFINITY;
                mx = fmaxf(mx, s[u][gi]);
            }
            const float m_new = fmaxf(m[gi], mx);
            /* No visible key yet: keep everything at zero without NaNs. */
            m_use[gi] = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2f(m[gi] - m_use[gi]);
            m[gi] = m_new;
            l[gi] *= alpha;
#pragma unroll
            for (int i = 0; i < EPL; i++) o[gi][i] *= alpha;
        }
        if constexpr (FP8) {
            __half2 pv[G][EPL / 2];
#pragma unroll
            for (int u = 0; u < U; u++) {
                __half2 vh[EPL / 2];
                dec_fp8_to_half2(vr[u], vh);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float pr = exp2f(s[u][gi] - m_use[gi]);
                    l[gi] += pr;
                    const __half2 p2 = __float2half2_rn(pr);
#pragma unroll
                    for (int i = 0; i < EPL / 2; i++)
                        pv[gi][i] = u == 0 ? __hmul2(p2, vh[i]) : __hfma2(p2, vh[i], pv[gi][i]);
                }
            }
#pragma unroll
            for (int gi = 0; gi < G; gi++)
#pragma unroll
                for (int i = 0; i < EPL / 2; i++) {
                    const float2 f = __half22float2(pv[gi][i]);
                    o[gi][2 * i] += f.x;
                    o[gi][2 * i + 1] += f.y;
                }
        } else {
#pragma unroll
            for (int u = 0; u < U; u++) {
                float vf[EPL];
                bf16x8_to_float(vr[u], vf);
#pragma unroll
                for (int gi = 0; gi < G; gi++) {
                    const float pr = exp2f(s[u][gi] - m_use[gi]);
                    l[gi] += pr;
#pragma unroll
                    for (int i = 0; i < EPL; i++) o[gi][i] = fmaf(pr, vf[i], o[gi][i]);
                }
            }
        }
    }

#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        if (live) {
#pragma unroll
            for (int i = 0; i < EPL; i++) sh_o[part][gi][li * EPL + i] = o[gi][i];
        }
        if (li == 0) {
            sh_m[part][gi] = m[gi];
            sh_l[part][gi] = l[gi];
        }
    }
    dec_finish<PARTS, G, HD, CLUSTER>(p, sh_o, sh_m, sh_l, cl_o, cl_ml, split, seq, tok, h0, nh);
}

/* One block per (sequence, query head): rescales the partials of the splits
 * that this sequence's true context produced to their common maximum.  (A
 * merge by the last split to finish, inside the decode kernel, was slower:
 * each block then pays a fence and an atomic on its critical path.) */
__global__ void kernel_decode_merge(dec_params p, int hd)
{
    pdl_wait();
    pdl_release();
    const int seq = blockIdx.x / p.hq, h = blockIdx.x % p.hq;
    const int ctx = p.context_lens[seq];
    const int chunk = dec_chunk(ctx, p.n_splits, p.min_chunk);
    const int n_act = min(p.n_splits, (ctx + chunk - 1) / chunk);
    const size_t row0 = ((size_t)seq * p.hq + h) * p.n_splits;
    const float *ml = p.part_ml + row0 * 2;
    float mx = -INFINITY;
    for (int s = 0; s < n_act; s++) mx = fmaxf(mx, ml[2 * s]);
    float sum_l = 0.0f;
    if (mx != -INFINITY)
        for (int s = 0; s < n_act; s++) sum_l += exp2f(ml[2 * s] - mx) * ml[2 * s + 1];
    const float inv = sum_l > 0.0f ? 1.0f / sum_l : 0.0f;
    bf16 *dst = p.out + ((size_t)p.cu_seqlens_q[seq] * p.hq + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        if (mx != -INFINITY)
            for (int s = 0; s < n_act; s++)
                acc += exp2f(ml[2 * s] - mx) * p.part_o[(row0 + s) * hd + d];
        dst[d] = __float2bfloat16(acc * inv);
    }
}

/* Splits the contexts only when the batch's blocks do not fill one wave of
 * resident blocks: then every block runs at once and the step lasts as long
 * as its longest context, so splitting them into DEC_TARGET_WAVES waves of
 * blocks (at least min_chunk keys each) spreads that context over idle
 * SMs.  With a wave or more, blocks that finish early make room for the
 * next, and the longest-first order keeps the longest from starting last;
 * splits would only add partial writes and a merge.  The count depends on
 * the block count, not on the host's maximum context (under graphs,
 * max_model_len); a small true maximum (eager steps) trims splits that
 * would find no keys. */
static int dec_splits(const cuda_backend *be, const nl_attn_batch *b, const dec_params *p,
                      dec_kernel k, size_t smem)
{
    const int blocks = b->n_seqs * p->hk * p->n_slices;
    const int resident = cuda_blocks_per_sm(k, DEC_WARPS * 32, smem) * be->num_sms;
    if (blocks >= resident) return 1;
    int n = (DEC_TARGET_WAVES * resident + blocks - 1) / blocks;
    const int most = (b->max_context_len + p->min_chunk - 1) / p->min_chunk;
    if (n > most) n = most;
    if (n > DEC_MAX_SPLITS) n = DEC_MAX_SPLITS;
    const size_t per_split = (size_t)b->n_seqs * p->hq * (p->hd + 2);
    const size_t fit = attn_scratch_floats(be) / per_split;
    if ((size_t)n > fit) n = (int)fit;
    return n < 1 ? 1 : n;
}

/* Plans the splits, launches the kernel and, with splits, the merge.  A
 * batch of at most DEC_EARLY_SEQS sequences, whose step lasts as long as
 * one block's chain of loads, takes the kernel whose first loads precede
 * the wait (early).  That kernel holds more registers (fewer resident
 * blocks), so everywhere else it loses more than it hides: in every
 * decode step nano-vllm's workload fell from 23.5k to 15.0k tok/s, in
 * every split one (up to 65 sequences) to 21.5k.  When such a batch's
 * bound on its contexts needs no more splits than a cluster holds, the
 * early kernel's clustered form merges them itself.  Larger batches take
 * the tensor-core kernel where it has a form (dec_mma_kernel; g: the query
 * heads a block serves), `late` elsewhere. */
static nl_status dec_launch(cuda_backend *be, dec_params *p, const nl_attn_batch *b, int g,
                            dec_kernel late, dec_kernel early, dec_kernel clustered)
{
    const bool tiny = b->n_seqs <= DEC_EARLY_SEQS;
    p->min_chunk = tiny ? DEC_MIN_CHUNK_EARLY : DEC_MIN_CHUNK;
    /* Past the tiny batches the tensor-core kernel, where it has a form. */
    const dec_mma mma = tiny || !be->dec_mma ? dec_mma{}
                                             : dec_mma_kernel(p->hd, g, p->kv_fp8, p->block_shift);
    if (mma.kernel) late = mma.kernel;
    p->n_splits = dec_splits(be, b, p, late, mma.smem);
    if (tiny && p->n_splits > 1 && be->clusters &&
        p->n_splits <= cuda_cluster_max(clustered, DEC_WARPS * 32, 0)) {
        dim3 grid(p->n_splits, p->hk * p->n_slices, b->n_seqs);
        NL_CUDA_CHECK(cuda_launch_clusters(be, clustered, grid, DEC_WARPS * 32, 0,
                                           (unsigned)p->n_splits, *p));
        return NL_OK;
    }
    const dec_kernel k = tiny ? early : late;
    p->part_o = attn_scratch(be);
    p->part_ml = attn_scratch(be) + (size_t)b->n_seqs * p->hq * p->n_splits * p->hd;
    /* Blocks start in index order, x fastest: a sequence's blocks are
     * adjacent and, with an order, the longest contexts start first. */
    dim3 grid(p->n_splits, p->hk * p->n_slices, b->n_seqs);
    NL_CUDA_CHECK(cuda_launch(be, k, grid, DEC_WARPS * 32, mma.smem, *p));
    if (p->n_splits > 1)
        NL_CUDA_CHECK(cuda_launch(be, kernel_decode_merge, b->n_seqs * p->hq, p->hd, 0, *p, p->hd));
    return NL_OK;
}

template <int HD, int G>
static nl_status launch_decode(cuda_backend *be, dec_params *p, const nl_attn_batch *b)
{
    /* Loads in flight a lane: fewer for wide groups keeps q and o in
     * registers.  The batch (late) kernels of groups up to 2 take 4, not 8:
     * the bf16 one then holds 80 registers and fits 6 blocks an SM instead
     * of 4, the e4m3 one 96 and 5 (dec_min_blocks), and over the spread of
     * batch sizes and contexts of nano-vllm's workload resident blocks
     * count for more than loads a lane (25.0k -> 25.7k tok/s, e4m3 33.3k ->
     * 33.9k), though 128 sequences of 1,000 keys alone slow from 127 to
     * 142 us (1.9 waves of blocks become 1.3).  The early kernel (tiny
     * batches, whose step is one chain of loads) keeps 8, and bf16 8 for
     * groups of 4 too: one sequence at 8B shapes 221.5 -> 224.7 tok/s,
     * where at 128 sequences the registers it takes (3 blocks an SM
     * instead of 4) cost the late kernel 11%. */
    constexpr int U = G <= 2 ? 8 : G == 4 ? 4 : 2;
    constexpr int U_LATE = G <= 4 ? 4 : 2;
    constexpr int U_EARLY_BF16 = G <= 4 ? 8 : U;
    /* fp8 lanes take 16 elements (one 16-byte load, as bf16 lanes do) where
     * the block's merge buffer, larger with more lane groups, still fits
     * 32 KiB; otherwise 8 (an 8-byte load) with twice the loads in flight. */
    constexpr int PARTS16 = DEC_WARPS * 32 / pow2_ceil(HD / 16);
    constexpr bool WIDE = (size_t)PARTS16 * G * HD * sizeof(float) <= 32768;
    if (!p->kv_fp8)
        return dec_launch(be, p, b, G, kernel_decode<HD, G, U_LATE, bf16, 8, false>,
                          kernel_decode<HD, G, U_EARLY_BF16, bf16, 8, true>,
                          kernel_decode<HD, G, U_EARLY_BF16, bf16, 8, true, true>);
    if constexpr (WIDE)
        return dec_launch(be, p, b, G, kernel_decode<HD, G, U_LATE, fp8, 16, false>,
                          kernel_decode<HD, G, U, fp8, 16, true>,
                          kernel_decode<HD, G, U, fp8, 16, true, true>);
    else
        return dec_launch(be, p, b, G, kernel_decode<HD, G, 2 * U, fp8, 8, false>,
                          kernel_decode<HD, G, 2 * U, fp8, 8, true>,
                          kernel_decode<HD, G, 2 * U, fp8, 8, true, true>);
}

template <int HD>
static nl_status launch_decode_g(cuda_backend *be, dec_params *p, int g, const nl_attn_batch *b)
{
    switch (g) {
    case 1: return launch_decode<HD, 1>(be, p, b);
    case 2: return launch_decode<HD, 2>(be, p, b);
    case 4: return launch_decode<HD, 4>(be, p, b);
    default: return launch_decode<HD, 8>(be, p, b);
    }
}

nl_status cuda_attention_decode(cuda_backend *be, const attn_args *a, const nl_attn_batch *b)
{
    const int hd = a->hd, group = a->group;
    /* A block serves up to 8 query heads; larger groups take slices. */
    const int g = group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
    if (b->n_seqs > 65535)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: decode attention over %d sequences (at most "
                        "65535 a step)", b->n_seqs);

    dec_params p;
    static_cast<attn_args &>(p) = *a;
    p.n_slices = (group + g - 1) / g;
    p.block_shift = -1;
    for (int s = 0; s < 31; s++)
        if ((1 << s) == b->block_size) p.block_shift = s;
    p.order = b->decode_order;

    switch (hd) {
    case 32: return launch_decode_g<32>(be, &p, g, b);
    case 64: return launch_decode_g<64>(be, &p, g, b);
    case 80: return launch_decode_g<80>(be, &p, g, b);
    case 96: return launch_decode_g<96>(be, &p, g, b);
    case 128: return launch_decode_g<128>(be, &p, g, b);
    case 256: return launch_decode_g<256>(be, &p, g, b);
    default:
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: decode attention head_dim %d (kernels for "
                        "32, 64, 80, 96, 128, 256)", hd);
    }
}
