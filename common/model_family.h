/* model_family.h — a model family's checkpoint layout as one tensor table,
 * and the registry that maps config.json's architectures to the family.
 *
 * A family (common/model_<family>.c) is data: the names Hugging Face gives
 * its tensors, each tensor's shape and tensor-parallel split as rules over
 * the config, the model slot it is loaded into (several tensors may be
 * fused into one slot, as q/k/v into qkv), and when it is present.  Three
 * users read that one table: the checkpoint check (model_tensors.c), the
 * weight loader (worker/weights.c) and the model writer (mkmodel, through
 * model_tensors_list).  The forward pass reads the slots, never the names.
 *
 * Adding a family: a new common/model_<family>.c defining its table and
 * model_family record, an nl_arch value, and one line in the registry
 * (model_family.c).  The layout and a few flags are all a family owns: the
 * dense decoder forward pass (worker/qwen.c) is shared and runs whatever
 * slots the table filled (an absent bias or norm is skipped), and config
 * fields (Llama 3's rope scaling) are parsed in model_config.c for every
 * family.
 */
#ifndef NL_COMMON_MODEL_FAMILY_H
#define NL_COMMON_MODEL_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/model_config.h"

/* A dimension of a tensor, as a product of config fields. */
typedef enum model_dim {
    MODEL_DIM_NONE = 0, /* absent: the tensor is 1-D          */
    MODEL_DIM_HIDDEN,   /* hidden_size                        */
    MODEL_DIM_VOCAB,    /* vocab_size                         */
    MODEL_DIM_INTER,    /* intermediate_size                  */
    MODEL_DIM_Q,        /* num_attention_heads * head_dim     */
    MODEL_DIM_KV,       /* num_key_value_heads * head_dim     */
    MODEL_DIM_HEAD,     /* head_dim                           */
} model_dim;

/* How rank r of tp holds a tensor.  Which part of a split dimension a rank
 * holds follows from the dimension: query heads, kv heads (replicated when
 * kv_heads < tp), intermediate columns or vocabulary rows. */
typedef enum model_shard {
    MODEL_SHARD_REPLICATED = 0, /* every rank holds all of it                 */
    MODEL_SHARD_COLUMN,         /* split along dim 0 (output rows)            */
    MODEL_SHARD_ROW,            /* split along dim 1 (input columns); the
                                   forward pass all-reduces the output       */
    MODEL_SHARD_VOCAB,          /* split along dim 0 by vocabulary rows       */
} model_shard;

/* Where a tensor goes in the loaded model.  A slot filled from several
 * tensors stacks their (shard) rows in part order. */
typedef enum model_slot {
    MODEL_SLOT_EMBED = 0,   /* model-wide slots                           */
    MODEL_SLOT_FINAL_NORM,
    MODEL_SLOT_LM_HEAD,
    MODEL_SLOT_INPUT_NORM,  /* per-layer slots from here on               */
    MODEL_SLOT_QKV,
    MODEL_SLOT_QKV_BIAS,
    MODEL_SLOT_Q_NORM,
    MODEL_SLOT_K_NORM,
    MODEL_SLOT_O_PROJ,
    MODEL_SLOT_POST_NORM,
    MODEL_SLOT_GATE_UP,
    MODEL_SLOT_DOWN,
    MODEL_SLOT_O_BIAS,      /* row-parallel biases: added once, by rank 0 */
    MODEL_SLOT_GATE_UP_BIAS,
    MODEL_SLOT_DOWN_BIAS,
    MODEL_SLOT_COUNT,
} model_slot;

#define MODEL_SLOT_FIRST_LAYER MODEL_SLOT_INPUT_NORM

typedef enum model_tensor_kind {
    MODEL_TENSOR_MATRIX = 0, /* random normal(0, 0.02) in the demo model */
    MODEL_TENSOR_NORM,       /* near 1                                   */
    MODEL_TENSOR_BIAS,       /* small random                              */
} model_tensor_kind;

/* When a table entry is part of a checkpoint. */
typedef enum model_presence {
    MODEL_PRESENT_ALWAYS = 0,
    MODEL_PRESENT_IF_BIAS,    /* q/k/v biases: config's attention_bias      */
    MODEL_PRESENT_IF_O_BIAS,  /* o_proj bias: attention_bias in a family
                                 whose o_proj follows it (o_proj_bias)     */
    MODEL_PRESENT_IF_MLP_BIAS,/* config's mlp_bias                          */
    MODEL_PRESENT_IF_QK_NORM, /* the family normalises q and k heads        */
    MODEL_PRESENT_IF_UNTIED,  /* not tie_word_embeddings; when tied the slot
                                 is the tied_to slot, and a checkpoint may
                                 still carry the tensor (unused, checked)   */
} model_presence;

typedef struct model_tensor_def {
    const char *name;      /* per-layer names hold one %d: the layer     */
    model_dim dims[2];     /* [dims[0]] or [dims[0], dims[1]]            */
    model_shard shard;
    model_slot slot;
    int part;              /* order within a fused slot, from 0          */
    model_tensor_kind kind;
    model_presence presence;
    model_slot tied_to;    /* with MODEL_PRESENT_IF_UNTIED               */
} model_tensor_def;

typedef struct model_family {
    nl_arch arch;
    const char *architecture; /* config.json architectures[0]            */
    const char *model_type;   /* config.json model_type                  */
    bool qk_norm;             /* per-head RMSNorm of q and k before RoPE   */
    bool bias_always;         /* q/k/v biases whatever attention_bias says */
    bool o_proj_bias;         /* attention_bias also gives o_proj a bias   */
    /* In checkpoint order; the per-layer entries are contiguous. */
    const model_tensor_def *tensors;
    size_t n_tensors;
} model_family;

/* The family of an architecture name, a model_type, or a parsed config's
 * arch; NULL when none matches. */
const model_family *model_family_by_architecture(const char *architecture);
const model_family *model_family_by_model_type(const char *model_type);
const model_family *model_family_of(const nl_model_config *cfg);

/* Registered family number i, NULL past the last. */
const model_family *model_family_get(size_t i);

/* The registered names joined by ", " for messages ("Qwen3ForCausalLM,
 * Qwen2ForCausalLM"; "qwen3, qwen2" with model_types). */
void model_family_names(bool model_types, char *buf, size_t cap);

static inline bool model_tensor_per_layer(const model_tensor_def *d)
{
    return d->slot >= MODEL_SLOT_FIRST_LAYER;
}

/* Whether a checkpoint of family f with config cfg holds the tensor. */
bool model_tensor_present(const model_family *f, const model_tensor_def *d,
                          const nl_model_config *cfg);

/* The size of a dimension under cfg (0 for MODEL_DIM_NONE). */
int64_t model_dim_size(model_dim dim, const nl_model_config *cfg);

/* The tensor's checkpoint name for a layer (ignored for model-wide ones). */
void model_tensor_name(const model_tensor_def *d, int layer, char *buf, size_t cap);

/* One row of a family's tensor table: name, [dim0, dim1], shard, slot and
 * part, kind, presence; a tied LM head is the embedding. */
#define MODEL_TENSOR(name, d0, d1, shard, slot, part, kind, presence)                          \
    {name, {MODEL_DIM_##d0, MODEL_DIM_##d1}, MODEL_SHARD_##shard, MODEL_SLOT_##slot, part,      \
     MODEL_TENSOR_##kind, MODEL_PRESENT_##presence, MODEL_SLOT_EMBED}

#endif
