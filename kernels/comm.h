/* comm.h — collective communication between the workers of one engine.
 *
 * Three implementations: a CUDA-IPC all-reduce for GPUs of one host
 * (kernels/cuda/comm_ipc.cu, also for ranks sharing one GPU), NCCL for GPUs
 * without peer access (kernels/cuda/comm_nccl.cu), and a shared-memory
 * all-reduce for the CPU backend (kernels/comm_shm.c).  IPC and shm use a
 * fixed reduction order, so their results never depend on timing.  With
 * tp == 1 every operation is a no-op (nl_comm_single).  Buffers are backend
 * memory of the backend the comm was made for.
 */
#ifndef NL_KERNELS_COMM_H
#define NL_KERNELS_COMM_H

#include <stddef.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "common/status.h"

typedef struct nl_comm nl_comm;

typedef struct nl_comm_ops {
    /* buf[count] = sum over ranks of buf[count], on every rank. */
    nl_status (*all_reduce_sum)(nl_comm *c, void *buf, size_t count, nl_dtype dtype);
    /* Every rank receives recv[r * count + i] = send of rank r [i]: the
     * same bytes on every rank. */
    nl_status (*all_gather)(nl_comm *c, const void *send, void *recv, size_t count,
                            nl_dtype dtype);
    void (*destroy)(nl_comm *c);
    /* Optional: an error if the group abandoned a collective (a peer died
     * or a wait timed out).  Collectives only enqueue work on a GPU, so a
     * failure inside one shows here, after the stream has run. */
    nl_status (*check)(nl_comm *c);
} nl_comm_ops;

struct nl_comm {
    const nl_comm_ops *ops;
    int rank;
    int size;
};

/* The tp == 1 communicator. */
nl_comm *nl_comm_single(void);

static inline nl_status nl_comm_check(nl_comm *c)
{
    return c && c->ops->check ? c->ops->check(c) : NL_OK;
}

/* Every wait of a communicator is bounded: the bound in seconds is
 * $NANOLLM_COMM_TIMEOUT_S when set (a positive number), else fallback. */
static inline nl_status nl_comm_timeout_s(double fallback, double *out)
{
    const char *env = getenv("NANOLLM_COMM_TIMEOUT_S");
    *out = fallback;
    if (!env || !env[0]) return NL_OK;
    char *end;
    double t = strtod(env, &end);
    if (*end != '\0' || !(t > 0) || t > 1e6)
        return nl_error(NL_ERR_INVALID_ARG, "NANOLLM_COMM_TIMEOUT_S=\"%s\": expected a positive "
                        "number of seconds", env);
    *out = t;
    return NL_OK;
}

static inline void nl_comm_destroy(nl_comm *c)
{
    if (c) c->ops->destroy(c);
}

#endif
