/* test_model_family.c — the family registry and the rules every tensor
 * table must keep for the loader, the check and the writer to agree.
 *
 * The loader assumes what these tests assert: the parts of a fused slot are
 * numbered 0..k-1 once each and share their columns and split, a 1-D
 * tensor is never row-split, per-layer rows are one contiguous run, and
 * every slot the forward pass needs is filled.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model_family.h"
#include "common/model_tensors.h"
#include "tests/check_run.h"

static nl_model_config cfg_of(const model_family *f, bool bias, bool tied, bool mlp_bias)
{
    nl_model_config c = {.arch = f->arch, .vocab_size = 1000, .hidden_size = 64,
                         .intermediate_size = 96, .num_hidden_layers = 2,
                         .num_attention_heads = 4, .num_key_value_heads = 2, .head_dim = 16,
                         .attention_bias = bias || f->bias_always, .tie_word_embeddings = tied,
                         .mlp_bias = mlp_bias};
    return c;
}

START_TEST(test_registry_lookups)
{
    ck_assert_ptr_nonnull(model_family_get(0));
    for (size_t i = 0; model_family_get(i); i++) {
        const model_family *f = model_family_get(i);
        ck_assert_ptr_eq(model_family_by_architecture(f->architecture), f);
        ck_assert_ptr_eq(model_family_by_model_type(f->model_type), f);
        nl_model_config c = {.arch = f->arch};
        ck_assert_ptr_eq(model_family_of(&c), f);
        for (size_t j = 0; j < i; j++) ck_assert_int_ne(model_family_get(j)->arch, f->arch);
    }
    ck_assert_str_eq(model_family_by_architecture("Qwen3ForCausalLM")->model_type, "qwen3");
    ck_assert(model_family_by_architecture("Qwen2ForCausalLM")->bias_always);
    ck_assert(!model_family_by_model_type("qwen2")->qk_norm);
    ck_assert(model_family_by_model_type("qwen3")->qk_norm);
    ck_assert_str_eq(model_family_by_architecture("LlamaForCausalLM")->model_type, "llama");
    ck_assert(!model_family_by_model_type("llama")->qk_norm);
    ck_assert(!model_family_by_model_type("llama")->bias_always);
    ck_assert_ptr_null(model_family_by_architecture("MistralForCausalLM"));
    ck_assert_ptr_null(model_family_by_model_type("Qwen3ForCausalLM"));
    nl_model_config bad = {.arch = (nl_arch)99};
    ck_assert_ptr_null(model_family_of(&bad));

    char names[128];
    model_family_names(false, names, sizeof names);
    ck_assert_str_eq(names, "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM");
    model_family_names(true, names, sizeof names);
    ck_assert_str_eq(names, "qwen3, qwen2, llama");
    model_family_names(true, names, 4); /* truncated, still a string */
    ck_assert_str_eq(names, "qwe");
}
END_TEST

/* Checks the table of every family under every bias / tie / MLP-bias
 * combination. */
START_TEST(test_tables_are_loadable)
{
    for (size_t fi = 0; model_family_get(fi); fi++) {
        const model_family *f = model_family_get(fi);
        size_t first_layer = f->n_tensors, last_layer = 0;
        for (size_t i = 0; i < f->n_tensors; i++) {
            const model_tensor_def *d = &f->tensors[i];
            bool per_layer = model_tensor_per_layer(d);
            ck_assert_msg(per_layer == (strstr(d->name, "%d") != NULL), "%s", d->name);
            if (per_layer) {
                if (first_layer == f->n_tensors) first_layer = i;
                last_layer = i;
            }
            if (d->dims[1] == MODEL_DIM_NONE)
                ck_assert_msg(d->shard != MODEL_SHARD_ROW, "%s: 1-D and row-split", d->name);
            if (d->presence == MODEL_PRESENT_IF_UNTIED)
                ck_assert_msg(!per_layer && d->tied_to < MODEL_SLOT_FIRST_LAYER, "%s", d->name);
        }
        for (size_t i = first_layer; i <= last_layer; i++)
            ck_assert_msg(model_tensor_per_layer(&f->tensors[i]), "%s: per-layer rows split",
                          f->tensors[i].name);

        for (int combo = 0; combo < 8; combo++) {
            nl_model_config c = cfg_of(f, combo & 1, combo & 2, combo & 4);
            for (int slot = 0; slot < MODEL_SLOT_COUNT; slot++) {
                int parts = 0, max_part = -1;
                const model_tensor_def *p0 = NULL;
                for (size_t i = 0; i < f->n_tensors; i++) {
                    const model_tensor_def *d = &f->tensors[i];
                    if ((int)d->slot != slot || !model_tensor_present(f, d, &c)) continue;
                    for (size_t j = 0; j < i; j++)
                        if ((int)f->tensors[j].slot == slot &&
                            model_tensor_present(f, &f->tensors[j], &c))
                            ck_assert_msg(f->tensors[j].part != d->part, "%s: part twice", d->name);
                    if (!p0) p0 = d;
                    /* one weight: every part has its columns and split */
                    ck_assert_msg(d->dims[1] == p0->dims[1] && d->shard == p0->shard,
                                  "%s: fused parts differ in columns or split", d->name);
                    parts++;
                    if (d->part > max_part) max_part = d->part;
                }
                ck_assert_int_eq(max_part + 1, parts);
                /* What the forward pass cannot run without. */
                bool optional = slot == MODEL_SLOT_QKV_BIAS || slot == MODEL_SLOT_Q_NORM ||
                                slot == MODEL_SLOT_K_NORM || slot == MODEL_SLOT_O_BIAS ||
                                slot == MODEL_SLOT_GATE_UP_BIAS || slot == MODEL_SLOT_DOWN_BIAS ||
                                (slot == MODEL_SLOT_LM_HEAD && (combo & 2));
                if (!optional) ck_assert_msg(parts > 0, "%s: slot %d empty", f->model_type, slot);
                if (slot == MODEL_SLOT_QKV_BIAS) ck_assert_int_eq(parts > 0, c.attention_bias);
                if (slot == MODEL_SLOT_O_BIAS)
                    ck_assert_int_eq(parts > 0, c.attention_bias && f->o_proj_bias);
                if (slot == MODEL_SLOT_Q_NORM) ck_assert_int_eq(parts > 0, f->qk_norm);
                /* only Llama's MLP has biases (transformers' mlp_bias) */
                if (slot == MODEL_SLOT_GATE_UP_BIAS || slot == MODEL_SLOT_DOWN_BIAS)
                    ck_assert_int_eq(parts > 0, c.mlp_bias && f->arch == NL_ARCH_LLAMA);
            }
        }
    }
}
END_TEST

static bool lists(const nl_model_config *c, const char *name, size_t *count)
{
    model_tensor_spec *s;
    size_t n;
    ck_assert_int_eq(model_tensors_list(c, &s, &n), NL_OK);
    bool found = false;
    for (size_t i = 0; i < n; i++) found |= !strcmp(s[i].name, name);
    free(s);
    if (count) *count = n;
    return found;
}

/* transformers: Qwen3 and Llama give o_proj a bias with attention_bias,
 * Qwen2 (biases always on q/k/v) never does; mlp_bias is Llama's alone. */
START_TEST(test_bias_tensors)
{
    const char *o_bias = "model.layers.1.self_attn.o_proj.bias";
    const char *down_bias = "model.layers.0.mlp.down_proj.bias";
    const model_family *q3 = model_family_by_model_type("qwen3");
    const model_family *q2 = model_family_by_model_type("qwen2");
    const model_family *ll = model_family_by_model_type("llama");
    nl_model_config c = cfg_of(q3, true, true, false);
    ck_assert(lists(&c, o_bias, NULL));
    ck_assert(lists(&c, "model.layers.1.self_attn.k_proj.bias", NULL));
    c = cfg_of(q3, false, true, false);
    ck_assert(!lists(&c, o_bias, NULL));
    c = cfg_of(q2, false, true, true);
    ck_assert(lists(&c, "model.layers.1.self_attn.v_proj.bias", NULL));
    ck_assert(!lists(&c, o_bias, NULL));
    ck_assert(!lists(&c, down_bias, NULL));

    size_t n;
    c = cfg_of(ll, false, true, false); /* embed, norm, 9 per layer */
    ck_assert(!lists(&c, "model.layers.0.self_attn.q_norm.weight", &n));
    ck_assert_uint_eq(n, 2 + 2 * 9);
    c = cfg_of(ll, false, false, false);
    ck_assert(lists(&c, "lm_head.weight", &n));
    ck_assert_uint_eq(n, 3 + 2 * 9);
    c = cfg_of(ll, true, true, true); /* + q, k, v, o and gate, up, down biases */
    ck_assert(lists(&c, o_bias, &n));
    ck_assert(lists(&c, down_bias, NULL));
    ck_assert(lists(&c, "model.layers.1.mlp.gate_proj.bias", NULL));
    ck_assert_uint_eq(n, 2 + 2 * 16);
}
END_TEST

START_TEST(test_dims_and_names)
{
    const model_family *q3 = model_family_by_model_type("qwen3");
    nl_model_config c = cfg_of(q3, false, true, false);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_Q, &c), 64);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_KV, &c), 32);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_HEAD, &c), 16);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_INTER, &c), 96);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_VOCAB, &c), 1000);
    ck_assert_int_eq(model_dim_size(MODEL_DIM_NONE, &c), 0);

    /* The expanded list carries its table row and layer. */
    model_tensor_spec *s;
    size_t n;
    ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_OK);
    ck_assert_uint_eq(n, 2 + 2 * 11);
    ck_assert_int_eq(s[0].layer, -1);
    ck_assert_int_eq(s[0].def->slot, MODEL_SLOT_EMBED);
    ck_assert_str_eq(s[12].name, "model.layers.1.input_layernorm.weight");
    ck_assert_int_eq(s[12].layer, 1);
    ck_assert_int_eq(s[14].def->slot, MODEL_SLOT_QKV);
    ck_assert_int_eq(s[14].def->part, 1);
    free(s);

    /* An arch no family claims is refused by name, not read out of bounds. */
    c.arch = (nl_arch)99;
    ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "99"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_family");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_registry_lookups);
    tcase_add_test(tc, test_tables_are_loadable);
    tcase_add_test(tc, test_dims_and_names);
    tcase_add_test(tc, test_bias_tensors);
    suite_add_tcase(s, tc);
    return check_run(s);
}
