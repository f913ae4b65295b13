/* model_config.c — config.json to nl_model_config, and back.
 *
 * Owns the mapping between the Hugging Face config of a Qwen3 / Qwen2 /
 * Llama causal LM and the engine's nl_model_config: which fields are read,
 * their defaults (those of transformers' config classes), which fields are
 * refused because they change the numbers, and the limits every
 * value must respect before any allocation is sized from it.  Which
 * architectures exist is the family registry's (model_family.c); the tensor
 * list derived from a config lives in model_tensors.c.
 */
#include "common/model_config.h"
#include "common/model_family.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/file.h"

/* Limits far above any real dense model, low enough that products of them
 * (hidden * vocab, heads * head_dim ...) stay well inside int64. */
#define CFG_MAX_LAYERS 1024
#define CFG_MAX_HIDDEN 65536
#define CFG_MAX_INTER (1 << 20)
#define CFG_MAX_HEADS 1024
#define CFG_MAX_HEAD_DIM 1024
#define CFG_MAX_POSITIONS (1 << 24)
#define CFG_MAX_VOCAB INT32_MAX /* 2^31 - 1: ids are int32 */

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Reads an integer field into [lo, hi]; absent (or null) yields def unless
 * required. */
static nl_status get_int(const json_t *root, const char *src, const char *field, bool required,
                         int64_t def, int64_t lo, int64_t hi, int64_t *out)
{
    const json_t *v = json_object_get(root, field);
    if (!v || json_is_null(v)) {
        if (required) return nl_error(NL_ERR_FORMAT, "%s: missing field %s", src, field);
        *out = def;
        return NL_OK;
    }
    if (!json_is_integer(v))
        return nl_error(NL_ERR_FORMAT, "%s: field %s must be an integer, got %s", src, field,
                        json_type_name(v));
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi)
        return nl_error(NL_ERR_FORMAT, "%s: field %s = %" PRId64 " is out of range [%" PRId64
                        ", %" PRId64 "]", src, field, x, lo, hi);
    *out = x;
    return NL_OK;
}

/* Reads a number (integer or real) field; the range check is done by the
 * caller, which knows whether the interval is open. */
static nl_status get_num(const json_t *obj, const char *src, const char *field, double def,
                         double *out)
{
    const json_t *v = json_object_get(obj, field);
    if (!v || json_is_null(v)) {
        *out = def;
        return NL_OK;
    }
    if (!json_is_number(v))
        return nl_error(NL_ERR_FORMAT, "%s: field %s must be a number, got %s", src, field,
                        json_type_name(v));
    *out = json_number_value(v);
    return NL_OK;
}

static nl_status get_bool(const json_t *root, const char *src, const char *field, bool def,
                          bool *out)
{
    const json_t *v = json_object_get(root, field);
    if (!v || json_is_null(v)) {
        *out = def;
        return NL_OK;
    }
    if (!json_is_boolean(v))
        return nl_error(NL_ERR_FORMAT, "%s: field %s must be true or false, got %s", src, field,
                        json_type_name(v));
    *out = json_is_true(v);
    return NL_OK;
}

/* The family registry (model_family.c) decides which names are supported. */
static nl_status parse_arch(const json_t *root, const char *src, nl_arch *arch)
{
    char names[256];
    const json_t *archs = json_object_get(root, "architectures");
    const json_t *first = json_is_array(archs) ? json_array_get(archs, 0) : NULL;
    if (json_is_string(first)) {
        const char *a = json_string_value(first);
        const model_family *f = model_family_by_architecture(a);
        if (!f) {
            model_family_names(false, names, sizeof names);
            return nl_error(NL_ERR_UNSUPPORTED, "%s: architectures[0] = \"%s\" is not supported "
                            "(%s)", src, a, names);
        }
        *arch = f->arch;
        return NL_OK;
    }
    const json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt)) {
        const char *t = json_string_value(mt);
        const model_family *f = model_family_by_model_type(t);
        if (!f) {
            model_family_names(true, names, sizeof names);
            return nl_error(NL_ERR_UNSUPPORTED, "%s: model_type = \"%s\" is not supported (%s)",
                            src, t, names);
        }
        *arch = f->arch;
        return NL_OK;
    }
    return nl_error(NL_ERR_FORMAT, "%s: neither architectures[0] nor model_type names the model",
                    src);
}

/* A number field of a rope object, required and finite; messages name it
 * as field.key. */
static nl_status get_rope_num(const json_t *obj, const char *src, const char *field,
                              const char *key, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return nl_error(NL_ERR_FORMAT, "%s: %s.%s is missing", src, field, key);
    if (!json_is_number(v))
        return nl_error(NL_ERR_FORMAT, "%s: field %s.%s must be a number, got %s", src, field,
                        key, json_type_name(v));
    *out = json_number_value(v);
    /* kept as a float: it must stay positive as one */
    if (!((float)*out > 0) || *out > 1e9)
        return nl_error(NL_ERR_FORMAT, "%s: field %s.%s = %g must be a positive number "
                        "representable as a float, at most 1e9", src, field, key, *out);
    return NL_OK;
}

/* Llama 3.1's rope_scaling: {"rope_type": "llama3", "factor",
 * "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}
 * (the last defaults to max_position_embeddings, as in transformers). */
static nl_status parse_llama3_rope(const json_t *obj, const char *src, const char *field,
                                   int32_t max_pos, nl_rope_scaling *r)
{
    double factor, low, high;
    NL_TRY(get_rope_num(obj, src, field, "factor", &factor));
    NL_TRY(get_rope_num(obj, src, field, "low_freq_factor", &low));
    NL_TRY(get_rope_num(obj, src, field, "high_freq_factor", &high));
    if (!((float)high > (float)low))
        return nl_error(NL_ERR_FORMAT, "%s: %s.high_freq_factor = %g must be greater than "
                        "low_freq_factor = %g (as floats)", src, field, high, low);
    int64_t orig;
    char key[96];
    snprintf(key, sizeof key, "%s.original_max_position_embeddings", field);
    const json_t *v = json_object_get(obj, "original_max_position_embeddings");
    if (!v || json_is_null(v)) {
        orig = max_pos;
    } else if (!json_is_integer(v)) {
        return nl_error(NL_ERR_FORMAT, "%s: field %s must be an integer, got %s", src, key,
                        json_type_name(v));
    } else {
        orig = (int64_t)json_integer_value(v);
        if (orig < 1 || orig > CFG_MAX_POSITIONS)
            return nl_error(NL_ERR_FORMAT, "%s: field %s = %" PRId64 " is out of range [1, %d]",
                            src, key, orig, CFG_MAX_POSITIONS);
    }
    *r = (nl_rope_scaling){.type = NL_ROPE_LLAMA3, .factor = (float)factor,
                           .low_freq_factor = (float)low, .high_freq_factor = (float)high,
                           .original_max_position_embeddings = (int32_t)orig};
    return NL_OK;
}

/* rope_scaling (hub form) or rope_parameters (newer form; rope_scaling wins
 * when both are set, as transformers reads them).  The plain rotary
 * embedding and Llama 3's rescaling are implemented; any other type changes
 * every position's rotation, so it is refused by name rather than run
 * with the wrong positions.  The theta is parsed by the caller. */
static nl_status parse_rope_scaling(const json_t *root, const char *src, int32_t max_pos,
                                    nl_rope_scaling *r)
{
    static const char *const fields[] = {"rope_scaling", "rope_parameters"};
    const json_t *obj = NULL;
    const char *field = NULL;
    for (int i = 0; i < 2; i++) {
        const json_t *o = json_object_get(root, fields[i]);
        if (!o || json_is_null(o)) continue;
        if (!json_is_object(o))
            return nl_error(NL_ERR_FORMAT, "%s: field %s must be an object or null, got %s", src,
                            fields[i], json_type_name(o));
        if (!obj && json_object_size(o) > 0) obj = o, field = fields[i];
    }
    memset(r, 0, sizeof *r);
    r->type = NL_ROPE_DEFAULT;
    const json_t *prf = obj ? json_object_get(obj, "partial_rotary_factor") : NULL;
    if (!prf) prf = json_object_get(root, "partial_rotary_factor");
    if (prf && !json_is_null(prf) && !(json_is_number(prf) && json_number_value(prf) == 1.0))
        return nl_error(NL_ERR_UNSUPPORTED, "%s: partial_rotary_factor other than 1 is not "
                        "supported (every head dimension is rotated)", src);
    if (!obj) return NL_OK;
    const json_t *t = json_object_get(obj, "rope_type");
    if (!t || json_is_null(t)) t = json_object_get(obj, "type");
    if (!t || json_is_null(t)) return NL_OK;
    if (!json_is_string(t))
        return nl_error(NL_ERR_FORMAT, "%s: field %s.rope_type must be a string, got %s", src,
                        field, json_type_name(t));
    const char *type = json_string_value(t);
    if (!strcmp(type, "default")) return NL_OK;
    if (!strcmp(type, "llama3")) return parse_llama3_rope(obj, src, field, max_pos, r);
    return nl_error(NL_ERR_UNSUPPORTED, "%s: %s.rope_type = \"%s\" is not supported "
                    "(supported: \"default\", \"llama3\")", src, field, type);
}

/* Fields that change the model's numbers in ways the engine does not
 * implement.  Each is refused by name: running such a checkpoint as a
 * plain dense model would produce plausible-looking garbage. */
static nl_status check_unsupported(const json_t *root, const char *src)
{
    const json_t *q = json_object_get(root, "quantization_config");
    if (q && !json_is_null(q)) {
        const char *method = json_string_value(json_object_get(q, "quant_method"));
        return nl_error(NL_ERR_UNSUPPORTED, "%s: quantization_config (quant_method \"%s\") is "
                        "not supported: only unquantized bfloat16, float16 and float32 "
                        "checkpoints load", src, method ? method : "?");
    }
    /* Mixture-of-experts routing (Qwen MoE, Mixtral, DeepSeek names). */
    static const char *const moe[] = {"num_experts", "num_local_experts", "n_routed_experts",
                                      "num_experts_per_tok"};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
        const json_t *v = json_object_get(root, moe[i]);
        if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
            return nl_error(NL_ERR_UNSUPPORTED, "%s: %s is set: mixture-of-experts models are "
                            "not supported", src, moe[i]);
    }
    bool sliding;
    NL_TRY(get_bool(root, src, "use_sliding_window", false, &sliding));
    if (sliding)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: use_sliding_window = true (sliding_window "
                        "attention) is not supported", src);
    const json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act) &&
        (!json_is_string(act) || strcmp(json_string_value(act), "silu")))
        return nl_error(NL_ERR_UNSUPPORTED, "%s: hidden_act = %s%s%s is not supported (only "
                        "\"silu\")", src, json_is_string(act) ? "\"" : "",
                        json_is_string(act) ? json_string_value(act) : json_type_name(act),
                        json_is_string(act) ? "\"" : "");
    return NL_OK;
}

static nl_status parse_dtype(const json_t *root, const char *src, nl_dtype *out)
{
    const char *field = "dtype";
    const json_t *v = json_object_get(root, field);
    if (!v || json_is_null(v)) {
        field = "torch_dtype";
        v = json_object_get(root, field);
    }
    if (!v || json_is_null(v)) {
        *out = NL_DTYPE_BF16; /* the dtype every Qwen checkpoint ships in */
        return NL_OK;
    }
    if (!json_is_string(v))
        return nl_error(NL_ERR_FORMAT, "%s: field %s must be a string, got %s", src, field,
                        json_type_name(v));
    const char *s = json_string_value(v);
    if (!strcmp(s, "bfloat16")) *out = NL_DTYPE_BF16;
    else if (!strcmp(s, "float16")) *out = NL_DTYPE_F16;
    else if (!strcmp(s, "float32")) *out = NL_DTYPE_F32;
    else
        return nl_error(NL_ERR_UNSUPPORTED, "%s: field %s = \"%s\" is not supported "
                        "(bfloat16, float16, float32)", src, field, s);
    return NL_OK;
}

static nl_status parse_token_ids(const json_t *root, const char *src, nl_model_config *c)
{
    int64_t bos;
    NL_TRY(get_int(root, src, "bos_token_id", false, -1, 0, c->vocab_size - 1, &bos));
    c->bos_token_id = (int32_t)bos;
    return model_config_parse_eos_ids(json_object_get(root, "eos_token_id"), src, c->vocab_size,
                                      c->eos_token_ids, &c->n_eos);
}

nl_status model_config_parse_eos_ids(const json_t *v, const char *src, int64_t id_limit,
                                     int32_t ids[NL_MAX_EOS], int32_t *n_ids)
{
    *n_ids = 0;
    if (!v || json_is_null(v)) return NL_OK;
    if (json_is_integer(v)) {
        json_int_t id = json_integer_value(v);
        if (id < 0 || id >= id_limit)
            return nl_error(NL_ERR_FORMAT, "%s: field eos_token_id = %" JSON_INTEGER_FORMAT
                            " is out of range [0, %" PRId64 "]", src, id, id_limit - 1);
        ids[(*n_ids)++] = (int32_t)id;
        return NL_OK;
    }
    if (!json_is_array(v))
        return nl_error(NL_ERR_FORMAT, "%s: field eos_token_id must be an integer or a list of "
                        "integers, got %s", src, json_type_name(v));
    if (json_array_size(v) > NL_MAX_EOS)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: field eos_token_id lists %zu ids (limit %d)", src,
                        json_array_size(v), NL_MAX_EOS);
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_integer(e))
            return nl_error(NL_ERR_FORMAT, "%s: field eos_token_id[%zu] must be an integer, got %s",
                            src, i, json_type_name(e));
        json_int_t id = json_integer_value(e);
        if (id < 0 || id >= id_limit)
            return nl_error(NL_ERR_FORMAT, "%s: field eos_token_id[%zu] = %" JSON_INTEGER_FORMAT
                            " is out of range [0, %" PRId64 ")", src, i, id, id_limit);
        ids[(*n_ids)++] = (int32_t)id;
    }
    return NL_OK;
}

static nl_status parse_root(const json_t *root, const char *src, nl_model_config *c)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(root))
        return nl_error(NL_ERR_FORMAT, "%s: top level must be an object, got %s", src,
                        json_type_name(root));
    NL_TRY(parse_arch(root, src, &c->arch));

    int64_t vocab, hidden, inter, layers, heads, kv, head_dim, max_pos;
    NL_TRY(get_int(root, src, "vocab_size", true, 0, 1, CFG_MAX_VOCAB, &vocab));
    NL_TRY(get_int(root, src, "hidden_size", true, 0, 1, CFG_MAX_HIDDEN, &hidden));
    NL_TRY(get_int(root, src, "intermediate_size", true, 0, 1, CFG_MAX_INTER, &inter));
    NL_TRY(get_int(root, src, "num_hidden_layers", true, 0, 1, CFG_MAX_LAYERS, &layers));
    NL_TRY(get_int(root, src, "num_attention_heads", true, 0, 1, CFG_MAX_HEADS, &heads));
    NL_TRY(get_int(root, src, "num_key_value_heads", false, heads, 1, CFG_MAX_HEADS, &kv));
    NL_TRY(get_int(root, src, "max_position_embeddings", false, 32768, 1, CFG_MAX_POSITIONS,
                   &max_pos));
    if (heads % kv)
        return nl_error(NL_ERR_FORMAT, "%s: num_attention_heads = %" PRId64 " is not a multiple "
                        "of num_key_value_heads = %" PRId64, src, heads, kv);

    const json_t *hd = json_object_get(root, "head_dim");
    if (hd && !json_is_null(hd)) {
        NL_TRY(get_int(root, src, "head_dim", true, 0, 1, CFG_MAX_HEAD_DIM, &head_dim));
    } else {
        if (hidden % heads)
            return nl_error(NL_ERR_FORMAT, "%s: head_dim is absent and hidden_size = %" PRId64
                            " is not a multiple of num_attention_heads = %" PRId64, src, hidden,
                            heads);
        head_dim = hidden / heads;
        if (head_dim > CFG_MAX_HEAD_DIM)
            return nl_error(NL_ERR_FORMAT, "%s: head_dim = hidden_size / num_attention_heads = "
                            "%" PRId64 " exceeds %d", src, head_dim, CFG_MAX_HEAD_DIM);
    }
    if (head_dim % 2)
        return nl_error(NL_ERR_FORMAT, "%s: head_dim = %" PRId64 " must be even (rotary pairs)",
                        src, head_dim);

    c->vocab_size = (int32_t)vocab;
    c->hidden_size = (int32_t)hidden;
    c->intermediate_size = (int32_t)inter;
    c->num_hidden_layers = (int32_t)layers;
    c->num_attention_heads = (int32_t)heads;
    c->num_key_value_heads = (int32_t)kv;
    c->head_dim = (int32_t)head_dim;
    c->max_position_embeddings = (int32_t)max_pos;

    double eps;
    NL_TRY(get_num(root, src, "rms_norm_eps", 1e-6, &eps));
    /* checked as the float it becomes: 1e-60 is positive as a double and
     * 0 as a float, which would divide by zero in RMSNorm */
    if (!(eps < 1) || !((float)eps > 0))
        return nl_error(NL_ERR_FORMAT, "%s: field rms_norm_eps = %g must be in (0, 1) and "
                        "representable as a float", src, eps);
    c->rms_norm_eps = (float)eps;

    NL_TRY(check_unsupported(root, src));
    NL_TRY(parse_rope_scaling(root, src, c->max_position_embeddings, &c->rope_scaling));
    /* The newer form nests the theta under rope_parameters; it wins when both
     * are present, as it does in transformers. */
    const json_t *rp = json_object_get(root, "rope_parameters");
    double theta;
    NL_TRY(get_num(root, src, "rope_theta", 10000.0, &theta));
    const char *theta_field = "rope_theta";
    const json_t *rp_theta = json_is_object(rp) ? json_object_get(rp, "rope_theta") : NULL;
    if (rp_theta && !json_is_null(rp_theta)) {
        theta_field = "rope_parameters.rope_theta";
        if (!json_is_number(rp_theta))
            return nl_error(NL_ERR_FORMAT, "%s: field %s must be a number, got %s", src,
                            theta_field, json_type_name(rp_theta));
        theta = json_number_value(rp_theta);
    }
    if (!((float)theta > 0) || !isfinite(theta) || theta > 3.0e38)
        return nl_error(NL_ERR_FORMAT, "%s: field %s = %g must be a positive finite number", src,
                        theta_field, theta);
    c->rope_theta = (float)theta;

    NL_TRY(get_bool(root, src, "tie_word_embeddings", false, &c->tie_word_embeddings));
    /* Some families always have q/k/v biases (Qwen2's modelling code ignores
     * the flag); the others have them only when the config asks. */
    const bool bias_always = model_family_of(c)->bias_always;
    NL_TRY(get_bool(root, src, "attention_bias", bias_always, &c->attention_bias));
    if (bias_always) c->attention_bias = true;
    /* Llama's gate/up/down biases; families whose modelling code has no
     * such field have no such tensors in their table either. */
    NL_TRY(get_bool(root, src, "mlp_bias", false, &c->mlp_bias));

    NL_TRY(parse_dtype(root, src, &c->dtype));
    return parse_token_ids(root, src, c);
}

nl_status model_config_parse(const char *json_text, const char *source, nl_model_config *out)
{
    json_error_t err;
    json_t *root = json_loads(json_text, 0, &err);
    if (!root)
        return nl_error(NL_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", source,
                        err.line, err.column, err.text);
    nl_status st = parse_root(root, source, out);
    json_decref(root);
    return st;
}

nl_status model_config_load(const char *model_dir, nl_model_config *out)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", model_dir) >= sizeof path)
        return nl_error(NL_ERR_INVALID_ARG, "%s: model path too long", model_dir);
    json_t *root;
    NL_TRY(nl_file_read_json(path, true, &root));
    nl_status st = parse_root(root, path, out);
    json_decref(root);
    return st;
}

/* The shortest decimal that reads back as the same float, so that 1e-6f is
 * written as 1e-06 and not 9.99999997e-07. */
static json_t *json_float(float f)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f) break;
    }
    return json_real(strtod(buf, NULL));
}

static const char *dtype_torch_name(nl_dtype t)
{
    switch (t) {
    case NL_DTYPE_F16: return "float16";
    case NL_DTYPE_F32: return "float32";
    default: return "bfloat16";
    }
}

nl_status model_config_save(const nl_model_config *cfg, const char *model_dir)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/config.json", model_dir) >= sizeof path)
        return nl_error(NL_ERR_INVALID_ARG, "%s: model path too long", model_dir);
    const model_family *family = model_family_of(cfg);
    if (!family) return nl_error(NL_ERR_INVALID_ARG, "%s: unknown arch %d", path, (int)cfg->arch);

    json_t *eos;
    if (cfg->n_eos == 1) {
        eos = json_integer(cfg->eos_token_ids[0]);
    } else if (cfg->n_eos == 0) {
        eos = json_null();
    } else {
        eos = json_array();
        for (int i = 0; i < cfg->n_eos; i++)
            json_array_append_new(eos, json_integer(cfg->eos_token_ids[i]));
    }
    json_t *root = json_pack(
        "{s:[s], s:b, s:f, s:o, s:o, s:i, s:s, s:i, s:f, s:i, s:i}",
        "architectures", family->architecture,
        "attention_bias", (int)cfg->attention_bias,
        "attention_dropout", 0.0,
        "bos_token_id", cfg->bos_token_id >= 0 ? json_integer(cfg->bos_token_id) : json_null(),
        "eos_token_id", eos,
        "head_dim", (json_int_t)cfg->head_dim,
        "hidden_act", "silu",
        "hidden_size", (json_int_t)cfg->hidden_size,
        "initializer_range", 0.02,
        "intermediate_size", (json_int_t)cfg->intermediate_size,
        "max_position_embeddings", (json_int_t)cfg->max_position_embeddings);
    if (!root) return nl_error(NL_ERR_NOMEM, "%s: cannot build JSON", path);
    /* Each family's config class has its own extra fields; writing only
     * those keeps the file what the hub ships for that family. */
    const bool qwen = cfg->arch == NL_ARCH_QWEN3 || cfg->arch == NL_ARCH_QWEN2;
    if (qwen) json_object_set_new(root, "max_window_layers", json_integer(cfg->num_hidden_layers));
    else json_object_set_new(root, "mlp_bias", json_boolean(cfg->mlp_bias));
    json_object_set_new(root, "model_type", json_string(family->model_type));
    json_object_set_new(root, "num_attention_heads", json_integer(cfg->num_attention_heads));
    json_object_set_new(root, "num_hidden_layers", json_integer(cfg->num_hidden_layers));
    json_object_set_new(root, "num_key_value_heads", json_integer(cfg->num_key_value_heads));
    if (!qwen) json_object_set_new(root, "pretraining_tp", json_integer(1));
    json_object_set_new(root, "rms_norm_eps", json_float(cfg->rms_norm_eps));
    json_t *scaling = json_null();
    if (cfg->rope_scaling.type == NL_ROPE_LLAMA3) {
        const nl_rope_scaling *r = &cfg->rope_scaling;
        scaling = json_object();
        json_object_set_new(scaling, "factor", json_float(r->factor));
        json_object_set_new(scaling, "high_freq_factor", json_float(r->high_freq_factor));
        json_object_set_new(scaling, "low_freq_factor", json_float(r->low_freq_factor));
        json_object_set_new(scaling, "original_max_position_embeddings",
                            json_integer(r->original_max_position_embeddings));
        json_object_set_new(scaling, "rope_type", json_string("llama3"));
    }
    json_object_set_new(root, "rope_scaling", scaling);
    json_object_set_new(root, "rope_theta", json_float(cfg->rope_theta));
    if (qwen) json_object_set_new(root, "sliding_window", json_null());
    json_object_set_new(root, "tie_word_embeddings", json_boolean(cfg->tie_word_embeddings));
    json_object_set_new(root, "torch_dtype", json_string(dtype_torch_name(cfg->dtype)));
    json_object_set_new(root, "use_cache", json_true());
    if (qwen) json_object_set_new(root, "use_sliding_window", json_false());
    json_object_set_new(root, "vocab_size", json_integer(cfg->vocab_size));

    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                                        JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc) return nl_error(NL_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return NL_OK;
}
