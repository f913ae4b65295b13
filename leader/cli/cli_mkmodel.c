/* cli_mkmodel.c — `nanollm-launch mkmodel`: a random-weight model on disk.
 *
 * Starts from a preset and applies shape overrides, so tests can make many
 * small variants (Qwen2 biases, untied heads, odd head counts) with one
 * command.  The writing itself is mkmodel.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"
#include "leader/modelgen/mkmodel.h"

static void usage(FILE *f)
{
    fputs("usage: nanollm-launch mkmodel --out DIR [--preset NAME] [--seed N]\n"
          "         [--tokenizer DIR] [--shard-size MB]\n"
          "         [--arch qwen2|qwen3] [--vocab N] [--hidden N] [--inter N] [--layers N]\n"
          "         [--heads N] [--kv-heads N] [--head-dim N] [--tie|--no-tie] [--max-pos N]\n"
          "presets:", f);
    for (const char *const *p = mkmodel_preset_names; *p; p++) fprintf(f, " %s", *p);
    fputs(" (default tiny)\n", f);
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mkmodel: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    usage(stderr);
    return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Shape overrides, applied after the preset whatever their order. */
typedef struct override {
    const char *flag;
    int64_t value;
    bool set;
} override;

enum { OV_VOCAB, OV_HIDDEN, OV_INTER, OV_LAYERS, OV_HEADS, OV_KV, OV_HEAD_DIM, OV_MAX_POS, OV_N };

int cli_mkmodel(int argc, char **argv)
{
    const char *preset = "tiny", *out = NULL, *arch = NULL;
    mkmodel_options opt = {0};
    int tie = -1;
    override ov[OV_N] = {
        [OV_VOCAB] = {"--vocab"},   [OV_HIDDEN] = {"--hidden"}, [OV_INTER] = {"--inter"},
        [OV_LAYERS] = {"--layers"}, [OV_HEADS] = {"--heads"},   [OV_KV] = {"--kv-heads"},
        [OV_HEAD_DIM] = {"--head-dim"}, [OV_MAX_POS] = {"--max-pos"},
    };

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--tie")) { tie = 1; continue; }
        if (!strcmp(a, "--no-tie")) { tie = 0; continue; }
        if (strncmp(a, "--", 2))
            return bad_usage("unexpected argument \"%s\"", a);
        /* Every other option takes a value: "--opt VALUE" or "--opt=VALUE". */
        char flag[64];
        const char *val, *eq = strchr(a, '=');
        if (eq) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - a), a);
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
            if (i + 1 >= argc) return bad_usage("option %s needs a value", a);
            val = argv[++i];
        }
        if (!strcmp(flag, "--preset")) preset = val;
        else if (!strcmp(flag, "--out")) out = val;
        else if (!strcmp(flag, "--tokenizer")) opt.tokenizer_dir = val;
        else if (!strcmp(flag, "--arch")) arch = val;
        else if (!strcmp(flag, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(val, &end, 10);
            if (errno || end == val || *end || val[0] == '-')
                return bad_usage("--seed %s: not a non-negative integer", val);
            opt.seed = s;
        } else if (!strcmp(flag, "--shard-size")) {
            char *end;
            double mb = strtod(val, &end);
            if (end == val || *end || !(mb > 0) || mb > 1e9)
                return bad_usage("--shard-size %s: not a positive number of MB", val);
            opt.shard_bytes = (int64_t)(mb * 1e6);
            if (opt.shard_bytes < 1) opt.shard_bytes = 1;
        } else {
            int k = 0;
            while (k < OV_N && strcmp(flag, ov[k].flag)) k++;
            if (k == OV_N) return bad_usage("unknown option %s", flag);
            if (!parse_i64(val, 1, INT32_MAX, &ov[k].value))
                return bad_usage("%s %s: not a positive integer", flag, val);
            ov[k].set = true;
        }
    }
    if (!out) return bad_usage("--out DIR is required");

    nl_model_config cfg;
    if (mkmodel_preset(preset, &cfg)) return bad_usage("%s", nl_last_error());
    if (arch) {
        if (!strcmp(arch, "qwen3")) cfg.arch = NL_ARCH_QWEN3, cfg.attention_bias = false;
        else if (!strcmp(arch, "qwen2")) cfg.arch = NL_ARCH_QWEN2, cfg.attention_bias = true;
        else return bad_usage("--arch %s: expected qwen2 or qwen3", arch);
    }
    int32_t *fields[OV_N] = {
        &cfg.vocab_size, &cfg.hidden_size, &cfg.intermediate_size, &cfg.num_hidden_layers,
        &cfg.num_attention_heads, &cfg.num_key_value_heads, &cfg.head_dim,
        &cfg.max_position_embeddings,
    };
    for (int k = 0; k < OV_N; k++)
        if (ov[k].set) *fields[k] = (int32_t)ov[k].value;
    if (tie >= 0) cfg.tie_word_embeddings = tie;
    /* A vocabulary smaller than Qwen's has no room for its special ids: the
     * last id becomes the end of text and there is no bos. */
    if (cfg.bos_token_id >= cfg.vocab_size) cfg.bos_token_id = -1;
    for (int i = 0; i < cfg.n_eos; i++)
        if (cfg.eos_token_ids[i] >= cfg.vocab_size) cfg.eos_token_ids[i] = cfg.vocab_size - 1;

    nl_status st = mkmodel_write(&cfg, &opt, out);
    if (st) {
        fprintf(stderr, "%s\n", nl_last_error());
        /* A shape the config reader refuses is bad input, not a failure. */
        return st == NL_ERR_FORMAT || st == NL_ERR_INVALID_ARG || st == NL_ERR_UNSUPPORTED ? 2
                                                                                           : 1;
    }
    return 0;
}
