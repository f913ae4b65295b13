/* weights.c — loads one tensor-parallel shard of the checkpoint.
 *
 * Only the shard's bytes are read from the mmapped files: row slices are a
 * pointer offset, and column slices of row-parallel layers use
 * weight_fill_rows' stride and first column, so the pages of other ranks'
 * columns are never touched by a row.  Fused matrices (qkv, gate_up) are
 * assembled by filling row ranges of one weight from several tensors.
 */
#include "worker/weights.h"

#include <stdio.h>
#include <stdlib.h>

nl_status weights_plan_shard(const nl_model_config *cfg, int32_t rank, int32_t tp, qwen_shard *out)
{
    int32_t heads = cfg->num_attention_heads, kv = cfg->num_key_value_heads;
    if (tp < 1 || rank < 0 || rank >= tp)
        return nl_error(NL_ERR_INVALID_ARG, "tensor parallel: rank %d of tp %d", rank, tp);
    if (heads % tp)
        return nl_error(NL_ERR_UNSUPPORTED, "tensor parallel: tp %d does not divide %d attention heads",
                        tp, heads);
    if (tp <= kv ? kv % tp : tp % kv)
        return nl_error(NL_ERR_UNSUPPORTED,
                        "tensor parallel: tp %d and %d kv heads: one must divide the other", tp, kv);
    if (cfg->intermediate_size % tp)
        return nl_error(NL_ERR_UNSUPPORTED, "tensor parallel: tp %d does not divide intermediate_size %d",
                        tp, cfg->intermediate_size);
    if (cfg->vocab_size % tp)
        return nl_error(NL_ERR_UNSUPPORTED, "tensor parallel: tp %d does not divide vocab_size %d",
                        tp, cfg->vocab_size);
    qwen_shard s = {.rank = rank, .tp = tp, .hd = cfg->head_dim};
    s.hq = heads / tp;
    s.q_head0 = rank * s.hq;
    s.hk = tp <= kv ? kv / tp : 1;
    s.kv_head0 = tp <= kv ? rank * s.hk : rank / (tp / kv);
    s.inter = cfg->intermediate_size / tp;
    s.vocab_shard = cfg->vocab_size / tp;
    s.vocab_start = rank * s.vocab_shard;
    *out = s;
    return NL_OK;
}

typedef struct loader {
    nl_backend *be;
    const st_model *m;
    char name[128];
} loader;

static const st_tensor *find(loader *ld, const char *fmt, int layer)
{
    snprintf(ld->name, sizeof ld->name, fmt, layer);
    return st_find(ld->m, ld->name);
}

static nl_status create(loader *ld, int64_t rows, int64_t cols, nl_weight **out)
{
    nl_status st = ld->be->ops->weight_create(ld->be, rows, cols, out);
    if (st != NL_OK) return nl_error_prefix(st, "loading %s: ", ld->name);
    return NL_OK;
}

/* Fills w's rows [row0, row0 + n_rows) from the tensor's rows [src_row0, ...)
 * and columns [col0, col0 + w.cols).  A 1-D tensor counts as one column. */
static nl_status fill(loader *ld, nl_weight *w, int64_t row0, int64_t n_rows, const char *fmt,
                      int layer, int64_t src_row0, int64_t col0)
{
    const st_tensor *t = find(ld, fmt, layer);
    if (!t) return nl_error(NL_ERR_FORMAT, "checkpoint: tensor %s is missing", ld->name);
    int64_t cols = t->n_dims >= 2 ? t->shape[1] : 1, rows = t->n_dims >= 1 ? t->shape[0] : 1;
    if (src_row0 + n_rows > rows)
        return nl_error(NL_ERR_FORMAT, "checkpoint: tensor %s has %lld rows, shard needs %lld",
                        ld->name, (long long)rows, (long long)(src_row0 + n_rows));
    const char *src = (const char *)t->data + (size_t)(src_row0 * cols) * nl_dtype_size(t->dtype);
    nl_status st = ld->be->ops->weight_fill_rows(ld->be, w, row0, n_rows, src, t->dtype, cols, col0);
    if (st != NL_OK) return nl_error_prefix(st, "loading %s: ", ld->name);
    return NL_OK;
}

/* A whole 1-D tensor (norm weight) as a [1, n] weight. */
static nl_status load_vector(loader *ld, int64_t n, const char *fmt, int layer, nl_weight **out)
{
    const st_tensor *t = find(ld, fmt, layer);
    if (!t) return nl_error(NL_ERR_FORMAT, "checkpoint: tensor %s is missing", ld->name);
    NL_TRY(create(ld, 1, n, out));
    nl_status st = ld->be->ops->weight_fill_rows(ld->be, *out, 0, 1, t->data, t->dtype, n, 0);
    if (st != NL_OK) return nl_error_prefix(st, "loading %s: ", ld->name);
    return NL_OK;
}

static nl_status load_layer(loader *ld, const nl_model_config *cfg, const qwen_shard *s, int i,
                            qwen_layer *L)
{
    int64_t hidden = cfg->hidden_size, hd = s->hd;
    int64_t q_rows = s->hq * hd, kv_rows = s->hk * hd;
    int64_t q0 = s->q_head0 * hd, kv0 = s->kv_head0 * hd;

    NL_TRY(load_vector(ld, hidden, "model.layers.%d.input_layernorm.weight", i, &L->input_norm));
    NL_TRY(load_vector(ld, hidden, "model.layers.%d.post_attention_layernorm.weight", i, &L->post_norm));
    if (cfg->arch == NL_ARCH_QWEN3) {
        NL_TRY(load_vector(ld, hd, "model.layers.%d.self_attn.q_norm.weight", i, &L->q_norm));
        NL_TRY(load_vector(ld, hd, "model.layers.%d.self_attn.k_norm.weight", i, &L->k_norm));
    }

    NL_TRY(create(ld, q_rows + 2 * kv_rows, hidden, &L->qkv));
    NL_TRY(fill(ld, L->qkv, 0, q_rows, "model.layers.%d.self_attn.q_proj.weight", i, q0, 0));
    NL_TRY(fill(ld, L->qkv, q_rows, kv_rows, "model.layers.%d.self_attn.k_proj.weight", i, kv0, 0));
    NL_TRY(fill(ld, L->qkv, q_rows + kv_rows, kv_rows, "model.layers.%d.self_attn.v_proj.weight", i, kv0, 0));
    if (cfg->attention_bias) {
        /* biases are [n, 1] so that a row range is an element range */
        NL_TRY(create(ld, q_rows + 2 * kv_rows, 1, &L->qkv_bias));
        NL_TRY(fill(ld, L->qkv_bias, 0, q_rows, "model.layers.%d.self_attn.q_proj.bias", i, q0, 0));
        NL_TRY(fill(ld, L->qkv_bias, q_rows, kv_rows, "model.layers.%d.self_attn.k_proj.bias", i, kv0, 0));
        NL_TRY(fill(ld, L->qkv_bias, q_rows + kv_rows, kv_rows, "model.layers.%d.self_attn.v_proj.bias",
                    i, kv0, 0));
    }
    NL_TRY(create(ld, hidden, q_rows, &L->o_proj));
    NL_TRY(fill(ld, L->o_proj, 0, hidden, "model.layers.%d.self_attn.o_proj.weight", i, 0, q0));

    int64_t inter = s->inter, i0 = (int64_t)s->rank * inter;
    NL_TRY(create(ld, 2 * inter, hidden, &L->gate_up));
    NL_TRY(fill(ld, L->gate_up, 0, inter, "model.layers.%d.mlp.gate_proj.weight", i, i0, 0));
    NL_TRY(fill(ld, L->gate_up, inter, inter, "model.layers.%d.mlp.up_proj.weight", i, i0, 0));
    NL_TRY(create(ld, hidden, inter, &L->down));
    NL_TRY(fill(ld, L->down, 0, hidden, "model.layers.%d.mlp.down_proj.weight", i, 0, i0));
    return NL_OK;
}

/* This rank's rows of a [vocab, hidden] matrix. */
static nl_status load_vocab_rows(loader *ld, const nl_model_config *cfg, const qwen_shard *s,
                                 const char *name, nl_weight **out)
{
    int64_t start = s->vocab_start, end = start + s->vocab_shard;
    if (end > cfg->vocab_size) end = cfg->vocab_size;
    find(ld, name, 0);
    NL_TRY(create(ld, s->vocab_shard, cfg->hidden_size, out));
    if (end > start) NL_TRY(fill(ld, *out, 0, end - start, name, 0, start, 0));
    return NL_OK;
}

nl_status weights_load(nl_backend *be, const nl_model_config *cfg, const st_model *m, int32_t rank,
                       int32_t tp, qwen_weights **out)
{
    qwen_weights *w = calloc(1, sizeof *w);
    if (!w) return nl_error(NL_ERR_NOMEM, "weights: no memory");
    w->cfg = *cfg;
    loader ld = {.be = be, .m = m};
    nl_status st = weights_plan_shard(cfg, rank, tp, &w->shard);
    if (st == NL_OK) {
        w->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *w->layers);
        if (!w->layers) st = nl_error(NL_ERR_NOMEM, "weights: no memory for %d layers", cfg->num_hidden_layers);
    }
    if (st == NL_OK) st = load_vocab_rows(&ld, cfg, &w->shard, "model.embed_tokens.weight", &w->embed);
    for (int i = 0; st == NL_OK && i < cfg->num_hidden_layers; i++)
        st = load_layer(&ld, cfg, &w->shard, i, &w->layers[i]);
    if (st == NL_OK) st = load_vector(&ld, cfg->hidden_size, "model.norm.weight", 0, &w->final_norm);
    if (st == NL_OK) {
        if (cfg->tie_word_embeddings) w->lm_head = w->embed;
        else st = load_vocab_rows(&ld, cfg, &w->shard, "lm_head.weight", &w->lm_head);
    }
    if (st != NL_OK) {
        weights_destroy(be, w);
        return st;
    }
    *out = w;
    return NL_OK;
}

void weights_destroy(nl_backend *be, qwen_weights *w)
{
    if (!w) return;
    for (int i = 0; w->layers && i < w->cfg.num_hidden_layers; i++) {
        qwen_layer *L = &w->layers[i];
        nl_weight *all[] = {L->input_norm, L->qkv,      L->qkv_bias, L->q_norm, L->k_norm,
                            L->o_proj,     L->post_norm, L->gate_up, L->down};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            if (all[k]) be->ops->weight_destroy(be, all[k]);
    }
    if (w->lm_head && w->lm_head != w->embed) be->ops->weight_destroy(be, w->lm_head);
    if (w->embed) be->ops->weight_destroy(be, w->embed);
    if (w->final_norm) be->ops->weight_destroy(be, w->final_norm);
    free(w->layers);
    free(w);
}
