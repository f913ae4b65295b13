/* comm_area.h — the abort word at the head of every communicator's shared
 * area.
 *
 * The workers of one engine share a comm area (a page-aligned region of the
 * engine's segment, ipc/shm.h).  Whatever backend uses the rest of it, the
 * first cache line is the abort word: zero while the group is healthy, else
 * why the group's collectives must stop.  The leader, which never touches
 * CUDA, sets it when it finds a rank dead; a rank sets it when a wait runs
 * past its bound.  Every wait of every backend reads it (the CUDA-IPC
 * all-reduce maps this page into device memory and reads it from its spin
 * loops), so no rank keeps waiting for a peer that will never come.
 *
 * The word only ever goes from zero to a reason; the first reason wins.
 */
#ifndef NL_COMMON_COMM_AREA_H
#define NL_COMMON_COMM_AREA_H

#include <stdint.h>

/* Bytes reserved for the abort word at the head of a comm area; the word is
 * on a page of its own so it can be registered with the driver alone. */
#define NL_COMM_AREA_HEAD_BYTES 4096

/* The comm area of GPU ranks: the abort page, then the CUDA-IPC
 * all-reduce's handle exchange (kernels/cuda/comm_ipc.cu). */
#define NL_COMM_AREA_CUDA_BYTES ((size_t)8192)

/* Reasons.  A dead rank k is reported as NL_COMM_ABORT_RANK_DEAD + k,
 * a rank k that could not join as NL_COMM_ABORT_RANK_FAILED + k. */
#define NL_COMM_ABORT_NONE 0u
#define NL_COMM_ABORT_TIMEOUT 1u       /* a wait ran past its bound        */
#define NL_COMM_ABORT_SHUTDOWN 2u      /* the leader is stopping the group */
#define NL_COMM_ABORT_RANK_DEAD 0x100u /* + rank                          */
#define NL_COMM_ABORT_RANK_FAILED 0x200u /* + rank: gave up joining      */

/* C only: the CUDA side reads the word through its device mapping. */
#ifndef __cplusplus
#include <stdatomic.h>

static inline _Atomic uint32_t *nl_comm_area_word(void *area)
{
    return (_Atomic uint32_t *)area;
}

/* Sets the reason unless one is set already. */
static inline void nl_comm_area_abort(void *area, uint32_t reason)
{
    uint32_t none = NL_COMM_ABORT_NONE;
    atomic_compare_exchange_strong(nl_comm_area_word(area), &none, reason);
}

static inline uint32_t nl_comm_area_reason(void *area)
{
    return atomic_load(nl_comm_area_word(area));
}
#endif

#endif
