/* qwen.c — the dense decoder forward pass of every registered family
 * (Qwen3, Qwen2, Llama), written once against the op interface so the CPU
 * and CUDA backends run the same model code.
 *
 * The families differ only in which weights exist: Qwen3 normalises each
 * query and key head (q_norm, k_norm) before RoPE, Qwen2 adds biases to q,
 * k and v, Llama is the plain decoder with optional attention and MLP
 * biases.  Which of them a model has is the family table's business
 * (common/model_<family>.c): this file reads the weights it filled, and an
 * absent one is NULL, which the ops skip.  The rotary frequencies (plain
 * or Llama 3 scaled) are a table the loader computed.  Every family
 * follows one token through the same steps, top to bottom in qwen_forward.
 */
#include "worker/qwen.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t qwen_kv_block_bytes(const qwen_weights *w, nl_dtype kv_dtype, int32_t block_size)
{
    return 2 * (size_t)w->cfg.num_hidden_layers * (size_t)block_size * (size_t)w->shard.hk *
           (size_t)w->shard.hd * nl_dtype_size(kv_dtype);
}

static nl_status alloc_zero(nl_backend *be, size_t bytes, void **out)
{
    NL_TRY(be->ops->alloc(be, bytes, out));
    return be->ops->memset_zero(be, *out, bytes);
}

/* The bytes of each activation buffer for steps of up to max_tokens tokens
 * and max_logits sampled rows: one formula for the memory plan and the
 * allocation. */
typedef struct state_sizes {
    size_t x, xn, residual, work, work2, last, logits_shard, logits_gathered, logits;
} state_sizes;

static state_sizes state_sizes_of(const qwen_weights *w, size_t act_size, int32_t max_tokens,
                                  int32_t max_logits)
{
    const qwen_shard *sh = &w->shard;
    size_t T = (size_t)max_tokens, L = (size_t)max_logits, a = act_size;
    size_t hidden = (size_t)w->cfg.hidden_size;
    size_t qkv_w = (size_t)(sh->hq + 2 * sh->hk) * sh->hd, attn_w = (size_t)sh->hq * sh->hd;
    size_t gu_w = 2 * (size_t)sh->inter, mlp_w = (size_t)sh->inter;
    size_t vs = (size_t)sh->vocab_shard, tp = (size_t)sh->tp;
    bool gathers = tp > 1; /* every rank samples the whole rows */
    return (state_sizes){
        .x = T * hidden * a,
        .xn = T * hidden * a,
        .residual = T * hidden * a,
        .work = T * (qkv_w > gu_w ? qkv_w : gu_w) * a,
        .work2 = T * (attn_w > mlp_w ? attn_w : mlp_w) * a,
        .last = L * hidden * a,
        .logits_shard = L * vs * sizeof(float),
        .logits_gathered = gathers ? tp * L * vs * sizeof(float) : 0,
        .logits = gathers ? tp * L * vs * sizeof(float) : 0,
    };
}

size_t qwen_state_bytes(nl_backend *be, const qwen_weights *w, int32_t max_tokens, int32_t max_logits)
{
    state_sizes z = state_sizes_of(w, nl_dtype_size(be->ops->act_dtype), max_tokens, max_logits);
    return z.x + z.xn + z.residual + z.work + z.work2 + z.last + z.logits_shard +
           z.logits_gathered + z.logits;
}

nl_status qwen_state_create(nl_backend *be, const qwen_weights *w, int32_t max_tokens,
                            int32_t max_logits, qwen_state **out)
{
    qwen_state *s = calloc(1, sizeof *s);
    if (!s) return nl_error(NL_ERR_NOMEM, "model state: no memory");
    s->max_tokens = max_tokens;
    s->max_logits = max_logits;
    s->act_size = nl_dtype_size(be->ops->act_dtype);
    state_sizes z = state_sizes_of(w, s->act_size, max_tokens, max_logits);
    nl_status st = NL_OK;
    if (st == NL_OK) st = alloc_zero(be, z.x, &s->x);
    if (st == NL_OK) st = alloc_zero(be, z.xn, &s->xn);
    if (st == NL_OK) st = alloc_zero(be, z.residual, &s->residual);
    if (st == NL_OK) st = alloc_zero(be, z.work, &s->work);
    if (st == NL_OK) st = alloc_zero(be, z.work2, &s->work2);
    if (st == NL_OK) st = alloc_zero(be, z.last, &s->last);
    if (st == NL_OK) st = alloc_zero(be, z.logits_shard, (void **)&s->logits_shard);
    if (st == NL_OK && z.logits) {
        st = alloc_zero(be, z.logits_gathered, (void **)&s->logits_gathered);
        if (st == NL_OK) st = alloc_zero(be, z.logits, (void **)&s->logits);
    } else {
        s->logits = s->logits_shard;
    }
    if (st != NL_OK) {
        qwen_state_destroy(be, w, s);
        return nl_error_prefix(st, "activations for %d tokens: ", max_tokens);
    }
    *out = s;
    return NL_OK;
}

nl_status qwen_state_alloc_kv(nl_backend *be, const qwen_weights *w, qwen_state *s,
                              int32_t num_blocks, int32_t block_size, nl_dtype kv_dtype)
{
    int32_t layers = w->cfg.num_hidden_layers;
    size_t bytes = (size_t)num_blocks * qwen_kv_block_bytes(w, kv_dtype, block_size) / (2 * (size_t)layers);
    s->k_cache = calloc((size_t)layers, sizeof *s->k_cache);
    s->v_cache = calloc((size_t)layers, sizeof *s->v_cache);
    if (!s->k_cache || !s->v_cache) return nl_error(NL_ERR_NOMEM, "KV cache: no memory for %d layers", layers);
    s->num_blocks = num_blocks;
    s->block_size = block_size;
    s->kv_dtype = kv_dtype;
    /* Zeroed so that padding rows of a captured graph read finite values. */
    for (int32_t l = 0; l < layers; l++) {
        nl_status st = alloc_zero(be, bytes, &s->k_cache[l]);
        if (st == NL_OK) st = alloc_zero(be, bytes, &s->v_cache[l]);
        if (st != NL_OK)
            return nl_error_prefix(st, "KV cache layer %d (%d blocks, %zu bytes each): ", l, num_blocks,
                                   bytes);
    }
    return NL_OK;
}

void qwen_state_destroy(nl_backend *be, const qwen_weights *w, qwen_state *s)
{
    if (!s) return;
    void *bufs[] = {s->x, s->xn, s->residual, s->work, s->work2, s->last, s->logits_shard,
                    s->logits_gathered, s->logits != s->logits_shard ? s->logits : NULL};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    for (int32_t l = 0; s->k_cache && l < w->cfg.num_hidden_layers; l++)
        if (s->k_cache[l]) be->ops->free(be, s->k_cache[l]);
    for (int32_t l = 0; s->v_cache && l < w->cfg.num_hidden_layers; l++)
        if (s->v_cache[l]) be->ops->free(be, s->v_cache[l]);
    free(s->k_cache);
    free(s->v_cache);
    free(s);
}

const char *const qwen_op_names[QWEN_OP_COUNT] = {
    [QWEN_OP_EMBEDDING] = "embedding",       [QWEN_OP_RMSNORM] = "final rmsnorm",
    [QWEN_OP_QKV] = "rmsnorm + qkv linear",  [QWEN_OP_ROPE_STORE] = "qk norm + rope + store",
    [QWEN_OP_ATTENTION] = "attention",
    [QWEN_OP_O_PROJ] = "o_proj linear",      [QWEN_OP_ALL_REDUCE] = "all-reduce",
    [QWEN_OP_GATE_UP] = "rmsnorm + gate_up + silu", [QWEN_OP_DOWN] = "down linear",
    [QWEN_OP_LM_HEAD] = "lm head",
    [QWEN_OP_LOGITS_GATHER] = "logits gather",
};

static const char *const qwen_op_keys[QWEN_OP_COUNT] = {
    [QWEN_OP_EMBEDDING] = "embedding", [QWEN_OP_RMSNORM] = "final_norm",
    [QWEN_OP_QKV] = "qkv",             [QWEN_OP_ROPE_STORE] = "rope",
    [QWEN_OP_ATTENTION] = "attention", [QWEN_OP_O_PROJ] = "o_proj",
    [QWEN_OP_ALL_REDUCE] = "all_reduce", [QWEN_OP_GATE_UP] = "gate_up",
    [QWEN_OP_DOWN] = "down",           [QWEN_OP_LM_HEAD] = "lm_head",
    [QWEN_OP_LOGITS_GATHER] = "logits_gather",
};

nl_status qwen_parse_left_out(const char *list, uint32_t *mask)
{
    *mask = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        int op = -1;
        for (int k = 0; k < QWEN_OP_COUNT && op < 0; k++)
            if (strlen(qwen_op_keys[k]) == len && strncmp(p, qwen_op_keys[k], len) == 0) op = k;
        if (op < 0) {
            char keys[256] = "";
            for (int k = 0; k < QWEN_OP_COUNT; k++)
                snprintf(keys + strlen(keys), sizeof keys - strlen(keys), "%s%s", k ? ", " : "",
                         qwen_op_keys[k]);
            return nl_error(NL_ERR_INVALID_ARG, "no forward op '%.*s' to leave out (ops: %s)",
                            (int)len, p, keys);
        }
        *mask |= 1u << op;
        p += len + (p[len] == ',');
    }
    return NL_OK;
}

/* Whether the forward runs op (qwen_state.left_out). */
static inline bool runs(const qwen_state *s, qwen_op op)
{
    return !(s->left_out >> op & 1u);
}

/* Starts op's interval for the op timer (NANOLLM_PROFILE=ops). */
static inline nl_status mark(nl_backend *be, const qwen_state *s, qwen_op op)
{
    return s->time_ops ? be->ops->timer_mark(be, (int32_t)op) : NL_OK;
}

static nl_status all_reduce(nl_comm *comm, nl_backend *be, const qwen_state *s, void *buf,
                            size_t count)
{
    if (comm->size == 1 || !runs(s, QWEN_OP_ALL_REDUCE)) return NL_OK;
    NL_TRY(mark(be, s, QWEN_OP_ALL_REDUCE));
    return comm->ops->all_reduce_sum(comm, buf, count, be->ops->act_dtype);
}

/* A row-parallel projection's bias on this rank: rank 0 alone adds it, so
 * the all-reduce adds it once (vLLM's RowParallelLinear). */
static const nl_weight *row_parallel_bias(const qwen_weights *w, const nl_weight *bias)
{
    return w->shard.rank == 0 ? bias : NULL;
}

/* A row-parallel projection (o_proj, down) of in into the residual stream
 * (row_parallel_bias).  One token on one rank: the product goes straight
 * into the residual (linear_add), so the next norm_linear finds the
 * residual complete and a backend can normalise it inside that projection
 * (the GEMV of a single token).  Otherwise the partial sums land in x, are
 * all-reduced, and *pending names them for the next norm_linear to add: in
 * a batch that add rides in the RMSNorm kernel for free, where a separate
 * add would cost a kernel. */
static nl_status project_into_residual(nl_backend *be, nl_comm *comm, const qwen_weights *w,
                                       qwen_state *s, const void *in, const nl_weight *weight,
                                       const nl_weight *bias, int32_t n, const void **pending)
{
    const nl_weight *b = row_parallel_bias(w, bias);
    if (n == 1 && comm->size == 1) {
        *pending = NULL;
        return be->ops->linear_add(be, s->residual, s->x, in, weight, b, n);
    }
    NL_TRY(be->ops->linear(be, s->x, in, weight, b, n));
    *pending = s->x;
    return all_reduce(comm, be, s, s->x, (size_t)n * w->cfg.hidden_size);
}

int32_t qwen_linear_shapes(const qwen_weights *w, int32_t n, int32_t n_logits,
                           nl_linear_shape out[QWEN_LINEAR_SHAPES])
{
    int32_t k = 0;
    if (w->cfg.num_hidden_layers > 0 && n > 0) {
        const qwen_layer *L = &w->layers[0];
        out[k++] = (nl_linear_shape){L->qkv, L->qkv_bias, n, false};
        out[k++] = (nl_linear_shape){L->o_proj, row_parallel_bias(w, L->o_bias), n, false};
        out[k++] = (nl_linear_shape){L->gate_up, L->gate_up_bias, n, false};
        out[k++] = (nl_linear_shape){L->down, row_parallel_bias(w, L->down_bias), n, false};
    }
    if (n_logits > 0) out[k++] = (nl_linear_shape){w->lm_head, NULL, n_logits, true};
    return k;
}

nl_status qwen_forward(nl_backend *be, nl_comm *comm, const qwen_weights *w, qwen_state *s,
                       const qwen_inputs *in)
{
    const nl_backend_ops *op = be->ops;
    const nl_model_config *cfg = &w->cfg;
    const qwen_shard *sh = &w->shard;
    const int32_t n = in->n_tokens, hidden = cfg->hidden_size;
    const int32_t hq = sh->hq, hk = sh->hk, hd = sh->hd;
    const float eps = cfg->rms_norm_eps, scale = 1.0f / sqrtf((float)hd);
    if (n <= 0 || n > s->max_tokens || in->n_logits < 0 || in->n_logits > s->max_logits ||
        in->n_logits > n)
        return nl_error(NL_ERR_INVALID_ARG, "forward: %d tokens (max %d), %d logits rows (max %d)", n,
                        s->max_tokens, in->n_logits, s->max_logits);

    /* token embeddings: each rank looks up its vocab rows, the sum is the
     * full lookup and the residual stream's start, complete, with nothing
     * pending: so the first projection can normalise it itself as every
     * later one does (one token: no RMSNorm kernel, no zeroing). */
    NL_TRY(mark(be, s, QWEN_OP_EMBEDDING));
    if (runs(s, QWEN_OP_EMBEDDING))
        NL_TRY(op->embedding(be, s->residual, w->embed, in->ids, n, sh->vocab_start));
    NL_TRY(all_reduce(comm, be, s, s->residual, (size_t)n * hidden));
    const void *pending = NULL;

    for (int32_t l = 0; l < cfg->num_hidden_layers; l++) {
        const qwen_layer *L = &w->layers[l];
        void *qkv = s->work, *attn = s->work2, *gate_up = s->work, *mlp = s->work2;

        /* attention block: qkv = norm(residual + pending) @ W_qkv */
        NL_TRY(mark(be, s, QWEN_OP_QKV));
        if (runs(s, QWEN_OP_QKV))
            NL_TRY(op->norm_linear(be, qkv, s->xn, attn, pending, s->residual, L->input_norm,
                                   eps, L->qkv, L->qkv_bias, n, false)); /* [n, (hq + 2 hk) hd] */
        NL_TRY(mark(be, s, QWEN_OP_ROPE_STORE));
        if (runs(s, QWEN_OP_ROPE_STORE))
            NL_TRY(op->qk_norm_rope_store(be, qkv, in->positions, L->q_norm, L->k_norm,
                                          w->rope_inv_freq, s->k_cache[l], s->v_cache[l],
                                          in->slots, n, hq, hk, hd, eps, s->block_size,
                                          s->kv_dtype));
        NL_TRY(mark(be, s, QWEN_OP_ATTENTION));
        if (runs(s, QWEN_OP_ATTENTION))
            NL_TRY(op->attention(be, attn, qkv, s->k_cache[l], s->v_cache[l], &in->attn, hq, hk,
                                 hd, scale, s->kv_dtype)); /* [n, hq hd] */
        NL_TRY(mark(be, s, QWEN_OP_O_PROJ));
        if (runs(s, QWEN_OP_O_PROJ))
            NL_TRY(project_into_residual(be, comm, w, s, attn, L->o_proj, L->o_bias, n, &pending));

        /* MLP block: mlp = silu * mul of norm(residual + pending) @ W_gate_up */
        NL_TRY(mark(be, s, QWEN_OP_GATE_UP));
        if (runs(s, QWEN_OP_GATE_UP))
            NL_TRY(op->norm_linear(be, mlp, s->xn, gate_up, pending, s->residual, L->post_norm,
                                   eps, L->gate_up, L->gate_up_bias, n, true)); /* [n, inter] */
        NL_TRY(mark(be, s, QWEN_OP_DOWN));
        if (runs(s, QWEN_OP_DOWN))
            NL_TRY(project_into_residual(be, comm, w, s, mlp, L->down, L->down_bias, n, &pending));
    }

    /* final norm, then the LM head on the rows that sample only */
    NL_TRY(mark(be, s, QWEN_OP_RMSNORM));
    if (runs(s, QWEN_OP_RMSNORM))
        NL_TRY(op->rmsnorm(be, s->xn, pending ? pending : s->residual,
                           pending ? s->residual : NULL, w->final_norm, n, hidden, eps));
    int32_t m = in->n_logits;
    if (m == 0) return NL_OK;
    NL_TRY(mark(be, s, QWEN_OP_LM_HEAD));
    const void *rows = s->xn; /* every row (a decode step): no gather */
    if (m < n) {
        NL_TRY(op->gather_rows(be, s->last, s->xn, in->logit_rows, m, hidden));
        rows = s->last;
    }
    if (runs(s, QWEN_OP_LM_HEAD))
        NL_TRY(op->linear_f32(be, s->logits_shard, rows, w->lm_head, m)); /* [m, vocab / tp] */
    if (sh->tp == 1) return NL_OK;

    /* every rank receives [tp, m, vocab / tp] and interleaves it into [m,
     * vocab], the same bytes on each (each samples for itself: the samples
     * of step N are on every device when step N + 1 takes them);
     * gather_rows only copies, so fp32 rows travel as act-dtype elements */
    size_t vs = (size_t)sh->vocab_shard;
    NL_TRY(mark(be, s, QWEN_OP_LOGITS_GATHER));
    if (!runs(s, QWEN_OP_LOGITS_GATHER)) return NL_OK;
    NL_TRY(comm->ops->all_gather(comm, s->logits_shard, s->logits_gathered, (size_t)m * vs, NL_DTYPE_F32));
    int32_t row_elems = (int32_t)(vs * sizeof(float) / s->act_size);
    return op->gather_rows(be, s->logits, s->logits_gathered, in->gather_perm, m * sh->tp, row_elems);
}
