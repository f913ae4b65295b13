/* leader_overhead.c — how long the leader itself takes per step.
 *
 * Opens an engine on the fake runner in its cheap mode (no KV emulation),
 * fills it with --seqs running requests (default 512), and times decode
 * steps: scheduling, building the wire command, appending tokens, stop
 * checks and (with a tokenizer) streaming detokenization.  The runner's
 * own time is measured separately and subtracted.
 *
 *   leader_overhead [--seqs N] [--steps N] [--tokenizer DIR]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/engine/engine_internal.h"
#include "tests/fake_runner.h"

typedef struct timed_runner {
    runner base;
    runner *inner;
    double seconds;
} timed_runner;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static nl_status timed_submit(runner *r, const wire_run *cmd)
{
    timed_runner *t = (timed_runner *)r;
    double t0 = now();
    nl_status st = t->inner->ops->submit(t->inner, cmd);
    t->seconds += now() - t0;
    return st;
}

static nl_status timed_wait(runner *r, wire_reply *reply)
{
    timed_runner *t = (timed_runner *)r;
    double t0 = now();
    nl_status st = t->inner->ops->wait(t->inner, reply);
    t->seconds += now() - t0;
    return st;
}

static void timed_destroy(runner *r)
{
    timed_runner *t = (timed_runner *)r;
    t->inner->ops->destroy(t->inner);
    free(t);
}

static const runner_ops timed_ops = {.submit = timed_submit, .wait = timed_wait, .destroy = timed_destroy};

static void noop_stream(void *user, uint64_t id, const int32_t *ids, int32_t n, const char *text, size_t len,
                        bool fin)
{
    (void)user; (void)id; (void)ids; (void)n; (void)text; (void)len; (void)fin;
}

int main(int argc, char **argv)
{
    int32_t n_seqs = 512, steps = 2000;
    const char *tok_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seqs") == 0 && i + 1 < argc) n_seqs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) tok_dir = argv[++i];
        else {
            fprintf(stderr, "usage: leader_overhead [--seqs N] [--steps N] [--tokenizer DIR]\n");
            return 2;
        }
    }
    if (n_seqs < 1 || steps < 1) return 2;
    int32_t prompt_len = 64, max_tokens = steps + 8;
    int32_t blocks = n_seqs * ((prompt_len + max_tokens) / 16 + 2);
    int32_t vocab = 151643; /* Qwen3's ordinary tokens */
    tokenizer *tok = NULL;
    if (tok_dir && tokenizer_load(tok_dir, &tok) != NL_OK) {
        fprintf(stderr, "leader_overhead: %s\n", nl_last_error());
        return 1;
    }
    fake_runner_options fo = {.num_kv_blocks = blocks, .block_size = 16, .vocab_size = vocab, .cheap = true};
    timed_runner *tr = calloc(1, sizeof(*tr));
    if (!tr || fake_runner_create(&fo, &tr->inner) != NL_OK) return 1;
    tr->base.ops = &timed_ops;
    tr->base.num_kv_blocks = blocks;
    nl_engine_config c;
    nl_engine_config_init(&c);
    c.max_num_seqs = n_seqs;
    c.max_num_batched_tokens = n_seqs * prompt_len > 16384 ? n_seqs * prompt_len : 16384;
    engine_model_facts f = {.vocab_size = 151936, .max_position_embeddings = 1 << 20, .n_eos = 0,
                            .device_name = "fake"};
    nl_engine *e;
    if (engine_open_with_runner(&c, &f, &tr->base, tok, &e) != NL_OK) {
        fprintf(stderr, "leader_overhead: %s\n", nl_last_error());
        return 1;
    }
    if (tok) nl_engine_set_stream_callback(e, noop_stream, NULL);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)prompt_len);
    for (int32_t k = 0; k < n_seqs; k++) {
        for (int32_t i = 0; i < prompt_len; i++) prompt[i] = (k * 7919 + i * 104729) % vocab;
        nl_prompt p = {.kind = NL_PROMPT_TOKENS, .token_ids = prompt, .n_tokens = prompt_len};
        nl_sampling_params sp;
        nl_sampling_params_init(&sp);
        sp.max_tokens = max_tokens;
        sp.ignore_eos = true;
        if (nl_engine_submit(e, &p, &sp, NULL) != NL_OK) {
            fprintf(stderr, "leader_overhead: %s\n", nl_last_error());
            return 1;
        }
    }
    /* Prefill until every seq decodes. */
    engine_stats st;
    do {
        if (nl_engine_step(e) != NL_OK) return 1;
        engine_get_stats(e, &st);
    } while (st.num_waiting > 0 || st.decode_steps == 0);
    tr->seconds = 0;
    double t0 = now();
    for (int32_t s = 0; s < steps; s++)
        if (nl_engine_step(e) != NL_OK) {
            fprintf(stderr, "leader_overhead: %s\n", nl_last_error());
            return 1;
        }
    double total = now() - t0;
    engine_get_stats(e, &st);
    double leader_us = (total - tr->seconds) / steps * 1e6;
    printf("leader overhead: %d running seqs, %d decode steps, %s: %.1f us/step leader "
           "(%.1f us/step fake runner), %.0f ns per seq-step\n",
           st.num_running, steps, tok ? "with streaming detokenizer" : "token ids only", leader_us,
           tr->seconds / steps * 1e6, leader_us * 1e3 / n_seqs);
    free(prompt);
    nl_engine_close(e);
    return leader_us < 100.0 ? 0 : 3;
}
