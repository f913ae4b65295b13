/* scheduler.h — which seqs run in the next step, and how many tokens each.
 *
 * Two intrusive FIFO queues: WAITING (in arrival order, preempted seqs at
 * the head) and RUNNING (in admission order).  A step carries, within the
 * token budget (max_num_batched_tokens) and max_num_seqs:
 *   1. every running seq, in admission order: one token for a decoding seq,
 *      and for the seq whose prompt is partly computed (at most one, the
 *      most recently admitted) as much of the rest as the budget allows.
 *      When the pool has no block for a seq's next token, the most recently
 *      admitted running seq is preempted: its blocks are freed and it goes
 *      back to the head of WAITING with its output kept, to recompute
 *      prompt + output;
 *   2. then, unless this step preempted, waiting seqs admitted while the
 *      free blocks allow; a prompt longer than the budget left is chunked
 *      and continues in the next step.
 * Decodes and prefill chunks share a step (mixed batches, the default), so
 * a long prompt never freezes running streams: they advance one token every
 * step while it is prefilled in chunks.  Only the chunk that completes a
 * prompt samples.
 *
 * prefill_first (--prefill-first, nano-vllm's policy) turns mixed steps
 * off: a step that can continue the partly computed prompt or admit a
 * waiting seq carries only prompt work (the next chunk of that prompt, then
 * admissions as in 2.) with the whole budget; the decoding seqs run (1.) in
 * steps of their own, when no prompt is partly computed and none can be
 * admitted (the waiting queue is empty, max_num_seqs are running, or the
 * pool has no room for the head).  Prompts start sooner and decode steps
 * stay pure, at the cost of pausing every running stream while prompts are
 * prefilled.
 *
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
    bool is_prefill;      /* some seq computes more than one token          */
    int32_t n_seqs;
    int32_t n_tokens;     /* sum of num_new                                 */
    seq **seqs;           /* [max_num_seqs], each with num_new set          */
    int32_t n_preempted;  /* seqs preempted while building this batch       */
} sched_batch;

typedef struct scheduler {
    block_manager *bm;    /* not owned                                      */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    bool prefill_first;   /* no decodes in a step with prompt work          */
    seq_queue waiting;
    seq_queue running;
    sched_batch batch;
    int64_t total_preemptions;
} scheduler;

nl_status scheduler_create(block_manager *bm, int32_t max_num_seqs,
                           int32_t max_num_batched_tokens, bool prefill_first,
                           scheduler **out);
/* Frees the scheduler only; the seqs belong to the caller. */
void scheduler_destroy(scheduler *sch);

/* Queues a new seq at the tail of WAITING. */
void scheduler_add(scheduler *sch, seq *s);

/* Builds the next batch (empty when there is nothing to run). */
const sched_batch *scheduler_schedule(scheduler *sch);

/* Once the step is sent: advances num_computed by num_new for every seq of
 * the batch (the workers run steps in order, so the next step may read that
 * KV) and registers the newly computed full blocks whose tokens are known.
 * The caller then gives sampling seqs their placeholders, fills them from
 * the reply and calls scheduler_finish for seqs that are done. */
void scheduler_commit(scheduler *sch);

/* True when s's last scheduled chunk completed its tokens (it sampled). */
static inline bool scheduler_seq_sampled(const seq *s)
{
    return s->num_computed == s->n_tokens;
}

/* Removes s from its queue, registers its last full blocks, frees its
 * blocks and marks it FINISHED. */
void scheduler_finish(scheduler *sch, seq *s, nl_finish_reason reason);

bool scheduler_has_unfinished(const scheduler *sch);

#endif
