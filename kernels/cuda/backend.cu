/* backend.cu — the CUDA backend object: the device and its stream, device
 * memory, bf16 weights, CUDA graphs and the op table.
 *
 * Everything runs on one stream the backend owns.  Ops only enqueue work: the
 * cuBLASLt workspace, the step scratch (attention's split partials, the
 * sampler's scan partials) and the pinned staging buffers are allocated once
 * at creation, so a forward pass can be captured into a CUDA graph.  Kernels
 * live in the other files of this folder; their entry points fill the op
 * table as they are, with no forwarding layer between.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

#define WORKSPACE_BYTES (32u << 20)   /* what cuBLASLt asks for on Hopper    */
#define STAGING_BYTES (16u << 20)  /* each of the two staging buffers     */
#define CONVERT_THREADS 4          /* host threads converting one chunk    */
#define CONVERT_MIN_BYTES (2u << 20) /* smaller chunks convert on one thread */
#define STEP_SCRATCH_BYTES (64u << 20) /* bounds decode splits and sampler scans */

extern "C" int nl_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: not an error here */
        return 0;
    }
    return n;
}

extern "C" void *nl_backend_cuda_stream(nl_backend *be)
{
    return (void *)cuda_be(be)->stream;
}

extern "C" int nl_backend_cuda_device(nl_backend *be)
{
    return cuda_be(be)->device;
}

/* ---- memory ---------------------------------------------------------------- */

static nl_status cuda_alloc(nl_backend *b, size_t bytes, void **out)
{
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return nl_error(NL_ERR_NOMEM, "cuda: cannot allocate %zu bytes of device memory", bytes);
    }
    NL_CUDA_CHECK(e);
    return NL_OK;
}

static void cuda_free(nl_backend *b, void *ptr)
{
    if (ptr) cudaFree(ptr);
}

static nl_status cuda_upload(nl_backend *b, void *dst, const void *src, size_t bytes)
{
    /* Pageable host memory: the call returns once src is staged, so the
     * caller may reuse it, and the copy stays ordered with the ops. */
    NL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_be(b)->stream));
    return NL_OK;
}

static nl_status cuda_memset_zero(nl_backend *b, void *dst, size_t bytes)
{
    NL_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cuda_be(b)->stream));
    return NL_OK;
}

static nl_status cuda_synchronize(nl_backend *b)
{
    NL_CUDA_CHECK(cudaStreamSynchronize(cuda_be(b)->stream));
    return NL_OK;
}

static nl_status cuda_host_alloc(nl_backend *b, size_t bytes, void **out)
{
    *out = NULL;
    /* mapped: kernels read and write it too (copy_pieces) */
    NL_CUDA_CHECK(cudaHostAlloc(out, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable));
    return NL_OK;
}

static void cuda_host_free(nl_backend *b, void *ptr)
{
    if (ptr) cudaFreeHost(ptr);
}

/* Into any host memory: the copy, then a wait for it. */
static nl_status cuda_download(nl_backend *b, void *dst, const void *src, size_t bytes)
{
    NL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_be(b)->stream));
    return cuda_synchronize(b);
}

static nl_status fence_slot(int slot)
{
    if (slot < 0 || slot >= NL_FENCES) return nl_error(NL_ERR_INVALID_ARG, "cuda: fence slot %d", slot);
    return NL_OK;
}

static nl_status cuda_fence_record(nl_backend *b, int slot)
{
    NL_TRY(fence_slot(slot));
    NL_CUDA_CHECK(cudaEventRecord(cuda_be(b)->fences[slot], cuda_be(b)->stream));
    return NL_OK;
}

static nl_status cuda_fence_passed(nl_backend *b, int slot, bool *passed)
{
    NL_TRY(fence_slot(slot));
    cudaError_t e = cudaEventQuery(cuda_be(b)->fences[slot]);
    *passed = e == cudaSuccess;
    if (e == cudaErrorNotReady) return NL_OK;
    NL_CUDA_CHECK(e);
    return NL_OK;
}

static nl_status cuda_fence_wait(nl_backend *b, int slot)
{
    NL_TRY(fence_slot(slot));
    NL_CUDA_CHECK(cudaEventSynchronize(cuda_be(b)->fences[slot]));
    return NL_OK;
}

static nl_status cuda_memory_info(nl_backend *b, size_t *free_bytes, size_t *total_bytes)
{
    NL_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return NL_OK;
}

/* ---- weights --------------------------------------------------------------- */

static nl_status cuda_weight_create(nl_backend *b, int64_t rows, int64_t cols, nl_weight **out)
{
    *out = NULL;
    if (rows <= 0 || cols <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: weight shape [%lld, %lld] must be positive",
                        (long long)rows, (long long)cols);
    nl_weight *w = (nl_weight *)calloc(1, sizeof *w);
    if (!w) return nl_error(NL_ERR_NOMEM, "cuda: weight header");
    w->rows = rows;
    w->cols = cols;
    nl_status s = cuda_alloc(b, (size_t)rows * cols * sizeof(bf16), (void **)&w->data);
    if (s != NL_OK) {
        free(w);
        return nl_error_prefix(s, "weight [%lld, %lld]: ", (long long)rows, (long long)cols);
    }
    *out = w;
    return NL_OK;
}

static void convert_row_to_bf16(uint16_t *dst, const void *src, nl_dtype t, int64_t n)
{
    if (t == NL_DTYPE_BF16) {
        memcpy(dst, src, (size_t)n * 2);
    } else if (t == NL_DTYPE_F16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = nl_f32_to_bf16(nl_f16_to_f32(s[i]));
    } else {
        const float *s = (const float *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = nl_f32_to_bf16(s[i]);
    }
}

/* rows x cols source elements (rows src_pitch bytes apart) to packed bf16. */
typedef struct convert_job {
    uint16_t *dst;
    const char *src;
    size_t src_pitch;
    nl_dtype type;
    int64_t rows, cols;
} convert_job;

static void *convert_rows(void *arg)
{
    const convert_job *j = (const convert_job *)arg;
    for (int64_t r = 0; r < j->rows; r++)
        convert_row_to_bf16(j->dst + (size_t)r * j->cols, j->src + (size_t)r * j->src_pitch,
                            j->type, j->cols);
    return NULL;
}

/* Converts a chunk on CONVERT_THREADS threads: reading a checkpoint out of
 * the page cache is a memory copy that one core does at a few GB/s, slower
 * than the copy to the device it feeds. */
static void convert_rows_parallel(const convert_job *all)
{
    const int64_t bytes = all->rows * all->cols * 2;
    int n = bytes < (int64_t)CONVERT_MIN_BYTES || all->rows < CONVERT_THREADS ? 1 : CONVERT_THREADS;
    convert_job part[CONVERT_THREADS];
    pthread_t tid[CONVERT_THREADS];
    bool started[CONVERT_THREADS] = {false};
    for (int i = 0; i < n; i++) {
        const int64_t r0 = all->rows * i / n, r1 = all->rows * (i + 1) / n;
        part[i] = *all;
        part[i].dst += (size_t)r0 * all->cols;
        part[i].src += (size_t)r0 * all->src_pitch;
        part[i].rows = r1 - r0;
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, convert_rows, &part[i]) == 0;
    }
    convert_rows(&part[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else convert_rows(&part[i]); /* no thread to be had: do it here */
    }
}

/* Converts a chunk into the next staging buffer (once the copy that last
 * read it has finished) and copies it to dst behind the stream's earlier
 * work, without waiting: the host converts the next chunk meanwhile. */
static nl_status stage_and_send(cuda_backend *be, void *dst, const convert_job *job)
{
    const int i = be->staging_next;
    NL_CUDA_CHECK(cudaEventSynchronize(be->staged[i]));
    convert_job j = *job;
    j.dst = (uint16_t *)be->staging[i];
    convert_rows_parallel(&j);
    NL_CUDA_CHECK(cudaMemcpyAsync(dst, be->staging[i], (size_t)(j.rows * j.cols) * 2,
                                  cudaMemcpyHostToDevice, be->stream));
    NL_CUDA_CHECK(cudaEventRecord(be->staged[i], be->stream));
    be->staging_next = i ^ 1;
    return NL_OK;
}

/* Converts on the host, a chunk of whole rows at a time, into the pinned
 * staging buffers and copies each chunk up.  The copies are ordered on the
 * stream before every later op, so nothing waits for them here; the source
 * may go once this returns (it has been converted). */
static nl_status cuda_weight_fill_rows(nl_backend *b, nl_weight *w, int64_t row0, int64_t n_rows,
                                       const void *src, nl_dtype src_dtype, int64_t src_stride,
                                       int64_t src_col0)
{
    cuda_backend *be = cuda_be(b);
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: weight rows [%lld, %lld) outside [0, %lld)",
                        (long long)row0, (long long)(row0 + n_rows), (long long)w->rows);
    if (src_dtype != NL_DTYPE_F32 && src_dtype != NL_DTYPE_F16 && src_dtype != NL_DTYPE_BF16)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: weight source dtype %s",
                        nl_dtype_name(src_dtype));
    if (src_col0 < 0 || src_col0 + w->cols > src_stride)
        return nl_error(NL_ERR_INVALID_ARG,
                        "cuda: weight columns [%lld, %lld) outside source stride %lld",
                        (long long)src_col0, (long long)(src_col0 + w->cols),
                        (long long)src_stride);
    const size_t elem = nl_dtype_size(src_dtype), pitch = (size_t)src_stride * elem;
    const char *first = (const char *)src + (size_t)src_col0 * elem;
    const int64_t rows_per_chunk = (int64_t)(be->staging_bytes / ((size_t)w->cols * 2));
    if (rows_per_chunk < 1) {
        /* A row longer than a staging buffer: send it in pieces. */
        const int64_t per = (int64_t)(be->staging_bytes / 2);
        for (int64_t r = 0; r < n_rows; r++) {
            bf16 *drow = w->data + (size_t)(row0 + r) * w->cols;
            for (int64_t c = 0; c < w->cols; c += per) {
                const convert_job piece = {NULL, first + r * pitch + (size_t)c * elem, pitch,
                                           src_dtype, 1, w->cols - c < per ? w->cols - c : per};
                NL_TRY(stage_and_send(be, drow + c, &piece));
            }
        }
        return NL_OK;
    }
    for (int64_t r = 0; r < n_rows; r += rows_per_chunk) {
        const convert_job chunk = {NULL, first + (size_t)r * pitch, pitch, src_dtype,
                                   n_rows - r < rows_per_chunk ? n_rows - r : rows_per_chunk,
                                   w->cols};
        NL_TRY(stage_and_send(be, w->data + (size_t)(row0 + r) * w->cols, &chunk));
    }
    return NL_OK;
}

static void cuda_weight_destroy(nl_backend *b, nl_weight *w)
{
    if (!w) return;
    cudaFree(w->data);
    free(w);
}

/* ---- CUDA graphs --------------------------------------------------------------- */

struct nl_graph {
    cudaGraphExec_t exec;
};

static nl_status cuda_capture_begin(nl_backend *b)
{
    /* Thread-local mode: other threads of the process may keep using CUDA. */
    NL_CUDA_CHECK(cudaStreamBeginCapture(cuda_be(b)->stream, cudaStreamCaptureModeThreadLocal));
    return NL_OK;
}

static nl_status cuda_capture_end(nl_backend *b, nl_graph **out)
{
    *out = NULL;
    cudaGraph_t graph;
    NL_CUDA_CHECK(cudaStreamEndCapture(cuda_be(b)->stream, &graph));
    nl_graph *g = (nl_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(graph);
        return nl_error(NL_ERR_NOMEM, "cuda: graph handle");
    }
    cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        free(g);
        return NL_CUDA_FAIL("cudaGraphInstantiate", cudaGetErrorString(e));
    }
    *out = g;
    return NL_OK;
}

static nl_status cuda_graph_launch(nl_backend *b, nl_graph *g)
{
    NL_CUDA_CHECK(cudaGraphLaunch(g->exec, cuda_be(b)->stream));
    return NL_OK;
}

static void cuda_graph_destroy(nl_backend *b, nl_graph *g)
{
    if (!g) return;
    cudaGraphExecDestroy(g->exec);
    free(g);
}

/* ---- lifetime --------------------------------------------------------------- */

static void cuda_destroy(nl_backend *b)
{
    cuda_backend *be = cuda_be(b);
    if (!be) return;
    cudaSetDevice(be->device);
    if (be->stream) cudaStreamSynchronize(be->stream);
    cuda_gemm_release_plans(be);
    cuda_timer_release(be);
    if (be->lt) cublasLtDestroy(be->lt);
    cudaFree(be->workspace);
    cudaFree(be->step_scratch);
    for (int i = 0; i < 2; i++) {
        if (be->staging[i]) cudaFreeHost(be->staging[i]);
        if (be->staged[i]) cudaEventDestroy(be->staged[i]);
    }
    for (int i = 0; i < NL_FENCES; i++)
        if (be->fences[i]) cudaEventDestroy(be->fences[i]);
    if (be->stream) cudaStreamDestroy(be->stream);
    free(be);
}

static const nl_backend_ops cuda_ops = {
    .name = "cuda",
    .act_dtype = NL_DTYPE_BF16,
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .memset_zero = cuda_memset_zero,
    .synchronize = cuda_synchronize,
    .memory_info = cuda_memory_info,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .copy_pieces = cuda_copy_pieces,
    .fence_record = cuda_fence_record,
    .fence_passed = cuda_fence_passed,
    .fence_wait = cuda_fence_wait,
    .weight_create = cuda_weight_create,
    .weight_fill_rows = cuda_weight_fill_rows,
    .weight_destroy = cuda_weight_destroy,
    .embedding = cuda_embedding,
    .rmsnorm = cuda_rmsnorm,
    .linear = cuda_linear,
    .linear_f32 = cuda_linear_f32,
    .qk_norm_rope_store = cuda_qk_norm_rope_store,
    .attention = cuda_attention,
    .norm_linear = cuda_norm_linear,
    .linear_add = cuda_linear_add,
    .take_ids = cuda_take_ids,
    .gather_rows = cuda_gather_rows,
    .sample = cuda_sample,
    .linear_warm_start = cuda_linear_warm_start,
    .linear_warm_join = cuda_linear_warm_join,
    .timer_mark = cuda_timer_mark,
    .timer_collect = cuda_timer_collect,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
};

/* A fact the runtime gives about a kernel at a block size and dynamic
 * shared memory, asked once per combination: the worker drives its backend
 * from one thread, and the answers are the device's, the same for every
 * backend object of the process. */
typedef int (*kernel_fact)(const void *kernel, int threads, size_t smem);

static int remembered(kernel_fact ask, const void *kernel, int threads, size_t smem)
{
    static struct { kernel_fact ask; const void *kernel; int threads; size_t smem; int value; } seen[160];
    static int n_seen;
    const int room = (int)(sizeof seen / sizeof seen[0]);
    for (int i = 0; i < n_seen; i++)
        if (seen[i].ask == ask && seen[i].kernel == kernel && seen[i].threads == threads &&
            seen[i].smem == smem)
            return seen[i].value;
    const int value = ask(kernel, threads, smem);
    if (n_seen < room) seen[n_seen++] = {ask, kernel, threads, smem, value};
    return value;
}

static int ask_blocks_per_sm(const void *kernel, int threads, size_t smem)
{
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem) !=
            cudaSuccess || blocks < 1) {
        cudaGetLastError(); /* a launch of it would fail and say why */
        blocks = 1;
    }
    return blocks;
}

static int ask_cluster_max(const void *kernel, int threads, size_t smem)
{
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
        cudaSuccess)
        cudaGetLastError(); /* then only the portable sizes */
    for (unsigned size = 16; size > 1; size /= 2) {
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim = {size, 1, 1};
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(size);
        cfg.blockDim = dim3(threads);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess)
            cudaGetLastError();
        else if (clusters >= 1)
            return (int)size;
    }
    return 1;
}

int cuda_blocks_per_sm_of(const void *kernel, int threads, size_t smem)
{
    return remembered(ask_blocks_per_sm, kernel, threads, smem);
}

int cuda_cluster_max_of(const void *kernel, int threads, size_t smem)
{
    return remembered(ask_cluster_max, kernel, threads, smem);
}

/* Whether environment variable name is set to value. */
static bool env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

/* Whether environment variable name is set to anything but "" or "0". */
static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] != '\0' && strcmp(v, "0") != 0;
}

static nl_status backend_init(cuda_backend *be)
{
    NL_CUDA_CHECK(cudaSetDevice(be->device));
    NL_CUDA_CHECK(cudaDeviceGetAttribute(&be->num_sms, cudaDevAttrMultiProcessorCount,
                                         be->device));
    NL_CUDA_CHECK(cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking));
    int major = 0;
    NL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, be->device));
    be->pdl = major >= 9 && !env_is("NANOLLM_PDL", "0");
    be->clusters = major >= 9 && !env_is("NANOLLM_CLUSTERS", "0");
    be->gemv = !env_is("NANOLLM_GEMV", "0");
    be->dec_mma = !env_is("NANOLLM_DEC_MMA", "0");
    be->prefill_wide = !env_is("NANOLLM_PREFILL_MT", "1");
    be->attn_generic = env_on("NL_ATTN_GENERIC");
    NL_CUBLAS_CHECK(cublasLtCreate(&be->lt));
    be->workspace_bytes = WORKSPACE_BYTES;
    NL_CUDA_CHECK(cudaMalloc(&be->workspace, be->workspace_bytes));
    be->step_scratch_bytes = STEP_SCRATCH_BYTES;
    NL_CUDA_CHECK(cudaMalloc(&be->step_scratch, be->step_scratch_bytes));
    be->staging_bytes = STAGING_BYTES;
    for (int i = 0; i < 2; i++) {
        NL_CUDA_CHECK(cudaMallocHost(&be->staging[i], be->staging_bytes));
        NL_CUDA_CHECK(cudaEventCreateWithFlags(&be->staged[i], cudaEventDisableTiming));
    }
    for (int i = 0; i < NL_FENCES; i++)
        NL_CUDA_CHECK(cudaEventCreateWithFlags(&be->fences[i], cudaEventDisableTiming));
    return NL_OK;
}

extern "C" nl_status nl_backend_cuda_create(int device_index, nl_backend **out)
{
    *out = NULL;
    int count = nl_cuda_device_count();
    if (device_index < 0 || device_index >= count)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: device %d requested, %d visible",
                        device_index, count);
    cuda_backend *be = (cuda_backend *)calloc(1, sizeof *be);
    if (!be) return nl_error(NL_ERR_NOMEM, "cuda: backend object");
    be->base.ops = &cuda_ops;
    be->device = device_index;
    nl_status s = backend_init(be);
    if (s != NL_OK) {
        cuda_destroy(&be->base);
        return nl_error_prefix(s, "cuda device %d: ", device_index);
    }
    *out = &be->base;
    return NL_OK;
}
