/* attention.cu — the attention op's entry point, which checks the arguments
 * and picks a kernel (attention_decode.cu for all-decode batches and for the
 * leading decode rows of a mixed one, attention_prefill.cu for prompt rows,
 * for the head dims they are built for), plus
 * the first, generic CUDA-core kernel for both cases, which takes every other
 * head dim and stays the reference the specialised kernels are measured
 * against (NL_ATTN_GENERIC=1 in the environment selects it).
 *
 * Generic kernel: a block owns one kv head of one sequence and a set of
 * "rows", each a (query token, query head of the group) pair; rows are
 * token-major so a K/V tile loaded into shared memory once serves every
 * query head of the group and several tokens.  The block walks 64-token K/V
 * tiles gathered through the block table, with an online softmax in the
 * base-2 domain (FlashAttention-2 style), fp32 throughout.  Each warp owns
 * RPW rows; lane l scores keys l and l + 32 of the tile and accumulates output
 * dims {64 k + 2 l, 64 k + 2 l + 1}.  head_dim is a run-time value (any
 * multiple of 8 up to 256); the template fixes only a capacity (64, 128 or
 * 256) that sizes the registers, and shared memory is sized at launch.  This
 * is the path for head dims that have no specialised kernel.
 *
 * Prefill: grid.x tiles the new tokens of each sequence; one pass over the
 * keys up to the block's last position.  Decode: one token per sequence, and
 * grid.x splits the context into chunks whose partial (o, m, l) go to the
 * backend's scratch; kernel_attn_merge combines them.  Each block sizes its
 * split from its sequence's own context length.
 */
#include <math.h>

#include "kernels/cuda/attention.cuh"

#define ATTN_WARPS 4
#define ATTN_BK 64               /* keys per tile                             */
#define ATTN_MAX_HD 256
#define ATTN_MIN_SPLIT_TILES 4   /* a decode split covers at least 256 keys   */

struct attn_params : attn_args {
    float *part_o;            /* [n * hq * n_splits, hd] when n_splits > 1   */
    float *part_ml;           /* [n * hq * n_splits, 2]                      */
    int tokens_per_block;     /* query tokens one block serves               */
    int n_splits;
};

/* Dynamic shared memory of kernel_attention for hd and RPW. */
static size_t attn_smem_bytes(int hd, int rpw)
{
    return ((size_t)2 * ATTN_BK * (hd / 2 + 1) + (size_t)ATTN_WARPS * rpw * hd / 2) *
           sizeof(__nv_bfloat162);
}

template <int HDC, int RPW, typename KV>
__global__ void __launch_bounds__(ATTN_WARPS * 32)
    kernel_attention(attn_params p)
{
    pdl_wait();
    pdl_release();
    constexpr int ROWS = ATTN_WARPS * RPW;
    constexpr int NP = HDC / 64;     /* output dim pairs per lane, at most */
    const int hd = p.hd, hp = hd / 2; /* dims, dim pairs                   */
    const int kst = hp + 1;           /* padded row stride in bf16 pairs    */
    extern __shared__ __nv_bfloat162 attn_smem[];
    __nv_bfloat162 *ks = attn_smem;      /* [BK, hd + 2]                   */
    __nv_bfloat162 *vs = ks + ATTN_BK * kst;
    __nv_bfloat162 *qs = vs + ATTN_BK * kst; /* [ROWS, hd]                  */

    const int seq = blockIdx.y, g = blockIdx.z;
    const int qtile = blockIdx.x / p.n_splits, split = blockIdx.x % p.n_splits;
    const int q0 = p.cu_seqlens_q[seq];
    const int q_len = p.cu_seqlens_q[seq + 1] - q0;
    const int ctx = p.context_lens[seq];
    const int t_first = qtile * p.tokens_per_block;
    if (t_first >= q_len) return;
    const int t_count = min(p.tokens_per_block, q_len - t_first);
    const int n_rows = t_count * p.group;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qkv_stride = (p.hq + 2 * p.hk) * hd;

    /* Stage the queries of the block's rows (zeros for unused rows). */
    for (int i = threadIdx.x; i < ROWS * hp; i += blockDim.x) {
        int r = i / hp, c = i % hp;
        __nv_bfloat162 v = __floats2bfloat162_rn(0.0f, 0.0f);
        if (r < n_rows) {
            int tok = q0 + t_first + r / p.group;
            int h = g * p.group + r % p.group;
            v = ((const __nv_bfloat162 *)(p.qkv + (size_t)tok * qkv_stride + (size_t)h * hd))[c];
        }
        qs[i] = v;
    }

    /* Causal limit: row r (token t) sees keys [0, ctx - q_len + t]. */
    int pos[RPW];
    bool row_ok[RPW];
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        int r = warp * RPW + i;
        row_ok[i] = r < n_rows;
        pos[i] = row_ok[i] ? ctx - q_len + t_first + r / p.group : -1;
    }
    const int kv_end = min(ctx, ctx - q_len + t_first + t_count); /* exclusive */
    const int n_tiles = (kv_end + ATTN_BK - 1) / ATTN_BK;
    const int per_split = (n_tiles + p.n_splits - 1) / p.n_splits;
    const int tile_begin = split * per_split;
    const int tile_end = min(n_tiles, tile_begin + per_split);

    float m[RPW], l[RPW], o[RPW][NP][2];
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < NP; k++) o[i][k][0] = o[i][k][1] = 0.0f;
    }

    const int32_t *table = p.block_tables + (size_t)seq * p.max_blocks_per_seq;
    for (int tile = tile_begin; tile < tile_end; tile++) {
        const int kv0 = tile * ATTN_BK;
        __syncthreads(); /* the previous tile is no longer read */
        /* Gather the tile through the block table, 16 bytes at a time; keys
         * past the end are zero so that 0 * garbage never makes a NaN. */
        const int pieces = hd / 8;
        for (int c = threadIdx.x; c < ATTN_BK * pieces; c += blockDim.x) {
            int j = c / pieces, piece = c % pieces;
            int key = kv0 + j;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (key < kv_end) {
                size_t slot = (size_t)table[key / p.block_size] * p.block_size +
                              key % p.block_size;
                size_t off = (slot * p.hk + g) * hd + piece * 8;
                kv = attn_load8_as_bf16((const KV *)p.k_cache + off);
                vv = attn_load8_as_bf16((const KV *)p.v_cache + off);
            }
            uint32_t *kd = (uint32_t *)&ks[j * kst + piece * 4];
            uint32_t *vd = (uint32_t *)&vs[j * kst + piece * 4];
            kd[0] = kv.x; kd[1] = kv.y; kd[2] = kv.z; kd[3] = kv.w;
            vd[0] = vv.x; vd[1] = vv.y; vd[2] = vv.z; vd[3] = vv.w;
        }
        __syncthreads();

        float s[RPW][2];
#pragma unroll
        for (int i = 0; i < RPW; i++) s[i][0] = s[i][1] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < hp; d++) {
            float2 k0 = __bfloat1622float2(ks[lane * kst + d]);
            float2 k1 = __bfloat1622float2(ks[(lane + 32) * kst + d]);
#pragma unroll
            for (int i = 0; i < RPW; i++) {
                float2 q = __bfloat1622float2(qs[(warp * RPW + i) * hp + d]);
                s[i][0] = fmaf(q.x, k0.x, fmaf(q.y, k0.y, s[i][0]));
                s[i][1] = fmaf(q.x, k1.x, fmaf(q.y, k1.y, s[i][1]));
            }
        }

        float pr[RPW][2];
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            int key0 = kv0 + lane, key1 = kv0 + lane + 32;
            float s0 = key0 <= pos[i] ? s[i][0] * p.scale_log2 : -INFINITY;
            float s1 = key1 <= pos[i] ? s[i][1] * p.scale_log2 : -INFINITY;
            float tmax = fmaxf(s0, s1);
            for (int off = 16; off > 0; off >>= 1)
                tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, off));
            float m_new = fmaxf(m[i], tmax);
            if (m_new == -INFINITY) { /* nothing visible yet for this row */
                pr[i][0] = pr[i][1] = 0.0f;
                continue;
            }
            float alpha = exp2f(m[i] - m_new);
            pr[i][0] = exp2f(s0 - m_new);
            pr[i][1] = exp2f(s1 - m_new);
            float psum = pr[i][0] + pr[i][1];
            for (int off = 16; off > 0; off >>= 1)
                psum += __shfl_xor_sync(0xffffffffu, psum, off);
            l[i] = l[i] * alpha + psum;
            m[i] = m_new;
#pragma unroll
            for (int k = 0; k < NP; k++) {
                o[i][k][0] *= alpha;
                o[i][k][1] *= alpha;
            }
        }

        /* Halves keep pr[][half] a compile-time index (registers, not local
         * memory). */
        const int jmax = min(ATTN_BK, kv_end - kv0);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int jn = min(32, jmax - half * 32);
            for (int jj = 0; jj < jn; jj++) {
                const int j = half * 32 + jj;
                float2 v[NP];
#pragma unroll
                for (int k = 0; k < NP; k++)
                    v[k] = k * 32 + lane < hp ? __bfloat1622float2(vs[j * kst + k * 32 + lane])
                                              : make_float2(0.0f, 0.0f);
#pragma unroll
                for (int i = 0; i < RPW; i++) {
                    float pj = __shfl_sync(0xffffffffu, pr[i][half], jj);
#pragma unroll
                    for (int k = 0; k < NP; k++) {
                        o[i][k][0] = fmaf(pj, v[k].x, o[i][k][0]);
                        o[i][k][1] = fmaf(pj, v[k].y, o[i][k][1]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < RPW; i++) {
        if (!row_ok[i]) continue;
        int r = warp * RPW + i;
        int tok = q0 + t_first + r / p.group;
        int h = g * p.group + r % p.group;
        if (p.n_splits == 1) {
            float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
            __nv_bfloat162 *dst = (__nv_bfloat162 *)(p.out + (size_t)tok * p.hq * hd + (size_t)h * hd);
#pragma unroll
            for (int k = 0; k < NP; k++)
                if (k * 32 + lane < hp)
                    dst[k * 32 + lane] = __floats2bfloat162_rn(o[i][k][0] * inv, o[i][k][1] * inv);
        } else {
            size_t idx = ((size_t)tok * p.hq + h) * p.n_splits + split;
            float2 *dst = (float2 *)(p.part_o + idx * hd);
#pragma unroll
            for (int k = 0; k < NP; k++)
                if (k * 32 + lane < hp) dst[k * 32 + lane] = make_float2(o[i][k][0], o[i][k][1]);
            if (lane == 0) {
                p.part_ml[idx * 2] = m[i];
                p.part_ml[idx * 2 + 1] = l[i];
            }
        }
    }
}

/* Combines the split partials of one (token, head): each split's o and l
 * are rescaled to the common maximum. */
__global__ void kernel_attn_merge(bf16 *out, const float *part_o, const float *part_ml, int hd,
                                  int n_splits)
{
    pdl_wait();
    pdl_release();
    size_t row = blockIdx.x; /* tok * hq + h */
    const float *ml = part_ml + row * n_splits * 2;
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++) mx = fmaxf(mx, ml[2 * s]);
    float acc_l = 0.0f;
    for (int s = 0; s < n_splits; s++)
        if (ml[2 * s] != -INFINITY) acc_l += exp2f(ml[2 * s] - mx) * ml[2 * s + 1];
    float inv = acc_l > 0.0f ? 1.0f / acc_l : 0.0f;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < n_splits; s++)
            if (ml[2 * s] != -INFINITY)
                acc += exp2f(ml[2 * s] - mx) * part_o[(row * n_splits + s) * hd + d];
        out[row * hd + d] = __float2bfloat16(acc * inv);
    }
}

template <int HDC, int RPW, typename KV>
static nl_status launch_kv(cuda_backend *be, attn_params *p, int n_seqs, int q_tiles)
{
    const size_t smem = attn_smem_bytes(p->hd, RPW);
    NL_CUDA_CHECK(cudaFuncSetAttribute(kernel_attention<HDC, RPW, KV>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(q_tiles * p->n_splits, n_seqs, p->hk);
    NL_CUDA_CHECK(cuda_launch(be, kernel_attention<HDC, RPW, KV>, grid, ATTN_WARPS * 32, smem, *p));
    return NL_OK;
}

template <int HDC, int RPW>
static nl_status launch(cuda_backend *be, attn_params *p, int n_seqs, int q_tiles)
{
    return p->kv_fp8 ? launch_kv<HDC, RPW, fp8>(be, p, n_seqs, q_tiles)
                     : launch_kv<HDC, RPW, bf16>(be, p, n_seqs, q_tiles);
}

template <int HDC>
static nl_status launch_rpw(cuda_backend *be, attn_params *p, int rpw, int n_seqs, int q_tiles)
{
    switch (rpw) {
    case 1: return launch<HDC, 1>(be, p, n_seqs, q_tiles);
    case 2: return launch<HDC, 2>(be, p, n_seqs, q_tiles);
    case 4: return launch<HDC, 4>(be, p, n_seqs, q_tiles);
    default: return launch<HDC, 8>(be, p, n_seqs, q_tiles);
    }
}

nl_status cuda_attention_generic(cuda_backend *be, const attn_args *a, const nl_attn_batch *b)
{
    const int hq = a->hq, hk = a->hk, hd = a->hd, group = a->group;
    attn_params p;
    static_cast<attn_args &>(p) = *a;
    p.part_o = attn_scratch(be);
    p.n_splits = 1;

    int rpw;
    int q_tiles;
    if (b->all_decode) {
        /* Rows are the group's heads; split the context until the grid
         * covers the GPU about twice, within the scratch. */
        rpw = group <= ATTN_WARPS ? 1 : group <= 2 * ATTN_WARPS ? 2 : group <= 4 * ATTN_WARPS ? 4 : 8;
        p.tokens_per_block = 1;
        q_tiles = 1;
        int blocks = b->n_seqs * hk;
        int tiles = (b->max_context_len + ATTN_BK - 1) / ATTN_BK;
        int want = (2 * be->num_sms + blocks - 1) / blocks;
        int most = (tiles + ATTN_MIN_SPLIT_TILES - 1) / ATTN_MIN_SPLIT_TILES;
        if (want > most) want = most;
        size_t per_split = (size_t)b->n_tokens * hq * (hd + 2);
        size_t fit = attn_scratch_floats(be) / per_split;
        if ((size_t)want > fit) want = (int)fit;
        p.n_splits = want < 1 ? 1 : want;
    } else {
        rpw = 8;
        p.tokens_per_block = ATTN_WARPS * rpw / group;
        q_tiles = (b->max_q_len + p.tokens_per_block - 1) / p.tokens_per_block;
    }
    p.part_ml = attn_scratch(be) + (size_t)b->n_tokens * hq * p.n_splits * hd;

    if (hd <= 64)
        NL_TRY(launch_rpw<64>(be, &p, rpw, b->n_seqs, q_tiles));
    else if (hd <= 128)
        NL_TRY(launch_rpw<128>(be, &p, rpw, b->n_seqs, q_tiles));
    else
        NL_TRY(launch_rpw<256>(be, &p, rpw, b->n_seqs, q_tiles));
    if (p.n_splits > 1)
        NL_CUDA_CHECK(cuda_launch(be, kernel_attn_merge, b->n_tokens * hq, hd, 0, p.out, p.part_o,
                                  p.part_ml, hd, p.n_splits));
    return NL_OK;
}

/* The head dims the decode and prefill kernels are built for; others take
 * the generic kernel. */
static bool has_fast_kernel(int hd)
{
    return hd == 32 || hd == 64 || hd == 80 || hd == 96 || hd == 128 || hd == 256;
}

nl_status cuda_attention(nl_backend *backend, void *out, const void *qkv, const void *k_cache,
                         const void *v_cache, const nl_attn_batch *b, int32_t hq, int32_t hk,
                         int32_t hd, float scale, nl_dtype kv_dtype)
{
    cuda_backend *be = cuda_be(backend);
    if (kv_dtype != NL_DTYPE_BF16 && kv_dtype != NL_DTYPE_F8_E4M3)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: attention over a %s KV cache (BF16 or F8_E4M3)",
                        nl_dtype_name(kv_dtype));
    if (b->n_seqs <= 0 || b->n_tokens <= 0) return NL_OK;
    if (hk <= 0 || hq % hk != 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: attention heads hq=%d not a multiple of hk=%d",
                        hq, hk);
    if (hd <= 0 || hd % 8 != 0 || hd > ATTN_MAX_HD)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: attention head_dim %d (supported: multiples "
                        "of 8 up to %d)", hd, ATTN_MAX_HD);
    if (b->block_size <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: attention block_size %d", b->block_size);
    attn_args a;
    a.out = (bf16 *)out;
    a.qkv = (const bf16 *)qkv;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    a.kv_fp8 = kv_dtype == NL_DTYPE_F8_E4M3;
    a.cu_seqlens_q = b->cu_seqlens_q;
    a.context_lens = b->context_lens;
    a.block_tables = b->block_tables;
    a.hq = hq;
    a.hk = hk;
    a.group = hq / hk;
    a.hd = hd;
    a.block_size = b->block_size;
    a.max_blocks_per_seq = b->max_blocks_per_seq;
    a.scale_log2 = scale * NL_LOG2E;
    if (be->attn_generic || !has_fast_kernel(hd)) {
        if (a.group > ATTN_WARPS * 8)
            return nl_error(NL_ERR_UNSUPPORTED, "cuda: attention group of %d query heads per kv "
                            "head (at most %d)", a.group, ATTN_WARPS * 8);
        return cuda_attention_generic(be, &a, b);
    }
    if (b->all_decode || b->n_leading_decodes >= b->n_seqs) return cuda_attention_decode(be, &a, b);
    if (b->n_leading_decodes <= 0) return cuda_attention_prefill(be, &a, b);
    /* A mixed step: its decode rows read their contexts once per kv head
     * in the decode kernel instead of as one-row tiles of the prefill
     * kernel, then the prompt chunks take the prefill kernel. */
    const int32_t k = b->n_leading_decodes;
    nl_attn_batch decodes = *b;
    decodes.n_seqs = decodes.n_tokens = k;
    decodes.max_q_len = 1;
    decodes.all_decode = true;
    NL_TRY(cuda_attention_decode(be, &a, &decodes));
    /* the kernels read the per-sequence arrays from the arguments */
    nl_attn_batch prompts = *b;
    prompts.n_seqs -= k;
    prompts.n_tokens -= k;
    prompts.cu_seqlens_q += k;
    prompts.context_lens += k;
    prompts.block_tables += (size_t)k * b->max_blocks_per_seq;
    prompts.n_leading_decodes = 0;
    attn_args pa = a;
    pa.cu_seqlens_q = prompts.cu_seqlens_q;
    pa.context_lens = prompts.context_lens;
    pa.block_tables = prompts.block_tables;
    return cuda_attention_prefill(be, &pa, &prompts);
}
