/* probe_check.h — the device probes' error check: a failed CUDA call ends
 * the program with its file, line and message (a probe has nothing to
 * recover). */
#ifndef NL_BENCH_PROBE_CHECK_H
#define NL_BENCH_PROBE_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));     \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#endif
