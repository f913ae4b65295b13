/* gemm.cu — the linear ops through cuBLASLt: out = x @ W^T (+ bias) with bf16
 * operands and fp32 accumulation, bf16 or fp32 out.
 *
 * Choosing an algorithm is a heuristic query that costs more than a decode
 * GEMM, so each shape's descriptors and algorithm are kept in the backend's
 * plan cache (round-robin replacement when full) and a repeated shape goes
 * straight to cublasLtMatmul.  A token count without a plan of its own runs
 * the algorithm chosen for the power of two above it (its bucket), in a
 * plan of its own descriptors kept in a second cache: prompts come in every
 * length, and a query and a first kernel load for each (~3 ms a shape, four
 * or five shapes a forward) would land on that prompt's first token.  The workspace is the
 * backend's, fixed at creation, so a captured graph can replay the call.
 * A single token takes the GEMV kernel (gemv.cu) instead, which also
 * absorbs the RMSNorm before a projection, the SiLU-and-multiply after
 * gate_up and the residual add after o_proj and down; larger batches run
 * those steps as their own kernels around cuBLASLt.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

void cuda_gemm_plan_release(cuda_gemm_plan *p)
{
    if (!p->valid) return;
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->desc);
    p->valid = false;
}

/* p's descriptors for the shape, no algorithm yet.  Row-major
 * out[n, m] = x[n, k] @ W[m, k]^T is, read column-major,
 * out^T[m, n] = op_T(W^T[k, m]) * x^T[k, n]: A = W with transa, B = x. */
nl_status cuda_gemm_plan_describe(cuda_gemm_plan *p, int64_t m, int64_t n, int64_t k,
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
    return NL_OK;
}

nl_status cuda_gemm_plan_build(cuda_gemm_plan *p, cublasLtHandle_t lt, size_t workspace_bytes,
                               int64_t m, int64_t n, int64_t k, cudaDataType_t out_type,
                               bool bias)
{
    NL_TRY(cuda_gemm_plan_describe(p, m, n, k, out_type, bias));
    cublasLtMatmulPreference_t pref;
    NL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = workspace_bytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                            &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        cuda_gemm_plan_release(p);
        if (st != CUBLAS_STATUS_SUCCESS)
            return NL_CUDA_FAIL("cublasLtMatmulAlgoGetHeuristic", cublasLtGetStatusString(st));
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: no cuBLASLt algorithm for m=%lld n=%lld k=%lld",
                        (long long)m, (long long)n, (long long)k);
    }
    p->algo = res.algo;
    return NL_OK;
}

static cuda_gemm_plan *plan_find_in(cuda_gemm_plan *plans, int count, int64_t m, int64_t n,
                                    int64_t k, cudaDataType_t out_type, bool bias)
{
    for (int i = 0; i < count; i++) {
        cuda_gemm_plan *p = &plans[i];
        if (p->valid && p->m == m && p->n == n && p->k == k && p->out_type == out_type &&
            p->bias == bias)
            return p;
    }
    return NULL;
}

static cuda_gemm_plan *plan_find(cuda_backend *be, int64_t m, int64_t n, int64_t k,
                                 cudaDataType_t out_type, bool bias)
{
    return plan_find_in(be->plans, NL_GEMM_PLAN_CACHE, m, n, k, out_type, bias);
}

/* The cache entry a new plan takes: round-robin, its old plan released. */
static cuda_gemm_plan *plan_slot(cuda_backend *be)
{
    cuda_gemm_plan *p = &be->plans[be->next_plan];
    be->next_plan = (be->next_plan + 1) % NL_GEMM_PLAN_CACHE;
    cuda_gemm_plan_release(p);
    return p;
}

static nl_status plan_get(cuda_backend *be, int64_t m, int64_t n, int64_t k,
                          cudaDataType_t out_type, bool bias, cuda_gemm_plan **out)
{
    *out = plan_find(be, m, n, k, out_type, bias);
    if (*out) return NL_OK;
    cuda_gemm_plan *p = plan_slot(be);
    NL_TRY(cuda_gemm_plan_build(p, be->lt, be->workspace_bytes, m, n, k, out_type, bias));
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

/* Enqueues plan p's matmul out = x @ w^T (+ bias) on stream, with a
 * workspace of the backend's workspace size. */
static nl_status plan_run(cuda_backend *be, cuda_gemm_plan *p, const nl_weight *w,
                          const nl_weight *bias, const void *x, void *out, void *workspace,
                          cudaStream_t stream)
{
    if (bias) {
        const void *bp = bias->data;
        NL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &bp, sizeof bp));
    }
    const float alpha = 1.0f, beta = 0.0f;
    NL_CUBLAS_CHECK(cublasLtMatmul(be->lt, p->desc, &alpha, w->data, p->a, x, p->b, &beta, out,
                                   p->c, out, p->c, &p->algo, workspace, be->workspace_bytes,
                                   stream));
    return NL_OK;
}

/* The token count whose plan serves n: the power of two at or above it. */
static int64_t plan_bucket(int64_t n)
{
    int64_t b = 1;
    while (b < n) b <<= 1;
    return b;
}

/* The plan for n tokens on bucket plan b's algorithm: its own descriptors,
 * the algorithm checked against them when the plan is made.  These plans
 * cost no query, so they take a cache of their own and never push a
 * queried plan out.  An algorithm that cannot take n (never expected)
 * gets n a queried plan of its own. */
static nl_status derived_get(cuda_backend *be, const cuda_gemm_plan *b, int64_t n,
                             cuda_gemm_plan **out)
{
    cuda_gemm_plan *p = &be->derived[be->next_derived];
    be->next_derived = (be->next_derived + 1) % NL_GEMM_DERIVED_CACHE;
    cuda_gemm_plan_release(p);
    NL_TRY(cuda_gemm_plan_describe(p, b->m, n, b->k, b->out_type, b->bias));
    cublasLtMatmulHeuristicResult_t check;
    if (cublasLtMatmulAlgoCheck(be->lt, p->desc, p->a, p->b, p->c, p->c, &b->algo, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= be->workspace_bytes) {
        p->algo = b->algo;
        *out = p;
        return NL_OK;
    }
    cuda_gemm_plan_release(p);
    return plan_get(be, b->m, n, b->k, b->out_type, b->bias, out);
}

/* Row-major out[n, w.rows] = x[n, w.cols] @ w^T (+ bias), out of out_type. */
static nl_status cuda_gemm(cuda_backend *be, void *out, cudaDataType_t out_type, const void *x,
                    const nl_weight *w, const nl_weight *bias, int32_t n)
{
    if (n <= 0) return NL_OK;
    NL_TRY(check_bias(w, bias));
    if (cuda_gemv_fits(be, x, w, n))
        return cuda_gemv(be, out, out_type == CUDA_R_32F, GEMV_STORE, x, w, bias, NULL, 0.0f);
    const bool has_bias = bias != NULL;
    cuda_gemm_plan *p = plan_find(be, w->rows, n, w->cols, out_type, has_bias);
    if (!p)
        p = plan_find_in(be->derived, NL_GEMM_DERIVED_CACHE, w->rows, n, w->cols, out_type,
                         has_bias);
    if (!p) {
        const int64_t bucket = plan_bucket(n);
        NL_TRY(plan_get(be, w->rows, bucket, w->cols, out_type, has_bias, &p));
        if (bucket != n) NL_TRY(derived_get(be, p, n, &p));
    }
    return plan_run(be, p, w, bias, x, out, be->workspace, be->stream);
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
    if (!x && cuda_gemv_fits(be, residual, w, n) && ((uintptr_t)norm_w->data & 15) == 0 &&
        w->cols <= CUDA_GEMV_NORM_MAX_COLS)
        return cuda_gemv(be, out, false, epilogue, residual, w, bias, norm_w, eps);
    NL_TRY(cuda_rmsnorm(b, xn, x ? x : residual, x ? residual : NULL, norm_w, n, (int32_t)w->cols,
                        eps));
    if (!silu_mul) return cuda_gemm(be, out, CUDA_R_16BF, xn, w, bias, n);
    if (cuda_gemv_fits(be, xn, w, n)) return cuda_gemv(be, out, false, epilogue, xn, w, bias, NULL, 0.0f);
    NL_TRY(cuda_gemm(be, work, CUDA_R_16BF, xn, w, bias, n));
    return cuda_silu_mul(b, out, work, n, (int32_t)(w->rows / 2));
}

nl_status cuda_linear_add(nl_backend *b, void *residual, void *work, const void *x,
                          const nl_weight *w, const nl_weight *bias, int32_t n)
{
    cuda_backend *be = cuda_be(b);
    NL_TRY(check_bias(w, bias));
    if (n <= 0) return NL_OK;
    if (cuda_gemv_fits(be, x, w, n))
        return cuda_gemv(be, residual, false, GEMV_ADD, x, w, bias, NULL, 0.0f);
    NL_TRY(cuda_gemm(be, work, CUDA_R_16BF, x, w, bias, n));
    return cuda_add(b, residual, work, (size_t)n * (size_t)w->rows);
}

/* ---- preparing plans ahead: linear_warm_start / linear_warm_join ----------
 *
 * A shape's first GEMM costs milliseconds on the host: the algorithm query,
 * then cuBLASLt's kernel loaded on first use.  A decode graph of each batch
 * size runs four or five new shapes, so graph capture paid ~0.4 s of it.
 * WARM_THREADS helper threads, each with its own stream and workspace, build
 * the plans and run each shape once on scratch inputs while the caller loads
 * the weights; the join moves the plans into the cache.  (On an H200 the
 * 100 shapes of 20 batch sizes took 0.44 s on one thread, 0.30 s on four.) */
#define WARM_THREADS 4

typedef struct warm_lane {
    struct cuda_gemm_warm *g;
    pthread_t thread;
    bool started;
    cudaStream_t stream;
    void *workspace;
} warm_lane;

struct cuda_gemm_warm {
    cuda_backend *be;
    nl_linear_shape *shapes;
    cuda_gemm_plan *plans;        /* [n_shapes], built by the lanes        */
    int n_shapes;
    int next;                     /* the next shape a lane takes (lock)    */
    pthread_mutex_t lock;
    warm_lane lane[WARM_THREADS];
    void *x, *out;                /* shared scratch: what they hold is never read */
};

static void *warm_lane_run(void *arg)
{
    warm_lane *ln = (warm_lane *)arg;
    cuda_gemm_warm *g = ln->g;
    cuda_backend *be = g->be;
    if (cudaSetDevice(be->device) != cudaSuccess) return NULL;
    for (;;) {
        pthread_mutex_lock(&g->lock);
        const int i = g->next++;
        pthread_mutex_unlock(&g->lock);
        if (i >= g->n_shapes) break;
        const nl_linear_shape *sh = &g->shapes[i];
        cuda_gemm_plan *p = &g->plans[i];
        /* a failure is the op's to report when it runs */
        if (cuda_gemm_plan_build(p, be->lt, be->workspace_bytes, sh->w->rows, sh->n, sh->w->cols,
                       sh->out_f32 ? CUDA_R_32F : CUDA_R_16BF, sh->bias != NULL) == NL_OK &&
            plan_run(be, p, sh->w, sh->bias, g->x, g->out, ln->workspace, ln->stream) != NL_OK)
            cuda_gemm_plan_release(p);
    }
    cudaStreamSynchronize(ln->stream);
    cudaGetLastError(); /* this thread's, and nothing to report */
    return NULL;
}

/* Whether cuda_gemm will need a plan for sh (the GEMV takes one token; the
 * forward's buffers are aligned, as the NULL stands for). */
static bool warm_wanted(cuda_backend *be, const nl_linear_shape *shapes, int i)
{
    const nl_linear_shape *sh = &shapes[i];
    const cudaDataType_t t = sh->out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    if (sh->n <= 0 || cuda_gemv_fits(be, NULL, sh->w, sh->n)) return false;
    if (plan_find(be, sh->w->rows, sh->n, sh->w->cols, t, sh->bias != NULL)) return false;
    for (int j = 0; j < i; j++) /* the same plan listed twice */
        if (shapes[j].w->rows == sh->w->rows && shapes[j].w->cols == sh->w->cols &&
            shapes[j].n == sh->n && shapes[j].out_f32 == sh->out_f32 &&
            (shapes[j].bias != NULL) == (sh->bias != NULL))
            return false;
    return true;
}

static void warm_free(cuda_gemm_warm *g)
{
    for (int t = 0; t < WARM_THREADS; t++) {
        if (g->lane[t].stream) cudaStreamDestroy(g->lane[t].stream);
        cudaFree(g->lane[t].workspace);
    }
    cudaFree(g->x);
    cudaFree(g->out);
    if (g->plans)
        for (int i = 0; i < g->n_shapes; i++) cuda_gemm_plan_release(&g->plans[i]);
    free(g->plans);
    free(g->shapes);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

nl_status cuda_linear_warm_start(nl_backend *b, const nl_linear_shape *shapes, int32_t n)
{
    cuda_backend *be = cuda_be(b);
    if (be->warm) return nl_error(NL_ERR_INVALID_ARG, "cuda: linear ops already being prepared");
    cuda_gemm_warm *g = (cuda_gemm_warm *)calloc(1, sizeof *g);
    if (!g) return NL_OK; /* preparing is an optimisation: without memory, skip it */
    g->be = be;
    pthread_mutex_init(&g->lock, NULL);
    g->shapes = (nl_linear_shape *)calloc(n > 0 ? (size_t)n : 1, sizeof *g->shapes);
    g->plans = (cuda_gemm_plan *)calloc(n > 0 ? (size_t)n : 1, sizeof *g->plans);
    for (int i = 0; g->shapes && g->plans && i < n; i++)
        if (warm_wanted(be, shapes, i)) g->shapes[g->n_shapes++] = shapes[i];
    /* Scratch for every shape; where memory is short, the largest shapes
     * are left to their first use (their GEMMs cost more than preparing
     * them) until the others' scratch fits. */
    size_t budget = SIZE_MAX;
    bool ok = false;
    while (g->n_shapes > 0 && !ok) {
        size_t x_bytes = 16, out_bytes = 16;
        int kept = 0;
        for (int i = 0; i < g->n_shapes; i++) {
            const nl_linear_shape *sh = &g->shapes[i];
            const size_t xb = (size_t)sh->n * (size_t)sh->w->cols * sizeof(bf16);
            const size_t ob = (size_t)sh->n * (size_t)sh->w->rows * (sh->out_f32 ? 4 : 2);
            if (xb > budget || ob > budget) continue;
            x_bytes = xb > x_bytes ? xb : x_bytes;
            out_bytes = ob > out_bytes ? ob : out_bytes;
            g->shapes[kept++] = *sh;
        }
        g->n_shapes = kept;
        ok = kept > 0 && cudaMalloc(&g->x, x_bytes) == cudaSuccess &&
             cudaMalloc(&g->out, out_bytes) == cudaSuccess;
        if (!ok) {
            cudaGetLastError(); /* out of memory: try without the largest */
            cudaFree(g->x);
            g->x = NULL;
            budget = (x_bytes > out_bytes ? x_bytes : out_bytes) - 1;
        }
    }
    for (int t = 0; ok && t < WARM_THREADS; t++) {
        warm_lane *ln = &g->lane[t];
        ln->g = g;
        ok = cudaStreamCreateWithFlags(&ln->stream, cudaStreamNonBlocking) == cudaSuccess &&
             cudaMalloc(&ln->workspace, be->workspace_bytes) == cudaSuccess;
    }
    if (!ok) {
        cudaGetLastError(); /* out of memory for scratch: nothing is prepared */
        warm_free(g);
        return NL_OK;
    }
    for (int t = 0; t < WARM_THREADS; t++)
        g->lane[t].started = pthread_create(&g->lane[t].thread, NULL, warm_lane_run, &g->lane[t]) == 0;
    be->warm = g;
    return NL_OK;
}

nl_status cuda_linear_warm_join(nl_backend *b)
{
    cuda_backend *be = cuda_be(b);
    cuda_gemm_warm *g = be->warm;
    if (!g) return NL_OK;
    be->warm = NULL;
    for (int t = 0; t < WARM_THREADS; t++)
        if (g->lane[t].started) pthread_join(g->lane[t].thread, NULL);
    for (int i = 0; i < g->n_shapes; i++) {
        cuda_gemm_plan *p = &g->plans[i];
        if (!p->valid || plan_find(be, p->m, p->n, p->k, p->out_type, p->bias)) continue;
        *plan_slot(be) = *p; /* the cache owns its descriptors now */
        p->valid = false;
    }
    warm_free(g);
    return NL_OK;
}

extern "C" int nl_backend_cuda_plans(nl_backend *b)
{
    const cuda_backend *be = cuda_be(b);
    int n = 0;
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) n += be->plans[i].valid;
    return n;
}

void cuda_gemm_release_plans(cuda_backend *be)
{
    cuda_linear_warm_join(&be->base);
    for (int i = 0; i < NL_GEMM_PLAN_CACHE; i++) cuda_gemm_plan_release(&be->plans[i]);
    for (int i = 0; i < NL_GEMM_DERIVED_CACHE; i++) cuda_gemm_plan_release(&be->derived[i]);
}
