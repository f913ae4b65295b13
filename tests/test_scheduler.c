/* test_scheduler.c — the scheduler and block manager driven by the fake
 * runner: chunked prefill, prefix-cache hits, preemption under a tiny pool,
 * and a randomized run of thousands of requests with invariants checked
 * after every step and every request's tokens compared with the fake
 * model's independent reference; each of those under both step policies
 * (mixed, and prefill-first, whose steps never mix decodes with prompt
 * chunks). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fake_runner.h"
#include "leader/engine/batch_wire.h"
#include "leader/engine/scheduler.h"
#include "tests/check_run.h"

/* Check's ck_assert records a mark point (a write) even when it passes;
 * the per-step invariants run millions of times, so they only call into
 * Check on failure. */
#define REQUIRE(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define REQUIRE_EQ(a, b) REQUIRE((a) == (b), "%s == %s: %lld vs %lld", #a, #b, (long long)(a), (long long)(b))

typedef struct harness {
    block_manager *bm;
    scheduler *sch;
    runner *r;
    wire_seq *ws;
    uint64_t step_id;
    int32_t vocab;
    int32_t eos;          /* -1: none */
    int32_t max_num_seqs;
    int32_t budget;
    int64_t prefill_steps, decode_steps;
    /* Steps by content, classified from the queues before the step (not
     * from the scheduler's own flags): a decode is a seq that was running
     * with one token to compute, anything else is prompt work. */
    int64_t mixed_steps, prompt_only_steps, decode_only_steps;
    /* Steps that ran decodes although prompt work could have been done. */
    int64_t decodes_despite_prompt_work;
} harness;

static void harness_open_policy(harness *h, int32_t blocks, int32_t bs, bool caching,
                                int32_t max_num_seqs, int32_t budget, int32_t vocab, int32_t eos,
                                bool prefill_first)
{
    memset(h, 0, sizeof(*h));
    ck_assert_int_eq(block_manager_create(blocks, bs, caching, &h->bm), NL_OK);
    ck_assert_int_eq(scheduler_create(h->bm, max_num_seqs, budget, prefill_first, &h->sch), NL_OK);
    fake_runner_options o = {.num_kv_blocks = blocks, .block_size = bs, .vocab_size = vocab};
    ck_assert_int_eq(fake_runner_create(&o, &h->r), NL_OK);
    h->ws = calloc((size_t)max_num_seqs, sizeof(wire_seq));
    h->vocab = vocab;
    h->eos = eos;
    h->max_num_seqs = max_num_seqs;
    h->budget = budget;
}

static void harness_open(harness *h, int32_t blocks, int32_t bs, bool caching,
                         int32_t max_num_seqs, int32_t budget, int32_t vocab, int32_t eos)
{
    harness_open_policy(h, blocks, bs, caching, max_num_seqs, budget, vocab, eos, false);
}

static void harness_close(harness *h)
{
    h->r->ops->destroy(h->r);
    scheduler_destroy(h->sch);
    block_manager_destroy(h->bm);
    free(h->ws);
}

static seq *new_seq(uint64_t id, const int32_t *prompt, int32_t n, int32_t max_tokens,
                    bool ignore_eos, int32_t bs)
{
    nl_sampling_params p;
    memset(&p, 0, sizeof(p));
    p.max_tokens = max_tokens;
    p.top_p = 1.0f;
    p.ignore_eos = ignore_eos;
    seq *s = NULL;
    ck_assert_int_eq(seq_create(id, prompt, n, &p, id, bs, &s), NL_OK);
    return s;
}

/* Before a step: the running seqs that decode (one token left to compute)
 * into decoding, and whether some prompt work could run instead: a running
 * seq with more than one token to compute, or a waiting head that has a
 * seq slot and fits the pool. */
#define MAX_DECODING 256
static bool harness_decodes_before(const harness *h, seq **decoding, int32_t *n_decoding)
{
    bool prompt_work = false;
    *n_decoding = 0;
    for (seq *s = h->sch->running.head; s; s = s->next) {
        if (s->n_tokens - s->num_computed > 1) prompt_work = true;
        else if (*n_decoding < MAX_DECODING) decoding[(*n_decoding)++] = s;
    }
    seq *w = h->sch->waiting.head;
    if (w && h->sch->running.count < h->max_num_seqs && block_manager_can_allocate(h->bm, w))
        prompt_work = true;
    return prompt_work;
}

/* One engine-like step; returns the batch size. */
static int32_t harness_step(harness *h)
{
    seq *decoding[MAX_DECODING];
    int32_t n_decoding;
    bool prompt_work = harness_decodes_before(h, decoding, &n_decoding);
    const sched_batch *b = scheduler_schedule(h->sch);
    if (b->n_seqs == 0) return 0;
    int32_t n_dec = 0;
    for (int32_t i = 0; i < b->n_seqs; i++)
        for (int32_t k = 0; k < n_decoding; k++)
            if (b->seqs[i] == decoding[k]) {
                n_dec++;
                break;
            }
    if (n_dec > 0 && n_dec < b->n_seqs) h->mixed_steps++;
    else if (n_dec > 0) h->decode_only_steps++;
    else h->prompt_only_steps++;
    if (n_dec > 0 && prompt_work) h->decodes_despite_prompt_work++;
    REQUIRE((b->n_seqs) <= (h->max_num_seqs), "%s", "b->n_seqs");
    REQUIRE((b->n_tokens) <= (h->budget), "%s", "b->n_tokens");
    if (b->is_prefill) h->prefill_steps++; else h->decode_steps++;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        seq *s = b->seqs[i];
        REQUIRE_EQ(s->status, SEQ_RUNNING);
        if (!b->is_prefill) REQUIRE_EQ(s->num_new, 1);
        REQUIRE((s->num_computed + s->num_new) <= (s->n_tokens), "%s", "s->num_computed + s->num_new");
    }
    wire_run cmd;
    int32_t n_sample = batch_wire_build(b, ++h->step_id, h->ws, &cmd);
    wire_reply reply;
    nl_status st = runner_execute(h->r, &cmd, &reply);
    REQUIRE(st == NL_OK, "%s", nl_last_error());
    scheduler_commit(h->sch);
    int32_t j = 0;
    int32_t n = b->n_seqs;
    for (int32_t i = 0; i < n; i++) {
        seq *s = b->seqs[i];
        if (!h->ws[i].sample) continue;
        REQUIRE(scheduler_seq_sampled(s), "%s", "scheduler_seq_sampled(s)");
        REQUIRE_EQ(reply.sampled[j].seq_id, s->id);
        int32_t tok = reply.sampled[j++].token_id;
        seq_append_token(s, tok);
        if (!s->params.ignore_eos && tok == h->eos) scheduler_finish(h->sch, s, NL_FINISH_STOP);
        else if (seq_num_output(s) >= s->params.max_tokens) scheduler_finish(h->sch, s, NL_FINISH_LENGTH);
    }
    REQUIRE_EQ(j, reply.n_sampled);
    REQUIRE_EQ(j, n_sample);
    return n;
}

/* The tokens the fake model must have produced for s. */
static void check_tokens(const harness *h, const seq *s)
{
    int32_t n_out = seq_num_output(s);
    REQUIRE((n_out) >= (1), "%s", "n_out");
    for (int32_t k = 0; k < n_out; k++) {
        int32_t want = fake_runner_reference(s->tokens, s->prompt_len + k, h->vocab, false);
        REQUIRE(s->tokens[s->prompt_len + k] == want, "seq %llu output %d: %d, want %d",
                      (unsigned long long)s->id, k, s->tokens[s->prompt_len + k], want);
    }
    if (s->finish == NL_FINISH_STOP) {
        REQUIRE_EQ(s->tokens[s->n_tokens - 1], h->eos);
        for (int32_t k = 0; k < n_out - 1; k++) REQUIRE((s->tokens[s->prompt_len + k]) != (h->eos), "%s", "s->tokens[s->prompt_len + k]");
    } else {
        REQUIRE_EQ(s->finish, NL_FINISH_LENGTH);
        REQUIRE_EQ(n_out, s->params.max_tokens);
    }
}

START_TEST(test_chunked_prefill)
{
    harness h;
    harness_open(&h, 100, 16, true, 4, 64, 1000, -1);
    int32_t prompt[1000];
    for (int i = 0; i < 1000; i++) prompt[i] = (i * 7) % 1000;
    seq *s = new_seq(1, prompt, 1000, 3, true, 16);
    scheduler_add(h.sch, s);
    /* ceil(1000 / 64) = 16 chunks, only the last one samples. */
    for (int step = 0; step < 16; step++) {
        ck_assert_int_eq(seq_num_output(s), 0);
        ck_assert_int_eq(harness_step(&h), 1);
        ck_assert_int_eq(s->num_new, step < 15 ? 64 : 1000 - 15 * 64);
    }
    ck_assert_int_eq(seq_num_output(s), 1);
    ck_assert_int_eq(h.prefill_steps, 16);
    while (harness_step(&h)) {}
    ck_assert_int_eq(h.decode_steps, 2);
    ck_assert_int_eq(s->status, SEQ_FINISHED);
    check_tokens(&h, s);
    ck_assert_int_eq(h.bm->n_free, 100);
    seq_destroy(s);
    harness_close(&h);
}
END_TEST

/* The long-prompt arrival: a, a short prompt of 8 tokens and 40 to
 * generate, already added; b, a prompt of 1000 tokens and b_max_tokens to
 * generate, for the caller to add once a decodes. */
static void short_and_long(harness *h, int32_t b_max_tokens, seq **a, seq **b)
{
    int32_t short_prompt[8], long_prompt[1000];
    for (int i = 0; i < 8; i++) short_prompt[i] = i + 3;
    for (int i = 0; i < 1000; i++) long_prompt[i] = (i * 13 + 1) % 1000;
    *a = new_seq(1, short_prompt, 8, 40, true, 16);
    scheduler_add(h->sch, *a);
    *b = new_seq(2, long_prompt, 1000, b_max_tokens, true, 16);
}

/* Both seqs finished: their tokens are the fake model's and every block is
 * free again. */
static void check_pair_and_close(harness *h, seq *a, seq *b, int32_t blocks)
{
    check_tokens(h, a);
    check_tokens(h, b);
    ck_assert_int_eq(h->bm->n_free, blocks);
    seq_destroy(a);
    seq_destroy(b);
    harness_close(h);
}

/* A long prompt that arrives while a seq decodes does not freeze it: every
 * step carries the decoding seq's next token beside a chunk of the prompt
 * (mixed batches), and both still produce the fake model's tokens. */
START_TEST(test_long_prompt_does_not_freeze_decodes)
{
    harness h;
    harness_open(&h, 200, 16, true, 4, 64, 1000, -1);
    seq *a, *b;
    short_and_long(&h, 2, &a, &b);
    ck_assert_int_eq(harness_step(&h), 1);
    ck_assert_int_eq(seq_num_output(a), 1);
    scheduler_add(h.sch, b);
    /* The budget of 64 leaves 63 for the prompt: 15 chunks of 63, then 55. */
    for (int step = 0; step < 16; step++) {
        int32_t before = seq_num_output(a);
        ck_assert_int_eq(harness_step(&h), 2);
        ck_assert(h.sch->batch.is_prefill);
        ck_assert_int_eq(a->num_new, 1);
        ck_assert_int_eq(b->num_new, step < 15 ? 63 : 1000 - 15 * 63);
        ck_assert_int_eq(seq_num_output(a), before + 1);
        ck_assert_int_eq(seq_num_output(b), step < 15 ? 0 : 1);
    }
    ck_assert_int_eq(h.mixed_steps, 16);
    while (harness_step(&h)) {}
    check_pair_and_close(&h, a, b, 200);
}
END_TEST

/* The same arrival under prefill-first: the prompt's chunks run alone with
 * the whole budget while the decoding seq waits, then both decode in steps
 * of their own; both still produce the fake model's tokens. */
START_TEST(test_prefill_first_long_prompt_pauses_decodes)
{
    harness h;
    harness_open_policy(&h, 200, 16, true, 4, 64, 1000, -1, true);
    seq *a, *b;
    short_and_long(&h, 3, &a, &b);
    ck_assert_int_eq(harness_step(&h), 1);
    ck_assert_int_eq(harness_step(&h), 1); /* a decodes alone */
    ck_assert_int_eq(seq_num_output(a), 2);
    scheduler_add(h.sch, b);
    /* ceil(1000 / 64) = 16 chunks of b alone: 15 of 64, then 40. */
    for (int step = 0; step < 16; step++) {
        ck_assert_int_eq(harness_step(&h), 1);
        ck_assert_ptr_eq(h.sch->batch.seqs[0], b);
        ck_assert_int_eq(b->num_new, step < 15 ? 64 : 1000 - 15 * 64);
        ck_assert_int_eq(seq_num_output(a), 2);
    }
    ck_assert_int_eq(seq_num_output(b), 1);
    /* No prompt left: a and b decode together, one token each. */
    ck_assert_int_eq(harness_step(&h), 2);
    ck_assert(!h.sch->batch.is_prefill);
    ck_assert_int_eq(seq_num_output(a), 3);
    ck_assert_int_eq(seq_num_output(b), 2);
    while (harness_step(&h)) {}
    ck_assert_int_eq(h.mixed_steps, 0);
    ck_assert_int_eq(h.prompt_only_steps, 17);
    check_pair_and_close(&h, a, b, 200);
}
END_TEST

START_TEST(test_prefix_cache_second_request)
{
    harness h;
    harness_open(&h, 200, 16, true, 8, 512, 5000, -1);
    int32_t prompt[1000];
    for (int i = 0; i < 1000; i++) prompt[i] = (i * 31 + 5) % 5000;
    seq *a = new_seq(1, prompt, 1000, 4, true, 16);
    scheduler_add(h.sch, a);
    while (harness_step(&h)) {}
    ck_assert_int_eq(a->prompt_cached, 0);
    seq *b = new_seq(2, prompt, 1000, 4, true, 16);
    scheduler_add(h.sch, b);
    while (harness_step(&h)) {}
    ck_assert_int_ge(b->prompt_cached, 992);
    check_tokens(&h, a);
    check_tokens(&h, b);
    ck_assert_int_eq(memcmp(a->tokens, b->tokens, sizeof(int32_t) * 1004), 0);
    seq_destroy(a);
    seq_destroy(b);
    harness_close(&h);
}
END_TEST

START_TEST(test_preemption_keeps_output)
{
    /* 4 seqs of 20 prompt tokens + 40 output in a pool of 10 blocks
     * (each needs 4 blocks at the end): decode must preempt. */
    harness h;
    harness_open(&h, 10, 16, true, 4, 256, 97, -1);
    seq *s[4];
    for (int k = 0; k < 4; k++) {
        int32_t prompt[20];
        for (int i = 0; i < 20; i++) prompt[i] = (k * 20 + i) % 97;
        s[k] = new_seq((uint64_t)k + 1, prompt, 20, 40, true, 16);
        scheduler_add(h.sch, s[k]);
    }
    while (harness_step(&h)) {}
    ck_assert_int_gt(h.sch->total_preemptions, 0);
    for (int k = 0; k < 4; k++) {
        check_tokens(&h, s[k]);
        seq_destroy(s[k]);
    }
    ck_assert_int_eq(h.bm->n_free, 10);
    harness_close(&h);
}
END_TEST

/* The RUN command of a chunked prefill and of a decode step carries each
 * seq's position, chunk, block table and sampling knobs; only the chunk
 * that completes a prompt samples. */
START_TEST(test_batch_wire_fields)
{
    harness h;
    harness_open(&h, 20, 16, false, 4, 40, 1000, -1);
    int32_t prompt[50];
    for (int i = 0; i < 50; i++) prompt[i] = i + 1;
    nl_sampling_params p;
    memset(&p, 0, sizeof(p));
    p.max_tokens = 5;
    p.temperature = 0.7f;
    p.top_p = 0.9f;
    p.min_p = 0.05f;
    p.top_k = 40;
    p.logprobs = 3;
    seq *s = NULL;
    ck_assert_int_eq(seq_create(7, prompt, 50, &p, 1234, 16, &s), NL_OK);
    scheduler_add(h.sch, s);

    wire_seq ws[4];
    wire_run cmd;
    const sched_batch *b = scheduler_schedule(h.sch);
    ck_assert_int_eq(batch_wire_build(b, 11, ws, &cmd), 0);
    ck_assert_int_eq(cmd.kind, WIRE_RUN);
    ck_assert_uint_eq(cmd.step_id, 11);
    ck_assert_int_eq(cmd.n_seqs, 1);
    ck_assert_ptr_eq(cmd.seqs, ws);
    ck_assert_uint_eq(ws[0].seq_id, 7);
    ck_assert_int_eq(ws[0].num_computed, 0);
    ck_assert_int_eq(ws[0].num_new, 40);
    ck_assert_int_eq(ws[0].sample, 0);
    ck_assert_ptr_eq(ws[0].tokens, s->tokens);
    ck_assert_ptr_eq(ws[0].block_table, s->block_table);
    ck_assert_int_eq(ws[0].n_blocks, s->n_blocks);
    scheduler_commit(h.sch);

    b = scheduler_schedule(h.sch);
    ck_assert_int_eq(batch_wire_build(b, 12, ws, &cmd), 1);
    ck_assert_int_eq(ws[0].num_computed, 40);
    ck_assert_int_eq(ws[0].num_new, 10);
    ck_assert_int_eq(ws[0].sample, 1);
    ck_assert_ptr_eq(ws[0].tokens, s->tokens + 40);
    ck_assert_uint_eq(ws[0].sampling.offset, 0);
    scheduler_commit(h.sch);
    seq_append_token(s, 99);

    b = scheduler_schedule(h.sch);
    ck_assert(!b->is_prefill);
    ck_assert_int_eq(batch_wire_build(b, 13, ws, &cmd), 1);
    ck_assert_int_eq(ws[0].num_computed, 50);
    ck_assert_int_eq(ws[0].num_new, 1);
    ck_assert_int_eq(ws[0].tokens[0], 99);
    ck_assert_int_eq(ws[0].n_blocks, 4);
    ck_assert_uint_eq(ws[0].sampling.offset, 1);
    ck_assert_float_eq(ws[0].sampling.temperature, 0.7f);
    ck_assert_float_eq(ws[0].sampling.top_p, 0.9f);
    ck_assert_float_eq(ws[0].sampling.min_p, 0.05f);
    ck_assert_int_eq(ws[0].sampling.top_k, 40);
    ck_assert_int_eq(ws[0].sampling.n_logprobs, 3);
    ck_assert_uint_eq(ws[0].sampling.seed, 1234);
    scheduler_commit(h.sch);
    scheduler_finish(h.sch, s, NL_FINISH_ABORT);
    seq_destroy(s);
    harness_close(&h);
}
END_TEST

/* ---- randomized ------------------------------------------------------------- */

#define N_REQ 3000
#define N_BASE 6

static uint64_t rng_state;
static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void check_invariants(const harness *h, seq **all, int32_t n_all)
{
    static int32_t refs[4096];
    memset(refs, 0, sizeof(int32_t) * (size_t)h->bm->num_blocks);
    int32_t live = 0;
    for (int32_t i = 0; i < n_all; i++) {
        seq *s = all[i];
        if (!s) continue;
        if (s->status == SEQ_WAITING) REQUIRE_EQ(s->n_blocks, 0);
        if (s->status == SEQ_FINISHED) REQUIRE_EQ(s->n_blocks, 0);
        if (s->status != SEQ_FINISHED) live++;
        for (int32_t b = 0; b < s->n_blocks; b++) refs[s->block_table[b]]++;
        /* A running seq's table covers every token but the one just sampled. */
        if (s->status == SEQ_RUNNING) REQUIRE((s->n_blocks * h->bm->block_size) >= (s->n_tokens - 1), "%s", "s->n_blocks * h->bm->block_size");
    }
    int32_t used = 0;
    for (int32_t b = 0; b < h->bm->num_blocks; b++) {
        REQUIRE(refs[b] == h->bm->ref[b], "block %d: %d tables, ref %d", b, refs[b], h->bm->ref[b]);
        used += refs[b] > 0;
    }
    REQUIRE_EQ(used + h->bm->n_free, h->bm->num_blocks);
    nl_status st = block_manager_check(h->bm);
    REQUIRE(st == NL_OK, "%s", nl_last_error());
    /* Every live seq is in exactly one queue, in the right state. */
    int32_t queued = 0;
    for (seq *s = h->sch->waiting.head; s; s = s->next, queued++) REQUIRE_EQ(s->status, SEQ_WAITING);
    for (seq *s = h->sch->running.head; s; s = s->next, queued++) REQUIRE_EQ(s->status, SEQ_RUNNING);
    REQUIRE_EQ(queued, live);
    REQUIRE_EQ(h->sch->waiting.count + h->sch->running.count, live);
    REQUIRE((h->sch->running.count) <= (h->max_num_seqs), "%s", "h->sch->running.count");
}

static void random_run(int32_t blocks, int32_t bs, bool caching, int32_t max_num_seqs,
                       int32_t budget, uint64_t seed, bool prefill_first)
{
    rng_state = seed;
    harness h;
    const int32_t vocab = 64;
    harness_open_policy(&h, blocks, bs, caching, max_num_seqs, budget, vocab, 0, prefill_first);
    int32_t base[N_BASE][200];
    for (int k = 0; k < N_BASE; k++)
        for (int i = 0; i < 200; i++) base[k][i] = 1 + (int32_t)rnd(vocab - 1);
    seq **all = calloc(N_REQ, sizeof(seq *));
    int32_t n_sub = 0, n_aborted = 0, n_done = 0;
    int64_t steps = 0;
    int32_t max_len = blocks * bs / 2 < 240 ? blocks * bs / 2 : 240;
    while (n_sub < N_REQ || scheduler_has_unfinished(h.sch)) {
        int32_t arrivals = n_sub < N_REQ ? (int32_t)rnd(4) : 0;
        for (int32_t a = 0; a < arrivals && n_sub < N_REQ; a++) {
            int32_t prompt[240];
            int32_t max_tokens = 1 + (int32_t)rnd(40);
            int32_t n = 1 + (int32_t)rnd((uint32_t)(max_len - max_tokens));
            int32_t shared = rnd(3) ? (int32_t)rnd((uint32_t)n + 1) : 0;
            if (shared > 200) shared = 200;
            int k = (int)rnd(N_BASE);
            for (int32_t i = 0; i < n; i++)
                prompt[i] = i < shared ? base[k][i] : 1 + (int32_t)rnd(vocab - 1);
            all[n_sub] = new_seq((uint64_t)n_sub + 1, prompt, n, max_tokens, rnd(4) == 0, bs);
            scheduler_add(h.sch, all[n_sub]);
            n_sub++;
        }
        if (rnd(50) == 0 && n_sub > 0) {
            seq *s = all[rnd((uint32_t)n_sub)];
            if (s->status != SEQ_FINISHED) {
                scheduler_finish(h.sch, s, NL_FINISH_ABORT);
                n_aborted++;
            }
        }
        int32_t ran = harness_step(&h);
        /* Pending work always makes progress. */
        REQUIRE(ran > 0 || !scheduler_has_unfinished(h.sch),
                      "empty step with %d waiting (head needs %d tokens), %d running, %d free blocks",
                      h.sch->waiting.count, h.sch->waiting.head ? h.sch->waiting.head->n_tokens : -1,
                      h.sch->running.count, h.bm->n_free);
        steps++;
        if (getenv("NL_TEST_TRACE") && steps % 20000 == 0)
            fprintf(stderr, "step %lld: %d submitted, %d waiting, %d running, %d free, %lld preemptions\n",
                    (long long)steps, n_sub, h.sch->waiting.count, h.sch->running.count, h.bm->n_free,
                    (long long)h.sch->total_preemptions);
        check_invariants(&h, all, n_sub);
    }
    for (int32_t i = 0; i < N_REQ; i++) {
        seq *s = all[i];
        REQUIRE_EQ(s->status, SEQ_FINISHED);
        if (s->finish != NL_FINISH_ABORT) {
            check_tokens(&h, s);
            n_done++;
        } else {
            /* Whatever an aborted seq produced is still the model's output. */
            for (int32_t k = 0; k < seq_num_output(s); k++)
                REQUIRE_EQ(s->tokens[s->prompt_len + k],
                                 fake_runner_reference(s->tokens, s->prompt_len + k, vocab, false));
        }
        seq_destroy(s);
    }
    REQUIRE_EQ(n_done + n_aborted, N_REQ);
    REQUIRE_EQ(h.bm->n_free, blocks);
    ck_assert_int_gt(h.sch->total_preemptions, 0);
    ck_assert_int_gt(h.prefill_steps, 0);
    ck_assert_int_gt(h.decode_steps, 0);
    if (prefill_first) {
        /* Never a decode beside a prompt chunk, never a decode while some
         * prompt could run; decode steps still come. */
        ck_assert_int_eq(h.mixed_steps, 0);
        ck_assert_int_eq(h.decodes_despite_prompt_work, 0);
        ck_assert_int_gt(h.decode_only_steps, 0);
    } else {
        ck_assert_int_gt(h.mixed_steps, 0);
    }
    ck_assert_int_gt(h.prompt_only_steps, 0);
    free(all);
    harness_close(&h);
}

START_TEST(test_random_prefix_caching)
{
    random_run(40, 16, true, 8, 48, 1, _i == 1);
}
END_TEST

START_TEST(test_random_no_caching)
{
    random_run(40, 16, false, 6, 40, 2, _i == 1);
}
END_TEST

START_TEST(test_random_block32)
{
    random_run(24, 32, true, 16, 100, 3, _i == 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("scheduler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_chunked_prefill);
    tcase_add_test(tc, test_long_prompt_does_not_freeze_decodes);
    tcase_add_test(tc, test_prefix_cache_second_request);
    tcase_add_test(tc, test_preemption_keeps_output);
    tcase_add_test(tc, test_batch_wire_fields);
    tcase_add_test(tc, test_prefill_first_long_prompt_pauses_decodes);
    /* _i: 0 mixed steps, 1 prefill-first. */
    tcase_add_loop_test(tc, test_random_prefix_caching, 0, 2);
    tcase_add_loop_test(tc, test_random_no_caching, 0, 2);
    tcase_add_loop_test(tc, test_random_block32, 0, 2);
    suite_add_tcase(s, tc);
    return check_run(s);
}
