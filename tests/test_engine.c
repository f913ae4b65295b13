/* test_engine.c — the public engine API over the fake runner: defaults and
 * validation, generation against the fake model's reference tokens, EOS,
 * logprobs, streaming, abort, prefix caching, runner failure, and (with the
 * Qwen3 tokenizer) text prompts and stop strings. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/engine_settings.h"
#include "common/status.h"
#include "leader/engine/engine_internal.h"
#include "leader/engine/engine_state.h"
#include "tests/fake_runner.h"
#include "tests/byte_tokenizer.h"
#include "tests/check_run.h"

#define VOCAB 1000

/* An engine with config c on a fake runner made with o, for a model of
 * model_vocab ids, max_pos positions and the given EOS ids; the runner in
 * *out_runner when it is not NULL. */
static nl_engine *open_fake_config(const nl_engine_config *c, const fake_runner_options *o, int32_t model_vocab,
                                   int32_t max_pos, const int32_t *eos, int32_t n_eos, tokenizer *tok,
                                   runner **out_runner)
{
    runner *r;
    ck_assert_int_eq(fake_runner_create(o, &r), NL_OK);
    engine_model_facts f;
    memset(&f, 0, sizeof(f));
    f.vocab_size = model_vocab;
    f.max_position_embeddings = max_pos;
    f.n_eos = n_eos;
    for (int i = 0; i < n_eos; i++) f.eos_ids[i] = eos[i];
    f.device_name = "fake";
    nl_engine *e = NULL;
    nl_status st = engine_open_with_runner(c, &f, r, tok, &e);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
    if (out_runner) *out_runner = r;
    return e;
}

/* An engine for a model of model_vocab ids whose fake runner samples ids
 * below vocab. */
static nl_engine *open_fake_vocab(int32_t blocks, int32_t max_pos, const int32_t *eos, int32_t n_eos,
                                  uint64_t fail_at, tokenizer *tok, int32_t vocab, int32_t model_vocab)
{
    nl_engine_config c;
    nl_engine_config_init(&c);
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 128;
    fake_runner_options o = {.num_kv_blocks = blocks, .block_size = 16, .vocab_size = vocab,
                             .fail_at_step = fail_at};
    return open_fake_config(&c, &o, model_vocab, max_pos, eos, n_eos, tok, NULL);
}

static nl_engine *open_fake(int32_t blocks, int32_t max_pos, const int32_t *eos, int32_t n_eos,
                            uint64_t fail_at, tokenizer *tok, int32_t vocab)
{
    return open_fake_vocab(blocks, max_pos, eos, n_eos, fail_at, tok, vocab, vocab);
}

static nl_prompt tokens_prompt(const int32_t *ids, int32_t n)
{
    nl_prompt p;
    memset(&p, 0, sizeof(p));
    p.kind = NL_PROMPT_TOKENS;
    p.token_ids = ids;
    p.n_tokens = n;
    return p;
}

/* Submits one request, runs the engine until it is done and returns the
 * request's result (the engine's until the next submission). */
static const nl_result *run_one(nl_engine *e, const nl_prompt *p, const nl_sampling_params *sp)
{
    uint64_t id;
    const nl_result *r;
    ck_assert_int_eq(nl_engine_submit(e, p, sp, &id), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    return r;
}

static nl_sampling_params greedy(int32_t max_tokens)
{
    nl_sampling_params sp;
    nl_sampling_params_init(&sp);
    sp.max_tokens = max_tokens;
    sp.temperature = 0.0f;
    return sp;
}

/* The fake model's continuation of prompt, n tokens. */
static void reference(const int32_t *prompt, int32_t n_prompt, int32_t n, int32_t vocab, int32_t *out)
{
    int32_t *all = malloc(sizeof(int32_t) * (size_t)(n_prompt + n));
    memcpy(all, prompt, sizeof(int32_t) * (size_t)n_prompt);
    for (int32_t k = 0; k < n; k++) {
        all[n_prompt + k] = fake_runner_reference(all, n_prompt + k, vocab, false);
        out[k] = all[n_prompt + k];
    }
    free(all);
}

START_TEST(test_config_defaults_and_validation)
{
    nl_engine_config c;
    nl_engine_config_init(&c);
    ck_assert_ptr_null(c.model_dir);
    ck_assert_int_eq(c.tp, 1);
    ck_assert_int_eq(c.device, NL_DEVICE_AUTO);
    ck_assert_int_eq(c.max_num_seqs, 512);
    ck_assert_int_eq(c.max_num_batched_tokens, 16384);
    ck_assert_int_eq(c.block_size, 16);
    ck_assert_float_eq(c.gpu_memory_utilization, 0.9f);
    ck_assert(c.enable_prefix_caching);
    ck_assert(!c.prefill_first);
    ck_assert_int_eq(engine_config_validate(&c), NL_OK);
    c.block_size = 24;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "block_size 24"));
    nl_engine_config_init(&c);
    c.gpu_memory_utilization = 1.5f;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "gpu_memory_utilization"));
    nl_engine_config_init(&c);
    c.tp = 0;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    nl_engine_config_init(&c);
    c.max_num_batched_tokens = 100;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "max_num_batched_tokens 100"));
    nl_engine_config_init(&c);
    ck_assert_int_eq(c.kv_cache_dtype, NL_KV_CACHE_AUTO);
    c.kv_cache_dtype = (nl_kv_cache_dtype)7;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "kv_cache_dtype 7"));
    /* a directory the workers could not be told is refused up front */
    nl_engine_config_init(&c);
    char long_dir[NL_MODEL_DIR_MAX + 8];
    memset(long_dir, 'a', sizeof long_dir - 1);
    long_dir[sizeof long_dir - 1] = '\0';
    c.model_dir = long_dir;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "longer than 4095 bytes"));
    /* GPU placement: one GPU per rank, each a plausible index */
    nl_engine_config_init(&c);
    ck_assert_ptr_null(c.devices);
    ck_assert_int_eq(c.all_reduce, NL_ALL_REDUCE_AUTO);
    static const int32_t four_on_0[] = {0, 0, 0, 0}, bad_gpu[] = {0, -1};
    c.tp = 4;
    c.devices = four_on_0;
    c.n_devices = 4;
    ck_assert_int_eq(engine_config_validate(&c), NL_OK);
    c.n_devices = 3;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "devices: 3 listed for tp 4"));
    c.tp = 2;
    c.devices = bad_gpu;
    c.n_devices = 2;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "rank 1's GPU -1"));
    nl_engine_config_init(&c);
    c.all_reduce = (nl_all_reduce)7;
    ck_assert_int_eq(engine_config_validate(&c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "all_reduce 7"));
    /* resolved to the CPU, a GPU placement or all-reduce choice is refused */
    engine_settings es;
    nl_engine_config_init(&c);
    c.tp = 2;
    c.devices = four_on_0;
    c.n_devices = 2;
    c.model_dir = "/m";
    ck_assert_int_eq(engine_settings_from_config(&c, &es), NL_OK);
    ck_assert_int_eq(engine_settings_gpu(&es, 1), 0);
    es.device = NL_DEVICE_CPU;
    es.max_model_len = 64;
    ck_assert_int_eq(engine_settings_validate(&es, true), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "GPU placement was given"));
    es.device = NL_DEVICE_CUDA;
    ck_assert_int_eq(engine_settings_validate(&es, true), NL_OK);
    ck_assert_int_eq(engine_settings_ranks_on_gpu(&es, 1), 2);
    es.n_devices = 0; /* default placement: rank r on GPU r */
    ck_assert_int_eq(engine_settings_gpu(&es, 1), 1);
    ck_assert_int_eq(engine_settings_ranks_on_gpu(&es, 1), 1);
    nl_sampling_params sp;
    nl_sampling_params_init(&sp);
    ck_assert_int_eq(sp.max_tokens, 16);
    ck_assert_float_eq(sp.temperature, 1.0f);
    ck_assert_float_eq(sp.top_p, 1.0f);
}
END_TEST

START_TEST(test_generate_matches_reference)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    nl_engine_info info;
    nl_engine_get_info(e, &info);
    ck_assert_int_eq(info.max_model_len, 64 * 16); /* pool smaller than max_pos */
    ck_assert_int_eq(info.vocab_size, VOCAB);
    ck_assert(!info.has_tokenizer);
    uint64_t ids[5];
    int32_t prompts[5][300];
    int32_t lens[5] = {1, 15, 16, 17, 300};
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < lens[k]; i++) prompts[k][i] = (k * 101 + i * 7) % VOCAB;
        nl_prompt p = tokens_prompt(prompts[k], lens[k]);
        nl_sampling_params sp = greedy(20 + k);
        ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &ids[k]), NL_OK);
    }
    const nl_result *res;
    ck_assert_int_eq(nl_engine_get_result(e, ids[0], &res), NL_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "still running"));
    ck_assert(nl_engine_has_unfinished(e));
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert(!nl_engine_has_unfinished(e));
    for (int k = 0; k < 5; k++) {
        ck_assert_int_eq(nl_engine_get_result(e, ids[k], &res), NL_OK);
        ck_assert_uint_eq(res->request_id, ids[k]);
        ck_assert_int_eq(res->n_tokens, 20 + k);
        ck_assert_int_eq(res->finish_reason, NL_FINISH_LENGTH);
        ck_assert_int_eq(res->prompt_tokens, lens[k]);
        ck_assert_ptr_null(res->text);
        int32_t want[32];
        reference(prompts[k], lens[k], 20 + k, VOCAB, want);
        ck_assert_int_eq(memcmp(res->token_ids, want, sizeof(int32_t) * (size_t)(20 + k)), 0);
        nl_engine_release(e, ids[k]);
        ck_assert_int_eq(nl_engine_get_result(e, ids[k], &res), NL_ERR_NOT_FOUND);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_free_blocks, 64);
    ck_assert_int_eq(st.output_tokens, 20 + 21 + 22 + 23 + 24);
    nl_engine_close(e);
}
END_TEST

START_TEST(test_submit_validation)
{
    nl_engine *e = open_fake(8, 100, NULL, 0, 0, NULL, VOCAB);
    int32_t ids[120];
    for (int i = 0; i < 120; i++) ids[i] = i;
    nl_prompt p = tokens_prompt(ids, 10);
    nl_sampling_params sp = greedy(5);
    uint64_t id;
    struct { const char *field; void (*set)(nl_sampling_params *); } cases[] = {0};
    (void)cases;
    nl_prompt empty = tokens_prompt(ids, 0);
    ck_assert_int_eq(nl_engine_submit(e, &empty, &sp, &id), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "empty"));
    int32_t bad[2] = {1, VOCAB};
    nl_prompt pb = tokens_prompt(bad, 2);
    ck_assert_int_eq(nl_engine_submit(e, &pb, &sp, &id), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "token 1000 at position 1"));
    bad[1] = -3;
    ck_assert_int_eq(nl_engine_submit(e, &pb, &sp, &id), NL_ERR_INVALID_ARG);
    nl_prompt plong = tokens_prompt(ids, 96);
    ck_assert_int_eq(nl_engine_submit(e, &plong, &sp, &id), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "max_model_len 100"));
    nl_sampling_params b = sp;
    b.max_tokens = -1;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "max_tokens -1"));
    b = sp; b.temperature = -0.5f;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    b = sp; b.temperature = NAN;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    b = sp; b.temperature = INFINITY;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    b = sp; b.top_k = -2;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    b = sp; b.top_p = 0.0f;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "top_p"));
    b = sp; b.min_p = 1.5f;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    b = sp; b.logprobs = 21;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_INVALID_ARG);
    const char *stops[] = {"x"};
    b = sp; b.stop = stops; b.n_stop = 1;
    ck_assert_int_eq(nl_engine_submit(e, &p, &b, &id), NL_ERR_UNSUPPORTED);
    nl_prompt pt;
    memset(&pt, 0, sizeof(pt));
    pt.kind = NL_PROMPT_TEXT;
    pt.text = "hello";
    ck_assert_int_eq(nl_engine_submit(e, &pt, &sp, &id), NL_ERR_UNSUPPORTED);
    int32_t *enc; int32_t n_enc;
    ck_assert_int_eq(nl_engine_encode(e, "hi", 2, NL_ENCODE_DEFAULT, &enc, &n_enc), NL_ERR_UNSUPPORTED);
    nl_engine_close(e);

    /* A request that needs more blocks than the whole pool. */
    e = open_fake(4, 4096, NULL, 0, 0, NULL, VOCAB);
    nl_engine_info info;
    nl_engine_get_info(e, &info);
    ck_assert_int_eq(info.max_model_len, 64);
    nl_engine_close(e);
    nl_engine_config c;
    nl_engine_config_init(&c);
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 128;
    c.max_model_len = 100; /* above the 64-token pool */
    fake_runner_options o = {.num_kv_blocks = 4, .block_size = 16, .vocab_size = VOCAB};
    runner *r;
    ck_assert_int_eq(fake_runner_create(&o, &r), NL_OK);
    engine_model_facts f = {.vocab_size = VOCAB, .max_position_embeddings = 4096, .device_name = "fake"};
    ck_assert_int_eq(engine_open_with_runner(&c, &f, r, NULL, &e), NL_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "max_model_len 100"));
}
END_TEST

START_TEST(test_eos_and_ignore_eos)
{
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = i * 3;
    int32_t want[30];
    reference(prompt, 20, 30, VOCAB, want);
    /* Make the 4th generated token the EOS (first occurrence). */
    int32_t eos = want[3];
    int32_t first = 0;
    while (want[first] != eos) first++;
    nl_engine *e = open_fake(64, 4096, &eos, 1, 0, NULL, VOCAB);
    nl_prompt p = tokens_prompt(prompt, 20);
    nl_sampling_params sp = greedy(30);
    uint64_t a, b;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_OK);
    sp.ignore_eos = true;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &b), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, a, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_STOP);
    ck_assert_int_eq(r->n_tokens, first + 1); /* the EOS id is kept in token_ids */
    ck_assert_int_eq(r->token_ids[first], eos);
    ck_assert_int_eq(nl_engine_get_result(e, b, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_LENGTH);
    ck_assert_int_eq(r->n_tokens, 30);
    nl_engine_close(e);
}
END_TEST

START_TEST(test_logprobs)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    int32_t prompt[5] = {5, 6, 7, 8, 9};
    nl_prompt p = tokens_prompt(prompt, 5);
    nl_sampling_params sp = greedy(6);
    sp.logprobs = 3;
    uint64_t id, id0;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    sp.logprobs = 0;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id0), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    ck_assert_ptr_nonnull(r->logprobs);
    for (int k = 0; k < r->n_tokens; k++) {
        const nl_token_logprob *lp = &r->logprobs[k];
        ck_assert_int_eq(lp->token_id, r->token_ids[k]);
        ck_assert_float_eq(lp->logprob, fake_runner_logprob(r->token_ids[k]));
        ck_assert_int_eq(lp->n_top, 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_int_eq(lp->top_ids[i], (r->token_ids[k] + i) % VOCAB);
            ck_assert_float_eq(lp->top_logprobs[i], fake_runner_logprob((r->token_ids[k] + i) % VOCAB));
        }
    }
    ck_assert_int_eq(nl_engine_get_result(e, id0, &r), NL_OK);
    ck_assert_ptr_null(r->logprobs);
    nl_engine_close(e);
}
END_TEST

typedef struct stream_log {
    int32_t ids[4][64];
    int32_t n[4];
    int32_t finished[4];
    int32_t calls;
} stream_log;

static void on_stream(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, size_t text_len, bool finished)
{
    stream_log *log = user;
    log->calls++;
    ck_assert_uint_le(id, 4);
    ck_assert_int_eq(log->finished[id - 1], 0);
    ck_assert_ptr_nonnull(text_delta);
    ck_assert_uint_eq(text_len, strlen(text_delta));
    for (int32_t i = 0; i < n_new; i++) log->ids[id - 1][log->n[id - 1]++] = new_ids[i];
    if (finished) log->finished[id - 1] = 1;
}

START_TEST(test_streaming_and_abort)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    stream_log log;
    memset(&log, 0, sizeof(log));
    nl_engine_set_stream_callback(e, on_stream, &log);
    int32_t prompt[4][40];
    uint64_t ids[4];
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 40; i++) prompt[k][i] = (k * 13 + i) % VOCAB;
        nl_prompt p = tokens_prompt(prompt[k], 40);
        nl_sampling_params sp = greedy(30);
        sp.seed = 42;
        sp.has_seed = true;
        ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &ids[k]), NL_OK);
        ck_assert_uint_eq(ids[k], (uint64_t)k + 1);
    }
    for (int s = 0; s < 5; s++) ck_assert_int_eq(nl_engine_step(e), NL_OK);
    ck_assert_int_eq(nl_engine_abort(e, ids[2]), NL_OK);
    ck_assert_int_eq(nl_engine_abort(e, 999), NL_ERR_NOT_FOUND);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, ids[2], &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ABORT);
    ck_assert_int_lt(r->n_tokens, 30);
    ck_assert_int_eq(log.finished[2], 0);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(nl_engine_get_result(e, ids[k], &r), NL_OK);
        ck_assert_int_eq(log.n[k], r->n_tokens);
        ck_assert_int_eq(memcmp(log.ids[k], r->token_ids, sizeof(int32_t) * (size_t)r->n_tokens), 0);
        if (k != 2) ck_assert_int_eq(log.finished[k], 1);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_free_blocks, 64);
    nl_engine_close(e);
}
END_TEST

typedef struct abort_ctx {
    nl_engine *e;
    int32_t seen;
} abort_ctx;

static void abort_on_third(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                           const char *text_delta, size_t text_len, bool finished)
{
    abort_ctx *a = user;
    if (id == 1 && ++a->seen == 3) ck_assert_int_eq(nl_engine_abort(a->e, 1), NL_OK);
}

START_TEST(test_abort_from_callback)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    abort_ctx a = {e, 0};
    nl_engine_set_stream_callback(e, abort_on_third, &a);
    int32_t prompt[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    nl_prompt p = tokens_prompt(prompt, 8);
    nl_sampling_params sp = greedy(10);
    uint64_t x, y;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &x), NL_OK);
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &y), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, x, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ABORT);
    ck_assert_int_eq(r->n_tokens, 3);
    ck_assert_int_eq(nl_engine_get_result(e, y, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_LENGTH);
    ck_assert_int_eq(r->n_tokens, 10);
    engine_stats st;
    engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_free_blocks, 64);
    nl_engine_close(e);
}
END_TEST

START_TEST(test_prefix_cache_through_engine)
{
    nl_engine *e = open_fake(200, 4096, NULL, 0, 0, NULL, VOCAB);
    int32_t prompt[1000];
    for (int i = 0; i < 1000; i++) prompt[i] = (i * 37 + 11) % VOCAB;
    nl_prompt p = tokens_prompt(prompt, 1000);
    nl_sampling_params sp = greedy(8);
    uint64_t a, b;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &b), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    const nl_result *ra, *rb;
    ck_assert_int_eq(nl_engine_get_result(e, a, &ra), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, b, &rb), NL_OK);
    ck_assert_int_eq(ra->cached_tokens, 0);
    ck_assert_int_ge(rb->cached_tokens, 992);
    ck_assert_int_eq(memcmp(ra->token_ids, rb->token_ids, sizeof(int32_t) * 8), 0);
    int32_t want[8];
    reference(prompt, 1000, 8, VOCAB, want);
    ck_assert_int_eq(memcmp(rb->token_ids, want, sizeof(want)), 0);
    nl_engine_close(e);
}
END_TEST

/* Async scheduling sends step N + 1 before reading step N's reply, with
 * placeholders for the tokens step N samples.  A workload that stops on
 * EOS and stop ids, ends at every length from 1 token, shares prefixes,
 * preempts in a small pool and aborts one request from its stream must give
 * the same tokens and ends with it as without it, and the fake model's own
 * continuation. */
enum { ASYNC_REQS = 24 };

typedef struct async_run {
    nl_result results[ASYNC_REQS];
    int32_t tokens[ASYNC_REQS][48];
    uint64_t ids[ASYNC_REQS];
    uint64_t abort_id;
    nl_engine *e;
} async_run;

static void abort_at_third(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new, const char *text,
                           size_t len, bool finished)
{
    (void)new_ids; (void)n_new; (void)text; (void)len;
    async_run *run = user;
    const nl_result *r;
    if (id != run->abort_id || finished) return;
    ck_assert_int_eq(nl_engine_peek(run->e, id, &r), NL_OK);
    if (r->n_tokens == 3) ck_assert_int_eq(nl_engine_abort(run->e, id), NL_OK);
}

static void async_prompt(int k, int32_t *ids, int32_t *n)
{
    *n = 5 + (k * 29) % 76;
    for (int32_t i = 0; i < *n; i++) /* every third shares a 40-token prefix */
        ids[i] = k % 3 == 0 && i < 40 ? (i * 13 + 5) % VOCAB : (k * 101 + i * 7) % VOCAB;
}

static void run_async_workload(bool async, bool prefill_first, int32_t eos, async_run *run, int64_t *preemptions,
                               int32_t *in_flight)
{
    nl_engine_config c;
    nl_engine_config_init(&c);
    ck_assert(c.async_scheduling); /* the default */
    c.async_scheduling = async;
    c.prefill_first = prefill_first;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 64;
    fake_runner_options o = {.num_kv_blocks = 20, .block_size = 16, .vocab_size = VOCAB};
    runner *r;
    run->e = open_fake_config(&c, &o, VOCAB, 4096, &eos, 1, NULL, &r);
    nl_engine_set_stream_callback(run->e, abort_at_third, run);
    for (int k = 0; k < ASYNC_REQS; k++) {
        int32_t ids[80], n;
        async_prompt(k, ids, &n);
        nl_prompt p = tokens_prompt(ids, n);
        nl_sampling_params sp = greedy(1 + (k * 7) % 40);
        int32_t stop_id = (k * 31) % VOCAB;
        if (k % 4 == 1) {
            sp.stop_token_ids = &stop_id;
            sp.n_stop_token_ids = 1;
        }
        ck_assert_int_eq(nl_engine_submit(run->e, &p, &sp, &run->ids[k]), NL_OK);
        if (k == 5) run->abort_id = run->ids[k];
    }
    ck_assert_int_eq(nl_engine_run_until_done(run->e), NL_OK);
    for (int k = 0; k < ASYNC_REQS; k++) {
        const nl_result *res;
        ck_assert_int_eq(nl_engine_get_result(run->e, run->ids[k], &res), NL_OK);
        run->results[k] = *res;
        ck_assert_int_le(res->n_tokens, 48);
        memcpy(run->tokens[k], res->token_ids, sizeof(int32_t) * (size_t)res->n_tokens);
    }
    engine_stats st;
    engine_get_stats(run->e, &st);
    ck_assert_int_eq(st.num_free_blocks, 20); /* nothing held after the end */
    *preemptions = st.preemptions;
    *in_flight = fake_runner_max_in_flight(r);
    nl_engine_close(run->e);
}

START_TEST(test_async_scheduling_matches_sync)
{
    /* the EOS: a token that some continuations reach */
    int32_t ids[80], n, cont[8];
    async_prompt(2, ids, &n);
    reference(ids, n, 8, VOCAB, cont);
    int32_t eos = cont[6];
    static async_run sync_run, async_run_;
    int64_t pre_sync, pre_async;
    int32_t fl_sync, fl_async;
    /* mixed steps (_i == 0) or prefill-first ones */
    run_async_workload(false, _i, eos, &sync_run, &pre_sync, &fl_sync);
    run_async_workload(true, _i, eos, &async_run_, &pre_async, &fl_async);
    ck_assert_int_eq(fl_sync, 1);
    ck_assert_int_eq(fl_async, 2);
    ck_assert_int_gt(pre_sync, 0);
    ck_assert_int_gt(pre_async, 0);
    int n_stopped = 0;
    for (int k = 0; k < ASYNC_REQS; k++) {
        const nl_result *a = &sync_run.results[k], *b = &async_run_.results[k];
        ck_assert_msg(a->finish_reason == b->finish_reason && a->n_tokens == b->n_tokens,
                      "request %d: sync %d tokens (finish %d), async %d (finish %d)", k, a->n_tokens,
                      a->finish_reason, b->n_tokens, b->finish_reason);
        ck_assert_int_eq(memcmp(sync_run.tokens[k], async_run_.tokens[k], sizeof(int32_t) * (size_t)a->n_tokens), 0);
        async_prompt(k, ids, &n);
        int32_t want[48];
        reference(ids, n, b->n_tokens, VOCAB, want);
        ck_assert_msg(memcmp(async_run_.tokens[k], want, sizeof(int32_t) * (size_t)b->n_tokens) == 0,
                      "request %d: not the model's continuation", k);
        if (k == 5) {
            ck_assert_int_eq(b->finish_reason, NL_FINISH_ABORT);
            ck_assert_int_eq(b->n_tokens, 3);
        } else if (b->finish_reason == NL_FINISH_LENGTH) {
            ck_assert_int_eq(b->n_tokens, 1 + (k * 7) % 40);
        } else {
            ck_assert_int_eq(b->finish_reason, NL_FINISH_STOP);
            n_stopped++;
        }
    }
    ck_assert_int_gt(n_stopped, 0);
}
END_TEST

/* The blocks that hold a request's output are offered to the prefix cache
 * once their tokens are known, placeholders never: a follow-up whose prompt
 * is the whole conversation hits every full block but the last token's, with
 * async scheduling or without, whether the request ended by length or by a
 * stop id while a step past it was in flight. */
START_TEST(test_async_outputs_reach_prefix_cache)
{
    for (int async = 0; async <= 1; async++)
        for (int by_stop = 0; by_stop <= 1; by_stop++) {
            nl_engine_config c;
            nl_engine_config_init(&c);
            c.async_scheduling = async;
            c.max_num_seqs = 8;
            c.max_num_batched_tokens = 128;
            fake_runner_options o = {.num_kv_blocks = 64, .block_size = 16, .vocab_size = VOCAB};
            nl_engine *e = open_fake_config(&c, &o, VOCAB, 4096, NULL, 0, NULL, NULL);
            int32_t conv[80];
            for (int i = 0; i < 40; i++) conv[i] = (i * 17 + 3) % VOCAB;
            reference(conv, 40, 40, VOCAB, conv + 40);
            nl_prompt p = tokens_prompt(conv, 40);
            /* by length: 25 tokens, so that the last step samples the first
             * token of a block; by a stop id: the 40th token */
            nl_sampling_params sp = greedy(by_stop ? 60 : 25);
            int32_t stop = conv[79];
            int32_t first = 40;
            while (conv[first] != stop) first++;
            if (by_stop) {
                sp.stop_token_ids = &stop;
                sp.n_stop_token_ids = 1;
            }
            const nl_result *res = run_one(e, &p, &sp);
            int32_t len = by_stop ? first + 1 : 65;
            ck_assert_int_eq(res->n_tokens, len - 40);
            p = tokens_prompt(conv, len);
            sp = greedy(1);
            res = run_one(e, &p, &sp);
            ck_assert_msg(res->cached_tokens == (len - 1) / 16 * 16, "async %d, stop %d: %d of %d tokens cached",
                          async, by_stop, res->cached_tokens, len);
            nl_engine_close(e);
        }
}
END_TEST

START_TEST(test_runner_failure_stops_engine)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 3, NULL, VOCAB);
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    nl_prompt p = tokens_prompt(prompt, 10);
    nl_sampling_params sp = greedy(10);
    uint64_t a, b;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_OK);
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &b), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_ERR_WORKER);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "injected failure at step 3"));
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, a, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_ERROR);
    ck_assert_ptr_nonnull(strstr(r->error, "injected failure"));
    ck_assert_int_eq(r->n_tokens, 2);
    ck_assert(!nl_engine_has_unfinished(e));
    ck_assert_int_eq(nl_engine_step(e), NL_ERR_WORKER);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "earlier failure"));
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_ERR_WORKER);
    ck_assert_int_eq(nl_engine_check(e), NL_ERR_WORKER);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "injected failure"));
    nl_engine_close(e);
}
END_TEST

/* What a server front-end uses: max_tokens 0 (up to max_model_len), peek
 * from the stream callback (the logprobs of the new token), check and
 * stats. */
typedef struct peek_log {
    nl_engine *e;
    int32_t calls, n_tokens_seen, bad;
    float last_logprob;
} peek_log;

static void on_peek(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new, const char *text,
                    size_t text_len, bool finished)
{
    (void)text;
    (void)text_len;
    peek_log *log = user;
    const nl_result *r;
    log->calls++;
    if (nl_engine_peek(log->e, id, &r) != NL_OK || r->n_tokens != log->n_tokens_seen + n_new ||
        r->token_ids[r->n_tokens - 1] != new_ids[n_new - 1] || !r->logprobs ||
        r->logprobs[r->n_tokens - 1].token_id != new_ids[n_new - 1] ||
        (!finished && r->finish_reason != NL_FINISH_NONE))
        log->bad++;
    log->n_tokens_seen += n_new;
}

START_TEST(test_front_end_api)
{
    nl_engine *e = open_fake(64, 100, NULL, 0, 0, NULL, VOCAB);
    ck_assert_int_eq(nl_engine_check(e), NL_OK);
    int32_t prompt[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    nl_prompt p = tokens_prompt(prompt, 10);
    nl_sampling_params sp = greedy(0);
    sp.logprobs = 2;
    peek_log log = {.e = e};
    nl_engine_set_stream_callback(e, on_peek, &log);
    uint64_t id;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    nl_engine_stats st;
    nl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_waiting, 1);
    ck_assert_int_eq(st.num_kv_blocks, 64);
    ck_assert_int_eq(st.num_free_kv_blocks, 64);
    ck_assert_int_eq(st.prompt_tokens, 10);
    ck_assert_int_eq(nl_engine_step(e), NL_OK);
    nl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_running, 1);
    ck_assert_int_eq(st.num_free_kv_blocks, 63);
    const nl_result *r;
    ck_assert_int_eq(nl_engine_peek(e, id, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_NONE);
    ck_assert_int_eq(r->n_tokens, 1);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(log.bad, 0);
    ck_assert_int_eq(nl_engine_get_result(e, id, &r), NL_OK);
    /* max_model_len 100 leaves 90 tokens after the prompt. */
    ck_assert_int_eq(r->n_tokens, 90);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_LENGTH);
    ck_assert_int_eq(log.calls, 90);
    nl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.output_tokens, 90);
    ck_assert_int_eq(st.num_running + st.num_waiting, 0);
    nl_engine_release(e, id);
    ck_assert_int_eq(nl_engine_peek(e, id, &r), NL_ERR_NOT_FOUND);
    nl_engine_close(e);
}
END_TEST

/* Every accepted request gets one final callback, failed ones included,
 * with its reason, error, user pointer and times. */
typedef struct final_log {
    int calls[4];
    nl_finish_reason reason[4];
    bool had_error[4];
} final_log;

static void on_final_log(void *user, const nl_result *r)
{
    final_log *log = user;
    int k = (int)(intptr_t)r->user;
    ck_assert(k >= 0 && k < 4);
    log->calls[k]++;
    log->reason[k] = r->finish_reason;
    log->had_error[k] = r->error != NULL;
    ck_assert(r->finish_time >= r->arrival_time);
    ck_assert_double_eq_tol(r->latency, r->finish_time - r->arrival_time, 1e-9);
}

START_TEST(test_final_callback_for_every_end)
{
    nl_engine *e = open_fake(64, 4096, NULL, 0, 4, NULL, VOCAB);
    final_log log;
    memset(&log, 0, sizeof(log));
    nl_engine_set_final_callback(e, on_final_log, &log);
    int32_t prompt[6] = {1, 2, 3, 4, 5, 6};
    nl_prompt p = tokens_prompt(prompt, 6);
    uint64_t id[4];
    int32_t max_tokens[4] = {2, 50, 50, 50};
    for (int k = 0; k < 4; k++) {
        nl_sampling_params sp = greedy(max_tokens[k]);
        ck_assert_int_eq(nl_engine_submit_user(e, &p, &sp, (void *)(intptr_t)k, &id[k]), NL_OK);
    }
    ck_assert_int_eq(nl_engine_step(e), NL_OK); /* prefill */
    ck_assert_int_eq(nl_engine_abort(e, id[1]), NL_OK);
    ck_assert_int_eq(nl_engine_step(e), NL_OK); /* request 0 ends: length */
    nl_engine_release(e, id[2]);             /* unfinished: aborted, then freed */
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_ERR_WORKER); /* step 4 fails */
    for (int k = 0; k < 4; k++) ck_assert_int_eq(log.calls[k], 1);
    ck_assert_int_eq(log.reason[0], NL_FINISH_LENGTH);
    ck_assert_int_eq(log.reason[1], NL_FINISH_ABORT);
    ck_assert_int_eq(log.reason[2], NL_FINISH_ABORT);
    ck_assert_int_eq(log.reason[3], NL_FINISH_ERROR);
    ck_assert(log.had_error[3]);
    nl_engine_stats st;
    nl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_finished, 4);
    ck_assert_int_eq(st.num_free_kv_blocks, st.num_kv_blocks);
    ck_assert_int_eq(st.prompt_tokens, 4 * 6);
    nl_engine_close(e);
}
END_TEST

/* A request reserves room for what it generates, not for max_tokens: a
 * large batch's memory follows its output. */
START_TEST(test_buffers_grow_with_output)
{
    nl_engine *e = open_fake(400, 8192, NULL, 0, 0, NULL, VOCAB);
    int32_t prompt[5] = {9, 8, 7, 6, 5};
    nl_prompt p = tokens_prompt(prompt, 5);
    nl_sampling_params sp = greedy(4000);
    sp.logprobs = 20;
    uint64_t id;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &id), NL_OK);
    ck_assert_int_eq(nl_engine_step(e), NL_OK);
    request *r = engine_find_request(e, id);
    ck_assert_int_le(r->seq.cap_tokens, 5 + 16);
    ck_assert_int_le(r->seq.cap_blocks, 2);
    ck_assert_int_le(r->cap_logprobs, 16);
    for (int s = 0; s < 99; s++) ck_assert_int_eq(nl_engine_step(e), NL_OK);
    ck_assert_int_eq(seq_num_output(&r->seq), 100);
    ck_assert_int_le(r->seq.cap_tokens, 5 + 2 * 100);
    ck_assert_int_le(r->cap_logprobs, 2 * 100);
    ck_assert_int_eq(nl_engine_abort(e, id), NL_OK);
    const nl_result *res;
    ck_assert_int_eq(nl_engine_get_result(e, id, &res), NL_OK);
    int32_t want[100];
    reference(prompt, 5, 100, VOCAB, want);
    ck_assert_int_eq(res->n_tokens, 100);
    for (int k = 0; k < 100; k++) {
        ck_assert_int_eq(res->token_ids[k], want[k]);
        ck_assert_int_eq(res->logprobs[k].token_id, want[k]);
        ck_assert_int_eq(res->logprobs[k].n_top, 20);
    }
    nl_engine_close(e);
}
END_TEST

typedef struct log_capture {
    int n;
    nl_log_level level;
    char last[256];
} log_capture;

static void capture_log(void *user, nl_log_level level, const char *message)
{
    log_capture *c = user;
    c->n++;
    c->level = level;
    snprintf(c->last, sizeof c->last, "%s", message);
}

/* Library messages go to the log callback, filtered by the level. */
START_TEST(test_log_callback_and_level)
{
    log_capture c;
    memset(&c, 0, sizeof c);
    nl_set_log_callback(capture_log, &c);
    nl_set_log_level(NL_LOG_WARN);
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    nl_engine_close(e);
    ck_assert_int_eq(c.n, 0); /* "engine open" is INFO */
    nl_set_log_level(NL_LOG_INFO);
    ck_assert_int_eq(nl_get_log_level(), NL_LOG_INFO);
    e = open_fake(64, 4096, NULL, 0, 0, NULL, VOCAB);
    nl_engine_close(e);
    ck_assert_int_eq(c.n, 1);
    ck_assert_int_eq(c.level, NL_LOG_INFO);
    ck_assert_ptr_nonnull(strstr(c.last, "engine open: fake, 64 KV blocks"));
    nl_set_log_callback(NULL, NULL);
    nl_set_log_level(NL_LOG_WARN);
}
END_TEST

/* ---- with the Qwen3 tokenizer ------------------------------------------------ */

static tokenizer *load_tokenizer(void)
{
    char dir[4096];
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env) snprintf(dir, sizeof(dir), "%s", env);
    else snprintf(dir, sizeof(dir), "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME") ? getenv("HOME") : ".");
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (access(path, R_OK) != 0) return NULL;
    tokenizer *t = NULL;
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_OK);
    return t;
}

typedef struct text_log {
    char text[8192];
    size_t len;
} text_log;

static void on_text(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                    const char *text_delta, size_t text_len, bool finished)
{
    text_log *log = user;
    size_t n = text_len;
    ck_assert_uint_lt(log->len + n, sizeof(log->text));
    memcpy(log->text + log->len, text_delta, n);
    log->len += n;
    log->text[log->len] = '\0';
}

START_TEST(test_text_and_stop_strings)
{
    tokenizer *t = load_tokenizer();
    if (!t) {
        fprintf(stderr, "test_text_and_stop_strings: no Qwen3 tokenizer, skipped\n");
        return;
    }
    /* Keep sampled ids below the special tokens so the text is plain. */
    nl_engine *e = open_fake_vocab(256, 40960, NULL, 0, 0, t, 151643, 151936);
    text_log log;
    memset(&log, 0, sizeof(log));
    nl_engine_set_stream_callback(e, on_text, &log);
    nl_prompt p;
    memset(&p, 0, sizeof(p));
    p.kind = NL_PROMPT_TEXT;
    p.text = "The quick brown fox";
    nl_sampling_params sp = greedy(40);
    const nl_result *r = run_one(e, &p, &sp);
    int32_t *ids; int32_t n;
    ck_assert_int_eq(nl_engine_encode(e, "The quick brown fox", 19, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    ck_assert_int_eq(r->prompt_tokens, n);
    int32_t want[40];
    reference(ids, n, 40, 151643, want);
    free(ids);
    ck_assert_int_eq(memcmp(r->token_ids, want, sizeof(want)), 0);
    char *decoded;
    size_t decoded_len;
    ck_assert_int_eq(nl_engine_decode(e, r->token_ids, r->n_tokens, &decoded, &decoded_len), NL_OK);
    ck_assert_uint_eq(decoded_len, strlen(decoded));
    ck_assert_str_eq(r->text, decoded);
    ck_assert_str_eq(log.text, decoded);
    /* A stop string from the middle of that text: the same prompt now ends
     * right before its first occurrence. */
    size_t full = strlen(decoded);
    ck_assert_uint_gt(full, 40);
    size_t at = full / 2;
    while (at > 0 && ((unsigned char)decoded[at] & 0xC0) == 0x80) at--;
    char stop[8];
    size_t sl = 0;
    while (sl < 5 && at + sl < full) stop[sl] = decoded[at + sl], sl++;
    while (at + sl < full && ((unsigned char)decoded[at + sl] & 0xC0) == 0x80) stop[sl] = decoded[at + sl], sl++;
    stop[sl] = '\0';
    size_t first = (size_t)(strstr(decoded, stop) - decoded);
    const char *stops[2] = {"\x01never", stop};
    sp.stop = stops;
    sp.n_stop = 2;
    memset(&log, 0, sizeof(log));
    uint64_t b;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &b), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, b, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_STOP);
    ck_assert_uint_eq(strlen(r->text), first);
    ck_assert_int_eq(strncmp(r->text, decoded, first), 0);
    ck_assert_str_eq(log.text, r->text);
    ck_assert_int_lt(r->n_tokens, 40);
    ck_assert_int_eq(memcmp(r->token_ids, want, sizeof(int32_t) * (size_t)r->n_tokens), 0);
    free(decoded);

    /* A stop token (vLLM's stop_token_ids): the output ends at its first
     * occurrence, the id kept and its text left out, ignore_eos or not;
     * the ids are copied at submission. */
    int32_t stop_ids[2] = {151642, want[10]};
    int32_t at_id = 0;
    while (want[at_id] != stop_ids[1]) at_id++;
    sp = greedy(40);
    sp.ignore_eos = true;
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = 2;
    memset(&log, 0, sizeof(log));
    uint64_t sid;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &sid), NL_OK);
    stop_ids[1] = -1;
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, sid, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_STOP);
    ck_assert_int_eq(r->n_tokens, at_id + 1);
    ck_assert_int_eq(memcmp(r->token_ids, want, sizeof(int32_t) * (size_t)r->n_tokens), 0);
    ck_assert_int_eq(nl_engine_decode(e, want, at_id, &decoded, &decoded_len), NL_OK);
    ck_assert_str_eq(r->text, decoded);
    ck_assert_str_eq(log.text, decoded);
    free(decoded);
    /* an id outside the vocabulary is refused by name */
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &sid), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "stop_token_ids[1] = -1"));

    /* Ids past the tokenizer's vocabulary (embedding padding) render as no
     * text instead of failing the request. */
    nl_engine_close(e);
    t = load_tokenizer();
    e = open_fake_vocab(256, 40960, NULL, 0, 0, t, 151936, 151936);
    int32_t short_prompt[3] = {1, 2, 3};
    nl_prompt pp = tokens_prompt(short_prompt, 3);
    nl_sampling_params sp3 = greedy(3000);
    uint64_t pad;
    ck_assert_int_eq(nl_engine_submit(e, &pp, &sp3, &pad), NL_OK);
    nl_status pst = nl_engine_run_until_done(e);
    ck_assert_msg(pst == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(nl_engine_get_result(e, pad, &r), NL_OK);
    int n_pad = 0;
    for (int k = 0; k < r->n_tokens; k++) n_pad += r->token_ids[k] >= tokenizer_vocab_size(t);
    ck_assert_int_gt(n_pad, 0);
    ck_assert_int_eq(r->n_tokens, 3000);

    /* A chat prompt goes through the template. */
    nl_chat_message msgs[1] = {{"user", "Hi"}};
    nl_prompt pc;
    memset(&pc, 0, sizeof(pc));
    pc.kind = NL_PROMPT_CHAT;
    pc.messages = msgs;
    pc.n_messages = 1;
    pc.enable_thinking = true;
    nl_sampling_params sp2 = greedy(2);
    uint64_t c;
    nl_status cst = nl_engine_submit(e, &pc, &sp2, &c);
    ck_assert_msg(cst == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, c, &r), NL_OK);
    /* <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n */
    ck_assert_int_eq(r->prompt_tokens, 9);
    /* A whole chat request: thinking off adds <think>\n\n</think>\n\n (4 tokens). */
    pc.chat_json = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                   "\"chat_template_kwargs\": {\"enable_thinking\": false}}";
    ck_assert_int_eq(nl_engine_submit(e, &pc, &sp2, &c), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, c, &r), NL_OK);
    ck_assert_int_eq(r->prompt_tokens, 13);
    pc.chat_json = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": false}";
    ck_assert_int_eq(nl_engine_submit(e, &pc, &sp2, &c), NL_OK);
    ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
    ck_assert_int_eq(nl_engine_get_result(e, c, &r), NL_OK);
    ck_assert_int_eq(r->prompt_tokens, 6);
    pc.chat_json = "{\"messages\": [{\"role\": \"user\"}], \"tools\": 3}";
    ck_assert_int_eq(nl_engine_submit(e, &pc, &sp2, &c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "tools"));
    nl_engine_close(e);
}
END_TEST

/* A tokenizer of the 256 byte tokens (ids 0..255) and one special added
 * token at id 300: ids 256..299 have no token at all. */
static tokenizer *load_gapped_tokenizer(char *dir)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    write_byte_tokenizer(path, "[{\"id\": 300, \"content\": \"<x>\", \"special\": true}]");
    tokenizer *t = NULL;
    ck_assert_msg(tokenizer_load(dir, &t) == NL_OK, "%s", nl_last_error());
    return t;
}

/* The model may sample an id that the tokenizer has no token for (a gap
 * in its ids, not only padding past the end): it renders as no text and
 * the request goes on. */
START_TEST(test_tokens_without_text)
{
    char dir[] = "/tmp/nl_engine_tok_XXXXXX";
    tokenizer *t = load_gapped_tokenizer(dir);
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, t, 301);
    int32_t prompt[3] = {65, 66, 67};
    nl_prompt p = tokens_prompt(prompt, 3);
    nl_sampling_params sp = greedy(200);
    uint64_t a;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_OK);
    nl_status st = nl_engine_run_until_done(e);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
    const nl_result *r;
    ck_assert_int_eq(nl_engine_get_result(e, a, &r), NL_OK);
    ck_assert_int_eq(r->finish_reason, NL_FINISH_LENGTH);
    ck_assert_int_eq(r->n_tokens, 200);
    int32_t want[200], kept[200];
    reference(prompt, 3, 200, 301, want);
    ck_assert_int_eq(memcmp(r->token_ids, want, sizeof(want)), 0);
    int32_t n_kept = 0, n_gap = 0;
    for (int k = 0; k < 200; k++) {
        if (want[k] >= 256 && want[k] < 300) n_gap++;
        else kept[n_kept++] = want[k];
    }
    ck_assert_int_gt(n_gap, 0);
    char *text;
    size_t text_len;
    ck_assert_int_eq(nl_engine_decode(e, kept, n_kept, &text, &text_len), NL_OK); /* skips <x> */
    ck_assert_str_eq(r->text, text);
    free(text);

    /* A stop string that is not UTF-8 could cut the text inside a
     * character (a lone continuation byte matches the tail of one). */
    const char *bad_stop[1] = {"\xA9"};
    sp.stop = bad_stop;
    sp.n_stop = 1;
    ck_assert_int_eq(nl_engine_submit(e, &p, &sp, &a), NL_ERR_INVALID_ARG);
    ck_assert_msg(strstr(nl_last_error(), "stop string 0") && strstr(nl_last_error(), "UTF-8"), "%s",
                  nl_last_error());
    nl_engine_close(e);
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Text may hold U+0000: encode reads a length and decode returns one, so
 * nothing is cut at the NUL (the gapped tokenizer's ids are the bytes); and
 * encode's flags reach the tokenizer. */
START_TEST(test_encode_decode_nul)
{
    char dir[] = "/tmp/nl_engine_tok_XXXXXX";
    tokenizer *t = load_gapped_tokenizer(dir);
    nl_engine *e = open_fake(64, 4096, NULL, 0, 0, t, 301);
    int32_t *ids = NULL, n = 0;
    ck_assert_int_eq(nl_engine_encode(e, "A\0B", 3, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(ids[0], 'A');
    ck_assert_int_eq(ids[1], 0);
    ck_assert_int_eq(ids[2], 'B');
    free(ids);
    ck_assert_int_eq(nl_engine_encode(e, "A", 1, 1u << 7, &ids, &n), NL_ERR_INVALID_ARG);
    ck_assert_ptr_null(ids);
    char *text = NULL;
    size_t len = 99;
    const int32_t nul[] = {'A', 0, 300, 'B', 0};
    ck_assert_int_eq(nl_engine_decode(e, nul, 5, &text, &len), NL_OK); /* skips <x> */
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(text, "A\0B\0", 5), 0); /* and the terminating NUL */
    free(text);
    ck_assert_int_eq(nl_engine_decode(e, nul, -1, &text, &len), NL_ERR_INVALID_ARG);
    ck_assert_ptr_null(text);
    ck_assert_uint_eq(len, 0);

    /* Generated text: a prompt whose continuation samples byte 0 (the
     * fake runner's tokens are a hash of the sequence) keeps it in the
     * result's text_len and in the stream's deltas. */
    int32_t prompt[1], want[64];
    bool has_nul = false;
    for (prompt[0] = 1; !has_nul && prompt[0] < 200; prompt[0] += has_nul ? 0 : 1) {
        reference(prompt, 1, 64, 301, want);
        for (int k = 0; k < 64; k++) has_nul |= want[k] == 0;
    }
    ck_assert(has_nul);
    text_log log;
    memset(&log, 0, sizeof(log));
    nl_engine_set_stream_callback(e, on_text, &log);
    nl_prompt p = tokens_prompt(prompt, 1);
    nl_sampling_params sp = greedy(64);
    const nl_result *r = run_one(e, &p, &sp);
    ck_assert_int_eq(memcmp(r->token_ids, want, sizeof(want)), 0);
    /* decode renders the ids at once, the detokenizer token by token; the
     * gap ids are no token */
    int32_t kept[64], n_kept = 0;
    for (int k = 0; k < 64; k++)
        if (want[k] < 256 || want[k] >= 300) kept[n_kept++] = want[k];
    ck_assert_int_eq(nl_engine_decode(e, kept, n_kept, &text, &len), NL_OK);
    ck_assert_ptr_nonnull(memchr(text, 0, len));
    ck_assert_uint_eq(r->text_len, len);
    ck_assert_int_eq(memcmp(r->text, text, len), 0);
    ck_assert_uint_eq(log.len, len);
    ck_assert_int_eq(memcmp(log.text, text, len), 0);
    free(text);
    nl_engine_close(e);

    /* tokenizer_config.json's add_bos_token makes <x> the post-processor's
     * first token; NL_ENCODE_NO_ADD_SPECIAL (the server's
     * add_special_tokens false) leaves it out. */
    char path[4200];
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"bos_token\": \"<x>\", \"add_bos_token\": true}", f);
    ck_assert_int_eq(fclose(f), 0);
    t = NULL;
    ck_assert_msg(tokenizer_load(dir, &t) == NL_OK, "%s", nl_last_error());
    e = open_fake(64, 4096, NULL, 0, 0, t, 301);
    ck_assert_int_eq(nl_engine_encode(e, "A", 1, NL_ENCODE_DEFAULT, &ids, &n), NL_OK);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(ids[0], 300);
    ck_assert_int_eq(ids[1], 'A');
    free(ids);
    ck_assert_int_eq(nl_engine_encode(e, "A", 1, NL_ENCODE_NO_ADD_SPECIAL, &ids, &n), NL_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ids[0], 'A');
    free(ids);
    nl_engine_close(e);
    unlink(path);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_config_defaults_and_validation);
    tcase_add_test(tc, test_generate_matches_reference);
    tcase_add_test(tc, test_submit_validation);
    tcase_add_test(tc, test_eos_and_ignore_eos);
    tcase_add_test(tc, test_logprobs);
    tcase_add_test(tc, test_streaming_and_abort);
    tcase_add_test(tc, test_abort_from_callback);
    tcase_add_test(tc, test_prefix_cache_through_engine);
    tcase_add_loop_test(tc, test_async_scheduling_matches_sync, 0, 2);
    tcase_add_test(tc, test_async_outputs_reach_prefix_cache);
    tcase_add_test(tc, test_runner_failure_stops_engine);
    tcase_add_test(tc, test_front_end_api);
    tcase_add_test(tc, test_final_callback_for_every_end);
    tcase_add_test(tc, test_buffers_grow_with_output);
    tcase_add_test(tc, test_log_callback_and_level);
    tcase_add_test(tc, test_text_and_stop_strings);
    tcase_add_test(tc, test_tokens_without_text);
    tcase_add_test(tc, test_encode_decode_nul);
    suite_add_tcase(s, tc);
    return check_run(s);
}
