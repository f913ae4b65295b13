/* engine_thread.c — what lets other threads use an engine while one steps
 * it: the inbox the stepping thread takes at the start of each step, the
 * stats it publishes for any thread, and the background mode in which the
 * engine's own thread does the stepping (nl_engine_start/stop).  The locks
 * and what they guard are described in engine_state.h.
 */
#include <stdlib.h>
#include <time.h>

#include "common/log.h"
#include "common/status.h"
#include "leader/engine/engine_state.h"

double engine_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

nl_status request_ptrs_push(request_ptrs *q, request *r)
{
    if (q->n == q->cap) {
        int32_t cap = q->cap ? 2 * q->cap : 64;
        request **p = realloc(q->items, sizeof(*p) * (size_t)cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "engine: out of memory for %d queued requests", cap);
        q->items = p;
        q->cap = cap;
    }
    q->items[q->n++] = r;
    return NL_OK;
}

bool engine_on_stepping_thread(const nl_engine *e)
{
    return pthread_equal(pthread_self(), e->driver) != 0;
}

void engine_wake(nl_engine *e)
{
    if (e->background) pthread_cond_signal(&e->wake);
}

void engine_publish_stats_locked(nl_engine *e)
{
    nl_engine_stats *p = &e->pub;
    p->num_running = e->sch->running.count;
    p->num_waiting = e->sch->waiting.count + e->n_inbox;
    p->num_kv_blocks = e->bm->num_blocks;
    p->num_free_kv_blocks = e->bm->n_free;
    /* p->prompt_tokens counts submissions, in nl_engine_submit */
    p->cached_tokens = e->stats.cached_tokens;
    p->prefix_cache_hit_rate = e->stats.started_prompt_tokens > 0
                                   ? (double)e->stats.cached_tokens / (double)e->stats.started_prompt_tokens
                                   : 0.0;
    p->output_tokens = e->stats.output_tokens;
    p->preemptions = e->sch->total_preemptions;
    p->steps = e->stats.steps;
    p->prefill_steps = e->stats.prefill_steps;
    p->decode_steps = e->stats.decode_steps;
    p->prefill_seconds = e->stats.prefill_seconds;
    p->decode_seconds = e->stats.decode_seconds;
}

void engine_publish_stats(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    engine_publish_stats_locked(e);
    pthread_mutex_unlock(&e->lock);
}

void nl_engine_get_stats(const nl_engine *engine, nl_engine_stats *stats)
{
    nl_engine *e = (nl_engine *)engine; /* the lock, not the engine, changes */
    pthread_mutex_lock(&e->lock);
    *stats = e->pub;
    pthread_mutex_unlock(&e->lock);
}

void engine_take_inbox(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    request *in = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    e->n_inbox = 0;
    for (request *r = in; r; r = r->next_queued) {
        r->seq.arrival = e->arrival++;
        r->state = REQUEST_ACTIVE;
        scheduler_add(e->sch, &r->seq);
        e->stats.prompt_tokens += r->seq.prompt_len;
    }
    request_ptrs aborts = e->aborts;
    e->aborts = (request_ptrs){0};
    pthread_mutex_unlock(&e->lock);

    /* Only this thread finishes requests, so an unfinished one in the
     * queue cannot be freed under us; a finished one (its abort came too
     * late to matter, or it ended ABORT in a step) is skipped. */
    for (int32_t i = 0; i < aborts.n; i++)
        if (aborts.items[i]->state != REQUEST_FINISHED) engine_finish_request(e, aborts.items[i], NL_FINISH_ABORT);
    free(aborts.items);

    pthread_mutex_lock(&e->lock);
    request_ptrs frees = e->frees;
    e->frees = (request_ptrs){0};
    /* A step in flight still names the seq: it waits for that reply.  The
     * rest are kept at the front of frees and destroyed after the lock. */
    int32_t n_free = 0;
    for (int32_t i = 0; i < frees.n; i++) {
        request *r = frees.items[i];
        if (r->seq.in_flight == 0) frees.items[n_free++] = r;
        else (void)request_ptrs_push(&e->frees, r); /* out of memory: leaked, not freed under the step */
    }
    pthread_mutex_unlock(&e->lock);
    for (int32_t i = 0; i < n_free; i++) request_destroy(frees.items[i]);
    free(frees.items);
    engine_publish_stats(e);
}

/* ---- background mode ---------------------------------------------------- */

/* Under lock: whether a step has anything to do. */
static bool has_work(const nl_engine *e)
{
    return e->n_unfinished > 0 || e->aborts.n > 0 || e->frees.n > 0;
}

static void *engine_thread_main(void *arg)
{
    nl_engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (!e->stopping && !has_work(e)) pthread_cond_wait(&e->wake, &e->lock);
        if (e->stopping) break;
        pthread_mutex_unlock(&e->lock);
        nl_status st = engine_run_step(e);
        /* A failed step has ended every request with the reason (their
         * final callbacks said why) and refuses new ones. */
        if (st != NL_OK) nl_log(NL_LOG_WARN, "engine step failed: %s", nl_last_error());
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

nl_status nl_engine_start(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (e->background) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_INVALID_ARG, "engine start: the engine's thread is already running");
    }
    e->background = true;
    e->stopping = false;
    int rc = pthread_create(&e->thread, NULL, engine_thread_main, e);
    if (rc != 0) {
        e->background = false;
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_RUNTIME, "engine start: cannot create a thread (error %d)", rc);
    }
    e->driver = e->thread;
    pthread_mutex_unlock(&e->lock);
    return NL_OK;
}

nl_status nl_engine_stop(nl_engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (!e->background) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_INVALID_ARG, "engine stop: the engine's thread is not running");
    }
    if (pthread_equal(pthread_self(), e->thread)) {
        pthread_mutex_unlock(&e->lock);
        return nl_error(NL_ERR_INVALID_ARG, "engine stop: called from the engine's own thread (a callback)");
    }
    e->stopping = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    pthread_mutex_lock(&e->lock);
    e->background = false;
    e->stopping = false;
    e->driver = pthread_self();
    pthread_mutex_unlock(&e->lock);
    return NL_OK;
}
