/* attention_prefill.cu — causal attention for prefill and mixed batches on
 * tensor cores (FlashAttention-2 style), reading K/V from the paged cache,
 * for head_dim 32, 64, 80, 96, 128 and 256.
 *
 * A block owns 128 query rows of one sequence: 64 new tokens of two query
 * heads of one kv head where the group is even, else 128 tokens of one
 * head; each of its four warps owns 32 rows of one head, as two 16-row
 * m-tiles.  Head_dim 256, whose fp32 output rows already fill most of a
 * thread's registers, and batches of prompts of at most 64 tokens with an
 * odd group take blocks of 64 tokens of one head, 16 rows a warp.  The
 * block walks BK-key tiles of its kv head (64 keys, 32 for head_dim 256),
 * gathered through the block table with cp.async into a double buffer so
 * that the next tile loads while the current one is used (an fp8 cache is
 * converted to bf16 on the way in, with plain loads).  Each tile brought
 * from L2 meets all the block's rows: at 64 rows a tile the kernel was
 * bound by that traffic (64 FLOP a byte of K/V).  S = Q K^T and
 * O += P V run as m16n8k16 bf16 mma.sync with fp32 accumulators, operands
 * fetched by ldmatrix from row-padded shared memory (no bank conflicts); the
 * online softmax stays in registers in the base-2 domain.  Tiles past a
 * warp's last causal position are skipped, and the causal mask is applied
 * only to tiles that cross the diagonal.  Query tiles are issued last-first
 * because they carry the most keys.  The group's other blocks read the
 * same K/V tiles, which then mostly come from L2.
 */
#include <math.h>

#include "kernels/cuda/attention.cuh"

#define PF_WARPS 4

/* Prefill needs nothing beyond the shared parameters. */
typedef attn_args pf_params;

/* Query rows of a block: MT 16-row m-tiles a warp. */
template <int MT>
static __host__ __device__ constexpr int pf_bq()
{
    return PF_WARPS * 16 * MT;
}

/* Keys per tile for a head_dim.  At two m-tiles a warp, 64-key tiles
 * leave a few of the scores' registers to spill (96 bytes a thread at
 * head_dim 128), and still ran 2-5% faster than 32-key tiles at head_dim
 * 128 and 13% at 80 (2% slower at 96, on an H100): half the tiles'
 * barriers and row-maximum reductions. */
template <int HD>
static __host__ __device__ constexpr int pf_bk()
{
    return HD > 128 ? 32 : 64;
}

template <int HD, int MT>
static __host__ __device__ constexpr size_t pf_smem_bytes()
{
    return (size_t)(pf_bq<MT>() + 4 * pf_bk<HD>()) * (HD + 8) * sizeof(bf16);
}

/* Two 8x8 bf16 matrices; lanes 0-15 give the row addresses. */
static __device__ __forceinline__ void pf_ldsm_x2(uint32_t r[2], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
}

/* MT: 16-row m-tiles a warp; P: query heads a block (P divides the
 * group).  With two m-tiles each K or V fragment read from shared memory
 * feeds twice the MMAs, and the query fragments come from shared memory at
 * each k-step (their registers hold the second m-tile's sums). */
template <int HD, typename KV, int MT, int P>
__global__ void __launch_bounds__(PF_WARPS * 32) kernel_prefill(pf_params p)
{
    pdl_wait();
    pdl_release();
    constexpr int PF_BK = pf_bk<HD>();
    constexpr int BQ = pf_bq<MT>();
    constexpr bool QREG = MT == 1 && HD <= 128; /* query fragments held in registers */
    constexpr int ST = HD + 8;      /* padded row stride in bf16             */
    constexpr int KT = HD / 16;     /* k-steps of S = Q K^T (odd for 80)     */
    constexpr int DT = HD / 8;      /* 8-wide output column tiles            */
    constexpr int PIECES = HD / 8;  /* 16-byte pieces per row                */
    constexpr int WR = 16 * MT;     /* rows a warp                           */
    constexpr int TB = BQ / P;      /* tokens a block: its rows are P heads' */
    constexpr int WH = PF_WARPS / P; /* warps a head                         */
    extern __shared__ __align__(16) unsigned char pf_smem[];
    bf16 *qs = (bf16 *)pf_smem;     /* [BQ, ST]                              */
    bf16 *ks = qs + BQ * ST;        /* [2][BK, ST]                           */
    bf16 *vs = ks + 2 * PF_BK * ST; /* [2][BK, ST]                           */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int seq = blockIdx.y, h0 = blockIdx.z * P; /* the block's first head */
    const int h = h0 + warp / WH;                     /* this warp's head      */
    const int qtile = gridDim.x - 1 - blockIdx.x;
    const int q0 = p.cu_seqlens_q[seq];
    const int q_len = p.cu_seqlens_q[seq + 1] - q0;
    const int ctx = p.context_lens[seq];
    const int t_first = qtile * TB;
    if (t_first >= q_len) return;
    const int t_count = min(TB, q_len - t_first);
    const int kvh = h0 / p.group; /* P divides the group */
    const int pos0 = ctx - q_len + t_first; /* position of the block's row 0 */
    const int kv_end = min(ctx, pos0 + t_count);
    const int n_tiles = kv_end > 0 ? (kv_end + PF_BK - 1) / PF_BK : 0;
    const int tid = threadIdx.x;
    const size_t qkv_stride = (size_t)(p.hq + 2 * p.hk) * HD;
    const int32_t *table = p.block_tables + (size_t)seq * p.max_blocks_per_seq;

    for (int c = tid; c < BQ * PIECES; c += PF_WARPS * 32) {
        const int r = c / PIECES, piece = c % PIECES, tr = r % TB;
        bf16 *dst = qs + r * ST + piece * 8;
        if (tr < t_count)
            attn_cp_async16(dst, p.qkv + (size_t)(q0 + t_first + tr) * qkv_stride +
                                     (size_t)(h0 + r / TB) * HD + piece * 8);
        else
            *(uint4 *)dst = make_uint4(0, 0, 0, 0);
    }

    /* Keys past kv_end are zero-filled so that 0 * garbage never appears. */
    auto load_tile = [&](int tile, int buf) {
        const int kv0 = tile * PF_BK;
        bf16 *kd = ks + buf * PF_BK * ST, *vd = vs + buf * PF_BK * ST;
        for (int c = tid; c < PF_BK * PIECES; c += PF_WARPS * 32) {
            const int j = c / PIECES, piece = c % PIECES;
            const int key = kv0 + j;
            if (key < kv_end) {
                const int bi = key / p.block_size;
                const size_t slot = (size_t)table[bi] * p.block_size + (key - bi * p.block_size);
                const size_t off = (slot * p.hk + kvh) * HD + piece * 8;
                if constexpr (sizeof(KV) == 2) {
                    attn_cp_async16(kd + j * ST + piece * 8, (const KV *)p.k_cache + off);
                    attn_cp_async16(vd + j * ST + piece * 8, (const KV *)p.v_cache + off);
                } else { /* converted on the way: a plain load, then a store */
                    *(uint4 *)(kd + j * ST + piece * 8) = attn_load8_as_bf16((const KV *)p.k_cache + off);
                    *(uint4 *)(vd + j * ST + piece * 8) = attn_load8_as_bf16((const KV *)p.v_cache + off);
                }
            } else {
                *(uint4 *)(kd + j * ST + piece * 8) = make_uint4(0, 0, 0, 0);
                *(uint4 *)(vd + j * ST + piece * 8) = make_uint4(0, 0, 0, 0);
            }
        }
    };
    if (n_tiles > 0) load_tile(0, 0);
    attn_cp_async_commit();

    /* This thread's rows: m-tile i's lane / 4 and lane / 4 + 8, rows
     * wr0 + 16 i + (0 or 8) + lane / 4 of the block, tokens wt0 + the same
     * of its head's. */
    const int wr0 = warp * WR, wt0 = (warp % WH) * WR;
    int pos[2 * MT]; /* -1: row unused */
#pragma unroll
    for (int i = 0; i < 2 * MT; i++) {
        const int t = wt0 + 8 * i + (lane >> 2);
        pos[i] = t < t_count ? pos0 + t : -1;
    }
    const int warp_first = wt0 < t_count ? pos0 + wt0 : -1;
    const int warp_last = wt0 < t_count ? pos0 + min(wt0 + WR - 1, t_count - 1) : -1;

    uint32_t qf[QREG ? KT : 1][4];
    float o[MT][DT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int d = 0; d < DT; d++) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;
    float m[2 * MT], l[2 * MT];
#pragma unroll
    for (int r = 0; r < 2 * MT; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    /* m-tile i's query fragment of k-step kt */
    auto q_frag = [&](uint32_t a[4], int i, int kt) {
        if constexpr (QREG) {
#pragma unroll
            for (int c = 0; c < 4; c++) a[c] = qf[kt][c];
        } else {
            attn_ldsm_x4(a, qs + (wr0 + 16 * i + (lane & 15)) * ST + kt * 16 + (lane >> 4) * 8);
        }
    };

    for (int j = 0; j < n_tiles; j++) {
        if (j + 1 < n_tiles) {
            load_tile(j + 1, (j + 1) & 1);
            attn_cp_async_commit();
            attn_cp_async_wait<1>();
        } else {
            attn_cp_async_wait<0>();
        }
        __syncthreads();
        if (QREG && j == 0) {
#pragma unroll
            for (int kt = 0; kt < (QREG ? KT : 1); kt++)
                attn_ldsm_x4(qf[kt], qs + (wr0 + (lane & 15)) * ST + kt * 16 + (lane >> 4) * 8);
        }
        const int kv0 = j * PF_BK;
        if (kv0 <= warp_last) {
            const bf16 *kb = ks + (j & 1) * PF_BK * ST;
            const bf16 *vb = vs + (j & 1) * PF_BK * ST;

            float s[MT][PF_BK / 8][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++)
                    s[i][nt][0] = s[i][nt][1] = s[i][nt][2] = s[i][nt][3] = 0.0f;
#pragma unroll
            for (int kt = 0; kt + 1 < KT; kt += 2) {
                uint32_t a0[MT][4], a1[MT][4];
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    q_frag(a0[i], i, kt);
                    q_frag(a1[i], i, kt + 1);
                }
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
                    uint32_t b[4];
                    attn_ldsm_x4(b, kb + (nt * 8 + (lane & 7)) * ST + kt * 16 + (lane >> 3) * 8);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        attn_mma_bf16(s[i][nt], a0[i], b[0], b[1]);
                        attn_mma_bf16(s[i][nt], a1[i], b[2], b[3]);
                    }
                }
            }
            if constexpr (KT % 2 == 1) { /* the last 16 dims on their own */
                constexpr int kt = KT - 1;
                uint32_t a[MT][4];
#pragma unroll
                for (int i = 0; i < MT; i++) q_frag(a[i], i, kt);
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
                    uint32_t b[2];
                    pf_ldsm_x2(b, kb + (nt * 8 + (lane & 7)) * ST + kt * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int i = 0; i < MT; i++) attn_mma_bf16(s[i][nt], a[i], b[0], b[1]);
                }
            }

            const bool mask = kv0 + PF_BK - 1 > warp_first;
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        float v = s[i][nt][c] * p.scale_log2;
                        if (mask) {
                            const int key = kv0 + nt * 8 + (lane & 3) * 2 + (c & 1);
                            if (key > pos[2 * i + (c >> 1)]) v = -INFINITY;
                        }
                        s[i][nt][c] = v;
                    }
                }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < PF_BK / 8; nt++)
                        mx = fmaxf(mx, fmaxf(s[i][nt][2 * r], s[i][nt][2 * r + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m[2 * i + r], mx);
                    /* A row with no visible key yet stays all zero, NaN-free. */
                    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                    const float alpha = exp2f(m[2 * i + r] - m_use);
                    m[2 * i + r] = m_new;
                    float sum = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < PF_BK / 8; nt++) {
                        s[i][nt][2 * r] = exp2f(s[i][nt][2 * r] - m_use);
                        s[i][nt][2 * r + 1] = exp2f(s[i][nt][2 * r + 1] - m_use);
                        sum += s[i][nt][2 * r] + s[i][nt][2 * r + 1];
                    }
                    l[2 * i + r] = l[2 * i + r] * alpha + sum; /* this thread's columns only */
#pragma unroll
                    for (int d = 0; d < DT; d++) {
                        o[i][d][2 * r] *= alpha;
                        o[i][d][2 * r + 1] *= alpha;
                    }
                }

            /* The accumulator layout of two 8-key tiles is the A operand
             * layout of one 16-key step. */
#pragma unroll
            for (int kk = 0; kk < PF_BK / 16; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    a[i][0] = attn_pack_bf16(s[i][2 * kk][0], s[i][2 * kk][1]);
                    a[i][1] = attn_pack_bf16(s[i][2 * kk][2], s[i][2 * kk][3]);
                    a[i][2] = attn_pack_bf16(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
                    a[i][3] = attn_pack_bf16(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
                }
#pragma unroll
                for (int d = 0; d < DT; d += 2) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, vb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST +
                                              d * 8 + (lane >> 4) * 8);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        attn_mma_bf16(o[i][d], a[i], b[0], b[1]);
                        attn_mma_bf16(o[i][d + 1], a[i], b[2], b[3]);
                    }
                }
            }
        }
        __syncthreads(); /* the buffer is refilled two iterations on */
    }
    attn_cp_async_wait<0>();

    const int col = (lane & 3) * 2;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float sum = l[2 * i + r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            const int t = wt0 + 16 * i + 8 * r + (lane >> 2);
            if (t < t_count) {
                __nv_bfloat162 *dst = (__nv_bfloat162 *)(p.out + ((size_t)(q0 + t_first + t) * p.hq + h) * HD + col);
#pragma unroll
                for (int d = 0; d < DT; d++)
                    dst[d * 4] = __floats2bfloat162_rn(o[i][d][2 * r] * inv, o[i][d][2 * r + 1] * inv);
            }
        }
}

template <int HD, typename KV, int MT, int P>
static nl_status launch_prefill_kv(cuda_backend *be, const pf_params *p, int n_seqs, int max_q_len)
{
    const size_t smem = pf_smem_bytes<HD, MT>();
    void (*const k)(pf_params) = kernel_prefill<HD, KV, MT, P>;
    NL_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    constexpr int tokens = pf_bq<MT>() / P;
    dim3 grid((max_q_len + tokens - 1) / tokens, n_seqs, p->hq / P);
    NL_CUDA_CHECK(cuda_launch(be, k, grid, PF_WARPS * 32, smem, *p));
    return NL_OK;
}

template <int HD, int MT, int P>
static nl_status launch_prefill_tiles(cuda_backend *be, const pf_params *p, int n_seqs, int max_q_len)
{
    return p->kv_fp8 ? launch_prefill_kv<HD, fp8, MT, P>(be, p, n_seqs, max_q_len)
                     : launch_prefill_kv<HD, bf16, MT, P>(be, p, n_seqs, max_q_len);
}

/* Two m-tiles a warp where the registers allow them (head_dim up to 128:
 * 256's sums alone would take them all).  A block's 128 rows are 64
 * tokens of two query heads of one kv head where the group is even, so
 * that each K/V tile brought from L2 meets both (measured 1.5-6% faster
 * than 128 tokens of one head), else 128 tokens of one head where the
 * prompts fill more than 64. */
template <int HD>
static nl_status launch_prefill(cuda_backend *be, const pf_params *p, int n_seqs, int max_q_len)
{
    if constexpr (HD <= 128) {
        const bool pair = p->group % 2 == 0;
        if ((pair || max_q_len > pf_bq<1>()) && be->prefill_wide)
            return pair ? launch_prefill_tiles<HD, 2, 2>(be, p, n_seqs, max_q_len)
                        : launch_prefill_tiles<HD, 2, 1>(be, p, n_seqs, max_q_len);
    }
    return launch_prefill_tiles<HD, 1, 1>(be, p, n_seqs, max_q_len);
}

nl_status cuda_attention_prefill(cuda_backend *be, const attn_args *a, const nl_attn_batch *b)
{
    const pf_params &p = *a;
    const int max_q_len = b->max_q_len;
    if (max_q_len <= 0) return NL_OK;
    switch (p.hd) {
    case 32: return launch_prefill<32>(be, &p, b->n_seqs, max_q_len);
    case 64: return launch_prefill<64>(be, &p, b->n_seqs, max_q_len);
    case 80: return launch_prefill<80>(be, &p, b->n_seqs, max_q_len);
    case 96: return launch_prefill<96>(be, &p, b->n_seqs, max_q_len);
    case 128: return launch_prefill<128>(be, &p, b->n_seqs, max_q_len);
    case 256: return launch_prefill<256>(be, &p, b->n_seqs, max_q_len);
    default:
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: prefill attention head_dim %d (kernels for "
                        "32, 64, 80, 96, 128, 256)", p.hd);
    }
}
