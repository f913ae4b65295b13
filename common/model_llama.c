/* model_llama.c — the Llama family (LlamaForCausalLM: Llama 3, 3.1, 3.2,
 * 3.3 and the earlier Llama 2 shapes): its tensor table and record.
 *
 * Llama is the plain dense decoder the Qwen families extend: no per-head
 * q/k norm, and biases only where the config asks: attention_bias gives
 * q, k, v and o_proj a bias, mlp_bias gives gate, up and down one.  Names,
 * shapes and order are those of transformers' LlamaForCausalLM.  Sharding
 * is the Qwen tables' (vLLM's): fused column-parallel q/k/v and gate/up,
 * row-parallel o_proj and down_proj whose biases every rank holds and rank
 * 0 alone adds before the all-reduce, vocabulary-split embedding and head.
 * Rope scaling (llama3) is a config matter: common/model_rope.c.
 */
#include "common/model_family.h"

#define LAYER "model.layers.%d."

#define T MODEL_TENSOR

static const model_tensor_def llama_tensors[] = {
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
    T(LAYER "post_attention_layernorm.weight", HIDDEN, NONE, REPLICATED, POST_NORM, 0, NORM, ALWAYS),
    T(LAYER "mlp.gate_proj.weight", INTER, HIDDEN, COLUMN, GATE_UP, 0, MATRIX, ALWAYS),
    T(LAYER "mlp.gate_proj.bias", INTER, NONE, COLUMN, GATE_UP_BIAS, 0, BIAS, IF_MLP_BIAS),
    T(LAYER "mlp.up_proj.weight", INTER, HIDDEN, COLUMN, GATE_UP, 1, MATRIX, ALWAYS),
    T(LAYER "mlp.up_proj.bias", INTER, NONE, COLUMN, GATE_UP_BIAS, 1, BIAS, IF_MLP_BIAS),
    T(LAYER "mlp.down_proj.weight", HIDDEN, INTER, ROW, DOWN, 0, MATRIX, ALWAYS),
    T(LAYER "mlp.down_proj.bias", HIDDEN, NONE, REPLICATED, DOWN_BIAS, 0, BIAS, IF_MLP_BIAS),
    T("model.norm.weight", HIDDEN, NONE, REPLICATED, FINAL_NORM, 0, NORM, ALWAYS),
    T("lm_head.weight", VOCAB, HIDDEN, VOCAB, LM_HEAD, 0, MATRIX, IF_UNTIED),
};

const model_family model_family_llama = {
    .arch = NL_ARCH_LLAMA,
    .architecture = "LlamaForCausalLM",
    .model_type = "llama",
    .qk_norm = false,
    .bias_always = false,
    .o_proj_bias = true,
    .tensors = llama_tensors,
    .n_tensors = sizeof llama_tensors / sizeof llama_tensors[0],
};
