/* model_rope.h — the rotary embedding's inverse frequencies of a config.
 *
 * The rope ops of every backend rotate pair i of a head by position *
 * inv_freq[i]; how those frequencies follow from rope_theta and
 * rope_scaling is decided here, once, on the host, so that a new rope type
 * is a new formula in one place and never a new kernel.
 */
#ifndef NL_COMMON_MODEL_ROPE_H
#define NL_COMMON_MODEL_ROPE_H

#include "common/model_config.h"

/* Fills inv_freq[cfg->head_dim / 2]: theta^(-2i / head_dim), rescaled as
 * cfg->rope_scaling says (NL_ROPE_LLAMA3: transformers'
 * _compute_llama3_parameters, in its float32 arithmetic). */
void model_rope_inv_freq(const nl_model_config *cfg, float *inv_freq);

#endif
