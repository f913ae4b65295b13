/* scheduler.h — which seqs run in the next step, and how many tokens each.
 *
 * Two intrusive FIFO queues: WAITING (in arrival order, preempted seqs at
 * the head) and RUNNING (in admission order).  A step is either
 *   prefill: first the seq whose prompt is partly computed (there is at most
 *            one), then waiting seqs admitted while max_num_seqs, the token
 *            budget (max_num_batched_tokens) and free blocks allow.  A prompt
 *            longer than the remaining budget is chunked: it gets the rest
 *            of the budget now and continues in the next prefill step.  Only
 *            the chunk that completes the prompt samples; or
 *   decode:  one token for every running seq.  When the pool has no block
 *            for a seq's next token, the most recently admitted running seq
 *            is preempted: its blocks are freed and it goes back to the head
 *            of WAITING with its output kept, to recompute prompt + output.
 * Nothing is ever dropped; the engine refuses at submission a request that
 * could not fit the pool on its own.
 *
 * The scheduler never allocates after creation: the batch array is sized for
 * max_num_seqs, queue operations are O(1).
 */
#ifndef NL_LEADER_SCHEDULER_H
#define NL_LEADER_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "leader/engine/block_manager.h"
#include "leader/engine/seq.h"

typedef struct seq_queue {
    seq *head, *tail;
    int32_t count;
} seq_queue;

typedef struct sched_batch {
    bool is_prefill;
    int32_t n_seqs;
    int32_t n_tokens;     /* sum of num_new                                 */
    seq **seqs;           /* [max_num_seqs], each with num_new set          */
    int32_t n_preempted;  /* seqs preempted while building this batch       */
} sched_batch;

typedef struct scheduler {
    block_manager *bm;    /* not owned                                      */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    seq_queue waiting;
    seq_queue running;
    sched_batch batch;
    int64_t total_preemptions;
} scheduler;

nl_status scheduler_create(block_manager *bm, int32_t max_num_seqs,
                           int32_t max_num_batched_tokens, scheduler **out);
/* Frees the scheduler only; the seqs belong to the caller. */
void scheduler_destroy(scheduler *sch);

/* Queues a new seq at the tail of WAITING. */
void scheduler_add(scheduler *sch, seq *s);

/* Builds the next batch (empty when there is nothing to run). */
const sched_batch *scheduler_schedule(scheduler *sch);

/* After the step ran: advances num_computed by num_new for every seq of the
 * batch and registers newly computed full blocks.  The caller then appends
 * sampled tokens and calls scheduler_finish for seqs that are done. */
void scheduler_commit(scheduler *sch);

/* True when s's last scheduled chunk completed its tokens (it sampled). */
static inline bool scheduler_seq_sampled(const seq *s)
{
    return s->num_computed == s->n_tokens;
}

/* Removes s from its queue, frees its blocks and marks it FINISHED. */
void scheduler_finish(scheduler *sch, seq *s, nl_finish_reason reason);

bool scheduler_has_unfinished(const scheduler *sch);

#endif
