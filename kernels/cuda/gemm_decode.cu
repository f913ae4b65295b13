/* gemm_decode.cu — the linear ops of a decode batch (2 to CUDA_DGEMM_MAX_N
 * tokens) on tensor cores, launched like every other kernel of the backend:
 * under programmatic dependence, its first weight loads issued before it
 * waits for the kernel before it.
 *
 * A decode step's projections are small GEMMs (0.6B at ~131 tokens: 0.5-1.6
 * GFLOP, 4-13 MB of weights), so a library GEMM spends most of its ~6-9 us
 * on its launch, its ramp and its tail, none of which overlaps a neighbour.
 * What such a GEMM needs is the weights streaming from HBM with enough bytes
 * in flight, each weight read once, and x (small, hot in L2) read as few
 * times as the tiles allow.
 *
 * A warp computes 16 weight rows x DG_TOKENS tokens (DG_TOKENS / 8 MMA tiles)
 * over one part of k.  A block is RG row groups x KP parts of k (RG KP =
 * DG_WARPS): the row groups of a part load the same x pieces, which L1
 * serves after the first; the parts' sums meet in shared memory and are
 * added in a fixed order, so results do not depend on timing.  The host
 * picks the most row groups that still give the device a block per SM
 * (more rows a block, fewer reads of x from L2: at 0.6B's qkv and 131
 * tokens, 10 MB with 128 rows a block against 8.4 MB of weights), the rest
 * of the warps splitting k.
 * Each warp keeps DG_AHEAD chunks of 32 columns of its weight rows in
 * flight and the next chunk of x.
 *
 * The MMA is mma.sync m16n8k16 (bf16 in, fp32 sums).  A lane loads 16 bytes
 * of a weight row and 16 of an x row at columns [8 t, 8 t + 8) of a chunk
 * (t = lane % 4) and feeds them as the fragments of columns {2t, 2t + 1,
 * 2t + 8, 2t + 9} of two k16 steps: A and B read the same columns in the
 * same places, so the sum over k is the same sum, in another order, and
 * every load is a 16-byte vector with no shuffle or shared-memory staging.
 *
 * Epilogues as the one-token GEMV's: the bias added in fp32 and the sum
 * rounded once (DG_STORE), or that rounded product added into the residual
 * stream out (DG_ADD, as the residual add kernel would round it).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

#define DG_WARPS 8   /* row groups x parts of k, a block                     */
#define DG_TOKENS 32 /* tokens a block (and a warp): DG_TILES MMA tiles      */
#define DG_TILES (DG_TOKENS / 8)
#define DG_CHUNK 32  /* columns a warp takes a step                          */
#define DG_AHEAD 4   /* chunks of weights a warp keeps in flight             */

/* d += a b for one m16n8k16 tile (a: 4 words of bf16 pairs, b: 2). */
static __device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* A chunk's weight pieces of a lane: rows g and g + 8 of its warp's 16. */
struct dg_weights {
    uint4 lo, hi;
};

enum { DG_STORE, DG_ADD };

/* out[n, m] = x[n, k] @ w[m, k]^T (+ bias), or with DG_ADD out += that
 * product rounded; m % (16 RG) == 0, k % (DG_CHUNK KP) == 0, rows 16-byte
 * aligned.  grid (m / (16 RG), ceil(n / DG_TOKENS)). */
template <int EPI, int RG>
__global__ void __launch_bounds__(DG_WARPS * 32, 2)
    kernel_gemm_decode(bf16 *out, const bf16 *x, const bf16 *w, const bf16 *bias, int n, int m,
                       int k)
{
    constexpr int KP = DG_WARPS / RG;
    __shared__ float part[KP > 1 ? KP - 1 : 1][RG][4 * DG_TILES][32]; /* later parts' sums */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp % RG, kpart = warp / RG;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = (blockIdx.x * RG + group) * 16, tok0 = blockIdx.y * DG_TOKENS;
    const int chunks = k / (DG_CHUNK * KP), c0 = kpart * chunks;
    /* this lane's pieces: weight rows g and g + 8, x row g of each tile */
    const bf16 *w_lo = w + (size_t)(row0 + g) * k + 8 * t + (size_t)c0 * DG_CHUNK;
    const bf16 *w_hi = w_lo + (size_t)8 * k;
    const bf16 *x_row[DG_TILES];
    bool has[DG_TILES];
#pragma unroll
    for (int j = 0; j < DG_TILES; j++) {
        const int tok = tok0 + 8 * j + g;
        has[j] = tok < n;
        x_row[j] = x + (size_t)min(tok, n - 1) * k + 8 * t + (size_t)c0 * DG_CHUNK;
    }
    auto load_w = [&](dg_weights &c, int chunk) {
        c.lo = load_stream16(w_lo + (size_t)chunk * DG_CHUNK);
        c.hi = load_stream16(w_hi + (size_t)chunk * DG_CHUNK);
    };
    auto load_x = [&](uint4 (&xs)[DG_TILES], int chunk) {
#pragma unroll
        for (int j = 0; j < DG_TILES; j++)
            xs[j] = has[j] ? __ldg(reinterpret_cast<const uint4 *>(x_row[j] + (size_t)chunk * DG_CHUNK))
                           : make_uint4(0, 0, 0, 0);
    };

    /* the weights are constant: their first chunks load before the wait */
    dg_weights ring[DG_AHEAD];
#pragma unroll
    for (int a = 0; a < DG_AHEAD; a++)
        if (a < chunks) load_w(ring[a], a);
    pdl_wait();
    pdl_release();
    uint4 xs[DG_TILES];
    load_x(xs, 0);

    float acc[DG_TILES][4] = {};
    for (int base = 0; base < chunks; base += DG_AHEAD) {
#pragma unroll
        for (int a = 0; a < DG_AHEAD; a++) {
            const int chunk = base + a;
            if (chunk >= chunks) break;
            uint4 cur[DG_TILES];
#pragma unroll
            for (int j = 0; j < DG_TILES; j++) cur[j] = xs[j];
            if (chunk + 1 < chunks) load_x(xs, chunk + 1);
            const dg_weights &c = ring[a];
#pragma unroll
            for (int j = 0; j < DG_TILES; j++) {
                mma_bf16(acc[j], c.lo.x, c.hi.x, c.lo.y, c.hi.y, cur[j].x, cur[j].y);
                mma_bf16(acc[j], c.lo.z, c.hi.z, c.lo.w, c.hi.w, cur[j].z, cur[j].w);
            }
            /* the slot, once used, takes the chunk DG_AHEAD further on */
            if (chunk + DG_AHEAD < chunks) load_w(ring[a], chunk + DG_AHEAD);
        }
    }

    /* the parts of k meet: later parts leave their sums, part 0 adds them in order */
    if constexpr (KP > 1) {
        if (kpart > 0) {
#pragma unroll
            for (int j = 0; j < DG_TILES; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) part[kpart - 1][group][4 * j + e][lane] = acc[j][e];
        }
        __syncthreads();
        if (kpart > 0) return;
#pragma unroll
        for (int p = 0; p < KP - 1; p++)
#pragma unroll
            for (int j = 0; j < DG_TILES; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[j][e] += part[p][group][4 * j + e][lane];
    }

    /* acc[j][e]: row g (e < 2) or g + 8, token 2 t + (e & 1) of tile j */
#pragma unroll
    for (int j = 0; j < DG_TILES; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = row0 + g + (e >> 1) * 8, tok = tok0 + 8 * j + 2 * t + (e & 1);
            if (tok >= n) continue;
            float y = acc[j][e] + (bias ? __bfloat162float(bias[row]) : 0.0f);
            bf16 *o = out + (size_t)tok * m + row;
            if constexpr (EPI == DG_ADD) y = round_bf16(y) + __bfloat162float(*o);
            *o = __float2bfloat16(y);
        }
}

/* NANOLLM_DGEMM=0 sends decode batches to cuBLASLt instead (read once). */
static bool dgemm_enabled(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *v = getenv("NANOLLM_DGEMM");
        cached = !(v && strcmp(v, "0") == 0);
    }
    return cached != 0;
}

/* Whether row groups rg (of 16 rows) and DG_WARPS / rg parts of k divide w. */
static bool dgemm_divides(const nl_weight *w, int rg)
{
    return w->rows % (16 * rg) == 0 && w->cols % (DG_CHUNK * (DG_WARPS / rg)) == 0;
}

bool cuda_gemm_decode_fits(const void *x, const nl_weight *w, int32_t n)
{
    return n >= 2 && n <= CUDA_DGEMM_MAX_N && dgemm_enabled() && w->rows <= INT32_MAX &&
           w->cols <= INT32_MAX &&
           (dgemm_divides(w, 8) || dgemm_divides(w, 4) || dgemm_divides(w, 2)) &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

template <int RG>
static nl_status gemm_decode_launch(cuda_backend *be, void *out, bool add, const void *x,
                                    const nl_weight *w, const nl_weight *bias, int32_t n)
{
    const dim3 grid((unsigned)(w->rows / (16 * RG)), (unsigned)((n + DG_TOKENS - 1) / DG_TOKENS));
    const bf16 *b = bias ? bias->data : NULL;
    if (add)
        NL_CUDA_CHECK(cuda_launch(be, kernel_gemm_decode<DG_ADD, RG>, grid, DG_WARPS * 32, 0,
                                  (bf16 *)out, (const bf16 *)x, w->data, b, n, (int)w->rows,
                                  (int)w->cols));
    else
        NL_CUDA_CHECK(cuda_launch(be, kernel_gemm_decode<DG_STORE, RG>, grid, DG_WARPS * 32, 0,
                                  (bf16 *)out, (const bf16 *)x, w->data, b, n, (int)w->rows,
                                  (int)w->cols));
    return NL_OK;
}

/* The most row groups (8: 128 rows a block, x read once per 128 rows) that
 * still give the device a block per SM, the rest of the warps splitting k;
 * with none that does, the fewest (the most blocks). */
nl_status cuda_gemm_decode(cuda_backend *be, void *out, bool add, const void *x,
                           const nl_weight *w, const nl_weight *bias, int32_t n)
{
    const long long token_tiles = (n + DG_TOKENS - 1) / DG_TOKENS;
    auto fills = [&](int rg) {
        return dgemm_divides(w, rg) && w->rows / (16 * rg) * token_tiles >= be->num_sms;
    };
    if (fills(8)) return gemm_decode_launch<8>(be, out, add, x, w, bias, n);
    if (fills(4)) return gemm_decode_launch<4>(be, out, add, x, w, bias, n);
    if (dgemm_divides(w, 2)) return gemm_decode_launch<2>(be, out, add, x, w, bias, n);
    if (dgemm_divides(w, 4)) return gemm_decode_launch<4>(be, out, add, x, w, bias, n);
    return gemm_decode_launch<8>(be, out, add, x, w, bias, n);
}
