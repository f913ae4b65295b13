/* model_tensors.c — the tensor list of a Qwen3 / Qwen2 checkpoint.
 *
 * Names and shapes are exactly those of Hugging Face transformers, so that a
 * hub checkpoint loads and a generated one is loadable by transformers.  The
 * loader checks a checkpoint against this list; the demo-model generator
 * writes this list.
 */
#include "common/model_tensors.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names shown per category in a check failure; the rest are counted. */
#define CHECK_SHOW 6

static void add(model_tensor_spec *s, size_t *n, model_tensor_kind kind, int64_t d0, int64_t d1,
                const char *fmt, int layer)
{
    model_tensor_spec *t = &s[(*n)++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->kind = kind;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->n_dims = d1 ? 2 : 1;
}

nl_status model_tensors_list(const nl_model_config *cfg, model_tensor_spec **specs, size_t *n)
{
    *specs = NULL;
    *n = 0;
    const int64_t vocab = cfg->vocab_size, hidden = cfg->hidden_size;
    const int64_t inter = cfg->intermediate_size, hd = cfg->head_dim;
    const int64_t q_dim = (int64_t)cfg->num_attention_heads * hd;
    const int64_t kv_dim = (int64_t)cfg->num_key_value_heads * hd;
    const bool qk_norm = cfg->arch == NL_ARCH_QWEN3, bias = cfg->attention_bias;
    if (cfg->num_hidden_layers <= 0 || vocab <= 0 || hidden <= 0 || inter <= 0 || hd <= 0 ||
        q_dim <= 0 || kv_dim <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "model_tensors_list: config has a non-positive size");

    const size_t per_layer = 9 + (bias ? 3 : 0) + (qk_norm ? 2 : 0);
    const size_t cap = 3 + per_layer * (size_t)cfg->num_hidden_layers;
    model_tensor_spec *s = calloc(cap, sizeof *s);
    if (!s) return nl_error(NL_ERR_NOMEM, "model_tensors_list: out of memory for %zu specs", cap);

    size_t k = 0;
    add(s, &k, MODEL_TENSOR_MATRIX, vocab, hidden, "model.embed_tokens.weight", 0);
    for (int i = 0; i < cfg->num_hidden_layers; i++) {
        add(s, &k, MODEL_TENSOR_NORM, hidden, 0, "model.layers.%d.input_layernorm.weight", i);
        add(s, &k, MODEL_TENSOR_MATRIX, q_dim, hidden, "model.layers.%d.self_attn.q_proj.weight", i);
        if (bias) add(s, &k, MODEL_TENSOR_BIAS, q_dim, 0, "model.layers.%d.self_attn.q_proj.bias", i);
        add(s, &k, MODEL_TENSOR_MATRIX, kv_dim, hidden, "model.layers.%d.self_attn.k_proj.weight", i);
        if (bias) add(s, &k, MODEL_TENSOR_BIAS, kv_dim, 0, "model.layers.%d.self_attn.k_proj.bias", i);
        add(s, &k, MODEL_TENSOR_MATRIX, kv_dim, hidden, "model.layers.%d.self_attn.v_proj.weight", i);
        if (bias) add(s, &k, MODEL_TENSOR_BIAS, kv_dim, 0, "model.layers.%d.self_attn.v_proj.bias", i);
        add(s, &k, MODEL_TENSOR_MATRIX, hidden, q_dim, "model.layers.%d.self_attn.o_proj.weight", i);
        if (qk_norm) {
            add(s, &k, MODEL_TENSOR_NORM, hd, 0, "model.layers.%d.self_attn.q_norm.weight", i);
            add(s, &k, MODEL_TENSOR_NORM, hd, 0, "model.layers.%d.self_attn.k_norm.weight", i);
        }
        add(s, &k, MODEL_TENSOR_NORM, hidden, 0, "model.layers.%d.post_attention_layernorm.weight", i);
        add(s, &k, MODEL_TENSOR_MATRIX, inter, hidden, "model.layers.%d.mlp.gate_proj.weight", i);
        add(s, &k, MODEL_TENSOR_MATRIX, inter, hidden, "model.layers.%d.mlp.up_proj.weight", i);
        add(s, &k, MODEL_TENSOR_MATRIX, hidden, inter, "model.layers.%d.mlp.down_proj.weight", i);
    }
    add(s, &k, MODEL_TENSOR_NORM, hidden, 0, "model.norm.weight", 0);
    if (!cfg->tie_word_embeddings)
        add(s, &k, MODEL_TENSOR_MATRIX, vocab, hidden, "lm_head.weight", 0);
    *specs = s;
    *n = k;
    return NL_OK;
}

static int cmp_spec_name(const void *a, const void *b)
{
    return strcmp(((const model_tensor_spec *)a)->name, ((const model_tensor_spec *)b)->name);
}

static bool shape_matches(const model_tensor_spec *s, const st_tensor *t)
{
    if (t->n_dims != s->n_dims) return false;
    for (int d = 0; d < s->n_dims; d++)
        if (t->shape[d] != s->shape[d]) return false;
    return true;
}

static void fmt_shape(char *buf, size_t cap, int n_dims, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Appends a name to one of the report's lists, or counts it once the list
 * is full. */
typedef struct name_list {
    char text[320];
    size_t shown, total;
} name_list;

static void list_add(name_list *l, const char *item)
{
    l->total++;
    if (l->shown >= CHECK_SHOW) return;
    size_t o = strlen(l->text);
    snprintf(l->text + o, sizeof l->text - o, "%s%s", l->shown ? ", " : "", item);
    l->shown++;
}

static void list_format(char *buf, size_t cap, const char *what, const name_list *l)
{
    size_t o = strlen(buf);
    if (!l->total || o + 1 >= cap) return;
    snprintf(buf + o, cap - o, "%s%zu %s (%s%s)", o ? "; " : "", l->total, what, l->text,
             l->total > l->shown ? ", ..." : "");
}

/* Left over by some older exports; a buffer recomputed at load, not a
 * weight, so ignoring it loses nothing. */
static bool ignorable(const char *name)
{
    const char *suffix = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

nl_status model_tensors_check(const nl_model_config *cfg, const st_model *m)
{
    model_tensor_spec *specs;
    size_t n_specs;
    NL_TRY(model_tensors_list(cfg, &specs, &n_specs));

    name_list missing = {0}, unexpected = {0}, shapes = {0}, dtypes = {0};
    for (size_t i = 0; i < n_specs; i++) {
        const st_tensor *t = st_find(m, specs[i].name);
        if (!t) {
            list_add(&missing, specs[i].name);
            continue;
        }
        if (!shape_matches(&specs[i], t)) {
            char want[64], got[96], item[256];
            fmt_shape(want, sizeof want, specs[i].n_dims, specs[i].shape);
            fmt_shape(got, sizeof got, t->n_dims, t->shape);
            snprintf(item, sizeof item, "%s expected %s got %s", t->name, want, got);
            list_add(&shapes, item);
        }
        if (t->dtype != NL_DTYPE_BF16 && t->dtype != NL_DTYPE_F16 && t->dtype != NL_DTYPE_F32) {
            char item[160];
            snprintf(item, sizeof item, "%s is %s", t->name, nl_dtype_name(t->dtype));
            list_add(&dtypes, item);
        }
    }

    qsort(specs, n_specs, sizeof *specs, cmp_spec_name);
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_get(m, i);
        model_tensor_spec key;
        snprintf(key.name, sizeof key.name, "%s", t->name);
        if (strlen(t->name) < sizeof key.name &&
            bsearch(&key, specs, n_specs, sizeof *specs, cmp_spec_name))
            continue;
        if (ignorable(t->name)) continue;
        /* A tied checkpoint may still carry the head; it is the embedding's
         * copy and goes unused, but a wrong shape means a wrong config. */
        if (cfg->tie_word_embeddings && !strcmp(t->name, "lm_head.weight")) {
            int64_t want[2] = {cfg->vocab_size, cfg->hidden_size};
            if (t->n_dims != 2 || t->shape[0] != want[0] || t->shape[1] != want[1]) {
                char w[64], g[96], item[256];
                fmt_shape(w, sizeof w, 2, want);
                fmt_shape(g, sizeof g, t->n_dims, t->shape);
                snprintf(item, sizeof item, "%s expected %s got %s", t->name, w, g);
                list_add(&shapes, item);
            }
            continue;
        }
        list_add(&unexpected, t->name);
    }
    free(specs);

    if (!missing.total && !unexpected.total && !shapes.total && !dtypes.total) return NL_OK;
    char msg[1000] = "";
    list_format(msg, sizeof msg, "missing", &missing);
    list_format(msg, sizeof msg, "unexpected", &unexpected);
    list_format(msg, sizeof msg, "with wrong shape", &shapes);
    list_format(msg, sizeof msg, "with unsupported dtype", &dtypes);
    const char *file = st_count(m) ? st_get(m, 0)->file : "checkpoint";
    return nl_error(NL_ERR_FORMAT, "%s: tensors do not match config: %s", file, msg);
}
