/* attention_prefill.cu — causal attention for prefill and mixed batches on
 * tensor cores (FlashAttention-2 style), reading K/V from the paged cache,
 * for head_dim 32, 64, 80, 96, 128 and 256.
 *
 * A block owns 64 new tokens of one sequence for one query head; each of its
 * four warps owns 16 of those rows.  The block walks BK-key tiles of its kv
 * head (64 keys; 32 for head_dim 256, whose fp32 output rows already fill
 * most of a thread's registers, and which also re-reads its query fragments
 * from shared memory instead of holding them), gathered through the block
 * table with cp.async into a double buffer so that the next tile loads while
 * the current one is used (an fp8 cache is converted to bf16 on the way in,
 * with plain loads).  S = Q K^T and
 * O += P V run as m16n8k16 bf16 mma.sync with fp32 accumulators, operands
 * fetched by ldmatrix from row-padded shared memory (no bank conflicts); the
 * online softmax stays in registers in the base-2 domain.  Tiles past a
 * warp's last causal position are skipped, and the causal mask is applied
 * only to tiles that cross the diagonal.  Query tiles are issued last-first
 * because they carry the most keys.  Other heads of the same group read the
 * same K/V tiles, which then mostly come from L2.
 */
#include <math.h>

#include "kernels/cuda/attention.cuh"

#define PF_WARPS 4
#define PF_BQ 64  /* query rows per block (16 per warp)                      */

/* Prefill needs nothing beyond the shared parameters. */
typedef attn_args pf_params;

/* Keys per tile for a head_dim. */
template <int HD>
static __host__ __device__ constexpr int pf_bk()
{
    return HD > 128 ? 32 : 64;
}

template <int HD>
static __host__ __device__ constexpr size_t pf_smem_bytes()
{
    return (size_t)(PF_BQ + 4 * pf_bk<HD>()) * (HD + 8) * sizeof(bf16);
}

/* Two 8x8 bf16 matrices; lanes 0-15 give the row addresses. */
static __device__ __forceinline__ void pf_ldsm_x2(uint32_t r[2], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
}

template <int HD, typename KV>
__global__ void __launch_bounds__(PF_WARPS * 32) kernel_prefill(pf_params p)
{
    pdl_wait();
    pdl_release();
    constexpr int PF_BK = pf_bk<HD>();
    constexpr bool QREG = HD <= 128; /* query fragments held in registers  */
    constexpr int ST = HD + 8;      /* padded row stride in bf16             */
    constexpr int KT = HD / 16;     /* k-steps of S = Q K^T (odd for 80)     */
    static_assert(QREG || KT % 2 == 0, "an odd k-step count needs register query fragments");
    constexpr int DT = HD / 8;      /* 8-wide output column tiles            */
    constexpr int PIECES = HD / 8;  /* 16-byte pieces per row                */
    extern __shared__ __align__(16) unsigned char pf_smem[];
    bf16 *qs = (bf16 *)pf_smem;     /* [BQ, ST]                              */
    bf16 *ks = qs + PF_BQ * ST;     /* [2][BK, ST]                           */
    bf16 *vs = ks + 2 * PF_BK * ST; /* [2][BK, ST]                           */

    const int seq = blockIdx.y, h = blockIdx.z;
    const int qtile = gridDim.x - 1 - blockIdx.x;
    const int q0 = p.cu_seqlens_q[seq];
    const int q_len = p.cu_seqlens_q[seq + 1] - q0;
    const int ctx = p.context_lens[seq];
    const int t_first = qtile * PF_BQ;
    if (t_first >= q_len) return;
    const int t_count = min(PF_BQ, q_len - t_first);
    const int kvh = h / p.group;
    const int pos0 = ctx - q_len + t_first; /* position of the block's row 0 */
    const int kv_end = min(ctx, pos0 + t_count);
    const int n_tiles = kv_end > 0 ? (kv_end + PF_BK - 1) / PF_BK : 0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int tid = threadIdx.x;
    const size_t qkv_stride = (size_t)(p.hq + 2 * p.hk) * HD;
    const int32_t *table = p.block_tables + (size_t)seq * p.max_blocks_per_seq;

    for (int c = tid; c < PF_BQ * PIECES; c += PF_WARPS * 32) {
        const int r = c / PIECES, piece = c % PIECES;
        bf16 *dst = qs + r * ST + piece * 8;
        if (r < t_count)
            attn_cp_async16(dst, p.qkv + (size_t)(q0 + t_first + r) * qkv_stride +
                                     (size_t)h * HD + piece * 8);
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

    /* This thread's two rows: r_a = lane / 4 and r_a + 8 of the warp's 16. */
    const int wr0 = warp * 16;
    const int r_a = wr0 + (lane >> 2), r_b = r_a + 8;
    const int pos_a = r_a < t_count ? pos0 + r_a : -1; /* -1: row unused    */
    const int pos_b = r_b < t_count ? pos0 + r_b : -1;
    const int warp_first = wr0 < t_count ? pos0 + wr0 : -1;
    const int warp_last = wr0 < t_count ? pos0 + min(wr0 + 15, t_count - 1) : -1;

    uint32_t qf[QREG ? KT : 1][4];
    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

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

            float s[PF_BK / 8][4];
#pragma unroll
            for (int nt = 0; nt < PF_BK / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int kt = 0; kt + 1 < KT; kt += 2) {
                uint32_t a0[4], a1[4];
                if constexpr (QREG) {
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        a0[i] = qf[kt][i];
                        a1[i] = qf[kt + 1][i];
                    }
                } else {
                    const bf16 *qrow = qs + (wr0 + (lane & 15)) * ST + (lane >> 4) * 8;
                    attn_ldsm_x4(a0, qrow + kt * 16);
                    attn_ldsm_x4(a1, qrow + (kt + 1) * 16);
                }
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
                    uint32_t b[4];
                    attn_ldsm_x4(b, kb + (nt * 8 + (lane & 7)) * ST + kt * 16 + (lane >> 3) * 8);
                    attn_mma_bf16(s[nt], a0, b[0], b[1]);
                    attn_mma_bf16(s[nt], a1, b[2], b[3]);
                }
            }
            if constexpr (KT % 2 == 1) { /* the last 16 dims on their own */
                constexpr int kt = KT - 1;
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
                    uint32_t b[2];
                    pf_ldsm_x2(b, kb + (nt * 8 + (lane & 7)) * ST + kt * 16 + ((lane >> 3) & 1) * 8);
                    attn_mma_bf16(s[nt], qf[QREG ? kt : 0], b[0], b[1]);
                }
            }

            const bool mask = kv0 + PF_BK - 1 > warp_first;
#pragma unroll
            for (int nt = 0; nt < PF_BK / 8; nt++) {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    float v = s[nt][c] * p.scale_log2;
                    if (mask) {
                        const int key = kv0 + nt * 8 + (lane & 3) * 2 + (c & 1);
                        if (key > (c < 2 ? pos_a : pos_b)) v = -INFINITY;
                    }
                    s[nt][c] = v;
                }
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++)
                    mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[r], mx);
                /* A row with no visible key yet stays all zero, NaN-free. */
                const float m_use = m_new == -INFINITY ? 0.0f : m_new;
                const float alpha = exp2f(m[r] - m_use);
                m[r] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < PF_BK / 8; nt++) {
                    s[nt][2 * r] = exp2f(s[nt][2 * r] - m_use);
                    s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_use);
                    sum += s[nt][2 * r] + s[nt][2 * r + 1];
                }
                l[r] = l[r] * alpha + sum; /* this thread's columns only */
#pragma unroll
                for (int d = 0; d < DT; d++) {
                    o[d][2 * r] *= alpha;
                    o[d][2 * r + 1] *= alpha;
                }
            }

            /* The accumulator layout of two 8-key tiles is the A operand
             * layout of one 16-key step. */
#pragma unroll
            for (int kk = 0; kk < PF_BK / 16; kk++) {
                uint32_t a[4];
                a[0] = attn_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
                a[1] = attn_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
                a[2] = attn_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = attn_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int d = 0; d < DT; d += 2) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, vb + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ST +
                                              d * 8 + (lane >> 4) * 8);
                    attn_mma_bf16(o[d], a, b[0], b[1]);
                    attn_mma_bf16(o[d + 1], a, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* the buffer is refilled two iterations on */
    }
    attn_cp_async_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    const float inv_a = l[0] > 0.0f ? 1.0f / l[0] : 0.0f;
    const float inv_b = l[1] > 0.0f ? 1.0f / l[1] : 0.0f;
    const int col = (lane & 3) * 2;
    if (r_a < t_count) {
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(p.out + ((size_t)(q0 + t_first + r_a) * p.hq + h) * HD + col);
#pragma unroll
        for (int d = 0; d < DT; d++)
            dst[d * 4] = __floats2bfloat162_rn(o[d][0] * inv_a, o[d][1] * inv_a);
    }
    if (r_b < t_count) {
        __nv_bfloat162 *dst = (__nv_bfloat162 *)(p.out + ((size_t)(q0 + t_first + r_b) * p.hq + h) * HD + col);
#pragma unroll
        for (int d = 0; d < DT; d++)
            dst[d * 4] = __floats2bfloat162_rn(o[d][2] * inv_b, o[d][3] * inv_b);
    }
}

template <int HD, typename KV>
static nl_status launch_prefill_kv(cuda_backend *be, const pf_params *p, int n_seqs, int q_tiles)
{
    const size_t smem = pf_smem_bytes<HD>();
    NL_CUDA_CHECK(cudaFuncSetAttribute(kernel_prefill<HD, KV>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(q_tiles, n_seqs, p->hq);
    NL_CUDA_CHECK(cuda_launch(be, kernel_prefill<HD, KV>, grid, PF_WARPS * 32, smem, *p));
    return NL_OK;
}

template <int HD>
static nl_status launch_prefill(cuda_backend *be, const pf_params *p, int n_seqs, int q_tiles)
{
    return p->kv_fp8 ? launch_prefill_kv<HD, fp8>(be, p, n_seqs, q_tiles)
                     : launch_prefill_kv<HD, bf16>(be, p, n_seqs, q_tiles);
}

nl_status cuda_attention_prefill(cuda_backend *be, const attn_args *a, const nl_attn_batch *b)
{
    const pf_params &p = *a;
    const int q_tiles = (b->max_q_len + PF_BQ - 1) / PF_BQ;
    if (q_tiles <= 0) return NL_OK;
    switch (p.hd) {
    case 32: return launch_prefill<32>(be, &p, b->n_seqs, q_tiles);
    case 64: return launch_prefill<64>(be, &p, b->n_seqs, q_tiles);
    case 80: return launch_prefill<80>(be, &p, b->n_seqs, q_tiles);
    case 96: return launch_prefill<96>(be, &p, b->n_seqs, q_tiles);
    case 128: return launch_prefill<128>(be, &p, b->n_seqs, q_tiles);
    case 256: return launch_prefill<256>(be, &p, b->n_seqs, q_tiles);
    default:
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: prefill attention head_dim %d (kernels for "
                        "32, 64, 80, 96, 128, 256)", p.hd);
    }
}
