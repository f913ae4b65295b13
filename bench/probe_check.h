/* probe_check.h — the device probes' error check: a failed CUDA (or, in
 * gemm_probe, cuBLASLt) call ends the program with its file, line and
 * message (a probe has nothing to recover). */
#ifndef NL_BENCH_PROBE_CHECK_H
#define NL_BENCH_PROBE_CHECK_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

/* A call returning a status of TYPE that must be OK; TEXT names a status. */
#define PROBE_CHECK(call, TYPE, OK, TEXT)                                                    \
    do {                                                                                     \
        TYPE e_ = (call);                                                                    \
        if (e_ != (OK)) {                                                                    \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, TEXT(e_));                   \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

#define CHECK(call) PROBE_CHECK(call, cudaError_t, cudaSuccess, cudaGetErrorString)

#endif
