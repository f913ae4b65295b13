/* gemm_decode.cu — the linear ops of a decode batch (2 to CUDA_DGEMM_MAX_N
 * tokens) on tensor cores, launched like every other kernel of the backend:
 * under programmatic dependence, its first weight loads issued before it
 * waits for the kernel before it.
 *
 * A decode step's projections are small GEMMs (0.6B at ~131 tokens: 0.5-1.6
 * GFLOP, 4-13 MB of weights), so a library GEMM spends most of its ~7-10 us
 * on its launch, its ramp and its tail, none of which overlaps a neighbour.
 * What such a GEMM needs is every weight read from HBM once with enough
 * bytes in flight, and x (small, hot in L2) read as few times as possible.
 *
 * A block owns BM weight rows, all n tokens and one part of k: each weight
 * is read by one block, and x once per BM rows.  The parts of k of a row
 * block form a thread-block cluster; each part leaves its fp32 sums in its
 * shared memory and the cluster's blocks then add them in a fixed order
 * (part 0 first), each block finishing its share of the tokens, so results
 * do not depend on timing.  The host picks BM and the parts so that the
 * device gets about a block per SM.
 *
 * Weights and x stream through DG_STAGES shared-memory stages of DG_CHUNK
 * columns (cp.async: the loads of DG_STAGES - 1 steps are in flight while
 * one is multiplied).  Warps are WR row tiles (16 rows) x WC token groups;
 * a warp multiplies its 16 rows by n-tiles wc, wc + WC, ... (8 tokens
 * each) with mma.sync m16n8k16 (bf16 in, fp32 sums).  A lane reads 16
 * bytes of a weight row and 16 of an x row at columns [8 t, 8 t + 8) of a
 * chunk (t = lane % 4) and feeds them as the fragments of columns {2t,
 * 2t + 1, 2t + 8, 2t + 9} of two k16 steps: A and B read the same columns
 * in the same places, so the sum over k is the same sum in another order;
 * a warp's 16-byte reads of a stage cover 512 contiguous bytes, free of
 * bank conflicts.
 *
 * Epilogues as the one-token GEMV's: the bias added in fp32 and the sum
 * rounded once (DG_STORE), or that rounded product added into the residual
 * stream out (DG_ADD, as the residual add kernel would round it).
 */
#include "kernels/cuda/cuda_common.cuh"

#define DG_THREADS 512 /* 16 warps: WR row tiles x WC token groups          */
#define DG_CHUNK 32    /* columns a stage holds                             */
#define DG_STAGES 4    /* shared-memory stages, all but one loading         */
#define DG_MAX_PARTS 8 /* parts of k, a cluster (the portable cluster size) */

/* d += a b for one m16n8k16 tile (a: 4 words of bf16 pairs, b: 2). */
static __device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The cluster's barrier (release / acquire; Hopper and later). */
static __device__ __forceinline__ void dg_cluster_sync(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __trap();
#endif
}

enum { DG_STORE, DG_ADD };

/* Tokens padded to whole n-tiles, and the fp32 sums' row stride (4 floats
 * past BM: a warp's stores of its tile land in distinct banks). */
static __host__ __device__ constexpr int dg_padded(int n) { return (n + 7) & ~7; }
static __host__ __device__ constexpr int dg_sum_stride(int bm) { return bm + 4; }

/* Dynamic shared memory: the stages, then (in the same bytes) the sums. */
static __host__ __device__ constexpr size_t dg_smem_bytes(int bm, int n)
{
    const size_t stages = (size_t)DG_STAGES * (size_t)(bm + dg_padded(n)) * DG_CHUNK * 2;
    const size_t sums = (size_t)dg_padded(n) * (size_t)dg_sum_stride(bm) * 4;
    return stages > sums ? stages : sums;
}

/* out[n, m] = x[n, k] @ w[m, k]^T (+ bias), or with DG_ADD out += that
 * product rounded; m % BM == 0, k % (DG_CHUNK parts) == 0, rows 16-byte
 * aligned.  grid (m / BM parts), clusters of `parts` blocks along x. */
template <int EPI, int BM>
__global__ void __launch_bounds__(DG_THREADS, 1)
    kernel_gemm_decode(bf16 *out, const bf16 *x, const bf16 *w, const bf16 *bias, int n, int m,
                       int k, int parts)
{
    constexpr int WR = BM / 16, WC = DG_THREADS / 32 / WR, TPW = CUDA_DGEMM_MAX_N / 8 / WC;
    static_assert(WR * WC * 32 == DG_THREADS && TPW * WC * 8 == CUDA_DGEMM_MAX_N, "warp tiling");
    extern __shared__ __align__(16) unsigned char dg_smem[];
    bf16 *const stages = reinterpret_cast<bf16 *>(dg_smem);
    const int np = dg_padded(n), stage_elems = (BM + np) * DG_CHUNK;
    const int part = (int)blockIdx.x % parts, row0 = (int)blockIdx.x / parts * BM;
    const int steps = k / (DG_CHUNK * parts), col0 = part * steps * DG_CHUNK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wr = warp % WR, wc = warp / WR, g = lane >> 2, t = lane & 3;

    /* a stage: BM weight rows then np x rows, DG_CHUNK columns each, in
     * 16-byte pieces; x rows past n repeat row n - 1 (their sums are unused) */
    auto load_w = [&](int step) {
        bf16 *s = stages + (step % DG_STAGES) * stage_elems;
        for (int p = tid; p < BM * 4; p += DG_THREADS)
            cp_async16(s + p * 8, w + (size_t)(row0 + p / 4) * k + col0 + step * DG_CHUNK + (p % 4) * 8);
    };
    auto load_x = [&](int step) {
        bf16 *s = stages + (step % DG_STAGES) * stage_elems + BM * DG_CHUNK;
        for (int p = tid; p < np * 4; p += DG_THREADS)
            cp_async16(s + p * 8,
                          x + (size_t)min(p / 4, n - 1) * k + col0 + step * DG_CHUNK + (p % 4) * 8);
    };

    /* the weights are constant: the first stages' load before the wait */
    for (int s = 0; s < DG_STAGES - 1; s++)
        if (s < steps) load_w(s);
    pdl_wait();
    pdl_release();
    for (int s = 0; s < DG_STAGES - 1; s++) {
        if (s < steps) load_x(s);
        cp_async_commit();
    }

    float acc[TPW][4] = {};
    for (int c = 0; c < steps; c++) {
        cp_async_wait<DG_STAGES - 2>(); /* this thread's pieces of step c */
        __syncthreads();                    /* everyone's; step c - 1's slot is free */
        if (c + DG_STAGES - 1 < steps) {
            load_w(c + DG_STAGES - 1);
            load_x(c + DG_STAGES - 1);
        }
        cp_async_commit();
        const bf16 *sw = stages + (c % DG_STAGES) * stage_elems, *sx = sw + BM * DG_CHUNK;
        const uint4 lo = *reinterpret_cast<const uint4 *>(sw + (16 * wr + g) * DG_CHUNK + 8 * t);
        const uint4 hi = *reinterpret_cast<const uint4 *>(sw + (16 * wr + g + 8) * DG_CHUNK + 8 * t);
#pragma unroll
        for (int i = 0; i < TPW; i++) {
            const int j = wc + WC * i;
            if (8 * j >= n) break;
            const uint4 b = *reinterpret_cast<const uint4 *>(sx + (8 * j + g) * DG_CHUNK + 8 * t);
            mma_bf16(acc[i], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            mma_bf16(acc[i], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
        }
    }

    /* this part's sums, [token][row], over the stages' bytes */
    cp_async_wait<0>();
    __syncthreads();
    float *const sums = reinterpret_cast<float *>(dg_smem);
    constexpr int SS = dg_sum_stride(BM);
#pragma unroll
    for (int i = 0; i < TPW; i++) {
        const int j = wc + WC * i;
        if (8 * j >= n) break;
        /* acc[i][e]: row g (e < 2) or g + 8, token 2 t + (e & 1) of n-tile j */
#pragma unroll
        for (int e = 0; e < 4; e++)
            sums[(8 * j + 2 * t + (e & 1)) * SS + 16 * wr + g + (e >> 1) * 8] = acc[i][e];
    }
    if (parts > 1)
        dg_cluster_sync();
    else
        __syncthreads();

    /* block `part` finishes tokens part, part + parts, ..., four rows a
     * thread: each sum over the parts in order 0, 1, ..., every part's
     * four loaded before any is added */
    const int mine = (n - part + parts - 1) / parts;
    for (int idx = tid; idx < mine * (BM / 4); idx += DG_THREADS) {
        const int tok = part + parts * (idx / (BM / 4)), r = 4 * (idx % (BM / 4));
        const float *at = sums + tok * SS + r;
        float4 v[DG_MAX_PARTS];
#pragma unroll
        for (int q = 0; q < DG_MAX_PARTS; q++)
            if (q < parts) v[q] = *reinterpret_cast<const float4 *>(parts > 1 ? cluster_at(at, q) : at);
        float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int q = 0; q < DG_MAX_PARTS; q++)
            if (q < parts) {
                y[0] += v[q].x;
                y[1] += v[q].y;
                y[2] += v[q].z;
                y[3] += v[q].w;
            }
        bf16 *o = out + (size_t)tok * m + row0 + r;
        uint2 prev = make_uint2(0, 0);
        if constexpr (EPI == DG_ADD) prev = *reinterpret_cast<const uint2 *>(o);
        const bf16 *had = reinterpret_cast<const bf16 *>(&prev);
        uint2 res;
        bf16 *put = reinterpret_cast<bf16 *>(&res);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float z = y[e] + (bias ? __bfloat162float(bias[row0 + r + e]) : 0.0f);
            if constexpr (EPI == DG_ADD) z = round_bf16(z) + __bfloat162float(had[e]);
            put[e] = __float2bfloat16(z);
        }
        *reinterpret_cast<uint2 *>(o) = res;
    }
    /* no block leaves while another may still read its sums */
    if (parts > 1) dg_cluster_sync();
}

bool cuda_gemm_decode_fits(const cuda_backend *be, const void *x, const nl_weight *w, int32_t n)
{
    return be->decode_gemm && n >= 2 && n <= CUDA_DGEMM_MAX_N && w->rows <= INT32_MAX &&
           w->cols <= INT32_MAX && w->rows % 64 == 0 && w->cols % DG_CHUNK == 0 &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* The most parts of k (a power of two up to DG_MAX_PARTS that divides k's
 * chunks) that keep the blocks within one per SM; 1 where the device runs
 * no clusters. */
static int dgemm_parts(const cuda_backend *be, const nl_weight *w, int bm)
{
    const long long row_blocks = w->rows / bm;
    int parts = 1;
    while (be->clusters && parts < DG_MAX_PARTS && row_blocks * parts * 2 <= be->num_sms &&
           w->cols % ((long long)DG_CHUNK * parts * 2) == 0)
        parts *= 2;
    return parts;
}

template <int EPI, int BM>
static nl_status gemm_decode_launch(cuda_backend *be, void *out, const void *x, const nl_weight *w,
                                    const nl_weight *bias, int32_t n, int parts)
{
    /* room for the widest batch (any device this process drives) */
    NL_CUDA_CHECK(cudaFuncSetAttribute(kernel_gemm_decode<EPI, BM>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)dg_smem_bytes(BM, CUDA_DGEMM_MAX_N)));
    const dim3 grid((unsigned)(w->rows / BM * parts));
    NL_CUDA_CHECK(cuda_launch_clusters(be, kernel_gemm_decode<EPI, BM>, grid, DG_THREADS,
                                       dg_smem_bytes(BM, n), (unsigned)parts, (bf16 *)out,
                                       (const bf16 *)x, w->data, bias ? bias->data : NULL, n,
                                       (int)w->rows, (int)w->cols, parts));
    return NL_OK;
}

/* 128 rows a block (x read once per 128 rows) unless 64 give the device
 * more blocks (m = 1,024 at 0.6B: 8 row blocks of 128 against 16 of 64). */
nl_status cuda_gemm_decode(cuda_backend *be, void *out, bool add, const void *x,
                           const nl_weight *w, const nl_weight *bias, int32_t n)
{
    const int parts64 = dgemm_parts(be, w, 64);
    const bool tall = w->rows % 128 == 0 &&
                      w->rows / 128 * dgemm_parts(be, w, 128) >= w->rows / 64 * parts64;
    if (tall) {
        const int parts = dgemm_parts(be, w, 128);
        return add ? gemm_decode_launch<DG_ADD, 128>(be, out, x, w, bias, n, parts)
                   : gemm_decode_launch<DG_STORE, 128>(be, out, x, w, bias, n, parts);
    }
    return add ? gemm_decode_launch<DG_ADD, 64>(be, out, x, w, bias, n, parts64)
               : gemm_decode_launch<DG_STORE, 64>(be, out, x, w, bias, n, parts64);
}
