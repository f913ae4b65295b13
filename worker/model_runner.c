/* model_runner.c — one worker's shard: weights, KV cache, step inputs,
 * CUDA graphs and the sampler.
 *
 * Every device buffer is allocated at creation for the engine's maxima
 * (max_num_batched_tokens tokens, max_num_seqs sequences, block tables of
 * max_model_len / block_size entries), so a step only uploads into fixed
 * addresses.  That is what lets a decode step be captured once as a CUDA
 * graph per batch size and replayed: a batch is padded up to the smallest
 * captured size with rows that write no KV (slot -1) and read one token of
 * block 0, and their samples are dropped.
 *
 * A RUN command is checked before anything touches the device: block ids,
 * token ids, lengths and totals are validated against the cache and the
 * maxima, and a bad command fails with a message instead of corrupting
 * memory.
 */
#include "worker/model_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/model_config.h"
#include "common/model_tensors.h"
#include "common/safetensors.h"
#include "worker/qwen.h"

/* Decode batch sizes captured as graphs: 1, 2, 4, 8, then steps of 8. */
#define GRAPH_MAX_SIZES 128

typedef struct model_runner {
    model_runner_params p;
    nl_backend *be;
    nl_comm *comm;
    nl_model_config cfg;
    qwen_weights *w;
    qwen_state *s;
    int32_t num_blocks;
    int32_t max_blocks_per_seq; /* ceil(max_model_len / block_size) */

    /* step inputs: device buffers and their host staging copies */
    int32_t *d_ids, *h_ids;           /* [max_tokens]                     */
    int32_t *d_pos, *h_pos;           /* [max_tokens]                     */
    int32_t *d_slots, *h_slots;       /* [max_tokens]                     */
    int32_t *d_cu, *h_cu;             /* [max_seqs + 1]                   */
    int32_t *d_ctx, *h_ctx;           /* [max_seqs]                       */
    int32_t *d_tables, *h_tables;     /* [max_seqs, max_blocks_per_seq]   */
    int32_t *d_rows, *h_rows;         /* [max_seqs] logits rows           */
    int32_t *d_perm, *h_perm;         /* [max_seqs tp] logits interleave  */
    nl_sample_row *d_srows, *h_srows; /* [max_seqs]                       */
    /* sampler outputs */
    int32_t *d_out_ids, *h_out_ids;   /* [max_seqs]                       */
    float *d_out_lp, *h_out_lp;       /* [max_seqs]                       */
    int32_t *d_top_ids, *h_top_ids;   /* [max_seqs, NL_MAX_LOGPROBS]      */
    float *d_top_lp, *h_top_lp;       /* [max_seqs, NL_MAX_LOGPROBS]      */
    wire_sampled *sampled;            /* [max_seqs] reply storage         */

    int32_t n_graphs;
    int32_t graph_size[GRAPH_MAX_SIZES];
    nl_graph *graph[GRAPH_MAX_SIZES];

    /* NANOLLM_PROFILE=1: where a worker's time goes, per kind of step.  The
     * phases are separated by synchronisations, so profiling slows steps a
     * little; it is off by default. */
    bool profile;
    struct step_profile {
        int64_t steps, tokens;
        double prep_s, forward_s, sample_s;
    } prof[3]; /* PROFILE_PREFILL, PROFILE_DECODE_GRAPH, PROFILE_DECODE_EAGER */
} model_runner;

enum { PROFILE_PREFILL, PROFILE_DECODE_GRAPH, PROFILE_DECODE_EAGER };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Closes the current phase: waits for the device, returns the seconds since
 * *mark and moves the mark. */
static double profile_lap(model_runner *r, double *mark)
{
    r->be->ops->synchronize(r->be);
    double t = now_s(), d = t - *mark;
    *mark = t;
    return d;
}

static void profile_report(const model_runner *r)
{
    static const char *names[3] = {"prefill", "decode (graph)", "decode (eager)"};
    for (int k = 0; k < 3; k++) {
        const struct step_profile *p = &r->prof[k];
        if (p->steps == 0) continue;
        fprintf(stderr,
                "nanollm: profile rank %d %-15s %7lld steps %9lld tokens: prep %.3f s, forward "
                "%.3f s, sample %.3f s (%.1f us/step)\n",
                r->p.rank, names[k], (long long)p->steps, (long long)p->tokens, p->prep_s,
                p->forward_s, p->sample_s,
                1e6 * (p->prep_s + p->forward_s + p->sample_s) / (double)p->steps);
    }
}

int32_t model_runner_num_kv_blocks(const model_runner *r)
{
    return r->num_blocks;
}

/* ---- buffers ------------------------------------------------------------ */

static nl_status buffer_pair(model_runner *r, size_t bytes, void **dev, void **host)
{
    *host = calloc(1, bytes);
    if (!*host) return nl_error(NL_ERR_NOMEM, "model runner: no host memory for %zu bytes", bytes);
    return r->be->ops->alloc(r->be, bytes, dev);
}

static nl_status alloc_inputs(model_runner *r)
{
    size_t T = (size_t)r->p.max_num_batched_tokens, S = (size_t)r->p.max_num_seqs;
    size_t i32 = sizeof(int32_t);
    NL_TRY(buffer_pair(r, T * i32, (void **)&r->d_ids, (void **)&r->h_ids));
    NL_TRY(buffer_pair(r, T * i32, (void **)&r->d_pos, (void **)&r->h_pos));
    NL_TRY(buffer_pair(r, T * i32, (void **)&r->d_slots, (void **)&r->h_slots));
    NL_TRY(buffer_pair(r, (S + 1) * i32, (void **)&r->d_cu, (void **)&r->h_cu));
    NL_TRY(buffer_pair(r, S * i32, (void **)&r->d_ctx, (void **)&r->h_ctx));
    NL_TRY(buffer_pair(r, S * (size_t)r->max_blocks_per_seq * i32, (void **)&r->d_tables,
                       (void **)&r->h_tables));
    NL_TRY(buffer_pair(r, S * i32, (void **)&r->d_rows, (void **)&r->h_rows));
    NL_TRY(buffer_pair(r, S * (size_t)r->p.tp * i32, (void **)&r->d_perm, (void **)&r->h_perm));
    NL_TRY(buffer_pair(r, S * sizeof(nl_sample_row), (void **)&r->d_srows, (void **)&r->h_srows));
    NL_TRY(buffer_pair(r, S * i32, (void **)&r->d_out_ids, (void **)&r->h_out_ids));
    NL_TRY(buffer_pair(r, S * sizeof(float), (void **)&r->d_out_lp, (void **)&r->h_out_lp));
    NL_TRY(buffer_pair(r, S * NL_MAX_LOGPROBS * i32, (void **)&r->d_top_ids, (void **)&r->h_top_ids));
    NL_TRY(buffer_pair(r, S * NL_MAX_LOGPROBS * sizeof(float), (void **)&r->d_top_lp,
                       (void **)&r->h_top_lp));
    r->sampled = calloc(S, sizeof *r->sampled);
    if (!r->sampled) return nl_error(NL_ERR_NOMEM, "model runner: no memory for %zu replies", S);
    return NL_OK;
}

static void free_pair(model_runner *r, void *dev, void *host)
{
    if (dev) r->be->ops->free(r->be, dev);
    free(host);
}

void model_runner_destroy(model_runner *r)
{
    if (!r) return;
    if (r->profile) profile_report(r);
    for (int32_t g = 0; g < r->n_graphs; g++)
        if (r->graph[g]) r->be->ops->graph_destroy(r->be, r->graph[g]);
    free_pair(r, r->d_ids, r->h_ids);
    free_pair(r, r->d_pos, r->h_pos);
    free_pair(r, r->d_slots, r->h_slots);
    free_pair(r, r->d_cu, r->h_cu);
    free_pair(r, r->d_ctx, r->h_ctx);
    free_pair(r, r->d_tables, r->h_tables);
    free_pair(r, r->d_rows, r->h_rows);
    free_pair(r, r->d_perm, r->h_perm);
    free_pair(r, r->d_srows, r->h_srows);
    free_pair(r, r->d_out_ids, r->h_out_ids);
    free_pair(r, r->d_out_lp, r->h_out_lp);
    free_pair(r, r->d_top_ids, r->h_top_ids);
    free_pair(r, r->d_top_lp, r->h_top_lp);
    free(r->sampled);
    if (r->w) qwen_state_destroy(r->be, r->w, r->s);
    weights_destroy(r->be, r->w);
    free(r);
}

/* ---- KV cache sizing ---------------------------------------------------- */

/* The smallest of every rank's value, so that all ranks size the cache
 * alike: each rank writes its value into its own slot of a zeroed vector
 * and the sum is everyone's values.  fp32 holds counts above 2^24 only
 * approximately, so each value is rounded down (never past what its rank
 * can hold) and every rank takes the minimum of the same rounded values. */
static nl_status agree_min(model_runner *r, int64_t *value)
{
    int tp = r->comm->size;
    if (tp == 1) return NL_OK;
    float *host = calloc((size_t)tp, sizeof(float)), *dev = NULL;
    if (!host) return nl_error(NL_ERR_NOMEM, "model runner: no memory");
    float mine = (float)*value;
    if ((int64_t)mine > *value) mine = nextafterf(mine, 0.0f);
    host[r->comm->rank] = mine;
    nl_status st = r->be->ops->alloc(r->be, (size_t)tp * sizeof(float), (void **)&dev);
    if (st == NL_OK) st = r->be->ops->upload(r->be, dev, host, (size_t)tp * sizeof(float));
    if (st == NL_OK) st = r->comm->ops->all_reduce_sum(r->comm, dev, (size_t)tp, NL_DTYPE_F32);
    if (st == NL_OK) st = r->be->ops->download(r->be, host, dev, (size_t)tp * sizeof(float));
    if (st == NL_OK) {
        *value = (int64_t)host[0];
        for (int i = 1; i < tp; i++)
            if ((int64_t)host[i] < *value) *value = (int64_t)host[i];
    }
    if (dev) r->be->ops->free(r->be, dev);
    free(host);
    return st;
}

static nl_status size_kv_cache(model_runner *r)
{
    const model_runner_params *p = &r->p;
    size_t block_bytes = qwen_kv_block_bytes(r->w, r->be, p->block_size);
    int64_t blocks;
    const char *source;
    if (p->num_kv_blocks > 0) {
        blocks = p->num_kv_blocks;
        source = "--num-kv-blocks";
    } else {
        size_t free_b = 0, total_b = 0;
        NL_TRY(r->be->ops->memory_info(r->be, &free_b, &total_b));
        int64_t budget;
        if (strcmp(r->be->ops->name, "cpu") == 0) {
            /* without a budget, a quarter of the available memory, shared
             * by the tp workers of this machine */
            budget = p->cpu_kv_bytes > 0 ? p->cpu_kv_bytes : (int64_t)(free_b / 4 / (size_t)p->tp);
            source = p->cpu_kv_bytes > 0 ? "the CPU KV budget" : "a quarter of free memory";
        } else {
            /* Activations and step buffers are already allocated for the
             * maxima and the backend allocates nothing per step, so what is
             * free now, less the share kept back, is the cache's. */
            float util = p->gpu_memory_utilization > 0 ? p->gpu_memory_utilization : 0.9f;
            budget = (int64_t)free_b - (int64_t)((1.0 - util) * (double)total_b);
            source = "gpu_memory_utilization";
        }
        blocks = budget > 0 ? budget / (int64_t)block_bytes : 0;
    }
    int64_t slot_limit = (INT32_MAX / p->block_size) - 1; /* slots are int32 */
    if (blocks > slot_limit) blocks = slot_limit;
    NL_TRY(agree_min(r, &blocks));
    if (blocks < 1)
        return nl_error(NL_ERR_NOMEM, "KV cache: %s leaves no room for one block of %zu bytes",
                        source, block_bytes);
    r->num_blocks = (int32_t)blocks;
    NL_TRY(qwen_state_alloc_kv(r->be, r->w, r->s, r->num_blocks, p->block_size));
    if (r->p.rank == 0)
        fprintf(stderr, "nanollm: KV cache: %d blocks x %d tokens = %lld tokens (%.1f MiB per worker, from %s)\n",
                r->num_blocks, p->block_size, (long long)r->num_blocks * p->block_size,
                (double)block_bytes * r->num_blocks / 1048576.0, source);
    return NL_OK;
}

/* ---- step inputs -------------------------------------------------------- */

/* A padding decode row: no KV write, one token of block 0 read. */
static void pad_seq(model_runner *r, int32_t s, int32_t t, int32_t stride)
{
    r->h_ids[t] = 0;
    r->h_pos[t] = 0;
    r->h_slots[t] = -1;
    r->h_cu[s + 1] = t + 1;
    r->h_ctx[s] = 1;
    r->h_tables[(size_t)s * stride] = 0;
    r->h_rows[s] = t;
    r->h_srows[s] = (nl_sample_row){.temperature = 0.0f, .top_p = 1.0f};
}

/* Uploads the first n_tokens / n_seqs / n_logits entries of the staging
 * arrays and describes them in *in. */
static nl_status upload_inputs(model_runner *r, int32_t n_tokens, int32_t n_seqs, int32_t stride,
                               int32_t max_q, int32_t max_ctx, bool all_decode, int32_t n_logits,
                               qwen_inputs *in)
{
    nl_backend *be = r->be;
    size_t i32 = sizeof(int32_t);
    NL_TRY(be->ops->upload(be, r->d_ids, r->h_ids, n_tokens * i32));
    NL_TRY(be->ops->upload(be, r->d_pos, r->h_pos, n_tokens * i32));
    NL_TRY(be->ops->upload(be, r->d_slots, r->h_slots, n_tokens * i32));
    NL_TRY(be->ops->upload(be, r->d_cu, r->h_cu, (n_seqs + 1) * i32));
    NL_TRY(be->ops->upload(be, r->d_ctx, r->h_ctx, n_seqs * i32));
    NL_TRY(be->ops->upload(be, r->d_tables, r->h_tables, (size_t)n_seqs * stride * i32));
    NL_TRY(be->ops->upload(be, r->d_rows, r->h_rows, n_logits * i32));
    int32_t tp = r->p.tp;
    if (tp > 1 && r->p.rank == 0) {
        for (int32_t i = 0; i < n_logits; i++)
            for (int32_t k = 0; k < tp; k++) r->h_perm[i * tp + k] = k * n_logits + i;
        NL_TRY(be->ops->upload(be, r->d_perm, r->h_perm, (size_t)n_logits * tp * i32));
    }
    *in = (qwen_inputs){
        .n_tokens = n_tokens,
        .ids = r->d_ids,
        .positions = r->d_pos,
        .slots = r->d_slots,
        .attn = {.n_seqs = n_seqs, .n_tokens = n_tokens, .max_q_len = max_q,
                 .max_context_len = max_ctx, .max_blocks_per_seq = stride,
                 .block_size = r->p.block_size, .all_decode = all_decode,
                 .cu_seqlens_q = r->d_cu, .context_lens = r->d_ctx, .block_tables = r->d_tables},
        .n_logits = n_logits,
        .logit_rows = r->d_rows,
        .gather_perm = r->d_perm,
    };
    return NL_OK;
}

/* A decode batch of n padded rows: what a graph is captured with.  Its
 * host maxima are the engine's, since the graph replays for any step. */
static nl_status padded_decode_inputs(model_runner *r, int32_t n, qwen_inputs *in)
{
    r->h_cu[0] = 0;
    for (int32_t s = 0; s < n; s++) pad_seq(r, s, s, r->max_blocks_per_seq);
    return upload_inputs(r, n, n, r->max_blocks_per_seq, 1, r->p.max_model_len, true, n, in);
}

static nl_status capture_graphs(model_runner *r)
{
    nl_backend *be = r->be;
    int32_t max = r->p.max_num_seqs < r->p.max_num_batched_tokens ? r->p.max_num_seqs
                                                                   : r->p.max_num_batched_tokens;
    for (int32_t n = 1; n <= max && r->n_graphs < GRAPH_MAX_SIZES; n = n < 8 ? n * 2 : n + 8) {
        qwen_inputs in;
        NL_TRY(padded_decode_inputs(r, n, &in));
        /* one eager run first: libraries choose algorithms and allocate
         * workspaces outside the capture */
        NL_TRY(qwen_forward(be, r->comm, r->w, r->s, &in));
        NL_TRY(be->ops->synchronize(be));
        NL_TRY(be->ops->capture_begin(be));
        nl_status st = qwen_forward(be, r->comm, r->w, r->s, &in);
        nl_graph *g = NULL;
        nl_status end = be->ops->capture_end(be, &g);
        if (st != NL_OK) return nl_error_prefix(st, "capturing decode graph of %d seqs: ", n);
        if (end != NL_OK) return nl_error_prefix(end, "capturing decode graph of %d seqs: ", n);
        r->graph_size[r->n_graphs] = n;
        r->graph[r->n_graphs++] = g;
    }
    if (r->p.rank == 0)
        fprintf(stderr, "nanollm: captured %d decode graphs (batch sizes up to %d)\n", r->n_graphs,
                r->n_graphs ? r->graph_size[r->n_graphs - 1] : 0);
    return NL_OK;
}

/* ---- create ------------------------------------------------------------- */

static nl_status check_params(const model_runner_params *p, const nl_model_config *cfg)
{
    if (p->block_size <= 0 || p->block_size > 4096)
        return nl_error(NL_ERR_INVALID_ARG, "model runner: block_size %d outside [1, 4096]", p->block_size);
    if (p->max_num_seqs <= 0 || p->max_num_batched_tokens <= 0 || p->max_model_len <= 0)
        return nl_error(NL_ERR_INVALID_ARG,
                        "model runner: max_num_seqs %d, max_num_batched_tokens %d, max_model_len %d "
                        "must be positive", p->max_num_seqs, p->max_num_batched_tokens, p->max_model_len);
    if (p->num_kv_blocks < 0)
        return nl_error(NL_ERR_INVALID_ARG, "model runner: num_kv_blocks %d is negative", p->num_kv_blocks);
    return NL_OK;
}

static nl_status runner_init(model_runner *r)
{
    const model_runner_params *p = &r->p;
    NL_TRY(model_config_load(p->model_dir, &r->cfg));
    NL_TRY(check_params(p, &r->cfg));
    st_model *m = NULL;
    NL_TRY(st_open(p->model_dir, &m));
    nl_status st = model_tensors_check(&r->cfg, m);
    if (st == NL_OK) st = weights_load(r->be, &r->cfg, m, p->rank, p->tp, &r->w);
    st_close(m); /* the weights are copies on the backend now */
    NL_TRY(st);
    r->max_blocks_per_seq = (p->max_model_len + p->block_size - 1) / p->block_size;
    NL_TRY(qwen_state_create(r->be, r->w, p->max_num_batched_tokens, p->max_num_seqs, &r->s));
    NL_TRY(alloc_inputs(r));
    NL_TRY(size_kv_cache(r));
    if (r->be->ops->capture_begin && !p->enforce_eager) NL_TRY(capture_graphs(r));
    return NL_OK;
}

nl_status model_runner_create(const model_runner_params *params, nl_backend *be, nl_comm *comm,
                              model_runner **out)
{
    if (comm->size != params->tp || comm->rank != params->rank)
        return nl_error(NL_ERR_INVALID_ARG, "model runner: rank %d of tp %d, but the comm is rank %d of %d",
                        params->rank, params->tp, comm->rank, comm->size);
    model_runner *r = calloc(1, sizeof *r);
    if (!r) return nl_error(NL_ERR_NOMEM, "model runner: no memory");
    r->p = *params;
    const char *profile = getenv("NANOLLM_PROFILE");
    r->profile = profile && strcmp(profile, "1") == 0;
    r->be = be;
    r->comm = comm;
    nl_status st = runner_init(r);
    if (st != NL_OK) {
        model_runner_destroy(r);
        return nl_error_prefix(st, "loading %s: ", params->model_dir);
    }
    *out = r;
    return NL_OK;
}

/* ---- execute ------------------------------------------------------------ */

static nl_status validate(const model_runner *r, const wire_run *cmd, int32_t *n_tokens)
{
    const model_runner_params *p = &r->p;
    if (cmd->kind != WIRE_RUN) return nl_error(NL_ERR_INVALID_ARG, "step %llu: not a RUN command",
                                               (unsigned long long)cmd->step_id);
    if (cmd->n_seqs < 1 || cmd->n_seqs > p->max_num_seqs)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: %d seqs outside [1, max_num_seqs %d]",
                        (unsigned long long)cmd->step_id, cmd->n_seqs, p->max_num_seqs);
    int64_t total = 0;
    for (int32_t s = 0; s < cmd->n_seqs; s++) {
        const wire_seq *q = &cmd->seqs[s];
        unsigned long long id = (unsigned long long)q->seq_id;
        int64_t end = (int64_t)q->num_computed + q->num_new;
        if (q->num_new < 1 || q->num_computed < 0)
            return nl_error(NL_ERR_INVALID_ARG, "seq %llu: num_computed %d, num_new %d", id,
                            q->num_computed, q->num_new);
        if (end > p->max_model_len)
            return nl_error(NL_ERR_INVALID_ARG, "seq %llu: %lld tokens exceed max_model_len %d", id,
                            (long long)end, p->max_model_len);
        if (q->n_blocks < 0 || q->n_blocks > r->max_blocks_per_seq ||
            end > (int64_t)q->n_blocks * p->block_size)
            return nl_error(NL_ERR_INVALID_ARG,
                            "seq %llu: %lld tokens need %lld blocks of %d, block table has %d (max %d)",
                            id, (long long)end, (long long)(end + p->block_size - 1) / p->block_size,
                            p->block_size, q->n_blocks, r->max_blocks_per_seq);
        for (int32_t b = 0; b < q->n_blocks; b++)
            if (q->block_table[b] < 0 || q->block_table[b] >= r->num_blocks)
                return nl_error(NL_ERR_INVALID_ARG, "seq %llu: block_table[%d] = %d outside [0, %d)", id,
                                b, q->block_table[b], r->num_blocks);
        for (int32_t i = 0; i < q->num_new; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= r->cfg.vocab_size)
                return nl_error(NL_ERR_INVALID_ARG, "seq %llu: token %d at %d outside vocab [0, %d)",
                                id, q->tokens[i], q->num_computed + i, r->cfg.vocab_size);
        if (q->sample && (q->n_logprobs < 0 || q->n_logprobs > NL_MAX_LOGPROBS))
            return nl_error(NL_ERR_INVALID_ARG, "seq %llu: n_logprobs %d outside [0, %d]", id,
                            q->n_logprobs, NL_MAX_LOGPROBS);
        total += q->num_new;
    }
    if (total > p->max_num_batched_tokens)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: %lld tokens exceed max_num_batched_tokens %d",
                        (unsigned long long)cmd->step_id, (long long)total, p->max_num_batched_tokens);
    *n_tokens = (int32_t)total;
    return NL_OK;
}

/* Below this temperature a request is sampled greedily.  Softmax at such a
 * temperature is already one-hot, and the samplers scale logits by 1 / T:
 * near 1e-38 that overflows to infinity, every kept score ties and the lowest
 * id would win instead of the most likely one. */
#define GREEDY_TEMPERATURE 1e-5f

static nl_sample_row sample_row_of(const wire_seq *q)
{
    nl_sample_row row = {.temperature = q->temperature, .top_p = q->top_p, .min_p = q->min_p,
                         .top_k = q->top_k, .seed = q->seed, .offset = q->sample_offset,
                         .n_logprobs = q->n_logprobs};
    if (!(row.temperature >= GREEDY_TEMPERATURE)) { /* greedy: the filters cannot matter */
        row.temperature = 0.0f;
        row.top_p = 1.0f;
        row.min_p = 0.0f;
    }
    return row;
}

static nl_status execute(model_runner *r, const wire_run *cmd, wire_reply *reply)
{
    nl_backend *be = r->be;
    int32_t n_tokens = 0;
    NL_TRY(validate(r, cmd, &n_tokens));
    int32_t n_seqs = cmd->n_seqs, bs = r->p.block_size;

    bool all_decode = true;
    for (int32_t s = 0; s < n_seqs; s++) all_decode &= cmd->seqs[s].num_new == 1;
    int32_t g = -1;
    if (all_decode)
        for (int32_t i = 0; i < r->n_graphs && g < 0; i++)
            if (r->graph_size[i] >= n_seqs) g = i;

    /* a graph replays with the engine-wide table stride; an eager step
     * uploads only as wide a table as its longest seq needs */
    int32_t stride = 1, max_q = 0, max_ctx = 0, n_logits = 0, t = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        if (cmd->seqs[s].n_blocks > stride) stride = cmd->seqs[s].n_blocks;
    if (g >= 0) stride = r->max_blocks_per_seq;
    r->h_cu[0] = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        const wire_seq *q = &cmd->seqs[s];
        int32_t ctx = q->num_computed + q->num_new;
        for (int32_t i = 0; i < q->num_new; i++, t++) {
            int32_t pos = q->num_computed + i;
            r->h_ids[t] = q->tokens[i];
            r->h_pos[t] = pos;
            r->h_slots[t] = q->block_table[pos / bs] * bs + pos % bs;
        }
        r->h_cu[s + 1] = t;
        r->h_ctx[s] = ctx;
        memcpy(r->h_tables + (size_t)s * stride, q->block_table, sizeof(int32_t) * q->n_blocks);
        if (q->num_new > max_q) max_q = q->num_new;
        if (ctx > max_ctx) max_ctx = ctx;
        if (q->sample || g >= 0) { /* a graph computes every row's logits */
            r->h_rows[n_logits] = t - 1;
            r->h_srows[n_logits++] = q->sample ? sample_row_of(q) : (nl_sample_row){.top_p = 1.0f};
        }
    }

    double mark = r->profile ? now_s() : 0;
    struct step_profile *prof = &r->prof[!all_decode ? PROFILE_PREFILL
                                         : g >= 0  ? PROFILE_DECODE_GRAPH
                                                   : PROFILE_DECODE_EAGER];
    prof->steps++;
    prof->tokens += n_tokens;
    qwen_inputs in;
    if (g >= 0) {
        int32_t size = r->graph_size[g];
        for (int32_t s = n_seqs; s < size; s++) pad_seq(r, s, s, stride);
        NL_TRY(upload_inputs(r, size, size, stride, 1, r->p.max_model_len, true, size, &in));
        if (r->profile) prof->prep_s += profile_lap(r, &mark);
        NL_TRY(be->ops->graph_launch(be, r->graph[g]));
        n_logits = size;
    } else {
        NL_TRY(upload_inputs(r, n_tokens, n_seqs, stride, max_q, max_ctx, all_decode, n_logits, &in));
        if (r->profile) prof->prep_s += profile_lap(r, &mark);
        NL_TRY(qwen_forward(be, r->comm, r->w, r->s, &in));
    }
    if (r->profile) prof->forward_s += profile_lap(r, &mark);

    if (r->p.rank != 0 || !reply) return be->ops->synchronize(be);
    reply->n_sampled = 0;
    reply->sampled = r->sampled;
    if (n_logits == 0) return be->ops->synchronize(be);
    size_t m = (size_t)n_logits;
    NL_TRY(be->ops->upload(be, r->d_srows, r->h_srows, m * sizeof(nl_sample_row)));
    NL_TRY(be->ops->sample(be, r->s->logits, n_logits, r->cfg.vocab_size, r->d_srows, r->d_out_ids,
                           r->d_out_lp, r->d_top_ids, r->d_top_lp));
    NL_TRY(be->ops->download(be, r->h_out_ids, r->d_out_ids, m * sizeof(int32_t)));
    NL_TRY(be->ops->download(be, r->h_out_lp, r->d_out_lp, m * sizeof(float)));
    NL_TRY(be->ops->download(be, r->h_top_ids, r->d_top_ids, m * NL_MAX_LOGPROBS * sizeof(int32_t)));
    NL_TRY(be->ops->download(be, r->h_top_lp, r->d_top_lp, m * NL_MAX_LOGPROBS * sizeof(float)));
    NL_TRY(be->ops->synchronize(be));
    if (r->profile) prof->sample_s += profile_lap(r, &mark);

    /* row k of the logits is the k-th sampling seq, or seq k under a graph */
    int32_t k = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        const wire_seq *q = &cmd->seqs[s];
        int32_t row = g >= 0 ? s : k;
        if (!q->sample) continue;
        k++;
        wire_sampled *o = &r->sampled[reply->n_sampled++];
        o->seq_id = q->seq_id;
        o->token_id = r->h_out_ids[row];
        o->logprob = r->h_out_lp[row];
        o->n_top = q->n_logprobs;
        for (int32_t j = 0; j < q->n_logprobs; j++) {
            o->top_ids[j] = r->h_top_ids[row * NL_MAX_LOGPROBS + j];
            o->top_logprobs[j] = r->h_top_lp[row * NL_MAX_LOGPROBS + j];
        }
    }
    return NL_OK;
}

nl_status model_runner_execute(model_runner *r, const wire_run *cmd, wire_reply *reply)
{
    if (reply) {
        reply->step_id = cmd->step_id;
        reply->status = NL_OK;
        reply->error[0] = '\0';
        reply->n_sampled = 0;
        reply->sampled = r->sampled;
    }
    nl_status st = execute(r, cmd, reply);
    if (st != NL_OK && reply) {
        reply->status = st;
        reply->n_sampled = 0;
        snprintf(reply->error, sizeof reply->error, "%s", nl_last_error());
    }
    return st;
}
