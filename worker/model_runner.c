/* model_runner.c — one worker's shard: weights, KV cache, step inputs,
 * CUDA graphs and the sampler.
 *
 * Every device buffer is allocated at creation for the engine's maxima
 * (max_num_batched_tokens tokens, max_num_seqs sequences, block tables of
 * max_model_len / block_size entries), so a step only uploads into fixed
 * addresses.  That is what lets a decode step be captured once as a CUDA
 * graph per step shape (decode_graphs.h: a batch size and a bound on its
 * contexts) and replayed: a batch is padded up to the first captured shape
 * that holds it with rows that write no KV (slot -1) and read one token of
 * block 0, and their samples are dropped.
 *
 * A step is a pipeline: prepare_inputs fills the host mirrors (and picks a
 * graph or the eager path), upload_inputs moves them up, run_forward runs
 * the model, and the sampler runs (on every rank: each takes its next
 * step's placeholders from its own samples) and its outputs are queued
 * for the host; model_runner_finish waits for them and fills the reply.  The buffers
 * those stages move are rows of one table, step_bufs.
 *
 * Launching and finishing are apart, so a worker may launch step N + 1
 * while step N runs (model_runner_launch): up to NL_FENCES steps are in
 * flight, each with its own fence and its own host copy of the samples.  A
 * placeholder input (WIRE_TOKEN_PREVIOUS) is then taken on the device from
 * the ids the step launched before it sampled, which are still in the
 * sampler's output buffer when the step's first kernel runs.
 *
 * A RUN command is checked before anything touches the device: block ids,
 * token ids, lengths and totals are validated against the cache and the
 * maxima, and a bad command fails with a message instead of corrupting
 * memory.
 *
 * NANOLLM_PROFILE's accounting (host phases, op and stream timers, the
 * report) is runner_profile.c's; the runner only calls it at its phase
 * boundaries.
 */
#include "worker/model_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/model_config.h"
#include "common/model_tensors.h"
#include "common/safetensors.h"
#include "worker/decode_graphs.h"
#include "worker/qwen.h"
#include "worker/runner_profile.h"

/* ---- the step buffers ---------------------------------------------------
 *
 * Each buffer a step moves between host and device (a device buffer and
 * its host mirror), and the host-only reply storage, is one row of
 * step_bufs: allocation (for the maximal step), upload, download and free
 * loop over the table.  How many entries a step uses is a count rule
 * evaluated on the step's shape; allocation evaluates it on the shape of
 * the largest step the engine allows. */

typedef enum step_buf {
    BUF_IDS,     /* [tokens] input token ids                          */
    BUF_POS,     /* [tokens] positions                                */
    BUF_SLOTS,   /* [tokens] KV slots, -1 for padding                 */
    BUF_CU,      /* [seqs + 1] cu_seqlens_q                           */
    BUF_CTX,     /* [seqs] context lengths                            */
    BUF_TABLES,  /* [seqs, stride] block tables                       */
    BUF_ROWS,    /* [logits] token index of each logits row           */
    BUF_ORDER,   /* [seqs] decode seqs, longest context first          */
    BUF_ORDER_KEYS, /* [seqs] their sort keys, host only              */
    BUF_PERM,    /* [logits tp] interleave of the gathered logits     */
    BUF_TAKE,    /* [takes, 2] (token index, previous logits row)      */
    BUF_SROWS,   /* [logits] sampling controls                        */
    BUF_OUT_IDS, /* [logits] sampled ids                              */
    BUF_OUT_LP,  /* [logits] their logprobs                           */
    BUF_TOP_IDS, /* [logits, NL_MAX_LOGPROBS] top ids                 */
    BUF_TOP_LP,  /* [logits, NL_MAX_LOGPROBS] their logprobs          */
    BUF_REPLY,   /* [logits] reply storage, host only                 */
    BUF_COUNT
} step_buf;

/* The extent of one step along each axis the buffers are sized by. */
typedef struct step_shape {
    int32_t n_tokens, n_seqs;
    int32_t stride;   /* block table row width                             */
    int32_t table_width; /* columns of each row the step's seqs use         */
    int32_t n_logits; /* logits rows computed and sampled                  */
    int32_t n_perm;   /* gather permutation entries: tp n_logits with
                         tp > 1, else 0                                    */
    int32_t n_top;    /* logits rows whose top logprobs come back: n_logits
                         when any seq asks for them, else 0                */
    int32_t n_take;   /* placeholder inputs taken from the last samples     */
} step_shape;

typedef enum step_count {
    COUNT_TOKENS,
    COUNT_SEQS,
    COUNT_SEQS_PLUS_ONE,
    COUNT_TABLE,
    COUNT_LOGITS,
    COUNT_PERM,
    COUNT_TOP,
    COUNT_TAKE,
} step_count;

/* Where a buffer lives: the step's inputs (the forward's and the
 * sampler's) are written in the host copies of the step's launch slot (one
 * of NL_FENCES, one a step in flight) and go up before the forward pass;
 * the sampler writes its outputs straight into the slot's host copies
 * (mapped, so a kernel reaches them across the bus), where the reply reads
 * them once the slot's fence has passed and the next step's placeholder
 * takes read its ids.  A host-only buffer has no device side. */
typedef enum step_phase {
    PHASE_IN,
    PHASE_SAMPLE_OUT,
    PHASE_HOST_ONLY,
} step_phase;

static const struct step_buf_desc {
    const char *name;
    size_t elem;       /* bytes per entry                                  */
    step_count count;
    step_phase phase;
} step_bufs[BUF_COUNT] = {
    [BUF_IDS] = {"token ids", sizeof(int32_t), COUNT_TOKENS, PHASE_IN},
    [BUF_POS] = {"positions", sizeof(int32_t), COUNT_TOKENS, PHASE_IN},
    [BUF_SLOTS] = {"slots", sizeof(int32_t), COUNT_TOKENS, PHASE_IN},
    [BUF_CU] = {"cu_seqlens", sizeof(int32_t), COUNT_SEQS_PLUS_ONE, PHASE_IN},
    [BUF_CTX] = {"context lengths", sizeof(int32_t), COUNT_SEQS, PHASE_IN},
    [BUF_TABLES] = {"block tables", sizeof(int32_t), COUNT_TABLE, PHASE_IN},
    [BUF_ROWS] = {"logits rows", sizeof(int32_t), COUNT_LOGITS, PHASE_IN},
    [BUF_ORDER] = {"decode order", sizeof(int32_t), COUNT_SEQS, PHASE_IN},
    [BUF_ORDER_KEYS] = {"decode order keys", sizeof(int64_t), COUNT_SEQS, PHASE_HOST_ONLY},
    [BUF_PERM] = {"gather permutation", sizeof(int32_t), COUNT_PERM, PHASE_IN},
    [BUF_TAKE] = {"placeholder takes", 2 * sizeof(int32_t), COUNT_TAKE, PHASE_IN},
    [BUF_SROWS] = {"sampling rows", sizeof(nl_sample_row), COUNT_LOGITS, PHASE_IN},
    [BUF_OUT_IDS] = {"sampled ids", sizeof(int32_t), COUNT_LOGITS, PHASE_SAMPLE_OUT},
    [BUF_OUT_LP] = {"sampled logprobs", sizeof(float), COUNT_LOGITS, PHASE_SAMPLE_OUT},
    [BUF_TOP_IDS] = {"top ids", sizeof(int32_t), COUNT_TOP, PHASE_SAMPLE_OUT},
    [BUF_TOP_LP] = {"top logprobs", sizeof(float), COUNT_TOP, PHASE_SAMPLE_OUT},
    [BUF_REPLY] = {"replies", sizeof(wire_sampled), COUNT_LOGITS, PHASE_HOST_ONLY},
};

static size_t step_count_of(step_count c, const step_shape *s)
{
    switch (c) {
    case COUNT_TOKENS: return (size_t)s->n_tokens;
    case COUNT_SEQS: return (size_t)s->n_seqs;
    case COUNT_SEQS_PLUS_ONE: return (size_t)s->n_seqs + 1;
    case COUNT_TABLE: return (size_t)s->n_seqs * (size_t)s->stride;
    case COUNT_LOGITS: return (size_t)s->n_logits;
    case COUNT_PERM: return (size_t)s->n_perm;
    case COUNT_TOP: return (size_t)s->n_top * NL_MAX_LOGPROBS;
    case COUNT_TAKE: return (size_t)s->n_take;
    }
    return 0;
}

/* One step as prepared on the host: which path runs it and what the
 * device inputs hold. */
typedef struct step_plan {
    int32_t graph;      /* index of the graph replayed, -1: eager forward */
    int32_t n_tokens;   /* real tokens, padding excluded                  */
    step_shape shape;   /* what is uploaded, padding included             */
    int32_t max_q, max_ctx;
    bool all_decode;
    int32_t n_leading_decodes; /* seqs before the first prompt chunk */
} step_plan;

/* A step launched on the backend whose samples have not been read yet:
 * what its reply needs from the command, which is gone by then. */
typedef struct launched_step {
    uint64_t step_id;
    int32_t n_seqs;
    bool sampled;          /* the sampler ran (some logits rows)           */
    uint64_t *seq_ids;     /* [max_num_seqs]                               */
    int32_t *rows;         /* [max_num_seqs] logits row, -1: no sample     */
    int32_t *n_logprobs;   /* [max_num_seqs]                               */
} launched_step;

typedef struct model_runner {
    engine_settings p;
    int32_t rank;
    nl_backend *be;
    nl_comm *comm;
    nl_model_config cfg;
    qwen_weights *w;
    qwen_state *s;
    int32_t num_blocks;
    nl_dtype kv_dtype;          /* the KV cache's elements (kernels.h) */
    int32_t max_blocks_per_seq; /* ceil(max_model_len / block_size) */

    void *dev[BUF_COUNT];  /* step inputs on the backend (NULL for the rest) */
    /* Each launch slot's host side of the buffers that cross (host_alloc
     * memory), untouched from its launch until its fence has passed: the
     * inputs are written there and read by copy_pieces, the sampler
     * outputs land there. */
    void *slot_host[NL_FENCES][BUF_COUNT];
    /* The host side the step being prepared uses: a host-only buffer's own
     * memory, an input's the slot's (use_slot). */
    void *host[BUF_COUNT];

    /* Steps in flight, by slot (which is also their fence): the oldest is
     * launched[oldest], then the next n_launched - 1 slots in turn.  last:
     * the slot of the step launched most recently, -1 before any. */
    launched_step launched[NL_FENCES];
    int32_t oldest, n_launched, last;
    int32_t take_cursor;   /* where the last placeholder's seq was found   */

    int32_t n_graphs;
    decode_graph_shape graph_shape[DECODE_GRAPHS_MAX]; /* of each graph, ascending */
    nl_graph *graph[DECODE_GRAPHS_MAX];

    runner_profile prof;   /* NANOLLM_PROFILE (runner_profile.h) */
} model_runner;

/* Whether the step launched last is still running on the backend. */
static bool last_running(model_runner *r)
{
    bool passed = true;
    if (r->n_launched > 0) (void)r->be->ops->fence_passed(r->be, r->last, &passed);
    return !passed;
}

int32_t model_runner_num_kv_blocks(const model_runner *r)
{
    return r->num_blocks;
}

/* ---- buffers ------------------------------------------------------------ */

/* The shape of the largest step: what every buffer is allocated for. */
static step_shape max_shape(const model_runner *r)
{
    return (step_shape){.n_tokens = r->p.max_num_batched_tokens, .n_seqs = r->p.max_num_seqs,
                        .stride = r->max_blocks_per_seq, .n_logits = r->p.max_num_seqs,
                        .n_perm = r->p.max_num_seqs * r->p.tp, .n_top = r->p.max_num_seqs,
                        .n_take = r->p.max_num_seqs};
}

/* Bytes the step buffers take on the backend and on the host. */
static void step_buffer_bytes(const model_runner *r, size_t *dev, size_t *host)
{
    step_shape max = max_shape(r);
    *dev = *host = 0;
    for (int b = 0; b < BUF_COUNT; b++) {
        size_t bytes = step_count_of(step_bufs[b].count, &max) * step_bufs[b].elem;
        *host += step_bufs[b].phase == PHASE_HOST_ONLY ? bytes : NL_FENCES * bytes;
        if (step_bufs[b].phase == PHASE_IN) *dev += bytes;
    }
}

/* The memory plan: everything the options size (activations for
 * max_num_batched_tokens, logits for max_num_seqs rows, the step buffers)
 * is added up and held against what the backend has free before any of it
 * is allocated, so options too large for the machine are an error that
 * names them and the bytes, not an allocation failure deep inside, or on
 * the CPU the kernel's OOM killer after a minute of zero-filling.  The KV
 * cache is sized afterwards from what is left. */
static nl_status check_memory_plan(model_runner *r)
{
    const engine_settings *p = &r->p;
    size_t act = qwen_state_bytes(r->be, r->w, p->max_num_batched_tokens, p->max_num_seqs);
    size_t step_dev, step_host;
    step_buffer_bytes(r, &step_dev, &step_host);
    bool host_is_device = strcmp(r->be->ops->name, "cpu") == 0;
    size_t need = act + step_dev + (host_is_device ? step_host : 0);
    size_t free_b = 0, total_b = 0;
    NL_TRY(r->be->ops->memory_info(r->be, &free_b, &total_b));
    /* CPU ranks share the machine's memory; a GPU keeps back its share,
     * and the ranks placed on one GPU split the rest */
    int32_t sharing = engine_settings_ranks_on_gpu(p, r->rank);
    double limit = host_is_device ? (double)free_b / p->tp
                                  : ((double)free_b - (1.0 - (p->gpu_memory_utilization > 0
                                                                  ? p->gpu_memory_utilization
                                                                  : 0.9)) * (double)total_b) /
                                        sharing;
    if ((double)need > limit)
        return nl_error(NL_ERR_NOMEM,
                        "memory plan: --max-num-batched-tokens %d and --max-num-seqs %d need "
                        "%.2f GiB of %s memory per worker for activations and step buffers, but "
                        "only %.2f GiB is available to it; lower them",
                        p->max_num_batched_tokens, p->max_num_seqs, need / 1073741824.0,
                        host_is_device ? "host" : "device", (limit > 0 ? limit : 0) / 1073741824.0);
    return NL_OK;
}

static nl_status alloc_step_buffers(model_runner *r)
{
    step_shape max = max_shape(r);
    for (int b = 0; b < BUF_COUNT; b++) {
        const struct step_buf_desc *d = &step_bufs[b];
        size_t n = step_count_of(d->count, &max), bytes = n * d->elem;
        if (d->phase == PHASE_HOST_ONLY) {
            r->host[b] = calloc(n ? n : 1, d->elem);
            if (!r->host[b])
                return nl_error(NL_ERR_NOMEM, "model runner: no host memory for %zu bytes of %s", bytes,
                                d->name);
            continue;
        }
        for (int k = 0; k < NL_FENCES; k++) {
            NL_TRY(r->be->ops->host_alloc(r->be, bytes, &r->slot_host[k][b]));
            memset(r->slot_host[k][b], 0, bytes);
        }
        if (d->phase == PHASE_IN) NL_TRY(r->be->ops->alloc(r->be, bytes, &r->dev[b]));
    }
    size_t seqs = (size_t)r->p.max_num_seqs;
    for (int k = 0; k < NL_FENCES; k++) {
        launched_step *l = &r->launched[k];
        l->seq_ids = calloc(seqs, sizeof *l->seq_ids);
        l->rows = calloc(seqs, sizeof *l->rows);
        l->n_logprobs = calloc(seqs, sizeof *l->n_logprobs);
        if (!l->seq_ids || !l->rows || !l->n_logprobs)
            return nl_error(NL_ERR_NOMEM, "model runner: no host memory for %zu launched seqs", seqs);
    }
    return NL_OK;
}

/* Makes launch slot k's host copies the ones the next step's inputs are
 * written in. */
static void use_slot(model_runner *r, int k)
{
    for (int b = 0; b < BUF_COUNT; b++)
        if (step_bufs[b].phase == PHASE_IN) r->host[b] = r->slot_host[k][b];
}

/* A copy_pieces piece of one contiguous run of bytes. */
static nl_copy_piece flat_piece(void *dst, const void *src, size_t bytes)
{
    return (nl_copy_piece){.dst = dst, .src = src, .dst_pitch = bytes, .src_pitch = bytes,
                           .row_bytes = bytes, .rows = 1};
}

/* Moves up the first entries of every input buffer that the shape uses,
 * from the slot's host copies they were written in, by one copy_pieces
 * kernel that reads them across the bus.  (A transfer a buffer cost a
 * copy-engine hand-off each between two steps' kernels, and one from
 * pageable memory may wait for the queue to drain.) */
static nl_status upload_step_inputs(model_runner *r, const step_shape *shape)
{
    nl_copy_piece pieces[BUF_COUNT];
    int32_t n = 0;
    for (int b = 0; b < BUF_COUNT; b++) {
        const struct step_buf_desc *d = &step_bufs[b];
        size_t bytes = step_count_of(d->count, shape) * d->elem;
        if (d->phase != PHASE_IN || bytes == 0) continue;
        nl_copy_piece *p = &pieces[n++];
        *p = flat_piece(r->dev[b], r->host[b], bytes);
        if (b == BUF_TABLES && shape->table_width < shape->stride) {
            /* a graph's rows are max_model_len wide; only the columns the
             * step's seqs use move (a few % of them in a typical step) */
            p->dst_pitch = p->src_pitch = (size_t)shape->stride * d->elem;
            p->row_bytes = (size_t)shape->table_width * d->elem;
            p->rows = (size_t)shape->n_seqs;
        }
    }
    return r->be->ops->copy_pieces(r->be, pieces, n);
}

void model_runner_destroy(model_runner *r)
{
    if (!r) return;
    runner_profile_report(&r->prof, r->be, r->rank);
    for (int32_t g = 0; g < r->n_graphs; g++)
        if (r->graph[g]) r->be->ops->graph_destroy(r->be, r->graph[g]);
    if (r->n_launched > 0) r->be->ops->synchronize(r->be); /* nothing copies into freed memory */
    for (int b = 0; b < BUF_COUNT; b++) {
        if (r->dev[b]) r->be->ops->free(r->be, r->dev[b]);
        if (step_bufs[b].phase == PHASE_HOST_ONLY) free(r->host[b]);
        for (int k = 0; k < NL_FENCES; k++)
            if (r->slot_host[k][b]) r->be->ops->host_free(r->be, r->slot_host[k][b]);
    }
    for (int k = 0; k < NL_FENCES; k++) {
        free(r->launched[k].seq_ids);
        free(r->launched[k].rows);
        free(r->launched[k].n_logprobs);
    }
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
    const engine_settings *p = &r->p;
    size_t block_bytes = qwen_kv_block_bytes(r->w, r->kv_dtype, p->block_size);
    int64_t blocks;
    const char *source;
    if (p->num_kv_blocks > 0) {
        blocks = p->num_kv_blocks;
        source = "--num-kv-blocks";
    } else {
        size_t free_b = 0, total_b = 0;
        int32_t sharing = engine_settings_ranks_on_gpu(p, r->rank);
        if (sharing > 1) {
            /* every rank of this GPU has loaded its weights before anyone
             * reads what is free, and (agree_min below) reads it before
             * anyone allocates its cache */
            int64_t none = 0;
            NL_TRY(agree_min(r, &none));
        }
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
            budget /= sharing; /* the share applies to the GPU, not per rank */
            source = sharing > 1 ? "gpu_memory_utilization, split between the GPU's ranks"
                                 : "gpu_memory_utilization";
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
    NL_TRY(qwen_state_alloc_kv(r->be, r->w, r->s, r->num_blocks, p->block_size, r->kv_dtype));
    if (r->rank == 0)
        nl_log(NL_LOG_INFO, "KV cache: %d blocks x %d tokens = %lld tokens of %s (%.1f MiB per worker, from %s)",
                r->num_blocks, p->block_size, (long long)r->num_blocks * p->block_size,
                nl_dtype_name(r->kv_dtype), (double)block_bytes * r->num_blocks / 1048576.0, source);
    return NL_OK;
}

/* ---- step inputs -------------------------------------------------------- */

static step_shape shape_of(const model_runner *r, int32_t n_tokens, int32_t n_seqs, int32_t stride,
                           int32_t n_logits)
{
    bool perm = r->p.tp > 1;
    return (step_shape){.n_tokens = n_tokens, .n_seqs = n_seqs, .stride = stride,
                        .table_width = stride, .n_logits = n_logits,
                        .n_perm = perm ? n_logits * r->p.tp : 0, .n_top = n_logits};
}

/* Pads a decode batch with rows from..size-1 to the graph size `size`:
 * each writes no KV (slot -1), reads one token of block 0 and is sampled
 * greedily, and its sample is dropped.  Rows [0, from) are the step's own,
 * one token and one logits row each, none with more than max_ctx tokens
 * of context (the graph's bound). */
static void pad_decode(model_runner *r, int32_t from, int32_t size, int32_t max_ctx,
                       step_plan *plan)
{
    int32_t *ids = r->host[BUF_IDS], *pos = r->host[BUF_POS], *slots = r->host[BUF_SLOTS];
    int32_t *cu = r->host[BUF_CU], *ctx = r->host[BUF_CTX], *tables = r->host[BUF_TABLES];
    int32_t *rows = r->host[BUF_ROWS];
    nl_sample_row *srows = r->host[BUF_SROWS];
    int32_t stride = r->max_blocks_per_seq; /* graphs replay with the widest table */
    for (int32_t s = from; s < size; s++) {
        ids[s] = 0;
        pos[s] = 0;
        slots[s] = -1;
        cu[s + 1] = s + 1;
        ctx[s] = 1;
        tables[(size_t)s * stride] = 0;
        rows[s] = s;
        srows[s] = (nl_sample_row){.temperature = 0.0f, .top_p = 1.0f};
    }
    /* a graph's host maxima are its bounds, since it replays for any step
     * within them */
    plan->shape = shape_of(r, size, size, stride, size);
    plan->max_q = 1;
    plan->max_ctx = max_ctx;
    plan->all_decode = true;
}

/* The decode seqs' launch order for attention (nl_attn_batch.decode_order). */
static void fill_decode_order(model_runner *r, const step_plan *plan)
{
    const int32_t n = plan->shape.n_seqs;
    nl_attn_decode_order(r->host[BUF_CTX], plan->all_decode ? n : plan->n_leading_decodes, n,
                         r->host[BUF_ORDER_KEYS], r->host[BUF_ORDER]);
}

/* Uploads the forward inputs the plan's shape uses and describes them in
 * *in. */
static nl_status upload_inputs(model_runner *r, const step_plan *plan, qwen_inputs *in)
{
    const step_shape *sh = &plan->shape;
    fill_decode_order(r, plan);
    if (sh->n_perm > 0) {
        int32_t *perm = r->host[BUF_PERM], tp = r->p.tp;
        for (int32_t i = 0; i < sh->n_logits; i++)
            for (int32_t k = 0; k < tp; k++) perm[i * tp + k] = k * sh->n_logits + i;
    }
    /* the sampler's inputs too: one copy for the whole step */
    NL_TRY(upload_step_inputs(r, sh));
    *in = (qwen_inputs){
        .n_tokens = sh->n_tokens,
        .ids = r->dev[BUF_IDS],
        .positions = r->dev[BUF_POS],
        .slots = r->dev[BUF_SLOTS],
        .attn = {.n_seqs = sh->n_seqs, .n_tokens = sh->n_tokens, .max_q_len = plan->max_q,
                 .max_context_len = plan->max_ctx, .max_blocks_per_seq = sh->stride,
                 .block_size = r->p.block_size, .all_decode = plan->all_decode,
                 .cu_seqlens_q = r->dev[BUF_CU], .context_lens = r->dev[BUF_CTX],
                 .block_tables = r->dev[BUF_TABLES],
                 .n_leading_decodes = plan->n_leading_decodes,
                 .decode_order = r->dev[BUF_ORDER]},
        .n_logits = sh->n_logits,
        .logit_rows = r->dev[BUF_ROWS],
        .gather_perm = r->dev[BUF_PERM],
    };
    return NL_OK;
}

/* The decode step shapes captured as graphs (decode_graphs.h). */
static int32_t graph_shapes(const model_runner *r, decode_graph_shape out[DECODE_GRAPHS_MAX])
{
    const engine_settings *p = &r->p;
    const int32_t max_seqs = p->max_num_seqs < p->max_num_batched_tokens ? p->max_num_seqs
                                                                         : p->max_num_batched_tokens;
    return decode_graph_shapes(max_seqs, p->max_model_len, out);
}

static bool captures_graphs(const model_runner *r)
{
    return r->be->ops->capture_begin && !r->p.enforce_eager;
}

#define WARM_TOKENS_MAX (1 << 15)

/* Starts preparing, on the backend's helper threads, the linear ops of
 * every decode graph's step and of each power of two of tokens a step can
 * hold (the shapes other token counts run on: kernels.h), to overlap the
 * weights' upload (the backend joins them in linear_warm_join).  Without
 * them a prompt's first token would wait for its length's preparation. */
static nl_status warm_linears(model_runner *r)
{
    if (!r->be->ops->linear_warm_start) return NL_OK;
    decode_graph_shape steps[DECODE_GRAPHS_MAX];
    const int32_t n_steps = captures_graphs(r) ? graph_shapes(r, steps) : 0;
    /* 1, 2, ..., the power of two at or above max_num_batched_tokens, up
     * to WARM_TOKENS_MAX: a larger step's own GEMMs take ten times what
     * preparing them does, and its scratch would be gigabytes */
    int32_t n_pow2 = 0;
    while ((1 << n_pow2) < r->p.max_num_batched_tokens && (1 << n_pow2) < WARM_TOKENS_MAX) n_pow2++;
    n_pow2++;
    nl_linear_shape *shapes =
        malloc((size_t)(n_steps + n_pow2) * QWEN_LINEAR_SHAPES * sizeof *shapes);
    if (!shapes) return NL_OK; /* an optimisation only */
    int32_t n = 0;
    for (int32_t i = 0; i < n_steps; i++) { /* a decode step: one logits row a seq */
        const int32_t seqs = steps[i].n_seqs;
        if (i == 0 || seqs != steps[i - 1].n_seqs) /* bounds share the linear shapes */
            n += qwen_linear_shapes(r->w, seqs, seqs, shapes + n);
    }
    for (int32_t e = 0; e < n_pow2; e++) { /* a step of prompt tokens; its logits rows */
        const int32_t tokens = 1 << e;
        const int32_t rows = tokens < 2 * r->p.max_num_seqs ? tokens : 0;
        n += qwen_linear_shapes(r->w, tokens, rows, shapes + n);
    }
    nl_status st = r->be->ops->linear_warm_start(r->be, shapes, n);
    free(shapes);
    return st;
}

/* Captures the decode step of n seqs whose contexts are at most max_ctx
 * tokens as the next graph. */
static nl_status capture_graph(model_runner *r, int32_t n, int32_t max_ctx)
{
    nl_backend *be = r->be;
    step_plan plan = {.graph = -1};
    qwen_inputs in;
    use_slot(r, 0); /* nothing is in flight while graphs are captured */
    ((int32_t *)r->host[BUF_CU])[0] = 0;
    pad_decode(r, 0, n, max_ctx, &plan);
    NL_TRY(upload_inputs(r, &plan, &in));
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
    r->graph_shape[r->n_graphs] = (decode_graph_shape){n, max_ctx};
    r->graph[r->n_graphs++] = g;
    return NL_OK;
}

static nl_status capture_graphs(model_runner *r)
{
    decode_graph_shape shapes[DECODE_GRAPHS_MAX];
    const int32_t n_shapes = graph_shapes(r, shapes);
    for (int32_t i = 0; i < n_shapes; i++)
        NL_TRY(capture_graph(r, shapes[i].n_seqs, shapes[i].max_ctx));
    if (r->rank == 0)
        nl_log(NL_LOG_INFO, "captured %d decode graphs (batch sizes up to %d)", r->n_graphs,
                r->n_graphs ? r->graph_shape[r->n_graphs - 1].n_seqs : 0);
    return NL_OK;
}

/* ---- create ------------------------------------------------------------- */

/* --kv-cache-dtype as an element type: auto is the backend's activation
 * type; the backend's store and attention refuse a type they lack. */
static nl_dtype kv_dtype_of(const model_runner *r)
{
    switch (r->p.kv_cache_dtype) {
    case NL_KV_CACHE_BF16: return NL_DTYPE_BF16;
    case NL_KV_CACHE_FP8: return NL_DTYPE_F8_E4M3;
    default: return r->be->ops->act_dtype; /* AUTO; engine_settings_validate refuses others */
    }
}

static nl_status runner_init(model_runner *r)
{
    const engine_settings *p = &r->p;
    r->kv_dtype = kv_dtype_of(r);
    double mark = runner_profile_now();
    NL_TRY(model_config_load(p->model_dir, &r->cfg));
    st_model *m = NULL;
    NL_TRY(st_open(p->model_dir, &m));
    nl_status st = model_tensors_check(&r->cfg, m);
    if (st == NL_OK) st = weights_create(r->be, &r->cfg, r->rank, p->tp, &r->w);
    if (st == NL_OK) st = warm_linears(r);
    if (st == NL_OK) st = weights_fill(r->be, m, r->w);
    /* before the memory plan counts free memory: the helpers' scratch goes */
    nl_status joined = r->be->ops->linear_warm_join ? r->be->ops->linear_warm_join(r->be) : NL_OK;
    st_close(m); /* the weights are copies on the backend now */
    NL_TRY(st);
    NL_TRY(joined);
    runner_profile_startup(&r->prof, r->be, r->rank, "weights read + upload", &mark);
    r->max_blocks_per_seq = (p->max_model_len + p->block_size - 1) / p->block_size;
    NL_TRY(check_memory_plan(r));
    NL_TRY(qwen_state_create(r->be, r->w, p->max_num_batched_tokens, p->max_num_seqs, &r->s));
    r->s->left_out = r->prof.left_out;
    NL_TRY(alloc_step_buffers(r));
    runner_profile_startup(&r->prof, r->be, r->rank, "activations", &mark);
    NL_TRY(size_kv_cache(r));
    runner_profile_startup(&r->prof, r->be, r->rank, "KV cache", &mark);
    if (captures_graphs(r)) NL_TRY(capture_graphs(r));
    runner_profile_startup(&r->prof, r->be, r->rank, "graph capture", &mark);
    return NL_OK;
}

nl_status model_runner_create(const engine_settings *params, int32_t rank, nl_backend *be,
                              nl_comm *comm, model_runner **out)
{
    nl_status st = engine_settings_validate(params, true);
    if (st != NL_OK) return nl_error_prefix(st, "model runner: ");
    if (comm->size != params->tp || comm->rank != rank)
        return nl_error(NL_ERR_INVALID_ARG, "model runner: rank %d of tp %d, but the comm is rank %d of %d",
                        rank, params->tp, comm->rank, comm->size);
    model_runner *r = calloc(1, sizeof *r);
    if (!r) return nl_error(NL_ERR_NOMEM, "model runner: no memory");
    r->p = *params;
    r->rank = rank;
    r->last = -1;
    st = runner_profile_parse(getenv("NANOLLM_PROFILE"), be, rank, &r->prof);
    if (st != NL_OK) {
        free(r);
        return st;
    }
    r->be = be;
    r->comm = comm;
    st = runner_init(r);
    if (st != NL_OK) {
        model_runner_destroy(r);
        return nl_error_prefix(st, "loading %s: ", params->model_dir);
    }
    *out = r;
    return NL_OK;
}

/* ---- execute ------------------------------------------------------------ */

/* Checks a RUN command against the engine's limits; *n_tokens: its new
 * tokens, *longest: its longest context. */
static nl_status validate(const model_runner *r, const wire_run *cmd, int32_t *n_tokens,
                          int32_t *longest)
{
    const engine_settings *p = &r->p;
    if (cmd->kind != WIRE_RUN) return nl_error(NL_ERR_INVALID_ARG, "step %llu: not a RUN command",
                                               (unsigned long long)cmd->step_id);
    if (cmd->n_seqs < 1 || cmd->n_seqs > p->max_num_seqs)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: %d seqs outside [1, max_num_seqs %d]",
                        (unsigned long long)cmd->step_id, cmd->n_seqs, p->max_num_seqs);
    int64_t total = 0, most = 0;
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
            if ((q->tokens[i] < 0 || q->tokens[i] >= r->cfg.vocab_size) &&
                !(q->tokens[i] == WIRE_TOKEN_PREVIOUS && q->num_new == 1)) /* prepare_inputs resolves it */
                return nl_error(NL_ERR_INVALID_ARG, "seq %llu: token %d at %d outside vocab [0, %d)",
                                id, q->tokens[i], q->num_computed + i, r->cfg.vocab_size);
        if (q->sample && (q->sampling.n_logprobs < 0 || q->sampling.n_logprobs > NL_MAX_LOGPROBS))
            return nl_error(NL_ERR_INVALID_ARG, "seq %llu: n_logprobs %d outside [0, %d]", id,
                            q->sampling.n_logprobs, NL_MAX_LOGPROBS);
        total += q->num_new;
        if (end > most) most = end;
    }
    if (total > p->max_num_batched_tokens)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: %lld tokens exceed max_num_batched_tokens %d",
                        (unsigned long long)cmd->step_id, (long long)total, p->max_num_batched_tokens);
    *n_tokens = (int32_t)total;
    *longest = (int32_t)most; /* <= max_model_len */
    return NL_OK;
}

/* Below this temperature a request is sampled greedily.  Softmax at such a
 * temperature is already one-hot, and the samplers scale logits by 1 / T:
 * near 1e-38 that overflows to infinity, every kept score ties and the lowest
 * id would win instead of the most likely one. */
#define GREEDY_TEMPERATURE 1e-5f

static nl_sample_row sample_row_of(const wire_seq *q)
{
    nl_sample_row row = q->sampling;
    if (!(row.temperature >= GREEDY_TEMPERATURE)) { /* greedy: the filters cannot matter */
        row.temperature = 0.0f;
        row.top_p = 1.0f;
        row.min_p = 0.0f;
    }
    return row;
}

/* The logits row where the step launched last sampled seq_id, for a
 * placeholder input of step step_id: that step must be step_id - 1. */
static nl_status previous_row(model_runner *r, uint64_t step_id, uint64_t seq_id, int32_t *row)
{
    const launched_step *l = r->last >= 0 ? &r->launched[r->last] : NULL;
    unsigned long long step = (unsigned long long)step_id, seq = (unsigned long long)seq_id;
    if (!l || l->step_id + 1 != step_id)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: seq %llu's input is a placeholder, but step %llu did not "
                        "run just before it", step, seq, step - 1);
    int32_t i = wire_find_seq(l->seq_ids, l->n_seqs, seq_id, &r->take_cursor);
    *row = i >= 0 && l->sampled ? l->rows[i] : -1;
    if (*row >= 0) return NL_OK;
    return nl_error(NL_ERR_INVALID_ARG, "step %llu: seq %llu's input is step %llu's sample, but that step did "
                    "not sample it", step, seq, step - 1);
}

/* Stage 1, on the host: checks the command, picks the path (the smallest
 * captured graph that fits an all-decode step, else eager) and fills the
 * host mirrors of the forward and sampler inputs. */
static nl_status prepare_inputs(model_runner *r, const wire_run *cmd, step_plan *plan)
{
    int32_t n_tokens = 0, longest = 0;
    NL_TRY(validate(r, cmd, &n_tokens, &longest));
    int32_t n_seqs = cmd->n_seqs, bs = r->p.block_size;
    *plan = (step_plan){.graph = -1, .n_tokens = n_tokens, .max_ctx = longest};
    while (plan->n_leading_decodes < n_seqs && cmd->seqs[plan->n_leading_decodes].num_new == 1)
        plan->n_leading_decodes++;
    plan->all_decode = plan->n_leading_decodes == n_seqs;
    if (plan->all_decode)
        plan->graph = decode_graph_pick(r->graph_shape, r->n_graphs, n_seqs, longest);

    /* a graph replays with the engine-wide table stride; an eager step
     * uploads only as wide a table as its longest seq needs */
    int32_t width = 1, n_logits = 0, t = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        if (cmd->seqs[s].n_blocks > width) width = cmd->seqs[s].n_blocks;
    int32_t stride = plan->graph >= 0 ? r->max_blocks_per_seq : width;
    int32_t *ids = r->host[BUF_IDS], *pos = r->host[BUF_POS], *slots = r->host[BUF_SLOTS];
    int32_t *cu = r->host[BUF_CU], *ctx = r->host[BUF_CTX], *tables = r->host[BUF_TABLES];
    int32_t *rows = r->host[BUF_ROWS], *takes = r->host[BUF_TAKE], n_take = 0;
    nl_sample_row *srows = r->host[BUF_SROWS];
    cu[0] = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        const wire_seq *q = &cmd->seqs[s];
        int32_t len = q->num_computed + q->num_new;
        if (q->tokens[0] == WIRE_TOKEN_PREVIOUS) {
            takes[2 * n_take] = t;
            NL_TRY(previous_row(r, cmd->step_id, q->seq_id, &takes[2 * n_take + 1]));
            n_take++;
        }
        for (int32_t i = 0; i < q->num_new; i++, t++) {
            int32_t at = q->num_computed + i;
            ids[t] = q->tokens[i] == WIRE_TOKEN_PREVIOUS ? 0 : q->tokens[i]; /* taken on the device */
            pos[t] = at;
            slots[t] = q->block_table[at / bs] * bs + at % bs;
        }
        cu[s + 1] = t;
        ctx[s] = len;
        memcpy(tables + (size_t)s * stride, q->block_table, sizeof(int32_t) * q->n_blocks);
        if (q->num_new > plan->max_q) plan->max_q = q->num_new;
        if (q->sample || plan->graph >= 0) { /* a graph computes every row's logits */
            rows[n_logits] = t - 1;
            srows[n_logits++] = q->sample ? sample_row_of(q) : (nl_sample_row){.top_p = 1.0f};
        }
    }
    if (plan->graph >= 0)
        pad_decode(r, n_seqs, r->graph_shape[plan->graph].n_seqs,
                   r->graph_shape[plan->graph].max_ctx, plan);
    else
        plan->shape = shape_of(r, n_tokens, n_seqs, stride, n_logits);
    plan->shape.table_width = width;
    plan->shape.n_take = n_take;
    /* the top logprobs come back only when some seq asked for them */
    bool top = false;
    for (int32_t s = 0; s < n_seqs && !top; s++)
        top = cmd->seqs[s].sample && cmd->seqs[s].sampling.n_logprobs > 0;
    if (!top) plan->shape.n_top = 0;
    return NL_OK;
}

/* Stage 2: the forward pass, replayed from its graph or run op by op. */
static nl_status run_forward(model_runner *r, const step_plan *plan, const qwen_inputs *in)
{
    if (plan->graph >= 0) return r->be->ops->graph_launch(r->be, r->graph[plan->graph]);
    return qwen_forward(r->be, r->comm, r->w, r->s, in);
}

/* Stage 3: samples every logits row into launch slot k's host
 * copies (no copy after it: one kernel boundary fewer a step).  Row k of
 * the logits is the k-th sampling seq, or seq k under a graph. */
static nl_status launch_sampler(model_runner *r, const step_plan *plan, int k)
{
    nl_backend *be = r->be;
    void *const *out = r->slot_host[k];
    return be->ops->sample(be, r->s->logits, plan->shape.n_logits, r->cfg.vocab_size,
                           r->dev[BUF_SROWS], out[BUF_OUT_IDS], out[BUF_OUT_LP], out[BUF_TOP_IDS],
                           out[BUF_TOP_LP]);
}

/* What the reply of the step in slot k needs from its command. */
static void record_launch(model_runner *r, const wire_run *cmd, const step_plan *plan, int k)
{
    launched_step *l = &r->launched[k];
    l->step_id = cmd->step_id;
    l->n_seqs = cmd->n_seqs;
    l->sampled = plan->shape.n_logits > 0;
    int32_t row = 0;
    for (int32_t s = 0; s < cmd->n_seqs; s++) {
        const wire_seq *q = &cmd->seqs[s];
        l->seq_ids[s] = q->seq_id;
        l->n_logprobs[s] = q->sampling.n_logprobs;
        l->rows[s] = !q->sample ? -1 : plan->graph >= 0 ? s : row;
        row += q->sample;
    }
}

/* Stage 4: the reply of slot k's step, once it finished: its samples. */
static void fill_reply(model_runner *r, int k, wire_reply *reply)
{
    const launched_step *l = &r->launched[k];
    *reply = (wire_reply){.step_id = l->step_id, .status = NL_OK, .sampled = r->host[BUF_REPLY]};
    if (!l->sampled) return;
    const int32_t *out_ids = r->slot_host[k][BUF_OUT_IDS], *top_ids = r->slot_host[k][BUF_TOP_IDS];
    const float *out_lp = r->slot_host[k][BUF_OUT_LP], *top_lp = r->slot_host[k][BUF_TOP_LP];
    wire_sampled *sampled = r->host[BUF_REPLY];
    for (int32_t s = 0; s < l->n_seqs; s++) {
        int32_t row = l->rows[s];
        if (row < 0) continue;
        wire_sampled *o = &sampled[reply->n_sampled++];
        o->seq_id = l->seq_ids[s];
        o->token_id = out_ids[row];
        o->logprob = out_lp[row];
        o->n_top = l->n_logprobs[s];
        for (int32_t j = 0; j < o->n_top; j++) {
            o->top_ids[j] = top_ids[row * NL_MAX_LOGPROBS + j];
            o->top_logprobs[j] = top_lp[row * NL_MAX_LOGPROBS + j];
        }
    }
}

/* The step as a pipeline: prepare, upload, take placeholders, run, sample.
 * With NANOLLM_PROFILE=1 each stage after the host's is timed to its end
 * (which waits for the device, so nothing overlaps then). */
nl_status model_runner_launch(model_runner *r, const wire_run *cmd)
{
    if (r->n_launched == NL_FENCES)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: %d steps already launched",
                        (unsigned long long)cmd->step_id, NL_FENCES);
    const int k = (r->oldest + r->n_launched) % NL_FENCES;
    use_slot(r, k);
    step_plan plan;
    NL_TRY(prepare_inputs(r, cmd, &plan));

    runner_profile *pr = &r->prof;
    double mark = pr->phases ? runner_profile_now() : 0;
    struct step_profile *prof = &pr->kind[!plan.all_decode ? PROFILE_PREFILL
                                         : plan.graph >= 0 ? PROFILE_DECODE_GRAPH
                                                           : PROFILE_DECODE_EAGER];
    prof->steps++;
    prof->tokens += plan.n_tokens;
    const bool marks = pr->stream && plan.graph >= 0;
    NL_TRY(runner_profile_step(pr, r->be, plan.graph >= 0));
    const double host_start = marks ? runner_profile_now() : 0;
    const bool behind = marks && last_running(r);
    pr->launched_behind += behind;
    qwen_inputs in;
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_INPUTS));
    NL_TRY(upload_inputs(r, &plan, &in));
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_TAKE));
    if (plan.shape.n_take > 0) /* the ids the last step sampled, in its slot's host copy */
        NL_TRY(r->be->ops->take_ids(r->be, r->dev[BUF_IDS], r->slot_host[r->last][BUF_OUT_IDS],
                                    r->dev[BUF_TAKE], plan.shape.n_take));
    if (pr->phases) prof->prep_s += runner_profile_lap(r->be, &mark);
    r->s->time_ops = pr->ops && plan.graph < 0;
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_FORWARD));
    nl_status st = run_forward(r, &plan, &in);
    if (r->s->time_ops) {
        r->s->time_ops = false;
        nl_status collected = r->be->ops->timer_collect(r->be, prof->op_s, QWEN_OP_COUNT);
        if (st == NL_OK) st = collected;
    }
    NL_TRY(st);
    if (pr->phases) prof->forward_s += runner_profile_lap(r->be, &mark);

    record_launch(r, cmd, &plan, k);
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_SAMPLE));
    if (r->launched[k].sampled) NL_TRY(launch_sampler(r, &plan, k));
    NL_TRY(r->be->ops->fence_record(r->be, k));
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_EMPTY));
    NL_TRY(runner_profile_mark(pr, r->be, marks, STREAM_NEXT));
    if (marks) pr->launch_host_s += runner_profile_now() - host_start;
    pr->launched_late += behind && !last_running(r);
    NL_TRY(runner_profile_collect(pr, r->be, false));
    if (pr->phases) prof->sample_s += runner_profile_lap(r->be, &mark);
    r->n_launched++;
    r->last = k;
    return NL_OK;
}

bool model_runner_oldest_done(model_runner *r)
{
    bool passed = true;
    if (r->n_launched > 0 && r->be->ops->fence_passed(r->be, r->oldest, &passed) != NL_OK)
        return true; /* finish reports the error */
    return passed;
}

nl_status model_runner_finish(model_runner *r, wire_reply *reply)
{
    if (r->n_launched == 0) return nl_error(NL_ERR_INVALID_ARG, "model runner: no step launched");
    const int k = r->oldest;
    r->oldest = (r->oldest + 1) % NL_FENCES;
    r->n_launched--;
    NL_TRY(r->be->ops->fence_wait(r->be, k));
    if (reply) fill_reply(r, k, reply);
    return NL_OK;
}

nl_status model_runner_execute(model_runner *r, const wire_run *cmd, wire_reply *reply)
{
    nl_status st = model_runner_launch(r, cmd);
    if (st == NL_OK) st = model_runner_finish(r, reply);
    if (st != NL_OK && reply) {
        *reply = (wire_reply){.step_id = cmd->step_id, .status = st};
        snprintf(reply->error, sizeof reply->error, "%s", nl_last_error());
    }
    return st;
}
