/* fake_runner.c — a checking, model-free runner (see fake_runner.h). */
#include "tests/fake_runner.h"

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
    wire_sampled *sampled;
    int32_t sampled_cap;
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

static nl_status fake_execute(runner *base, const wire_run *cmd, wire_reply *reply)
{
    fake_runner *f = (fake_runner *)base;
    f->steps++;
    if (f->opt.fail_at_step && cmd->step_id == f->opt.fail_at_step)
        return nl_error(NL_ERR_WORKER, "fake worker: injected failure at step %llu",
                        (unsigned long long)cmd->step_id);
    if (cmd->n_seqs > f->sampled_cap) {
        wire_sampled *p = realloc(f->sampled, sizeof(*p) * (size_t)cmd->n_seqs);
        if (!p) return nl_error(NL_ERR_NOMEM, "fake worker: out of memory");
        f->sampled = p;
        f->sampled_cap = cmd->n_seqs;
    }
    int32_t bs = f->opt.block_size;
    int32_t n_sampled = 0;
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
            if (w->sample)
                fill_sample(&f->sampled[n_sampled++], w,
                            cheap_token(w->tokens[w->num_new - 1], end, f->opt.vocab_size),
                            f->opt.vocab_size);
            continue;
        }
        for (int32_t p = w->num_computed; p < end; p++) {
            size_t slot = (size_t)w->block_table[p / bs] * bs + (size_t)(p % bs);
            if (f->stamp[slot] == cmd->step_id)
                return nl_error(NL_ERR_WORKER, "fake worker: KV slot %zu written twice in step %llu (seq %llu pos %d)",
                                slot, (unsigned long long)cmd->step_id, (unsigned long long)w->seq_id, p);
            f->stamp[slot] = cmd->step_id;
            f->kv[slot] = w->tokens[p - w->num_computed];
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
        fill_sample(&f->sampled[n_sampled++], w,
                    fake_runner_reference(f->prefix, end, f->opt.vocab_size, false), f->opt.vocab_size);
    }
    reply->step_id = cmd->step_id;
    reply->status = NL_OK;
    reply->error[0] = '\0';
    reply->n_sampled = n_sampled;
    reply->sampled = f->sampled;
    return NL_OK;
}

static void fake_destroy(runner *base)
{
    fake_runner *f = (fake_runner *)base;
    free(f->kv);
    free(f->stamp);
    free(f->prefix);
    free(f->sampled);
    free(f);
}

static const runner_ops fake_ops = {.execute = fake_execute, .destroy = fake_destroy};

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
