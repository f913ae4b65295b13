/* attention_decode_mma.cu — decode attention on tensor cores, for batches of
 * more than a few sequences (the launcher's "late" kernel), head_dim 128.
 *
 * The CUDA-core kernel (attention_decode.cu) spreads a key's row over a
 * group of lanes, so each key costs its products, a shuffle reduction per
 * query head and a softmax step.  Here a warp takes
 * 16 keys at a time and forms both products as m16n8k16 MMAs with fp32
 * sums, query heads as the rows of A (rows past the block's heads are
 * zero), as FlashAttention-2 does for a tile of queries:
 *
 * - q k^T: B is 8 keys' K rows.  Lane (g, t) = (lane / 4, lane % 4) holds
 *   keys g and g + 8 of the tile over its K slice of HD / 4 elements, and
 *   the q of head g over the same slice.  The sum over the head dimension
 *   does not care about its order, so a lane's slice is simply what its
 *   loads bring: pieces i * 4 + t of the row, whole rows a warp load.
 * - p v: the sums of q k^T land where A wants p (head g, keys 2t, 2t + 1,
 *   2t + 8, 2t + 9).  B wants each register to pair two keys of one
 *   element, so lane (g, t) loads those four keys over its V slice of
 *   HD / 8 elements (pieces i * 8 + g) and interleaves each pair (prmt).
 *
 * Each warp streams its own tiles through a ring of shared memory
 * (cp.async): a ring of registers leaves a tile or two a warp in flight,
 * too few to cover the memory's latency (an H100 ran the bench's e4m3
 * cache 4% slower that way than on the CUDA-core kernel).
 *
 * e4m3 K/V convert to fp16 pairs (exact) and meet q converted to fp16 (a
 * bf16 q is exact in fp16 unless tiny) and p rounded to fp16; bf16 K/V
 * meet q as loaded and p rounded to bf16.  The scale applies to the fp32
 * scores.  A tile of 16 keys lies inside one cache block (block sizes are
 * powers of two of at least 16, splits start at multiples of 64), so it
 * costs one block-table read; keys of that block past the split's end are
 * masked, and their V zeroed (the cache there may hold anything).
 */

#include "kernels/cuda/attention_decode.cuh"

#define MMA_TILE 16 /* keys a warp takes at a time */
#define MMA_HD 128  /* the head_dim it is built for */

/* What differs between the two caches: the 16-bit type of the MMA's inputs
 * and how a cache element pair becomes one of its registers. */
template <typename KV> struct mma_kv;

template <> struct mma_kv<fp8> {
    /* Two e4m3 (the low 16 bits) to an fp16 pair. */
    static __device__ __forceinline__ uint32_t pair(uint32_t v)
    {
        const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xffffu), __NV_E4M3);
        return (uint32_t)h.x | (uint32_t)h.y << 16;
    }
    /* A bf16 pair of q to an fp16 pair. */
    static __device__ __forceinline__ uint32_t q_pair(uint32_t v)
    {
        const float2 f = __bfloat1622float2(*(const __nv_bfloat162 *)&v);
        const __half2 h = __floats2half2_rn(f.x, f.y);
        return *(const uint32_t *)&h;
    }
    static __device__ __forceinline__ uint32_t p_pair(float lo, float hi)
    {
        const __half2 h = __floats2half2_rn(lo, hi);
        return *(const uint32_t *)&h;
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
        attn_mma_f16(c, a, b0, b1);
    }
};

template <> struct mma_kv<bf16> {
    static __device__ __forceinline__ uint32_t q_pair(uint32_t v) { return v; }
    static __device__ __forceinline__ uint32_t p_pair(float lo, float hi)
    {
        return attn_pack_bf16(lo, hi);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
    {
        attn_mma_bf16(c, a, b0, b1);
    }
};

/* c0, c1 += a b over the rows 0-7 of A, whose rows 8-15 are zero; the
 * sums of rows 8-15 are not kept, so they hold no registers. */
template <typename KV>
static __device__ __forceinline__ void mma_rows0(float &c0, float &c1, uint32_t a0, uint32_t a2,
                                                 uint32_t b0, uint32_t b1)
{
    float c[4] = {c0, c1, 0.0f, 0.0f};
    const uint32_t a[4] = {a0, 0u, a2, 0u};
    mma_kv<KV>::mma(c, a, b0, b1);
    c0 = c[0];
    c1 = c[1];
}

/* Where piece p (16 bytes) of row r of a tile sits in shared memory: the
 * rows' pieces are permuted so that each quarter-warp's 16-byte fragment
 * reads below touch all 32 banks once.  K: lane (g, t) reads pieces
 * 4i + t of rows g and g + 8, so odd rows swap their halves of 8 pieces;
 * V: lanes read piece 8i + g of rows 2t + (0, 1, 8 or 9), so rows shift
 * their pieces by 2t. */
static __device__ __forceinline__ int mma_k_piece(int r, int p) { return p ^ ((r & 1) << 2); }
static __device__ __forceinline__ int mma_v_piece(int r, int p) { return p ^ (((r >> 1) & 3) << 1); }

template <typename KV, int STAGES>
static __host__ __device__ constexpr size_t mma_smem_bytes()
{
    return (size_t)DEC_WARPS * STAGES * 2 * MMA_TILE * MMA_HD * sizeof(KV);
}

/* Resident blocks an SM the registers must allow: as many as the rings'
 * shared memory does (227 KiB an SM), at most 4. */
template <typename KV, int STAGES>
static __host__ __device__ constexpr int mma_min_blocks()
{
    const int fit = (int)(227 * 1024 / mma_smem_bytes<KV, STAGES>());
    return fit < 4 ? fit : 4;
}

/* STAGES: tiles in a warp's ring of shared memory, all but one in flight
 * while it multiplies the oldest.  Each warp streams its own tiles
 * (cp.async, past L1) and syncs only with itself. */
template <int G, typename KV, int STAGES>
__global__ void __launch_bounds__(DEC_WARPS * 32, mma_min_blocks<KV, STAGES>()) kernel_decode_mma(dec_params p)
{
    typedef mma_kv<KV> kv;
    constexpr int HD = MMA_HD;
    constexpr int EL = (int)sizeof(KV);
    constexpr int PR = HD * EL / 16;                /* 16-byte pieces a row: 8 or 16 */
    constexpr int TP = MMA_TILE * PR;               /* pieces a K (or V) tile        */
    constexpr int KE = HD / 4, KW = KE * EL / 4;    /* a lane's K slice: elements, words */
    constexpr int KP = 16 / EL;                     /* elements a piece              */
    constexpr int VE = HD / 8, VW = VE * EL / 4;    /* a lane's V slice              */
    constexpr int KC = HD / 16; /* k-steps of q k^T */
    constexpr int NT = HD / 8;  /* n-tiles of p v   */
    static_assert(G <= 8, "a block's query heads fit the rows 0-7 of A");
    static_assert(sizeof(float) * DEC_WARPS * (G * HD + 2 * G) <= mma_smem_bytes<KV, STAGES>(),
                  "the merge's states fit in the rings");
    extern __shared__ uint4 mma_smem[];

    const dec_share d = dec_share_of(p);
    const int split = d.split, seq = d.seq, kvh = d.kvh, slice = d.slice;
    const int k_begin = d.k_begin, k_end = d.k_end;
    if (k_begin >= k_end) return;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int tok = p.cu_seqlens_q[seq];
    const int h0 = kvh * p.group + slice * G; /* first query head served */
    const int nh = min(G, p.group - slice * G);
    const int32_t *table = p.block_tables + (size_t)seq * p.max_blocks_per_seq;
    const size_t row_stride = (size_t)p.hk * HD;
    const KV *k_head = (const KV *)p.k_cache + (size_t)kvh * HD;
    const KV *v_head = (const KV *)p.v_cache + (size_t)kvh * HD;
    uint4 *ring = mma_smem + (size_t)warp * STAGES * 2 * TP;
    /* this warp's tiles: j-th at k_begin + (warp + DEC_WARPS j) * MMA_TILE */
    const int tiles = (k_end - k_begin + MMA_TILE - 1) / MMA_TILE;
    const int mine = tiles > warp ? (tiles - warp + DEC_WARPS - 1) / DEC_WARPS : 0;
    auto key0_of = [&](int j) { return k_begin + (warp + DEC_WARPS * j) * MMA_TILE; };
    /* Tile j's K and V into stage j % STAGES; a commit group either way. */
    auto issue = [&](int j) {
        if (j < mine) {
            const int key0 = key0_of(j);
            const int bi = key0 >> p.block_shift, bo = key0 & (p.block_size - 1);
            const size_t row0 = ((size_t)table[bi] * p.block_size + bo) * row_stride;
            uint4 *kd = ring + (j % STAGES) * 2 * TP, *vd = kd + TP;
#pragma unroll
            for (int q = lane; q < TP; q += 32) {
                const int r = q / PR, pc = q % PR;
                const size_t src = row0 + r * row_stride + pc * KP;
                attn_cp_async16(kd + r * PR + mma_k_piece(r, pc), k_head + src);
                attn_cp_async16(vd + r * PR + mma_v_piece(r, pc), v_head + src);
            }
        }
        attn_cp_async_commit();
    };
    pdl_wait();
    pdl_release();
#pragma unroll
    for (int j = 0; j < STAGES - 1; j++) issue(j);

    /* q of head g over this lane's K slice, as A's row g: k-step c takes
     * slice elements 4c, 4c + 1 (register 0) and 4c + 2, 4c + 3 (register 2). */
    uint32_t qa[KC][2];
    {
        uint32_t qw[KE / 2];
        if (g < nh) {
            const bf16 *q = p.qkv + (size_t)tok * (p.hq + 2 * p.hk) * HD + (size_t)(h0 + g) * HD;
#pragma unroll
            for (int i = 0; i < KE / KP; i++)
#pragma unroll
                for (int j = 0; j < KP / 8; j++)
                    *(uint4 *)&qw[i * KP / 2 + j * 4] = *(const uint4 *)(q + (i * 4 + t) * KP + j * 8);
        } else {
#pragma unroll
            for (int i = 0; i < KE / 2; i++) qw[i] = 0;
        }
#pragma unroll
        for (int c = 0; c < KC; c++) {
            qa[c][0] = kv::q_pair(qw[2 * c]);
            qa[c][1] = kv::q_pair(qw[2 * c + 1]);
        }
    }

    float o[NT][2];
#pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = 0.0f;
    float m = -INFINITY, l = 0.0f; /* head g's running maximum; this lane's part of its sum */

    /* V rows a lane reads, as offsets in the tile: the key pairs of B's
     * registers 0 and 1. */
    auto v_key = [&](int r) { return 2 * t + (r & 1) + 8 * (r >> 1); };

    for (int j = 0; j < mine; j++) {
        issue(j + STAGES - 1);
        attn_cp_async_wait<STAGES - 1>();
        __syncwarp();
        const uint4 *kd = ring + (j % STAGES) * 2 * TP, *vd = kd + TP;
        const int key0 = key0_of(j);

        uint32_t kr[2][KW];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < PR / 4; i++) {
                const int r = g + 8 * h;
                *(uint4 *)&kr[h][4 * i] = kd[r * PR + mma_k_piece(r, 4 * i + t)];
            }
        /* s[h][j]: head g against key 8h + 2t + j of the tile */
        float s[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
        for (int c = 0; c < KC; c++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint32_t b0, b1;
                if constexpr (EL == 1) {
                    b0 = mma_kv<fp8>::pair(kr[h][c]);
                    b1 = mma_kv<fp8>::pair(kr[h][c] >> 16);
                } else {
                    b0 = kr[h][2 * c];
                    b1 = kr[h][2 * c + 1];
                }
                mma_rows0<KV>(s[h][0], s[h][1], qa[c][0], qa[c][1], b0, b1);
            }
        float mx = -INFINITY;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const bool in = key0 + 8 * h + 2 * t + i < k_end;
                s[h][i] = in ? s[h][i] * p.scale_log2 : -INFINITY;
                mx = fmaxf(mx, s[h][i]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m, mx);
        /* No visible key yet: keep everything at zero without NaNs. */
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        if (__any_sync(0xffffffffu, m_new != m)) {
            const float alpha = exp2f(m - m_use);
            l *= alpha;
#pragma unroll
            for (int n = 0; n < NT; n++) o[n][0] *= alpha, o[n][1] *= alpha;
            m = m_new;
        }
        float pr[2][2];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                pr[h][i] = exp2f(s[h][i] - m_use);
                l += pr[h][i];
            }
        const uint32_t a0 = kv::p_pair(pr[0][0], pr[0][1]), a2 = kv::p_pair(pr[1][0], pr[1][1]);

        uint32_t vr[4][VW];
#pragma unroll
        for (int r4 = 0; r4 < 4; r4++)
#pragma unroll
            for (int i = 0; i < PR / 8; i++) {
                const int r = v_key(r4);
                *(uint4 *)&vr[r4][4 * i] = vd[r * PR + mma_v_piece(r, 8 * i + g)];
            }
        if (key0 + MMA_TILE > k_end) /* the split's last tile: 0 * NaN is NaN */
#pragma unroll
            for (int r4 = 0; r4 < 4; r4++)
                if (key0 + v_key(r4) >= k_end)
#pragma unroll
                    for (int w = 0; w < VW; w++) vr[r4][w] = 0;
#pragma unroll
        for (int n = 0; n < NT; n++) {
            uint32_t b0, b1;
            if constexpr (EL == 1) {
                /* byte n % 4 of word n / 4 of the two keys of each register */
                const int w = n / 4, sel = (n & 2) ? 0x7362 : 0x5140, sh = (n & 1) * 16;
                b0 = mma_kv<fp8>::pair(__byte_perm(vr[0][w], vr[1][w], sel) >> sh);
                b1 = mma_kv<fp8>::pair(__byte_perm(vr[2][w], vr[3][w], sel) >> sh);
            } else {
                const int w = n / 2, sel = (n & 1) ? 0x7632 : 0x5410;
                b0 = __byte_perm(vr[0][w], vr[1][w], sel);
                b1 = __byte_perm(vr[2][w], vr[3][w], sel);
            }
            mma_rows0<KV>(o[n][0], o[n][1], a0, a2, b0, b1);
        }
        __syncwarp(); /* every lane has read the stage before it is refilled */
    }

    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* The rings are free once every warp is past its loop (the groups
     * issued past a warp's last tile were empty). */
    __syncthreads();
    float(*sh_o)[G][HD] = (float(*)[G][HD])mma_smem;
    float(*sh_m)[G] = (float(*)[G])(sh_o + DEC_WARPS);
    float(*sh_l)[G] = sh_m + DEC_WARPS;
    if (g < nh) {
        /* o[n][i]: column 2t + i of n-tile n, element n of V lane 2t + i's
         * slice, whose pieces are 8k + (2t + i) */
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 2; i++)
                sh_o[warp][g][((n / KP) * 8 + 2 * t + i) * KP + n % KP] = o[n][i];
        if (t == 0) {
            sh_m[warp][g] = m;
            sh_l[warp][g] = l;
        }
    }
    dec_finish<DEC_WARPS, G, HD, false>(p, sh_o, sh_m, sh_l, nullptr, nullptr, split, seq, tok,
                                        h0, nh);
}

template <typename KV, int STAGES>
static dec_mma dec_mma_of(int g)
{
    dec_kernel k;
    switch (g) {
    case 1: k = kernel_decode_mma<1, KV, STAGES>; break;
    case 2: k = kernel_decode_mma<2, KV, STAGES>; break;
    case 4: k = kernel_decode_mma<4, KV, STAGES>; break;
    default: k = kernel_decode_mma<8, KV, STAGES>; break;
    }
    const size_t smem = mma_smem_bytes<KV, STAGES>();
    /* past 48 KiB a kernel must ask for its shared memory, once */
    static bool asked[9];
    if (!asked[g]) {
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess) {
            cudaGetLastError();
            return dec_mma{};
        }
        asked[g] = true;
    }
    return dec_mma{k, smem};
}

/* Rings of 4 tiles (e4m3: 64 KiB a block, 3 blocks an SM) and 3 (bf16: 96
 * KiB, 2 blocks), measured on an H100 against a ring one tile shorter with
 * one more block an SM (e4m3 at 256 sequences of 1,000 keys 195.5 against
 * 208.5 us; bf16 at 128 sequences equal, the bench +0.1%). */
dec_mma dec_mma_kernel(int hd, int g, bool kv_fp8, int block_shift)
{
    if (block_shift < 4 || hd != MMA_HD) return dec_mma{};
    return kv_fp8 ? dec_mma_of<fp8, 4>(g) : dec_mma_of<bf16, 3>(g);
}
