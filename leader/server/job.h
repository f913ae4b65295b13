/* job.h — one API request on its way through the server, and the channel
 * that carries its results from the engine thread back to its HTTP thread.
 *
 * The HTTP thread creates a job from a parsed request and hands it to the
 * engine thread (engine_loop.h); both hold a reference.  The engine thread
 * appends what each step produced (text, per-token logprobs) and finally the
 * outcome; the HTTP thread takes what has accumulated whenever it is ready
 * to write, so a slow client sees several tokens in one chunk rather than
 * holding up the engine.  Everything below the mutex is shared; the rest is
 * owned by one side as marked.
 */
#ifndef NL_SERVER_JOB_H
#define NL_SERVER_JOB_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "leader/server/api_error.h"
#include "leader/server/request.h"
#include "nanollm.h"

typedef enum job_state {
    JOB_QUEUED = 0, /* handed over, not yet submitted to the engine       */
    JOB_RUNNING,    /* submitted; results arrive                          */
    JOB_REFUSED,    /* the engine refused it (error holds why)            */
    JOB_DONE,       /* finished: finish, usage (and error on ERROR) final */
} job_state;

typedef struct server_job {
    atomic_int refs;
    /* Set by the HTTP thread before hand-over, read-only afterwards. */
    api_request req;
    char id[48];                 /* "cmpl-…" / "chatcmpl-…"               */
    int64_t created;             /* Unix seconds                          */
    double t_arrival;            /* monotonic seconds                     */

    /* Engine thread only. */
    uint64_t request_id;
    struct server_job *hnext;    /* the engine thread's id -> job chains */
    int32_t n_seen;              /* tokens delivered so far               */
    double t_last_token;
    bool finished_in_step;       /* the stream callback saw the end       */

    /* The channel. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_state state;
    bool cancelled;              /* the client went away                  */
    job_state taken_state;       /* the state the reader last took        */
    char *text;                  /* text not yet taken (NUL-terminated;
                                    text_len bytes, U+0000 among them)   */
    size_t text_len, text_cap;
    json_t *logprobs;            /* per-token entries not yet taken:
                                    {"token", "logprob", "top": [[tok, lp]…]} */
    json_t *reply;               /* tokenize / detokenize: the body       */
    nl_finish_reason finish;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    api_error error;             /* REFUSED, or DONE with finish ERROR    */
} server_job;

/* Takes ownership of req (even on failure, when it returns NULL). */
server_job *server_job_create(api_request *req);
server_job *server_job_ref(server_job *job);
void server_job_unref(server_job *job);

/* What the HTTP thread takes from the channel in one go. */
typedef struct job_update {
    job_state state;
    char *text;          /* malloc'd, NULL when nothing new           */
    size_t text_len;     /* its bytes (it may hold U+0000)            */
    json_t *logprobs;    /* new entries (owned), NULL when none        */
    json_t *reply;       /* tokenize / detokenize (owned) when DONE    */
    nl_finish_reason finish;
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    api_error error;
} job_update;

/* Waits up to timeout_s for anything new (text, logprobs or a state past
 * RUNNING), then takes it.  Returns false when nothing new came in time. */
bool server_job_take(server_job *job, double timeout_s, job_update *out);
void job_update_clear(job_update *u);

/* Engine side: append new text and logprob entries, wake the reader. */
void server_job_push(server_job *job, const char *text, size_t len, json_t *logprobs_steal);
/* Engine side: set the final state (DONE or REFUSED) and wake the reader. */
void server_job_finish(server_job *job, job_state state, nl_finish_reason finish, const nl_result *r,
                       const api_error *error, json_t *reply_steal);

#endif
