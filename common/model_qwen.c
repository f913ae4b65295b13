/* model_qwen.c — the Qwen3 and Qwen2 families: one tensor table, two
 * records.
 *
 * The names and shapes are those of Hugging Face transformers, in the order
 * its checkpoints store them, so a hub checkpoint loads and a written one
 * loads in transformers.  The families differ in two rules only: Qwen3
 * normalises each query and key head (q_norm, k_norm), and Qwen2 always has
 * q/k/v biases (never an o_proj bias), which Qwen3 has only when its config
 * sets attention_bias, and then on o_proj too.
 *
 * Sharding follows vLLM (nano-vllm's packed_modules_mapping is the same
 * fusion): q/k/v and gate/up are column-parallel and each fused into one
 * matrix, o_proj and down_proj are row-parallel, the embedding and LM head
 * are split by vocabulary rows, norms are replicated.
 */
#include "common/model_family.h"

#define LAYER "model.layers.%d."

#define T MODEL_TENSOR

static const model_tensor_def qwen_tensors[] = {
    T("model.embed_tokens.weight", VOCAB, HIDDEN, VOCAB, EMBED, 0, MATRIX, ALWAYS),
    T(LAYER "input_layernorm.weight", HIDDEN, NONE, REPLICATED, INPUT_NORM, 0, NORM, ALWAYS),
    T(LAYER "self_attn.q_proj.weight", Q, HIDDEN, COLUMN, QKV, 0, MATRIX, ALWAYS),
    T(LAYER "self_attn.q_proj.bias", Q, NONE, COLUMN, QKV_BIAS, 0, BIAS, IF_BIAS),
    T(LAYER "self_attn.k_proj.weight", KV, HIDDEN, COLUMN, QKV, 1, MATRIX, ALWAYS),
    T(LAYER "self_attn.k_proj.bias", KV, NONE, COLUMN, QKV_BIAS, 1, BIAS, IF_BIAS),
    T(LAYER "self_attn.v_proj.weight", KV, HIDDEN, COLUMN, QKV, 2, MATRIX, ALWAYS),
    T(LAYER "self_attn.v_proj.bias", KV, NONE, COLUMN, QKV_BIAS, 2, BIAS, IF_BIAS),
    T(LAYER "self_attn.o_proj.weight", HIDDEN, Q, ROW, O_PROJ, 0, MATRIX, ALWAYS),
    T(LAYER "self_attn.o_proj.bias", HIDDEN, NONE, REPLICATED, O_BIAS, 0, BIAS, IF_O_BIAS),
    T(LAYER "self_attn.q_norm.weight", HEAD, NONE, REPLICATED, Q_NORM, 0, NORM, IF_QK_NORM),
    T(LAYER "self_attn.k_norm.weight", HEAD, NONE, REPLICATED, K_NORM, 0, NORM, IF_QK_NORM),
    T(LAYER "post_attention_layernorm.weight", HIDDEN, NONE, REPLICATED, POST_NORM, 0, NORM, ALWAYS),
    T(LAYER "mlp.gate_proj.weight", INTER, HIDDEN, COLUMN, GATE_UP, 0, MATRIX, ALWAYS),
    T(LAYER "mlp.up_proj.weight", INTER, HIDDEN, COLUMN, GATE_UP, 1, MATRIX, ALWAYS),
    T(LAYER "mlp.down_proj.weight", HIDDEN, INTER, ROW, DOWN, 0, MATRIX, ALWAYS),
    T("model.norm.weight", HIDDEN, NONE, REPLICATED, FINAL_NORM, 0, NORM, ALWAYS),
    T("lm_head.weight", VOCAB, HIDDEN, VOCAB, LM_HEAD, 0, MATRIX, IF_UNTIED),
};

const model_family model_family_qwen3 = {
    .arch = NL_ARCH_QWEN3,
    .architecture = "Qwen3ForCausalLM",
    .model_type = "qwen3",
    .qk_norm = true,
    .bias_always = false,
    .o_proj_bias = true,
    .tensors = qwen_tensors,
    .n_tensors = sizeof qwen_tensors / sizeof qwen_tensors[0],
};

const model_family model_family_qwen2 = {
    .arch = NL_ARCH_QWEN2,
    .architecture = "Qwen2ForCausalLM",
    .model_type = "qwen2",
    .qk_norm = false,
    .bias_always = true,
    .o_proj_bias = false,
    .tensors = qwen_tensors,
    .n_tensors = sizeof qwen_tensors / sizeof qwen_tensors[0],
};
