/* engine_state.h — struct nl_engine, shared by the files that implement
 * include/nanollm.h's engine:
 *   engine.c          opening on a runner, closing, info, stats, tokenizer
 *   engine_config.c   the engine config's defaults and checks
 *   engine_submit.c   sampling defaults and checks, prompts, submission
 *   engine_step.c     the step loop and engine failure
 *   engine_results.c  finishing, abort, results, release
 *   engine_thread.c   the inbox, background stepping, stats for any thread
 * and engine_open.c, which opens on a model directory.  Requests are the
 * unit (request.h); the scheduler sees only their seqs.
 *
 * Threads (the contract is in nanollm.h).  Three locks, taken in this order:
 *   step_lock  held by whoever touches the scheduler, the block manager,
 *              the seqs or the runner: a step, or the stepping thread
 *              taking the inbox between steps;
 *   lock       the state other threads share: the inbox, the abort and free
 *              queues, the request map, ids, the failure, each request's
 *              state/abort_requested/released, the published stats;
 *   tok_lock   the tokenizer's encoder (its word cache).
 * Other threads never touch a seq: they queue (submit, abort, release) and
 * the stepping thread applies the queues at the start of each step.  A
 * request's finish (reason, result, state FINISHED) is decided under lock,
 * so an abort that saw it unfinished is never lost.
 */
#ifndef NL_LEADER_ENGINE_STATE_H
#define NL_LEADER_ENGINE_STATE_H

#include <pthread.h>
#include <stdint.h>

#include "ipc/wire.h"
#include "leader/engine/block_manager.h"
#include "leader/engine/engine_internal.h"
#include "leader/engine/output.h"
#include "leader/engine/request.h"
#include "leader/engine/runner.h"
#include "leader/engine/scheduler.h"
#include "leader/engine/u64map.h"

/* A step sent to the runner whose reply has not been read yet. */
typedef struct step_flight {
    uint64_t step_id;
    int32_t n_seqs;
    int32_t n_sample;     /* replies to expect                            */
    seq **seqs;           /* [max_num_seqs], each holding in_flight       */
    bool *sample;         /* [max_num_seqs] whether seqs[i] samples       */
    bool prompt_step;     /* computes prompt tokens (counts as prefill)   */
    double sent_at;
} step_flight;

/* A growable array of requests (the abort and free queues). */
typedef struct request_ptrs {
    request **items;
    int32_t n, cap;
} request_ptrs;

/* Appends r; NL_ERR_NOMEM when the array cannot grow. */
nl_status request_ptrs_push(request_ptrs *q, request *r);

struct nl_engine {
    nl_engine_config config;
    engine_model_facts facts;
    char device_name[32];
    char *model_dir;              /* facts.model_dir's copy, or NULL     */
    runner *runner;
    tokenizer *tok;
    block_manager *bm;
    scheduler *sch;
    output_processor output;
    u64map requests;              /* request id -> request *             */
    uint64_t next_id;
    uint64_t arrival;
    uint64_t rng;                 /* seeds for unseeded requests         */
    wire_seq *wire_seqs;          /* [max_num_seqs]                      */
    uint64_t step_id;
    /* Steps in flight, oldest first: at most one unless async scheduling
     * sent the next before reading the oldest's reply. */
    step_flight flights[RUNNER_MAX_IN_FLIGHT];
    int32_t first_flight, n_flights;
    double last_reply_at;         /* when the previous reply was handled */
    nl_status failed;
    char fail_msg[600];
    engine_stats stats;           /* the stepping thread's counters      */
    nl_final_callback final_cb;
    void *final_user;

    pthread_mutex_t step_lock;
    pthread_mutex_t lock;
    pthread_mutex_t tok_lock;
    pthread_cond_t wake;          /* the engine's thread: work or stop   */
    /* Under lock. */
    request *inbox_head, *inbox_tail;
    int32_t n_inbox;
    request_ptrs aborts;          /* abort_requested, not yet applied    */
    request_ptrs frees;           /* released and finished: to destroy   */
    int64_t n_unfinished;         /* accepted, not yet finished          */
    pthread_t driver;             /* the stepping thread                 */
    bool background, stopping;
    nl_engine_stats pub;          /* what nl_engine_get_stats returns    */
    /* The stepping thread's own. */
    bool in_step;
    pthread_t thread;
};

/* The request with that id, or NULL (unknown or released).  Under lock. */
request *engine_find_request(const nl_engine *e, uint64_t id);

/* On the stepping thread: ends r (in the scheduler when it is there; its
 * blocks are freed) with reason, or ABORT when an abort was asked for,
 * fills its result, marks it FINISHED and calls the final callback.  A
 * request released before it finished is queued for freeing afterwards. */
void engine_finish_request(nl_engine *e, request *r, nl_finish_reason reason);

/* On the stepping thread, holding step_lock: takes the inbox (new requests
 * into the scheduler), applies queued aborts and frees released requests,
 * then publishes the stats. */
void engine_take_inbox(nl_engine *e);
/* On the stepping thread: copies the scheduler's and block manager's
 * figures and the counters into e->pub, under lock. */
void engine_publish_stats(nl_engine *e);
void engine_publish_stats_locked(nl_engine *e);
/* Whether the calling thread is the stepping thread (under lock). */
bool engine_on_stepping_thread(const nl_engine *e);
/* Wakes the engine's thread (under lock). */
void engine_wake(nl_engine *e);
/* One step (engine_step.c): takes step_lock and marks the step as running
 * for the callbacks it makes; the caller holds no lock. */
nl_status engine_run_step(nl_engine *e);
/* Monotonic seconds. */
double engine_now(void);

#endif
