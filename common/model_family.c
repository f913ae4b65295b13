/* model_family.c — the family registry and the rules every table shares.
 *
 * The registry is the one list of supported families; config.json parsing
 * finds a family here by architectures[0] or model_type, so a new family
 * needs one line below and nothing in the parser.  The tables themselves
 * live in one file per family.
 */
#include "common/model_family.h"

#include <stdio.h>
#include <string.h>

extern const model_family model_family_qwen3, model_family_qwen2, model_family_llama;

/* In the order messages list them. */
static const model_family *const registry[] = {
    &model_family_qwen3,
    &model_family_qwen2,
    &model_family_llama,
};

#define N_FAMILIES (sizeof registry / sizeof registry[0])

const model_family *model_family_get(size_t i)
{
    return i < N_FAMILIES ? registry[i] : NULL;
}

const model_family *model_family_by_architecture(const char *architecture)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(registry[i]->architecture, architecture)) return registry[i];
    return NULL;
}

const model_family *model_family_by_model_type(const char *model_type)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (!strcmp(registry[i]->model_type, model_type)) return registry[i];
    return NULL;
}

const model_family *model_family_of(const nl_model_config *cfg)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (registry[i]->arch == cfg->arch) return registry[i];
    return NULL;
}

void model_family_names(bool model_types, char *buf, size_t cap)
{
    size_t o = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "",
                              model_types ? registry[i]->model_type : registry[i]->architecture);
}

bool model_tensor_present(const model_family *f, const model_tensor_def *d,
                          const nl_model_config *cfg)
{
    switch (d->presence) {
    case MODEL_PRESENT_IF_BIAS: return cfg->attention_bias;
    case MODEL_PRESENT_IF_O_BIAS: return cfg->attention_bias && f->o_proj_bias;
    case MODEL_PRESENT_IF_MLP_BIAS: return cfg->mlp_bias;
    case MODEL_PRESENT_IF_QK_NORM: return f->qk_norm;
    case MODEL_PRESENT_IF_UNTIED: return !cfg->tie_word_embeddings;
    default: return true;
    }
}

int64_t model_dim_size(model_dim dim, const nl_model_config *cfg)
{
    switch (dim) {
    case MODEL_DIM_HIDDEN: return cfg->hidden_size;
    case MODEL_DIM_VOCAB: return cfg->vocab_size;
    case MODEL_DIM_INTER: return cfg->intermediate_size;
    case MODEL_DIM_Q: return (int64_t)cfg->num_attention_heads * cfg->head_dim;
    case MODEL_DIM_KV: return (int64_t)cfg->num_key_value_heads * cfg->head_dim;
    case MODEL_DIM_HEAD: return cfg->head_dim;
    default: return 0;
    }
}

void model_tensor_name(const model_tensor_def *d, int layer, char *buf, size_t cap)
{
    if (model_tensor_per_layer(d)) snprintf(buf, cap, d->name, layer);
    else snprintf(buf, cap, "%s", d->name);
}
