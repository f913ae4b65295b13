/* cuda_common.cuh — what every CUDA source of the backend shares: the check
 * macros that turn CUDA/cuBLAS/NCCL failures into nl_error messages naming the
 * file, line and error string; the backend object; bf16 helpers; and the
 * op entry points each kernel file exports to backend.cu's op table.
 *
 * The op table and the object's lifetime live in backend.cu; kernels live in
 * one .cu file per operator family.
 */
#ifndef NL_KERNELS_CUDA_COMMON_CUH
#define NL_KERNELS_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "common/status.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"
}

/* One failure path for every library call: the message names where it
 * happened and what the library said. */
#define NL_CUDA_FAIL(what, msg)                                                   \
    nl_error(NL_ERR_RUNTIME, "%s:%d: %s failed: %s", __FILE__, __LINE__, what, msg)

#define NL_CUDA_CHECK(call)                                                       \
    do {                                                                          \
        cudaError_t nl_e_ = (call);                                               \
        if (nl_e_ != cudaSuccess) return NL_CUDA_FAIL(#call, cudaGetErrorString(nl_e_)); \
    } while (0)

#define NL_CUBLAS_CHECK(call)                                                     \
    do {                                                                          \
        cublasStatus_t nl_e_ = (call);                                            \
        if (nl_e_ != CUBLAS_STATUS_SUCCESS)                                       \
            return NL_CUDA_FAIL(#call, cublasLtGetStatusString(nl_e_));           \
    } while (0)

/* After a kernel launch: catches bad launch configurations at once (errors
 * inside the kernel surface at the next synchronisation). */
#define NL_CUDA_CHECK_LAUNCH() NL_CUDA_CHECK(cudaGetLastError())

typedef __nv_bfloat16 bf16;
typedef __nv_fp8_e4m3 fp8; /* a KV-cache element of an NL_DTYPE_F8_E4M3 cache */

/* Eight bf16 (a 16-byte piece, element 0 first) to floats. */
static __device__ __forceinline__ void bf16x8_to_float(uint4 v, float f[8])
{
    const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

/* A 16-byte load of data this thread alone reads once (a weight row, a K/V
 * row): read-only path, not kept in L1. */
static __device__ __forceinline__ uint4 load_stream16(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* Eight e4m3 bytes (element 0 in the lowest byte) to floats, exactly: every
 * e4m3 value is an fp16 value, which the hardware converts pairwise. */
static __device__ __forceinline__ void fp8x8_to_float(uint2 v, float f[8])
{
    const __nv_fp8x2_storage_t *p = (const __nv_fp8x2_storage_t *)&v;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(p[i], __NV_E4M3)));
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

/* ---- programmatic dependent launch ------------------------------------------
 *
 * A kernel the backend launches with cuda_launch may start while the kernel
 * before it on the stream is still finishing (Hopper's programmatic
 * dependent launch): its blocks become resident as the earlier kernel's
 * last blocks run, so the launch latency and the ramp of a small decode
 * kernel hide behind the previous one instead of following it.  The price
 * is one rule for every such kernel: it calls pdl_wait() before it reads
 * anything an earlier kernel wrote and before it writes anything at all;
 * only constant data (weights) may be read before.  pdl_wait returns once
 * every earlier kernel has finished and its writes are visible; it is a
 * no-op for a kernel launched the ordinary way.  pdl_release() lets the
 * next kernel start its own blocks; each kernel calls it after its wait,
 * so at most the next kernel overlaps this one.  NANOLLM_PDL=0 launches
 * everything the ordinary way (for A/B measurements). */
static __device__ __forceinline__ void pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void pdl_release(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The least power of two >= x (1 for x <= 1): lane groups whose xor
 * reductions stay inside them. */
static __host__ __device__ constexpr int pow2_ceil(int x)
{
    return x <= 1 ? 1 : 2 * pow2_ceil((x + 1) / 2);
}

static __device__ __forceinline__ float round_bf16(float x)
{
    return __bfloat162float(__float2bfloat16(x));
}

/* One element of an RMSNorm as the reference rounds it: x / rms (inv is
 * 1 / rms) is rounded to bf16 before its weight w multiplies it; the
 * caller rounds the product. */
static __device__ __forceinline__ float rms_weighted1(float x, float inv, float w)
{
    return w * round_bf16(x * inv);
}

/* One element of SiLU-and-multiply as the reference rounds it: silu(gate)
 * is rounded to bf16 before it meets up. */
static __device__ __forceinline__ float silu_mul1(float g, float u)
{
    return round_bf16(g / (1.0f + __expf(-g))) * u;
}

#define NL_GEMM_PLAN_CACHE 256
#define NL_GEMM_DERIVED_CACHE 128 /* plans on a bucket's algorithm (gemm.cu) */

/* A cuBLASLt matmul prepared for one shape: descriptors plus the algorithm
 * the heuristic chose, kept so that repeated shapes (every decode step) skip
 * the heuristic query. */
typedef struct cuda_gemm_plan {
    int64_t m, n, k;
    cudaDataType_t out_type;
    bool bias;
    bool valid;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} cuda_gemm_plan;

/* p's cuBLASLt descriptors for out[n, m] = x[n, k] @ W[m, k]^T (+ bias),
 * bf16 operands, fp32 accumulation, out_type out; no algorithm yet
 * (gemm.cu; bench/gemm_probe times the same descriptors).  Release frees
 * them and marks p invalid; a plan never described is left alone. */
nl_status cuda_gemm_plan_describe(cuda_gemm_plan *p, int64_t m, int64_t n, int64_t k,
                                  cudaDataType_t out_type, bool bias);
void cuda_gemm_plan_release(cuda_gemm_plan *p);
/* p described, with the algorithm cuBLASLt's heuristic picks for a
 * workspace of workspace_bytes (the engine's plans; bench/pdl_probe's). */
nl_status cuda_gemm_plan_build(cuda_gemm_plan *p, cublasLtHandle_t lt, size_t workspace_bytes,
                               int64_t m, int64_t n, int64_t k, cudaDataType_t out_type,
                               bool bias);

typedef struct cuda_gemm_warm cuda_gemm_warm;

typedef struct cuda_backend {
    nl_backend base;
    int device;
    int num_sms;
    /* Kernel choices, read from the environment once at creation (the
     * switches are for A/B runs; README, "Environment"). */
    bool pdl;                  /* programmatic dependent launch (cuda_launch); */
                               /* NANOLLM_PDL=0: never                     */
    bool clusters;             /* kernels may launch in thread-block clusters; */
                               /* NANOLLM_CLUSTERS=0: never                */
    bool gemv;                 /* one-token linears on the GEMV (gemv.cu); */
                               /* NANOLLM_GEMV=0: cuBLASLt                 */
    bool dec_mma;              /* decode attention on tensor cores where it */
                               /* has a form; NANOLLM_DEC_MMA=0: never     */
    bool prefill_wide;         /* prefill attention at 128 rows a block;   */
                               /* NANOLLM_PREFILL_MT=1: 64                 */
    bool attn_generic;         /* NL_ATTN_GENERIC=1: the reference kernel  */
                               /* for every attention call                 */
    cudaStream_t stream;       /* every op is enqueued here, nothing else */
    cublasLtHandle_t lt;
    void *workspace;           /* cuBLASLt workspace, fixed at creation    */
    size_t workspace_bytes;
    /* Two pinned host buffers for weight uploads, used in turn: the host
     * converts into one while the other's copy runs (backend.cu). */
    void *staging[2];
    cudaEvent_t staged[2];     /* the last copy out of each has finished   */
    int staging_next;
    size_t staging_bytes;      /* each                                     */
    /* Device scratch for the partial results one op leaves for its own
     * next kernel (attention's context splits, the sampler's scan).  Ops
     * run in order on the one stream and none keeps partials past its
     * return, so they share it in turn; sized once at creation. */
    void *step_scratch;
    size_t step_scratch_bytes;
    cuda_gemm_plan plans[NL_GEMM_PLAN_CACHE];
    int next_plan;             /* round-robin replacement when full        */
    cuda_gemm_plan derived[NL_GEMM_DERIVED_CACHE]; /* ... on a bucket's algorithm */
    int next_derived;          /* round-robin too                          */
    struct cuda_gemm_warm *warm; /* plans being prepared ahead (gemm.cu)   */
    struct cuda_op_timer *timer; /* NANOLLM_PROFILE=ops; op_timer.cu       */
    cudaEvent_t fences[NL_FENCES]; /* fence_record's marks                 */
} cuda_backend;

struct nl_weight {
    int64_t rows, cols;
    bf16 *data; /* [rows, cols] */
};

static inline cuda_backend *cuda_be(nl_backend *be)
{
    return (cuda_backend *)be;
}

/* Launches kernel<<<grid, block, smem>>>(args...) on the backend's stream,
 * allowed to overlap the kernel before it where the device supports it
 * (see pdl_wait): every kernel launched here keeps that rule.  cluster > 1
 * groups each run of `cluster` blocks along x into a thread-block cluster
 * (grid.x a multiple of it), whose blocks run at once and may read each
 * other's shared memory. */
template <typename... Params, typename... Args>
static inline cudaError_t cuda_launch_clusters(const cuda_backend *be, void (*kernel)(Params...),
                                               dim3 grid, dim3 block, size_t smem,
                                               unsigned cluster, Args &&...args)
{
    cudaLaunchAttribute attrs[2];
    unsigned n = 0;
    if (be->pdl) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        attrs[n].id = cudaLaunchAttributeClusterDimension;
        attrs[n++].val.clusterDim = {cluster, 1, 1};
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = be->stream;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...);
}

template <typename... Params, typename... Args>
static inline cudaError_t cuda_launch(const cuda_backend *be, void (*kernel)(Params...), dim3 grid,
                                      dim3 block, size_t smem, Args &&...args)
{
    return cuda_launch_clusters(be, kernel, grid, block, smem, 1, static_cast<Args &&>(args)...);
}

/* Blocks of a kernel resident on one SM at the given block size and dynamic
 * shared memory (at least 1), asked of the runtime once per combination
 * (backend.cu).  A kernel that sizes its grid to the blocks that fit at once
 * launches at most this many per SM. */
int cuda_blocks_per_sm_of(const void *kernel, int threads, size_t smem);
template <typename... Params>
static inline int cuda_blocks_per_sm(void (*kernel)(Params...), int threads, size_t smem)
{
    return cuda_blocks_per_sm_of((const void *)kernel, threads, smem);
}

/* The largest thread-block cluster (16, 8, 4 or 2 blocks along x, 1: none)
 * of which the device can run at least one at a time for this kernel,
 * block size and dynamic shared memory; sizes past the portable 8 are
 * allowed for the kernel first.  Asked once per combination. */
int cuda_cluster_max_of(const void *kernel, int threads, size_t smem);
template <typename... Params>
static inline int cuda_cluster_max(void (*kernel)(Params...), int threads, size_t smem)
{
    return cuda_cluster_max_of((const void *)kernel, threads, smem);
}

/* The op entry points, one group per kernel file.  Each has exactly the
 * signature of its slot in nl_backend_ops, so backend.cu's op table points
 * at them directly. */
nl_status cuda_linear(nl_backend *b, void *out, const void *x, const nl_weight *w,
                      const nl_weight *bias, int32_t n);
nl_status cuda_linear_f32(nl_backend *b, float *out, const void *x, const nl_weight *w,
                          int32_t n);
nl_status cuda_norm_linear(nl_backend *b, void *out, void *xn, void *work, const void *x,
                           void *residual, const nl_weight *norm_w, float eps, const nl_weight *w,
                           const nl_weight *bias, int32_t n, bool silu_mul);
nl_status cuda_linear_add(nl_backend *b, void *residual, void *work, const void *x,
                          const nl_weight *w, const nl_weight *bias, int32_t n);
nl_status cuda_embedding(nl_backend *b, void *out, const nl_weight *table, const int32_t *ids,
                         int32_t n, int32_t vocab_start);
nl_status cuda_rmsnorm(nl_backend *b, void *out, const void *x, void *residual,
                       const nl_weight *w, int32_t n, int32_t dim, float eps);
/* Slots are absolute, so block_size is not needed here. */
nl_status cuda_qk_norm_rope_store(nl_backend *b, void *qkv, const int32_t *positions,
                                  const nl_weight *q_norm, const nl_weight *k_norm,
                                  const float *inv_freq, void *k_cache, void *v_cache,
                                  const int32_t *slots, int32_t n, int32_t hq, int32_t hk,
                                  int32_t hd, float eps, int32_t block_size, nl_dtype kv_dtype);
/* Steps of norm_linear and linear_add where the GEMV does not fuse them:
 * out[n, inter] = silu(gate_up[:, :inter]) * gate_up[:, inter:], and
 * residual[i] += x[i] for count elements (bf16, rounded once). */
nl_status cuda_silu_mul(nl_backend *b, void *out, const void *gate_up, int32_t n,
                        int32_t inter);
nl_status cuda_add(nl_backend *b, void *residual, const void *x, size_t count);

/* The one-token GEMV (gemv.cu).  cuda_gemv_fits: whether it takes x @ w^T
 * for n tokens (never with be->gemv off).  cuda_gemv: out[w.rows] (fp32 or
 * bf16) = x @ w^T + bias, with the steps it can fuse: norm_w given, x is a residual stream that it
 * normalises first (w.cols <= CUDA_GEMV_NORM_MAX_COLS); the epilogue
 * GEMV_SILU_MUL (w holds gate then up rows; out[w.rows / 2]) or GEMV_ADD
 * (out is a residual stream the product is added into). */
enum { GEMV_STORE, GEMV_SILU_MUL, GEMV_ADD };
/* The normalised copy lives in dynamic shared memory, which (with the
 * kernel's own few bytes) must stay within the 48 KiB a launch gets without
 * opting in: 16,384 columns take 32 KiB. */
#define CUDA_GEMV_NORM_MAX_COLS 16384
bool cuda_gemv_fits(const cuda_backend *be, const void *x, const nl_weight *w, int32_t n);
nl_status cuda_gemv(cuda_backend *be, void *out, bool out_f32, int epilogue, const void *x,
                    const nl_weight *w, const nl_weight *bias, const nl_weight *norm_w, float eps);
nl_status cuda_take_ids(nl_backend *b, int32_t *ids, const int32_t *src, const int32_t *pairs, int32_t n);
nl_status cuda_copy_pieces(nl_backend *b, const nl_copy_piece *pieces, int32_t n);
nl_status cuda_gather_rows(nl_backend *b, void *out, const void *x, const int32_t *rows,
                           int32_t m, int32_t dim);
nl_status cuda_attention(nl_backend *b, void *out, const void *qkv, const void *k_cache,
                         const void *v_cache, const nl_attn_batch *batch, int32_t hq,
                         int32_t hk, int32_t hd, float scale, nl_dtype kv_dtype);
nl_status cuda_sample(nl_backend *b, const float *logits, int32_t m, int32_t vocab,
                      const nl_sample_row *rows, int32_t *ids, float *logprobs,
                      int32_t *top_ids, float *top_logprobs);

/* Op timing with CUDA events (op_timer.cu): the timer_mark and
 * timer_collect slots, and the timer's release at the backend's destruction. */
nl_status cuda_timer_mark(nl_backend *b, int32_t tag);
nl_status cuda_timer_collect(nl_backend *b, double *secs, int32_t n_tags);
void cuda_timer_release(cuda_backend *be);

/* Plans prepared ahead on helper threads (gemm.cu): the linear_warm_start
 * and linear_warm_join slots. */
nl_status cuda_linear_warm_start(nl_backend *b, const nl_linear_shape *shapes, int32_t n);
nl_status cuda_linear_warm_join(nl_backend *b);

/* Frees the GEMM plan cache (gemm.cu), at the backend's destruction; waits
 * for plans still being prepared first. */
void cuda_gemm_release_plans(cuda_backend *be);

#endif
