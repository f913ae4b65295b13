/* runner.h — how the engine executes a step, whatever executes it.
 *
 * The engine hands each scheduled step to a runner and gets the sampled
 * tokens back.  executor.c is the real runner (forked workers over the
 * shared-memory rings); tests use a fake runner to drive the scheduler with
 * thousands of requests without a model.
 *
 * Sending and answering are apart so that the engine can send step N + 1
 * while step N runs (async scheduling): up to RUNNER_MAX_IN_FLIGHT commands
 * may be submitted before the oldest one's reply is read, and a command's
 * WIRE_TOKEN_PREVIOUS inputs are the tokens the command before it sampled.
 */
#ifndef NL_LEADER_RUNNER_H
#define NL_LEADER_RUNNER_H

#include "ipc/wire.h"

#define RUNNER_MAX_IN_FLIGHT 2

typedef struct runner runner;

typedef struct runner_ops {
    /* Sends cmd after the commands already submitted; cmd and what it
     * points to may change once this returns. */
    nl_status (*submit)(runner *r, const wire_run *cmd);
    /* Waits for the oldest submitted command; on NL_OK, reply holds one
     * wire_sampled per seq with sample == 1, in command order, in storage
     * owned by the runner and valid until the next wait. */
    nl_status (*wait)(runner *r, wire_reply *reply);
    /* Without blocking: NL_OK while the runner can execute, else why not
     * (a worker found dead).  NULL: always NL_OK. */
    nl_status (*check)(runner *r);
    void (*destroy)(runner *r);
} runner_ops;

struct runner {
    const runner_ops *ops;
    int32_t num_kv_blocks; /* the KV pool the workers allocated */
};

/* One command, sent and answered. */
static inline nl_status runner_execute(runner *r, const wire_run *cmd, wire_reply *reply)
{
    nl_status st = r->ops->submit(r, cmd);
    return st != NL_OK ? st : r->ops->wait(r, reply);
}

#endif
