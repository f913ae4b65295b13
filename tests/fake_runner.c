/* fake_runner.c — a checking, model-free runner (see fake_runner.h). */
#include "tests/fake_runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/status.h"

typedef struct fake_runner {
    runner base;
    fake_runner_options opt;
    int32_t *kv;          /* [num_kv_blocks * block_size] token ids, -1 empty */
    uint64_t *stamp;      /* [num_kv_blocks * block_size] last writing step   */
    int32_t *prefix;      /* [max positions] tokens read back                 */
    int32_t prefix_cap;
    /* Replies of the submitted steps, oldest first (a ring of two). */
    struct fake_reply {
        uint64_t step_id;
        nl_status status;
        char error[256];
        wire_sampled *sampled;
        int32_t n_sampled, cap;
    } replies[RUNNER_MAX_IN_FLIGHT];
    int32_t head, n_queued, max_queued;
    const struct fake_reply *last; /* the previous step's, for placeholders */
    uint64_t steps;
} fake_runner;

static int32_t cheap_token(int32_t last, int32_t n, int32_t vocab_size)
{
    uint64_t h = (uint64_t)(uint32_t)last * 0x9E3779B97F4A7C15ull + (uint64_t)n * 0xBF58476D1CE4E5B9ull;
    return (int32_t)((h >> 17) % (uint64_t)vocab_size);
}

int32_t fake_runner_reference(const int32_t *tokens, int32_t n, int32_t vocab_size, bool cheap)
{
    if (cheap) return cheap_token(tokens[n - 1], n, vocab_size);
    return (int32_t)(XXH64(tokens, sizeof(int32_t) * (size_t)n, 0x5eed) % (uint64_t)vocab_size);
}

float fake_runner_logprob(int32_t token)
{
    return -0.125f * (float)(token % 17);
}

static void fill_sample(wire_sampled *sm, const wire_seq *w, int32_t token, int32_t vocab)
{
    memset(sm, 0, sizeof(*sm));
    sm->seq_id = w->seq_id;
    sm->token_id = token;
    sm->logprob = fake_runner_logprob(token);
    sm->n_top = w->sampling.n_logprobs;
    for (int32_t i = 0; i < w->sampling.n_logprobs; i++) {
        sm->top_ids[i] = (token + i) % vocab;
        sm->top_logprobs[i] = fake_runner_logprob((token + i) % vocab);
    }
}

/* w's i-th input token; a placeholder is the previous step's sample, as
 * the model runner takes it (worker/model_runner.h). */
static nl_status input_token(const fake_runner *f, const wire_run *cmd, const wire_seq *w, int32_t i,
                             int32_t *token)
{
    *token = w->tokens[i];
    if (*token != WIRE_TOKEN_PREVIOUS) return NL_OK;
    const struct fake_reply *prev = f->last;
    if (w->num_new != 1 || !prev || prev->step_id + 1 != cmd->step_id || prev->status != NL_OK)
        return nl_error(NL_ERR_WORKER, "fake worker: seq %llu has a placeholder token at %d that no "
                        "previous sample resolves", (unsigned long long)w->seq_id, w->num_computed + i);
    for (int32_t k = 0; k < prev->n_sampled; k++)
        if (prev->sampled[k].seq_id == w->seq_id) {
            *token = prev->sampled[k].token_id;
            return NL_OK;
        }
    return nl_error(NL_ERR_WORKER, "fake worker: seq %llu's placeholder: step %llu did not sample it",
                    (unsigned long long)w->seq_id, (unsigned long long)prev->step_id);
}

static nl_status run_step(fake_runner *f, const wire_run *cmd, struct fake_reply *out)
{
    if (f->opt.fail_at_step && cmd->step_id == f->opt.fail_at_step)
        return nl_error(NL_ERR_WORKER, "fake worker: injected failure at step %llu",
                        (unsigned long long)cmd->step_id);
    if (cmd->n_seqs > out->cap) {
        wire_sampled *p = realloc(out->sampled, sizeof(*p) * (size_t)cmd->n_seqs);
        if (!p) return nl_error(NL_ERR_NOMEM, "fake worker: out of memory");
        out->sampled = p;
        out->cap = cmd->n_seqs;
    }
    int32_t bs = f->opt.block_size;
    for (int32_t i = 0; i < cmd->n_seqs; i++) {
        const wire_seq *w = &cmd->seqs[i];
        int32_t end = w->num_computed + w->num_new;
        if (w->num_new <= 0 || w->num_computed < 0 || end > w->n_blocks * bs)
            return nl_error(NL_ERR_WORKER, "fake worker: seq %llu computes [%d, %d) with %d blocks of %d",
                            (unsigned long long)w->seq_id, w->num_computed, end, w->n_blocks, bs);
        for (int32_t b = 0; b < w->n_blocks; b++)
            if (w->block_table[b] < 0 || w->block_table[b] >= f->opt.num_kv_blocks)
                return nl_error(NL_ERR_WORKER, "fake worker: seq %llu block %d is %d, pool has %d",
                                (unsigned long long)w->seq_id, b, w->block_table[b], f->opt.num_kv_blocks);
        if (f->opt.cheap) {
            int32_t last;
            NL_TRY(input_token(f, cmd, w, w->num_new - 1, &last));
            if (w->sample)
                fill_sample(&out->sampled[out->n_sampled++], w, cheap_token(last, end, f->opt.vocab_size),
                            f->opt.vocab_size);
            continue;
        }
        for (int32_t p = w->num_computed; p < end; p++) {
            size_t slot = (size_t)w->block_table[p / bs] * bs + (size_t)(p % bs);
            if (f->stamp[slot] == cmd->step_id)
                return nl_error(NL_ERR_WORKER, "fake worker: KV slot %zu written twice in step %llu (seq %llu pos %d)",
                                slot, (unsigned long long)cmd->step_id, (unsigned long long)w->seq_id, p);
            f->stamp[slot] = cmd->step_id;
            NL_TRY(input_token(f, cmd, w, p - w->num_computed, &f->kv[slot]));
            if (f->kv[slot] < 0 || f->kv[slot] >= f->opt.vocab_size)
                return nl_error(NL_ERR_WORKER, "fake worker: seq %llu token %d at pos %d",
                                (unsigned long long)w->seq_id, f->kv[slot], p);
        }
        if (!w->sample) continue;
        if (end > f->prefix_cap) {
            int32_t *p = realloc(f->prefix, sizeof(int32_t) * (size_t)end);
            if (!p) return nl_error(NL_ERR_NOMEM, "fake worker: out of memory");
            f->prefix = p;
            f->prefix_cap = end;
        }
        for (int32_t p = 0; p < end; p++) {
            size_t slot = (size_t)w->block_table[p / bs] * bs + (size_t)(p % bs);
            if (f->kv[slot] < 0)
                return nl_error(NL_ERR_WORKER, "fake worker: seq %llu reads unwritten KV slot %zu at pos %d",
                                (unsigned long long)w->seq_id, slot, p);
            f->prefix[p] = f->kv[slot];
        }
        fill_sample(&out->sampled[out->n_sampled++], w,
                    fake_runner_reference(f->prefix, end, f->opt.vocab_size, false), f->opt.vocab_size);
    }
    return NL_OK;
}

/* Runs the step at once (the fake is never busy) and queues its reply. */
static nl_status fake_submit(runner *base, const wire_run *cmd)
{
    fake_runner *f = (fake_runner *)base;
    if (f->n_queued == RUNNER_MAX_IN_FLIGHT)
        return nl_error(NL_ERR_INVALID_ARG, "fake worker: %d steps already await their replies",
                        RUNNER_MAX_IN_FLIGHT);
    f->steps++;
    struct fake_reply *out = &f->replies[(f->head + f->n_queued++) % RUNNER_MAX_IN_FLIGHT];
    if (f->n_queued > f->max_queued) f->max_queued = f->n_queued;
    out->step_id = cmd->step_id;
    out->n_sampled = 0;
    out->status = run_step(f, cmd, out);
    if (out->status != NL_OK) {
        snprintf(out->error, sizeof out->error, "%s", nl_last_error());
        out->n_sampled = 0;
    }
    f->last = out;
    return NL_OK;
}

static nl_status fake_wait(runner *base, wire_reply *reply)
{
    fake_runner *f = (fake_runner *)base;
    if (f->n_queued == 0) return nl_error(NL_ERR_INVALID_ARG, "fake worker: no step awaits a reply");
    const struct fake_reply *got = &f->replies[f->head];
    f->head = (f->head + 1) % RUNNER_MAX_IN_FLIGHT;
    f->n_queued--;
    if (got->status != NL_OK) return nl_error(got->status, "%s", got->error);
    reply->step_id = got->step_id;
    reply->status = NL_OK;
    reply->error[0] = '\0';
    reply->n_sampled = got->n_sampled;
    reply->sampled = got->sampled;
    return NL_OK;
}

static void fake_destroy(runner *base)
{
    fake_runner *f = (fake_runner *)base;
    free(f->kv);
    free(f->stamp);
    free(f->prefix);
    for (int32_t i = 0; i < RUNNER_MAX_IN_FLIGHT; i++) free(f->replies[i].sampled);
    free(f);
}

static const runner_ops fake_ops = {.submit = fake_submit, .wait = fake_wait, .destroy = fake_destroy};

nl_status fake_runner_create(const fake_runner_options *opt, runner **out)
{
    *out = NULL;
    if (opt->num_kv_blocks <= 0 || opt->block_size <= 0 || opt->vocab_size <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "fake runner: %d blocks of %d, vocab %d",
                        opt->num_kv_blocks, opt->block_size, opt->vocab_size);
    fake_runner *f = calloc(1, sizeof(*f));
    if (!f) return nl_error(NL_ERR_NOMEM, "fake runner: out of memory");
    f->base.ops = &fake_ops;
    f->base.num_kv_blocks = opt->num_kv_blocks;
    f->opt = *opt;
    if (!opt->cheap) {
        size_t slots = (size_t)opt->num_kv_blocks * (size_t)opt->block_size;
        f->kv = malloc(slots * sizeof(*f->kv));
        f->stamp = calloc(slots, sizeof(*f->stamp));
        if (!f->kv || !f->stamp) {
            fake_destroy(&f->base);
            return nl_error(NL_ERR_NOMEM, "fake runner: out of memory for %zu KV slots", slots);
        }
        memset(f->kv, 0xff, slots * sizeof(*f->kv));
    }
    *out = &f->base;
    return NL_OK;
}

uint64_t fake_runner_steps(const runner *r)
{
    return ((const fake_runner *)r)->steps;
}

int32_t fake_runner_max_in_flight(const runner *r)
{
    return ((const fake_runner *)r)->max_queued;
}
