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
 * current ones (each piece, once used, is replaced by the same piece of
 * the next round, so GEMV_UNROLL pieces take GEMV_UNROLL registers), across
 * rows too: the grid is one wave of resident blocks
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
 *
 * The loop itself lives in gemv.cuh (gemv_rows), which the whole-layers
 * decode kernel (decode_layers.cu) runs as well.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemv.cuh"

/* The GEMV as a kernel of its own: the rows wait for the kernel before it
 * (pdl_wait), then let the next one start its blocks. */
template <typename OUT, int EPI, bool NORM, int KS>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    kernel_gemv(OUT *out, const bf16 *x, const bf16 *w, const bf16 *bias, int m, int k,
                const bf16 *norm_w, float eps)
{
    extern __shared__ uint4 xs[];
    gemv_rows<OUT, EPI, NORM, KS, false>(out, x, w, bias, m, k, norm_w, eps, KS, xs, [] {
        pdl_wait();
        pdl_release();
    });
}

/* NANOLLM_GEMV=0 turns the GEMV path off (read once). */
static bool gemv_enabled(void)
{
    static int cached = -1;
    if (cached < 0) {
        const char *v = getenv("NANOLLM_GEMV");
        cached = !(v && strcmp(v, "0") == 0);
    }
    return cached != 0;
}

bool cuda_gemv_fits(const void *x, const nl_weight *w, int32_t n)
{
    return n == 1 && gemv_enabled() && w->cols % 8 == 0 && w->rows <= INT32_MAX &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

template <typename OUT, int EPI, bool NORM, int KS>
static nl_status gemv_launch_split(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                                   const bf16 *bias, const bf16 *norm_w, float eps, int m)
{
    constexpr int SLOTS = GEMV_WARPS / KS;
    const int k = (int)w->cols;
    const size_t smem = NORM ? (size_t)k * sizeof(bf16) : 0;
    const int most = cuda_blocks_per_sm(kernel_gemv<OUT, EPI, NORM, KS>, GEMV_WARPS * 32, smem) *
                     be->num_sms;
    const int need = (m + SLOTS - 1) / SLOTS;
    const unsigned blocks = (unsigned)(need < most ? need : most);
    NL_CUDA_CHECK(cuda_launch(be, kernel_gemv<OUT, EPI, NORM, KS>, blocks, GEMV_WARPS * 32, smem,
                              out, x, w->data, bias, m, k, norm_w, eps));
    return NL_OK;
}

/* Splits the rows when that shortens the busiest warp's work (parts of at
 * least one piece a lane). */
template <typename OUT, int EPI, bool NORM>
static nl_status gemv_launch(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                             const nl_weight *bias, const nl_weight *norm_w, float eps)
{
    const int m = (int)(EPI == GEMV_SILU_MUL ? w->rows / 2 : w->rows);
    const size_t smem = NORM ? (size_t)w->cols * sizeof(bf16) : 0;
    const long long warps = (long long)cuda_blocks_per_sm(kernel_gemv<OUT, EPI, NORM, 1>,
                                                          GEMV_WARPS * 32, smem) *
                            be->num_sms * GEMV_WARPS;
    const int ks = gemv_split_of(m, (int)w->cols, warps);
    const bf16 *b = bias ? bias->data : NULL, *nw = norm_w ? norm_w->data : NULL;
    switch (ks) {
    case 4: return gemv_launch_split<OUT, EPI, NORM, 4>(be, out, x, w, b, nw, eps, m);
    case 2: return gemv_launch_split<OUT, EPI, NORM, 2>(be, out, x, w, b, nw, eps, m);
    default: return gemv_launch_split<OUT, EPI, NORM, 1>(be, out, x, w, b, nw, eps, m);
    }
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
