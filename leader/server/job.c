/* job.c — a job's life and its result channel (see job.h). */
#include "leader/server/job.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

server_job *server_job_create(api_request *req)
{
    server_job *job = calloc(1, sizeof(*job));
    if (!job) {
        api_request_free(req);
        return NULL;
    }
    atomic_init(&job->refs, 1);
    job->req = *req;
    memset(req, 0, sizeof(*req));
    /* The stop list points into the request itself. */
    if (job->req.params.n_stop > 0) job->req.params.stop = job->req.stop;
    pthread_mutex_init(&job->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&job->cv, &ca);
    pthread_condattr_destroy(&ca);
    job->state = JOB_QUEUED;
    job->taken_state = JOB_QUEUED;
    return job;
}

server_job *server_job_ref(server_job *job)
{
    atomic_fetch_add(&job->refs, 1);
    return job;
}

void server_job_unref(server_job *job)
{
    if (!job || atomic_fetch_sub(&job->refs, 1) != 1) return;
    api_request_free(&job->req);
    free(job->text);
    json_decref(job->logprobs);
    json_decref(job->reply);
    pthread_mutex_destroy(&job->mu);
    pthread_cond_destroy(&job->cv);
    free(job);
}

static bool has_news(const server_job *job)
{
    return job->text_len > 0 || job->logprobs || job->state != job->taken_state;
}

bool server_job_take(server_job *job, double timeout_s, job_update *out)
{
    memset(out, 0, sizeof(*out));
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = until.tv_nsec + (long long)(timeout_s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&job->mu);
    while (!has_news(job)) {
        if (pthread_cond_timedwait(&job->cv, &job->mu, &until) == ETIMEDOUT) break;
    }
    bool news = has_news(job);
    if (news) {
        out->state = job->state;
        job->taken_state = job->state;
        if (job->text_len > 0) {
            out->text = job->text;
            out->text_len = job->text_len;
            job->text = NULL;
            job->text_len = job->text_cap = 0;
        }
        out->logprobs = job->logprobs;
        job->logprobs = NULL;
        if (job->state == JOB_DONE || job->state == JOB_REFUSED) {
            out->reply = job->reply;
            job->reply = NULL;
            out->finish = job->finish;
            out->prompt_tokens = job->prompt_tokens;
            out->completion_tokens = job->completion_tokens;
            out->cached_tokens = job->cached_tokens;
            out->error = job->error;
        }
    }
    pthread_mutex_unlock(&job->mu);
    return news;
}

void job_update_clear(job_update *u)
{
    free(u->text);
    json_decref(u->logprobs);
    json_decref(u->reply);
    memset(u, 0, sizeof(*u));
}

void server_job_push(server_job *job, const char *text, size_t len, json_t *logprobs_steal)
{
    pthread_mutex_lock(&job->mu);
    if (job->state == JOB_QUEUED) job->state = JOB_RUNNING;
    if (len > 0) {
        if (job->text_len + len + 1 > job->text_cap) {
            size_t cap = job->text_cap ? job->text_cap : 256;
            while (cap < job->text_len + len + 1) cap *= 2;
            char *p = realloc(job->text, cap);
            if (p) {
                job->text = p;
                job->text_cap = cap;
            }
        }
        /* Out of memory drops this delta rather than the server. */
        if (job->text_len + len + 1 <= job->text_cap) {
            memcpy(job->text + job->text_len, text, len + 1);
            job->text_len += len;
        }
    }
    if (logprobs_steal) {
        if (!job->logprobs) job->logprobs = json_array();
        if (job->logprobs) json_array_extend(job->logprobs, logprobs_steal);
        json_decref(logprobs_steal);
    }
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&job->mu);
}

void server_job_finish(server_job *job, job_state state, nl_finish_reason finish, const nl_result *r,
                       const api_error *error, json_t *reply_steal)
{
    pthread_mutex_lock(&job->mu);
    job->state = state;
    job->finish = finish;
    if (r) {
        job->prompt_tokens = r->prompt_tokens;
        job->completion_tokens = r->n_tokens;
        job->cached_tokens = r->cached_tokens;
    }
    if (error) job->error = *error;
    json_decref(job->reply);
    job->reply = reply_steal;
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&job->mu);
}
