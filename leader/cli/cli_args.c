/* cli_args.c — the option parser every nanollm-launch command shares.
 *
 * One getopt_long table per command: the global and engine options (applied
 * here to the parser's engine configuration, wherever they appear) followed
 * by the command's own, which go back to the command.  Positional arguments
 * come back in order (optstring "-"), so a command reads its prompts between
 * options as the user wrote them.  Every usage error reads the same, names
 * the option or value, and exits 2.  What an option means to a command is
 * the command's; what the engine does with a setting is the library's.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

enum {
    G_MODEL = 500, G_TP, G_DEVICE, G_THREADS, G_MAX_NUM_SEQS, G_MAX_NUM_BATCHED_TOKENS, G_MAX_MODEL_LEN,
    G_GPU_MEMORY_UTILIZATION, G_BLOCK_SIZE, G_NUM_KV_BLOCKS, G_ENFORCE_EAGER, G_NO_PREFIX_CACHING,
    G_PREFIX_CACHING, G_DEVICES, G_ALL_REDUCE, G_KV_CACHE_DTYPE, G_PREFILL_FIRST, G_NO_ASYNC, G_ASYNC,
    G_HELP, G_VERSION, G_END,
};

/* vLLM's names are aliases: --tensor-parallel-size, --num-gpu-blocks-override,
 * --enable-prefix-caching / --no-enable-prefix-caching. */
static const struct option global_options[] = {
    {"model", required_argument, NULL, G_MODEL},
    {"tp", required_argument, NULL, G_TP},
    {"tensor-parallel-size", required_argument, NULL, G_TP},
    {"device", required_argument, NULL, G_DEVICE},
    {"threads", required_argument, NULL, G_THREADS},
    {"max-num-seqs", required_argument, NULL, G_MAX_NUM_SEQS},
    {"max-num-batched-tokens", required_argument, NULL, G_MAX_NUM_BATCHED_TOKENS},
    {"max-model-len", required_argument, NULL, G_MAX_MODEL_LEN},
    {"gpu-memory-utilization", required_argument, NULL, G_GPU_MEMORY_UTILIZATION},
    {"block-size", required_argument, NULL, G_BLOCK_SIZE},
    {"num-kv-blocks", required_argument, NULL, G_NUM_KV_BLOCKS},
    {"num-gpu-blocks-override", required_argument, NULL, G_NUM_KV_BLOCKS},
    {"kv-cache-dtype", required_argument, NULL, G_KV_CACHE_DTYPE},
    {"enforce-eager", no_argument, NULL, G_ENFORCE_EAGER},
    {"no-prefix-caching", no_argument, NULL, G_NO_PREFIX_CACHING},
    {"no-enable-prefix-caching", no_argument, NULL, G_NO_PREFIX_CACHING},
    {"enable-prefix-caching", no_argument, NULL, G_PREFIX_CACHING},
    {"prefill-first", no_argument, NULL, G_PREFILL_FIRST},
    {"no-async-scheduling", no_argument, NULL, G_NO_ASYNC},
    {"async-scheduling", no_argument, NULL, G_ASYNC},
    {"devices", required_argument, NULL, G_DEVICES},
    {"all-reduce", required_argument, NULL, G_ALL_REDUCE},
    {"help", no_argument, NULL, G_HELP},
    {"version", no_argument, NULL, G_VERSION},
};
#define N_GLOBAL (sizeof(global_options) / sizeof(global_options[0]))

static const char global_help[] =
    "global options (before or after the command):\n"
    "  --model DIR                 Hugging Face model directory (default: the built-in demo\n"
    "                              model: random weights, real Qwen3 tokenizer)\n"
    "  --tp N                      tensor-parallel workers (default 1; alias --tensor-parallel-size)\n"
    "  --device auto|cpu|cuda      (default auto: CUDA when built with it and a GPU is visible)\n"
    "  --threads N                 CPU backend: threads per worker (default: the cores / --tp)\n"
    "  --devices LIST              GPU of each rank, one per rank (default: rank r on GPU r);\n"
    "                              ranks may share a GPU (--tp 4 --devices 0,0,0,0) and then\n"
    "                              split its --gpu-memory-utilization share\n"
    "  --all-reduce auto|ipc|nccl  how GPU ranks combine shards (default auto: CUDA IPC when\n"
    "                              all ranks' GPUs are one GPU or have peer access, else NCCL)\n"
    "  -h, --help                  this help;  --version  the library's version\n"
    "\n"
    "engine options:\n"
    "  --max-num-seqs N            seqs per step (default 512)\n"
    "  --max-num-batched-tokens N  tokens per step; longer prompts are chunked (default 16384;\n"
    "                              serve: 2048)\n"
    "  --max-model-len N           prompt + output limit (default: the model's, capped by the KV cache)\n"
    "  --gpu-memory-utilization F  share of GPU memory to use, in (0, 1] (default 0.9)\n"
    "  --block-size N              tokens per KV block, a multiple of 16 (default 16)\n"
    "  --num-kv-blocks N           KV blocks (default: sized from memory; alias\n"
    "                              --num-gpu-blocks-override)\n"
    "  --kv-cache-dtype auto|bf16|fp8  KV cache elements (default auto: bf16 on CUDA, fp32 on\n"
    "                              the CPU; fp8 is e4m3, twice the tokens of bf16)\n"
    "  --enforce-eager             no CUDA graphs\n"
    "  --no-prefix-caching         do not share KV blocks between prompts (alias\n"
    "                              --no-enable-prefix-caching; --enable-prefix-caching: the default)\n"
    "  --prefill-first             no mixed steps: a step with prompt work to do carries only\n"
    "                              prompt chunks, decodes run in steps of their own (default:\n"
    "                              every step carries the running decodes plus prompt chunks)\n"
    "  --no-async-scheduling       one step at a time: the next step is scheduled after the\n"
    "                              last one's reply (default: step N + 1 is sent before step\n"
    "                              N's reply is read, so the workers need not wait for the\n"
    "                              leader's handling of it)\n"
    "\n"
    "exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted\n";

static const char commands_help[] =
    "usage: nanollm-launch [global options] COMMAND [options] ...\n"
    "\n"
    "commands (each answers --help):\n"
    "  generate [sampling options] [--chat] PROMPT...   print completions (PROMPT '-': stdin)\n"
    "  batch --input IN.jsonl --output OUT.jsonl [sampling options]\n"
    "                                                   offline batch job (JSONL in, JSONL out)\n"
    "  bench [--workload FILE.jsonl] [--num-seqs N]     throughput run (output tokens/s)\n"
    "  serve [--host H] [--port N] [--api-key KEY] ...  OpenAI-compatible HTTP server\n"
    "  tokenize [--replace-invalid] [--no-special]      stdin text -> JSON array of ids\n"
    "  detokenize [--skip-special-tokens]               stdin JSON array of ids -> text\n"
    "  chat-template                                    stdin chat request JSON -> rendered prompt\n"
    "  mkmodel --out DIR [--preset NAME] ...            write a random-weight model\n"
    "\n";

void cli_print_usage(void)
{
    fputs(commands_help, stdout);
    fputs(CLI_SAMPLING_HELP "  (generate; the defaults of batch lines)\n\n", stdout);
    fputs(global_help, stdout);
}

static void print_help(const cli_command *cmd)
{
    if (!cmd->help) {
        cli_print_usage();
        return;
    }
    fputs(cmd->help, stdout);
    if (cmd->help_more) cmd->help_more();
    fputc('\n', stdout);
    fputs(global_help, stdout);
}

int cli_usage_error(cli_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (p->cmd->name) fprintf(stderr, "nanollm-launch %s: ", p->cmd->name);
    else fputs("nanollm-launch: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see --help)\n", stderr);
    p->exit = 2;
    return CLI_EXIT;
}

bool cli_parser_init(cli_parser *p, const cli_command *cmd, const nl_engine_config *config, int argc,
                     char **argv)
{
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    if (config) p->config = *config;
    else nl_engine_config_init(&p->config);
    /* 0 until the options are read: --max-num-batched-tokens accepts no 0 */
    if (cmd->default_step_tokens > 0) p->config.max_num_batched_tokens = 0;
    size_t n_own = 0;
    while (cmd->options && cmd->options[n_own].name) n_own++;
    p->table = calloc(N_GLOBAL + n_own + 1, sizeof(struct option));
    /* getopt wants the program's name first; a copy also keeps the
     * caller's argv in its order. */
    p->argv = calloc((size_t)argc + 2, sizeof(char *));
    if (!p->table || !p->argv) {
        fprintf(stderr, "nanollm-launch: out of memory\n");
        cli_parser_free(p);
        return false;
    }
    memcpy(p->table, global_options, sizeof(global_options));
    if (n_own) memcpy(p->table + N_GLOBAL, cmd->options, n_own * sizeof(struct option));
    p->argv[0] = "nanollm-launch";
    for (int i = 0; i < argc; i++) p->argv[i + 1] = argv[i];
    p->argc = argc + 1;
    optind = 0; /* glibc: start afresh, even after an earlier parse */
    opterr = 0;
    return true;
}

void cli_parser_free(cli_parser *p)
{
    free(p->table);
    free(p->argv);
    p->table = NULL;
    p->argv = NULL;
}

bool cli_parse_int(cli_parser *p, const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) {
        cli_usage_error(p, "%s: '%s' is not an integer in [%lld, %lld]", name, text, (long long)lo,
                        (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(cli_parser *p, const char *name, const char *text, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(p, "%s: '%s' is not a number in [%g, %g]", name, text, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* The option as the user wrote it, without "=VALUE". */
static void option_name(const char *arg, char *out, size_t cap)
{
    size_t n = strcspn(arg, "=");
    snprintf(out, cap, "%.*s", (int)n, arg);
}

/* Names of the table's options that begin with prefix: several with
 * different meanings make the prefix ambiguous. */
static int count_prefixed(const cli_parser *p, const char *prefix)
{
    size_t n = strlen(prefix);
    int count = 0, last_val = -1;
    for (const struct option *o = p->table; o->name; o++)
        if (strncmp(o->name, prefix, n) == 0 && o->val != last_val) {
            count++;
            last_val = o->val;
        }
    return count;
}

/* The long name of val in the table, for messages. */
static const char *name_of(const cli_parser *p, int val)
{
    for (const struct option *o = p->table; o->name; o++)
        if (o->val == val) return o->name;
    return "?";
}

/* --devices' list outlives the parser: the config only points at it.  As
 * many entries as --tp allows ranks. */
#define CLI_MAX_DEVICES 64
static int32_t parsed_devices[CLI_MAX_DEVICES];

/* "0,0,1": one GPU index per rank. */
static int parse_devices(cli_parser *p, const char *text, nl_engine_config *cf)
{
    int n = 0;
    const char *s = text;
    for (;;) {
        char item[32];
        size_t len = strcspn(s, ",");
        if (len == 0 || len >= sizeof item)
            return cli_usage_error(p, "--devices: '%s' is not a comma-separated list of GPU indices",
                                   text);
        if (n == CLI_MAX_DEVICES)
            return cli_usage_error(p, "--devices: '%s' lists more than %d GPUs", text, CLI_MAX_DEVICES);
        memcpy(item, s, len);
        item[len] = '\0';
        int64_t v;
        if (!cli_parse_int(p, "--devices", item, 0, 1023, &v)) return CLI_EXIT;
        parsed_devices[n++] = (int32_t)v;
        if (s[len] == '\0') break;
        s += len + 1;
    }
    cf->devices = parsed_devices;
    cf->n_devices = n;
    return 0;
}

static int apply_global(cli_parser *p, int c, const char *v)
{
    nl_engine_config *cf = &p->config;
    int64_t iv;
    double fv;
    switch (c) {
    case G_MODEL:
        if (v[0] == '\0') return cli_usage_error(p, "--model: empty directory name");
        cf->model_dir = v;
        return 0;
    case G_DEVICE:
        if (strcmp(v, "auto") == 0) cf->device = NL_DEVICE_AUTO;
        else if (strcmp(v, "cpu") == 0) cf->device = NL_DEVICE_CPU;
        else if (strcmp(v, "cuda") == 0) cf->device = NL_DEVICE_CUDA;
        else return cli_usage_error(p, "--device: '%s' is not auto, cpu or cuda", v);
        return 0;
    case G_GPU_MEMORY_UTILIZATION:
        if (!cli_parse_float(p, "--gpu-memory-utilization", v, 0.0, 1.0, &fv)) return CLI_EXIT;
        if (fv <= 0.0) return cli_usage_error(p, "--gpu-memory-utilization: '%s' must be in (0, 1]", v);
        cf->gpu_memory_utilization = (float)fv;
        return 0;
    case G_KV_CACHE_DTYPE:
        if (strcmp(v, "auto") == 0) cf->kv_cache_dtype = NL_KV_CACHE_AUTO;
        else if (strcmp(v, "bf16") == 0) cf->kv_cache_dtype = NL_KV_CACHE_BF16;
        else if (strcmp(v, "fp8") == 0) cf->kv_cache_dtype = NL_KV_CACHE_FP8;
        else return cli_usage_error(p, "--kv-cache-dtype: '%s' is not auto, bf16 or fp8", v);
        return 0;
    case G_ENFORCE_EAGER:
        cf->enforce_eager = true;
        return 0;
    case G_DEVICES:
        return parse_devices(p, v, cf);
    case G_ALL_REDUCE:
        if (strcmp(v, "auto") == 0) cf->all_reduce = NL_ALL_REDUCE_AUTO;
        else if (strcmp(v, "ipc") == 0) cf->all_reduce = NL_ALL_REDUCE_IPC;
        else if (strcmp(v, "nccl") == 0) cf->all_reduce = NL_ALL_REDUCE_NCCL;
        else return cli_usage_error(p, "--all-reduce: '%s' is not auto, ipc or nccl", v);
        return 0;
    case G_NO_PREFIX_CACHING:
        cf->enable_prefix_caching = false;
        return 0;
    case G_PREFIX_CACHING:
        cf->enable_prefix_caching = true;
        return 0;
    case G_PREFILL_FIRST:
        cf->prefill_first = true;
        return 0;
    case G_NO_ASYNC:
        cf->async_scheduling = false;
        return 0;
    case G_ASYNC:
        cf->async_scheduling = true;
        return 0;
    case G_VERSION:
        printf("nanollm %s\n", nl_version());
        p->exit = 0;
        return CLI_EXIT;
    }
    static const struct { int c; const char *name; int64_t lo, hi; size_t field; } ints[] = {
        {G_TP, "--tp", 1, 64, offsetof(nl_engine_config, tp)},
        {G_THREADS, "--threads", 1, 1024, offsetof(nl_engine_config, cpu_threads)},
        {G_MAX_NUM_SEQS, "--max-num-seqs", 1, 65536, offsetof(nl_engine_config, max_num_seqs)},
        {G_MAX_NUM_BATCHED_TOKENS, "--max-num-batched-tokens", 1, 1 << 24,
         offsetof(nl_engine_config, max_num_batched_tokens)},
        {G_MAX_MODEL_LEN, "--max-model-len", 1, INT32_MAX, offsetof(nl_engine_config, max_model_len)},
        {G_BLOCK_SIZE, "--block-size", 16, 4096, offsetof(nl_engine_config, block_size)},
        {G_NUM_KV_BLOCKS, "--num-kv-blocks", 1, INT32_MAX, offsetof(nl_engine_config, num_kv_blocks)},
    };
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
        if (ints[k].c != c) continue;
        if (!cli_parse_int(p, ints[k].name, v, ints[k].lo, ints[k].hi, &iv)) return CLI_EXIT;
        *(int32_t *)((char *)cf + ints[k].field) = (int32_t)iv;
        return 0;
    }
    return cli_usage_error(p, "option %d has no handler", c);
}

/* The engine options together, once all are read; a command's own default
 * step budget is settled here, against the final --max-num-seqs. */
static int check_config(cli_parser *p)
{
    nl_engine_config *cf = &p->config;
    if (cf->max_num_batched_tokens == 0)
        cf->max_num_batched_tokens = p->cmd->default_step_tokens > cf->max_num_seqs
                                         ? p->cmd->default_step_tokens
                                         : cf->max_num_seqs;
    if (cf->block_size % 16 != 0)
        return cli_usage_error(p, "--block-size: %d is not a multiple of 16", cf->block_size);
    if (cf->devices && cf->n_devices != cf->tp)
        return cli_usage_error(p, "--devices: %d GPU(s) listed for --tp %d: list one GPU per rank",
                               cf->n_devices, cf->tp);
    if (cf->max_num_batched_tokens < cf->max_num_seqs)
        return cli_usage_error(p, "--max-num-batched-tokens: %d is below --max-num-seqs (%d)",
                               cf->max_num_batched_tokens, cf->max_num_seqs);
    return CLI_DONE;
}

int cli_next(cli_parser *p, const char **value)
{
    *value = NULL;
    for (;;) {
        if (p->after_dashes) {
            /* After "--" everything is positional. */
            if (optind >= p->argc) return check_config(p);
            *value = p->argv[optind++];
            return CLI_POSITIONAL;
        }
        int c = getopt_long(p->argc, p->argv, "-:h", p->table, NULL);
        if (c == -1) {
            p->after_dashes = true;
            continue;
        }
        if (c == 1) {
            *value = optarg;
            return CLI_POSITIONAL;
        }
        if (c == 'h' || c == G_HELP) {
            print_help(p->cmd);
            p->exit = 0;
            return CLI_EXIT;
        }
        if (c == ':') {
            char name[128];
            option_name(p->argv[optind - 1], name, sizeof name);
            return cli_usage_error(p, "option '%s' needs a value", name);
        }
        if (c == '?') {
            char name[128];
            if (optopt >= 500)
                return cli_usage_error(p, "option '--%s' takes no value", name_of(p, optopt));
            if (optopt != 0) return cli_usage_error(p, "unknown option '-%c'", optopt);
            option_name(p->argv[optind - 1], name, sizeof name);
            if (strncmp(name, "--", 2) == 0 && count_prefixed(p, name + 2) > 1)
                return cli_usage_error(p, "ambiguous option '%s'", name);
            return cli_usage_error(p, "unknown option '%s'", name);
        }
        if (c >= G_MODEL && c < G_END) {
            int rc = apply_global(p, c, optarg);
            if (rc == CLI_EXIT) return CLI_EXIT;
            continue;
        }
        *value = optarg;
        return c;
    }
}

/* ---- sampling options ----------------------------------------------------- */

void cli_sampling_init(cli_sampling *s)
{
    memset(s, 0, sizeof(*s));
    nl_sampling_params_init(&s->params);
    s->params.stop = s->stop;
}

int cli_sampling_option(cli_parser *p, int id, const char *v, cli_sampling *s)
{
    nl_sampling_params *sp = &s->params;
    int64_t iv;
    double fv;
    switch (id) {
    case CLI_OPT_IGNORE_EOS:
        sp->ignore_eos = true;
        return 1;
    case CLI_OPT_MAX_TOKENS:
        if (!cli_parse_int(p, "--max-tokens", v, 1, INT32_MAX / 2, &iv)) return CLI_EXIT;
        sp->max_tokens = (int32_t)iv;
        return 1;
    case CLI_OPT_TEMPERATURE:
        if (!cli_parse_float(p, "--temperature", v, 0.0, 1e6, &fv)) return CLI_EXIT;
        sp->temperature = (float)fv;
        return 1;
    case CLI_OPT_TOP_K:
        if (!cli_parse_int(p, "--top-k", v, -1, INT32_MAX, &iv)) return CLI_EXIT;
        sp->top_k = (int32_t)iv;
        return 1;
    case CLI_OPT_TOP_P:
        if (!cli_parse_float(p, "--top-p", v, 0.0, 1.0, &fv)) return CLI_EXIT;
        if (fv <= 0.0) return cli_usage_error(p, "--top-p: '%s' must be in (0, 1]", v);
        sp->top_p = (float)fv;
        return 1;
    case CLI_OPT_MIN_P:
        if (!cli_parse_float(p, "--min-p", v, 0.0, 1.0, &fv)) return CLI_EXIT;
        sp->min_p = (float)fv;
        return 1;
    case CLI_OPT_SEED: {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (errno || end == v || *end != '\0' || v[0] == '-')
            return cli_usage_error(p, "--seed: '%s' is not a non-negative integer", v);
        sp->seed = seed;
        sp->has_seed = true;
        return 1;
    }
    case CLI_OPT_LOGPROBS:
        if (!cli_parse_int(p, "--logprobs", v, 0, 20, &iv)) return CLI_EXIT;
        sp->logprobs = (int32_t)iv;
        return 1;
    case CLI_OPT_STOP:
        if (v[0] == '\0') return cli_usage_error(p, "--stop: the stop string is empty");
        if (sp->n_stop >= CLI_MAX_STOP)
            return cli_usage_error(p, "--stop: at most %d stop strings", CLI_MAX_STOP);
        s->stop[sp->n_stop++] = v;
        return 1;
    }
    return 0;
}

/* ---- finding the command ----------------------------------------------------- */

/* Looks name up among the global options and cmd's: exact first, else a
 * prefix of exactly one meaning.  NULL when unknown or ambiguous. */
static const struct option *lookup(const cli_command *cmd, const char *name)
{
    const struct option *tables[2] = {global_options, cmd ? cmd->options : NULL};
    size_t lens[2] = {N_GLOBAL, SIZE_MAX};
    size_t n = strlen(name);
    const struct option *prefixed = NULL;
    int n_prefixed = 0;
    for (int t = 0; t < 2; t++) {
        for (size_t k = 0; tables[t] && k < lens[t] && tables[t][k].name; k++) {
            const struct option *o = &tables[t][k];
            if (strcmp(o->name, name) == 0) return o;
            if (strncmp(o->name, name, n) == 0 && (!prefixed || prefixed->val != o->val)) {
                prefixed = o;
                n_prefixed++;
            }
        }
    }
    return n_prefixed == 1 ? prefixed : NULL;
}

bool cli_option_takes_value(const cli_command *cmd, const char *name)
{
    const struct option *o = lookup(cmd, name);
    return o && o->has_arg == required_argument;
}
