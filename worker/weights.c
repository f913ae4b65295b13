/* weights.c — loads one tensor-parallel shard of the checkpoint.
 *
 * Driven by the family's tensor table (common/model_<family>.c): each row
 * says which slot of qwen_weights a tensor fills, which part of a fused
 * slot it is, and which dimension tp splits.  This file knows no tensor
 * name.
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

#include "common/model_rope.h"
#include "common/model_tensors.h"

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

/* The field of w a slot names; layer is ignored for model-wide slots. */
static nl_weight **slot_field(qwen_weights *w, int layer, model_slot slot)
{
    qwen_layer *L = slot >= MODEL_SLOT_FIRST_LAYER ? &w->layers[layer] : NULL;
    switch (slot) {
    case MODEL_SLOT_EMBED: return &w->embed;
    case MODEL_SLOT_FINAL_NORM: return &w->final_norm;
    case MODEL_SLOT_LM_HEAD: return &w->lm_head;
    case MODEL_SLOT_INPUT_NORM: return &L->input_norm;
    case MODEL_SLOT_QKV: return &L->qkv;
    case MODEL_SLOT_QKV_BIAS: return &L->qkv_bias;
    case MODEL_SLOT_Q_NORM: return &L->q_norm;
    case MODEL_SLOT_K_NORM: return &L->k_norm;
    case MODEL_SLOT_O_PROJ: return &L->o_proj;
    case MODEL_SLOT_POST_NORM: return &L->post_norm;
    case MODEL_SLOT_GATE_UP: return &L->gate_up;
    case MODEL_SLOT_DOWN: return &L->down;
    case MODEL_SLOT_O_BIAS: return &L->o_bias;
    case MODEL_SLOT_GATE_UP_BIAS: return &L->gate_up_bias;
    case MODEL_SLOT_DOWN_BIAS: return &L->down_bias;
    case MODEL_SLOT_COUNT: break;
    }
    return NULL;
}

/* This rank's part [*start, *start + *count) of a dimension tp splits:
 * its query heads, its kv heads (several ranks share one when kv < tp),
 * its intermediate columns or its vocabulary rows. */
static void split_range(model_dim dim, const nl_model_config *cfg, const qwen_shard *s,
                        int64_t *start, int64_t *count)
{
    switch (dim) {
    case MODEL_DIM_Q: *start = (int64_t)s->q_head0 * s->hd, *count = (int64_t)s->hq * s->hd; return;
    case MODEL_DIM_KV: *start = (int64_t)s->kv_head0 * s->hd, *count = (int64_t)s->hk * s->hd; return;
    case MODEL_DIM_INTER: *start = (int64_t)s->rank * s->inter, *count = s->inter; return;
    case MODEL_DIM_VOCAB: *start = s->vocab_start, *count = s->vocab_shard; return;
    default: *start = 0, *count = model_dim_size(dim, cfg); return;
    }
}

/* Where one tensor's shard goes: its rows [src_row0, + n_rows) and columns
 * [col0, + cols) of rows src_stride elements long fill n_rows rows of a
 * weight cols wide.  A split 1-D tensor (a bias) is a column, so that a row
 * range is an element range; a replicated one (a norm) is one row. */
typedef struct part_plan {
    int64_t n_rows, cols, src_row0, col0, src_stride;
} part_plan;

static part_plan plan_part(const model_tensor_def *d, const nl_model_config *cfg,
                           const qwen_shard *s)
{
    const int64_t d0 = model_dim_size(d->dims[0], cfg);
    part_plan p = {.n_rows = d0, .cols = 1, .src_stride = 1};
    if (d->dims[1] != MODEL_DIM_NONE)
        p.cols = p.src_stride = model_dim_size(d->dims[1], cfg);
    else if (d->shard == MODEL_SHARD_REPLICATED)
        return (part_plan){.n_rows = 1, .cols = d0, .src_stride = d0};
    if (d->shard == MODEL_SHARD_COLUMN || d->shard == MODEL_SHARD_VOCAB)
        split_range(d->dims[0], cfg, s, &p.src_row0, &p.n_rows);
    else if (d->shard == MODEL_SHARD_ROW)
        split_range(d->dims[1], cfg, s, &p.col0, &p.cols);
    return p;
}

/* The rotary frequencies, computed once on the host and uploaded: the rope
 * op of every backend reads this table, whatever the rope type. */
static nl_status upload_inv_freq(nl_backend *be, qwen_weights *w)
{
    size_t half = (size_t)w->cfg.head_dim / 2, bytes = half * sizeof(float);
    float *host = malloc(bytes);
    if (!host) return nl_error(NL_ERR_NOMEM, "weights: no memory for the rotary table");
    model_rope_inv_freq(&w->cfg, host);
    nl_status st = be->ops->alloc(be, bytes, (void **)&w->rope_inv_freq);
    if (st == NL_OK) st = be->ops->upload(be, w->rope_inv_freq, host, bytes);
    free(host);
    return st == NL_OK ? NL_OK : nl_error_prefix(st, "weights: rotary table: ");
}

/* Loads one tensor (spec) into its slot, creating the slot's weight, sized
 * for every part the table fuses into it, when the first part arrives. */
/* Where a checkpoint tensor goes: its field, the field's full shape (all
 * parts of a fused matrix) and the rows this part fills from row0 on. */
typedef struct part_target {
    nl_weight **slot;
    int64_t rows, row0;
    part_plan plan;
} part_target;

static part_target target_of(const model_family *f, const model_tensor_spec *spec, qwen_weights *w)
{
    const nl_model_config *cfg = &w->cfg;
    const model_tensor_def *d = spec->def;
    part_target t = {.slot = slot_field(w, spec->layer, d->slot),
                     .plan = plan_part(d, cfg, &w->shard)};
    for (size_t i = 0; i < f->n_tensors; i++) {
        const model_tensor_def *o = &f->tensors[i];
        if (o->slot != d->slot || !model_tensor_present(f, o, cfg)) continue;
        int64_t n = plan_part(o, cfg, &w->shard).n_rows;
        t.rows += n;
        if (o->part < d->part) t.row0 += n;
    }
    return t;
}

static nl_status fill_part(nl_backend *be, const model_family *f, const model_tensor_spec *spec,
                           const st_model *m, qwen_weights *w)
{
    const part_target tg = target_of(f, spec, w);
    const part_plan p = tg.plan;
    /* The check ran before, but bytes are read from the shape: verify it. */
    const st_tensor *t = st_find(m, spec->name);
    if (!t) return nl_error(NL_ERR_FORMAT, "checkpoint: tensor %s is missing", spec->name);
    if (t->n_dims != spec->n_dims || t->shape[0] != spec->shape[0] ||
        (spec->n_dims == 2 && t->shape[1] != spec->shape[1]))
        return nl_error(NL_ERR_FORMAT, "checkpoint: tensor %s does not have the shape the "
                        "config gives it", spec->name);
    if (p.n_rows == 0) return NL_OK;
    const char *src = (const char *)t->data +
                      (size_t)(p.src_row0 * p.src_stride) * nl_dtype_size(t->dtype);
    nl_status st = be->ops->weight_fill_rows(be, *tg.slot, tg.row0, p.n_rows, src, t->dtype,
                                             p.src_stride, p.col0);
    return st == NL_OK ? NL_OK : nl_error_prefix(st, "loading %s: ", spec->name);
}

nl_status weights_create(nl_backend *be, const nl_model_config *cfg, int32_t rank, int32_t tp,
                         qwen_weights **out)
{
    const model_family *f = model_family_of(cfg);
    if (!f) return nl_error(NL_ERR_INVALID_ARG, "weights: config has unknown arch %d", (int)cfg->arch);
    qwen_weights *w = calloc(1, sizeof *w);
    if (!w) return nl_error(NL_ERR_NOMEM, "weights: no memory");
    w->cfg = *cfg;
    model_tensor_spec *specs = NULL;
    size_t n_specs = 0;
    nl_status st = weights_plan_shard(cfg, rank, tp, &w->shard);
    if (st == NL_OK) {
        w->layers = calloc((size_t)cfg->num_hidden_layers, sizeof *w->layers);
        if (!w->layers) st = nl_error(NL_ERR_NOMEM, "weights: no memory for %d layers", cfg->num_hidden_layers);
    }
    if (st == NL_OK) st = upload_inv_freq(be, w);
    if (st == NL_OK) st = model_tensors_list(cfg, &specs, &n_specs);
    for (size_t i = 0; st == NL_OK && i < n_specs; i++) {
        const part_target t = target_of(f, &specs[i], w);
        if (*t.slot) continue; /* an earlier part of the fused matrix made it */
        st = be->ops->weight_create(be, t.rows, t.plan.cols, t.slot);
        if (st != NL_OK) st = nl_error_prefix(st, "creating %s: ", specs[i].name);
    }
    free(specs);
    /* A tied slot is the weight it is tied to, loaded once. */
    for (size_t i = 0; st == NL_OK && i < f->n_tensors; i++) {
        const model_tensor_def *d = &f->tensors[i];
        if (d->presence == MODEL_PRESENT_IF_UNTIED && !model_tensor_present(f, d, cfg))
            *slot_field(w, 0, d->slot) = *slot_field(w, 0, d->tied_to);
    }
    if (st != NL_OK) {
        weights_destroy(be, w);
        return st;
    }
    *out = w;
    return NL_OK;
}

nl_status weights_fill(nl_backend *be, const st_model *m, qwen_weights *w)
{
    const model_family *f = model_family_of(&w->cfg);
    if (!f) return nl_error(NL_ERR_INVALID_ARG, "weights: config has unknown arch %d", (int)w->cfg.arch);
    model_tensor_spec *specs = NULL;
    size_t n_specs = 0;
    nl_status st = model_tensors_list(&w->cfg, &specs, &n_specs);
    for (size_t i = 0; st == NL_OK && i < n_specs; i++) st = fill_part(be, f, &specs[i], m, w);
    free(specs);
    return st;
}

void weights_destroy(nl_backend *be, qwen_weights *w)
{
    if (!w) return;
    for (int i = 0; w->layers && i < w->cfg.num_hidden_layers; i++)
        for (int slot = MODEL_SLOT_FIRST_LAYER; slot < MODEL_SLOT_COUNT; slot++) {
            nl_weight **p = slot_field(w, i, (model_slot)slot);
            if (*p) be->ops->weight_destroy(be, *p);
        }
    /* model-wide slots; a tied one repeats an earlier slot's weight */
    for (int slot = 0; slot < MODEL_SLOT_FIRST_LAYER; slot++) {
        nl_weight *p = *slot_field(w, 0, (model_slot)slot);
        bool seen = false;
        for (int k = 0; k < slot; k++) seen |= *slot_field(w, 0, (model_slot)k) == p;
        if (p && !seen) be->ops->weight_destroy(be, p);
    }
    if (w->rope_inv_freq) be->ops->free(be, w->rope_inv_freq);
    free(w->layers);
    free(w);
}
