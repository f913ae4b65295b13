/* engine_results.c — how requests end and what the caller gets back:
 * finishing (with the result filled and the final callback), abort, the
 * result of a finished request, the result so far of a running one (peek),
 * and release, which frees a request whatever its state.  Any thread may
 * abort, read results and release; only the stepping thread finishes,
 * peeks and frees (engine_state.h). */
#include <stdlib.h>

#include "common/status.h"
#include "leader/engine/engine_state.h"

request *engine_find_request(const nl_engine *e, uint64_t id)
{
    int64_t v;
    return u64map_get(&e->requests, id, &v) ? (request *)(uintptr_t)v : NULL;
}

void engine_finish_request(nl_engine *e, request *r, nl_finish_reason reason)
{
    pthread_mutex_lock(&e->lock);
    if (r->abort_requested) reason = NL_FINISH_ABORT;
    seq_drop_pending(&r->seq); /* what steps in flight sample for it is discarded */
    if (r->state == REQUEST_ACTIVE) {
        scheduler_finish(e->sch, &r->seq, reason);
    } else {
        r->seq.status = SEQ_FINISHED;
        r->seq.finish = reason;
    }
    r->finish_time = engine_now();
    request_fill_result(r);
    r->state = REQUEST_FINISHED;
    bool released = r->released;
    e->n_unfinished--;
    e->pub.num_finished++;
    /* A final callback's reader sees stats that include this request. */
    engine_publish_stats_locked(e);
    pthread_mutex_unlock(&e->lock);
    if (e->final_cb) e->final_cb(e->final_user, &r->result);
    if (released) {
        /* Not in the map any more; freed at the next inbox take, after
         * this step is done with its seqs. */
        pthread_mutex_lock(&e->lock);
        /* Out of memory for the queue: the request is leaked rather than
         * freed while a step may hold it. */
        (void)request_ptrs_push(&e->frees, r);
        pthread_mutex_unlock(&e->lock);
    }
}

/* Applies the queues at once when the caller is the stepping thread
 * between steps (a single-threaded program sees an abort or release take
 * effect before the call returns). */
static void apply_now_if_stepping_thread(nl_engine *e, bool on_stepping)
{
    if (!on_stepping || e->in_step) return;
    pthread_mutex_lock(&e->step_lock);
    engine_take_inbox(e);
    pthread_mutex_unlock(&e->step_lock);
}

nl_status nl_engine_abort(nl_engine *e, uint64_t request_id)
{
    pthread_mutex_lock(&e->lock);
    request *r = engine_find_request(e, request_id);
    if (!r) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    }
    if (r->state == REQUEST_FINISHED) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_NOT_FOUND, "request %llu: already finished", (unsigned long long)request_id);
    }
    if (r->abort_requested) { /* asked before: it ends ABORT already */
        pthread_mutex_unlock(&e->lock);
        return NL_OK;
    }
    bool on_stepping = engine_on_stepping_thread(e);
    if (on_stepping && e->in_step && r->state == REQUEST_ACTIVE) {
        /* From a callback: the request ends now; the step skips it. */
        r->abort_requested = true;
        pthread_mutex_unlock(&e->lock);
        engine_finish_request(e, r, NL_FINISH_ABORT);
        return NL_OK;
    }
    nl_status st = request_ptrs_push(&e->aborts, r);
    if (st == NL_OK) {
        r->abort_requested = true;
        engine_wake(e);
    }
    pthread_mutex_unlock(&e->lock);
    if (st == NL_OK) apply_now_if_stepping_thread(e, on_stepping);
    return st;
}

nl_status nl_engine_get_result(nl_engine *e, uint64_t request_id, const nl_result **out)
{
    *out = NULL;
    pthread_mutex_lock(&e->lock);
    request *r = engine_find_request(e, request_id);
    nl_status st = NL_OK;
    if (!r)
        st = nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    else if (r->state != REQUEST_FINISHED)
        st = nl_error(NL_ERR_NOT_FOUND, "request %llu: still running", (unsigned long long)request_id);
    else
        *out = &r->result;
    pthread_mutex_unlock(&e->lock);
    return st;
}

nl_status nl_engine_peek(nl_engine *e, uint64_t request_id, const nl_result **out)
{
    *out = NULL;
    pthread_mutex_lock(&e->lock);
    request *r = engine_find_request(e, request_id);
    bool finished = r && r->state == REQUEST_FINISHED;
    pthread_mutex_unlock(&e->lock);
    if (!r) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    /* on the stepping thread, which alone writes a running request */
    if (!finished) request_fill_result(r);
    *out = &r->result;
    return NL_OK;
}

void nl_engine_release(nl_engine *e, uint64_t request_id)
{
    pthread_mutex_lock(&e->lock);
    request *r = engine_find_request(e, request_id);
    if (!r) {
        pthread_mutex_unlock(&e->lock);
        return;
    }
    /* Out of the map now; a finished request is freed by the stepping
     * thread (a step may still hold it), an unfinished one is aborted and
     * freed after its final callback. */
    bool on_stepping = engine_on_stepping_thread(e);
    nl_status st = r->state == REQUEST_FINISHED ? request_ptrs_push(&e->frees, r)
                   : r->abort_requested   ? NL_OK
                                          : request_ptrs_push(&e->aborts, r);
    if (st == NL_OK) {
        u64map_remove(&e->requests, request_id);
        r->released = true;
        r->abort_requested = true;
        engine_wake(e);
    }
    pthread_mutex_unlock(&e->lock);
    if (st == NL_OK) apply_now_if_stepping_thread(e, on_stepping);
}
