/* comm_shm.h — the CPU backend's communicator over a shared-memory area.
 *
 * The area is a region of the engine's segment that every CPU worker maps
 * (ipc/shm.h places it; it starts zeroed).  Reductions always add rank 0's
 * values first, then rank 1's, and so on, so every rank gets bitwise the
 * same result whatever the timing.  Waits sleep on futexes in bounded slices
 * and call the caller's check between them, so a dead leader turns into an
 * error instead of a hang.
 */
#ifndef NL_KERNELS_COMM_SHM_H
#define NL_KERNELS_COMM_SHM_H

#include <stddef.h>

#include "kernels/comm.h"

/* Called between wait slices; anything but NL_OK abandons the collective. */
typedef nl_status (*nl_comm_check_fn)(void *ctx);

/* Joins the group using area[bytes] (any size from a few KiB; larger areas
 * move large buffers in fewer chunks); every rank passes the same area.
 * check may be NULL. */
nl_status nl_comm_shm_create(void *area, size_t bytes, int rank, int size,
                             nl_comm_check_fn check, void *check_ctx, nl_comm **out);

#endif
