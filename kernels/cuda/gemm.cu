/* gemm.cu — the linear ops through cuBLASLt: out = x @ W^T (+ bias) with bf16
 * operands and fp32 accumulation, bf16 or fp32 out.
 *
 * Choosing an algorithm is a heuristic query that costs more than a decode
 * GEMM, so each shape's descriptors and algorithm are kept in the backend's
 * plan cache (round-robin replacement when full) and a repeated shape goes
 * straight to cublasLtMatmul.  The workspace is the backend's, fixed at
 * creation, so a captured graph can replay the call.  A single token takes
 * a GEMV kernel of this file instead (batch-1 latency), which also fuses the
 * MLP's SiLU-and-multiply into its gate_up pass.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

static void plan_release(cuda_gemm_plan *p)
{
    if (!p->valid) return;
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->desc);
    p->valid = false;
}

/* Row-major out[n, m] = x[n, k] @ W[m, k]^T is, read column-major,
 * out^T[m, n] = op_T(W^T[k, m]) * x^T[k, n]: A = W with transa, B = x. */
static nl_status plan_build(cuda_backend *be, cuda_gemm_plan *p, int64_t m, int64_t n, int64_t k,
                            cudaDataType_t out_type, bool bias)
{
    memset(p, 0, sizeof *p);
    p->m = m;
    p->n = n;
    p->k = k;
    p->out_type = out_type;
    p->bias = bias;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    NL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                   sizeof ta));
    NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                   sizeof tb));
    if (bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_16BF;
        NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &ep, sizeof ep));
        NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    NL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k, m, k));
    NL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, k, n, k));
    NL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_type, m, n, m));
    p->valid = true;

    cublasLtMatmulPreference_t pref;
    NL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = be->workspace_bytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(be->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                            &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        plan_release(p);
        if (st != CUBLAS_STATUS_SUCCESS)
            return NL_CUDA_FAIL("cublasLtMatmulAlgoGetHeuristic", cublasLtGetStatusString(st));
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: no cuBLASLt algorithm for m=%lld n=%lld k=%lld",
                        (long long)m, (long long)n, (long long)k);
    }
    p->algo = res.algo;
    return NL_OK;
}

static nl_status plan_get(cuda_backend *be, int64_t m, int64_t n, int64_t k,
                          cudaDataType_t out_type, bool bias, cuda_gemm_plan **out)
{
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) {
        cuda_gemm_plan *p = &be->plans[i];
        if (p->valid && p->m == m && p->n == n && p->k == k && p->out_type == out_type &&
            p->bias == bias) {
            *out = p;
            return NL_OK;
        }
    }
    cuda_gemm_plan *p = &be->plans[be->next_plan];
    be->next_plan = (be->next_plan + 1) % NL_GEMM_PLAN_CACHE;
    plan_release(p);
    NL_TRY(plan_build(be, p, m, n, k, out_type, bias));
    *out = p;
    return NL_OK;
}

/* ---- one token: a GEMV kernel -----------------------------------------------
 *
 * With one token a linear op is a pass over the weight, and its time is the
 * weight's bytes over the HBM rate plus the launch.  Each warp owns one
 * output row: its lanes stream the row in 16-byte pieces (GEMV_UNROLL in
 * flight per lane, bypassing L1, since no other warp reads them), multiply
 * them with x (small and shared by all warps, so cached), and reduce across
 * the warp in fp32; the bias is added in fp32 and the sum rounded once, as
 * cuBLASLt's epilogue does.  NANOLLM_GEMV=0 sends these shapes to cuBLASLt
 * too.
 *
 * On an H200 one token took 5.2-5.8 us on 0.6B shapes against cuBLASLt's
 * 8.3-13.7 us, and equalled it on 8B shapes; with 4 tokens the kernel
 * equalled cuBLASLt on 0.6B's gate_up and lost on 8B's (65 us against
 * 51 us), so it takes one token only.
 *
 * The MLP's gate_up projection fuses SiLU-and-multiply into the same pass
 * (linear_silu_mul): a warp owns a gate row and its up row, and writes
 * silu(g) * u, with g and u rounded to bf16 first, exactly what the linear
 * op and then silu_mul would write, without the second kernel or the
 * [2 inter] intermediate. */
#define GEMV_WARPS 4
#define GEMV_UNROLL 4

static __device__ __forceinline__ uint4 gemv_load_stream(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

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

/* Loads a lane's GEMV_UNROLL pieces of a row from piece `base` on (zeros past
 * the row's end). */
static __device__ __forceinline__ void gemv_load_pieces(uint4 *wv, const uint4 *wr, int base,
                                                        int kv)
{
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++) {
        const int i = base + u * 32;
        wv[u] = i < kv ? gemv_load_stream(wr + i) : make_uint4(0, 0, 0, 0);
    }
}

/* out[m] = w[m, k] @ x[k] (+ bias[m]); k % 8 == 0, rows 16-byte aligned.
 * With SILU_MUL, w has 2 m rows (gate, then up) and out[i] = silu(g_i) * u_i.
 * The weight is constant, so each lane's first pieces are loaded before the
 * wait for x (pdl_wait): under a dependent launch the weight stream starts
 * while the kernel that writes x is still finishing.  The loop keeps the
 * next pieces in flight while it multiplies the current ones. */
template <typename OUT, bool SILU_MUL>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    kernel_gemv(OUT *out, const bf16 *x, const bf16 *w, const bf16 *bias, int m, int k)
{
    constexpr int R = SILU_MUL ? 2 : 1; /* weight rows per output */
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const int kv = k / 8; /* 16-byte pieces per row */
    const uint4 *wr[R];
    uint4 wv[R][GEMV_UNROLL];
#pragma unroll
    for (int r = 0; r < R; r++) {
        wr[r] = (const uint4 *)(w + ((size_t)r * m + (row < m ? row : 0)) * k);
        gemv_load_pieces(wv[r], wr[r], lane, kv);
    }
    pdl_wait();
    pdl_release();
    if (row >= m) return;
    const uint4 *xr = (const uint4 *)x;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.0f;
    for (int base = lane; base < kv; base += 32 * GEMV_UNROLL) {
        uint4 cur[R][GEMV_UNROLL];
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) cur[r][u] = wv[r][u];
            if (base + 32 * GEMV_UNROLL < kv) gemv_load_pieces(wv[r], wr[r], base + 32 * GEMV_UNROLL, kv);
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int i = base + u * 32;
            if (i < kv) {
                const uint4 xv = xr[i];
#pragma unroll
                for (int r = 0; r < R; r++) acc[r] += gemv_dot8(cur[r][u], xv);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], off);
    if (lane != 0) return;
    if constexpr (SILU_MUL) {
        const float g = round_bf16(acc[0] + (bias ? __bfloat162float(bias[row]) : 0.0f));
        const float u = round_bf16(acc[1] + (bias ? __bfloat162float(bias[m + row]) : 0.0f));
        gemv_store(out + row, silu_mul1(g, u));
    } else {
        gemv_store(out + row, acc[0] + (bias ? __bfloat162float(bias[row]) : 0.0f));
    }
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

/* Whether the GEMV kernel takes this call. */
static bool gemv_fits(const void *x, const nl_weight *w, int32_t n)
{
    return n == 1 && gemv_enabled() && w->cols % 8 == 0 && w->rows <= INT32_MAX &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
}

/* Launches kernel_gemv for m outputs. */
template <typename OUT, bool SILU_MUL>
static nl_status gemv_launch(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                             const nl_weight *bias, int m)
{
    const unsigned blocks = (unsigned)((m + GEMV_WARPS - 1) / GEMV_WARPS);
    NL_CUDA_CHECK(cuda_launch(be, kernel_gemv<OUT, SILU_MUL>, blocks, GEMV_WARPS * 32, 0, out, x,
                              w->data, bias ? bias->data : NULL, m, (int)w->cols));
    return NL_OK;
}

/* Row-major out[n, w.rows] = x[n, w.cols] @ w^T (+ bias), out of out_type. */
static nl_status cuda_gemm(cuda_backend *be, void *out, cudaDataType_t out_type, const void *x,
                    const nl_weight *w, const nl_weight *bias, int32_t n)
{
    if (n <= 0) return NL_OK;
    if (bias && bias->rows * bias->cols != w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: linear bias has %lld values for %lld rows",
                        (long long)(bias->rows * bias->cols), (long long)w->rows);
    if (gemv_fits(x, w, n)) {
        if (out_type == CUDA_R_32F)
            return gemv_launch<float, false>(be, (float *)out, (const bf16 *)x, w, bias, (int)w->rows);
        return gemv_launch<bf16, false>(be, (bf16 *)out, (const bf16 *)x, w, bias, (int)w->rows);
    }
    cuda_gemm_plan *p;
    NL_TRY(plan_get(be, w->rows, n, w->cols, out_type, bias != NULL, &p));
    if (bias) {
        const void *bp = bias->data;
        NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bp, sizeof bp));
    }
    const float alpha = 1.0f, beta = 0.0f;
    NL_CUBLAS_CHECK(cublasLtMatmul(be->lt, p->desc, &alpha, w->data, p->a, x, p->b, &beta, out,
                                   p->c, out, p->c, &p->algo, be->workspace, be->workspace_bytes,
                                   be->stream));
    return NL_OK;
}

nl_status cuda_linear(nl_backend *b, void *out, const void *x, const nl_weight *w,
                      const nl_weight *bias, int32_t n)
{
    return cuda_gemm(cuda_be(b), out, CUDA_R_16BF, x, w, bias, n);
}

nl_status cuda_linear_f32(nl_backend *b, float *out, const void *x, const nl_weight *w,
                          int32_t n)
{
    return cuda_gemm(cuda_be(b), out, CUDA_R_32F, x, w, NULL, n);
}

nl_status cuda_linear_silu_mul(nl_backend *b, void *out, void *work, const void *x,
                               const nl_weight *w, const nl_weight *bias, int32_t n)
{
    cuda_backend *be = cuda_be(b);
    if (w->rows % 2 != 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: gate_up weight has %lld rows, not gate and up "
                        "halves", (long long)w->rows);
    if (n <= 0) return NL_OK;
    const int32_t inter = (int32_t)(w->rows / 2);
    if (bias && bias->rows * bias->cols != w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: linear bias has %lld values for %lld rows",
                        (long long)(bias->rows * bias->cols), (long long)w->rows);
    if (gemv_fits(x, w, n)) return gemv_launch<bf16, true>(be, (bf16 *)out, (const bf16 *)x, w, bias, inter);
    NL_TRY(cuda_gemm(be, work, CUDA_R_16BF, x, w, bias, n));
    return cuda_silu_mul(b, out, work, n, inter);
}

void cuda_gemm_release_plans(cuda_backend *be)
{
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) plan_release(&be->plans[i]);
}
