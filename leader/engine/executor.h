/* executor.h — the real runner: worker processes behind shared-memory rings.
 *
 * executor_start() creates one shared-memory segment for the engine, writes
 * the worker configuration into it and starts tp worker processes (fork, then
 * exec of the nanollm-worker program, so the leader's own process image never
 * loads CUDA and forking stays safe in multithreaded host programs).  It
 * returns once every worker has loaded its shard and sized its KV cache;
 * runner->num_kv_blocks is the minimum over the ranks.
 *
 * Each submit writes one RUN command into the command ring (every rank reads
 * it); each wait reads rank 0's reply to the oldest one submitted.  A worker
 * that dies is noticed within a fraction of a second: the call then returns
 * NL_ERR_WORKER naming the rank,
 * its pid and how it ended, and the other workers are killed and reaped.
 * destroy sends SHUTDOWN, waits a bounded time, kills stragglers and unmaps.
 * The segment has no name in /dev/shm after shm_segment_create returns.
 *
 * Workers live as long as the pool, whichever thread started it, and die
 * with the leader process: each holds the read end of a pipe (descriptor
 * EXECUTOR_LIFE_FD, "--leader-fd" on its command line) whose only write end
 * the pool keeps, close-on-exec, and exits when it reads end-of-file.  (A
 * child the host forks without exec inherits the write end and keeps the
 * workers alive as long as it lives.)  Workers ignore SIGINT: on Ctrl-C the
 * leader decides (see executor_kill_all).  The pool is not thread-safe;
 * one thread at a time may use a runner.
 */
#ifndef NL_LEADER_EXECUTOR_H
#define NL_LEADER_EXECUTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/engine_settings.h"
#include "leader/engine/runner.h"
#include "nanollm.h"

/* The workers' end of the life pipe, beside the segment's SHM_WORKER_FD. */
#define EXECUTOR_LIFE_FD 4
#define EXECUTOR_LIFE_FD_STR "4"

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
