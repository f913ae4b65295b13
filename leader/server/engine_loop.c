/* engine_loop.c — the engine thread, its hand-over queue and the id -> job
 * table its stream callback uses (see engine_loop.h).
 *
 * One iteration: take the queued jobs and the cancellations (under the
 * lock), then, without the lock, abort the cancelled requests, submit the
 * new ones, run one step, and finish the jobs whose requests ended.  The
 * stream callback delivers each step's text and logprobs to the job's
 * channel and records the latency histograms; results are read and released
 * after the step, since the callback may not release.
 */
#include "leader/server/engine_loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOOP_BUCKETS 1024          /* id -> job chains                     */
#define LOOP_IDLE_CHECK_S 0.1      /* worker liveness check while idle     */

struct engine_loop {
    pthread_t thread;
    nl_engine_config config;
    char model_dir[4096];
    metrics *metrics;
    nl_engine *engine;             /* engine thread only                   */
    nl_engine_info info;

    pthread_mutex_t mu;            /* guards everything down to why       */
    pthread_cond_t cv;             /* wakes the engine thread              */
    pthread_cond_t opened_cv;      /* the open finished                    */
    bool opened;
    nl_status open_status;
    server_job **queue;            /* ring of max_queue                    */
    int32_t max_queue, q_head, q_count;
    int32_t engine_waiting;        /* the engine's WAITING, last published */
    server_job **cancels;          /* reported by HTTP threads             */
    int32_t n_cancels, cap_cancels;
    int32_t n_active;              /* submitted, not finished              */
    bool draining, stop, failed;
    double deadline;
    char why[640];

    /* Engine thread only. */
    server_job *buckets[LOOP_BUCKETS];
    server_job **finished;         /* ended in the current step           */
    int32_t n_finished, cap_finished;
};

double server_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- id -> job -------------------------------------------------------------- */

static server_job **bucket(engine_loop *loop, uint64_t id)
{
    return &loop->buckets[(id * 0x9E3779B97F4A7C15ULL) >> 54];
}

static server_job *lookup(engine_loop *loop, uint64_t id)
{
    for (server_job *j = *bucket(loop, id); j; j = j->hnext)
        if (j->request_id == id) return j;
    return NULL;
}

static void unlink_job(engine_loop *loop, server_job *job)
{
    for (server_job **p = bucket(loop, job->request_id); *p; p = &(*p)->hnext) {
        if (*p == job) {
            *p = job->hnext;
            job->hnext = NULL;
            return;
        }
    }
}

static bool push_ptr(server_job ***arr, int32_t *n, int32_t *cap, server_job *job)
{
    if (*n == *cap) {
        int32_t c = *cap ? 2 * *cap : 64;
        server_job **p = realloc(*arr, sizeof(*p) * (size_t)c);
        if (!p) return false;
        *arr = p;
        *cap = c;
    }
    (*arr)[(*n)++] = job;
    return true;
}

/* ---- results ------------------------------------------------------------------ */

/* The per-token logprob entries of tokens [from, to) of a result. */
static json_t *logprob_entries(engine_loop *loop, const nl_result *r, int32_t from, int32_t to, int32_t n_top)
{
    if (!r->logprobs || from >= to) return NULL;
    json_t *arr = json_array();
    for (int32_t k = from; k < to && arr; k++) {
        const nl_token_logprob *lp = &r->logprobs[k];
        char *text = NULL;
        size_t len = 0;
        if (nl_engine_decode(loop->engine, &lp->token_id, 1, &text, &len) != NL_OK) text = NULL;
        json_t *top = json_array();
        for (int32_t t = 0; t < lp->n_top && t < n_top; t++) {
            char *alt = NULL;
            size_t alt_len = 0;
            if (nl_engine_decode(loop->engine, &lp->top_ids[t], 1, &alt, &alt_len) != NL_OK) alt = NULL;
            json_array_append_new(top, json_pack("[s%,f]", alt ? alt : "", alt_len, (double)lp->top_logprobs[t]));
            free(alt);
        }
        json_array_append_new(arr, json_pack("{s:s%, s:i, s:f, s:o}", "token", text ? text : "", len, "id",
                                             lp->token_id, "logprob", (double)lp->logprob, "top", top));
        free(text);
    }
    return arr;
}

static void on_stream(void *user, uint64_t request_id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, size_t text_len, bool finished)
{
    (void)new_ids;
    engine_loop *loop = user;
    server_job *job = lookup(loop, request_id);
    if (!job) return;
    double now = server_now();
    if (n_new > 0) {
        if (job->n_seen == 0) metrics_observe(loop->metrics, METRICS_TTFT, now - job->t_arrival);
        else metrics_observe(loop->metrics, METRICS_ITL, now - job->t_last_token);
        job->t_last_token = now;
    }
    json_t *lps = NULL;
    const nl_result *r;
    if (job->req.logprobs >= 0 && nl_engine_peek(loop->engine, request_id, &r) == NL_OK)
        lps = logprob_entries(loop, r, job->n_seen, r->n_tokens, job->req.logprobs);
    job->n_seen += n_new;
    server_job_push(job, text_delta, text_len, lps);
    /* finished has room for every request of a step (max_num_seqs). */
    if (finished && !job->finished_in_step && loop->n_finished < loop->cap_finished) {
        job->finished_in_step = true;
        loop->finished[loop->n_finished++] = job;
    }
}

/* Delivers a finished (or aborted) request's outcome and releases it.
 * error, when given, replaces the engine's (a shutdown's abort). */
static void finish_job(engine_loop *loop, server_job *job, const api_error *override)
{
    const nl_result *r = NULL;
    if (nl_engine_get_result(loop->engine, job->request_id, &r) != NL_OK) {
        nl_engine_abort(loop->engine, job->request_id);
        nl_engine_get_result(loop->engine, job->request_id, &r);
    }
    nl_finish_reason finish = r ? r->finish_reason : NL_FINISH_ABORT;
    api_error err, *e = NULL;
    if (override) {
        err = *override;
        e = &err;
    } else if (finish == NL_FINISH_ERROR) {
        api_error_set(&err, 500, "server_error", "", "engine_error", "the engine failed: %s",
                      r && r->error ? r->error : "unknown error");
        e = &err;
    }
    if (job->n_seen == 0 && r && r->n_tokens > 0 && finish != NL_FINISH_ERROR)
        metrics_observe(loop->metrics, METRICS_TTFT, server_now() - job->t_arrival);
    metrics_observe(loop->metrics, METRICS_E2E, server_now() - job->t_arrival);
    metrics_count_finished(loop->metrics, finish);
    server_job_finish(job, JOB_DONE, finish, r, e, NULL);
    nl_engine_release(loop->engine, job->request_id);
    unlink_job(loop, job);
    pthread_mutex_lock(&loop->mu);
    loop->n_active--;
    pthread_mutex_unlock(&loop->mu);
    server_job_unref(job);
}

/* Finishes every active job (after an engine failure, or to abort all). */
static void finish_all(engine_loop *loop, const api_error *override)
{
    for (int b = 0; b < LOOP_BUCKETS; b++) {
        while (loop->buckets[b]) {
            server_job *job = loop->buckets[b];
            if (override) nl_engine_abort(loop->engine, job->request_id);
            finish_job(loop, job, override);
        }
    }
    loop->n_finished = 0;
}

static void engine_failed(engine_loop *loop, const char *why)
{
    pthread_mutex_lock(&loop->mu);
    if (!loop->failed) snprintf(loop->why, sizeof(loop->why), "%s", why);
    loop->failed = true;
    pthread_mutex_unlock(&loop->mu);
    fprintf(stderr, "nanollm-launch: serve: the engine failed: %s\n", why);
    /* Every unfinished request has ended with NL_FINISH_ERROR. */
    finish_all(loop, NULL);
}

static void refuse(server_job *job, int status, const char *type, const char *param, const char *code,
                   const char *msg)
{
    api_error err;
    api_error_set(&err, status, type, param, code, "%s", msg);
    server_job_finish(job, JOB_REFUSED, NL_FINISH_NONE, NULL, &err, NULL);
}

/* Runs a tokenize or detokenize job at once. */
static void run_tokenizer_job(engine_loop *loop, server_job *job)
{
    api_request *req = &job->req;
    json_t *reply = NULL;
    if (req->kind == API_TOKENIZE) {
        int32_t *ids = NULL, n = 0;
        if (nl_engine_encode(loop->engine, req->prompt.text, req->prompt_len, req->encode_flags, &ids, &n) !=
            NL_OK) {
            refuse(job, 400, "invalid_request_error", "prompt", NULL, nl_last_error());
            return;
        }
        json_t *arr = json_array();
        for (int32_t k = 0; k < n; k++) json_array_append_new(arr, json_integer(ids[k]));
        free(ids);
        reply = json_pack("{s:i, s:i, s:o}", "count", n, "max_model_len", loop->info.max_model_len, "tokens",
                          arr);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (nl_engine_decode(loop->engine, req->ids, req->prompt.n_tokens, &text, &len) != NL_OK) {
            refuse(job, 400, "invalid_request_error", "tokens", NULL, nl_last_error());
            return;
        }
        reply = json_pack("{s:s%}", "prompt", text, len);
        free(text);
    }
    if (!reply) {
        refuse(job, 500, "server_error", "", NULL, "out of memory building the reply");
        return;
    }
    server_job_finish(job, JOB_DONE, NL_FINISH_STOP, NULL, NULL, reply);
}

/* Submits a generation job; refuses it with the engine's reason. */
static void submit_job(engine_loop *loop, server_job *job)
{
    api_request *req = &job->req;
    uint64_t id = 0;
    nl_status st = nl_engine_submit(loop->engine, &req->prompt, &req->params, &id);
    if (st != NL_OK) {
        const char *msg = nl_last_error();
        if (st == NL_ERR_INVALID_ARG || st == NL_ERR_UNSUPPORTED) {
            const char *param = strncmp(msg, "stop_token_ids", 14) == 0 ? "stop_token_ids"
                                : strncmp(msg, "stop", 4) == 0              ? "stop"
                                                                            : req->prompt_field;
            const char *code = strstr(msg, "max_model_len") || strstr(msg, "KV blocks") ? "context_length_exceeded"
                                                                                        : NULL;
            refuse(job, 400, "invalid_request_error", param, code, msg);
        } else {
            refuse(job, 503, "service_unavailable", "", NULL, msg);
        }
        return;
    }
    server_job_ref(job);
    job->request_id = id;
    job->hnext = *bucket(loop, id);
    *bucket(loop, id) = job;
    pthread_mutex_lock(&loop->mu);
    loop->n_active++;
    pthread_mutex_unlock(&loop->mu);
    server_job_push(job, NULL, 0, NULL); /* RUNNING: the reader may answer now */
}

static void publish_stats(engine_loop *loop)
{
    nl_engine_stats st;
    nl_engine_get_stats(loop->engine, &st);
    metrics_set_engine(loop->metrics, &st);
    pthread_mutex_lock(&loop->mu);
    loop->engine_waiting = st.num_waiting;
    pthread_mutex_unlock(&loop->mu);
}

static void run(engine_loop *loop)
{
    server_job **taken = NULL, **cancels = NULL;
    int32_t cap_taken = 0, cap_cancels = 0;
    double next_check = 0;
    api_error shutdown_err;
    api_error_set(&shutdown_err, 503, "service_unavailable", "", "shutting_down",
                  "the server is shutting down; the request was aborted");
    for (;;) {
        bool busy = nl_engine_has_unfinished(loop->engine);
        pthread_mutex_lock(&loop->mu);
        while (!busy && loop->q_count == 0 && loop->n_cancels == 0 && !loop->stop &&
               !(loop->draining && loop->n_active > 0 && server_now() >= loop->deadline)) {
            double now = server_now();
            if (now >= next_check) break;
            struct timespec until;
            double wake = next_check;
            if (loop->draining && loop->n_active > 0 && loop->deadline < wake) wake = loop->deadline;
            until.tv_sec = (time_t)wake;
            until.tv_nsec = (long)((wake - (double)until.tv_sec) * 1e9);
            pthread_cond_timedwait(&loop->cv, &loop->mu, &until);
        }
        /* Take the queue and the cancellations. */
        int32_t n_taken = 0, n_cancels = loop->n_cancels;
        if (loop->q_count > cap_taken) {
            server_job **p = realloc(taken, sizeof(*p) * (size_t)loop->q_count);
            if (p) {
                taken = p;
                cap_taken = loop->q_count;
            }
        }
        while (loop->q_count > 0 && n_taken < cap_taken) {
            taken[n_taken++] = loop->queue[loop->q_head];
            loop->q_head = (loop->q_head + 1) % loop->max_queue;
            loop->q_count--;
        }
        loop->engine_waiting += n_taken; /* until the next published count */
        server_job **tmp = cancels;
        int32_t tmp_cap = cap_cancels;
        cancels = loop->cancels;
        cap_cancels = loop->cap_cancels;
        loop->cancels = tmp;
        loop->cap_cancels = tmp_cap;
        loop->n_cancels = 0;
        bool stop = loop->stop, failed = loop->failed;
        bool past_deadline = loop->draining && server_now() >= loop->deadline;
        pthread_mutex_unlock(&loop->mu);

        for (int32_t k = 0; k < n_cancels; k++) {
            server_job *job = cancels[k];
            if (job->request_id && lookup(loop, job->request_id) == job) {
                nl_engine_abort(loop->engine, job->request_id);
                finish_job(loop, job, NULL);
            }
            server_job_unref(job);
        }
        for (int32_t k = 0; k < n_taken; k++) {
            server_job *job = taken[k];
            bool gone;
            pthread_mutex_lock(&job->mu);
            gone = job->cancelled;
            pthread_mutex_unlock(&job->mu);
            if (gone) refuse(job, 499, "invalid_request_error", "", NULL, "the client went away");
            else if (stop) refuse(job, 503, "service_unavailable", "", "shutting_down", "the server is shutting down");
            else if (failed) refuse(job, 503, "service_unavailable", "", "engine_failed", "the engine has failed");
            else if (job->req.kind == API_TOKENIZE || job->req.kind == API_DETOKENIZE) run_tokenizer_job(loop, job);
            else submit_job(loop, job);
            server_job_unref(job);
        }
        if (stop || past_deadline) finish_all(loop, &shutdown_err);

        if (nl_engine_has_unfinished(loop->engine)) {
            loop->n_finished = 0;
            nl_status st = nl_engine_step(loop->engine);
            char why[640];
            snprintf(why, sizeof(why), "%s", st != NL_OK ? nl_last_error() : "");
            for (int32_t k = 0; k < loop->n_finished; k++) finish_job(loop, loop->finished[k], NULL);
            loop->n_finished = 0;
            if (st != NL_OK) engine_failed(loop, why);
        } else if (server_now() >= next_check) {
            next_check = server_now() + LOOP_IDLE_CHECK_S;
            if (!failed && nl_engine_check(loop->engine) != NL_OK) engine_failed(loop, nl_last_error());
        }
        publish_stats(loop);
        if (stop) break;
    }
    free(taken);
    free(cancels);
}

static void *engine_main(void *arg)
{
    engine_loop *loop = arg;
    nl_engine *engine = NULL;
    nl_status st = nl_engine_open(&loop->config, &engine);
    pthread_mutex_lock(&loop->mu);
    loop->open_status = st;
    if (st != NL_OK) snprintf(loop->why, sizeof(loop->why), "%s", nl_last_error());
    loop->engine = engine;
    if (engine) nl_engine_get_info(engine, &loop->info);
    loop->opened = true;
    pthread_cond_broadcast(&loop->opened_cv);
    pthread_mutex_unlock(&loop->mu);
    if (st != NL_OK) return NULL;
    nl_engine_set_stream_callback(engine, on_stream, loop);
    publish_stats(loop);
    run(loop);
    nl_engine_close(engine);
    return NULL;
}

nl_status engine_loop_start(const nl_engine_config *config, int32_t max_queue, metrics *m, engine_loop **out,
                            char *why, size_t why_len)
{
    *out = NULL;
    engine_loop *loop = calloc(1, sizeof(*loop));
    if (!loop || max_queue < 1 || !(loop->queue = calloc((size_t)max_queue, sizeof(server_job *)))) {
        free(loop);
        snprintf(why, why_len, "out of memory for a queue of %d", max_queue);
        return NL_ERR_NOMEM;
    }
    loop->config = *config;
    if (config->model_dir) {
        snprintf(loop->model_dir, sizeof(loop->model_dir), "%s", config->model_dir);
        loop->config.model_dir = loop->model_dir;
    }
    loop->max_queue = max_queue;
    loop->metrics = m;
    loop->cap_finished = config->max_num_seqs > 0 ? config->max_num_seqs : 1;
    loop->finished = calloc((size_t)loop->cap_finished, sizeof(server_job *));
    if (!loop->finished) {
        free(loop->queue);
        free(loop);
        snprintf(why, why_len, "out of memory for %d requests", config->max_num_seqs);
        return NL_ERR_NOMEM;
    }
    pthread_mutex_init(&loop->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&loop->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&loop->opened_cv, NULL);
    int rc = pthread_create(&loop->thread, NULL, engine_main, loop);
    if (rc != 0) {
        snprintf(why, why_len, "cannot start the engine thread: %s", strerror(rc));
        free(loop->finished);
        free(loop->queue);
        free(loop);
        return NL_ERR_RUNTIME;
    }
    pthread_mutex_lock(&loop->mu);
    while (!loop->opened) pthread_cond_wait(&loop->opened_cv, &loop->mu);
    nl_status st = loop->open_status;
    pthread_mutex_unlock(&loop->mu);
    if (st != NL_OK) {
        snprintf(why, why_len, "%s", loop->why);
        pthread_join(loop->thread, NULL);
        free(loop->finished);
        free(loop->queue);
        free(loop);
        return st;
    }
    *out = loop;
    return NL_OK;
}

void engine_loop_stop(engine_loop *loop)
{
    if (!loop) return;
    pthread_mutex_lock(&loop->mu);
    loop->stop = true;
    pthread_cond_signal(&loop->cv);
    pthread_mutex_unlock(&loop->mu);
    pthread_join(loop->thread, NULL);
    /* Cancellations reported after the thread's last look. */
    for (int32_t k = 0; k < loop->n_cancels; k++) server_job_unref(loop->cancels[k]);
    free(loop->cancels);
    free(loop->finished);
    free(loop->queue);
    pthread_mutex_destroy(&loop->mu);
    pthread_cond_destroy(&loop->cv);
    pthread_cond_destroy(&loop->opened_cv);
    free(loop);
}

const nl_engine_info *engine_loop_info(const engine_loop *loop)
{
    return &loop->info;
}

bool engine_loop_submit(engine_loop *loop, server_job *job, api_error *err)
{
    pthread_mutex_lock(&loop->mu);
    bool ok = false;
    if (loop->draining || loop->stop)
        api_error_set(err, 503, "service_unavailable", "", "shutting_down", "the server is shutting down");
    else if (loop->failed)
        api_error_set(err, 503, "service_unavailable", "", "engine_failed", "the engine has failed: %s", loop->why);
    else if (loop->q_count + loop->engine_waiting >= loop->max_queue)
        api_error_set(err, 503, "service_unavailable", "", "queue_full",
                      "the server is overloaded: %d requests already wait to run (--max-queue %d)",
                      loop->q_count + loop->engine_waiting, loop->max_queue);
    else {
        loop->queue[(loop->q_head + loop->q_count) % loop->max_queue] = server_job_ref(job);
        loop->q_count++;
        pthread_cond_signal(&loop->cv);
        ok = true;
    }
    pthread_mutex_unlock(&loop->mu);
    return ok;
}

void engine_loop_cancel(engine_loop *loop, server_job *job)
{
    pthread_mutex_lock(&job->mu);
    bool already = job->cancelled;
    job->cancelled = true;
    bool done = job->state == JOB_DONE || job->state == JOB_REFUSED;
    pthread_mutex_unlock(&job->mu);
    if (already || done) return;
    pthread_mutex_lock(&loop->mu);
    if (push_ptr(&loop->cancels, &loop->n_cancels, &loop->cap_cancels, job)) server_job_ref(job);
    pthread_cond_signal(&loop->cv);
    pthread_mutex_unlock(&loop->mu);
}

bool engine_loop_healthy(engine_loop *loop, char *why, size_t why_len)
{
    pthread_mutex_lock(&loop->mu);
    bool ok = !loop->failed;
    if (!ok && why) snprintf(why, why_len, "%s", loop->why);
    pthread_mutex_unlock(&loop->mu);
    return ok;
}

void engine_loop_drain(engine_loop *loop, double deadline_s)
{
    pthread_mutex_lock(&loop->mu);
    loop->draining = true;
    loop->deadline = deadline_s;
    pthread_cond_signal(&loop->cv);
    pthread_mutex_unlock(&loop->mu);
}

int32_t engine_loop_in_flight(engine_loop *loop)
{
    pthread_mutex_lock(&loop->mu);
    int32_t n = loop->q_count + loop->n_active;
    pthread_mutex_unlock(&loop->mu);
    return n;
}
