/* scheduler.c — mixed steps (decodes and prefill chunks together) or
 * prefill-first steps, with chunked prefill and preemption (see scheduler.h
 * for the policies). */
#include "leader/engine/scheduler.h"

#include <stdlib.h>

#include "common/status.h"

/* ---- intrusive queues -------------------------------------------------- */

static void queue_push_tail(seq_queue *q, seq *s)
{
    s->next = NULL;
    s->prev = q->tail;
    if (q->tail) q->tail->next = s; else q->head = s;
    q->tail = s;
    q->count++;
}

static void queue_push_head(seq_queue *q, seq *s)
{
    s->prev = NULL;
    s->next = q->head;
    if (q->head) q->head->prev = s; else q->tail = s;
    q->head = s;
    q->count++;
}

static void queue_remove(seq_queue *q, seq *s)
{
    if (s->prev) s->prev->next = s->next; else q->head = s->next;
    if (s->next) s->next->prev = s->prev; else q->tail = s->prev;
    s->prev = s->next = NULL;
    q->count--;
}

/* ---- lifecycle ----------------------------------------------------------- */

nl_status scheduler_create(block_manager *bm, int32_t max_num_seqs,
                           int32_t max_num_batched_tokens, bool prefill_first, scheduler **out)
{
    *out = NULL;
    if (max_num_seqs <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "max_num_seqs %d: must be positive", max_num_seqs);
    if (max_num_batched_tokens < max_num_seqs)
        return nl_error(NL_ERR_INVALID_ARG,
                        "max_num_batched_tokens %d: must be at least max_num_seqs (%d), "
                        "a decode step runs one token per seq",
                        max_num_batched_tokens, max_num_seqs);
    scheduler *sch = calloc(1, sizeof(*sch));
    if (!sch) return nl_error(NL_ERR_NOMEM, "scheduler: out of memory");
    sch->batch.seqs = calloc((size_t)max_num_seqs, sizeof(seq *));
    if (!sch->batch.seqs) {
        free(sch);
        return nl_error(NL_ERR_NOMEM, "scheduler: out of memory for %d seqs", max_num_seqs);
    }
    sch->bm = bm;
    sch->max_num_seqs = max_num_seqs;
    sch->max_num_batched_tokens = max_num_batched_tokens;
    sch->prefill_first = prefill_first;
    *out = sch;
    return NL_OK;
}

void scheduler_destroy(scheduler *sch)
{
    if (!sch) return;
    free(sch->batch.seqs);
    free(sch);
}

void scheduler_add(scheduler *sch, seq *s)
{
    s->status = SEQ_WAITING;
    queue_push_tail(&sch->waiting, s);
}

bool scheduler_has_unfinished(const scheduler *sch)
{
    return sch->waiting.count > 0 || sch->running.count > 0;
}

/* ---- scheduling ------------------------------------------------------------ */

static void batch_add(sched_batch *b, seq *s, int32_t num_new)
{
    s->num_new = num_new;
    b->seqs[b->n_seqs++] = s;
    b->n_tokens += num_new;
}

static void preempt(scheduler *sch, seq *s)
{
    queue_remove(&sch->running, s);
    block_manager_free(sch->bm, s);
    s->num_cached = 0;
    s->status = SEQ_WAITING;
    queue_push_head(&sch->waiting, s);
    sch->batch.n_preempted++;
    sch->total_preemptions++;
}

/* Schedules up to budget tokens of s's uncomputed prompt (its blocks were
 * all allocated at admission); returns the budget left. */
static int32_t schedule_prompt_chunk(sched_batch *b, seq *s, int32_t budget)
{
    int32_t left = s->n_tokens - s->num_computed;
    int32_t n = left < budget ? left : budget;
    batch_add(b, s, n);
    b->is_prefill = true;
    return budget - n;
}

/* Running seqs first, in admission order: one token for each decoding seq
 * (preempting the most recently admitted when the pool has no slot), then
 * the rest of its prompt, up to the budget, for the partly computed one.
 * Returns the budget left. */
static int32_t schedule_running(scheduler *sch, int32_t budget)
{
    sched_batch *b = &sch->batch;
    for (seq *s = sch->running.head; s && budget > 0; s = s->next) {
        if (s->n_tokens - s->num_computed > 1) { /* a partly computed prompt */
            budget = schedule_prompt_chunk(b, s, budget);
            continue;
        }
        if (s->num_computed == s->n_tokens) continue; /* its last sample is in flight */
        bool self_preempted = false;
        while (!block_manager_can_append(sch->bm, s)) {
            seq *victim = sch->running.tail;
            preempt(sch, victim);
            if (victim == s) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) break;
        block_manager_append_slot(sch->bm, s);
        batch_add(b, s, 1);
        budget--;
    }
    return budget;
}

/* Then waiting seqs, admitted while max_num_seqs, the budget and the free
 * blocks allow; the last one admitted may get only a chunk of its prompt. */
static void schedule_waiting(scheduler *sch, int32_t budget)
{
    sched_batch *b = &sch->batch;
    /* Nothing is admitted in a step that preempted: the pool is short. */
    if (b->n_preempted > 0) return;
    while (budget > 0 && sch->waiting.head && sch->running.count < sch->max_num_seqs) {
        seq *s = sch->waiting.head;
        if (!block_manager_can_allocate(sch->bm, s)) break;
        block_manager_allocate(sch->bm, s);
        if (s->prompt_cached < 0)
            s->prompt_cached = s->num_cached < s->prompt_len ? s->num_cached : s->prompt_len;
        queue_remove(&sch->waiting, s);
        s->status = SEQ_RUNNING;
        queue_push_tail(&sch->running, s);
        int32_t left = s->n_tokens - s->num_computed;
        int32_t n = left < budget ? left : budget;
        batch_add(b, s, n);
        if (left > 1) b->is_prefill = true;
        budget -= n;
    }
}

/* Prefill-first: the partly computed prompt (at most one, the most recently
 * admitted running seq) continues, then waiting seqs are admitted; running
 * seqs that decode are left out. */
static void schedule_prompts(scheduler *sch, int32_t budget)
{
    seq *s = sch->running.tail;
    if (s && s->n_tokens - s->num_computed > 1) budget = schedule_prompt_chunk(&sch->batch, s, budget);
    schedule_waiting(sch, budget);
}

const sched_batch *scheduler_schedule(scheduler *sch)
{
    sched_batch *b = &sch->batch;
    b->n_seqs = 0;
    b->n_tokens = 0;
    b->n_preempted = 0;
    b->is_prefill = false;
    if (sch->prefill_first) {
        /* Decodes run only in a step with no prompt work to do. */
        schedule_prompts(sch, sch->max_num_batched_tokens);
        if (b->n_seqs == 0) schedule_running(sch, sch->max_num_batched_tokens);
        return b;
    }
    schedule_waiting(sch, schedule_running(sch, sch->max_num_batched_tokens));
    return b;
}

void scheduler_commit(scheduler *sch)
{
    const sched_batch *b = &sch->batch;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        seq *s = b->seqs[i];
        s->num_computed += s->num_new;
        block_manager_commit(sch->bm, s);
    }
}

void scheduler_finish(scheduler *sch, seq *s, nl_finish_reason reason)
{
    if (s->status == SEQ_WAITING) queue_remove(&sch->waiting, s);
    else if (s->status == SEQ_RUNNING) queue_remove(&sch->running, s);
    /* The last sampled token may have completed a block after the seq's
     * last step was sent (with async scheduling, commits lag the samples). */
    if (s->status == SEQ_RUNNING) block_manager_commit(sch->bm, s);
    if (s->n_blocks > 0) block_manager_free(sch->bm, s);
    s->status = SEQ_FINISHED;
    s->finish = reason;
}
