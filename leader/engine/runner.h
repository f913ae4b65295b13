/* runner.h — how the engine executes a step, whatever executes it.
 *
 * The engine hands each scheduled step to a runner and gets the sampled
 * tokens back.  executor.c is the real runner (forked workers over the
 * shared-memory rings); tests use a fake runner to drive the scheduler with
 * thousands of requests without a model.
 */
#ifndef NL_LEADER_RUNNER_H
#define NL_LEADER_RUNNER_H

#include "ipc/wire.h"

typedef struct runner runner;

typedef struct runner_ops {
    /* Runs cmd; on NL_OK, reply holds one wire_sampled per seq with
     * sample == 1, in command order, in storage owned by the runner and valid
     * until the next execute. */
    nl_status (*execute)(runner *r, const wire_run *cmd, wire_reply *reply);
    /* Without blocking: NL_OK while the runner can execute, else why not
     * (a worker found dead).  NULL: always NL_OK. */
    nl_status (*check)(runner *r);
    void (*destroy)(runner *r);
} runner_ops;

struct runner {
    const runner_ops *ops;
    int32_t num_kv_blocks; /* the KV pool the workers allocated */
};

#endif
