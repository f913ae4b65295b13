/* gap_probe.cu — what a decode step costs on the device's queue besides its
 * graph.
 *
 * A stand-in forward (a CUDA graph of small kernels launched as dependent
 * launches, as the engine's are) is timed alone and wrapped the way a
 * worker wraps a graph decode step: a kernel that copies the step's inputs
 * from mapped host memory, a placeholder take, the graph, two sampler
 * kernels, a kernel that writes the samples to mapped host memory, and a
 * fence.  Each pattern runs STEPS steps twice and prints the device time a
 * step (events around the whole run), so the cost of the wrapping, and of
 * each way of pacing it from the host, reads as a difference of two lines.
 *
 * With --weights-mb M the forward's kernels also stream M MB a step, as a
 * decode step streams its weights: kernel i reads the i-th of `kernels`
 * equal slices of M MB held in --allocations separate device allocations
 * (default one), so the effect of the bytes and of how many allocations
 * they sit in can be told apart.
 *
 *   gap_probe [--kernels N] [--weights-mb M] [--allocations K]
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/probe_check.h"

#define STEPS 400
#define SLOTS 2 /* steps in flight, each with its own host copies */
#define SLOT_INTS 1024

static __device__ __forceinline__ void dependent_start(void)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* A small elementwise step over act[n]; with a weight slice, also a pass
 * over its bytes (their sum lands in act so the loads are kept). */
__global__ void kernel_step(float *act, int n, const float4 *weights, size_t n_vec)
{
    float sum = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_vec;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 w = weights[i];
        sum += w.x + w.y + w.z + w.w;
    }
    dependent_start();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        act[i] = act[i] * 0.999f + 1.0f + sum * 1e-30f;
}

__global__ void kernel_copy(int *dst, const volatile int *src, int n)
{
    dependent_start();
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

struct probe {
    cudaStream_t stream;
    float *act;
    int *dev, *host_in, *host_out; /* host_*: mapped, SLOTS x SLOT_INTS */
    int kernels;
    char **weights;     /* the weight allocations */
    size_t weight_bytes, alloc_bytes;
    bool dependent;     /* launch the wrapping kernels as dependent launches */
};

static void launch(const probe *p, bool dependent, int grid, void **args, const void *kernel)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = 256;
    cfg.stream = p->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = dependent ? 1 : 0;
    CHECK(cudaLaunchKernelExC(&cfg, kernel, args));
}

static void small_step(const probe *p, bool dependent, int grid, int n, const char *w, size_t bytes)
{
    float *act = p->act;
    const float4 *weights = (const float4 *)w;
    size_t n_vec = bytes / sizeof(float4);
    void *args[] = {&act, &n, &weights, &n_vec};
    launch(p, dependent, grid, args, (const void *)kernel_step);
}

static void copy(const probe *p, bool dependent, int *dst, const int *src, int n)
{
    void *args[] = {&dst, &src, &n};
    launch(p, dependent, 1, args, (const void *)kernel_copy);
}

/* The stand-in forward: `kernels` steps over a 2-wave activation, each
 * reading its slice of the weights. */
static void forward(const probe *p)
{
    const size_t slice = p->weight_bytes / (size_t)p->kernels / 16 * 16;
    for (int i = 0; i < p->kernels; i++) {
        const char *w = NULL;
        size_t bytes = 0;
        if (slice > 0) {
            const size_t at = slice * (size_t)i, alloc = at / p->alloc_bytes;
            w = p->weights[alloc] + at % p->alloc_bytes;
            bytes = slice < p->alloc_bytes - at % p->alloc_bytes ? slice : p->alloc_bytes - at % p->alloc_bytes;
        }
        small_step(p, true, 264, 264 * 256 * 2, w, bytes);
    }
}

/* Before the forward: the inputs up from the slot's host copy (or from
 * device memory), then the take. */
static void step_inputs(const probe *p, int slot, bool host)
{
    copy(p, p->dependent, p->dev, host ? p->host_in + slot * SLOT_INTS : p->dev + 4096, 600);
    small_step(p, p->dependent, 1, 256, NULL, 0);
}

/* After it: the sampler's two kernels, the samples down to the slot. */
static void step_outputs(const probe *p, int slot, bool host)
{
    small_step(p, p->dependent, 1, 256, NULL, 0);
    small_step(p, p->dependent, 1, 256, NULL, 0);
    copy(p, p->dependent, host ? p->host_out + slot * SLOT_INTS : p->dev + 8192, p->dev, 64);
}

static cudaGraphExec_t capture(const probe *p, bool whole_step, int slot)
{
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(p->stream, cudaStreamCaptureModeThreadLocal));
    if (whole_step) step_inputs(p, slot, true);
    forward(p);
    if (whole_step) step_outputs(p, slot, true);
    CHECK(cudaStreamEndCapture(p->stream, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    return exec;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

enum pattern {
    GRAPH_ALONE, GRAPH_FENCE, STEP_MAPPED, STEP_DEVICE, STEP_PLAIN_LAUNCHES, WHOLE_GRAPH,
    STEP_POLLED, WHOLE_GRAPH_POLLED, STEP_SYNCED, STEP_SYNCED_QUERY, STEP_SYNCED_HOST_WORK,
    PATTERNS
};

static const char *const pattern_names[PATTERNS] = {
    "graph alone, back to back",
    "graph + fence",
    "step: copy-in, take, graph, 2 sampler, copy-out, fence (host-mapped)",
    "same, device memory only",
    "same, outside kernels without PDL",
    "whole step as one graph + fence",
    "step, host paced 2 in flight (as the worker)",
    "whole-step graph, host paced 2 in flight",
    "step, paced by cudaEventSynchronize",
    "same, cudaStreamQuery after each launch",
    "step, paced by EventSynchronize with 30 us host work after",
};

int main(int argc, char **argv)
{
    probe p = {};
    p.kernels = 250;
    p.dependent = true;
    int allocations = 1;
    double weights_mb = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--kernels") == 0) p.kernels = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--weights-mb") == 0) weights_mb = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--allocations") == 0) allocations = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--kernels N] [--weights-mb M] [--allocations K]\n", argv[0]);
            return 2;
        }
    }
    if (p.kernels < 1 || allocations < 1 || weights_mb < 0) {
        fprintf(stderr, "gap_probe: --kernels and --allocations must be at least 1, --weights-mb not negative\n");
        return 2;
    }
    CHECK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&p.act, 64 << 20));
    CHECK(cudaMemset(p.act, 0, 64 << 20));
    CHECK(cudaMalloc(&p.dev, 1 << 20));
    CHECK(cudaMemset(p.dev, 0, 1 << 20));
    CHECK(cudaHostAlloc(&p.host_in, SLOTS * SLOT_INTS * sizeof(int), cudaHostAllocMapped));
    CHECK(cudaHostAlloc(&p.host_out, SLOTS * SLOT_INTS * sizeof(int), cudaHostAllocMapped));
    p.weight_bytes = (size_t)(weights_mb * (1 << 20)) / 16 * 16;
    if (p.weight_bytes > 0) {
        p.alloc_bytes = (p.weight_bytes + allocations - 1) / allocations;
        p.alloc_bytes = (p.alloc_bytes + 15) / 16 * 16;
        p.weights = (char **)calloc((size_t)allocations, sizeof *p.weights);
        for (int a = 0; a < allocations; a++) {
            CHECK(cudaMalloc(&p.weights[a], p.alloc_bytes));
            CHECK(cudaMemset(p.weights[a], 0, p.alloc_bytes));
        }
    }
    printf("%d kernels a forward, %.0f MB of weights a step in %d allocation(s)\n", p.kernels,
           weights_mb, p.weight_bytes ? allocations : 0);

    const cudaGraphExec_t fwd = capture(&p, false, 0);
    cudaGraphExec_t whole[SLOTS];
    for (int k = 0; k < SLOTS; k++) whole[k] = capture(&p, true, k);
    cudaEvent_t fence[SLOTS], t0, t1;
    for (int k = 0; k < SLOTS; k++) CHECK(cudaEventCreateWithFlags(&fence[k], cudaEventDisableTiming));
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));

    for (int pat = 0; pat < PATTERNS; pat++) {
        for (int rep = 0; rep < 2; rep++) {
            CHECK(cudaStreamSynchronize(p.stream));
            CHECK(cudaEventRecord(t0, p.stream));
            for (int i = 0; i < STEPS; i++) {
                const int slot = i % SLOTS;
                /* polled pacing: step i waits until step i - 2 has finished */
                if ((pat == STEP_POLLED || pat == WHOLE_GRAPH_POLLED) && i >= SLOTS)
                    while (cudaEventQuery(fence[slot]) == cudaErrorNotReady) {
                    }
                for (int j = 0; j < SLOT_INTS; j++) p.host_in[slot * SLOT_INTS + j] = i + j;
                p.dependent = pat != STEP_PLAIN_LAUNCHES;
                switch (pat) {
                case GRAPH_ALONE: CHECK(cudaGraphLaunch(fwd, p.stream)); break;
                case GRAPH_FENCE:
                    CHECK(cudaGraphLaunch(fwd, p.stream));
                    CHECK(cudaEventRecord(fence[slot], p.stream));
                    break;
                case WHOLE_GRAPH:
                case WHOLE_GRAPH_POLLED:
                    CHECK(cudaGraphLaunch(whole[slot], p.stream));
                    CHECK(cudaEventRecord(fence[slot], p.stream));
                    break;
                default: {
                    const bool host = pat != STEP_DEVICE;
                    step_inputs(&p, slot, host);
                    CHECK(cudaGraphLaunch(fwd, p.stream));
                    step_outputs(&p, slot, host);
                    CHECK(cudaEventRecord(fence[slot], p.stream));
                    if (pat == STEP_SYNCED_QUERY) (void)cudaStreamQuery(p.stream);
                }
                }
                /* the worker's pacing: launch step i, then wait for step i - 1 */
                if (pat >= STEP_SYNCED && i >= 1) {
                    CHECK(cudaEventSynchronize(fence[(i - 1) % SLOTS]));
                    if (pat == STEP_SYNCED_HOST_WORK)
                        for (const double t = now_us(); now_us() - t < 30.0;) {
                        }
                }
            }
            CHECK(cudaEventRecord(t1, p.stream));
            CHECK(cudaEventSynchronize(t1));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, t0, t1));
            printf("%-72s %8.2f us a step\n", pattern_names[pat], ms * 1000.0f / STEPS);
        }
    }
    return 0;
}
