/* comm_ipc.cu — kernels/comm.h over CUDA IPC (see comm_ipc.h): the
 * one-shot and two-shot all-reduce, the all-gather, and the start-up
 * that maps every rank's buffer into every other rank.
 *
 * Memory.  Each rank allocates one device buffer at start-up and shares it
 * through cudaIpcGetMemHandle: a flag page (flags[block][rank], written by
 * peers), its own call counters (one per block), and two pairs of data
 * buffers, staging[2] and mid[2], CHUNK_BYTES each.  Larger tensors go
 * through in chunks, one kernel per chunk.
 *
 * One collective is one kernel of a fixed grid, so block b of every rank
 * handles the same elements in every call.  Block b counts its calls in
 * device memory (never a host value, which a CUDA graph would freeze), and
 * call c uses staging[c & 1] and mid[c & 1] and barrier values 2c and
 * 2c + 1.  A barrier of block b: write the value into every peer's
 * flags[b][me] with release order, then wait until flags[b][peer] has
 * reached it for every peer, with acquire order.  Flags only grow, so a
 * peer already one barrier ahead satisfies the wait too.  Alternating the
 * data buffers removes the barrier at the end of a call: a rank can only
 * reach call c + 2, and overwrite the buffers of call c, after every peer
 * has entered call c + 1, i.e. finished call c (one stream, in order).
 *
 * One-shot: copy my input into staging; barrier; every rank sums all
 * ranks' staging in rank order.  Two-shot: copy in; barrier; rank r sums
 * segment r into mid (reduce-scatter); barrier; every rank copies every
 * segment from its owner's mid (all-gather).  Both add rank 0's value, then
 * rank 1's, ... in fp32 and round once, so every rank gets the same bits.
 *
 * Faults.  Each wait reads the abort word (common/comm_area.h), mapped
 * from the shared area into device memory, every few hundred spins, and
 * gives up when it is set or when the wait has lasted longer than the
 * timeout (then it sets the word itself, so the peers give up too).  The
 * kernel then returns without finishing; the host learns of it from the
 * word (ipc_check, and every later call).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cuda/cuda_common.cuh"

extern "C" {
#include "common/comm_area.h"
#include "kernels/cuda/comm_ipc.h"
}

#define IPC_BLOCKS 32
#define IPC_THREADS 512
#define CHUNK_BYTES ((size_t)16 << 20)
#define FLAG_BYTES ((size_t)64 << 10)          /* flags, then counters      */
/* AUTO's crossover between GPUs of their own (not yet measured: the test
 * machine has one GPU).  Where ranks share a GPU, their contexts take turns
 * on it: every barrier costs tp - 1 scheduler time slices (2.27 ms each on
 * an H200, bench/RESULTS.md) whatever the size, so there one barrier
 * (one-shot) beats two at every size. */
#define ONE_SHOT_MAX_BYTES ((size_t)512 << 10)
#define SPINS_PER_CHECK 256

static_assert(IPC_BLOCKS * NL_COMM_IPC_MAX_RANKS * 4 + IPC_BLOCKS * 4 <= FLAG_BYTES,
              "flag page too small");

/* ---- the shared area ---------------------------------------------------- */

typedef struct ipc_slot {
    uint32_t ready;     /* 1 once handle is valid */
    int32_t device;     /* the rank's GPU         */
    uint8_t handle[64]; /* cudaIpcMemHandle_t     */
} ipc_slot;

typedef struct ipc_area {
    uint8_t head[NL_COMM_AREA_HEAD_BYTES]; /* the abort word's page */
    alignas(64) uint32_t arrived;
    alignas(64) uint32_t generation;
    alignas(64) ipc_slot slots[NL_COMM_IPC_MAX_RANKS];
} ipc_area;

static_assert(sizeof(cudaIpcMemHandle_t) == 64, "cudaIpcMemHandle_t size");
static_assert(sizeof(ipc_area) <= NL_COMM_IPC_AREA_BYTES, "area too small");

/* ---- what a kernel needs ------------------------------------------------ */

typedef struct ipc_args {
    char *staging[NL_COMM_IPC_MAX_RANKS][2]; /* every rank's, in my address space */
    char *mid[NL_COMM_IPC_MAX_RANKS][2];
    uint32_t *flags[NL_COMM_IPC_MAX_RANKS];  /* [IPC_BLOCKS][MAX_RANKS] each      */
    uint32_t *counters;                      /* mine, [IPC_BLOCKS]                */
    uint32_t *abort_word;                    /* host-mapped                       */
    uint64_t timeout_ns;
    int rank, size;
} ipc_args;

typedef struct ipc_comm {
    nl_comm base;
    ipc_area *area;
    cudaStream_t stream;
    int device;
    char *mine;                              /* my buffer                         */
    char *peer_base[NL_COMM_IPC_MAX_RANKS];  /* opened handles, NULL for me       */
    bool registered;                         /* the abort page                    */
    bool met;                                /* the first collective's host barrier */
    bool shared_device;                      /* two ranks of the group on one GPU */
    nl_comm_ipc_algo algo;
    double timeout_s;
    nl_comm_check_fn check;
    void *check_ctx;
    ipc_args args;
} ipc_comm;

/* ---- device side -------------------------------------------------------- */

__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t global_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Thread t < size waits for peer t; 0 when the group was aborted. */
__device__ int wait_flag(const ipc_args &a, const uint32_t *slot, uint32_t value)
{
    volatile uint32_t *abort_word = a.abort_word;
    uint64_t start = 0;
    for (uint32_t spin = 1;; spin++) {
        if ((int32_t)(ld_acquire_sys(slot) - value) >= 0) return 1;
        if (spin % SPINS_PER_CHECK) continue;
        if (*abort_word != NL_COMM_ABORT_NONE) return 0;
        uint64_t now = global_ns();
        if (start == 0) {
            start = now;
        } else if (now - start > a.timeout_ns) {
            if (*abort_word == NL_COMM_ABORT_NONE) *abort_word = NL_COMM_ABORT_TIMEOUT;
            __threadfence_system();
            return 0;
        }
    }
}

/* Block b of every rank meets; the block's writes before it are visible to
 * the peers' block b after it.  False (in every thread) when aborted. */
__device__ bool block_barrier(const ipc_args &a, uint32_t value)
{
    __syncthreads();
    int ok = 1;
    int t = threadIdx.x;
    if (t < a.size) {
        __threadfence_system();
        st_release_sys(a.flags[t] + blockIdx.x * NL_COMM_IPC_MAX_RANKS + a.rank, value);
        ok = wait_flag(a, a.flags[a.rank] + blockIdx.x * NL_COMM_IPC_MAX_RANKS + t, value);
    }
    return __syncthreads_and(ok) != 0;
}

/* The block's call number, advanced once per kernel. */
__device__ uint32_t next_call(const ipc_args &a)
{
    __shared__ uint32_t s_call;
    if (threadIdx.x == 0) {
        uint32_t c = a.counters[blockIdx.x] + 1;
        a.counters[blockIdx.x] = c;
        s_call = c;
    }
    __syncthreads();
    return s_call;
}

template <typename T, int V> struct alignas(sizeof(T) * V) pack {
    T v[V];
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

/* A load that skips L1: peers wrote these bytes in this kernel. */
template <typename P> __device__ __forceinline__ P load_cg(const P *p)
{
    static_assert(sizeof(P) == 16 || sizeof(P) == 4 || sizeof(P) == 2 || sizeof(P) == 1, "size");
    P out;
    if constexpr (sizeof(P) == 16) {
        uint4 v = __ldcg((const uint4 *)p);
        memcpy(&out, &v, 16);
    } else if constexpr (sizeof(P) == 4) {
        unsigned int v = __ldcg((const unsigned int *)p);
        memcpy(&out, &v, 4);
    } else if constexpr (sizeof(P) == 2) {
        unsigned short v = __ldcg((const unsigned short *)p);
        memcpy(&out, &v, 2);
    } else {
        unsigned char v = __ldcg((const unsigned char *)p);
        memcpy(&out, &v, 1);
    }
    return out;
}

/* Sum over ranks 0..size-1, in that order, of pack i of staging[.][par]. */
template <typename T, int V>
__device__ __forceinline__ pack<T, V> sum_ranks(const ipc_args &a, int par, int64_t i)
{
    typedef pack<T, V> P;
    float acc[V];
    P x = load_cg((const P *)a.staging[0][par] + i);
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = to_f32(x.v[k]);
    for (int r = 1; r < a.size; r++) {
        x = load_cg((const P *)a.staging[r][par] + i);
#pragma unroll
        for (int k = 0; k < V; k++) acc[k] += to_f32(x.v[k]);
    }
    P out;
#pragma unroll
    for (int k = 0; k < V; k++) out.v[k] = from_f32<T>(acc[k]);
    return out;
}

/* buf[n packs] = sum over ranks, in place. */
template <typename T, int V, bool TWO_SHOT>
__global__ void __launch_bounds__(IPC_THREADS) kernel_ipc_all_reduce(ipc_args a, pack<T, V> *buf,
                                                                    int64_t n)
{
    typedef pack<T, V> P;
    uint32_t call = next_call(a);
    int par = call & 1;
    P *mine = (P *)a.staging[a.rank][par];
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (!TWO_SHOT) {
        for (int64_t i = first; i < n; i += stride) mine[i] = buf[i];
        if (!block_barrier(a, 2 * call)) return;
        for (int64_t i = first; i < n; i += stride) buf[i] = sum_ranks<T, V>(a, par, i);
        return;
    }
    /* Element p * seg + j belongs to the block that owns j, in every
     * phase, so each phase only needs that block's barrier. */
    int64_t seg = (n + a.size - 1) / a.size;
    for (int64_t j = first; j < seg; j += stride)
        for (int p = 0; p < a.size; p++) {
            int64_t i = p * seg + j;
            if (i < n) mine[i] = buf[i];
        }
    if (!block_barrier(a, 2 * call)) return;
    P *mid = (P *)a.mid[a.rank][par];
    for (int64_t j = first; j < seg; j += stride) {
        int64_t i = a.rank * seg + j;
        if (i < n) mid[j] = sum_ranks<T, V>(a, par, i);
    }
    if (!block_barrier(a, 2 * call + 1)) return;
    for (int64_t j = first; j < seg; j += stride)
        for (int p = 0; p < a.size; p++) {
            int64_t i = p * seg + j;
            if (i < n) buf[i] = load_cg((const P *)a.mid[p][par] + j);
        }
}

/* Every rank: recv[r * recv_stride + i] = send of rank r [i], for i < n
 * units.  No barrier at the end, as the all-reduce's: a peer overwrites
 * these staging buffers only two calls later. */
template <typename U>
__global__ void __launch_bounds__(IPC_THREADS)
    kernel_ipc_all_gather(ipc_args a, const U *send, U *recv, int64_t n, int64_t recv_stride)
{
    uint32_t call = next_call(a);
    int par = call & 1;
    U *mine = (U *)a.staging[a.rank][par];
    int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = first; i < n; i += stride) mine[i] = send[i];
    if (!block_barrier(a, 2 * call)) return;
    for (int r = 0; r < a.size; r++) {
        const U *src = (const U *)a.staging[r][par];
        for (int64_t i = first; i < n; i += stride) recv[r * recv_stride + i] = load_cg(src + i);
    }
}

/* ---- host side ---------------------------------------------------------- */

static const char *abort_reason(uint32_t w, char *buf, size_t n)
{
    if (w >= NL_COMM_ABORT_RANK_FAILED)
        snprintf(buf, n, "rank %u could not join", w - NL_COMM_ABORT_RANK_FAILED);
    else if (w >= NL_COMM_ABORT_RANK_DEAD)
        snprintf(buf, n, "rank %u died", w - NL_COMM_ABORT_RANK_DEAD);
    else if (w == NL_COMM_ABORT_TIMEOUT)
        snprintf(buf, n, "a wait for a peer ran past its bound");
    else if (w == NL_COMM_ABORT_SHUTDOWN)
        snprintf(buf, n, "the group is shutting down");
    else
        snprintf(buf, n, "reason %u", w);
    return buf;
}

static uint32_t abort_word(ipc_comm *c)
{
    return __atomic_load_n((uint32_t *)c->area->head, __ATOMIC_ACQUIRE);
}

static nl_status ipc_check(nl_comm *base)
{
    ipc_comm *c = (ipc_comm *)base;
    uint32_t w = abort_word(c);
    if (w == NL_COMM_ABORT_NONE) return NL_OK;
    char why[64];
    return nl_error(NL_ERR_WORKER, "ipc all-reduce (rank %d of %d) abandoned: %s", base->rank,
                    base->size, abort_reason(w, why, sizeof why));
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Host-side wait for every rank (start-up and the first collective, when
 * ranks may be seconds apart: loading weights). */
static nl_status area_barrier(ipc_comm *c)
{
    ipc_area *a = c->area;
    uint32_t gen = __atomic_load_n(&a->generation, __ATOMIC_ACQUIRE);
    if (__atomic_fetch_add(&a->arrived, 1, __ATOMIC_ACQ_REL) == (uint32_t)c->base.size - 1) {
        __atomic_store_n(&a->arrived, 0, __ATOMIC_RELEASE);
        __atomic_fetch_add(&a->generation, 1, __ATOMIC_ACQ_REL);
        return NL_OK;
    }
    double last_check = now_s();
    while (__atomic_load_n(&a->generation, __ATOMIC_ACQUIRE) == gen) {
        usleep(200);
        NL_TRY(ipc_check(&c->base));
        if (c->check && now_s() - last_check > 0.05) {
            last_check = now_s();
            NL_TRY(c->check(c->check_ctx));
        }
    }
    return NL_OK;
}

static nl_status launch_all_reduce(ipc_comm *c, void *buf, int64_t units, int unit_elems,
                                   nl_dtype dtype, bool two_shot)
{
    dim3 grid(IPC_BLOCKS), block(IPC_THREADS);
#define IPC_LAUNCH(T, V)                                                                   \
    do {                                                                                   \
        if (two_shot)                                                                      \
            kernel_ipc_all_reduce<T, V, true>                                              \
                <<<grid, block, 0, c->stream>>>(c->args, (pack<T, V> *)buf, units);        \
        else                                                                               \
            kernel_ipc_all_reduce<T, V, false>                                             \
                <<<grid, block, 0, c->stream>>>(c->args, (pack<T, V> *)buf, units);        \
    } while (0)
    bool vec = unit_elems > 1;
    switch (dtype) {
    case NL_DTYPE_F32:
        if (vec) IPC_LAUNCH(float, 4); else IPC_LAUNCH(float, 1);
        break;
    case NL_DTYPE_BF16:
        if (vec) IPC_LAUNCH(bf16, 8); else IPC_LAUNCH(bf16, 1);
        break;
    case NL_DTYPE_F16:
        if (vec) IPC_LAUNCH(__half, 8); else IPC_LAUNCH(__half, 1);
        break;
    default:
        return nl_error(NL_ERR_INVALID_ARG, "ipc all-reduce: dtype %s cannot be summed",
                        nl_dtype_name(dtype));
    }
#undef IPC_LAUNCH
    NL_CUDA_CHECK_LAUNCH();
    return NL_OK;
}

/* Before any collective: the start-up meeting, and no work for a group
 * that has given up. */
static nl_status ipc_enter(ipc_comm *c)
{
    NL_TRY(ipc_check(&c->base));
    if (!c->met) {
        NL_TRY(area_barrier(c));
        c->met = true;
    }
    return NL_OK;
}

static nl_status ipc_all_reduce(nl_comm *base, void *buf, size_t count, nl_dtype dtype)
{
    ipc_comm *c = (ipc_comm *)base;
    if (count == 0 || base->size == 1) return NL_OK;
    NL_TRY(ipc_enter(c));
    size_t elem = nl_dtype_size(dtype);
    size_t bytes = count * elem;
    /* 16-byte packs when the buffer allows, single elements otherwise */
    int unit_elems = ((uintptr_t)buf % 16 == 0 && bytes % 16 == 0) ? (int)(16 / elem) : 1;
    size_t unit_bytes = (size_t)unit_elems * elem;
    size_t chunk_units = CHUNK_BYTES / unit_bytes;
    size_t units = bytes / unit_bytes;
    for (size_t off = 0; off < units; off += chunk_units) {
        size_t n = units - off < chunk_units ? units - off : chunk_units;
        bool two_shot = c->algo == NL_COMM_IPC_TWO_SHOT ||
                        (c->algo == NL_COMM_IPC_AUTO && !c->shared_device &&
                         n * unit_bytes > ONE_SHOT_MAX_BYTES);
        NL_TRY(launch_all_reduce(c, (char *)buf + off * unit_bytes, (int64_t)n, unit_elems, dtype,
                                 two_shot));
    }
    return NL_OK;
}

static nl_status ipc_all_gather(nl_comm *base, const void *send, void *recv, size_t count,
                                nl_dtype dtype)
{
    ipc_comm *c = (ipc_comm *)base;
    size_t bytes = count * nl_dtype_size(dtype);
    if (bytes == 0) return NL_OK;
    if (base->size == 1) {
        if (send != recv)
            NL_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, c->stream));
        return NL_OK;
    }
    NL_TRY(ipc_enter(c));
    bool wide = (uintptr_t)send % 16 == 0 && (uintptr_t)recv % 16 == 0 && bytes % 16 == 0;
    size_t unit = wide ? 16 : ((uintptr_t)send % 4 == 0 && (uintptr_t)recv % 4 == 0 && bytes % 4 == 0) ? 4 : 1;
    size_t units = bytes / unit, chunk_units = CHUNK_BYTES / unit;
    dim3 grid(IPC_BLOCKS), block(IPC_THREADS);
    for (size_t off = 0; off < units; off += chunk_units) {
        int64_t n = (int64_t)(units - off < chunk_units ? units - off : chunk_units);
        const char *s = (const char *)send + off * unit;
        char *r = (char *)recv + off * unit;
        if (unit == 16)
            kernel_ipc_all_gather<uint4><<<grid, block, 0, c->stream>>>(
                c->args, (const uint4 *)s, (uint4 *)r, n, (int64_t)units);
        else if (unit == 4)
            kernel_ipc_all_gather<uint32_t><<<grid, block, 0, c->stream>>>(
                c->args, (const uint32_t *)s, (uint32_t *)r, n, (int64_t)units);
        else
            kernel_ipc_all_gather<uint8_t><<<grid, block, 0, c->stream>>>(
                c->args, (const uint8_t *)s, (uint8_t *)r, n, (int64_t)units);
        NL_CUDA_CHECK_LAUNCH();
    }
    return NL_OK;
}

static void ipc_destroy(nl_comm *base)
{
    ipc_comm *c = (ipc_comm *)base;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int r = 0; r < NL_COMM_IPC_MAX_RANKS; r++)
        if (c->peer_base[r]) cudaIpcCloseMemHandle(c->peer_base[r]);
    if (c->registered) cudaHostUnregister(c->area->head);
    if (c->mine) cudaFree(c->mine);
    free(c);
}

static const nl_comm_ops ipc_ops = {
    .all_reduce_sum = ipc_all_reduce,
    .all_gather = ipc_all_gather,
    .destroy = ipc_destroy,
    .check = ipc_check,
};

extern "C" void nl_comm_ipc_set_algo(nl_comm *c, nl_comm_ipc_algo algo)
{
    ((ipc_comm *)c)->algo = algo;
}

extern "C" int nl_comm_ipc_usable(const int32_t *devices, int n)
{
    if (n < 1 || n > NL_COMM_IPC_MAX_RANKS) return 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (devices[i] == devices[j]) continue;
            int ok = 0;
            if (cudaDeviceCanAccessPeer(&ok, devices[i], devices[j]) != cudaSuccess) {
                cudaGetLastError();
                return 0;
            }
            if (!ok) return 0;
        }
    return 1;
}

/* A rank's allocation: the flag page, then staging[0], staging[1], mid[0],
 * mid[1]. */
static size_t staging_offset(int par) { return FLAG_BYTES + (size_t)par * CHUNK_BYTES; }
static size_t mid_offset(int par) { return FLAG_BYTES + (size_t)(2 + par) * CHUNK_BYTES; }
#define RANK_BYTES (FLAG_BYTES + 4 * CHUNK_BYTES)

static void point_args(ipc_comm *c, int r, char *base)
{
    for (int par = 0; par < 2; par++) {
        c->args.staging[r][par] = base + staging_offset(par);
        c->args.mid[r][par] = base + mid_offset(par);
    }
    c->args.flags[r] = (uint32_t *)base;
}

static nl_status ipc_join(ipc_comm *c, const nl_comm_ipc_params *p)
{
    ipc_area *a = c->area;
    int rank = p->rank, size = p->size;
    NL_CUDA_CHECK(cudaSetDevice(c->device));
    /* the abort word, readable from the kernels' spin loops */
    NL_CUDA_CHECK(cudaHostRegister(a->head, NL_COMM_AREA_HEAD_BYTES,
                                   cudaHostRegisterMapped | cudaHostRegisterPortable));
    c->registered = true;
    void *dev_abort = NULL;
    NL_CUDA_CHECK(cudaHostGetDevicePointer(&dev_abort, a->head, 0));
    c->args.abort_word = (uint32_t *)dev_abort;

    NL_CUDA_CHECK(cudaMalloc((void **)&c->mine, RANK_BYTES));
    NL_CUDA_CHECK(cudaMemset(c->mine, 0, FLAG_BYTES)); /* flags and counters start at 0 */
    NL_CUDA_CHECK(cudaDeviceSynchronize());
    point_args(c, rank, c->mine);
    c->args.counters = (uint32_t *)(c->mine + IPC_BLOCKS * NL_COMM_IPC_MAX_RANKS * 4);

    cudaIpcMemHandle_t h;
    NL_CUDA_CHECK(cudaIpcGetMemHandle(&h, c->mine));
    ipc_slot *mine = &a->slots[rank];
    memcpy(mine->handle, &h, sizeof h);
    mine->device = c->device;
    __atomic_store_n(&mine->ready, 1, __ATOMIC_RELEASE);
    NL_TRY(area_barrier(c));

    for (int r = 0; r < size; r++)
        for (int q = 0; q < r; q++)
            if (a->slots[r].device == a->slots[q].device) c->shared_device = true;
    for (int r = 0; r < size; r++) {
        if (r == rank) continue;
        ipc_slot *s = &a->slots[r];
        if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 1)
            return nl_error(NL_ERR_RUNTIME, "ipc all-reduce: rank %d published no buffer", r);
        memcpy(&h, s->handle, sizeof h);
        void *peer = NULL;
        cudaError_t e = cudaIpcOpenMemHandle(&peer, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess)
            return nl_error(NL_ERR_RUNTIME,
                            "ipc all-reduce: rank %d (device %d) cannot map the buffer of rank %d "
                            "(device %d): %s",
                            rank, c->device, r, s->device, cudaGetErrorString(e));
        c->peer_base[r] = (char *)peer;
        point_args(c, r, (char *)peer);
    }
    return NL_OK;
}

extern "C" nl_status nl_comm_ipc_create(const nl_comm_ipc_params *p, nl_backend *be, nl_comm **out)
{
    *out = NULL;
    if (p->size < 1 || p->size > NL_COMM_IPC_MAX_RANKS || p->rank < 0 || p->rank >= p->size)
        return nl_error(NL_ERR_INVALID_ARG, "ipc all-reduce: rank %d of %d (at most %d ranks)",
                        p->rank, p->size, NL_COMM_IPC_MAX_RANKS);
    if (!p->area || p->area_bytes < NL_COMM_IPC_AREA_BYTES ||
        (uintptr_t)p->area % NL_COMM_AREA_HEAD_BYTES != 0)
        return nl_error(NL_ERR_INVALID_ARG,
                        "ipc all-reduce: the shared area (%zu bytes) must be page-aligned and hold "
                        "%zu bytes", p->area_bytes, NL_COMM_IPC_AREA_BYTES);
    if (strcmp(be->ops->name, "cuda") != 0)
        return nl_error(NL_ERR_INVALID_ARG, "ipc all-reduce: backend '%s' is not cuda", be->ops->name);
    ipc_comm *c = (ipc_comm *)calloc(1, sizeof *c);
    if (!c) return nl_error(NL_ERR_NOMEM, "ipc all-reduce: communicator");
    c->base.ops = &ipc_ops;
    c->base.rank = p->rank;
    c->base.size = p->size;
    c->area = (ipc_area *)p->area;
    c->stream = (cudaStream_t)nl_backend_cuda_stream(be);
    c->device = nl_backend_cuda_device(be);
    c->timeout_s = p->timeout_s;
    if (p->timeout_s <= 0) { /* as for the CPU all-reduce */
        nl_status st = nl_comm_timeout_s(60.0, &c->timeout_s);
        if (st != NL_OK) {
            free(c);
            return st;
        }
    }
    c->check = p->check;
    c->check_ctx = p->check_ctx;
    c->args.rank = p->rank;
    c->args.size = p->size;
    c->args.timeout_ns = (uint64_t)(c->timeout_s * 1e9);
    if (p->size > 1) {
        nl_status s = ipc_join(c, p);
        if (s != NL_OK) {
            /* the peers stop waiting for this rank */
            uint32_t none = NL_COMM_ABORT_NONE;
            __atomic_compare_exchange_n((uint32_t *)c->area->head, &none,
                                        NL_COMM_ABORT_RANK_FAILED + (uint32_t)p->rank, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            ipc_destroy(&c->base);
            return s;
        }
    }
    *out = &c->base;
    return NL_OK;
}
