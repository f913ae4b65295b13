/* shm.h — the engine's shared-memory segment: layout and lifecycle.
 *
 * One POSIX shared-memory object per engine holds, in order:
 *   shm_header  the engine settings (common/engine_settings.h), each
 *               rank's start-up state and error message, the NCCL unique
 *               id, and where the rest lies;
 *   command ring (leader -> every rank), reply ring (rank 0 -> leader);
 *   comm area   for tp > 1: the abort word (common/comm_area.h), then the
 *               CPU shared-memory all-reduce's scratch or the GPU ranks'
 *               CUDA-IPC handles; zero bytes for tp == 1.
 * The leader creates it under an unpredictable name with O_EXCL and mode
 * 0600 and unlinks the name at once, having mapped it: the object lives on
 * only through descriptors and mappings, so no crash of any process, at any
 * moment, leaves anything in /dev/shm.  Workers inherit the descriptor as
 * SHM_WORKER_FD across fork and exec.
 */
#ifndef NL_IPC_SHM_H
#define NL_IPC_SHM_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/engine_settings.h"
#include "common/limits.h"
#include "common/status.h"
#include "ipc/ring.h"

#define SHM_MAX_RANKS NL_MAX_TP
#define SHM_NAME_MAX 64
#define SHM_ERROR_MAX 512
#define SHM_NCCL_ID_BYTES 128

/* The comm area for n CPU ranks: a page of barrier words, then one 4 MiB
 * slot per rank plus one for results (kernels/comm_shm.c). */
#define SHM_COMM_BYTES(n) ((size_t)4096 + ((size_t)(n) + 1) * ((size_t)4 << 20))

/* A rank's start-up progress, only ever moving forward. */
typedef enum shm_rank_state {
    SHM_RANK_STARTING = 0,
    SHM_RANK_ATTACHED,  /* mapped the segment */
    SHM_RANK_READY,     /* model loaded, num_kv_blocks set */
    SHM_RANK_FAILED,    /* error holds the reason */
} shm_rank_state;

typedef struct shm_rank {
    alignas(64) _Atomic uint32_t state;
    int32_t pid;
    int32_t num_kv_blocks;
    int32_t error_status;   /* the nl_status of a FAILED rank */
    char error[SHM_ERROR_MAX];
} shm_rank;

typedef struct shm_header {
    uint32_t magic;
    uint32_t version;
    uint64_t total_bytes;
    int32_t leader_pid;
    int32_t n_ranks;
    uint64_t cmd_offset, cmd_bytes;
    uint64_t reply_offset, reply_bytes;
    uint64_t comm_offset, comm_bytes;
    engine_settings config; /* written before the workers start, read-only after */
    alignas(64) _Atomic uint32_t state_seq; /* futex: bumped on any rank change */
    _Atomic uint32_t nccl_id_ready;         /* futex: 1 once rank 0 wrote it */
    uint8_t nccl_id[SHM_NCCL_ID_BYTES];
    shm_rank ranks[SHM_MAX_RANKS];
} shm_header;

/* Sizes the leader asks for. */
typedef struct shm_layout {
    int32_t n_ranks;
    size_t cmd_capacity;   /* bytes of command ring data */
    size_t reply_capacity; /* bytes of reply ring data */
    size_t comm_bytes;     /* comm area, 0 for none */
} shm_layout;

/* One process's view of the segment. */
typedef struct shm_segment {
    int fd;      /* leader: the descriptor its workers inherit; -1 otherwise */
    void *base;
    size_t bytes;
    shm_header *hdr;
    ring cmd;
    ring reply;
    void *comm; /* [comm_bytes], NULL without a comm area */
    size_t comm_bytes;
} shm_segment;

/* The descriptor number on which a worker finds its segment. */
#define SHM_WORKER_FD 3
#define SHM_WORKER_FD_STR "3"

/* Leader: creates, sizes, maps and formats a new segment; config is copied
 * into the header.  The name exists only inside this call: the segment is
 * unlinked as soon as it is open, and workers reach it through the
 * descriptor out->fd that they inherit, so no crash at any moment -- not
 * even a SIGKILL of the leader while its workers start -- can leave a name
 * behind in /dev/shm. */
nl_status shm_segment_create(const shm_layout *layout, const engine_settings *config,
                             shm_segment *out);

/* Worker: maps the segment open on fd (which it takes over and closes) and
 * checks its layout. */
nl_status shm_segment_attach_fd(int fd, shm_segment *out);

/* Unmaps, and closes the leader's descriptor. */
void shm_segment_close(shm_segment *seg);

/* Publishes a rank's state change and wakes whoever waits on state_seq. */
void shm_rank_set_state(shm_segment *seg, int rank, shm_rank_state state);

#endif
