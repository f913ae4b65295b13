/* worker_loop.h — one worker process's life: attach, start up, serve, stop.
 *
 * worker_loop_main() is the whole program around a model: it maps the
 * segment whose descriptor it inherited, makes sure the leader is still the
 * parent, runs ops->init, publishes the KV block count (or the init error,
 * which the leader reports as "worker rank K: <message>"), then executes
 * every command of the command ring until SHUTDOWN.  Rank 0 writes a reply
 * for each RUN.  The model is reached only through worker_ops, so the real
 * program (worker_main.c) and the tests' fake worker share this loop.
 *
 * A worker whose leader process disappears exits: a thread watches the
 * read end of the leader's life pipe (--leader-fd) and ends the process at
 * end-of-file, and every wait here also checks getppid() between slices.
 *
 * Command line: nanollm-worker --shm-fd FD --rank K [--leader-fd FD]
 * (FD is SHM_WORKER_FD and EXECUTOR_LIFE_FD)
 */
#ifndef NL_WORKER_WORKER_LOOP_H
#define NL_WORKER_WORKER_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"
#include "ipc/wire.h"
#include "kernels/comm.h"

typedef struct worker_env {
    int32_t rank;
    const engine_settings *config; /* in the segment, read-only */
    shm_segment *seg;
} worker_env;

typedef struct worker_ops {
    /* Loads this rank's shard and sizes its KV cache. */
    nl_status (*init)(void *ctx, worker_env *env, int32_t *num_kv_blocks);
    /* Executes one RUN, its WIRE_TOKEN_PREVIOUS inputs resolved by the
     * model from the RUN before it; fills reply->sampled (storage owned by
     * the model, valid until the next call), reply NULL on ranks other
     * than 0, which send none. */
    nl_status (*execute)(void *ctx, const wire_run *cmd, wire_reply *reply);
    /* Frees what init made; also called after init failed part way. */
    void (*shutdown)(void *ctx);
    /* Optional: execute in two halves, so that the worker launches the
     * next RUN while one runs.  launch starts a RUN (at most two in flight)
     * and resolves its WIRE_TOKEN_PREVIOUS inputs itself, from the RUN
     * launched before it (on every rank: each samples); finish waits for
     * the oldest and fills the reply as execute does (reply NULL: on ranks
     * other than 0, which send none); oldest_done says
     * without blocking whether finish would return at once. */
    nl_status (*launch)(void *ctx, const wire_run *cmd);
    nl_status (*finish)(void *ctx, wire_reply *reply);
    bool (*oldest_done)(void *ctx);
} worker_ops;

/* Runs the worker; returns the process exit status. */
int worker_loop_main(int argc, char **argv, const worker_ops *ops, void *ctx);

/* NL_OK while the leader is alive; the check the loop's waits use. */
nl_status worker_check_leader(void *env);

/* The communicator for a CPU worker group: nl_comm_single() for tp == 1,
 * else the shared-memory all-reduce over the segment's comm area. */
nl_status worker_comm_cpu_create(worker_env *env, nl_comm **out);

/* NCCL start-up: rank 0 publishes the unique id through the segment, the
 * other ranks wait for it (or for rank 0's failure, or the leader's end). */
nl_status worker_publish_nccl_id(worker_env *env, const void *id, size_t bytes);
nl_status worker_wait_nccl_id(worker_env *env, void *id, size_t bytes);

#endif
