/* executor.h — the real runner: worker processes behind shared-memory rings.
 *
 * executor_start() creates one shared-memory segment for the engine, writes
 * the worker configuration into it and starts tp worker processes (fork, then
 * exec of the nanollm-worker program, so the leader's own process image never
 * loads CUDA and forking stays safe in multithreaded host programs).  It
 * returns once every worker has loaded its shard and sized its KV cache;
 * runner->num_kv_blocks is the minimum over the ranks.
 *
 * Each execute writes one RUN command into the command ring (every rank reads
 * it) and waits for rank 0's reply.  A worker that dies is noticed within a
 * fraction of a second: execute then returns NL_ERR_WORKER naming the rank,
 * its pid and how it ended, and the other workers are killed and reaped.
 * destroy sends SHUTDOWN, waits a bounded time, kills stragglers and unmaps.
 * The segment has no name in /dev/shm after shm_segment_create returns.
 *
 * Workers die with their leader: the kernel sends them SIGKILL when the
 * thread that called executor_start() ends (PR_SET_PDEATHSIG follows the
 * forking thread, not the process), so start the pool from a thread that
 * lives as long as the pool.  Workers ignore SIGINT: on Ctrl-C the leader
 * decides (see executor_kill_all).  The pool is not thread-safe; one
 * thread at a time may use a runner.
 */
#ifndef NL_LEADER_EXECUTOR_H
#define NL_LEADER_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/engine_settings.h"
#include "leader/engine/runner.h"
#include "nanollm.h"

/* Starts settings->tp workers on resolved settings (checked with
 * engine_settings_validate), which are copied into the segment as they are.
 * worker_path NULL: $NANOLLM_WORKER, else nanollm-worker beside
 * /proc/self/exe, else NL_PKGLIBEXECDIR "/nanollm-worker".  On failure
 * nothing is left behind (no process, no segment) and the message names the
 * failing rank ("worker rank 1: ..."). */
nl_status executor_start(const engine_settings *settings, const char *worker_path, runner **out);

/* The process id of a rank of a runner made by executor_start (for
 * diagnostics and tests), or -1 for a rank out of range. */
pid_t executor_pid(const runner *r, int rank);

/* Async-signal-safe: SIGKILLs the workers of every live pool.  For a Ctrl-C handler that is about to exit;
 * the pools must not be used afterwards except to destroy them. */
void executor_kill_all(void);

#endif
