/* barrier_probe.cu — what a persistent decode kernel's phases would cost:
 * one block an SM, all resident (a cooperative launch), PHASES phases a
 * run, each streaming its slice of the weights and ending at a grid
 * barrier.  It prints, in µs a phase:
 *
 *   barrier only          the barrier alone (an arrival counter and a
 *                         generation word in global memory);
 *   stream, then barrier  each phase reads its slice, then arrives;
 *   slice loaded early    each block loads its share of the next phase's
 *                         slice into registers before it arrives, and
 *                         consumes it after (weights never depend on the
 *                         activations, so a real kernel can do this);
 *   stream, no barriers   the same bytes in one pass: the floor.
 *
 * The difference between the last three is what the barriers cost once
 * the weights stream under them.
 *
 *   barrier_probe [--mb-per-phase M] [--phases P] [--threads T]
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/probe_barrier.cuh"

#define EARLY 8 /* 16-byte loads a thread holds across the barrier */

/* Every thread of every block waits for the others. */
static __device__ __forceinline__ void grid_barrier(barrier *b, unsigned int *gen)
{
    __syncthreads();
    if (threadIdx.x == 0) grid_arrive_wait(b, gen);
    __syncthreads();
}

enum mode { BARRIER_ONLY, STREAM_THEN_BARRIER, LOADED_EARLY, NO_BARRIER };

/* Phase p reads slice p % slices of the weights (slice_vec float4 each). */
__global__ void kernel_phases(const float4 *weights, size_t slice_vec, int slices, int phases,
                              int mode, barrier *b, float *sink)
{
    __shared__ unsigned int gen;
    if (threadIdx.x == 0) gen = b->generation;
    __syncthreads();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    const size_t me = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float sum = 0.0f;
    float4 early[EARLY];
    if (mode == LOADED_EARLY)
        for (int k = 0; k < EARLY; k++) early[k] = me + k * stride < slice_vec ? weights[me + k * stride] : float4{};
    for (int p = 0; p < phases; p++) {
        const float4 *w = weights + (size_t)(p % slices) * slice_vec;
        if (mode == STREAM_THEN_BARRIER || mode == NO_BARRIER) {
            for (size_t i = me; i < slice_vec; i += stride) {
                const float4 v = w[i];
                sum += v.x + v.y + v.z + v.w;
            }
        } else if (mode == LOADED_EARLY) {
            for (int k = 0; k < EARLY; k++) sum += early[k].x + early[k].y + early[k].z + early[k].w;
            for (size_t i = me + EARLY * stride; i < slice_vec; i += stride) {
                const float4 v = w[i];
                sum += v.x + v.y + v.z + v.w;
            }
            const float4 *next = weights + (size_t)((p + 1) % slices) * slice_vec;
            for (int k = 0; k < EARLY; k++)
                early[k] = me + k * stride < slice_vec ? next[me + k * stride] : float4{};
        }
        if (mode != NO_BARRIER) grid_barrier(b, &gen);
    }
    if (sum == 1234.5f) sink[me] = sum; /* keeps the loads */
}

int main(int argc, char **argv)
{
    double mb = 6.3;
    int phases = 2800, threads = 512;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--mb-per-phase") == 0) mb = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--phases") == 0) phases = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--mb-per-phase M] [--phases P] [--threads T]\n", argv[0]);
            return 2;
        }
    }
    if (mb <= 0 || phases < 1 || threads < 32 || threads > 1024 || threads % 32) {
        fprintf(stderr, "barrier_probe: --mb-per-phase > 0, --phases >= 1, --threads a multiple of 32 in [32, 1024]\n");
        return 2;
    }
    const int sms = probe_cooperative_sms("barrier_probe");
    /* 140 distinct slices, as a 0.6B step's phases: none is in L2 when read */
    const int slices = 140;
    const size_t slice_vec = (size_t)(mb * (1 << 20)) / sizeof(float4);
    float4 *weights;
    float *sink;
    barrier *b = probe_barrier_new();
    CHECK(cudaMalloc(&weights, slice_vec * slices * sizeof(float4)));
    CHECK(cudaMemset(weights, 0, slice_vec * slices * sizeof(float4)));
    CHECK(cudaMalloc(&sink, (size_t)sms * threads * sizeof(float)));
    printf("%d blocks of %d threads, %d phases of %.2f MB (%d slices)\n", sms, threads, phases, mb, slices);
    static const char *const names[] = {"barrier only", "stream, then barrier", "slice loaded early",
                                        "stream, no barriers"};
    for (int mode = 0; mode < 4; mode++) {
        for (int rep = 0; rep < 3; rep++) {
            void *args[] = {&weights, (void *)&slice_vec, (void *)&slices, &phases, &mode, &b, &sink};
            const double us = probe_us_a_phase((const void *)kernel_phases, sms, threads, args, 0, phases);
            printf("%-24s %8.3f us a phase  %7.2f TB/s\n", names[mode], us,
                   mode == BARRIER_ONLY ? 0.0 : mb * (1 << 20) / (us * 1e-6) / 1e12);
        }
    }
    return 0;
}
