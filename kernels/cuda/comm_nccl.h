/* comm_nccl.h — the NCCL communicator of the CUDA backend (kernels/comm.h).
 *
 * Rank 0 makes a unique id, every worker receives it (over the command ring)
 * and creates its communicator on its own backend; collectives are enqueued
 * on the backend's stream, in order with the ops and inside CUDA graphs.
 */
#ifndef NL_KERNELS_CUDA_COMM_NCCL_H
#define NL_KERNELS_CUDA_COMM_NCCL_H

#include "kernels/comm.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NL_NCCL_UNIQUE_ID_BYTES 128

/* Writes NL_NCCL_UNIQUE_ID_BYTES bytes to out. */
nl_status nl_comm_nccl_unique_id(void *out);

/* Joins the group of size ranks named by unique_id as rank; every rank must
 * call it (concurrently) before any of them returns.  be must be a CUDA
 * backend; it must outlive the communicator. */
nl_status nl_comm_nccl_create(int rank, int size, const void *unique_id, nl_backend *be,
                              nl_comm **out);

#ifdef __cplusplus
}
#endif
#endif
