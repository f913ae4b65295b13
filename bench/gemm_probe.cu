/* gemm_probe.cu — how fast cuBLASLt can run a decode batch's projections,
 * over every configuration it accepts, against the one its heuristic picks.
 *
 * The engine runs out[n, m] = x[n, k] @ W[m, k]^T (bf16 in and out, fp32
 * accumulation) with the heuristic's first algorithm (kernels/cuda/gemm.cu).
 * At decode batches of 8-256 tokens those GEMMs cost 5-9 us each against
 * 1-2.5 us of weight bytes.  This probe asks whether another configuration
 * of cuBLASLt's own kernels (tile, split-K and its reduction, stages,
 * cluster shape, swizzle) closes that gap, before any kernel of ours is
 * written for it.
 *
 * Each configuration is timed inside a CUDA graph of back-to-back GEMMs that
 * walk enough copies of W to cover three times the L2, so every GEMM reads
 * its weights from HBM as a decode step does.  The fastest is checked
 * against the heuristic's output.  Phase 1 walks algorithm x tile x stages
 * x split-K x reduction scheme from scratch; phase 2 varies stages and
 * cluster shape around the best five so far (the heuristic's answers
 * among them), then swizzle and custom option on the best.
 *
 *   gemm_probe [--shape NAME:M:K]... [--tokens N]...
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/probe_check.h"
#include "bench/probe_gemm.cuh"
#include "kernels/cuda/cuda_common.cuh"

#define LT(call) PROBE_CHECK(call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString)

#define WORKSPACE (32u << 20) /* the engine's */
#define REPLAYS 8
#define MAX_SHAPES 16
#define MAX_TOKENS 16
#define MAX_RUNS 3000 /* configurations timed a shape, at most */

typedef struct {
    const char *name;
    int m, k;
} shape;

/* What the timings are read against: the L2 the weights must outgrow, and
 * the memory's peak rate (double data rate over the bus), bytes a us. */
typedef struct {
    size_t l2;
    double hbm_bytes_per_us;
} device_facts;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    int id, tile, stages, splitk, scheme, swizzle, custom, cluster;
    double us;
} candidate;

typedef struct {
    cublasLtHandle_t lt;
    cuda_gemm_plan plan; /* the engine's descriptors (gemm.cu); the algorithm varies */
    int m, n, k, copies;
    __nv_bfloat16 *w, *x, *out;
    void *workspace;
    cudaStream_t stream;
} problem;

static void problem_open(problem *p, cublasLtHandle_t lt, int m, int n, int k, size_t l2)
{
    memset(p, 0, sizeof *p);
    p->lt = lt;
    p->m = m;
    p->n = n;
    p->k = k;
    size_t wbytes = (size_t)m * k * 2;
    p->copies = (int)((3 * l2 + wbytes - 1) / wbytes);
    if (p->copies < 4) p->copies = 4;
    CHECK(cudaMalloc(&p->w, wbytes * p->copies));
    CHECK(cudaMalloc(&p->x, (size_t)n * k * 2));
    CHECK(cudaMalloc(&p->out, (size_t)n * m * 2));
    CHECK(cudaMalloc(&p->workspace, WORKSPACE));
    CHECK(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
    probe_fill<<<1024, 256, 0, p->stream>>>(p->w, (size_t)m * k * p->copies, 1);
    probe_fill<<<256, 256, 0, p->stream>>>(p->x, (size_t)n * k, 2);
    CHECK(cudaStreamSynchronize(p->stream));
    if (cuda_gemm_plan_describe(&p->plan, m, n, k, CUDA_R_16BF, false) != NL_OK) {
        fprintf(stderr, "gemm_probe: %s\n", nl_last_error());
        exit(1);
    }
}

static void problem_close(problem *p)
{
    cuda_gemm_plan_release(&p->plan);
    cudaFree(p->w);
    cudaFree(p->x);
    cudaFree(p->out);
    cudaFree(p->workspace);
    cudaStreamDestroy(p->stream);
}

static bool run_one(problem *p, const cublasLtMatmulAlgo_t *algo, int copy)
{
    const float one = 1.0f, zero = 0.0f;
    const cuda_gemm_plan *g = &p->plan;
    return cublasLtMatmul(p->lt, g->desc, &one, p->w + (size_t)copy * p->m * p->k, g->a, p->x,
                          g->b, &zero, p->out, g->c, p->out, g->c, algo, p->workspace, WORKSPACE,
                          p->stream) == CUBLAS_STATUS_SUCCESS;
}

/* Microseconds a GEMM with algo, or -1 if it does not run. */
static double time_algo(problem *p, const cublasLtMatmulAlgo_t *algo)
{
    cublasLtMatmulHeuristicResult_t check;
    const cuda_gemm_plan *g = &p->plan;
    if (cublasLtMatmulAlgoCheck(p->lt, g->desc, g->a, g->b, g->c, g->c, algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > WORKSPACE)
        return -1;
    if (!run_one(p, algo, 0) || cudaStreamSynchronize(p->stream) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(p->stream, cudaStreamCaptureModeThreadLocal));
    bool ok = true;
    for (int c = 0; c < p->copies && ok; c++) ok = run_one(p, algo, c);
    CHECK(cudaStreamEndCapture(p->stream, &graph));
    if (!ok) {
        cudaGraphDestroy(graph);
        return -1;
    }
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, p->stream));
    const double us = probe_time_replays(exec, p->stream, REPLAYS);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return us / p->copies;
}

static void set_config(candidate *c)
{
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile,
                                         sizeof(uint32_t));
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages,
                                         sizeof(uint32_t));
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->splitk,
                                         sizeof(int32_t));
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                         &c->scheme, sizeof(uint32_t));
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                         &c->swizzle, sizeof(uint32_t));
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                         &c->custom, sizeof(uint32_t));
    uint16_t cl = (uint16_t)c->cluster;
    cublasLtMatmulAlgoConfigSetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl,
                                         sizeof cl);
}

static void read_config(candidate *c)
{
    size_t w;
    uint16_t cl = 0;
    c->tile = c->stages = c->scheme = c->swizzle = c->custom = 0;
    c->splitk = 1;
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_ID, &c->id,
                                         sizeof(int32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c->tile,
                                         sizeof(uint32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c->stages,
                                         sizeof(uint32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c->splitk,
                                         sizeof(int32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                         &c->scheme, sizeof(uint32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
                                         &c->swizzle, sizeof(uint32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                         &c->custom, sizeof(uint32_t), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&c->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl,
                                         sizeof cl, &w);
    c->cluster = cl;
}

static void print_candidate(const char *what, const candidate *c)
{
    printf("  %-10s %7.2f us  algo %d tile %d stages %d splitk %d scheme %d swizzle %d custom %d "
           "cluster %d\n",
           what, c->us, c->id, c->tile, c->stages, c->splitk, c->scheme, c->swizzle, c->custom,
           c->cluster);
}

/* An int-array capability of algo, at most cap entries; its count. */
static int cap_list(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr,
                    uint32_t *out, int cap)
{
    size_t need = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, NULL, 0, &need) != CUBLAS_STATUS_SUCCESS)
        return 0;
    int count = (int)(need / sizeof(uint32_t));
    if (count > cap) count = cap;
    if (count == 0) return 0;
    size_t w;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, out, count * sizeof(uint32_t), &w) !=
        CUBLAS_STATUS_SUCCESS)
        return 0;
    return count;
}

static uint32_t cap_u32(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr)
{
    uint32_t v = 0;
    size_t w;
    if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, &v, sizeof v, &w) != CUBLAS_STATUS_SUCCESS)
        return 0;
    return v;
}

/* Keeps the best `keep` of everything timed, fastest first. */
static void remember(candidate *best, int keep, const candidate *c)
{
    if (c->us < 0) return;
    for (int i = 0; i < keep; i++) {
        if (best[i].us < 0 || c->us < best[i].us) {
            memmove(&best[i + 1], &best[i], (keep - 1 - i) * sizeof *best);
            best[i] = *c;
            return;
        }
    }
}

static double max_diff_against(problem *p, const cublasLtMatmulAlgo_t *ref,
                               const cublasLtMatmulAlgo_t *algo)
{
    size_t count = (size_t)p->n * p->m;
    __nv_bfloat16 *a = (__nv_bfloat16 *)malloc(count * 2), *b = (__nv_bfloat16 *)malloc(count * 2);
    run_one(p, ref, 0);
    CHECK(cudaMemcpyAsync(a, p->out, count * 2, cudaMemcpyDeviceToHost, p->stream));
    run_one(p, algo, 0);
    CHECK(cudaMemcpyAsync(b, p->out, count * 2, cudaMemcpyDeviceToHost, p->stream));
    CHECK(cudaStreamSynchronize(p->stream));
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)__bfloat162float(a[i]) - (double)__bfloat162float(b[i]));
        if (d > worst) worst = d;
    }
    free(a);
    free(b);
    return worst;
}

static void probe_shape(cublasLtHandle_t lt, const shape *s, int n, const device_facts *dev,
                        double *sums)
{
    problem p;
    problem_open(&p, lt, s->m, n, s->k, dev->l2);
    printf("%s m %d k %d n %d (%d weight copies, %.2f MB each)\n", s->name, s->m, s->k, n,
           p.copies, (double)s->m * s->k * 2 / 1e6);

    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = WORKSPACE;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof ws));
    cublasLtMatmulHeuristicResult_t heur[32];
    int found = 0;
    const cuda_gemm_plan *g = &p.plan;
    LT(cublasLtMatmulAlgoGetHeuristic(lt, g->desc, g->a, g->b, g->c, g->c, pref, 32, heur, &found));
    cublasLtMatmulPreferenceDestroy(pref);

    candidate first = {}, best_heur = {};
    first.algo = heur[0].algo;
    read_config(&first);
    first.us = time_algo(&p, &first.algo);
    best_heur = first;
    for (int i = 1; i < found; i++) {
        candidate c = {};
        c.algo = heur[i].algo;
        read_config(&c);
        c.us = time_algo(&p, &c.algo);
        if (c.us > 0 && c.us < best_heur.us) best_heur = c;
    }

    enum { KEEP = 5 };
    candidate best[KEEP];
    for (int i = 0; i < KEEP; i++) best[i].us = -1;
    remember(best, KEEP, &best_heur);
    int ids[256], nids = 0, tried = 0;
    LT(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                CUDA_R_16BF, CUDA_R_16BF, 256, ids, &nids));
    static const int splits[] = {1, 2, 3, 4, 6, 8, 16};
    /* Tries base with each tile x stages x split-K x reduction scheme it
     * supports. */
    auto walk = [&](const candidate &base) {
        uint32_t tiles[128], stages[64];
        int ntiles = cap_list(&base.algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, 128);
        if (ntiles == 0) tiles[ntiles++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
        int nstages = cap_list(&base.algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, 64);
        if (nstages == 0) stages[nstages++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
        const bool splitk_ok = cap_u32(&base.algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
        const uint32_t schemes = cap_u32(&base.algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
        for (int t = 0; t < ntiles; t++)
            for (int st = 0; st < nstages; st++)
                for (int si = 0; si < (int)(sizeof splits / sizeof *splits); si++) {
                    if (splits[si] > 1 && !splitk_ok) break;
                    for (uint32_t sc = 0; sc <= 4; sc = sc ? sc << 1 : 1) {
                        if (splits[si] == 1 && sc != 0) break;
                        if (splits[si] > 1 && (sc == 0 || !(schemes & sc))) continue;
                        if (tried >= MAX_RUNS) return;
                        candidate c = base;
                        c.tile = tiles[t];
                        c.stages = stages[st];
                        c.splitk = splits[si];
                        c.scheme = sc;
                        set_config(&c);
                        c.us = time_algo(&p, &c.algo);
                        tried += c.us > 0;
                        remember(best, KEEP, &c);
                    }
                }
    };
    /* Phase 1: every algorithm from scratch.  (Walking each heuristic
     * answer's own tiles and split-K the same way ran no configuration on
     * an H100, so it is left out.) */
    for (int a = 0; a < nids; a++) {
        candidate base = {};
        if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, CUDA_R_16BF, ids[a],
                                   &base.algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        base.id = ids[a];
        walk(base);
    }
    const int from_scratch = tried;
    /* Phase 2: stages and cluster shape around the best five, then swizzle and
     * custom option on the best of those. */
    candidate top[KEEP];
    memcpy(top, best, sizeof top);
    static const int clusters[] = {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1,
                                   CUBLASLT_CLUSTER_SHAPE_2x1x1, CUBLASLT_CLUSTER_SHAPE_1x2x1,
                                   CUBLASLT_CLUSTER_SHAPE_4x1x1};
    for (int i = 0; i < KEEP; i++) {
        if (top[i].us < 0) continue;
        uint32_t stages[64];
        int nstages = cap_list(&top[i].algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, 64);
        for (int st = -1; st < nstages; st++)
            for (int cl = 0; cl < (int)(sizeof clusters / sizeof *clusters); cl++) {
                candidate c = top[i];
                c.stages = st < 0 ? top[i].stages : (int)stages[st];
                c.cluster = clusters[cl];
                set_config(&c);
                c.us = time_algo(&p, &c.algo);
                tried += c.us > 0;
                remember(best, KEEP, &c);
            }
    }
    candidate lead = best[0];
    uint32_t swz = cap_u32(&lead.algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT);
    uint32_t custom_max = cap_u32(&lead.algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
    if (custom_max > 16) custom_max = 16;
    for (uint32_t sw = 0; sw <= (swz ? 1u : 0u); sw++)
        for (uint32_t cu = 0; cu <= custom_max; cu++) {
            candidate c = lead;
            c.swizzle = sw;
            c.custom = cu;
            set_config(&c);
            c.us = time_algo(&p, &c.algo);
            tried += c.us > 0;
            remember(best, KEEP, &c);
        }
    double diff = max_diff_against(&p, &first.algo, &best[0].algo);
    double floor_us = (double)s->m * s->k * 2 / dev->hbm_bytes_per_us;
    print_candidate("heuristic", &first);
    print_candidate("best-heur", &best_heur);
    for (int i = 0; i < KEEP && best[i].us > 0; i++) print_candidate(i ? "next" : "best", &best[i]);
    printf("  => %s n %d: heuristic %.2f us, best %.2f us (x%.2f), %d configurations ran "
           "(%d from scratch), %d algorithms, max |diff| %.3g, weight bytes at %.2f TB/s "
           "%.2f us\n",
           s->name, n, first.us, best[0].us, first.us / best[0].us, tried, from_scratch, nids,
           diff, dev->hbm_bytes_per_us / 1e6, floor_us);
    fflush(stdout);
    sums[0] += first.us;
    sums[1] += best[0].us;
    problem_close(&p);
}

int main(int argc, char **argv)
{
    shape shapes[MAX_SHAPES];
    int nshapes = 0, tokens[MAX_TOKENS], ntokens = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc && nshapes < MAX_SHAPES) {
            char *spec = argv[++i], *c1 = strchr(spec, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c1 || !c2) {
                fprintf(stderr, "gemm_probe: --shape wants NAME:M:K, got '%s'\n", spec);
                return 2;
            }
            *c1 = '\0';
            shapes[nshapes].name = spec;
            shapes[nshapes].m = atoi(c1 + 1);
            shapes[nshapes].k = atoi(c2 + 1);
            if (shapes[nshapes].m <= 0 || shapes[nshapes].k <= 0) {
                fprintf(stderr, "gemm_probe: --shape %s has no positive M and K\n", spec);
                return 2;
            }
            nshapes++;
        } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc && ntokens < MAX_TOKENS) {
            tokens[ntokens] = atoi(argv[++i]);
            if (tokens[ntokens] <= 0) {
                fprintf(stderr, "gemm_probe: --tokens wants a positive count\n");
                return 2;
            }
            ntokens++;
        } else {
            fprintf(stderr,
                    "usage: gemm_probe [--shape NAME:M:K]... [--tokens N]...\n"
                    "unknown or incomplete option '%s'\n",
                    argv[i]);
            return 2;
        }
    }
    if (nshapes == 0) {
        /* Qwen3-0.6B's decode projections. */
        static const shape qwen3_06b[] = {
            {"qkv", 4096, 1024}, {"o", 1024, 2048}, {"gate_up", 6144, 1024}, {"down", 1024, 3072}};
        memcpy(shapes, qwen3_06b, sizeof qwen3_06b);
        nshapes = 4;
    }
    if (ntokens == 0) {
        static const int defaults[] = {8, 64, 131, 256};
        memcpy(tokens, defaults, sizeof defaults);
        ntokens = 4;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int mem_khz = 0, bus_bits = 0;
    CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
    CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
    const device_facts dev = {(size_t)prop.l2CacheSize, 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e6};
    printf("%s, %d SMs, L2 %d MB, memory %.2f TB/s\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, dev.hbm_bytes_per_us / 1e6);
    cublasLtHandle_t lt;
    LT(cublasLtCreate(&lt));
    for (int t = 0; t < ntokens; t++) {
        double sums[2] = {0, 0};
        for (int s = 0; s < nshapes; s++) probe_shape(lt, &shapes[s], tokens[t], &dev, sums);
        printf("== n %d: a layer's projections, heuristic %.2f us, best %.2f us\n\n", tokens[t],
               sums[0], sums[1]);
    }
    cublasLtDestroy(lt);
    return 0;
}
