/* gemv.cu — the linear ops of a single token: a GEMV kernel and the steps it
 * absorbs around it.
 *
 * With one token a linear op is a pass over the weight, and its time is the
 * weight's bytes over the HBM rate plus the launch.  A warp computes one
 * output row at a time: its lanes stream the row in 16-byte pieces (GEMV_UNROLL in
 * flight per lane, bypassing L1, since no other warp reads them), multiply
 * them with x (small and shared by all warps, so cached), and reduce across
 * the warp in fp32; the bias is added in fp32 and the sum rounded once, as cuBLASLt's
 * epilogue does.  The weight is constant, so each lane's first pieces are
 * loaded before the wait for x (pdl_wait): under a dependent launch the
 * weight stream starts while the kernel that writes x is still finishing,
 * and the loop keeps the next pieces in flight while it multiplies the
 * current ones, across rows too: the grid is one wave of resident blocks
 * and each warp strides over the rows.  When a matrix has too few rows to
 * keep every warp busy to the end (0.6B's o and down projections, 8B's
 * qkv), each row is split over 2 or 4 warps of a block, whose sums meet in
 * shared memory.
 *
 * On an H200 one token took 5.2-5.8 us on 0.6B shapes against cuBLASLt's
 * 8.3-13.7 us, and equalled it on 8B shapes; with 4 tokens the kernel
 * equalled cuBLASLt on 0.6B's gate_up and lost on 8B's (65 us against
 * 51 us), so it takes one token only.
 *
 * At one token every kernel boundary costs about as much as a small
 * kernel's work, so the GEMV also takes over the steps around it:
 *   - NORM: x is the residual stream and each block first computes
 *     rmsnorm(x) * norm_w into shared memory, rounded as the RMSNorm kernel
 *     rounds it, instead of reading a normalised copy;
 *   - GEMV_SILU_MUL: a warp owns a gate row and its up row and writes
 *     silu(g) * u, with g and u rounded to bf16 first, as the linear op and
 *     then silu_mul would;
 *   - GEMV_ADD: out is the residual stream and each row is added into it,
 *     the product rounded to bf16 first, as the residual add of the RMSNorm
 *     kernel would.
 */

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

/* Loads a lane's GEMV_UNROLL pieces of a row from piece `base` on (zeros
 * past the row's end). */
static __device__ __forceinline__ void gemv_load_pieces(uint4 *wv, const uint4 *wr, int base,
                                                        int kv)
{
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        const int i = base + u * 32;
        wv[u] = i < kv ? load_stream16(wr + i) : make_uint4(0, 0, 0, 0);
    }
}

/* Writes rmsnorm(x) * norm_w, as bf16, into xs: the block's copy of the
 * normalised input.  w0: the thread's first piece of norm_w, loaded before
 * the wait for x (the weights are constant). */
static __device__ void gemv_norm_prologue(uint4 *xs, const uint4 *x, const uint4 *norm_w, uint4 w0,
                                          int k, float eps)
{
    __shared__ float red[GEMV_WARPS];
    const int kv = k / 8;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < kv; i += blockDim.x) {
        float f[8];
        bf16x8_to_float(x[i], f);
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
        bf16x8_to_float(x[i], f);
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
 * waits for no load: the bias (constant) even before pdl_wait, the
 * residual (written by earlier kernels) after it. */
template <int R> struct gemv_addends {
    float bias[R];
    float residual;
};

template <typename OUT, int EPI, int R>
static __device__ __forceinline__ gemv_addends<R> gemv_addends_of(const OUT *out, const bf16 *bias,
                                                                  int m, int row, bool residual)
{
    gemv_addends<R> a;
#pragma unroll
    for (int r = 0; r < R; r++) a.bias[r] = bias ? __bfloat162float(bias[(size_t)r * m + row]) : 0.0f;
    a.residual = 0.0f;
    if constexpr (EPI == GEMV_ADD)
        if (residual) a.residual = (float)out[row];
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

/* out[m] = w[m, k] @ x[k] (+ bias[m]), or its fused forms (the file's
 * comment); k % 8 == 0, rows 16-byte aligned.  With NORM the block holds
 * the normalised x in k * 2 bytes of dynamic shared memory.
 *
 * The grid holds at most the blocks that fit on the device at once and the
 * warps stride over the rows, loading the next row's first pieces before
 * they reduce the current one, so a warp's stream of weight loads never
 * drains between rows and no block waits for a second wave.  With KS > 1
 * each row is split into KS parts of its columns, one warp each (the KS
 * warps of a block's row slot), whose sums meet in shared memory: a matrix
 * of fewer rows than the device has warps (0.6B's o and down projections:
 * 1,024 rows against ~4,200 warps) then keeps every warp streaming, and a
 * row count just past a multiple of the warps (8B's qkv: 6,144 rows, 1.45
 * a warp) ends in a shorter last round.  A warp's rounds are counted from
 * its part's start, the same for every lane, so the warp moves to its next
 * row together whatever k is.  ROLL: each piece, once multiplied, is
 * replaced by the same piece of the next round (GEMV_ROLL_MIN_COLS says
 * when), instead of a copy of the round being taken before the next is
 * loaded. */
template <typename OUT, int EPI, bool NORM, int KS, bool ROLL>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    kernel_gemv(OUT *out, const bf16 *x, const bf16 *w, const bf16 *bias, int m, int k,
                const bf16 *norm_w, float eps)
{
    constexpr int R = EPI == GEMV_SILU_MUL ? 2 : 1; /* weight rows per output */
    constexpr int SLOTS = GEMV_WARPS / KS;          /* rows a block works on at once */
    constexpr int ROUND = 32 * GEMV_UNROLL;         /* pieces a warp loads at once */
    extern __shared__ uint4 xs[];
    __shared__ float parts[2][GEMV_WARPS][R]; /* by row parity: see the exchange below */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = warp % KS, slot = warp / KS, stride = gridDim.x * SLOTS;
    const int kv = k / 8, span = (kv + KS - 1) / KS; /* 16-byte pieces per row, per part */
    const int lo = min(kv, sub * span), hi = min(kv, lo + span);
    int row = blockIdx.x * SLOTS + slot, round = lo, parity = 0;
    uint4 wv[R][GEMV_UNROLL];
    /* weight row r (gate or up) of output row r0, in pieces */
    auto row_pieces = [&](int r, int r0) { return (const uint4 *)(w + ((size_t)r * m + r0) * k); };
    auto load = [&](int r0, int b0) {
#pragma unroll
        for (int r = 0; r < R; r++) gemv_load_pieces(wv[r], row_pieces(r, r0), b0, hi);
    };
    /* the lane that finishes the slot's rows holds their addends */
    const bool finisher = lane == 0 && sub == 0;
    gemv_addends<R> add{}, add_next{};
    if (row < m) load(row, round + lane);
    uint4 norm_w0 = make_uint4(0, 0, 0, 0);
    if (NORM && (int)threadIdx.x < kv) norm_w0 = ((const uint4 *)norm_w)[threadIdx.x];
    if (finisher && row < m) add = gemv_addends_of<OUT, EPI, R>(out, bias, m, row, false);
    pdl_wait();
    pdl_release();
    if constexpr (EPI == GEMV_ADD)
        if (finisher && row < m) add.residual = (float)out[row];
    const uint4 *xr = (const uint4 *)x;
    if constexpr (NORM) {
        gemv_norm_prologue(xs, xr, (const uint4 *)norm_w, norm_w0, k, eps);
        xr = xs;
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    /* adds piece u of the round (held in pieces) to the row's sums */
    auto multiply = [&](const uint4 (&pieces)[R][GEMV_UNROLL], int u) {
        const int i = round + lane + u * 32;
        if (i < hi) {
            const uint4 xv = xr[i];
#pragma unroll
            for (int r = 0; r < R; r++) acc[r] += gemv_dot8(pieces[r][u], xv);
        }
    };
    while (row < m) {
        int next_row = row, next_round = round + ROUND;
        if (next_round >= hi) next_row = row + stride, next_round = lo;
        if (finisher && next_row != row && next_row < m)
            add_next = gemv_addends_of<OUT, EPI, R>(out, bias, m, next_row, true);
        if constexpr (ROLL) {
            /* each piece, once used, makes room for the same piece of the
             * next round: GEMV_UNROLL pieces in flight in as many registers */
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
                multiply(wv, u);
                const int j = next_round + lane + u * 32;
#pragma unroll
                for (int r = 0; r < R; r++)
                    wv[r][u] = next_row < m && j < hi ? load_stream16(row_pieces(r, next_row) + j)
                                                      : make_uint4(0, 0, 0, 0);
            }
        } else {
            uint4 cur[R][GEMV_UNROLL];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < GEMV_UNROLL; u++) cur[r][u] = wv[r][u];
            if (next_row < m) load(next_row, next_round + lane);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) multiply(cur, u);
        }
        if (next_row != row) {
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int off = 16; off > 0; off >>= 1)
                    acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
            }
            if constexpr (KS > 1) {
                /* the slot's warps meet at a barrier of their own; the
                 * buffer alternates by row, so a warp a row ahead writes the
                 * other one while the first warp still reads this one, and
                 * it cannot get two rows ahead past the next barrier */
                if (lane == 0) {
#pragma unroll
                    for (int r = 0; r < R; r++) parts[parity][warp][r] = acc[r];
                }
                asm volatile("bar.sync %0, %1;" ::"r"(1 + slot), "r"(KS * 32) : "memory");
                if (sub == 0 && lane == 0) {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        acc[r] = 0.0f;
#pragma unroll
                        for (int s = 0; s < KS; s++) acc[r] += parts[parity][warp + s][r];
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

/* Rows at least this long take the loop that reloads each piece once it
 * is used (kernel_gemv's ROLL).  It holds half the weight registers (0.6B's
 * gate_up 92 -> 64, the others 38-50), so more warps stream at once, but
 * it issues a row's next pieces one at a time as the current ones are
 * used rather than all before them.  On an H100 it took 8B's one-token
 * step (every k >= 4,096) from 183.2 to 186.5 tok/s, and slowed 0.6B's
 * (k 1,024 and 3,072: rows of one to six rounds) from 1,268 to 1,236. */
#define GEMV_ROLL_MIN_COLS 4096

bool cuda_gemv_fits(const cuda_backend *be, const void *x, const nl_weight *w, int32_t n)
{
    return n == 1 && be->gemv && w->cols % 8 == 0 && w->rows <= INT32_MAX &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* Rows the busiest of `warps` warps works through when each of m rows is
 * split into ks parts. */
static double gemv_rounds(int m, long long warps, int ks)
{
    return (double)(((long long)m * ks + warps - 1) / warps) / ks;
}

template <typename OUT, int EPI, bool NORM, int KS, bool ROLL>
static nl_status gemv_launch_split(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                                   const bf16 *bias, const bf16 *norm_w, float eps, int m)
{
    constexpr int SLOTS = GEMV_WARPS / KS;
    const int k = (int)w->cols;
    const size_t smem = NORM ? (size_t)k * sizeof(bf16) : 0;
    const int most = cuda_blocks_per_sm(kernel_gemv<OUT, EPI, NORM, KS, ROLL>, GEMV_WARPS * 32,
                                        smem) *
                     be->num_sms;
    const int need = (m + SLOTS - 1) / SLOTS;
    const unsigned blocks = (unsigned)(need < most ? need : most);
    NL_CUDA_CHECK(cuda_launch(be, kernel_gemv<OUT, EPI, NORM, KS, ROLL>, blocks, GEMV_WARPS * 32,
                              smem, out, x, w->data, bias, m, k, norm_w, eps));
    return NL_OK;
}

/* Splits the rows when that shortens the busiest warp's work (parts of at
 * least one piece a lane). */
template <typename OUT, int EPI, bool NORM, bool ROLL>
static nl_status gemv_launch_loop(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                                  const nl_weight *bias, const nl_weight *norm_w, float eps)
{
    const int m = (int)(EPI == GEMV_SILU_MUL ? w->rows / 2 : w->rows), kv = (int)(w->cols / 8);
    const size_t smem = NORM ? (size_t)w->cols * sizeof(bf16) : 0;
    const long long warps = (long long)cuda_blocks_per_sm(kernel_gemv<OUT, EPI, NORM, 1, ROLL>,
                                                          GEMV_WARPS * 32, smem) *
                            be->num_sms * GEMV_WARPS;
    int ks = 1;
    for (int c = 2; c <= 4; c *= 2)
        if (kv >= 32 * c && gemv_rounds(m, warps, c) < gemv_rounds(m, warps, ks)) ks = c;
    const bf16 *b = bias ? bias->data : NULL, *nw = norm_w ? norm_w->data : NULL;
    switch (ks) {
    case 4: return gemv_launch_split<OUT, EPI, NORM, 4, ROLL>(be, out, x, w, b, nw, eps, m);
    case 2: return gemv_launch_split<OUT, EPI, NORM, 2, ROLL>(be, out, x, w, b, nw, eps, m);
    default: return gemv_launch_split<OUT, EPI, NORM, 1, ROLL>(be, out, x, w, b, nw, eps, m);
    }
}

/* The loop for the row length (GEMV_ROLL_MIN_COLS). */
template <typename OUT, int EPI, bool NORM>
static nl_status gemv_launch(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                             const nl_weight *bias, const nl_weight *norm_w, float eps)
{
    return w->cols >= GEMV_ROLL_MIN_COLS
               ? gemv_launch_loop<OUT, EPI, NORM, true>(be, out, x, w, bias, norm_w, eps)
               : gemv_launch_loop<OUT, EPI, NORM, false>(be, out, x, w, bias, norm_w, eps);
}

nl_status cuda_gemv(cuda_backend *be, void *out, bool out_f32, int epilogue, const void *x,
                    const nl_weight *w, const nl_weight *bias, const nl_weight *norm_w, float eps)
{
    const bf16 *xb = (const bf16 *)x;
    if (norm_w && w->cols > CUDA_GEMV_NORM_MAX_COLS)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: GEMV norm prologue over %lld columns",
                        (long long)w->cols);
    if (out_f32) {
        if (epilogue != GEMV_STORE || norm_w)
            return nl_error(NL_ERR_INVALID_ARG, "cuda: fp32 GEMV output takes no fused steps");
        return gemv_launch<float, GEMV_STORE, false>(be, (float *)out, xb, w, bias, NULL, 0.0f);
    }
    bf16 *o = (bf16 *)out;
    switch (epilogue) {
    case GEMV_SILU_MUL:
        return norm_w ? gemv_launch<bf16, GEMV_SILU_MUL, true>(be, o, xb, w, bias, norm_w, eps)
                      : gemv_launch<bf16, GEMV_SILU_MUL, false>(be, o, xb, w, bias, NULL, 0.0f);
    case GEMV_ADD: /* out is a residual stream: normalising one in the same pass would race */
        if (norm_w) return nl_error(NL_ERR_INVALID_ARG, "cuda: GEMV residual add takes no norm");
        return gemv_launch<bf16, GEMV_ADD, false>(be, o, xb, w, bias, NULL, 0.0f);
    default:
        return norm_w ? gemv_launch<bf16, GEMV_STORE, true>(be, o, xb, w, bias, norm_w, eps)
                      : gemv_launch<bf16, GEMV_STORE, false>(be, o, xb, w, bias, NULL, 0.0f);
    }
}
