/* engine_step.c — the step loop.
 *
 * A step takes the inbox (engine_thread.c), schedules a batch, sends it as
 * one RUN command whose tokens and block tables point straight into the
 * seqs (batch_wire.h: no copies, no per-step allocation) and commits its
 * tokens to the scheduler; then it reads the oldest step's reply and hands
 * each sampled token to the output processor (output.h), finishing the
 * requests it stops.  With async scheduling (the default) two steps are in
 * flight: step N + 1 is scheduled and sent, with placeholders for the
 * tokens step N samples (seq.h), before step N's reply is read.
 *
 * A runner failure or a malformed reply fails the engine: every unfinished
 * request ends with NL_FINISH_ERROR and the message, and later submissions
 * and steps are refused with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "leader/engine/batch_wire.h"
#include "leader/engine/engine_state.h"

/* Takes the oldest step in flight off the queue; its seqs are no longer
 * held by it. */
static step_flight *pop_flight(nl_engine *e)
{
    step_flight *f = &e->flights[e->first_flight];
    e->first_flight = (e->first_flight + 1) % RUNNER_MAX_IN_FLIGHT;
    e->n_flights--;
    for (int32_t i = 0; i < f->n_seqs; i++) f->seqs[i]->in_flight--;
    return f;
}

/* Ends every unfinished request with the failure and stops the engine.
 * Holding step_lock. */
static nl_status fail_engine(nl_engine *e, nl_status st)
{
    snprintf(e->fail_msg, sizeof(e->fail_msg), "%s", nl_last_error());
    /* Replies still due are never read: the steps' seqs are let go. */
    while (e->n_flights > 0) pop_flight(e);
    nl_log(NL_LOG_INFO, "engine stopped: %s", e->fail_msg); /* the caller gets it too */
    /* Chained through next_queued (the inbox is emptied here), so that
     * failing needs no memory. */
    request *doomed = NULL;
    pthread_mutex_lock(&e->lock);
    e->failed = st;
    e->inbox_head = e->inbox_tail = NULL;
    e->n_inbox = 0;
    for (uint32_t i = 0; i < e->requests.cap; i++) {
        if (!e->requests.used[i]) continue;
        request *r = (request *)(uintptr_t)e->requests.values[i];
        if (r->state == REQUEST_FINISHED) continue;
        r->next_queued = doomed;
        doomed = r;
    }
    for (int32_t i = 0; i < e->aborts.n; i++) { /* released ones are in no map */
        request *r = e->aborts.items[i];
        if (!r->released || r->state == REQUEST_FINISHED) continue;
        r->next_queued = doomed;
        doomed = r;
    }
    pthread_mutex_unlock(&e->lock);
    while (doomed) {
        request *r = doomed;
        doomed = r->next_queued;
        if (!r->error) r->error = strdup(e->fail_msg);
        engine_finish_request(e, r, NL_FINISH_ERROR);
    }
    engine_take_inbox(e); /* frees what was released */
    return nl_error(st, "%s", e->fail_msg);
}

/* Schedules and sends the next step, if there is one (*sent).  Its tokens'
 * KV counts as computed from now on, and each sample it takes gets a
 * placeholder token, so that the step after it can be scheduled before its
 * reply comes back; a sample that will end its seq by length (max_len,
 * which submission keeps within max_model_len) gets none, so nothing is
 * scheduled past it. */
static nl_status send_step(nl_engine *e, bool *sent)
{
    *sent = false;
    const sched_batch *b = scheduler_schedule(e->sch);
    if (b->n_seqs == 0) return NL_OK;
    step_flight *f = &e->flights[(e->first_flight + e->n_flights) % RUNNER_MAX_IN_FLIGHT];
    wire_run cmd;
    f->n_sample = batch_wire_build(b, ++e->step_id, e->wire_seqs, &cmd);
    f->step_id = cmd.step_id;
    f->n_seqs = b->n_seqs;
    /* A step that computes prompt tokens, even a one-token prompt beside
     * decodes, counts as prefill in the stats. */
    f->prompt_step = b->is_prefill;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        f->seqs[i] = b->seqs[i];
        f->sample[i] = e->wire_seqs[i].sample;
        f->prompt_step = f->prompt_step || b->seqs[i]->num_computed < b->seqs[i]->prompt_len;
    }
    f->sent_at = engine_now();
    nl_status st = e->runner->ops->submit(e->runner, &cmd);
    if (st != NL_OK)
        return fail_engine(e, nl_error_prefix(NL_ERR_WORKER, "step %llu: ", (unsigned long long)cmd.step_id));
    e->n_flights++;
    for (int32_t i = 0; i < f->n_seqs; i++) f->seqs[i]->in_flight++;
    scheduler_commit(e->sch);
    for (int32_t i = 0; i < f->n_seqs; i++) {
        seq *s = f->seqs[i];
        if (!f->sample[i] || s->n_tokens + 1 >= s->max_len) continue;
        st = seq_add_pending(s);
        if (st != NL_OK) return fail_engine(e, st);
    }
    *sent = true;
    return NL_OK;
}

/* Reads the oldest step's reply and hands each sampled token to its
 * request: it fills the token's placeholder, goes through the output
 * processor, and may finish the request (whose later steps in flight are
 * then ignored for it). */
static nl_status receive_step(nl_engine *e)
{
    const step_flight *f = pop_flight(e);
    unsigned long long step = (unsigned long long)f->step_id;
    wire_reply reply;
    reply.status = NL_OK;
    reply.n_sampled = 0;
    reply.sampled = NULL;
    reply.error[0] = '\0';
    nl_status st = e->runner->ops->wait(e->runner, &reply);
    if (st != NL_OK) return fail_engine(e, nl_error_prefix(NL_ERR_WORKER, "step %llu: ", step));
    if (reply.status != NL_OK)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: %s", step,
                                       reply.error[0] ? reply.error : nl_status_name(reply.status)));
    if (reply.n_sampled != f->n_sample)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: the workers sampled %d tokens, expected %d",
                                       step, reply.n_sampled, f->n_sample));

    e->stats.steps++;
    if (f->prompt_step) e->stats.prefill_steps++; else e->stats.decode_steps++;
    double now = engine_now();
    int32_t j = 0;
    for (int32_t i = 0; i < f->n_seqs; i++) {
        if (!f->sample[i]) continue;
        seq *s = f->seqs[i];
        const wire_sampled *sm = &reply.sampled[j++];
        if (sm->seq_id != s->id || sm->token_id < 0 || sm->token_id >= e->facts.vocab_size)
            return fail_engine(e, nl_error(NL_ERR_WORKER,
                                           "step %llu: reply %d is token %d for seq %llu, expected seq %llu "
                                           "and a token in [0, %d)",
                                           step, j - 1, sm->token_id, (unsigned long long)sm->seq_id,
                                           (unsigned long long)s->id, e->facts.vocab_size));
        if (s->status == SEQ_FINISHED) continue; /* ended by a callback, an abort or an earlier sample */
        request *r = request_of(s);
        if (seq_num_output(s) == 0) {
            if (s->prompt_cached >= 0) e->stats.cached_tokens += s->prompt_cached;
            e->stats.started_prompt_tokens += s->prompt_len;
            r->first_token_time = now;
        }
        e->stats.output_tokens++;
        st = seq_put_sample(s, sm->token_id);
        nl_finish_reason finish = NL_FINISH_NONE;
        if (st == NL_OK) st = output_process_token(&e->output, r, sm, &finish);
        if (st != NL_OK) return fail_engine(e, st);
        /* The stream callback may have aborted it. */
        if (finish != NL_FINISH_NONE && s->status != SEQ_FINISHED) engine_finish_request(e, r, finish);
    }
    /* Steps overlap: each is charged from its sending or the previous
     * reply, whichever came later, so the times add up to the wall time. */
    double end = engine_now();
    double from = f->sent_at > e->last_reply_at ? f->sent_at : e->last_reply_at;
    if (f->prompt_step) e->stats.prefill_seconds += end - from;
    else e->stats.decode_seconds += end - from;
    e->last_reply_at = end;
    engine_publish_stats(e);
    return NL_OK;
}

static nl_status step_locked(nl_engine *e)
{
    if (e->failed)
        return nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    engine_take_inbox(e);
    bool sent = false;
    if (e->n_flights == 0) {
        NL_TRY(send_step(e, &sent));
        if (!sent) return NL_OK;
    }
    /* Async scheduling: the next step goes out before the oldest one's
     * reply is read, so the workers run it while the leader handles that
     * reply; its decoding seqs' inputs are placeholders the workers fill.
     * A seq preempted while a step is built is not in it, and the step it
     * was in is answered right after: by the next schedule, which may
     * readmit it, its tokens are all known. */
    if (e->config.async_scheduling && e->n_flights < RUNNER_MAX_IN_FLIGHT) NL_TRY(send_step(e, &sent));
    return receive_step(e);
}

nl_status engine_run_step(nl_engine *e)
{
    pthread_mutex_lock(&e->step_lock);
    e->in_step = true;
    nl_status st = step_locked(e);
    e->in_step = false;
    pthread_mutex_unlock(&e->step_lock);
    return st;
}

nl_status nl_engine_check(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    nl_status failed = e->failed;
    bool inside = engine_on_stepping_thread(e) && e->in_step; /* from a callback */
    pthread_mutex_unlock(&e->lock);
    if (failed) return nl_error(failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    if (!e->runner->ops->check) return NL_OK;
    /* failing the engine finishes requests: the step lock's work */
    if (!inside) pthread_mutex_lock(&e->step_lock);
    nl_status st = e->failed ? nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg)
                             : e->runner->ops->check(e->runner);
    if (st != NL_OK && !e->failed) st = fail_engine(e, nl_error_prefix(NL_ERR_WORKER, "engine check: "));
    if (!inside) pthread_mutex_unlock(&e->step_lock);
    return st;
}

nl_status nl_engine_step(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (e->background) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_INVALID_ARG, "step: the engine steps itself (nl_engine_start); "
                                            "call nl_engine_stop first");
    }
    e->driver = pthread_self();
    pthread_mutex_unlock(&e->lock);
    return engine_run_step(e);
}

bool nl_engine_has_unfinished(const nl_engine *engine)
{
    nl_engine *e = (nl_engine *)engine; /* the lock, not the engine, changes */
    pthread_mutex_lock(&e->lock);
    bool any = e->n_unfinished > 0;
    pthread_mutex_unlock(&e->lock);
    return any;
}

nl_status nl_engine_run_until_done(nl_engine *e)
{
    while (nl_engine_has_unfinished(e)) NL_TRY(nl_engine_step(e));
    return NL_OK;
}
