/* gemm_decode.cu — the linear ops of a decode batch (2 to DGEMM_MAX_N tokens)
 * on tensor cores, launched like every other kernel of the backend: under
 * programmatic dependence, its first weight loads issued before it waits
 * for the kernel before it.
 *
 * A decode step's projections are small GEMMs (0.6B at ~131 tokens: 0.5-1.6
 * GFLOP, 4-13 MB of weights), so a library GEMM spends most of its ~6-9 us
 * on its launch, its ramp and its tail, none of which overlaps a neighbour.
 * Here a block owns DG_ROWS weight rows and DG_TOKENS tokens; its warps are
 * DG_GROUPS token groups of 16 (two 8-token MMA tiles each) times DG_KSPLIT
 * parts of k, whose sums meet in shared memory in a fixed order, so results
 * do not depend on timing.  The warps of a part share the part's weight
 * pieces through L1; each warp keeps DG_AHEAD chunks of 32 columns (its
 * weight and x pieces) in flight while it multiplies the oldest.
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
 * stream out (DG_ADD, as the RMSNorm kernel's residual add would round it).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

#define DG_ROWS 16     /* weight rows a block: one MMA tile's rows             */
#define DG_GROUPS 4    /* token groups of 16 a block                           */
#define DG_TOKENS (16 * DG_GROUPS)
#define DG_KSPLIT 2    /* parts of k a block, summed in shared memory          */
#define DG_WARPS (DG_GROUPS * DG_KSPLIT)
#define DG_CHUNK 32    /* columns a warp takes a step                          */
#define DG_AHEAD 4     /* chunks a warp keeps in flight                        */

/* d += a b for one m16n8k16 tile (a: 4 words of bf16 pairs, b: 2). */
static __device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* A 16-byte piece that other warps of the block read too (kept in L1). */
static __device__ __forceinline__ uint4 load_shared16(const void *p)
{
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* One chunk of a warp: rows g and g + 8 of the weight tile, and row g of
 * each of its two 8-token tiles of x (zeros past the batch). */
struct dg_chunk {
    uint4 w_lo, w_hi, x[2];
};

enum { DG_STORE, DG_ADD };

/* out[n, m] = x[n, k] @ w[m, k]^T (+ bias), or with DG_ADD out += that
 * product rounded; m % DG_ROWS == 0, k % (DG_CHUNK * DG_KSPLIT) == 0, rows
 * 16-byte aligned.  grid (m / DG_ROWS, ceil(n / DG_TOKENS)). */
template <int EPI>
__global__ void __launch_bounds__(DG_WARPS * 32, 2)
    kernel_gemm_decode(bf16 *out, const bf16 *x, const bf16 *w, const bf16 *bias, int n, int m,
                       int k)
{
    __shared__ float part[DG_KSPLIT - 1][DG_GROUPS][8][32]; /* the later parts' sums */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int group = warp % DG_GROUPS, kpart = warp / DG_GROUPS;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * DG_ROWS, tok0 = blockIdx.y * DG_TOKENS + 16 * group;
    const int chunks = k / (DG_CHUNK * DG_KSPLIT), c0 = kpart * chunks;
    /* this lane's pieces: weight rows g and g + 8, x rows of its two tiles */
    const bf16 *w_lo = w + (size_t)(row0 + g) * k + 8 * t, *w_hi = w_lo + (size_t)8 * k;
    const int tok_a = tok0 + g, tok_b = tok0 + 8 + g;
    const bf16 *x_a = x + (size_t)min(tok_a, n - 1) * k + 8 * t;
    const bf16 *x_b = x + (size_t)min(tok_b, n - 1) * k + 8 * t;
    const bool has_a = tok_a < n, has_b = tok_b < n;
    const uint4 zero = make_uint4(0, 0, 0, 0);

    dg_chunk ring[DG_AHEAD];
    auto load_w = [&](dg_chunk &c, int chunk) {
        const size_t col = (size_t)(c0 + chunk) * DG_CHUNK;
        c.w_lo = load_shared16(w_lo + col);
        c.w_hi = load_shared16(w_hi + col);
    };
    auto load_x = [&](dg_chunk &c, int chunk) {
        const size_t col = (size_t)(c0 + chunk) * DG_CHUNK;
        c.x[0] = has_a ? load_shared16(x_a + col) : zero;
        c.x[1] = has_b ? load_shared16(x_b + col) : zero;
    };
    /* the weights are constant: their first chunks load before the wait */
#pragma unroll
    for (int a = 0; a < DG_AHEAD; a++)
        if (a < chunks) load_w(ring[a], a);
    pdl_wait();
    pdl_release();
#pragma unroll
    for (int a = 0; a < DG_AHEAD; a++)
        if (a < chunks) load_x(ring[a], a);

    float acc[2][4] = {};
    for (int base = 0; base < chunks; base += DG_AHEAD) {
#pragma unroll
        for (int a = 0; a < DG_AHEAD; a++) {
            const int chunk = base + a;
            if (chunk >= chunks) break;
            const dg_chunk &c = ring[a];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                mma_bf16(acc[j], c.w_lo.x, c.w_hi.x, c.w_lo.y, c.w_hi.y, c.x[j].x, c.x[j].y);
                mma_bf16(acc[j], c.w_lo.z, c.w_hi.z, c.w_lo.w, c.w_hi.w, c.x[j].z, c.x[j].w);
            }
            /* the slot, once used, takes the chunk DG_AHEAD further on */
            if (chunk + DG_AHEAD < chunks) {
                load_w(ring[a], chunk + DG_AHEAD);
                load_x(ring[a], chunk + DG_AHEAD);
            }
        }
    }

    /* the parts of k meet: later parts leave their sums, part 0 adds them in order */
    if (kpart > 0) {
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) part[kpart - 1][group][4 * j + e][lane] = acc[j][e];
    }
    __syncthreads();
    if (kpart > 0) return;
#pragma unroll
    for (int p = 0; p < DG_KSPLIT - 1; p++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] += part[p][group][4 * j + e][lane];

    /* acc[j][e]: row g (e < 2) or g + 8, token 2 t + (e & 1) of tile j */
#pragma unroll
    for (int j = 0; j < 2; j++)
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

bool cuda_gemm_decode_fits(const void *x, const nl_weight *w, int32_t n)
{
    return n >= 2 && n <= CUDA_DGEMM_MAX_N && dgemm_enabled() && w->rows % DG_ROWS == 0 &&
           w->rows / DG_ROWS <= INT32_MAX && w->cols % (DG_CHUNK * DG_KSPLIT) == 0 &&
           w->cols <= INT32_MAX && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

nl_status cuda_gemm_decode(cuda_backend *be, void *out, bool add, const void *x,
                           const nl_weight *w, const nl_weight *bias, int32_t n)
{
    const dim3 grid((unsigned)(w->rows / DG_ROWS), (unsigned)((n + DG_TOKENS - 1) / DG_TOKENS));
    const bf16 *b = bias ? bias->data : NULL;
    if (add)
        NL_CUDA_CHECK(cuda_launch(be, kernel_gemm_decode<DG_ADD>, grid, DG_WARPS * 32, 0,
                                  (bf16 *)out, (const bf16 *)x, w->data, b, n, (int)w->rows,
                                  (int)w->cols));
    else
        NL_CUDA_CHECK(cuda_launch(be, kernel_gemm_decode<DG_STORE>, grid, DG_WARPS * 32, 0,
                                  (bf16 *)out, (const bf16 *)x, w->data, b, n, (int)w->rows,
                                  (int)w->cols));
    return NL_OK;
}
