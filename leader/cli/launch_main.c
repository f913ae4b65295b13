/* launch_main.c — nanollm-launch: parses the global and engine options,
 * installs the Ctrl-C handler and dispatches to a command (cli.h).
 *
 *   nanollm-launch [--model DIR] [--tp N] [--device auto|cpu|cuda]
 *                  [engine options] COMMAND [command options] ...
 *
 * Exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input files,
 * 130 interrupted.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "nanollm.h"

static const char usage[] =
    "usage: nanollm-launch [--model DIR] [--tp N] [--device auto|cpu|cuda] [engine options]\n"
    "                      COMMAND [options] ...\n"
    "\n"
    "commands:\n"
    "  generate [sampling options] [--chat] PROMPT...   print completions\n"
    "  batch --input IN.jsonl --output OUT.jsonl [sampling options]\n"
    "                                                   offline batch job (JSONL in, JSONL out)\n"
    "  bench [--workload FILE.jsonl] [--num-seqs N]     throughput run (output tokens/s)\n"
    "  tokenize [--replace-invalid] [--no-special]      stdin text -> JSON array of ids\n"
    "  detokenize [--skip-special-tokens]               stdin JSON array of ids -> text\n"
    "  mkmodel --out DIR [--preset NAME] ...            write a random-weight model\n"
    "\n"
    "global options:\n"
    "  --model DIR                 Hugging Face model directory (default: the built-in demo\n"
    "                              model: random weights, real Qwen3 tokenizer)\n"
    "  --tp N                      tensor-parallel workers (default 1)\n"
    "  --device auto|cpu|cuda      (default auto: CUDA when built with it and a GPU is visible)\n"
    "\n"
    "engine options:\n"
    "  --max-num-seqs N            seqs per step (default 512)\n"
    "  --max-num-batched-tokens N  tokens per step; longer prompts are chunked (default 16384)\n"
    "  --max-model-len N           prompt + output limit (default: the model's, capped by the KV cache)\n"
    "  --gpu-memory-utilization F  share of GPU memory to use, in (0, 1] (default 0.9)\n"
    "  --block-size N              tokens per KV block, a multiple of 16 (default 16)\n"
    "  --num-kv-blocks N           KV blocks (default: sized from memory)\n"
    "  --enforce-eager             no CUDA graphs\n"
    "  --no-prefix-caching         do not share KV blocks between prompts\n"
    "\n"
    "sampling options (generate; defaults for batch lines):\n"
    "  --max-tokens N (16)  --temperature F (1.0; 0 = greedy)  --top-k N (0 = off)\n"
    "  --top-p F (1.0)  --min-p F (0)  --seed N  --ignore-eos  --stop STRING (repeatable)\n"
    "  --logprobs N (0-20)\n"
    "\n"
    "exit codes: 0 success, 1 runtime failure, 2 bad usage or bad input, 130 interrupted\n";

static void on_signal(int sig)
{
    (void)sig;
    nl_kill_all_workers();
    _exit(130);
}

static int install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
        perror("nanollm-launch: sigaction");
        return -1;
    }
    return 0;
}

static int bad_usage(void)
{
    fprintf(stderr, "Try 'nanollm-launch --help'.\n");
    return 2;
}

int main(int argc, char **argv)
{
    nl_engine_config config;
    nl_engine_config_init(&config);
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        const char *v;
        int64_t iv;
        double fv;
        int m;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            printf("nanollm %s\n", nl_version());
            return 0;
        }
        if (strcmp(a, "--enforce-eager") == 0) {
            config.enforce_eager = true;
            continue;
        }
        if (strcmp(a, "--no-prefix-caching") == 0) {
            config.enable_prefix_caching = false;
            continue;
        }
        if ((m = cli_option(argc, argv, &i, "--model", &v))) {
            if (m < 0) return bad_usage();
            if (v[0] == '\0') {
                fprintf(stderr, "nanollm-launch: --model: empty directory name\n");
                return bad_usage();
            }
            config.model_dir = v;
            continue;
        }
        if ((m = cli_option(argc, argv, &i, "--device", &v))) {
            if (m < 0) return bad_usage();
            if (strcmp(v, "auto") == 0) config.device = NL_DEVICE_AUTO;
            else if (strcmp(v, "cpu") == 0) config.device = NL_DEVICE_CPU;
            else if (strcmp(v, "cuda") == 0) config.device = NL_DEVICE_CUDA;
            else {
                fprintf(stderr, "nanollm-launch: --device: '%s' is not auto, cpu or cuda\n", v);
                return bad_usage();
            }
            continue;
        }
        struct { const char *name; int64_t lo, hi; int32_t *dst; } ints[] = {
            {"--tp", 1, 64, &config.tp},
            {"--max-num-seqs", 1, 65536, &config.max_num_seqs},
            {"--max-num-batched-tokens", 1, 1 << 24, &config.max_num_batched_tokens},
            {"--max-model-len", 1, INT32_MAX, &config.max_model_len},
            {"--block-size", 16, 4096, &config.block_size},
            {"--num-kv-blocks", 1, INT32_MAX, &config.num_kv_blocks},
        };
        bool matched = false;
        for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
            if (!(m = cli_option(argc, argv, &i, ints[k].name, &v))) continue;
            if (m < 0 || !cli_parse_int(ints[k].name, v, ints[k].lo, ints[k].hi, &iv)) return bad_usage();
            *ints[k].dst = (int32_t)iv;
            matched = true;
            break;
        }
        if (matched) continue;
        if ((m = cli_option(argc, argv, &i, "--gpu-memory-utilization", &v))) {
            if (m < 0 || !cli_parse_float("--gpu-memory-utilization", v, 0.0, 1.0, &fv)) return bad_usage();
            if (fv <= 0.0) {
                fprintf(stderr, "nanollm-launch: --gpu-memory-utilization: '%s' must be in (0, 1]\n", v);
                return bad_usage();
            }
            config.gpu_memory_utilization = (float)fv;
            continue;
        }
        fprintf(stderr, "nanollm-launch: unknown option '%s'\n", a);
        return bad_usage();
    }
    if (i >= argc) {
        fprintf(stderr, "nanollm-launch: no command given (generate, batch, bench, tokenize, detokenize, mkmodel)\n");
        return bad_usage();
    }
    if (config.block_size % 16 != 0) {
        fprintf(stderr, "nanollm-launch: --block-size: %d is not a multiple of 16\n", config.block_size);
        return bad_usage();
    }
    if (config.max_num_batched_tokens < config.max_num_seqs) {
        fprintf(stderr, "nanollm-launch: --max-num-batched-tokens: %d is below --max-num-seqs (%d)\n",
                config.max_num_batched_tokens, config.max_num_seqs);
        return bad_usage();
    }
    const char *cmd = argv[i];
    int sub_argc = argc - i - 1;
    char **sub_argv = argv + i + 1;
    if (install_signals() != 0) return 1;
    if (strcmp(cmd, "generate") == 0) return cli_generate(&config, sub_argc, sub_argv);
    if (strcmp(cmd, "batch") == 0) return cli_batch(&config, sub_argc, sub_argv);
    if (strcmp(cmd, "bench") == 0) return cli_bench(&config, sub_argc, sub_argv);
    if (strcmp(cmd, "tokenize") == 0) return cli_tokenize(config.model_dir, sub_argc, sub_argv);
    if (strcmp(cmd, "detokenize") == 0) return cli_detokenize(config.model_dir, sub_argc, sub_argv);
    if (strcmp(cmd, "mkmodel") == 0) return cli_mkmodel(sub_argc, sub_argv);
    fprintf(stderr, "nanollm-launch: unknown command '%s'\n", cmd);
    return bad_usage();
}
