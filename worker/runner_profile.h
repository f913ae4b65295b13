/* runner_profile.h — NANOLLM_PROFILE for a model runner: where a worker's
 * time goes, printed to stderr (rank 0's tables) when the runner closes.
 *
 *   1          each kind of step's host phases (prep, forward, sample), each
 *              closed by a synchronisation, so steps slow a little; and the
 *              start-up phases
 *   ops        also each op's share of the eager forwards (the op timer; a
 *              graph replays as one launch, so --enforce-eager shows the
 *              decode steps' ops)
 *   stream     each graph decode step's phases on the device's queue
 *              (inputs, placeholder takes, forward, sampler, the wait for
 *              the next step), marked with the op timer and read only when
 *              its marks run out, so steps still overlap as in a plain run
 *   skip:OPS   stream, with those ops left out of every forward (the
 *              results are wrong; for timing what each op costs where it
 *              sits)
 *
 * Off by default; the runner calls these at its phase boundaries.
 */
#ifndef NL_WORKER_RUNNER_PROFILE_H
#define NL_WORKER_RUNNER_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/status.h"
#include "kernels/kernels.h"
#include "worker/qwen.h"

/* The kinds of step whose phases are told apart. */
enum { PROFILE_PREFILL, PROFILE_DECODE_GRAPH, PROFILE_DECODE_EAGER, PROFILE_KINDS };

/* The stream phases of a graph decode step.  "two marks" (EMPTY) is an
 * interval with nothing in it: what a mark itself costs. */
enum { STREAM_INPUTS, STREAM_TAKE, STREAM_FORWARD, STREAM_SAMPLE, STREAM_EMPTY, STREAM_NEXT,
       STREAM_COUNT };

typedef struct runner_profile {
    bool phases;         /* 1 or ops                                         */
    bool ops;            /* ops                                              */
    bool stream;         /* stream or skip:                                  */
    uint32_t left_out;   /* skip:OPS, as qwen_state.left_out                 */
    struct step_profile {
        int64_t steps, tokens;
        double prep_s, forward_s, sample_s;
        double op_s[QWEN_OP_COUNT]; /* ops, eager steps */
    } kind[PROFILE_KINDS];
    int32_t stream_marks;    /* marks since the last collect                 */
    int64_t stream_steps;    /* graph decode steps marked                    */
    double stream_s[STREAM_COUNT];
    int64_t launched_behind; /* graph steps launched while the one before ran */
    int64_t launched_late;   /* ... of which it had ended by the launch's end */
    double launch_host_s;    /* host time of those launches                  */
} runner_profile;

/* Reads NANOLLM_PROFILE's value (NULL: off) for a runner of rank `rank` on
 * be; an unknown skip: key is an error naming it. */
nl_status runner_profile_parse(const char *value, const nl_backend *be, int32_t rank,
                               runner_profile *out);

/* Seconds on the monotonic clock. */
double runner_profile_now(void);

/* Closes a host phase: waits for the device, returns the seconds since
 * *mark and moves the mark. */
double runner_profile_lap(nl_backend *be, double *mark);

/* Rank 0 prints one start-up phase's seconds (phases on); moves *mark. */
void runner_profile_startup(const runner_profile *p, nl_backend *be, int32_t rank,
                            const char *phase, double *mark);

/* A step starts, a graph decode step when `graph`.  Any other step ends
 * the last graph step's "until next step": what it runs (a prefill) is
 * charged to no phase. */
nl_status runner_profile_step(runner_profile *p, nl_backend *be, bool graph);

/* Starts stream phase `phase` when `on`. */
nl_status runner_profile_mark(runner_profile *p, nl_backend *be, bool on, int phase);

/* Reads the stream marks once the timer is nearly full, or when forced. */
nl_status runner_profile_collect(runner_profile *p, nl_backend *be, bool force);

/* Prints what was profiled (rank 0 the stream and op tables, every rank its
 * phases). */
void runner_profile_report(runner_profile *p, nl_backend *be, int32_t rank);

#endif
