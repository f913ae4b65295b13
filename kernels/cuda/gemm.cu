/* gemm.cu — the linear ops through cuBLASLt: out = x @ W^T (+ bias) with bf16
 * operands and fp32 accumulation, bf16 or fp32 out.
 *
 * Choosing an algorithm is a heuristic query that costs more than a decode
 * GEMM, so each shape's descriptors and algorithm are kept in the backend's
 * plan cache (round-robin replacement when full) and a repeated shape goes
 * straight to cublasLtMatmul.  The workspace is the backend's, fixed at
 * creation, so a captured graph can replay the call.  A single token takes
 * a GEMV kernel of this file instead (batch-1 latency).
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

/* ---- small batches: a GEMV kernel ------------------------------------------
 *
 * With one token (up to GEMV_MAX_N) a linear op is a pass over the weight, and
 * its time is the weight's bytes over the HBM rate plus the launch.  Each
 * warp owns one output row: its lanes stream the row in 16-byte pieces
 * (GEMV_UNROLL in flight per lane, bypassing L1, since no other warp reads
 * them), multiply them with every token's x (small and shared by all warps,
 * so cached), and reduce across the warp in fp32; the bias is added in fp32
 * and the sum rounded once, as cuBLASLt's epilogue does.  NANOLLM_GEMV=0
 * sends these shapes to cuBLASLt too.
 *
 * The kernel takes up to 4 tokens, but on an H200 only one token gained:
 * 0.6B shapes 5.2-5.8 us against cuBLASLt's 8.3-13.7 us, 8B shapes equal;
 * with 4 tokens it equalled cuBLASLt on 0.6B's gate_up and lost on 8B's
 * (65 us against 51 us), so GEMV_MAX_N is 1. */
#define GEMV_MAX_N 1
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

/* out[N, m] = x[N, k] @ w[m, k]^T (+ bias[m]); k % 8 == 0, rows 16-byte aligned. */
template <int N, typename OUT>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
    kernel_gemv(OUT *out, const bf16 *x, const bf16 *w, const bf16 *bias, int m, int k)
{
    const int row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= m) return;
    const int kv = k / 8; /* 16-byte pieces per row */
    const uint4 *wr = (const uint4 *)(w + (size_t)row * k);
    const uint4 *xr = (const uint4 *)x;
    float acc[N];
#pragma unroll
    for (int t = 0; t < N; t++) acc[t] = 0.0f;
    for (int base = lane; base < kv; base += 32 * GEMV_UNROLL) {
        uint4 wv[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int i = base + u * 32;
            wv[u] = i < kv ? gemv_load_stream(wr + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int i = base + u * 32;
            if (i < kv)
#pragma unroll
                for (int t = 0; t < N; t++) acc[t] += gemv_dot8(wv[u], xr[(size_t)t * kv + i]);
        }
    }
#pragma unroll
    for (int t = 0; t < N; t++)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], off);
    if (lane == 0) {
        const float b = bias ? __bfloat162float(bias[row]) : 0.0f;
#pragma unroll
        for (int t = 0; t < N; t++) gemv_store(out + (size_t)t * m + row, acc[t] + b);
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

template <typename OUT>
static nl_status gemv_launch(cuda_backend *be, OUT *out, const bf16 *x, const nl_weight *w,
                             const bf16 *bias, int n)
{
    const int m = (int)w->rows, k = (int)w->cols;
    const unsigned blocks = (unsigned)((m + GEMV_WARPS - 1) / GEMV_WARPS);
    static_assert(GEMV_MAX_N <= 4, "kernel_gemv is instantiated for up to 4 tokens");
    switch (n) {
    case 1: kernel_gemv<1, OUT><<<blocks, GEMV_WARPS * 32, 0, be->stream>>>(out, x, w->data, bias, m, k); break;
    case 2: kernel_gemv<2, OUT><<<blocks, GEMV_WARPS * 32, 0, be->stream>>>(out, x, w->data, bias, m, k); break;
    case 3: kernel_gemv<3, OUT><<<blocks, GEMV_WARPS * 32, 0, be->stream>>>(out, x, w->data, bias, m, k); break;
    default: kernel_gemv<4, OUT><<<blocks, GEMV_WARPS * 32, 0, be->stream>>>(out, x, w->data, bias, m, k); break;
    }
    NL_CUDA_CHECK_LAUNCH();
    return NL_OK;
}

/* Whether the GEMV kernel takes this call. */
static bool gemv_fits(const void *x, const nl_weight *w, int32_t n)
{
    return n <= GEMV_MAX_N && gemv_enabled() && w->cols % 8 == 0 && w->rows <= INT32_MAX &&
           ((uintptr_t)x & 15) == 0 && ((uintptr_t)w->data & 15) == 0;
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
        const bf16 *bp = bias ? bias->data : NULL;
        if (out_type == CUDA_R_32F) return gemv_launch(be, (float *)out, (const bf16 *)x, w, bp, n);
        return gemv_launch(be, (bf16 *)out, (const bf16 *)x, w, bp, n);
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

void cuda_gemm_release_plans(cuda_backend *be)
{
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) plan_release(&be->plans[i]);
}
