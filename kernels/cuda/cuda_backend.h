/* cuda_backend.h — what C code may know about the CUDA backend beyond the op
 * table: its stream and device, so that the NCCL communicator enqueues its
 * collectives in order with the ops; its plan count, for the tests.  Only
 * built with NL_HAVE_CUDA.
 */
#ifndef NL_KERNELS_CUDA_BACKEND_H
#define NL_KERNELS_CUDA_BACKEND_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend's stream as a cudaStream_t (void * keeps CUDA headers out). */
void *nl_backend_cuda_stream(nl_backend *be);
int nl_backend_cuda_device(nl_backend *be);
/* How many cuBLASLt plans (each an algorithm query) the backend holds. */
int nl_backend_cuda_plans(nl_backend *be);

#ifdef __cplusplus
}
#endif
#endif
