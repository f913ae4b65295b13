/* test_worker_real.c — the real nanollm-worker behind the pool, on the CPU:
 * a random-weight tiny Qwen3 checkpoint runs a prefill and greedy decode
 * steps with tp = 1 and tp = 2 (the shared-memory all-reduce between two
 * worker processes); both must pick the same tokens with matching
 * logprobs, and a model directory without weights must fail start-up with
 * the loader's message. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "leader/modelgen/mkmodel.h"
#include "leader/engine/executor.h"
#include "tests/check_run.h"

enum { N_SEQS = 2, N_DECODE = 4 };

static char tmp_dir[64], model_dir[256];

static const char *worker_path(void)
{
    const char *w = getenv("NANOLLM_WORKER");
    return w && w[0] ? w : NULL;
}

static void make_model(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/nanollm-test-worker-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    snprintf(model_dir, sizeof model_dir, "%s/tiny", tmp_dir);
    nl_model_config cfg;
    ck_assert_int_eq(mkmodel_preset("tiny", &cfg), NL_OK);
    mkmodel_options opt = {.seed = 7};
    ck_assert_msg(mkmodel_write(&cfg, &opt, model_dir) == NL_OK, "%s", nl_last_error());
}

static void remove_model(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    ck_assert_int_eq(system(cmd), 0);
}

static engine_settings params(int tp)
{
    engine_settings s = {
        .tp = tp, .device = NL_DEVICE_CPU, .block_size = 16,
        .num_kv_blocks = 32, .max_num_seqs = 8, .max_num_batched_tokens = 256,
        .max_model_len = 256, .gpu_memory_utilization = 0.9f, .enforce_eager = true,
    };
    ck_assert_int_eq(engine_settings_set_model_dir(&s, model_dir), NL_OK);
    return s;
}

static const int32_t previous_token = WIRE_TOKEN_PREVIOUS;

/* Step `step` (0: the prefill) of the two seqs into seqs[]; with async,
 * a decode step's input is the placeholder for the previous step's sample. */
static wire_run make_step(int step, bool async, wire_seq seqs[N_SEQS], int32_t prompt[N_SEQS][7],
                          const int32_t last[N_SEQS], int32_t table[N_SEQS][1])
{
    static const int32_t prompt_len[N_SEQS] = {3, 7};
    for (int s = 0; s < N_SEQS; s++) {
        seqs[s] = (wire_seq){.seq_id = 10 + s, .n_blocks = 1, .sample = 1, .sampling.temperature = 0.0f,
                             .sampling.top_p = 1.0f, .sampling.top_k = -1, .sampling.offset = (uint64_t)step,
                             .block_table = table[s]};
        if (step == 0) {
            seqs[s].num_computed = 0;
            seqs[s].num_new = prompt_len[s];
            seqs[s].tokens = prompt[s];
        } else {
            seqs[s].num_computed = prompt_len[s] + step - 1;
            seqs[s].num_new = 1;
            seqs[s].tokens = async ? &previous_token : &last[s];
        }
    }
    return (wire_run){.kind = WIRE_RUN, .step_id = (uint64_t)step + 1, .n_seqs = N_SEQS, .seqs = seqs};
}

static void record(int tp, int step, const wire_reply *reply, int32_t tokens[N_SEQS][N_DECODE + 1],
                   float logprobs[N_SEQS][N_DECODE + 1], int32_t last[N_SEQS])
{
    ck_assert_msg(reply->n_sampled == N_SEQS, "tp %d step %d: %d samples", tp, step, reply->n_sampled);
    for (int s = 0; s < N_SEQS; s++) {
        ck_assert_uint_eq(reply->sampled[s].seq_id, 10 + s);
        ck_assert_int_ge(reply->sampled[s].token_id, 0);
        ck_assert_int_lt(reply->sampled[s].token_id, 151936);
        ck_assert(reply->sampled[s].logprob <= 0.0f);
        tokens[s][step] = last[s] = reply->sampled[s].token_id;
        logprobs[s][step] = reply->sampled[s].logprob;
    }
}

/* Prefill two prompts, then decode greedily; tokens[s][k], logprobs[s][k].
 * With async, each step is sent before the previous step's reply is read,
 * its inputs placeholders that every rank takes from its own samples. */
static void generate(int tp, bool async, int32_t tokens[N_SEQS][N_DECODE + 1],
                     float logprobs[N_SEQS][N_DECODE + 1])
{
    engine_settings p = params(tp);
    runner *r;
    ck_assert_msg(executor_start(&p, worker_path(), &r) == NL_OK, "tp %d: %s", tp, nl_last_error());
    ck_assert_int_eq(r->num_kv_blocks, 32);

    int32_t prompt[N_SEQS][7] = {{9707, 11, 1879, 0, 0, 0, 0}, {785, 3974, 13876, 38835, 35308, 916, 279}};
    int32_t table[N_SEQS][1] = {{0}, {1}};
    int32_t last[N_SEQS];
    wire_seq seqs[N_SEQS];
    wire_reply reply;
    for (int step = 0; step <= N_DECODE; step++) {
        wire_run cmd = make_step(step, async, seqs, prompt, last, table);
        if (!async) {
            ck_assert_msg(runner_execute(r, &cmd, &reply) == NL_OK, "tp %d step %d: %s", tp, step,
                          nl_last_error());
            record(tp, step, &reply, tokens, logprobs, last);
            continue;
        }
        ck_assert_msg(r->ops->submit(r, &cmd) == NL_OK, "tp %d step %d: %s", tp, step, nl_last_error());
        if (step == 0) continue;
        ck_assert_msg(r->ops->wait(r, &reply) == NL_OK, "tp %d step %d: %s", tp, step - 1, nl_last_error());
        record(tp, step - 1, &reply, tokens, logprobs, last);
    }
    if (async) {
        ck_assert_msg(r->ops->wait(r, &reply) == NL_OK, "tp %d last step: %s", tp, nl_last_error());
        record(tp, N_DECODE, &reply, tokens, logprobs, last);
    }
    r->ops->destroy(r);
}

START_TEST(test_tp1_and_tp2_agree)
{
    if (!worker_path()) {
        fprintf(stderr, "test_worker_real: NANOLLM_WORKER unset, skipped\n");
        return;
    }
    make_model();
    int32_t t1[N_SEQS][N_DECODE + 1], t2[N_SEQS][N_DECODE + 1], ta[N_SEQS][N_DECODE + 1];
    float l1[N_SEQS][N_DECODE + 1], l2[N_SEQS][N_DECODE + 1], la[N_SEQS][N_DECODE + 1];
    generate(1, false, t1, l1);
    /* tp 1 async: the worker launches each step while the one before runs
     * and takes its placeholders from the samples on the device */
    generate(1, true, ta, la);
    /* tp 2 async: every rank samples the gathered logits and takes its
     * inputs from its own samples (a rank that took other tokens would
     * change the next step's logits on both) */
    generate(2, true, t2, l2);
    for (int s = 0; s < N_SEQS; s++)
        for (int k = 0; k <= N_DECODE; k++) {
            ck_assert_msg(t1[s][k] == ta[s][k] && t1[s][k] == t2[s][k],
                          "seq %d token %d: tp1 %d, tp1 async %d, tp2 async %d", s, k, t1[s][k], ta[s][k], t2[s][k]);
            ck_assert_float_eq_tol(l1[s][k], la[s][k], 1e-6f);
            ck_assert_float_eq_tol(l1[s][k], l2[s][k], 1e-3f);
        }
    /* A directory without weights: the loader's message reaches the leader. */
    char weights[300];
    snprintf(weights, sizeof weights, "%s/model.safetensors", model_dir);
    ck_assert_int_eq(unlink(weights), 0);
    engine_settings p = params(2);
    runner *r;
    ck_assert_int_ne(executor_start(&p, worker_path(), &r), NL_OK);
    ck_assert_msg(strncmp(nl_last_error(), "worker rank ", 12) == 0, "%s", nl_last_error());
    ck_assert_msg(strstr(nl_last_error(), "model.safetensors") || strstr(nl_last_error(), model_dir),
                  "%s", nl_last_error());
    remove_model();
}
END_TEST

/* A placeholder that the previous step's samples cannot resolve fails its
 * step with a message naming the seq; the pool goes on serving. */
START_TEST(test_unresolvable_placeholder)
{
    if (!worker_path()) return;
    make_model();
    engine_settings p = params(1);
    runner *r;
    ck_assert_msg(executor_start(&p, worker_path(), &r) == NL_OK, "%s", nl_last_error());
    int32_t prompt[N_SEQS][7] = {{9707, 11, 1879, 0, 0, 0, 0}, {785, 3974, 13876, 38835, 35308, 916, 279}};
    int32_t table[N_SEQS][1] = {{0}, {1}};
    int32_t last[N_SEQS] = {0, 0};
    wire_seq seqs[N_SEQS];
    wire_reply reply;
    /* a placeholder in the very first step */
    wire_run cmd = make_step(1, true, seqs, prompt, last, table);
    cmd.step_id = 1;
    ck_assert_int_ne(runner_execute(r, &cmd, &reply), NL_OK);
    ck_assert_msg(strstr(nl_last_error(), "placeholder"), "%s", nl_last_error());
    /* step 2 samples seq 10 only; step 3 asks for seq 11's sample */
    cmd = make_step(0, false, seqs, prompt, last, table);
    cmd.step_id = 2;
    cmd.n_seqs = 1;
    ck_assert_msg(runner_execute(r, &cmd, &reply) == NL_OK, "%s", nl_last_error());
    cmd = make_step(1, true, seqs, prompt, last, table);
    cmd.step_id = 3;
    ck_assert_int_ne(runner_execute(r, &cmd, &reply), NL_OK);
    ck_assert_msg(strstr(nl_last_error(), "seq 11's input is step 2's sample"), "%s", nl_last_error());
    /* and a well-formed step still runs */
    cmd = make_step(0, false, seqs, prompt, last, table);
    cmd.step_id = 4;
    ck_assert_msg(runner_execute(r, &cmd, &reply) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(reply.n_sampled, N_SEQS);
    r->ops->destroy(r);
    remove_model();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("worker_real");
    TCase *tc = tcase_create("worker_real");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tp1_and_tp2_agree);
    tcase_add_test(tc, test_unresolvable_placeholder);
    suite_add_tcase(s, tc);
    return check_run(s);
}
