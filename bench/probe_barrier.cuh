/* probe_barrier.cuh — what the persistent-kernel probes (barrier_probe,
 * ring_probe) share: their grid barrier, an arrival counter and a
 * generation word in global memory, and the timing of one cooperative
 * launch.  One thread a block calls grid_arrive_wait, after the
 * block's own barrier has gathered its threads and before the one that
 * releases them: the last block to arrive resets the count and opens the
 * next generation, the others wait for it.  gen: the block's copy of the
 * generation it waits to leave (read from b->generation at the start). */
#ifndef NL_BENCH_PROBE_BARRIER_CUH
#define NL_BENCH_PROBE_BARRIER_CUH

#include "bench/probe_check.h"

struct barrier {
    unsigned int count, generation;
};

/* How an arrival orders the memory operations before it:
 *   FENCE_SC       a full fence (__threadfence) before a relaxed atomic;
 *   FENCE_RELEASE  the atomic itself a release (atom.add.release.gpu);
 *   FENCE_NONE     relaxed: no data may be handed across such a barrier,
 *                  it measures what the ordering costs. */
enum probe_fence { FENCE_SC, FENCE_RELEASE, FENCE_NONE };

template <probe_fence F = FENCE_SC>
static __device__ __forceinline__ void grid_arrive_wait(barrier *b, unsigned int *gen)
{
    const unsigned int g = *gen;
    if (F == FENCE_SC) __threadfence();
    unsigned int before;
    if (F == FENCE_RELEASE)
        asm volatile("atom.add.release.gpu.global.u32 %0, [%1], 1;"
                     : "=r"(before)
                     : "l"(&b->count)
                     : "memory");
    else
        before = atomicAdd(&b->count, 1u);
    if (before == gridDim.x - 1) {
        b->count = 0;
        if (F == FENCE_SC) __threadfence();
        if (F == FENCE_RELEASE)
            asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(&b->generation), "r"(g + 1)
                         : "memory");
        else
            atomicExch(&b->generation, g + 1);
    } else {
        unsigned int now;
        do {
            if (F == FENCE_NONE)
                asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(&b->generation));
            else
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(&b->generation));
        } while (now == g);
    }
    *gen = g + 1;
}

/* The SMs of the current device, one resident block each in the probes'
 * cooperative launches; a device without cooperative launch ends the
 * program (prog names it). */
static inline int probe_cooperative_sms(const char *prog)
{
    int dev = 0, sms = 0, coop = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) {
        fprintf(stderr, "%s: the device has no cooperative launch\n", prog);
        exit(1);
    }
    return sms;
}

/* A zeroed barrier in device memory. */
static inline barrier *probe_barrier_new(void)
{
    barrier *b;
    CHECK(cudaMalloc(&b, sizeof *b));
    CHECK(cudaMemset(b, 0, sizeof *b));
    return b;
}

/* Runs kernel as one cooperative launch of `blocks` x `threads` (smem
 * bytes of dynamic shared memory) and returns its device time in us over
 * `phases`: the us a phase. */
static inline double probe_us_a_phase(const void *kernel, int blocks, int threads, void **args,
                                      size_t smem, int phases)
{
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaEventRecord(t0));
    CHECK(cudaLaunchCooperativeKernel(kernel, blocks, threads, args, smem, 0));
    CHECK(cudaEventRecord(t1));
    CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
    return 1e3 * ms / phases;
}

#endif
