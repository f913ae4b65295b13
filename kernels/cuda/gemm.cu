/* gemm.cu — the linear ops through cuBLASLt: out = x @ W^T (+ bias) with bf16
 * operands and fp32 accumulation, bf16 or fp32 out.
 *
 * Choosing an algorithm is a heuristic query that costs more than a decode
 * GEMM, so each shape's descriptors and algorithm are kept in the backend's
 * plan cache (round-robin replacement when full) and a repeated shape goes
 * straight to cublasLtMatmul.  The workspace is the backend's, fixed at
 * creation, so a captured graph can replay the call.  A single token takes
 * the GEMV kernel (gemv.cu) instead, which also absorbs the RMSNorm before
 * a projection, the SiLU-and-multiply after gate_up and the residual add
 * after o_proj and down; larger batches run those steps as their own
 * kernels around cuBLASLt.
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

static nl_status check_bias(const nl_weight *w, const nl_weight *bias)
{
    if (bias && bias->rows * bias->cols != w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: linear bias has %lld values for %lld rows",
                        (long long)(bias->rows * bias->cols), (long long)w->rows);
    return NL_OK;
}

/* Row-major out[n, w.rows] = x[n, w.cols] @ w^T (+ bias), out of out_type. */
static nl_status cuda_gemm(cuda_backend *be, void *out, cudaDataType_t out_type, const void *x,
                    const nl_weight *w, const nl_weight *bias, int32_t n)
{
    if (n <= 0) return NL_OK;
    NL_TRY(check_bias(w, bias));
    if (cuda_gemv_fits(x, w, n))
        return cuda_gemv(be, out, out_type == CUDA_R_32F, GEMV_STORE, x, w, bias, NULL, 0.0f);
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

nl_status cuda_norm_linear(nl_backend *b, void *out, void *xn, void *work, const void *x,
                           void *residual, const nl_weight *norm_w, float eps, const nl_weight *w,
                           const nl_weight *bias, int32_t n, bool silu_mul)
{
    cuda_backend *be = cuda_be(b);
    if (silu_mul && w->rows % 2 != 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: gate_up weight has %lld rows, not gate and up "
                        "halves", (long long)w->rows);
    if (norm_w->rows * norm_w->cols != w->cols)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: norm weight has %lld values for %lld columns",
                        (long long)(norm_w->rows * norm_w->cols), (long long)w->cols);
    NL_TRY(check_bias(w, bias));
    if (n <= 0) return NL_OK;
    const int epilogue = silu_mul ? GEMV_SILU_MUL : GEMV_STORE;
    /* one token whose residual is complete: the GEMV normalises it itself */
    if (!x && cuda_gemv_fits(residual, w, n) && ((uintptr_t)norm_w->data & 15) == 0 &&
        w->cols <= CUDA_GEMV_NORM_MAX_COLS)
        return cuda_gemv(be, out, false, epilogue, residual, w, bias, norm_w, eps);
    NL_TRY(cuda_rmsnorm(b, xn, x ? x : residual, x ? residual : NULL, norm_w, n, (int32_t)w->cols,
                        eps));
    if (!silu_mul) return cuda_gemm(be, out, CUDA_R_16BF, xn, w, bias, n);
    if (cuda_gemv_fits(xn, w, n)) return cuda_gemv(be, out, false, epilogue, xn, w, bias, NULL, 0.0f);
    NL_TRY(cuda_gemm(be, work, CUDA_R_16BF, xn, w, bias, n));
    return cuda_silu_mul(b, out, work, n, (int32_t)(w->rows / 2));
}

nl_status cuda_linear_add(nl_backend *b, void *residual, void *work, const void *x,
                          const nl_weight *w, const nl_weight *bias, int32_t n)
{
    cuda_backend *be = cuda_be(b);
    NL_TRY(check_bias(w, bias));
    if (n <= 0) return NL_OK;
    if (cuda_gemv_fits(x, w, n))
        return cuda_gemv(be, residual, false, GEMV_ADD, x, w, bias, NULL, 0.0f);
    NL_TRY(cuda_gemm(be, work, CUDA_R_16BF, x, w, bias, n));
    return cuda_add(b, residual, work, (size_t)n * (size_t)w->rows);
}

void cuda_gemm_release_plans(cuda_backend *be)
{
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) plan_release(&be->plans[i]);
}
