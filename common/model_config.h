/* model_config.h — the model's shape, read and validated from config.json.
 *
 * Accepts the architectures of the family registry (model_family.h; today
 * Qwen3ForCausalLM, Qwen2ForCausalLM and LlamaForCausalLM) in the hub's
 * form (rope_theta, rope_scaling, torch_dtype, head_dim absent for Qwen2)
 * and in the newer form (rope_parameters, dtype).  Every field the engine
 * uses is checked; an error names the file, the field and the value.  A
 * field that would change the model's numbers in a way the engine does not
 * implement (quantization, expert routing, sliding windows, rope types
 * other than default and llama3, ...) is refused by name, never ignored.
 */
#ifndef NL_COMMON_MODEL_CONFIG_H
#define NL_COMMON_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/limits.h"
#include "common/status.h"

/* One value per registered model family (model_family.c). */
typedef enum nl_arch {
    NL_ARCH_QWEN3 = 0, /* QK-norm, no q/k/v bias      */
    NL_ARCH_QWEN2,     /* q/k/v bias, no QK-norm      */
    NL_ARCH_LLAMA,     /* optional attention / MLP bias, no QK-norm */
} nl_arch;

/* How the rotary frequencies are derived from rope_theta (model_rope.h). */
typedef enum nl_rope_type {
    NL_ROPE_DEFAULT = 0, /* theta^(-2i/d)                                  */
    NL_ROPE_LLAMA3,      /* Llama 3.1's long-context rescaling of those    */
} nl_rope_type;

typedef struct nl_rope_scaling {
    nl_rope_type type;
    /* NL_ROPE_LLAMA3: wavelengths longer than original_max_position_embeddings
     * / low_freq_factor are stretched by factor, shorter than .. /
     * high_freq_factor kept, those between interpolated. */
    float factor;
    float low_freq_factor;
    float high_freq_factor;
    int32_t original_max_position_embeddings;
} nl_rope_scaling;

typedef struct nl_model_config {
    nl_arch arch;
    int32_t vocab_size;
    int32_t hidden_size;
    int32_t intermediate_size;
    int32_t num_hidden_layers;
    int32_t num_attention_heads;
    int32_t num_key_value_heads;
    int32_t head_dim;              /* hidden_size / heads when absent        */
    int32_t max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    nl_rope_scaling rope_scaling;  /* rope_scaling / rope_parameters         */
    bool tie_word_embeddings;
    bool attention_bias;           /* Qwen2: true                            */
    bool mlp_bias;                 /* gate/up/down biases (Llama's mlp_bias) */
    nl_dtype dtype;                /* torch_dtype / dtype                    */
    int32_t bos_token_id;          /* -1 when absent                         */
    int32_t n_eos;                 /* eos_token_id: an int or a list         */
    int32_t eos_token_ids[NL_MAX_EOS];
} nl_model_config;

/* Parses config.json text; source names it in messages. */
nl_status model_config_parse(const char *json_text, const char *source,
                             nl_model_config *out);
/* Reads DIR/config.json. */
nl_status model_config_load(const char *model_dir, nl_model_config *out);
/* Parses an "eos_token_id" value as config.json and generation_config.json
 * hold it: absent or null (no ids), an id, or a list of at most NL_MAX_EOS
 * ids, each in [0, id_limit).  source names the file in messages.  The one
 * reader of EOS ids: the model config and the tokenizer both use it. */
struct json_t;
nl_status model_config_parse_eos_ids(const struct json_t *value, const char *source,
                                     int64_t id_limit, int32_t ids[NL_MAX_EOS], int32_t *n_ids);
/* Writes a hub-style config.json for cfg into DIR. */
nl_status model_config_save(const nl_model_config *cfg, const char *model_dir);

#endif
