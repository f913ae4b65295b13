/* probe_gemm.cuh — what the GEMM probes share: their inputs (bf16 values
 * in [-0.05, 0.05) from a hash of the index and a seed, the same on every
 * run) and the timing of a graph's replays. */
#ifndef NL_BENCH_PROBE_GEMM_CUH
#define NL_BENCH_PROBE_GEMM_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/probe_check.h"

static __global__ void probe_fill(__nv_bfloat16 *p, size_t count, uint32_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2bfloat16(((float)(h & 0xffff) / 65536.0f - 0.5f) * 0.1f);
    }
}

/* Microseconds a replay of exec, over `replays` back to back. */
static float probe_time_replays(cudaGraphExec_t exec, cudaStream_t stream, int replays)
{
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0, stream));
    for (int r = 0; r < replays; r++) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(t1, stream));
    CHECK(cudaEventSynchronize(t1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return ms * 1000.0f / replays;
}

#endif
