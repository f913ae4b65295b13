/* model_tensors.h — the tensors a Qwen3/Qwen2 checkpoint must hold.
 *
 * One list, derived from the config, serves the loader (check a checkpoint:
 * missing, unexpected and mis-shaped tensors reported by name) and the
 * demo-model generator (write exactly these tensors).
 */
#ifndef NL_COMMON_MODEL_TENSORS_H
#define NL_COMMON_MODEL_TENSORS_H

#include "common/model_config.h"
#include "common/safetensors.h"

typedef enum model_tensor_kind {
    MODEL_TENSOR_MATRIX = 0, /* random normal(0, 0.02) in the demo model */
    MODEL_TENSOR_NORM,       /* near 1                                   */
    MODEL_TENSOR_BIAS,       /* small random                              */
} model_tensor_kind;

typedef struct model_tensor_spec {
    char name[96];
    int32_t n_dims;
    int64_t shape[2];
    model_tensor_kind kind;
} model_tensor_spec;

/* Fills *specs (malloc'd, caller frees) with every tensor of cfg, in
 * checkpoint order: embed, per layer (input_layernorm, q/k/v/o_proj with
 * biases for Qwen2 and q_norm/k_norm for Qwen3, post_attention_layernorm,
 * gate/up/down_proj), norm, lm_head unless tied. */
nl_status model_tensors_list(const nl_model_config *cfg, model_tensor_spec **specs,
                             size_t *n);

/* Checks that m holds exactly the tensors of cfg with the right shapes and
 * a supported dtype; the error lists missing / unexpected names. */
nl_status model_tensors_check(const nl_model_config *cfg, const st_model *m);

#endif
