/* fake_worker.c — a worker program around a fake model, for the worker pool
 * tests: the real worker loop with a model whose answers are known.
 *
 * Rank r reports 1000 - 10 r KV blocks.  Each RUN all-reduces the value
 * r + 1 over the ranks (CPU tp > 1: the shared-memory comm), and rank 0
 * answers every seq with sample == 1 with
 *   token_id = seq_id * 1000 + sampling.offset,  logprob = -(sum of r + 1),
 *   n_top = n_logprobs, top_ids[k] = k.
 * Faults, chosen through the environment the pool's test sets:
 *   FAKE_WORKER_FAIL_INIT_RANK=K  rank K's init fails with a message
 *   FAKE_WORKER_EXIT_INIT_RANK=K  rank K exits during init, silently
 *   FAKE_WORKER_SLOW_STEP=S       step S takes 5 s on rank 0
 *   FAKE_WORKER_FAIL_STEP=S       step S fails on rank 0 with a message
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/worker_loop.h"

typedef struct fake_model {
    int32_t rank, tp;
    nl_comm *comm;
    wire_sampled *sampled;
    int32_t cap;
} fake_model;

static long env_long(const char *name, long fallback)
{
    const char *v = getenv(name);
    return v && v[0] ? strtol(v, NULL, 10) : fallback;
}

static nl_status fake_init(void *ctx, worker_env *env, int32_t *num_kv_blocks)
{
    fake_model *m = ctx;
    m->rank = env->rank;
    m->tp = env->config->tp;
    if (env_long("FAKE_WORKER_EXIT_INIT_RANK", -1) == m->rank) _exit(3);
    if (env_long("FAKE_WORKER_FAIL_INIT_RANK", -1) == m->rank)
        return nl_error(NL_ERR_FORMAT,
                        "%s/model.safetensors: tensor model.layers.0.mlp.up_proj.weight truncated",
                        env->config->model_dir);
    NL_TRY(worker_comm_cpu_create(env, &m->comm));
    *num_kv_blocks = 1000 - 10 * m->rank;
    return NL_OK;
}

static nl_status fake_execute(void *ctx, const wire_run *cmd, wire_reply *reply)
{
    fake_model *m = ctx;
    float v[3] = {(float)(m->rank + 1), 0.0f, 0.0f};
    if (m->tp > 1) NL_TRY(m->comm->ops->all_reduce_sum(m->comm, v, 3, NL_DTYPE_F32));
    if (m->rank != 0) return NL_OK;
    if ((long)cmd->step_id == env_long("FAKE_WORKER_SLOW_STEP", -1)) sleep(5);
    if ((long)cmd->step_id == env_long("FAKE_WORKER_FAIL_STEP", -1))
        return nl_error(NL_ERR_NOMEM, "fake model: step %llu does not fit",
                        (unsigned long long)cmd->step_id);
    if (cmd->n_seqs > m->cap) {
        free(m->sampled);
        m->sampled = calloc((size_t)cmd->n_seqs, sizeof *m->sampled);
        if (!m->sampled) return nl_error(NL_ERR_NOMEM, "fake model: out of memory");
        m->cap = cmd->n_seqs;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < cmd->n_seqs; i++) {
        const wire_seq *s = &cmd->seqs[i];
        if (!s->sample) continue;
        wire_sampled *o = &m->sampled[n++];
        o->seq_id = s->seq_id;
        o->token_id = (int32_t)(s->seq_id * 1000 + s->sampling.offset);
        o->logprob = -v[0];
        o->n_top = s->sampling.n_logprobs;
        for (int32_t k = 0; k < s->sampling.n_logprobs; k++) {
            o->top_ids[k] = k;
            o->top_logprobs[k] = -(float)k;
        }
    }
    reply->n_sampled = n;
    reply->sampled = m->sampled;
    return NL_OK;
}

static void fake_shutdown(void *ctx)
{
    fake_model *m = ctx;
    nl_comm_destroy(m->comm);
    free(m->sampled);
}

int main(int argc, char **argv)
{
    static const worker_ops ops = {.init = fake_init, .execute = fake_execute, .shutdown = fake_shutdown};
    fake_model model = {0};
    return worker_loop_main(argc, argv, &ops, &model);
}
