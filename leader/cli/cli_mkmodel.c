/* cli_mkmodel.c — `nanollm-launch mkmodel`: a random-weight model on disk.
 *
 * Starts from a preset and applies shape overrides, so tests can make many
 * small variants (Qwen2 biases, Llama biases and rope scaling, untied
 * heads, odd head counts) with one command.  The writing itself is
 * mkmodel.c's.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "leader/modelgen/mkmodel.h"

enum {
    OPT_OUT = CLI_OWN, OPT_PRESET, OPT_SEED, OPT_TOKENIZER, OPT_NO_TOKENIZER, OPT_SHARD_SIZE, OPT_ARCH,
    OPT_TIE, OPT_NO_TIE, OPT_ATTENTION_BIAS, OPT_MLP_BIAS, OPT_ROPE_LLAMA3, OPT_ROPE_THETA, OPT_RMS_EPS,
    OPT_VOCAB, OPT_HIDDEN, OPT_INTER, OPT_LAYERS, OPT_HEADS, OPT_KV, OPT_HEAD_DIM, OPT_MAX_POS, /* shapes */
};
#define N_SHAPES (OPT_MAX_POS - OPT_VOCAB + 1)

static const struct option options[] = {
    {"out", required_argument, NULL, OPT_OUT},
    {"preset", required_argument, NULL, OPT_PRESET},
    {"seed", required_argument, NULL, OPT_SEED},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"no-tokenizer", no_argument, NULL, OPT_NO_TOKENIZER},
    {"shard-size", required_argument, NULL, OPT_SHARD_SIZE},
    {"arch", required_argument, NULL, OPT_ARCH},
    {"tie", no_argument, NULL, OPT_TIE},
    {"no-tie", no_argument, NULL, OPT_NO_TIE},
    {"attention-bias", no_argument, NULL, OPT_ATTENTION_BIAS},
    {"mlp-bias", no_argument, NULL, OPT_MLP_BIAS},
    {"rope-llama3", required_argument, NULL, OPT_ROPE_LLAMA3},
    {"rope-theta", required_argument, NULL, OPT_ROPE_THETA},
    {"rms-eps", required_argument, NULL, OPT_RMS_EPS},
    {"vocab", required_argument, NULL, OPT_VOCAB},
    {"hidden", required_argument, NULL, OPT_HIDDEN},
    {"inter", required_argument, NULL, OPT_INTER},
    {"layers", required_argument, NULL, OPT_LAYERS},
    {"heads", required_argument, NULL, OPT_HEADS},
    {"kv-heads", required_argument, NULL, OPT_KV},
    {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
    {"max-pos", required_argument, NULL, OPT_MAX_POS},
    {NULL, 0, NULL, 0},
};

static void print_presets(void)
{
    fputs("presets:", stdout);
    for (const char *const *p = mkmodel_preset_names; *p; p++) printf(" %s", *p);
    fputs(" (default tiny)\n", stdout);
}

const cli_command cli_mkmodel_command = {
    .name = "mkmodel",
    .options = options,
    .help =
    "usage: nanollm-launch mkmodel --out DIR [--preset NAME] [--seed N]\n"
    "         [--tokenizer DIR | --no-tokenizer] [--shard-size MB]\n"
    "         [--arch qwen2|qwen3|llama] [--vocab N] [--hidden N] [--inter N] [--layers N]\n"
    "         [--heads N] [--kv-heads N] [--head-dim N] [--tie|--no-tie] [--max-pos N]\n"
    "         [--attention-bias] [--mlp-bias] [--rope-llama3 FACTOR,LOW,HIGH,ORIGINAL_MAX]\n"
    "         [--rope-theta X] [--rms-eps X]\n"
    "\n"
    "Writes a random-weight model directory (deterministic in --seed) into DIR, which must\n"
    "not exist or be empty.  The shape options override the preset's (below).  An --arch\n"
    "of another family than the preset's brings that family's defaults with it (vocabulary,\n"
    "special ids, rope theta and scaling, rms eps): a Qwen preset made llama gets Llama 3's\n"
    "theta 500000 and eps 1e-5, a Llama preset made qwen2/qwen3 gets Qwen's 1e6 and 1e-6;\n"
    "the options after it override those in turn.\n"
    "The tokenizer files come from --tokenizer DIR, else from where the demo model's come\n"
    "from ($NANOLLM_TOKENIZER_DIR or the cache) when that tokenizer fits the vocabulary;\n"
    "a Llama model takes the Llama 3 tokenizer instead ($NANOLLM_LLAMA3_TOKENIZER_DIR or\n"
    "the cache's tokenizer-llama3, see tools/fetch-tokenizer.sh);\n"
    "--no-tokenizer writes a model that takes token ids only.\n",
    .help_more = print_presets,
};

/* Where a Llama model's tokenizer comes from: $NANOLLM_LLAMA3_TOKENIZER_DIR,
 * else the cache folder tools/fetch-tokenizer.sh fills. */
static void llama_tokenizer_dir(char *out, size_t cap)
{
    const char *env = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (env && env[0]) snprintf(out, cap, "%s", env);
    else if (xdg && xdg[0]) snprintf(out, cap, "%s/nanollm/tokenizer-llama3", xdg);
    else snprintf(out, cap, "%s/.cache/nanollm/tokenizer-llama3", home ? home : ".");
}

/* The tokenizer folder from (NULL: the demo model's) when it is there and
 * fits a vocabulary of vocab ids (copied into *dir), else a note on stderr
 * and false. */
static bool default_tokenizer(const char *from, int32_t vocab, char *dir, size_t cap)
{
    nl_tokenizer *t;
    if (nl_tokenizer_open(from, &t) != NL_OK) {
        fprintf(stderr, "nanollm-launch mkmodel: note: no tokenizer copied (%s); the model takes token "
                "ids only\n", nl_last_error());
        return false;
    }
    nl_tokenizer_info info;
    nl_tokenizer_get_info(t, &info);
    snprintf(dir, cap, "%s", info.dir);
    nl_tokenizer_close(t);
    char config[4200];
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    if (info.vocab_size > vocab || access(config, R_OK) != 0) {
        if (info.vocab_size > vocab)
            fprintf(stderr, "nanollm-launch mkmodel: note: the tokenizer in %s (%d ids) does not fit a "
                    "vocabulary of %d: the model takes token ids only\n", dir, info.vocab_size, vocab);
        else
            fprintf(stderr, "nanollm-launch mkmodel: note: %s has no tokenizer_config.json: the model "
                    "takes token ids only\n", dir);
        return false;
    }
    return true;
}

/* Whether path exists and is anything but an empty directory. */
static bool occupied(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) return false;
    if (!S_ISDIR(sb.st_mode)) return true;
    DIR *d = opendir(path);
    if (!d) return true;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = false;
    closedir(d);
    return !empty;
}

int cli_mkmodel(int argc, char **argv)
{
    const char *preset = "tiny", *out = NULL, *arch = NULL, *rope_llama3 = NULL;
    double rope_theta = 0, rms_eps = 0;
    mkmodel_options opt = {0};
    int tie = -1;
    bool no_tokenizer = false, attention_bias = false, mlp_bias = false;
    int64_t shape[N_SHAPES];
    bool shape_set[N_SHAPES] = {false};
    cli_parser p;
    if (!cli_parser_init(&p, &cli_mkmodel_command, NULL, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        bool ok = true;
        switch (c) {
        case OPT_OUT: out = v; break;
        case OPT_PRESET: preset = v; break;
        case OPT_TOKENIZER: opt.tokenizer_dir = v; break;
        case OPT_NO_TOKENIZER: no_tokenizer = true; break;
        case OPT_ARCH: arch = v; break;
        case OPT_TIE: tie = 1; break;
        case OPT_NO_TIE: tie = 0; break;
        case OPT_ATTENTION_BIAS: attention_bias = true; break;
        case OPT_MLP_BIAS: mlp_bias = true; break;
        case OPT_ROPE_LLAMA3: rope_llama3 = v; break;
        case OPT_ROPE_THETA:
        case OPT_RMS_EPS: {
            char *end;
            double x = strtod(v, &end);
            bool theta = c == OPT_ROPE_THETA;
            if (end == v || *end || !(x > 0) || x > (theta ? 1e12 : 1.0)) {
                ok = cli_usage_error(&p, "--%s: '%s' is not a number in (0, %s]", theta ? "rope-theta" : "rms-eps",
                                     v, theta ? "1e12" : "1") != CLI_EXIT;
                break;
            }
            *(theta ? &rope_theta : &rms_eps) = x;
            break;
        }
        case OPT_SEED: {
            char *end;
            errno = 0;
            unsigned long long seed = strtoull(v, &end, 10);
            if (errno || end == v || *end || v[0] == '-')
                ok = cli_usage_error(&p, "--seed: '%s' is not a non-negative integer", v) != CLI_EXIT;
            opt.seed = seed;
            break;
        }
        case OPT_SHARD_SIZE: {
            char *end;
            double mb = strtod(v, &end);
            if (end == v || *end || !(mb > 0) || mb > 1e9) {
                ok = cli_usage_error(&p, "--shard-size: '%s' is not a positive number of MB", v) != CLI_EXIT;
                break;
            }
            opt.shard_bytes = (int64_t)(mb * 1e6);
            if (opt.shard_bytes < 1) opt.shard_bytes = 1;
            break;
        }
        case CLI_POSITIONAL:
            ok = cli_usage_error(&p, "unexpected argument '%s'", v) != CLI_EXIT;
            break;
        default:
            if (c >= OPT_VOCAB && c <= OPT_MAX_POS) {
                char name[32];
                snprintf(name, sizeof name, "--%s", options[c - OPT_OUT].name);
                ok = cli_parse_int(&p, name, v, 1, INT32_MAX, &shape[c - OPT_VOCAB]);
                shape_set[c - OPT_VOCAB] = true;
            } else {
                ok = cli_usage_error(&p, "option %d has no handler", c) != CLI_EXIT;
            }
        }
        if (!ok) break;
    }
    cli_parser_free(&p);
    if (c != CLI_DONE) return p.exit;
    if (!out) {
        cli_usage_error(&p, "--out DIR is required");
        return p.exit;
    }
    if (no_tokenizer && opt.tokenizer_dir) {
        cli_usage_error(&p, "--tokenizer and --no-tokenizer exclude each other");
        return p.exit;
    }
    if (occupied(out)) {
        cli_usage_error(&p, "--out %s: exists and is not an empty directory", out);
        return p.exit;
    }

    nl_model_config cfg;
    if (mkmodel_preset(preset, &cfg)) {
        cli_usage_error(&p, "--preset: %s", nl_last_error());
        return p.exit;
    }
    if (arch) {
        if (!strcmp(arch, "qwen3")) mkmodel_set_arch(&cfg, NL_ARCH_QWEN3);
        else if (!strcmp(arch, "qwen2")) mkmodel_set_arch(&cfg, NL_ARCH_QWEN2);
        else if (!strcmp(arch, "llama")) mkmodel_set_arch(&cfg, NL_ARCH_LLAMA);
        else {
            cli_usage_error(&p, "--arch: '%s' is not qwen2, qwen3 or llama", arch);
            return p.exit;
        }
    }
    if (rope_theta > 0) cfg.rope_theta = (float)rope_theta;
    if (rms_eps > 0) cfg.rms_norm_eps = (float)rms_eps;
    if (attention_bias) cfg.attention_bias = true;
    if (mlp_bias) cfg.mlp_bias = true;
    if (rope_llama3) {
        nl_rope_scaling *r = &cfg.rope_scaling;
        int orig, used = 0;
        if (sscanf(rope_llama3, "%f,%f,%f,%d%n", &r->factor, &r->low_freq_factor,
                   &r->high_freq_factor, &orig, &used) != 4 || rope_llama3[used] != '\0') {
            cli_usage_error(&p, "--rope-llama3: '%s' is not FACTOR,LOW,HIGH,ORIGINAL_MAX", rope_llama3);
            return p.exit;
        }
        r->type = NL_ROPE_LLAMA3;
        r->original_max_position_embeddings = orig;
    }
    int32_t *fields[N_SHAPES] = {
        &cfg.vocab_size, &cfg.hidden_size, &cfg.intermediate_size, &cfg.num_hidden_layers,
        &cfg.num_attention_heads, &cfg.num_key_value_heads, &cfg.head_dim,
        &cfg.max_position_embeddings,
    };
    for (int k = 0; k < N_SHAPES; k++)
        if (shape_set[k]) *fields[k] = (int32_t)shape[k];
    if (tie >= 0) cfg.tie_word_embeddings = tie;
    /* A vocabulary smaller than Qwen's has no room for its special ids: the
     * last id becomes the end of text and there is no bos. */
    if (cfg.bos_token_id >= cfg.vocab_size) cfg.bos_token_id = -1;
    int n_eos = 0;
    for (int i = 0; i < cfg.n_eos; i++) {
        int32_t id = cfg.eos_token_ids[i] < cfg.vocab_size ? cfg.eos_token_ids[i] : cfg.vocab_size - 1;
        bool seen = false;
        for (int k = 0; k < n_eos; k++) seen |= cfg.eos_token_ids[k] == id;
        if (!seen) cfg.eos_token_ids[n_eos++] = id;
    }
    cfg.n_eos = n_eos;
    char tok_dir[4096], llama_dir[4096];
    llama_tokenizer_dir(llama_dir, sizeof llama_dir);
    const char *from = cfg.arch == NL_ARCH_LLAMA ? llama_dir : NULL;
    if (!opt.tokenizer_dir && !no_tokenizer &&
        default_tokenizer(from, cfg.vocab_size, tok_dir, sizeof tok_dir))
        opt.tokenizer_dir = tok_dir;

    nl_status st = mkmodel_write(&cfg, &opt, out);
    if (st) {
        fprintf(stderr, "nanollm-launch mkmodel: %s\n", nl_last_error());
        /* A shape the config reader refuses is bad input, not a failure. */
        return st == NL_ERR_FORMAT || st == NL_ERR_INVALID_ARG || st == NL_ERR_UNSUPPORTED ? 2 : 1;
    }
    return 0;
}
