/* gemv.cuh — the one-token GEMV's work as a device function, shared by the
 * GEMV kernel (gemv.cu, one launch a linear op) and the whole-layers decode
 * kernel (decode_layers.cu, every projection of every layer in one launch).
 * gemv.cu's comment explains the scheme; this file holds its parts:
 * the 16-byte loads of a row, the RMSNorm prologue, a row's addends and
 * finish, and gemv_rows, the loop over a grid's share of the rows.
 *
 * Two things differ between the callers, and are parameters here:
 *   - what the rows wait for once their first weights are loaded (WAIT):
 *     the earlier kernel (pdl_wait), or a grid barrier inside one kernel;
 *   - COHERENT: inside one kernel, x and the residual were written by other
 *     blocks since this SM may last have cached them, so they are read
 *     through L2 (ld.global.cg); across launches plain loads are safe.
 */
#ifndef NL_KERNELS_CUDA_GEMV_CUH
#define NL_KERNELS_CUDA_GEMV_CUH

#include "kernels/cuda/cuda_common.cuh"

#define GEMV_WARPS 16 /* a block normalises x once for 16 warps (4: 3-10% slower) */
#define GEMV_UNROLL 4 /* pieces in flight per lane (8 was slower: fewer warps fit) */

static __device__ __forceinline__ float gemv_dot8(uint4 a, uint4 b)
{
    const __nv_bfloat162 *ha = (const __nv_bfloat162 *)&a, *hb = (const __nv_bfloat162 *)&b;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 fa = __bfloat1622float2(ha[i]), fb = __bfloat1622float2(hb[i]);
        s = fmaf(fa.x, fb.x, fmaf(fa.y, fb.y, s));
    }
    return s;
}

static __device__ __forceinline__ void gemv_store(bf16 *p, float v) { *p = __float2bfloat16(v); }
static __device__ __forceinline__ void gemv_store(float *p, float v) { *p = v; }

/* A piece of activations another block may have written inside this
 * kernel (COHERENT: from L2), or one written before it started. */
template <bool COHERENT>
static __device__ __forceinline__ uint4 gemv_act16(const uint4 *p)
{
    if constexpr (COHERENT) return __ldcg(p);
    else return *p;
}

template <bool COHERENT, typename OUT>
static __device__ __forceinline__ float gemv_act1(const OUT *p)
{
    if constexpr (COHERENT) return (float)__ldcg(p);
    else return (float)*p;
}

/* Loads a lane's U pieces of a row from piece `base` on (zeros past the
 * row's end). */
template <int U>
static __device__ __forceinline__ void gemv_load_pieces(uint4 *wv, const uint4 *wr, int base,
                                                        int kv)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int i = base + u * 32;
        wv[u] = i < kv ? load_stream16(wr + i) : make_uint4(0, 0, 0, 0);
    }
}

/* Writes rmsnorm(x) * norm_w, as bf16, into xs: the block's copy of the
 * normalised input.  w0: the thread's first piece of norm_w, loaded before
 * the wait for x (the weights are constant). */
template <bool COHERENT>
static __device__ void gemv_norm_prologue(uint4 *xs, const uint4 *x, const uint4 *norm_w, uint4 w0,
                                          int k, float eps)
{
    __shared__ float red[GEMV_WARPS];
    const int kv = k / 8;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < kv; i += blockDim.x) {
        float f[8];
        bf16x8_to_float(gemv_act16<COHERENT>(x + i), f);
#pragma unroll
        for (int j = 0; j < 8; j++) ss += f[j] * f[j];
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int w = 0; w < GEMV_WARPS; w++) ss += red[w];
    const float inv = rsqrtf(ss / k + eps);
    for (int i = threadIdx.x; i < kv; i += blockDim.x) {
        float f[8], g[8];
        bf16x8_to_float(gemv_act16<COHERENT>(x + i), f);
        bf16x8_to_float(i == (int)threadIdx.x ? w0 : norm_w[i], g);
        uint4 o;
        __nv_bfloat162 *h = (__nv_bfloat162 *)&o;
#pragma unroll
        for (int j = 0; j < 4; j++)
            h[j] = __floats2bfloat162_rn(rms_weighted1(f[2 * j], inv, g[2 * j]),
                                         rms_weighted1(f[2 * j + 1], inv, g[2 * j + 1]));
        xs[i] = o;
    }
    __syncthreads();
}

/* What a row's finish adds to its sums besides them: the bias of each of
 * its weight rows (0 without one) and, with GEMV_ADD, its residual element.
 * The finishing lane loads them when the row starts, so that the finish
 * waits for no load: the bias (constant) even before the wait, the
 * residual (written by earlier work) after it. */
template <int R> struct gemv_addends {
    float bias[R];
    float residual;
};

template <typename OUT, int EPI, int R, bool COHERENT>
static __device__ __forceinline__ gemv_addends<R> gemv_addends_of(const OUT *out, const bf16 *bias,
                                                                  int m, int row, bool residual)
{
    gemv_addends<R> a;
#pragma unroll
    for (int r = 0; r < R; r++) a.bias[r] = bias ? __bfloat162float(bias[(size_t)r * m + row]) : 0.0f;
    a.residual = 0.0f;
    if constexpr (EPI == GEMV_ADD)
        if (residual) a.residual = gemv_act1<COHERENT>(out + row);
    return a;
}

/* Writes one output row from its warp-reduced dot products (lane 0). */
template <typename OUT, int EPI, int R>
static __device__ __forceinline__ void gemv_finish(OUT *out, int row, const float *acc,
                                                   const gemv_addends<R> &a)
{
    const float y = acc[0] + a.bias[0];
    if constexpr (EPI == GEMV_SILU_MUL) {
        const float u = round_bf16(acc[1] + a.bias[1]);
        gemv_store(out + row, silu_mul1(round_bf16(y), u));
    } else if constexpr (EPI == GEMV_ADD) {
        gemv_store(out + row, round_bf16(y) + a.residual);
    } else {
        gemv_store(out + row, y);
    }
}

/* out[m] = w[m, k] @ x[k] (+ bias[m]), or its fused forms (gemv.cu's
 * comment), over this grid's share of the rows; k % 8 == 0, rows 16-byte
 * aligned.  With NORM, xs is the block's k * 2 bytes of shared memory for
 * the normalised x; with STAGE (and no NORM) the block first copies x
 * there as it is, so that its rows read x from shared memory rather than
 * from L2 row after row (COHERENT reads bypass L1).  wait() runs once
 * each warp's first weights are in flight and before anything written by
 * earlier work is read.  U: pieces a lane keeps in flight for each weight
 * row (R rows an output), fewer where registers are scarce.
 *
 * The grid is at most the blocks that fit on the device at once and the
 * warps stride over the rows, loading the next row's first pieces before
 * they reduce the current one, so a warp's stream of weight loads never
 * drains between rows and no block waits for a second wave.  With ks > 1
 * each row is split into ks parts of its columns, one warp each (the ks
 * warps of a block's row slot), whose sums meet in shared memory: a matrix
 * of fewer rows than the device has warps (0.6B's o and down projections:
 * 1,024 rows against ~4,200 warps) then keeps every warp streaming, and a
 * row count just past a multiple of the warps (8B's qkv: 6,144 rows, 1.45
 * a warp) ends in a shorter last round.  A warp's rounds are counted from
 * its part's start, the same for every lane, so the warp moves to its next
 * row together whatever k is.  KS > 0 fixes ks at compile time; KS == 0
 * takes ks_run (1, 2 or 4). */
template <typename OUT, int EPI, bool NORM, int KS, bool COHERENT, int U = GEMV_UNROLL,
          bool STAGE = false, typename WAIT>
static __device__ __forceinline__ void gemv_rows(OUT *out, const bf16 *x, const bf16 *w,
                                                 const bf16 *bias, int m, int k,
                                                 const bf16 *norm_w, float eps, int ks_run,
                                                 uint4 *xs, WAIT wait)
{
    constexpr int R = EPI == GEMV_SILU_MUL ? 2 : 1; /* weight rows per output */
    constexpr int ROUND = 32 * U;                   /* pieces a warp loads at once */
    const int ks = KS > 0 ? KS : ks_run;
    const int slots = GEMV_WARPS / ks;              /* rows a block works on at once */
    __shared__ float parts[2][GEMV_WARPS][R]; /* by row parity: see the exchange below */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = warp % ks, slot = warp / ks, stride = gridDim.x * slots;
    const int kv = k / 8, span = (kv + ks - 1) / ks; /* 16-byte pieces per row, per part */
    const int lo = min(kv, sub * span), hi = min(kv, lo + span);
    int row = blockIdx.x * slots + slot, round = lo, parity = 0;
    uint4 wv[R][U];
    auto load = [&](int r0, int b0) {
#pragma unroll
        for (int r = 0; r < R; r++)
            gemv_load_pieces<U>(wv[r], (const uint4 *)(w + ((size_t)r * m + r0) * k), b0, hi);
    };
    /* the lane that finishes the slot's rows holds their addends */
    const bool finisher = lane == 0 && sub == 0;
    gemv_addends<R> add{}, add_next{};
    if (row < m) load(row, round + lane);
    uint4 norm_w0 = make_uint4(0, 0, 0, 0);
    if (NORM && (int)threadIdx.x < kv) norm_w0 = ((const uint4 *)norm_w)[threadIdx.x];
    if (finisher && row < m) add = gemv_addends_of<OUT, EPI, R, COHERENT>(out, bias, m, row, false);
    wait();
    if constexpr (EPI == GEMV_ADD)
        if (finisher && row < m) add.residual = gemv_act1<COHERENT>(out + row);
    const uint4 *xr = (const uint4 *)x;
    if constexpr (NORM) {
        gemv_norm_prologue<COHERENT>(xs, xr, (const uint4 *)norm_w, norm_w0, k, eps);
        xr = xs;
    } else if constexpr (STAGE) {
        for (int i = threadIdx.x; i < kv; i += blockDim.x) xs[i] = gemv_act16<COHERENT>(xr + i);
        __syncthreads();
        xr = xs;
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    while (row < m) {
        int next_row = row, next_round = round + ROUND;
        if (next_round >= hi) next_row = row + stride, next_round = lo;
        if (finisher && next_row != row && next_row < m)
            add_next = gemv_addends_of<OUT, EPI, R, COHERENT>(out, bias, m, next_row, true);
        /* each piece, once used, makes room for the same piece of the next
         * round: U pieces stay in flight in U registers, not 2 U */
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = round + lane + u * 32;
            if (i < hi) {
                /* a normalised or staged copy is this block's own shared memory */
                const uint4 xv = NORM || STAGE ? xr[i] : gemv_act16<COHERENT>(xr + i);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += gemv_dot8(wv[r][u], xv);
            }
            const int j = next_round + lane + u * 32;
#pragma unroll
            for (int r = 0; r < R; r++)
                wv[r][u] = next_row < m && j < hi
                               ? load_stream16((const uint4 *)(w + ((size_t)r * m + next_row) * k) + j)
                               : make_uint4(0, 0, 0, 0);
        }
        if (next_row != row) {
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
            }
            if (ks > 1) {
                /* the slot's warps meet at a barrier of their own; the
                 * buffer alternates by row, so a warp a row ahead writes the
                 * other one while the first warp still reads this one, and
                 * it cannot get two rows ahead past the next barrier */
                if (lane == 0) {
#pragma unroll
                    for (int r = 0; r < R; r++) parts[parity][warp][r] = acc[r];
                }
                asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(ks * 32) : "memory");
                if (sub == 0 && lane == 0) {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        acc[r] = 0.0f;
                        for (int s = 0; s < ks; s++) acc[r] += parts[parity][warp + s][r];
                    }
                    gemv_finish<OUT, EPI, R>(out, row, acc, add);
                }
                parity ^= 1;
            } else if (lane == 0) {
                gemv_finish<OUT, EPI, R>(out, row, acc, add);
            }
            add = add_next;
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] = 0.0f;
        }
        row = next_row;
        round = next_round;
    }
}

/* Rows the busiest of `warps` warps works through when each of m rows is
 * split into ks parts. */
static inline double gemv_rounds(int m, long long warps, int ks)
{
    return (double)(((long long)m * ks + warps - 1) / warps) / ks;
}

/* The split of each row (1, 2 or 4 parts) that shortens the busiest of
 * `warps` warps' work, in parts of at least one piece a lane. */
static inline int gemv_split_of(int m, int k, long long warps)
{
    const int kv = k / 8;
    int ks = 1;
    for (int c = 2; c <= 4; c *= 2)
        if (kv >= 32 * c && gemv_rounds(m, warps, c) < gemv_rounds(m, warps, ks)) ks = c;
    return ks;
}

#endif
