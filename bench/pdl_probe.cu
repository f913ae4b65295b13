/* pdl_probe.cu — whether cuBLASLt's GEMM kernels wait for the kernel before
 * them when the graph edge into them is made programmatic, and what such
 * edges would save a decode step.
 *
 * The engine launches its own kernels with programmatic stream
 * serialisation; each waits (griddepcontrol.wait) before it reads what an
 * earlier kernel wrote, so a captured graph holds programmatic edges into
 * them.  cuBLASLt launches the ordinary way, so the edge into each GEMM is
 * a full dependency: the GEMM's blocks are placed only once the kernel
 * before has drained and flushed.  If cuBLASLt's kernels wait themselves,
 * that edge could be made programmatic after capture.  This probe asks.
 *
 * Check, a shape and token count at a time: a graph of [zero x] ->
 * [one block that releases its dependents at once, spins SPIN_US, then
 * copies x from its source] -> [the GEMM reading x], the ordinary edges
 * between kernels made programmatic (the one into the GEMM, and any
 * between its own kernels).  A GEMM that waits produces the plain run's
 * output bit for bit; one that does not reads zeros.
 *
 * Time: a decode layer's chain, 28 times: [our kernel -> qkv GEMM -> our
 * kernel -> o GEMM -> our kernel -> gate_up GEMM -> our kernel -> down
 * GEMM], each "our kernel" launched with programmatic serialisation and
 * waiting as the engine's do; graph replays with the edges into the GEMMs
 * ordinary, then programmatic, and the two outputs compared.
 *
 *   pdl_probe [--tokens N]...
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/probe_check.h"
#include "bench/probe_gemm.cuh"
#include "kernels/cuda/cuda_common.cuh"

#define LT(call) PROBE_CHECK(call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString)

#define WORKSPACE (32u << 20)
#define SPIN_US 50
#define LAYERS 28
#define REPLAYS 20

typedef struct {
    const char *name;
    int m, k;
} shape;

/* Qwen3-0.6B's decode projections, in layer order. */
static const shape SHAPES[] = {{"qkv", 4096, 1024}, {"o", 1024, 2048},
                               {"gate_up", 6144, 1024}, {"down", 1024, 3072}};
#define N_SHAPES 4

/* One block: lets its dependents start, then copies src into x late. */
static __global__ void late_copy(__nv_bfloat16 *x, const __nv_bfloat16 *src, size_t count,
                                 long long spin_cycles)
{
    pdl_wait();
    pdl_release();
    const long long t0 = clock64();
    while (clock64() - t0 < spin_cycles) {
    }
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) x[i] = src[i];
}

/* An engine-like kernel between GEMMs: out[r, c] = in[r, c % in_cols] / 2. */
static __global__ void step(__nv_bfloat16 *out, const __nv_bfloat16 *in, int rows, int in_cols,
                            int out_cols)
{
    pdl_wait();
    pdl_release();
    const size_t count = (size_t)rows * out_cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / out_cols, c = i % out_cols;
        out[i] = __float2bfloat16(__bfloat162float(in[r * in_cols + c % in_cols]) * 0.5f);
    }
}

typedef struct {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace;
} ctx;

static void plan_for(ctx *c, cuda_gemm_plan *p, int m, int n, int k)
{
    if (cuda_gemm_plan_build(p, c->lt, WORKSPACE, m, n, k, CUDA_R_16BF, false) != NL_OK) {
        fprintf(stderr, "pdl_probe: %s\n", nl_last_error());
        exit(1);
    }
}

static void gemm(ctx *c, const cuda_gemm_plan *p, const __nv_bfloat16 *w, const __nv_bfloat16 *x,
                 __nv_bfloat16 *out)
{
    const float one = 1.0f, zero = 0.0f;
    LT(cublasLtMatmul(c->lt, p->desc, &one, w, p->a, x, p->b, &zero, out, p->c, out, p->c,
                      &p->algo, c->workspace, WORKSPACE, c->stream));
}

static void launch_pdl(ctx *c, void (*k)(__nv_bfloat16 *, const __nv_bfloat16 *, int, int, int),
                       __nv_bfloat16 *out, const __nv_bfloat16 *in, int rows, int in_cols,
                       int out_cols)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = dim3(264);
    cfg.blockDim = dim3(256);
    cfg.stream = c->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, k, out, in, rows, in_cols, out_cols));
}

/* Every ordinary edge between two kernel nodes made programmatic; returns
 * how many.  In these graphs those are exactly the edges into cuBLASLt's
 * kernels (ours are captured with programmatic edges already). */
static int edges_programmatic(cudaGraph_t g)
{
    size_t n = 0;
    CHECK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
    cudaGraphNode_t *from = (cudaGraphNode_t *)calloc(n + 1, sizeof *from);
    cudaGraphNode_t *to = (cudaGraphNode_t *)calloc(n + 1, sizeof *to);
    cudaGraphEdgeData *data = (cudaGraphEdgeData *)calloc(n + 1, sizeof *data);
    CHECK(cudaGraphGetEdges(g, from, to, data, &n));
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        cudaGraphNodeType tf, tt;
        CHECK(cudaGraphNodeGetType(from[i], &tf));
        CHECK(cudaGraphNodeGetType(to[i], &tt));
        if (tf != cudaGraphNodeTypeKernel || tt != cudaGraphNodeTypeKernel ||
            data[i].type != cudaGraphDependencyTypeDefault)
            continue;
        CHECK(cudaGraphRemoveDependencies(g, &from[i], &to[i], &data[i], 1));
        cudaGraphEdgeData e = {};
        e.type = cudaGraphDependencyTypeProgrammatic;
        e.from_port = cudaGraphKernelNodePortProgrammatic;
        CHECK(cudaGraphAddDependencies(g, &from[i], &to[i], &e, 1));
        changed++;
    }
    free(from);
    free(to);
    free(data);
    return changed;
}

static bool same(const __nv_bfloat16 *a, const __nv_bfloat16 *b, size_t count)
{
    __nv_bfloat16 *ha = (__nv_bfloat16 *)malloc(count * 2), *hb = (__nv_bfloat16 *)malloc(count * 2);
    CHECK(cudaMemcpy(ha, a, count * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hb, b, count * 2, cudaMemcpyDeviceToHost));
    const bool eq = memcmp(ha, hb, count * 2) == 0;
    free(ha);
    free(hb);
    return eq;
}

/* Does the GEMM of this shape and token count wait behind a programmatic
 * edge?  Prints the answer. */
static void check_waits(ctx *c, const shape *s, int n, long long spin_cycles)
{
    cuda_gemm_plan p;
    memset(&p, 0, sizeof p);
    plan_for(c, &p, s->m, n, s->k);
    __nv_bfloat16 *w, *x, *src, *ref, *out;
    CHECK(cudaMalloc(&w, (size_t)s->m * s->k * 2));
    CHECK(cudaMalloc(&x, (size_t)n * s->k * 2));
    CHECK(cudaMalloc(&src, (size_t)n * s->k * 2));
    CHECK(cudaMalloc(&ref, (size_t)n * s->m * 2));
    CHECK(cudaMalloc(&out, (size_t)n * s->m * 2));
    probe_fill<<<512, 256, 0, c->stream>>>(w, (size_t)s->m * s->k, 1);
    probe_fill<<<512, 256, 0, c->stream>>>(src, (size_t)n * s->k, 2);
    gemm(c, &p, w, src, ref);
    CHECK(cudaStreamSynchronize(c->stream));

    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    CHECK(cudaMemsetAsync(x, 0, (size_t)n * s->k * 2, c->stream));
    CHECK(cudaMemsetAsync(out, 0, (size_t)n * s->m * 2, c->stream));
    late_copy<<<1, 1024, 0, c->stream>>>(x, src, (size_t)n * s->k, spin_cycles);
    gemm(c, &p, w, x, out);
    CHECK(cudaStreamEndCapture(c->stream, &g));
    printf("  %-8s n %3d:\n", s->name, n);
    const int changed = edges_programmatic(g);
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    int good = 0;
    for (int r = 0; r < 5; r++) {
        CHECK(cudaGraphLaunch(exec, c->stream));
        CHECK(cudaStreamSynchronize(c->stream));
        good += same(out, ref, (size_t)n * s->m);
    }
    printf("    %d edge(s) made programmatic; output equal to the plain run's in %d of 5: %s\n",
           changed, good, good == 5 ? "WAITS" : "DOES NOT WAIT");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
    cuda_gemm_plan_release(&p);
    cudaFree(w);
    cudaFree(x);
    cudaFree(src);
    cudaFree(ref);
    cudaFree(out);
}

/* A decode step's 28 layers of projections with engine-like kernels
 * between them, timed with ordinary and programmatic edges into the GEMMs. */
static void time_chain(ctx *c, int n)
{
    cuda_gemm_plan p[N_SHAPES];
    __nv_bfloat16 *w[N_SHAPES], *in[N_SHAPES], *out[N_SHAPES];
    memset(p, 0, sizeof p);
    for (int i = 0; i < N_SHAPES; i++) {
        const shape *s = &SHAPES[i];
        plan_for(c, &p[i], s->m, n, s->k);
        /* a copy of the weights a layer, so that they come from HBM */
        CHECK(cudaMalloc(&w[i], (size_t)s->m * s->k * 2 * LAYERS));
        CHECK(cudaMalloc(&in[i], (size_t)n * s->k * 2));
        CHECK(cudaMalloc(&out[i], (size_t)n * s->m * 2));
        probe_fill<<<1024, 256, 0, c->stream>>>(w[i], (size_t)s->m * s->k * LAYERS, 10 + i);
        probe_fill<<<256, 256, 0, c->stream>>>(out[i], (size_t)n * s->m, 20 + i);
    }
    CHECK(cudaStreamSynchronize(c->stream));
    __nv_bfloat16 *result[2];
    float us[2];
    for (int mode = 0; mode < 2; mode++) {
        cudaGraph_t g;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
        for (int l = 0; l < LAYERS; l++)
            for (int i = 0; i < N_SHAPES; i++) {
                const shape *s = &SHAPES[i];
                const int prev = (i + N_SHAPES - 1) % N_SHAPES;
                launch_pdl(c, step, in[i], out[prev], n, SHAPES[prev].m, s->k);
                gemm(c, &p[i], w[i] + (size_t)l * s->m * s->k, in[i], out[i]);
            }
        CHECK(cudaStreamEndCapture(c->stream, &g));
        const int changed = mode ? edges_programmatic(g) : 0;
        CHECK(cudaGraphInstantiate(&exec, g, 0));
        for (int i = 0; i < N_SHAPES; i++)
            probe_fill<<<256, 256, 0, c->stream>>>(out[i], (size_t)n * SHAPES[i].m, 20 + i);
        CHECK(cudaGraphLaunch(exec, c->stream));
        CHECK(cudaStreamSynchronize(c->stream));
        CHECK(cudaMalloc(&result[mode], (size_t)n * SHAPES[N_SHAPES - 1].m * 2));
        CHECK(cudaMemcpy(result[mode], out[N_SHAPES - 1], (size_t)n * SHAPES[N_SHAPES - 1].m * 2,
                         cudaMemcpyDeviceToDevice));
        us[mode] = probe_time_replays(exec, c->stream, REPLAYS);
        if (mode) printf("  n %3d: %d edges made programmatic\n", n, changed);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(g);
    }
    const bool eq = same(result[0], result[1], (size_t)n * SHAPES[N_SHAPES - 1].m);
    printf("  n %3d: %d layers' projections %.1f us ordinary, %.1f us programmatic (%+.1f%%), "
           "outputs %s\n",
           n, LAYERS, us[0], us[1], 100.0 * (us[1] - us[0]) / us[0], eq ? "equal" : "DIFFER");
    for (int i = 0; i < N_SHAPES; i++) {
        cuda_gemm_plan_release(&p[i]);
        cudaFree(w[i]);
        cudaFree(in[i]);
        cudaFree(out[i]);
    }
    cudaFree(result[0]);
    cudaFree(result[1]);
}

int main(int argc, char **argv)
{
    int tokens[16] = {8, 64, 131, 256}, n_tokens = 4, given = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc && given < 16) {
            const int t = atoi(argv[++i]);
            if (t < 1 || t > 4096) {
                fprintf(stderr, "pdl_probe: --tokens %s: not 1-4096\n", argv[i]);
                return 2;
            }
            tokens[given++] = t;
            n_tokens = given;
        } else {
            fprintf(stderr, "usage: pdl_probe [--tokens N]...\n");
            return 2;
        }
    }
    ctx c;
    LT(cublasLtCreate(&c.lt));
    CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&c.workspace, WORKSPACE));
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const long long spin = (long long)clock_khz * SPIN_US / 1000;
    printf("GEMMs behind a programmatic edge (the kernel before spins %d us):\n", SPIN_US);
    for (int t = 0; t < n_tokens; t++)
        for (int i = 0; i < N_SHAPES; i++) check_waits(&c, &SHAPES[i], tokens[t], spin);
    printf("A decode step's projections:\n");
    for (int t = 0; t < n_tokens; t++) time_chain(&c, tokens[t]);
    return 0;
}
