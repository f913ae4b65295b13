/* test_engine_threads.c — the engine's threading contract (nanollm.h,
 * "Threads") under load, on the fake runner: submitter threads submit
 * 12,000 requests and abort every third, another thread aborts at random
 * and releases, another reads the stats, while one thread steps (or the
 * engine's own thread does, in background mode).  Every request must get
 * exactly one final callback; every abort that returned NL_OK must end its
 * request with NL_FINISH_ABORT; every other request must produce exactly the
 * fake model's tokens.  Built so it also runs under -fsanitize=thread.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/mix64.h"
#include "common/status.h"
#include "leader/engine/engine_internal.h"
#include "tests/check_run.h"
#include "tests/fake_runner.h"

#define VOCAB 1000
#define N_SUBMITTERS 4
#define PER_SUBMITTER 3000
#define N_REQUESTS (N_SUBMITTERS * PER_SUBMITTER)
#define MAX_PROMPT 24
#define MAX_OUT 12
#define MAX_SEQS 64
#define N_BLOCKS 512

typedef struct slot {
    int32_t prompt[MAX_PROMPT];
    int32_t n_prompt;
    int32_t max_tokens;
    int32_t logprobs;
    _Atomic uint64_t id;          /* 0 until submitted                     */
    _Atomic int abort_ok;         /* an abort of it returned NL_OK         */
    _Atomic int finals;           /* final callbacks seen                  */
    /* written by the final callback only */
    nl_finish_reason reason;
    int32_t n_out;
    int32_t out[MAX_OUT];
    bool logprobs_ok;
} slot;

typedef struct world {
    nl_engine *e;
    slot *slots;
    _Atomic int submitters_done;
    _Atomic int stop_helpers;
    _Atomic int64_t stats_reads;
    _Atomic int bad_stats;
    _Atomic int final_count;
    _Atomic int releases;
} world;

static nl_engine *open_fake_engine(void)
{
    nl_engine_config c;
    nl_engine_config_init(&c);
    c.max_num_seqs = MAX_SEQS;
    c.max_num_batched_tokens = 256;
    fake_runner_options o = {.num_kv_blocks = N_BLOCKS, .block_size = 16, .vocab_size = VOCAB, .cheap = true};
    runner *r;
    ck_assert_int_eq(fake_runner_create(&o, &r), NL_OK);
    engine_model_facts f;
    memset(&f, 0, sizeof(f));
    f.vocab_size = VOCAB;
    f.max_position_embeddings = 4096;
    f.device_name = "fake";
    nl_engine *e = NULL;
    ck_assert_msg(engine_open_with_runner(&c, &f, r, NULL, &e) == NL_OK, "%s", nl_last_error());
    return e;
}

/* Runs on the stepping thread: records what the request ended with and
 * releases it (the result must stay valid until then). */
static void on_final(void *user, const nl_result *r)
{
    world *w = user;
    slot *s = r->user;
    s->reason = r->finish_reason;
    s->n_out = r->n_tokens < MAX_OUT ? r->n_tokens : MAX_OUT;
    memcpy(s->out, r->token_ids, sizeof(int32_t) * (size_t)s->n_out);
    s->logprobs_ok = true;
    if (s->logprobs > 0) {
        s->logprobs_ok = r->logprobs != NULL;
        for (int32_t k = 0; s->logprobs_ok && k < r->n_tokens; k++)
            s->logprobs_ok = r->logprobs[k].token_id == r->token_ids[k] &&
                             r->logprobs[k].logprob == fake_runner_logprob(r->token_ids[k]) &&
                             r->logprobs[k].n_top == s->logprobs;
    }
    if (r->latency < 0 || r->time_to_first_token < 0 || r->finish_time < r->arrival_time)
        s->logprobs_ok = false;
    atomic_fetch_add(&s->finals, 1);
    atomic_fetch_add(&w->final_count, 1);
    nl_engine_release(w->e, r->request_id);
}

typedef struct submitter {
    world *w;
    int index;
} submitter;

static void *submit_main(void *arg)
{
    submitter *sub = arg;
    world *w = sub->w;
    for (int k = 0; k < PER_SUBMITTER; k++) {
        int i = sub->index * PER_SUBMITTER + k;
        slot *s = &w->slots[i];
        nl_prompt p = {.kind = NL_PROMPT_TOKENS, .token_ids = s->prompt, .n_tokens = s->n_prompt};
        nl_sampling_params sp;
        nl_sampling_params_init(&sp);
        sp.max_tokens = s->max_tokens;
        sp.temperature = 0.0f;
        sp.logprobs = s->logprobs;
        uint64_t id = 0;
        nl_status st = nl_engine_submit_user(w->e, &p, &sp, s, &id);
        ck_assert_msg(st == NL_OK, "submit %d: %s", i, nl_last_error());
        atomic_store(&s->id, id);
        /* every third, aborted at once by its submitter */
        if (i % 3 == 0 && nl_engine_abort(w->e, id) == NL_OK) atomic_store(&s->abort_ok, 1);
        if (k % 64 == 0) usleep(50);
    }
    atomic_fetch_add(&w->submitters_done, 1);
    return NULL;
}

/* Aborts requests at random, some of them long finished or released, to
 * race aborts with finishing. */
static void *abort_main(void *arg)
{
    world *w = arg;
    uint64_t rng = 12345;
    while (!atomic_load(&w->stop_helpers)) {
        int i = (int)(nl_splitmix64_next(&rng) % N_REQUESTS);
        slot *s = &w->slots[i];
        uint64_t id = atomic_load(&s->id);
        if (id == 0 || i % 3 == 0) continue;
        if (i % 7 == 1 && nl_engine_abort(w->e, id) == NL_OK) atomic_store(&s->abort_ok, 1);
        usleep(20);
    }
    return NULL;
}

static void *stats_main(void *arg)
{
    world *w = arg;
    while (!atomic_load(&w->stop_helpers)) {
        nl_engine_stats st;
        nl_engine_get_stats(w->e, &st);
        if (st.num_free_kv_blocks < 0 || st.num_free_kv_blocks > st.num_kv_blocks || st.num_kv_blocks != N_BLOCKS ||
            st.num_running < 0 || st.num_running > MAX_SEQS || st.num_waiting < 0 ||
            st.prefix_cache_hit_rate < 0 || st.prefix_cache_hit_rate > 1 || st.num_finished > N_REQUESTS)
            atomic_fetch_add(&w->bad_stats, 1);
        (void)nl_engine_has_unfinished(w->e);
        atomic_fetch_add(&w->stats_reads, 1);
    }
    return NULL;
}

static void make_workload(slot *slots)
{
    uint64_t rng = 99;
    for (int i = 0; i < N_REQUESTS; i++) {
        slot *s = &slots[i];
        s->n_prompt = 1 + (int32_t)(nl_splitmix64_next(&rng) % MAX_PROMPT);
        for (int32_t k = 0; k < s->n_prompt; k++) s->prompt[k] = (int32_t)(nl_splitmix64_next(&rng) % VOCAB);
        s->max_tokens = 1 + (int32_t)(nl_splitmix64_next(&rng) % MAX_OUT);
        s->logprobs = i % 5 == 0 ? 3 : 0;
    }
}

static void check_outcomes(world *w)
{
    int aborted = 0, completed = 0;
    for (int i = 0; i < N_REQUESTS; i++) {
        slot *s = &w->slots[i];
        ck_assert_msg(atomic_load(&s->finals) == 1, "request %d: %d final callbacks", i, atomic_load(&s->finals));
        ck_assert_msg(s->logprobs_ok, "request %d: wrong logprobs or times", i);
        if (atomic_load(&s->abort_ok)) {
            ck_assert_msg(s->reason == NL_FINISH_ABORT, "request %d: abort returned OK, ended with %d", i,
                          (int)s->reason);
            aborted++;
            continue;
        }
        ck_assert_msg(s->reason == NL_FINISH_LENGTH, "request %d: ended with %d", i, (int)s->reason);
        ck_assert_int_eq(s->n_out, s->max_tokens);
        /* the cheap fake model: each token from the previous one and the length */
        for (int32_t k = 0; k < s->n_out; k++) {
            int32_t all[MAX_PROMPT + MAX_OUT];
            memcpy(all, s->prompt, sizeof(int32_t) * (size_t)s->n_prompt);
            memcpy(all + s->n_prompt, s->out, sizeof(int32_t) * (size_t)k);
            int32_t want = fake_runner_reference(all, s->n_prompt + k, VOCAB, true);
            ck_assert_msg(s->out[k] == want, "request %d token %d: %d, expected %d", i, k, s->out[k], want);
        }
        completed++;
    }
    /* the test means something only when both kinds happened */
    ck_assert_int_ge(aborted, N_REQUESTS / 4);
    ck_assert_int_ge(completed, N_REQUESTS / 4);
    ck_assert_int_eq(atomic_load(&w->bad_stats), 0);
    ck_assert_int_gt(atomic_load(&w->stats_reads), 0);
    nl_engine_stats st;
    nl_engine_get_stats(w->e, &st);
    ck_assert_int_eq(st.num_finished, N_REQUESTS);
    ck_assert_int_eq(st.num_running, 0);
    ck_assert_int_eq(st.num_waiting, 0);
    ck_assert_int_eq(st.num_free_kv_blocks, st.num_kv_blocks);
}

static void run_world(bool background)
{
    world *w = calloc(1, sizeof(*w));
    w->slots = calloc(N_REQUESTS, sizeof(slot));
    make_workload(w->slots);
    w->e = open_fake_engine();
    nl_engine_set_final_callback(w->e, on_final, w);
    if (background) ck_assert_int_eq(nl_engine_start(w->e), NL_OK);
    pthread_t subs[N_SUBMITTERS], aborter, reader;
    submitter args[N_SUBMITTERS];
    for (int k = 0; k < N_SUBMITTERS; k++) {
        args[k] = (submitter){w, k};
        ck_assert_int_eq(pthread_create(&subs[k], NULL, submit_main, &args[k]), 0);
    }
    ck_assert_int_eq(pthread_create(&aborter, NULL, abort_main, w), 0);
    ck_assert_int_eq(pthread_create(&reader, NULL, stats_main, w), 0);
    if (background) {
        while (atomic_load(&w->final_count) < N_REQUESTS) usleep(1000);
    } else {
        while (atomic_load(&w->submitters_done) < N_SUBMITTERS || nl_engine_has_unfinished(w->e)) {
            nl_status st = nl_engine_step(w->e);
            ck_assert_msg(st == NL_OK, "step: %s", nl_last_error());
            if (!nl_engine_has_unfinished(w->e)) usleep(100);
        }
    }
    atomic_store(&w->stop_helpers, 1);
    for (int k = 0; k < N_SUBMITTERS; k++) pthread_join(subs[k], NULL);
    pthread_join(aborter, NULL);
    pthread_join(reader, NULL);
    if (background) ck_assert_int_eq(nl_engine_stop(w->e), NL_OK);
    else ck_assert_int_eq(nl_engine_step(w->e), NL_OK); /* frees what the last step's callbacks released */
    check_outcomes(w);
    nl_engine_close(w->e);
    free(w->slots);
    free(w);
}

START_TEST(test_threads_one_stepper)
{
    run_world(false);
}
END_TEST

START_TEST(test_threads_background)
{
    run_world(true);
}
END_TEST

typedef struct abort_args {
    nl_engine *e;
    uint64_t id;
    nl_status first, second;
} abort_args;

static void *abort_twice(void *arg)
{
    abort_args *a = arg;
    a->first = nl_engine_abort(a->e, a->id);
    a->second = nl_engine_abort(a->e, a->id);
    return NULL;
}

/* An abort from another thread lands at the next step, and NL_OK means the
 * request ends ABORT even when it would have finished in that step.  From
 * the stepping thread it takes effect at once. */
START_TEST(test_abort_from_other_thread_is_kept)
{
    nl_engine *e = open_fake_engine();
    int32_t prompt[4] = {1, 2, 3, 4};
    nl_prompt p = {.kind = NL_PROMPT_TOKENS, .token_ids = prompt, .n_tokens = 4};
    nl_sampling_params sp;
    nl_sampling_params_init(&sp);
    sp.max_tokens = 1; /* would finish in its first step */
    uint64_t id;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    abort_args a = {e, id, -1, -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, abort_twice, &a), 0);
    pthread_join(t, NULL);
    ck_assert_int_eq(a.first, NL_OK);
    ck_assert_int_eq(a.second, NL_OK); /* asked again: still unfinished */
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_ERR_NOT_FOUND); /* not applied yet */
    ck_assert(nl_engine_has_unfinished(e));
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ABORT);
    ck_assert_int_eq(r->n_tokens, 0);
    ck_assert_int_eq(nl_engine_abort(e, id), NL_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "already finished"));
    nl_engine_release(e, id);
    ck_assert_int_eq(nl_engine_abort(e, id), NL_ERR_NOT_FOUND);
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_ERR_NOT_FOUND);
    /* on the stepping thread: at once, without a step */
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    ck_assert_int_eq(nl_engine_abort(e, id), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ABORT);
    ck_assert(!nl_engine_has_unfinished(e));
    nl_engine_close(e);
}
END_TEST

/* A runner around the fake one that, at a chosen step, has another thread
 * abort a request while the step is in flight (after the batch was built,
 * before its tokens are processed). */
typedef struct hooked_runner {
    runner base;
    runner *inner;
    uint64_t at_step;
    abort_args *abort;
} hooked_runner;

static nl_status hooked_submit(runner *base, const wire_run *cmd)
{
    hooked_runner *h = (hooked_runner *)base;
    return h->inner->ops->submit(h->inner, cmd);
}

/* The abort comes once the step's reply is there, before the engine reads
 * it: with async scheduling the next step is already sent by then. */
static nl_status hooked_wait(runner *base, wire_reply *reply)
{
    hooked_runner *h = (hooked_runner *)base;
    nl_status st = h->inner->ops->wait(h->inner, reply);
    if (st == NL_OK && reply->step_id == h->at_step) {
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, abort_twice, h->abort), 0);
        pthread_join(t, NULL);
    }
    return st;
}

static void hooked_destroy(runner *base)
{
    hooked_runner *h = (hooked_runner *)base;
    h->inner->ops->destroy(h->inner);
    free(h);
}

static const runner_ops hooked_ops = {.submit = hooked_submit, .wait = hooked_wait, .destroy = hooked_destroy};

/* The abort arrives during the very step in which the request reaches
 * max_tokens: it returned NL_OK, so the request must end ABORT (with the
 * tokens it has), not LENGTH. */
START_TEST(test_abort_during_finishing_step)
{
    fake_runner_options o = {.num_kv_blocks = N_BLOCKS, .block_size = 16, .vocab_size = VOCAB, .cheap = true};
    hooked_runner *h = calloc(1, sizeof(*h));
    ck_assert_int_eq(fake_runner_create(&o, &h->inner), NL_OK);
    h->base.ops = &hooked_ops;
    h->base.num_kv_blocks = h->inner->num_kv_blocks;
    h->at_step = 2;
    nl_engine_config c;
    nl_engine_config_init(&c);
    c.max_num_seqs = MAX_SEQS;
    c.max_num_batched_tokens = 256;
    engine_model_facts f;
    memset(&f, 0, sizeof(f));
    f.vocab_size = VOCAB;
    f.max_position_embeddings = 4096;
    f.device_name = "fake";
    nl_engine *e = NULL;
    ck_assert_msg(engine_open_with_runner(&c, &f, &h->base, NULL, &e) == NL_OK, "%s", nl_last_error());
    int32_t prompt[4] = {1, 2, 3, 4};
    nl_prompt p = {.kind = NL_PROMPT_TOKENS, .token_ids = prompt, .n_tokens = 4};
    nl_sampling_params sp;
    nl_sampling_params_init(&sp);
    sp.max_tokens = 2; /* prefill samples one, step 2 the last */
    uint64_t id, other;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &other), NL_OK);
    abort_args a = {e, id, -1, -1};
    h->abort = &a;
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(a.first, NL_OK);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ABORT);
    ck_assert_int_eq(r->n_tokens, 2);
    ck_assert_int_eq(nl_engine_get_result(e, other, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_LENGTH);
    nl_engine_close(e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_abort_from_other_thread_is_kept);
    tcase_add_test(tc, test_abort_during_finishing_step);
    tcase_add_test(tc, test_threads_one_stepper);
    tcase_add_test(tc, test_threads_background);
    suite_add_tcase(s, tc);
    return check_run(s);
}
