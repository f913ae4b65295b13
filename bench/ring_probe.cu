/* ring_probe.cu — whether a persistent kernel's grid barriers disappear
 * under a weight stream that runs ahead of them (PERF_NOTES.md, "Next: a
 * persistent kernel whose weights stream through shared memory").
 *
 * One block an SM, all resident (a cooperative launch).  In each block
 * warp 0 is the producer: its lane 0 copies the block's share of each
 * phase's weights into a ring of shared-memory stages with bulk copies
 * (cp.async.bulk, completion counted in bytes on the stage's "full"
 * mbarrier), waiting only for a stage to be freed.  Warps 1-15 are the
 * consumers: they wait for a stage, sum its floats, free it (its "empty"
 * mbarrier) and, at the end of each phase, meet every other block's
 * consumers at a grid barrier (probe_barrier.cuh, as barrier_probe's).  The
 * producer never waits at the grid barrier, so the next phase's bytes keep
 * coming while the consumers wait there.  It prints, in us a phase:
 *   ring, barriers       the stream with a grid barrier every phase
 *                        (a full fence before each arrival);
 *   ring, release barriers   the same with release arrivals and acquire
 *                        waits instead of the fence;
 *   ring, relaxed barriers   with neither (no data could be handed over:
 *                        what the ordering costs);
 *   ring, no barriers    the same stream without them: the floor.
 * If the first is close to the second, a phase costs its bytes and the
 * barriers are hidden; barrier_probe's "slice loaded early" is the
 * register-preload design to compare with.
 *
 *   ring_probe [--mb-per-phase M] [--phases P] [--stage-kb K] [--stages S]
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/probe_barrier.cuh"

#define THREADS 512
#define CONSUMER_THREADS (THREADS - 32)
#define MAX_STAGES 8

static __device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}

/* The producer's arrival on a stage's "full" barrier, announcing the bytes
 * its copy will complete. */
static __device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}

/* Waits until the barrier's phase of the given parity has completed. */
static __device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
    uint32_t done;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_addr(b)), "r"(parity)
                     : "memory");
    } while (!done);
}

static __device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes,
                                                 uint64_t *full)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(full))
                 : "memory");
}

/* The consumers of every block meet (the producer warp does not take
 * part): named barrier 1 inside the block, then the probes' arrival
 * counter across blocks (probe_barrier.cuh). */
template <probe_fence F>
static __device__ __forceinline__ void consumers_barrier(barrier *b, unsigned int *gen)
{
    asm volatile("bar.sync 1, %0;" ::"r"(CONSUMER_THREADS) : "memory");
    if (threadIdx.x == 32) grid_arrive_wait<F>(b, gen);
    asm volatile("bar.sync 1, %0;" ::"r"(CONSUMER_THREADS) : "memory");
}

/* Chunk c of a block's share: its bytes (at most stage_bytes), the
 * stage it goes through (the it-th chunk of the whole stream) and that
 * stage's use count; producer and consumers walk the same sequence. */
struct chunk {
    unsigned off, bytes;
    int stage, use;
};

static __device__ __forceinline__ chunk chunk_of(int c, int it, unsigned share, unsigned stage_bytes,
                                                 int stages)
{
    const unsigned off = (unsigned)c * stage_bytes;
    return {off, share - off < stage_bytes ? share - off : stage_bytes, it % stages, it / stages};
}

/* Phase p streams slice p % slices; each block reads its `share` bytes of
 * it in chunks of at most stage_bytes, one stage each, in ring order. */
__global__ void __launch_bounds__(THREADS, 1)
    kernel_ring(const char *weights, size_t slice_bytes, int slices, int phases, unsigned share,
                unsigned stage_bytes, int stages, int barriers, barrier *b, float *sink)
{
    extern __shared__ __align__(128) char ring[];
    __shared__ __align__(8) uint64_t full[MAX_STAGES], empty[MAX_STAGES];
    __shared__ unsigned int gen;
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], (CONSUMER_THREADS / 32));
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        gen = b->generation;
    }
    __syncthreads();
    const int chunks = (int)((share + stage_bytes - 1) / stage_bytes);
    if (threadIdx.x < 32) { /* the producer */
        if (threadIdx.x != 0) return;
        int it = 0;
        for (int p = 0; p < phases; p++) {
            const char *src = weights + (size_t)(p % slices) * slice_bytes + (size_t)blockIdx.x * share;
            for (int c = 0; c < chunks; c++, it++) {
                const chunk k = chunk_of(c, it, share, stage_bytes, stages);
                if (k.use > 0) mbar_wait(&empty[k.stage], (k.use - 1) & 1); /* its last use is freed */
                mbar_expect_tx(&full[k.stage], k.bytes);
                bulk_copy(ring + (size_t)k.stage * stage_bytes, src + k.off, k.bytes, &full[k.stage]);
            }
        }
        return;
    }
    float sum = 0.0f;
    int it = 0;
    const int me = threadIdx.x - 32;
    for (int p = 0; p < phases; p++) {
        for (int c = 0; c < chunks; c++, it++) {
            const chunk k = chunk_of(c, it, share, stage_bytes, stages);
            mbar_wait(&full[k.stage], k.use & 1);
            const float4 *v = (const float4 *)(ring + (size_t)k.stage * stage_bytes);
            for (unsigned i = me; i < k.bytes / 16; i += CONSUMER_THREADS) {
                const float4 f = v[i];
                sum += f.x + f.y + f.z + f.w;
            }
            __syncwarp();
            if ((threadIdx.x & 31) == 0) mbar_arrive(&empty[k.stage]);
        }
        if (barriers == 1) consumers_barrier<FENCE_SC>(b, &gen);
        if (barriers == 2) consumers_barrier<FENCE_RELEASE>(b, &gen);
        if (barriers == 3) consumers_barrier<FENCE_NONE>(b, &gen);
    }
    if (sum == 1234.5f) sink[blockIdx.x * THREADS + threadIdx.x] = sum; /* keeps the reads */
}

int main(int argc, char **argv)
{
    double mb = 6.3;
    int phases = 2800, stage_kb = 48, stages = 4;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--mb-per-phase") == 0) mb = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--phases") == 0) phases = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--stage-kb") == 0) stage_kb = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--stages") == 0) stages = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--mb-per-phase M] [--phases P] [--stage-kb K] [--stages S]\n",
                    argv[0]);
            return 2;
        }
    }
    if (mb <= 0 || phases < 1 || stage_kb < 1 || stages < 2 || stages > MAX_STAGES) {
        fprintf(stderr, "ring_probe: --mb-per-phase > 0, --phases >= 1, --stage-kb >= 1, --stages in [2, %d]\n",
                MAX_STAGES);
        return 2;
    }
    const int sms = probe_cooperative_sms("ring_probe");
    int dev = 0, smem_max = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const size_t ring_bytes = (size_t)stages * stage_kb * 1024;
    if (ring_bytes > (size_t)smem_max) {
        fprintf(stderr, "ring_probe: the ring exceeds a block's shared memory (%d bytes)\n", smem_max);
        return 1;
    }
    CHECK(cudaFuncSetAttribute((const void *)kernel_ring, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)ring_bytes));
    /* 140 distinct slices, as a 0.6B step's phases: none is in L2 when read */
    const int slices = 140;
    const size_t slice_bytes = (size_t)(mb * (1 << 20)) / 16 * 16;
    const unsigned share = (unsigned)(slice_bytes / (size_t)sms / 16 * 16);
    const unsigned stage_bytes = (unsigned)stage_kb * 1024;
    char *weights;
    float *sink;
    barrier *b = probe_barrier_new();
    CHECK(cudaMalloc(&weights, slice_bytes * slices));
    CHECK(cudaMemset(weights, 0, slice_bytes * slices));
    CHECK(cudaMalloc(&sink, (size_t)sms * THREADS * sizeof(float)));
    printf("%d blocks (1 producer + %d consumer warps), %d phases of %.2f MB (%d slices), %d stages of %d KB\n",
           sms, CONSUMER_THREADS / 32, phases, mb, slices, stages, stage_kb);
    static const char *const names[] = {"ring, no barriers", "ring, barriers", "ring, release barriers",
                                        "ring, relaxed barriers"};
    for (int barriers = 0; barriers < 4; barriers++) {
        for (int rep = 0; rep < 3; rep++) {
            void *args[] = {&weights, (void *)&slice_bytes, (void *)&slices, &phases, (void *)&share,
                            (void *)&stage_bytes, &stages, &barriers, &b, &sink};
            const double us = probe_us_a_phase((const void *)kernel_ring, sms, THREADS, args, ring_bytes, phases);
            printf("%-24s %8.3f us a phase  %7.2f TB/s\n", names[barriers], us,
                   (double)share * sms / (us * 1e-6) / 1e12);
        }
    }
    return 0;
}
