/* test_model_config.c — config.json parsing, validation and writing.
 *
 * The good cases are the configs published with Qwen3-0.6B,
 * Qwen2.5-0.5B-Instruct, Llama-3.1-8B-Instruct and Llama-3.2-1B (their
 * numbers are the reference); each bad case changes one field of the Qwen3
 * or Llama config and checks the error names it.  The rotary tables are
 * checked against an independent double-precision reading of transformers'
 * formulas.
 */
#define _GNU_SOURCE
#include <check.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/model_config.h"
#include "common/model_rope.h"
#include "tests/check_run.h"

/* config.json of Qwen/Qwen3-0.6B on the hub. */
static const char *qwen3_06b =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
    " \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
    " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
    " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8,"
    " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000,"
    " \"sliding_window\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false,"
    " \"vocab_size\": 151936}";

/* config.json of Qwen/Qwen2.5-0.5B-Instruct: no head_dim, biases implied. */
static const char *qwen25_05b =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"hidden_act\": \"silu\","
    " \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
    " \"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": \"qwen2\","
    " \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768,"
    " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.43.1\", \"use_cache\": true, \"use_sliding_window\": false,"
    " \"vocab_size\": 151936}";

/* config.json of meta-llama/Llama-3.1-8B-Instruct. */
static const char *llama31_8b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
    " \"eos_token_id\": [128001, 128008, 128009], \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,"
    " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 8.0,"
    " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.42.3\", \"use_cache\": true, \"vocab_size\": 128256}";

/* config.json of meta-llama/Llama-3.2-1B: tied, head_dim 64. */
static const char *llama32_1b =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"bos_token_id\": 128000, \"eos_token_id\": 128001,"
    " \"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
    " \"initializer_range\": 0.02, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"mlp_bias\": false, \"model_type\": \"llama\","
    " \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8,"
    " \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0,"
    " \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
    " \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},"
    " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.45.0.dev0\", \"use_cache\": true, \"vocab_size\": 128256}";

/* Parses text after one edit of field (JSON text value; NULL deletes). */
static nl_status parse_text_edited(const char *base, const char *field, const char *value,
                                   nl_model_config *cfg)
{
    json_t *root = json_loads(base, 0, NULL);
    ck_assert_ptr_nonnull(root);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        ck_assert_msg(v != NULL, "bad test value %s", value);
        json_object_set_new(root, field, v);
    } else {
        json_object_del(root, field);
    }
    char *text = json_dumps(root, 0);
    json_decref(root);
    nl_status st = model_config_parse(text, "test/config.json", cfg);
    free(text);
    return st;
}

/* Parses the Qwen3 config after one edit: set field to value (JSON text),
 * or delete it when value is NULL. */
static nl_status parse_edited(const char *field, const char *value, nl_model_config *cfg)
{
    json_t *root = json_loads(qwen3_06b, 0, NULL);
    ck_assert_ptr_nonnull(root);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        ck_assert_msg(v != NULL, "bad test value %s", value);
        json_object_set_new(root, field, v);
    } else {
        json_object_del(root, field);
    }
    char *text = json_dumps(root, 0);
    json_decref(root);
    nl_status st = model_config_parse(text, "test/config.json", cfg);
    free(text);
    return st;
}

/* Asserts the edit fails with status and a message containing each of the
 * given fragments. */
static void expect_error(const char *field, const char *value, nl_status status,
                         const char *frag1, const char *frag2)
{
    nl_model_config cfg;
    nl_status st = parse_edited(field, value, &cfg);
    ck_assert_msg(st == status, "%s=%s: status %d, want %d (%s)", field, value ? value : "(del)",
                  st, status, nl_last_error());
    const char *msg = nl_last_error();
    ck_assert_msg(strstr(msg, "test/config.json"), "message lacks file: %s", msg);
    ck_assert_msg(strstr(msg, frag1), "message lacks \"%s\": %s", frag1, msg);
    if (frag2) ck_assert_msg(strstr(msg, frag2), "message lacks \"%s\": %s", frag2, msg);
}

START_TEST(test_qwen3_hub)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_parse(qwen3_06b, "q3", &c), NL_OK);
    ck_assert_int_eq(c.arch, NL_ARCH_QWEN3);
    ck_assert_int_eq(c.vocab_size, 151936);
    ck_assert_int_eq(c.hidden_size, 1024);
    ck_assert_int_eq(c.intermediate_size, 3072);
    ck_assert_int_eq(c.num_hidden_layers, 28);
    ck_assert_int_eq(c.num_attention_heads, 16);
    ck_assert_int_eq(c.num_key_value_heads, 8);
    ck_assert_int_eq(c.head_dim, 128); /* 16 x 128 = 2048 != hidden 1024 */
    ck_assert_int_eq(c.max_position_embeddings, 40960);
    ck_assert_float_eq(c.rms_norm_eps, 1e-6f);
    ck_assert_float_eq(c.rope_theta, 1e6f);
    ck_assert(c.tie_word_embeddings);
    ck_assert(!c.attention_bias);
    ck_assert_int_eq(c.dtype, NL_DTYPE_BF16);
    ck_assert_int_eq(c.bos_token_id, 151643);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_token_ids[0], 151645);
}
END_TEST

START_TEST(test_qwen2_hub)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_parse(qwen25_05b, "q2", &c), NL_OK);
    ck_assert_int_eq(c.arch, NL_ARCH_QWEN2);
    ck_assert_int_eq(c.hidden_size, 896);
    ck_assert_int_eq(c.head_dim, 64); /* 896 / 14 */
    ck_assert_int_eq(c.num_key_value_heads, 2);
    ck_assert_int_eq(c.num_hidden_layers, 24);
    ck_assert(c.attention_bias);
    ck_assert(c.tie_word_embeddings);
    ck_assert_float_eq(c.rope_theta, 1e6f);
    ck_assert_int_eq(c.max_position_embeddings, 32768);
}
END_TEST

START_TEST(test_newer_form)
{
    /* transformers 5 moves the theta under rope_parameters and renames
     * torch_dtype to dtype. */
    json_t *root = json_loads(qwen3_06b, 0, NULL);
    json_object_del(root, "rope_theta");
    json_object_del(root, "rope_scaling");
    json_object_del(root, "torch_dtype");
    json_object_set_new(root, "rope_parameters",
                        json_pack("{s:f, s:s}", "rope_theta", 5e5, "rope_type", "default"));
    json_object_set_new(root, "dtype", json_string("float16"));
    char *text = json_dumps(root, 0);
    json_decref(root);
    nl_model_config c;
    ck_assert_int_eq(model_config_parse(text, "new", &c), NL_OK);
    free(text);
    ck_assert_float_eq(c.rope_theta, 5e5f);
    ck_assert_int_eq(c.dtype, NL_DTYPE_F16);
}
END_TEST

START_TEST(test_model_type_only_and_eos_list)
{
    nl_model_config c;
    json_t *root = json_loads(qwen3_06b, 0, NULL);
    json_object_del(root, "architectures");
    json_object_set_new(root, "model_type", json_string("qwen2"));
    json_object_set_new(root, "eos_token_id", json_pack("[i, i]", 151645, 151643));
    json_object_set_new(root, "torch_dtype", json_string("float32"));
    char *text = json_dumps(root, 0);
    json_decref(root);
    ck_assert_int_eq(model_config_parse(text, "mt", &c), NL_OK);
    free(text);
    ck_assert_int_eq(c.arch, NL_ARCH_QWEN2);
    ck_assert(c.attention_bias);
    ck_assert_int_eq(c.n_eos, 2);
    ck_assert_int_eq(c.eos_token_ids[0], 151645);
    ck_assert_int_eq(c.eos_token_ids[1], 151643);
    ck_assert_int_eq(c.dtype, NL_DTYPE_F32);
}
END_TEST

/* config.json may list as many EOS ids as the tokenizer keeps (NL_MAX_EOS):
 * the two once had different caps, and a model with 9 to 16 ids loaded in
 * the tokenizer but not in the engine. */
START_TEST(test_eos_list_at_the_limit)
{
    nl_model_config c;
    char list[256] = "[";
    for (int i = 0; i < NL_MAX_EOS; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", 100 + i);
    strcat(list, "]");
    ck_assert_msg(parse_edited("eos_token_id", list, &c) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(c.n_eos, NL_MAX_EOS);
    ck_assert_int_eq(c.eos_token_ids[NL_MAX_EOS - 1], 100 + NL_MAX_EOS - 1);
}
END_TEST

START_TEST(test_qwen3_attention_bias)
{
    nl_model_config c;
    ck_assert_int_eq(parse_edited("attention_bias", "true", &c), NL_OK);
    ck_assert_int_eq(c.arch, NL_ARCH_QWEN3);
    ck_assert(c.attention_bias);
}
END_TEST

START_TEST(test_defaults)
{
    nl_model_config c;
    /* kv heads default to heads, eps to 1e-6, no eos / bos. */
    json_t *root = json_loads(qwen3_06b, 0, NULL);
    json_object_del(root, "num_key_value_heads");
    json_object_del(root, "rms_norm_eps");
    json_object_del(root, "eos_token_id");
    json_object_del(root, "bos_token_id");
    char *text = json_dumps(root, 0);
    json_decref(root);
    ck_assert_int_eq(model_config_parse(text, "d", &c), NL_OK);
    free(text);
    ck_assert_int_eq(c.num_key_value_heads, 16);
    ck_assert_float_eq(c.rms_norm_eps, 1e-6f);
    ck_assert_int_eq(c.n_eos, 0);
    ck_assert_int_eq(c.bos_token_id, -1);
}
END_TEST

START_TEST(test_bad_fields)
{
    expect_error("hidden_size", NULL, NL_ERR_FORMAT, "missing field hidden_size", NULL);
    expect_error("vocab_size", NULL, NL_ERR_FORMAT, "vocab_size", NULL);
    expect_error("num_hidden_layers", "-2", NL_ERR_FORMAT, "num_hidden_layers", "-2");
    expect_error("num_hidden_layers", "0", NL_ERR_FORMAT, "num_hidden_layers", "= 0");
    expect_error("num_hidden_layers", "2000", NL_ERR_FORMAT, "num_hidden_layers", "1024");
    expect_error("hidden_size", "100000", NL_ERR_FORMAT, "hidden_size", "100000");
    expect_error("hidden_size", "\"1024\"", NL_ERR_FORMAT, "hidden_size", "a string");
    expect_error("intermediate_size", "3072.5", NL_ERR_FORMAT, "intermediate_size", "real");
    expect_error("num_key_value_heads", "3", NL_ERR_FORMAT, "num_key_value_heads = 3", "16");
    expect_error("head_dim", "127", NL_ERR_FORMAT, "head_dim = 127", "even");
    expect_error("vocab_size", "2147483648", NL_ERR_FORMAT, "vocab_size", "2147483648");
    expect_error("rms_norm_eps", "0", NL_ERR_FORMAT, "rms_norm_eps", "(0, 1)");
    expect_error("rms_norm_eps", "1.5", NL_ERR_FORMAT, "rms_norm_eps", "1.5");
    /* found by fuzz_config: positive as a double, zero as a float */
    expect_error("rms_norm_eps", "1e-60", NL_ERR_FORMAT, "rms_norm_eps", "float");
    expect_error("rope_theta", "1e-50", NL_ERR_FORMAT, "rope_theta", "positive");
    expect_error("rms_norm_eps", "\"small\"", NL_ERR_FORMAT, "rms_norm_eps", "number");
    expect_error("rope_theta", "0", NL_ERR_FORMAT, "rope_theta", "positive");
    expect_error("rope_theta", "-10000", NL_ERR_FORMAT, "rope_theta", "-10000");
    expect_error("torch_dtype", "\"int8\"", NL_ERR_UNSUPPORTED, "torch_dtype", "int8");
    expect_error("torch_dtype", "16", NL_ERR_FORMAT, "torch_dtype", "integer");
    expect_error("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", NL_ERR_UNSUPPORTED,
                 "rope_scaling", "yarn");
    expect_error("rope_scaling", "{\"type\": \"linear\"}", NL_ERR_UNSUPPORTED, "rope_scaling",
                 "linear");
    expect_error("rope_parameters", "{\"rope_type\": \"llama3\", \"rope_theta\": 10000}",
                 NL_ERR_FORMAT, "rope_parameters.factor", "missing");
    expect_error("rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}", NL_ERR_UNSUPPORTED,
                 "rope_scaling.rope_type", "\"dynamic\"");
    expect_error("rope_scaling", "{\"rope_type\": \"longrope\"}", NL_ERR_UNSUPPORTED,
                 "rope_scaling", "longrope");
    expect_error("rope_scaling", "[8]", NL_ERR_FORMAT, "rope_scaling", "an array");
    expect_error("partial_rotary_factor", "0.5", NL_ERR_UNSUPPORTED, "partial_rotary_factor",
                 NULL);
    expect_error("quantization_config", "{\"quant_method\": \"awq\", \"bits\": 4}",
                 NL_ERR_UNSUPPORTED, "quantization_config", "awq");
    expect_error("quantization_config", "{\"quant_method\": \"fp8\"}", NL_ERR_UNSUPPORTED,
                 "quantization_config", "fp8");
    expect_error("num_experts", "64", NL_ERR_UNSUPPORTED, "num_experts", "mixture-of-experts");
    expect_error("num_local_experts", "8", NL_ERR_UNSUPPORTED, "num_local_experts", NULL);
    expect_error("n_routed_experts", "256", NL_ERR_UNSUPPORTED, "n_routed_experts", NULL);
    expect_error("rope_parameters", "{\"rope_theta\": \"big\"}", NL_ERR_FORMAT,
                 "rope_parameters.rope_theta", NULL);
    expect_error("eos_token_id", "\"</s>\"", NL_ERR_FORMAT, "eos_token_id", "a string");
    expect_error("eos_token_id", "[151645, 999999]", NL_ERR_FORMAT, "eos_token_id[1]", "999999");
    expect_error("eos_token_id", "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]", NL_ERR_UNSUPPORTED,
                 "eos_token_id", "17");
    expect_error("bos_token_id", "151936", NL_ERR_FORMAT, "bos_token_id", "151936");
    expect_error("tie_word_embeddings", "1", NL_ERR_FORMAT, "tie_word_embeddings", "true or false");
    expect_error("architectures", "[\"MistralForCausalLM\"]", NL_ERR_UNSUPPORTED,
                 "MistralForCausalLM", "LlamaForCausalLM");
    expect_error("use_sliding_window", "true", NL_ERR_UNSUPPORTED, "use_sliding_window", NULL);
    expect_error("hidden_act", "\"gelu\"", NL_ERR_UNSUPPORTED, "hidden_act", "\"gelu\"");
    /* zero experts and a disabled quantization are plain dense models */
    nl_model_config c;
    ck_assert_int_eq(parse_edited("num_experts", "0", &c), NL_OK);
    ck_assert_int_eq(parse_edited("quantization_config", "null", &c), NL_OK);
}
END_TEST

START_TEST(test_head_dim_default_needs_divisible)
{
    nl_model_config c;
    json_t *root = json_loads(qwen3_06b, 0, NULL);
    json_object_del(root, "head_dim");
    json_object_set_new(root, "hidden_size", json_integer(1000)); /* 1000 % 16 != 0 */
    char *text = json_dumps(root, 0);
    json_decref(root);
    ck_assert_int_eq(model_config_parse(text, "hd.json", &c), NL_ERR_FORMAT);
    free(text);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "hd.json"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "hidden_size = 1000"));
}
END_TEST

START_TEST(test_bad_json)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_parse("{\"hidden_size\": 12,", "broken.json", &c),
                     NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "broken.json"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "line 1"));
    ck_assert_int_eq(model_config_parse("[1, 2]", "arr.json", &c), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "arr.json"));
    ck_assert_int_eq(model_config_parse("{\"vocab_size\": 10}", "noarch.json", &c),
                     NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "model_type"));
}
END_TEST

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

START_TEST(test_load_missing_file)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_load("/nonexistent/model", &c), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "/nonexistent/model/config.json"));
}
END_TEST

/* A config.json that is a FIFO must not block the open forever, and one
 * that is a directory is not "invalid JSON": each is named for what it is. */
START_TEST(test_special_files_refused_by_type)
{
    char dir[] = "/tmp/nl_cfg_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    nl_model_config cfg;
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    alarm(10); /* a blocking open would hang here */
    ck_assert_int_eq(model_config_load(dir, &cfg), NL_ERR_IO);
    alarm(0);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "is a FIFO, not a regular file"));
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_eq(model_config_load(dir, &cfg), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "is a directory, not a regular file"));
    ck_assert_int_eq(rmdir(path), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(test_save_roundtrip)
{
    char dir[] = "/tmp/nl_cfg_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    nl_model_config a, b;
    ck_assert_int_eq(model_config_parse(qwen3_06b, "q3", &a), NL_OK);
    a.n_eos = 2;
    a.eos_token_ids[1] = 151643;
    ck_assert_int_eq(model_config_save(&a, dir), NL_OK);
    ck_assert_int_eq(model_config_load(dir, &b), NL_OK);
    ck_assert_mem_eq(&a, &b, sizeof a);

    /* The written file is what transformers reads: hub field names, and
     * the float fields as their short decimal forms. */
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    ck_assert_ptr_nonnull(root);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(root, "architectures"), 0)),
                     "Qwen3ForCausalLM");
    ck_assert_str_eq(json_string_value(json_object_get(root, "model_type")), "qwen3");
    ck_assert_str_eq(json_string_value(json_object_get(root, "hidden_act")), "silu");
    ck_assert_str_eq(json_string_value(json_object_get(root, "torch_dtype")), "bfloat16");
    ck_assert(json_is_true(json_object_get(root, "tie_word_embeddings")));
    ck_assert(json_is_true(json_object_get(root, "use_cache")));
    ck_assert_int_eq(json_integer_value(json_object_get(root, "head_dim")), 128);
    ck_assert(json_number_value(json_object_get(root, "rms_norm_eps")) == 1e-6);
    ck_assert(json_number_value(json_object_get(root, "rope_theta")) == 1e6);
    ck_assert(json_is_null(json_object_get(root, "rope_scaling")));
    json_decref(root);
    FILE *f = fopen(path, "r");
    char text[4096] = "";
    fread(text, 1, sizeof text - 1, f);
    fclose(f);
    ck_assert_msg(strstr(text, "\"rms_norm_eps\": 1e-6,"), "eps written as: %s", text);

    /* Qwen2 round trip keeps the biases and the arch. */
    ck_assert_int_eq(model_config_parse(qwen25_05b, "q2", &a), NL_OK);
    ck_assert_int_eq(model_config_save(&a, dir), NL_OK);
    ck_assert_int_eq(model_config_load(dir, &b), NL_OK);
    ck_assert_mem_eq(&a, &b, sizeof a);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}
END_TEST

START_TEST(test_llama31_hub)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_parse(llama31_8b, "l31", &c), NL_OK);
    ck_assert_int_eq(c.arch, NL_ARCH_LLAMA);
    ck_assert_int_eq(c.vocab_size, 128256);
    ck_assert_int_eq(c.hidden_size, 4096);
    ck_assert_int_eq(c.intermediate_size, 14336);
    ck_assert_int_eq(c.num_key_value_heads, 8);
    ck_assert_int_eq(c.head_dim, 128); /* hidden / heads */
    ck_assert_float_eq(c.rms_norm_eps, 1e-5f);
    ck_assert_float_eq(c.rope_theta, 5e5f);
    ck_assert_int_eq(c.rope_scaling.type, NL_ROPE_LLAMA3);
    ck_assert_float_eq(c.rope_scaling.factor, 8.0f);
    ck_assert_float_eq(c.rope_scaling.low_freq_factor, 1.0f);
    ck_assert_float_eq(c.rope_scaling.high_freq_factor, 4.0f);
    ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 8192);
    ck_assert(!c.attention_bias && !c.mlp_bias && !c.tie_word_embeddings);
    ck_assert_int_eq(c.bos_token_id, 128000);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert_int_eq(c.eos_token_ids[2], 128009);

    ck_assert_int_eq(model_config_parse(llama32_1b, "l32", &c), NL_OK);
    ck_assert_int_eq(c.head_dim, 64);
    ck_assert(c.tie_word_embeddings);
    ck_assert_float_eq(c.rope_scaling.factor, 32.0f);

    /* Llama's optional biases, and its hub config without rope scaling */
    ck_assert_int_eq(parse_text_edited(llama31_8b, "mlp_bias", "true", &c), NL_OK);
    ck_assert(c.mlp_bias && !c.attention_bias);
    ck_assert_int_eq(parse_text_edited(llama31_8b, "attention_bias", "true", &c), NL_OK);
    ck_assert(c.attention_bias);
    ck_assert_int_eq(parse_text_edited(llama31_8b, "rope_scaling", "null", &c), NL_OK);
    ck_assert_int_eq(c.rope_scaling.type, NL_ROPE_DEFAULT);
    /* the newer form, original_max_position_embeddings defaulting to
     * max_position_embeddings as transformers does */
    json_t *root = json_loads(llama32_1b, 0, NULL);
    json_object_del(root, "rope_scaling");
    json_object_del(root, "rope_theta");
    json_object_set_new(root, "rope_parameters",
                        json_pack("{s:s, s:i, s:i, s:i, s:f}", "rope_type", "llama3", "factor", 4,
                                  "low_freq_factor", 1, "high_freq_factor", 2, "rope_theta", 1e4));
    char *text = json_dumps(root, 0);
    json_decref(root);
    ck_assert_int_eq(model_config_parse(text, "newer", &c), NL_OK);
    free(text);
    ck_assert_int_eq(c.rope_scaling.type, NL_ROPE_LLAMA3);
    ck_assert_float_eq(c.rope_scaling.factor, 4.0f);
    ck_assert_float_eq(c.rope_scaling.high_freq_factor, 2.0f);
    ck_assert_int_eq(c.rope_scaling.original_max_position_embeddings, 131072);
    ck_assert_float_eq(c.rope_theta, 1e4f);
}
END_TEST

/* Each refusal names the file, the field and the value. */
static void expect_llama_error(const char *field, const char *value, nl_status status,
                               const char *frag1, const char *frag2)
{
    nl_model_config c;
    nl_status st = parse_text_edited(llama31_8b, field, value, &c);
    ck_assert_msg(st == status, "%s=%s: status %d, want %d (%s)", field, value ? value : "(del)",
                  st, status, nl_last_error());
    const char *msg = nl_last_error();
    ck_assert_msg(strstr(msg, "test/config.json") && strstr(msg, frag1) &&
                  (!frag2 || strstr(msg, frag2)), "%s=%s: %s", field, value, msg);
}

START_TEST(test_llama_refusals)
{
    const char *field = "rope_scaling";
    expect_llama_error(field, "{\"rope_type\": \"linear\", \"factor\": 2.0}", NL_ERR_UNSUPPORTED,
                       "rope_scaling.rope_type = \"linear\"", "llama3");
    expect_llama_error(field, "{\"type\": \"dynamic\", \"factor\": 2.0}", NL_ERR_UNSUPPORTED,
                       "\"dynamic\"", NULL);
    expect_llama_error(field, "{\"rope_type\": \"yarn\", \"factor\": 4.0}", NL_ERR_UNSUPPORTED,
                       "\"yarn\"", NULL);
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0}",
                       NL_ERR_FORMAT, "rope_scaling.high_freq_factor", "missing");
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0,"
                       " \"high_freq_factor\": 4.0}", NL_ERR_FORMAT, "high_freq_factor = 4", "greater");
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": -8.0, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0}", NL_ERR_FORMAT, "rope_scaling.factor = -8", NULL);
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": 1e-60, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0}", NL_ERR_FORMAT, "rope_scaling.factor", "float");
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 1.00000000001}", NL_ERR_FORMAT, "high_freq_factor", "floats");
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": \"8\", \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0}", NL_ERR_FORMAT, "rope_scaling.factor", "a string");
    expect_llama_error(field, "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
                       " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 0}",
                       NL_ERR_FORMAT, "rope_scaling.original_max_position_embeddings = 0", NULL);
    expect_llama_error("quantization_config", "{\"quant_method\": \"gptq\", \"bits\": 4}",
                       NL_ERR_UNSUPPORTED, "quantization_config", "gptq");
    expect_llama_error("num_local_experts", "8", NL_ERR_UNSUPPORTED, "num_local_experts", NULL);
    expect_llama_error("hidden_act", "\"gelu_pytorch_tanh\"", NL_ERR_UNSUPPORTED, "hidden_act",
                       "gelu_pytorch_tanh");
    expect_llama_error("use_sliding_window", "true", NL_ERR_UNSUPPORTED, "use_sliding_window", NULL);
    expect_llama_error("mlp_bias", "\"yes\"", NL_ERR_FORMAT, "mlp_bias", "true or false");
}
END_TEST

/* transformers' default table: 1 / theta^(2i/d) in float32. */
static double ref_default(double theta, int i, int d)
{
    return 1.0 / pow(theta, 2.0 * i / d);
}

/* _compute_llama3_parameters, read independently in double. */
static double ref_llama3(double inv, double factor, double low, double high, double old)
{
    double wavelen = 2 * M_PI / inv;
    if (wavelen < old / high) return inv;
    if (wavelen > old / low) return inv / factor;
    double smooth = (old / wavelen - low) / (high - low);
    return (1 - smooth) * inv / factor + smooth * inv;
}

START_TEST(test_rope_tables)
{
    nl_model_config c;
    ck_assert_int_eq(model_config_parse(llama31_8b, "l31", &c), NL_OK);
    float inv[64];
    model_rope_inv_freq(&c, inv);
    int kept = 0, scaled = 0, smoothed = 0;
    for (int i = 0; i < 64; i++) {
        double plain = ref_default(5e5, i, 128), want = ref_llama3(plain, 8, 1, 4, 8192);
        /* float32 steps, as transformers takes them: a few ulps off double */
        ck_assert_msg(fabs(inv[i] - want) <= 1e-6 * want, "inv_freq[%d] = %.9g, want %.9g", i,
                      inv[i], want);
        double wavelen = 2 * M_PI / plain;
        kept += wavelen < 2048, scaled += wavelen > 8192;
        smoothed += wavelen >= 2048 && wavelen <= 8192;
    }
    /* The 8B table has all three regions; the first pair is untouched and
     * the last is divided by the factor. */
    ck_assert(kept > 0 && scaled > 0 && smoothed > 0);
    ck_assert_float_eq(inv[0], 1.0f);
    ck_assert(fabs(inv[63] * 8.0 - ref_default(5e5, 63, 128)) <= 2e-7 * ref_default(5e5, 63, 128));

    /* Without scaling the table is the plain one. */
    ck_assert_int_eq(model_config_parse(qwen3_06b, "q3", &c), NL_OK);
    model_rope_inv_freq(&c, inv);
    for (int i = 0; i < 64; i++)
        ck_assert(fabs(inv[i] - ref_default(1e6, i, 128)) <= 2e-7 * ref_default(1e6, i, 128));
}
END_TEST

START_TEST(test_llama_save_roundtrip)
{
    char dir[] = "/tmp/nl_cfg_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    nl_model_config a, b;
    ck_assert_int_eq(parse_text_edited(llama31_8b, "mlp_bias", "true", &a), NL_OK);
    ck_assert_int_eq(model_config_save(&a, dir), NL_OK);
    ck_assert_int_eq(model_config_load(dir, &b), NL_OK);
    ck_assert_mem_eq(&a, &b, sizeof a);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(root, "model_type")), "llama");
    ck_assert(json_is_true(json_object_get(root, "mlp_bias")));
    ck_assert_ptr_null(json_object_get(root, "use_sliding_window")); /* a Qwen field */
    const json_t *rs = json_object_get(root, "rope_scaling");
    ck_assert_str_eq(json_string_value(json_object_get(rs, "rope_type")), "llama3");
    ck_assert(json_number_value(json_object_get(rs, "factor")) == 8.0);
    ck_assert_int_eq(json_integer_value(json_object_get(rs, "original_max_position_embeddings")), 8192);
    json_decref(root);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}
END_TEST

static Suite *model_config_suite(void)
{
    Suite *s = suite_create("model_config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_qwen3_hub);
    tcase_add_test(tc, test_special_files_refused_by_type);
    tcase_add_test(tc, test_eos_list_at_the_limit);
    tcase_add_test(tc, test_qwen2_hub);
    tcase_add_test(tc, test_newer_form);
    tcase_add_test(tc, test_model_type_only_and_eos_list);
    tcase_add_test(tc, test_qwen3_attention_bias);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_bad_fields);
    tcase_add_test(tc, test_head_dim_default_needs_divisible);
    tcase_add_test(tc, test_bad_json);
    tcase_add_test(tc, test_load_missing_file);
    tcase_add_test(tc, test_save_roundtrip);
    tcase_add_test(tc, test_llama31_hub);
    tcase_add_test(tc, test_llama_refusals);
    tcase_add_test(tc, test_rope_tables);
    tcase_add_test(tc, test_llama_save_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(model_config_suite());
}
