/* test_mkmodel.c — generated checkpoints: layout, values, determinism,
 * the tensor-list check, the CLI and the demo model.
 *
 * References: the tensor names and shapes of the Hugging Face Qwen3 / Qwen2
 * modelling code (written out by hand below), the published Qwen3 shapes,
 * and the moments of normal(0, 0.02).
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/model_tensors.h"
#include "leader/cli/cli.h"
#include "leader/modelgen/demo_model.h"
#include "leader/modelgen/mkmodel.h"
#include "tests/check_run.h"

static char tmpdir[64];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nl_mk_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *sub(const char *name)
{
    static char bufs[4][256];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 256, "%s/%s", tmpdir, name);
    return b;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* A small Qwen3 with a vocabulary just over one generator chunk of the
 * embedding (20000 x 64 = 1.28M elements) so chunk seams are exercised. */
static nl_model_config small_cfg(void)
{
    nl_model_config c;
    ck_assert_int_eq(mkmodel_preset("tiny", &c), NL_OK);
    c.vocab_size = 20000;
    c.bos_token_id = 19999;
    c.eos_token_ids[0] = 19998;
    return c;
}

static st_model *open_checked(const char *dir, nl_model_config *cfg_out)
{
    nl_model_config cfg;
    ck_assert_msg(model_config_load(dir, &cfg) == NL_OK, "%s", nl_last_error());
    st_model *m;
    ck_assert_msg(st_open(dir, &m) == NL_OK, "%s", nl_last_error());
    ck_assert_msg(model_tensors_check(&cfg, m) == NL_OK, "%s", nl_last_error());
    if (cfg_out) *cfg_out = cfg;
    return m;
}

START_TEST(test_presets)
{
    nl_model_config c;
    ck_assert_int_eq(mkmodel_preset("qwen3-0.6b", &c), NL_OK);
    ck_assert_int_eq(c.hidden_size, 1024);
    ck_assert_int_eq(c.intermediate_size, 3072);
    ck_assert_int_eq(c.num_hidden_layers, 28);
    ck_assert_int_eq(c.num_attention_heads, 16);
    ck_assert_int_eq(c.num_key_value_heads, 8);
    ck_assert_int_eq(c.head_dim, 128);
    ck_assert(c.tie_word_embeddings);
    ck_assert_int_eq(c.vocab_size, 151936);
    ck_assert_int_eq(mkmodel_preset("qwen3-8b", &c), NL_OK);
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.intermediate_size, 12288);
    ck_assert_int_eq(c.num_hidden_layers, 36);
    ck_assert_int_eq(c.num_attention_heads, 32);
    ck_assert(!c.tie_word_embeddings);
    ck_assert_int_eq(mkmodel_preset("qwen3-32b", &c), NL_OK);
    ck_assert_int_eq(c.num_hidden_layers, 64);
    ck_assert_int_eq(c.intermediate_size, 25600);
    ck_assert_int_eq(mkmodel_preset("tiny", &c), NL_OK);
    ck_assert_int_eq(c.vocab_size, 151936);
    ck_assert_int_ne(c.num_attention_heads * c.head_dim, c.hidden_size);
    ck_assert_int_eq(mkmodel_preset("qwen3-9b", &c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "qwen3-9b"));

    /* Non-embedding parameter counts from the Qwen3 model cards, in units
     * of 0.01B (0.6B: 0.44B ... 32B: 31.2B), and the 0.6B's total 0.6B
     * (596M with the tied embedding counted once). */
    static const struct { const char *name; int64_t non_emb_centi_b; } cards[] = {
        {"qwen3-0.6b", 44}, {"qwen3-1.7b", 141}, {"qwen3-4b", 363},
        {"qwen3-8b", 695}, {"qwen3-14b", 1321}, {"qwen3-32b", 3121},
    };
    for (size_t k = 0; k < sizeof cards / sizeof cards[0]; k++) {
        model_tensor_spec *s;
        size_t n;
        int64_t total = 0, emb = 0;
        ck_assert_int_eq(mkmodel_preset(cards[k].name, &c), NL_OK);
        ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_OK);
        for (size_t i = 0; i < n; i++) {
            int64_t count = s[i].shape[0] * (s[i].n_dims == 2 ? s[i].shape[1] : 1);
            total += count;
            if (!strcmp(s[i].name, "model.embed_tokens.weight") ||
                !strcmp(s[i].name, "lm_head.weight"))
                emb += count;
        }
        free(s);
        ck_assert_msg((total - emb + 5000000) / 10000000 == cards[k].non_emb_centi_b,
                      "%s: %lld non-embedding parameters", cards[k].name,
                      (long long)(total - emb));
        if (k == 0) ck_assert_int_eq(total / 1000000, 596);
    }

    /* Llama 3 shapes: total parameters from the model cards (1.24B, 3.21B,
     * 8.03B, 70.6B; the tied embedding counted once), and the configs'
     * rope scaling, vocabulary and special ids. */
    static const struct { const char *name; int64_t centi_b; float factor; bool tie; } llama[] = {
        {"llama3.2-1b", 124, 32.0f, true}, {"llama3.2-3b", 321, 32.0f, true},
        {"llama3.1-8b", 803, 8.0f, false}, {"llama3.1-70b", 7055, 8.0f, false},
    };
    for (size_t k = 0; k < sizeof llama / sizeof llama[0]; k++) {
        model_tensor_spec *s;
        size_t n;
        int64_t total = 0;
        ck_assert_int_eq(mkmodel_preset(llama[k].name, &c), NL_OK);
        ck_assert_int_eq(c.arch, NL_ARCH_LLAMA);
        ck_assert_int_eq(c.vocab_size, 128256);
        ck_assert_int_eq(c.num_key_value_heads, 8);
        ck_assert(c.tie_word_embeddings == llama[k].tie);
        ck_assert_float_eq(c.rope_theta, 500000.0f);
        ck_assert_int_eq(c.rope_scaling.type, NL_ROPE_LLAMA3);
        ck_assert_float_eq(c.rope_scaling.factor, llama[k].factor);
        ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 8192);
        ck_assert_int_eq(c.bos_token_id, 128000);
        ck_assert_int_eq(c.n_eos, 3);
        ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_OK);
        for (size_t i = 0; i < n; i++) total += s[i].shape[0] * (s[i].n_dims == 2 ? s[i].shape[1] : 1);
        free(s);
        ck_assert_msg((total + 5000000) / 10000000 == llama[k].centi_b, "%s: %lld parameters",
                      llama[k].name, (long long)total);
    }

}
END_TEST

START_TEST(test_tensor_list_names)
{
    /* Qwen2, untied, one layer: the Hugging Face names in checkpoint order. */
    nl_model_config c = small_cfg();
    c.arch = NL_ARCH_QWEN2;
    c.attention_bias = true;
    c.tie_word_embeddings = false;
    c.num_hidden_layers = 1;
    static const char *want[] = {
        "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.k_proj.bias",
        "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.v_proj.bias",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
        "model.norm.weight", "lm_head.weight",
    };
    model_tensor_spec *s;
    size_t n;
    ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_OK);
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++) ck_assert_str_eq(s[i].name, want[i]);
    /* q: [heads * head_dim, hidden] = [128, 64]; k: [kv * hd, hidden];
     * o: [hidden, heads * hd]; down: [hidden, inter]. */
    ck_assert_int_eq(s[2].shape[0], 128);
    ck_assert_int_eq(s[2].shape[1], 64);
    ck_assert_int_eq(s[3].n_dims, 1);
    ck_assert_int_eq(s[3].shape[0], 128);
    ck_assert_int_eq(s[4].shape[0], 64);
    ck_assert_int_eq(s[8].shape[0], 64);
    ck_assert_int_eq(s[8].shape[1], 128);
    ck_assert_int_eq(s[12].shape[0], 64);
    ck_assert_int_eq(s[12].shape[1], 128);
    ck_assert_int_eq(s[0].shape[0], 20000);
    ck_assert_int_eq(s[1].kind, MODEL_TENSOR_NORM);
    ck_assert_int_eq(s[3].kind, MODEL_TENSOR_BIAS);
    free(s);

    /* Qwen3: q_norm / k_norm [head_dim] after o_proj, no biases. */
    c.arch = NL_ARCH_QWEN3;
    c.attention_bias = false;
    c.tie_word_embeddings = true;
    ck_assert_int_eq(model_tensors_list(&c, &s, &n), NL_OK);
    ck_assert_uint_eq(n, 13);
    ck_assert_str_eq(s[5].name, "model.layers.0.self_attn.o_proj.weight");
    ck_assert_str_eq(s[6].name, "model.layers.0.self_attn.q_norm.weight");
    ck_assert_str_eq(s[7].name, "model.layers.0.self_attn.k_norm.weight");
    ck_assert_int_eq(s[6].shape[0], 32);
    ck_assert_str_eq(s[n - 1].name, "model.norm.weight");
    free(s);
}
END_TEST

/* Mean, standard deviation and the share within one sigma of the mean. */
static void moments(const st_tensor *t, double center, double *mean, double *sd, double *in1)
{
    size_t n = t->nbytes / 2, inside = 0;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        double v = nl_bf16_to_f32(((const uint16_t *)t->data)[i]);
        s += v;
        s2 += v * v;
        inside += fabs(v - center) < 0.02;
    }
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
    *in1 = (double)inside / n;
}

START_TEST(test_roundtrip_single)
{
    nl_model_config c = small_cfg();
    mkmodel_options opt = {.seed = 7};
    ck_assert_msg(mkmodel_write(&c, &opt, sub("m")) == NL_OK, "%s", nl_last_error());
    ck_assert(exists(sub("m/model.safetensors")));
    ck_assert(!exists(sub("m/model.safetensors.index.json")));
    ck_assert(exists(sub("m/generation_config.json")));
    nl_model_config back;
    st_model *m = open_checked(sub("m"), &back);
    ck_assert_mem_eq(&back, &c, sizeof c);
    ck_assert_uint_eq(st_count(m), 3 + 11 * 2 - 1);

    const st_tensor *emb = st_find(m, "model.embed_tokens.weight");
    ck_assert_int_eq(emb->dtype, NL_DTYPE_BF16);
    ck_assert_uint_eq(emb->nbytes, 20000u * 64 * 2);
    /* Every element, across the generator's chunk seams, is the documented
     * function of (seed, name, index). */
    const uint16_t *e = emb->data;
    for (size_t i = 0; i < 20000u * 64; i += (i % 4096 == 0) ? 1 : 997)
        ck_assert_uint_eq(e[i], nl_f32_to_bf16(mkmodel_value(7, emb->name, 0, i)));
    for (size_t i = (1u << 20) - 3; i < (1u << 20) + 3; i++)
        ck_assert_uint_eq(e[i], nl_f32_to_bf16(mkmodel_value(7, emb->name, 0, i)));

    /* normal(0, 0.02): 1.28M samples put the mean within 1e-4 and the
     * sd within 1%; 68.27% lie within one sigma. */
    double mean, sd, in1;
    moments(emb, 0.0, &mean, &sd, &in1);
    ck_assert_msg(fabs(mean) < 1e-4, "mean %g", mean);
    ck_assert_msg(fabs(sd - 0.02) < 0.0002, "sd %g", sd);
    ck_assert_msg(fabs(in1 - 0.6827) < 0.005, "within 1 sigma %g", in1);
    /* Norm weights: 1 + normal(0, 0.02), bf16 near 1 has steps of 2^-7, so
     * the sd is only checked loosely. */
    moments(st_find(m, "model.layers.1.post_attention_layernorm.weight"), 1.0, &mean, &sd, &in1);
    ck_assert_msg(fabs(mean - 1.0) < 0.01, "norm mean %g", mean);
    ck_assert_msg(sd > 0.01 && sd < 0.03, "norm sd %g", sd);
    /* Different tensors get different streams. */
    ck_assert(memcmp(st_find(m, "model.layers.0.mlp.gate_proj.weight")->data,
                     st_find(m, "model.layers.0.mlp.up_proj.weight")->data, 64) != 0);
    st_close(m);

    /* The config written is the hub's form. */
    json_t *gen = json_load_file(sub("m/generation_config.json"), 0, NULL);
    ck_assert_ptr_nonnull(gen);
    json_t *eos = json_object_get(gen, "eos_token_id");
    ck_assert_int_eq(json_array_size(eos), 2);
    ck_assert_int_eq(json_integer_value(json_array_get(eos, 0)), 19998);
    ck_assert_int_eq(json_integer_value(json_array_get(eos, 1)), 19999);
    json_decref(gen);
}
END_TEST

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(*len ? *len : 1);
    ck_assert_uint_eq(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

START_TEST(test_determinism)
{
    nl_model_config c = small_cfg();
    c.vocab_size = 3000;
    c.bos_token_id = 2999;
    c.eos_token_ids[0] = 2998;
    mkmodel_options a = {.seed = 42}, b = {.seed = 43};
    ck_assert_int_eq(mkmodel_write(&c, &a, sub("a1")), NL_OK);
    ck_assert_int_eq(mkmodel_write(&c, &a, sub("a2")), NL_OK);
    ck_assert_int_eq(mkmodel_write(&c, &b, sub("b")), NL_OK);
    size_t n1, n2, n3;
    void *f1 = read_file(sub("a1/model.safetensors"), &n1);
    void *f2 = read_file(sub("a2/model.safetensors"), &n2);
    void *f3 = read_file(sub("b/model.safetensors"), &n3);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(f1, f2, n1) == 0);
    ck_assert_uint_eq(n1, n3);
    ck_assert(memcmp(f1, f3, n1) != 0);
    free(f1);
    free(f2);
    free(f3);
}
END_TEST

START_TEST(test_sharded)
{
    nl_model_config c = small_cfg();
    c.tie_word_embeddings = false;
    /* 0.5 MB shards: the 2.56 MB embedding and head each get their own. */
    mkmodel_options one = {.seed = 3}, many = {.seed = 3, .shard_bytes = 500000};
    ck_assert_int_eq(mkmodel_write(&c, &one, sub("single")), NL_OK);
    ck_assert_msg(mkmodel_write(&c, &many, sub("sharded")) == NL_OK, "%s", nl_last_error());
    ck_assert(!exists(sub("sharded/model.safetensors")));
    ck_assert(exists(sub("sharded/model-00001-of-00003.safetensors")));
    ck_assert(exists(sub("sharded/model-00003-of-00003.safetensors")));

    st_model *s1 = open_checked(sub("single"), NULL);
    st_model *s2 = open_checked(sub("sharded"), NULL);
    ck_assert_uint_eq(st_count(s1), st_count(s2));
    size_t total = 0;
    for (size_t i = 0; i < st_count(s1); i++) {
        const st_tensor *a = st_get(s1, i), *b = st_find(s2, a->name);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(a->nbytes, b->nbytes);
        ck_assert(memcmp(a->data, b->data, a->nbytes) == 0);
        total += a->nbytes;
    }
    ck_assert_str_eq(strrchr(st_find(s2, "lm_head.weight")->file, '/'),
                     "/model-00003-of-00003.safetensors");
    st_close(s1);
    st_close(s2);

    json_t *idx = json_load_file(sub("sharded/model.safetensors.index.json"), 0, NULL);
    ck_assert_ptr_nonnull(idx);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(idx, "metadata"),
                                                        "total_size")), (json_int_t)total);
    ck_assert_uint_eq(json_object_size(json_object_get(idx, "weight_map")), 3 + 11 * 2);
    json_decref(idx);
}
END_TEST

START_TEST(test_qwen2_variant)
{
    nl_model_config c = small_cfg();
    c.arch = NL_ARCH_QWEN2;
    c.attention_bias = true;
    c.vocab_size = 1000;
    c.bos_token_id = -1;
    c.eos_token_ids[0] = 999;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 3;
    c.head_dim = 16;
    ck_assert_msg(mkmodel_write(&c, NULL, sub("q2")) == NL_OK, "%s", nl_last_error());
    nl_model_config back;
    st_model *m = open_checked(sub("q2"), &back);
    ck_assert_int_eq(back.arch, NL_ARCH_QWEN2);
    ck_assert(back.attention_bias);
    ck_assert_ptr_nonnull(st_find(m, "model.layers.1.self_attn.v_proj.bias"));
    ck_assert_ptr_null(st_find(m, "model.layers.1.self_attn.q_norm.weight"));
    ck_assert_int_eq(st_find(m, "model.layers.0.self_attn.k_proj.bias")->shape[0], 48);
    st_close(m);
}
END_TEST

START_TEST(test_check_reports)
{
    nl_model_config c = small_cfg();
    c.vocab_size = 1000;
    c.bos_token_id = 998;
    c.eos_token_ids[0] = 999;
    c.tie_word_embeddings = false;
    ck_assert_int_eq(mkmodel_write(&c, NULL, sub("m")), NL_OK);
    st_model *m;
    ck_assert_int_eq(st_open(sub("m"), &m), NL_OK);

    /* Three layers expected, two present: layer 2's eleven are missing. */
    nl_model_config more = c;
    more.num_hidden_layers = 3;
    ck_assert_int_eq(model_tensors_check(&more, m), NL_ERR_FORMAT);
    const char *msg = nl_last_error();
    ck_assert_msg(strstr(msg, "11 missing"), "%s", msg);
    ck_assert_msg(strstr(msg, "model.layers.2.input_layernorm.weight"), "%s", msg);
    ck_assert_msg(strstr(msg, "model.safetensors"), "%s", msg);

    /* One layer expected: layer 1's eleven are unexpected. */
    nl_model_config fewer = c;
    fewer.num_hidden_layers = 1;
    ck_assert_int_eq(model_tensors_check(&fewer, m), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "11 unexpected"), "%s", nl_last_error());
    ck_assert_msg(strstr(nl_last_error(), "model.layers.1."), "%s", nl_last_error());

    /* Wrong intermediate size: three matrices per layer mis-shaped. */
    nl_model_config wide = c;
    wide.intermediate_size = 96;
    ck_assert_int_eq(model_tensors_check(&wide, m), NL_ERR_FORMAT);
    msg = nl_last_error();
    ck_assert_msg(strstr(msg, "6 with wrong shape"), "%s", msg);
    ck_assert_msg(strstr(msg, "model.layers.0.mlp.gate_proj.weight expected [96, 64] got "
                              "[128, 64]"), "%s", msg);

    /* Qwen2 expected of a Qwen3 checkpoint: biases missing, norms extra. */
    nl_model_config q2 = c;
    q2.arch = NL_ARCH_QWEN2;
    q2.attention_bias = true;
    ck_assert_int_eq(model_tensors_check(&q2, m), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "6 missing") &&
                  strstr(nl_last_error(), "4 unexpected"), "%s", nl_last_error());

    /* A tied config accepts a checkpoint that still carries lm_head. */
    nl_model_config tied = c;
    tied.tie_word_embeddings = true;
    ck_assert_msg(model_tensors_check(&tied, m) == NL_OK, "%s", nl_last_error());
    /* but not one whose head has the wrong shape. */
    tied.hidden_size = 64;
    tied.vocab_size = 1001;
    ck_assert_int_eq(model_tensors_check(&tied, m), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "lm_head.weight expected [1001, 64] got [1000, 64]"),
                  "%s", nl_last_error());
    st_close(m);
}
END_TEST

START_TEST(test_existing_dir_and_no_leftovers)
{
    nl_model_config c = small_cfg();
    c.vocab_size = 500;
    c.bos_token_id = -1;
    c.eos_token_ids[0] = 1;
    /* An empty directory may be filled. */
    ck_assert_int_eq(mkdir(sub("empty"), 0755), 0);
    ck_assert_msg(mkmodel_write(&c, NULL, sub("empty/")) == NL_OK, "%s", nl_last_error());
    ck_assert(exists(sub("empty/config.json")));
    /* A model is never overwritten. */
    ck_assert_int_eq(mkmodel_write(&c, NULL, sub("empty")), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "already exists"));
    /* A config the reader refuses fails before any weights are written. */
    c.num_key_value_heads = 3;
    ck_assert_int_eq(mkmodel_write(&c, NULL, sub("bad")), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "num_key_value_heads"));
    ck_assert(!exists(sub("bad")));
    /* Missing tokenizer: named, and nothing left behind. */
    c.num_key_value_heads = 2;
    mkmodel_options opt = {.tokenizer_dir = sub("no-tokenizer")};
    ck_assert_int_eq(mkmodel_write(&c, &opt, sub("tok")), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "no-tokenizer/tokenizer.json"));
    ck_assert(!exists(sub("tok")));
    /* Weights larger than the disk (8 TB here) fail before anything is
     * written, saying how much is needed. */
    c.vocab_size = 1 << 30;
    c.hidden_size = 4096;
    ck_assert_int_eq(mkmodel_write(&c, NULL, sub("huge")), NL_ERR_IO);
    ck_assert_msg(strstr(nl_last_error(), "GB free"), "%s", nl_last_error());
    ck_assert(!exists(sub("huge")));

    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while ((e = readdir(d))) ck_assert_msg(!strstr(e->d_name, ".tmp"), "left %s", e->d_name);
    closedir(d);
}
END_TEST

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static int run_cli(const char *args)
{
    char buf[1024], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", args);
    for (char *t = strtok(buf, " "); t && argc < 63; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    return cli_mkmodel(argc, argv);
}

START_TEST(test_cli)
{
    char args[512];
    snprintf(args, sizeof args, "--out %s --arch qwen2 --vocab 777 --hidden 48 --inter 80 "
             "--layers 3 --heads 6 --kv-heads 2 --head-dim 8 --no-tie --max-pos 512 --seed 9 "
             "--shard-size=0.05", sub("c"));
    ck_assert_int_eq(run_cli(args), 0);
    nl_model_config cfg;
    st_model *m = open_checked(sub("c"), &cfg);
    ck_assert_int_eq(cfg.arch, NL_ARCH_QWEN2);
    ck_assert_int_eq(cfg.vocab_size, 777);
    ck_assert_int_eq(cfg.hidden_size, 48);
    ck_assert_int_eq(cfg.intermediate_size, 80);
    ck_assert_int_eq(cfg.num_hidden_layers, 3);
    ck_assert_int_eq(cfg.num_attention_heads, 6);
    ck_assert_int_eq(cfg.num_key_value_heads, 2);
    ck_assert_int_eq(cfg.head_dim, 8);
    ck_assert_int_eq(cfg.max_position_embeddings, 512);
    ck_assert(!cfg.tie_word_embeddings);
    /* Qwen's special ids do not fit a 777-token vocabulary. */
    ck_assert_int_eq(cfg.bos_token_id, -1);
    ck_assert_int_eq(cfg.eos_token_ids[0], 776);
    ck_assert_uint_eq(st_count(m), 2 + 3 * 12 + 1);
    const st_tensor *w = st_find(m, "model.layers.2.mlp.down_proj.weight");
    ck_assert_uint_eq(((const uint16_t *)w->data)[5], nl_f32_to_bf16(mkmodel_value(9, w->name, 0, 5)));
    st_close(m);
    ck_assert(exists(sub("c/model.safetensors.index.json")));

    /* Llama: biases and rope scaling from the command line */
    snprintf(args, sizeof args, "--out %s --arch llama --vocab 256 --hidden 32 --inter 64 "
             "--layers 1 --heads 4 --kv-heads 2 --head-dim 8 --attention-bias --mlp-bias "
             "--rope-llama3 16,1,4,256", sub("l"));
    ck_assert_int_eq(run_cli(args), 0);
    m = open_checked(sub("l"), &cfg);
    ck_assert_int_eq(cfg.arch, NL_ARCH_LLAMA);
    ck_assert(cfg.attention_bias && cfg.mlp_bias);
    ck_assert_int_eq(cfg.rope_scaling.type, NL_ROPE_LLAMA3);
    ck_assert_float_eq(cfg.rope_scaling.factor, 16.0f);
    ck_assert_int_eq(cfg.rope_scaling.original_max_position_embeddings, 256);
    ck_assert_ptr_nonnull(st_find(m, "model.layers.0.self_attn.o_proj.bias"));
    ck_assert_ptr_nonnull(st_find(m, "model.layers.0.mlp.up_proj.bias"));
    st_close(m);
    snprintf(args, sizeof args, "--out %s --arch llama --rope-llama3 8,1,4", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    snprintf(args, sizeof args, "--out %s --arch llama --rope-llama3 8,4,1,8192", sub("x"));
    ck_assert_int_eq(run_cli(args), 2); /* high_freq_factor below low: the config check */

    /* A Llama model takes the Llama 3 tokenizer when it fits the vocabulary. */
    char tok[4096], tok_file[4200];
    const char *env = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    if (env) snprintf(tok, sizeof tok, "%s", env);
    else snprintf(tok, sizeof tok, "%s/.cache/nanollm/tokenizer-llama3", getenv("HOME"));
    snprintf(tok_file, sizeof tok_file, "%s/tokenizer.json", tok);
    const char *old = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("NANOLLM_LLAMA3_TOKENIZER_DIR", tok, 1);
    snprintf(args, sizeof args, "--out %s --preset llama3.2-1b --layers 1 --hidden 16 --inter 16 "
             "--heads 2 --kv-heads 1 --head-dim 8", sub("lt"));
    ck_assert_int_eq(run_cli(args), 0);
    if (access(tok_file, R_OK) == 0) ck_assert(exists(sub("lt/tokenizer.json")));
    else fprintf(stderr, "test_cli: no Llama 3 tokenizer in %s, its copy unchecked\n", tok);
    /* Llama 3.2's generation_config: its three end ids, <|begin_of_text|>
     * neither an end nor a pad */
    json_t *gen = json_load_file(sub("lt/generation_config.json"), 0, NULL);
    ck_assert_ptr_nonnull(gen);
    const json_t *eos = json_object_get(gen, "eos_token_id");
    ck_assert_uint_eq(json_array_size(eos), 3);
    for (size_t i = 0; i < 3; i++) ck_assert_int_ne(json_integer_value(json_array_get(eos, i)), 128000);
    ck_assert_ptr_null(json_object_get(gen, "pad_token_id"));
    json_decref(gen);
    snprintf(args, sizeof args, "--out %s --preset llama3.2-1b --vocab 512 --layers 1 --hidden 16 "
             "--inter 16 --heads 2 --kv-heads 1 --head-dim 8", sub("lv"));
    ck_assert_int_eq(run_cli(args), 0);
    ck_assert(!exists(sub("lv/tokenizer.json"))); /* 128,256 ids do not fit 512 */
    if (saved) setenv("NANOLLM_LLAMA3_TOKENIZER_DIR", saved, 1);
    else unsetenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    free(saved);

    snprintf(args, sizeof args, "--out %s --preset nope", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    snprintf(args, sizeof args, "--out %s --layers zero", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    snprintf(args, sizeof args, "--out %s --heads 5", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    snprintf(args, sizeof args, "--out %s --arch mistral", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    ck_assert_int_eq(run_cli("--preset tiny"), 2);
    ck_assert_int_eq(run_cli("--bogus 1 --out /tmp/x"), 2);
    ck_assert_int_eq(run_cli("--out"), 2);
    ck_assert(!exists(sub("x")));
}
END_TEST


/* Makes a one-layer model in sub(dir) with mkmodel's options and reads its
 * config back. */
static void make_small(const char *dir, const char *options, nl_model_config *cfg)
{
    char args[512];
    snprintf(args, sizeof args,
             "--out %s %s --layers 1 --hidden 16 --inter 16 --heads 2 --kv-heads 1 --head-dim 8 --no-tokenizer",
             sub(dir), options);
    ck_assert_int_eq(run_cli(args), 0);
    st_close(open_checked(sub(dir), cfg));
}

/* --arch of another family brings that family's defaults (the released
 * models' config.json values: Meta-Llama-3-8B theta 500000, eps 1e-5,
 * plain rope, vocab 128256; Qwen3 theta 1e6, eps 1e-6, vocab 151936),
 * never the preset's; within a family the preset's stay, and --rope-theta
 * and --rms-eps override either. */
START_TEST(test_cli_arch_family)
{
    char args[512];
    nl_model_config cfg;
    make_small("ql", "--preset qwen3-0.6b --arch llama", &cfg);
    ck_assert_int_eq(cfg.arch, NL_ARCH_LLAMA);
    ck_assert_float_eq(cfg.rope_theta, 500000.0f);
    ck_assert_float_eq(cfg.rms_norm_eps, 1e-5f);
    ck_assert_int_eq(cfg.rope_scaling.type, NL_ROPE_DEFAULT);
    ck_assert_int_eq(cfg.vocab_size, 128256);
    ck_assert_int_eq(cfg.bos_token_id, 128000);
    ck_assert(!cfg.attention_bias);
    ck_assert(cfg.tie_word_embeddings); /* the preset's shape stays */

    make_small("lq", "--preset llama3.1-8b --arch qwen3", &cfg);
    ck_assert_int_eq(cfg.arch, NL_ARCH_QWEN3);
    ck_assert_float_eq(cfg.rope_theta, 1000000.0f);
    ck_assert_float_eq(cfg.rms_norm_eps, 1e-6f);
    ck_assert_int_eq(cfg.rope_scaling.type, NL_ROPE_DEFAULT);
    ck_assert_int_eq(cfg.vocab_size, 151936);
    ck_assert_int_eq(cfg.bos_token_id, 151643);
    ck_assert(!cfg.tie_word_embeddings);

    make_small("ll", "--preset llama3.1-8b --arch llama --vocab 512", &cfg);
    ck_assert_float_eq(cfg.rope_theta, 500000.0f);
    ck_assert_int_eq(cfg.rope_scaling.type, NL_ROPE_LLAMA3);
    ck_assert_float_eq(cfg.rope_scaling.factor, 8.0f);

    make_small("q2", "--arch qwen2 --vocab 512", &cfg);
    ck_assert_int_eq(cfg.arch, NL_ARCH_QWEN2);
    ck_assert(cfg.attention_bias);
    ck_assert_float_eq(cfg.rope_theta, 1000000.0f);

    make_small("lo", "--arch llama --rope-theta 12345 --rms-eps 1e-4 --vocab 512", &cfg);
    ck_assert_float_eq(cfg.rope_theta, 12345.0f);
    ck_assert_float_eq(cfg.rms_norm_eps, 1e-4f);
    /* Llama's two end ids past a 512-token vocabulary become one, not two
     * copies of the last id. */
    ck_assert_int_eq(cfg.n_eos, 1);
    ck_assert_int_eq(cfg.eos_token_ids[0], 511);
    snprintf(args, sizeof args, "--out %s --rope-theta 0", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    snprintf(args, sizeof args, "--out %s --rms-eps 2", sub("x"));
    ck_assert_int_eq(run_cli(args), 2);
    ck_assert(!exists(sub("x")));
}
END_TEST

START_TEST(test_demo_model)
{
    /* A stand-in tokenizer: the demo copies the files, it does not parse them. */
    ck_assert_int_eq(mkdir(sub("tok"), 0755), 0);
    write_text(sub("tok/tokenizer.json"), "{\"model\": {}}\n");
    write_text(sub("tok/tokenizer_config.json"), "{}\n");
    setenv("XDG_CACHE_HOME", sub("cache"), 1);
    setenv("NANOLLM_TOKENIZER_DIR", sub("no-such-dir"), 1);
    char dir[512];
    ck_assert_int_eq(demo_model_ensure(dir, sizeof dir), NL_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "no-such-dir"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "tools/fetch-tokenizer.sh"));

    setenv("NANOLLM_TOKENIZER_DIR", sub("tok"), 1);
    /* Two processes racing: both succeed and one copy is left. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) _exit(demo_model_ensure(dir, sizeof dir) == NL_OK ? 0 : 1);
    ck_assert_msg(demo_model_ensure(dir, sizeof dir) == NL_OK, "%s", nl_last_error());
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_str_eq(dir, sub("cache/nanollm/demo-tiny-v1"));
    ck_assert(exists(sub("cache/nanollm/demo-tiny-v1/tokenizer_config.json")));
    DIR *d = opendir(sub("cache/nanollm"));
    struct dirent *e;
    while ((e = readdir(d))) ck_assert_msg(!strstr(e->d_name, ".tmp"), "left %s", e->d_name);
    closedir(d);

    nl_model_config cfg, tiny;
    st_model *m = open_checked(dir, &cfg);
    ck_assert_int_eq(mkmodel_preset("tiny", &tiny), NL_OK);
    ck_assert_mem_eq(&cfg, &tiny, sizeof cfg);
    const st_tensor *t = st_find(m, "model.layers.0.self_attn.q_proj.weight");
    ck_assert_uint_eq(((const uint16_t *)t->data)[11],
                      nl_f32_to_bf16(mkmodel_value(DEMO_MODEL_SEED, t->name, 0, 11)));
    st_close(m);

    /* Found again without regenerating. */
    struct stat before, after;
    ck_assert_int_eq(stat(sub("cache/nanollm/demo-tiny-v1/model.safetensors"), &before), 0);
    char again[512];
    ck_assert_int_eq(demo_model_ensure(again, sizeof again), NL_OK);
    ck_assert_str_eq(again, dir);
    ck_assert_int_eq(stat(sub("cache/nanollm/demo-tiny-v1/model.safetensors"), &after), 0);
    ck_assert_uint_eq(before.st_ino, after.st_ino);
    ck_assert_int_eq(demo_model_ensure(again, 8), NL_ERR_INVALID_ARG);
}
END_TEST

static Suite *mkmodel_suite(void)
{
    Suite *s = suite_create("mkmodel");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_presets);
    tcase_add_test(tc, test_tensor_list_names);
    tcase_add_test(tc, test_roundtrip_single);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_sharded);
    tcase_add_test(tc, test_qwen2_variant);
    tcase_add_test(tc, test_check_reports);
    tcase_add_test(tc, test_existing_dir_and_no_leftovers);
    tcase_add_test(tc, test_cli);
    tcase_add_test(tc, test_cli_arch_family);
    tcase_add_test(tc, test_demo_model);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(mkmodel_suite());
}
