/* probe_fill.cuh — the GEMM probes' inputs: bf16 values in [-0.05, 0.05)
 * from a hash of the index and a seed, the same on every run. */
#ifndef NL_BENCH_PROBE_FILL_CUH
#define NL_BENCH_PROBE_FILL_CUH

#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
