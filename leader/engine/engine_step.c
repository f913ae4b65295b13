/* engine_step.c — the step loop.
 *
 * A step takes the inbox (engine_thread.c), schedules a batch, sends it as
 * one RUN command whose tokens and block tables point straight into the
 * seqs (batch_wire.h: no copies, no per-step allocation), checks the reply,
 * commits the computed tokens to the scheduler and hands each sampled token
 * to the output processor (output.h), finishing the requests it stops.
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

/* Ends every unfinished request with the failure and stops the engine.
 * Holding step_lock. */
static nl_status fail_engine(nl_engine *e, nl_status st)
{
    snprintf(e->fail_msg, sizeof(e->fail_msg), "%s", nl_last_error());
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

static nl_status step_locked(nl_engine *e)
{
    if (e->failed)
        return nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    engine_take_inbox(e);
    const sched_batch *b = scheduler_schedule(e->sch);
    if (b->n_seqs == 0) return NL_OK;

    double t0 = engine_now();
    /* A step that computes prompt tokens, even a one-token prompt beside
     * decodes, counts as prefill in the stats. */
    bool prompt_step = b->is_prefill;
    for (int32_t i = 0; i < b->n_seqs && !prompt_step; i++)
        prompt_step = b->seqs[i]->num_computed < b->seqs[i]->prompt_len;
    wire_run cmd;
    int32_t n_sample = batch_wire_build(b, ++e->step_id, e->wire_seqs, &cmd);
    wire_reply reply;
    reply.status = NL_OK;
    reply.n_sampled = 0;
    reply.sampled = NULL;
    reply.error[0] = '\0';
    nl_status st = e->runner->ops->execute(e->runner, &cmd, &reply);
    if (st != NL_OK) return fail_engine(e, nl_error_prefix(NL_ERR_WORKER, "step %llu: ",
                                                          (unsigned long long)cmd.step_id));
    if (reply.status != NL_OK)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: %s", (unsigned long long)cmd.step_id,
                                       reply.error[0] ? reply.error : nl_status_name(reply.status)));
    if (reply.n_sampled != n_sample)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: the workers sampled %d tokens, expected %d",
                                       (unsigned long long)cmd.step_id, reply.n_sampled, n_sample));

    e->stats.steps++;
    if (prompt_step) e->stats.prefill_steps++; else e->stats.decode_steps++;
    scheduler_commit(e->sch);
    double now = engine_now();
    int32_t j = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        if (!e->wire_seqs[i].sample) continue;
        seq *s = b->seqs[i];
        const wire_sampled *sm = &reply.sampled[j++];
        if (sm->seq_id != s->id || sm->token_id < 0 || sm->token_id >= e->facts.vocab_size)
            return fail_engine(e, nl_error(NL_ERR_WORKER,
                                           "step %llu: reply %d is token %d for seq %llu, expected seq %llu "
                                           "and a token in [0, %d)",
                                           (unsigned long long)cmd.step_id, j - 1, sm->token_id,
                                           (unsigned long long)sm->seq_id, (unsigned long long)s->id,
                                           e->facts.vocab_size));
        if (s->status == SEQ_FINISHED) continue; /* aborted by a callback this step */
        request *r = request_of(s);
        if (seq_num_output(s) == 0) {
            if (s->prompt_cached >= 0) e->stats.cached_tokens += s->prompt_cached;
            e->stats.started_prompt_tokens += s->prompt_len;
            r->first_token_time = now;
        }
        e->stats.output_tokens++;
        nl_finish_reason finish;
        st = output_process_token(&e->output, r, sm, &finish);
        if (st != NL_OK) return fail_engine(e, st);
        /* The stream callback may have aborted it. */
        if (finish != NL_FINISH_NONE && s->status != SEQ_FINISHED) engine_finish_request(e, r, finish);
    }
    if (prompt_step) e->stats.prefill_seconds += engine_now() - t0;
    else e->stats.decode_seconds += engine_now() - t0;
    engine_publish_stats(e);
    return NL_OK;
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
