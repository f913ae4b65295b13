/* comm_ipc.h — the CUDA-IPC communicator (kernels/comm.h) for ranks of one
 * host whose GPUs are the same device or have peer access.
 *
 * Unlike NCCL it works when several ranks share one GPU, and its sums are
 * reproducible: every rank adds rank 0's values, then rank 1's, ... in fp32
 * and rounds once, so all ranks hold bit-identical results, equal to that
 * sum computed on the host.  Collectives are single kernels on the
 * backend's stream whose barriers are counters in device memory, so they
 * can be captured into CUDA graphs and replayed.
 *
 * The ranks meet in a shared area (a page-aligned region of the engine's
 * segment, NL_COMM_IPC_AREA_BYTES long, zeroed before any rank joins): the
 * abort word of common/comm_area.h, then each rank's IPC memory handle.
 * Every wait inside a kernel reads the abort word and gives up when it is
 * set or when the wait exceeds the timeout; the call that finds the group
 * aborted returns an error naming the reason.
 */
#ifndef NL_KERNELS_CUDA_COMM_IPC_H
#define NL_KERNELS_CUDA_COMM_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "common/comm_area.h"
#include "kernels/comm.h"
#include "kernels/comm_shm.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NL_COMM_IPC_MAX_RANKS 8
#define NL_COMM_IPC_AREA_BYTES NL_COMM_AREA_CUDA_BYTES

/* Which algorithm an all-reduce uses; AUTO picks one-shot up to a size and
 * two-shot (reduce-scatter, then all-gather) above it. */
typedef enum nl_comm_ipc_algo {
    NL_COMM_IPC_AUTO = 0,
    NL_COMM_IPC_ONE_SHOT,
    NL_COMM_IPC_TWO_SHOT,
} nl_comm_ipc_algo;

typedef struct nl_comm_ipc_params {
    void *area;          /* the shared area, page-aligned                    */
    size_t area_bytes;   /* at least NL_COMM_IPC_AREA_BYTES                  */
    int rank, size;      /* size 1..NL_COMM_IPC_MAX_RANKS                     */
    double timeout_s;    /* bound on any one wait; <= 0: $NANOLLM_COMM_TIMEOUT_S,
                          * else 60 s                                         */
    nl_comm_check_fn check; /* called between start-up wait slices; may be NULL */
    void *check_ctx;
} nl_comm_ipc_params;

/* True when every pair of the listed devices is the same device or has
 * peer access, i.e. ranks on them can use this communicator.  Every rank
 * computes the same answer from the same list. */
int nl_comm_ipc_usable(const int32_t *devices, int n);

/* Joins the group; every rank must call it (concurrently) before any of
 * them returns.  be must be a CUDA backend that outlives the communicator. */
nl_status nl_comm_ipc_create(const nl_comm_ipc_params *p, nl_backend *be, nl_comm **out);

/* Forces an algorithm (tests and measurements). */
void nl_comm_ipc_set_algo(nl_comm *c, nl_comm_ipc_algo algo);

#ifdef __cplusplus
}
#endif
#endif
