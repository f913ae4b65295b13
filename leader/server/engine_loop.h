/* engine_loop.h — the engine thread: the only thread that touches the
 * engine.
 *
 * nl_engine is not thread-safe, so one thread opens it (its workers die
 * with that thread, see executor.h), submits, steps, aborts, tokenizes and
 * closes it.  HTTP threads hand jobs over through a bounded queue and read
 * results through each job's channel (job.h); a client that goes away is
 * reported with engine_loop_cancel and its request is aborted, its KV blocks
 * freed, before the next step.  The queue bounds the requests that wait to
 * run (queued here or waiting in the engine): beyond max_queue a submission
 * is refused with 503.
 *
 * While idle the thread checks the workers every 100 ms, so a dead worker
 * turns the server unhealthy even when no request runs.
 */
#ifndef NL_SERVER_ENGINE_LOOP_H
#define NL_SERVER_ENGINE_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leader/server/job.h"
#include "leader/server/metrics.h"
#include "nanollm.h"

typedef struct engine_loop engine_loop;

/* Starts the thread and waits until it has opened the engine.  On failure
 * returns the engine's status with its message in why. */
nl_status engine_loop_start(const nl_engine_config *config, int32_t max_queue, metrics *m,
                            engine_loop **out, char *why, size_t why_len);
/* Stops the thread: jobs still queued are refused, running ones aborted,
 * the engine closed (workers gone); then frees the loop. */
void engine_loop_stop(engine_loop *loop);

/* Facts about the engine (read once at open; valid until stop). */
const nl_engine_info *engine_loop_info(const engine_loop *loop);

/* Hands job over (the loop takes its own reference).  False with a 503 in
 * err when the queue is full, the server is shutting down or the engine
 * has failed. */
bool engine_loop_submit(engine_loop *loop, server_job *job, api_error *err);
/* The client of job went away: abort it. */
void engine_loop_cancel(engine_loop *loop, server_job *job);

/* False once the engine has failed (a worker died, a step failed), with
 * the reason in why. */
bool engine_loop_healthy(engine_loop *loop, char *why, size_t why_len);

/* Shutdown: refuse new jobs from now on; at monotonic time deadline_s abort
 * whatever still runs. */
void engine_loop_drain(engine_loop *loop, double deadline_s);
/* Jobs handed over and not yet finished. */
int32_t engine_loop_in_flight(engine_loop *loop);

/* CLOCK_MONOTONIC in seconds. */
double server_now(void);

#endif
