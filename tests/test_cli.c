/* test_cli.c — nanollm-launch's user surface, run as a user runs it.
 *
 * - every command answers --help (and -h) with exit 0 and its own usage;
 * - every usage error reads "nanollm-launch CMD: WHAT (see --help)" and
 *   exits 2: unknown, ambiguous, value-less and value-taking options;
 * - global options work after the command, vLLM's names are aliases,
 *   --threads reaches the CPU worker, and --prefill-first reaches the
 *   engine from generate and serve;
 * - generate: --logprobs prints the same numbers the batch job writes, the
 *   timing line agrees with the token counts, prompts come from stdin and
 *   files, --chat takes --system;
 * - mkmodel refuses an occupied --out with 2, and copies the tokenizer it
 *   finds unless --no-tokenizer or the vocabulary is too small for it;
 * - detokenize writes U+0000 (it used to stop at it);
 * - tokenize adds the tokenizer's special tokens as Hugging Face's encode
 *   does (the post-processor, or tokenizer_config.json's add_bos_token and
 *   add_eos_token), and none with --no-add-special-tokens, for the real
 *   Llama 3 and Qwen3 tokenizers (each skipped when absent).
 * The engine runs use the built-in demo model on the CPU; they are skipped
 * without the Qwen3 tokenizer.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_root[256];
static char out_text[1 << 16], err_text[1 << 16];
static size_t out_len;

static const char *const commands[] = {"generate", "batch", "bench", "tokenize", "detokenize", "mkmodel"};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static size_t slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return n;
}

static void write_bytes(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static const char *path_in(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp_root, name);
    return buf[k];
}

/* Runs nanollm-launch with args (NULL-terminated) and stdin from in_path
 * (NULL: /dev/null); returns its exit code, stdout in out_text (out_len
 * bytes) and stderr in err_text. */
static int launch(const char *const *args, const char *in_path)
{
    const char *prog = getenv("NANOLLM_LAUNCH");
    ck_assert_msg(prog != NULL, "NANOLLM_LAUNCH is not set");
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp_root);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp_root);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || out < 0 || err < 0) _exit(126);
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        const char *argv[64] = {prog};
        int n = 1;
        for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) ck_assert_int_eq(errno, EINTR);
    out_len = slurp(out_path, out_text, sizeof out_text);
    slurp(err_path, err_text, sizeof err_text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static bool have_tokenizer(void)
{
    char path[4096];
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env && env[0]) snprintf(path, sizeof path, "%s/tokenizer.json", env);
    else snprintf(path, sizeof path, "%s/.cache/nanollm/tokenizer-qwen3/tokenizer.json", getenv("HOME"));
    return access(path, R_OK) == 0;
}

#define NEED_TOKENIZER()                                                                 \
    do {                                                                                 \
        if (!have_tokenizer()) {                                                         \
            fprintf(stderr, "%s: no Qwen3 tokenizer, skipped\n", __func__);              \
            return;                                                                      \
        }                                                                                \
    } while (0)

/* ---- help and usage errors ------------------------------------------------------ */

START_TEST(test_help_every_command)
{
    for (size_t k = 0; k < N_COMMANDS; k++) {
        const char *flags[] = {"--help", "-h"};
        for (int f = 0; f < 2; f++) {
            int rc = launch((const char *[]){commands[k], flags[f], NULL}, NULL);
            ck_assert_msg(rc == 0, "%s %s: exit %d (%s)", commands[k], flags[f], rc, err_text);
            char want[64];
            snprintf(want, sizeof want, "usage: nanollm-launch %s", commands[k]);
            ck_assert_msg(strncmp(out_text, want, strlen(want)) == 0, "%s --help printed %s", commands[k],
                          out_text);
            ck_assert_msg(strstr(out_text, "global options"), "%s --help: no global options", commands[k]);
            ck_assert_str_eq(err_text, "");
        }
    }
    /* Help wins wherever it is, even after other arguments, and the global
     * help lists every command. */
    ck_assert_int_eq(launch((const char *[]){"generate", "some prompt", "--max-tokens", "3", "--help", NULL},
                            NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "--prompt-file"));
    ck_assert_int_eq(launch((const char *[]){"--help", NULL}, NULL), 0);
    for (size_t k = 0; k < N_COMMANDS; k++) ck_assert_ptr_nonnull(strstr(out_text, commands[k]));
    ck_assert_int_eq(launch((const char *[]){"--version", NULL}, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "nanollm "));
}
END_TEST

static void expect_usage(const char *const *args, const char *want_stderr)
{
    int rc = launch(args, NULL);
    ck_assert_msg(rc == 2, "exit %d, want 2 (stderr: %s)", rc, err_text);
    ck_assert_str_eq(err_text, want_stderr);
    ck_assert_int_eq((int)out_len, 0);
}

START_TEST(test_usage_error_wording)
{
    char want[256];
    for (size_t k = 0; k < N_COMMANDS; k++) {
        snprintf(want, sizeof want, "nanollm-launch %s: unknown option '--frob' (see --help)\n", commands[k]);
        expect_usage((const char *[]){commands[k], "--frob", NULL}, want);
        /* the same wherever the option stands, and with a value attached */
        expect_usage((const char *[]){"--frob=3", commands[k], NULL}, want);
    }
    expect_usage((const char *[]){"generate", "-x", "hi", NULL},
                 "nanollm-launch generate: unknown option '-x' (see --help)\n");
    expect_usage((const char *[]){"generate", "hi", "--max-tokens", NULL},
                 "nanollm-launch generate: option '--max-tokens' needs a value (see --help)\n");
    expect_usage((const char *[]){"generate", "--ignore-eos=yes", "hi", NULL},
                 "nanollm-launch generate: option '--ignore-eos' takes no value (see --help)\n");
    expect_usage((const char *[]){"generate", "--max", "3", "hi", NULL},
                 "nanollm-launch generate: ambiguous option '--max' (see --help)\n");
    expect_usage((const char *[]){"generate", "--max-tokens", "zero", "hi", NULL},
                 "nanollm-launch generate: --max-tokens: 'zero' is not an integer in [1, 1073741823] "
                 "(see --help)\n");
    expect_usage((const char *[]){"generate", NULL}, "nanollm-launch generate: no PROMPT given (see --help)\n");
    expect_usage((const char *[]){"tokenize", "extra", NULL},
                 "nanollm-launch tokenize: unexpected argument 'extra' (the input comes on stdin) "
                 "(see --help)\n");
    expect_usage((const char *[]){"--tp", NULL}, "nanollm-launch: option '--tp' needs a value (see --help)\n");
    expect_usage((const char *[]){"frob", NULL}, "nanollm-launch: unknown command 'frob' (see --help)\n");
    /* Unambiguous prefixes are the options they start (getopt_long). */
    ck_assert_int_eq(launch((const char *[]){"mkmodel", "--hel", NULL}, NULL), 0);
}
END_TEST

/* ---- global options, aliases, --threads -------------------------------------------- */

START_TEST(test_global_options_after_command)
{
    /* --model after the command is the tokenizer's folder... */
    write_bytes(path_in("text"), "hi", 2);
    int rc = launch((const char *[]){"tokenize", "--model", path_in("no-such-model"), NULL}, path_in("text"));
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strstr(err_text, "no-such-model"), "%s", err_text);
    /* ...engine options are checked together wherever they stand... */
    expect_usage((const char *[]){"generate", "x", "--max-num-seqs", "20", "--max-num-batched-tokens", "10", NULL},
                 "nanollm-launch generate: --max-num-batched-tokens: 10 is below --max-num-seqs (20) "
                 "(see --help)\n");
    expect_usage((const char *[]){"bench", "--block-size=24", NULL},
                 "nanollm-launch bench: --block-size: 24 is not a multiple of 16 (see --help)\n");
    NEED_TOKENIZER();
    /* ...and reach the workers: the thread count and the KV blocks. */
    rc = launch((const char *[]){"generate", "--max-tokens", "1", "x", "--device", "cpu", "--threads", "3",
                                 "--num-kv-blocks", "9", "--max-model-len", "64", NULL},
                NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(strstr(err_text, "threads per worker: 3\n"), "%s", err_text);
    ck_assert_msg(strstr(err_text, "KV cache: 9 blocks"), "%s", err_text);
}
END_TEST

/* --prefill-first is an engine option like the others: every command takes
 * it (serve too: its --port error shows the option before it was known),
 * it takes no value, and it reaches the engine's scheduler. */
START_TEST(test_prefill_first_option)
{
    expect_usage((const char *[]){"generate", "--prefill-first=yes", "hi", NULL},
                 "nanollm-launch generate: option '--prefill-first' takes no value (see --help)\n");
    expect_usage((const char *[]){"serve", "--prefill-first", "--port", "70000", NULL},
                 "nanollm-launch serve: --port: '70000' is not an integer in [0, 65535] (see --help)\n");
    expect_usage((const char *[]){"--prefill-first", "serve", "--frob", NULL},
                 "nanollm-launch serve: unknown option '--frob' (see --help)\n");
    ck_assert_int_eq(launch((const char *[]){"serve", "--help", NULL}, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "  --prefill-first "));
    NEED_TOKENIZER();
    for (int on = 0; on < 2; on++) {
        const char *args[] = {"--device", "cpu", "--max-model-len", "64", "generate", "--max-tokens", "2",
                              "x", "y", on ? "--prefill-first" : NULL, NULL};
        int rc = launch(args, NULL);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
        ck_assert_msg(strstr(err_text, on ? ", prefill-first steps of up to 16384 tokens\n"
                                          : ", mixed steps of up to 16384 tokens\n"),
                      "%s", err_text);
    }
}
END_TEST

/* The stderr line of prompt k: prompt and cached token counts. */
static void prompt_counts(int k, int *prompt, int *cached, int *generated)
{
    char key[16];
    snprintf(key, sizeof key, "[%d] ", k);
    const char *at = strstr(err_text, key);
    ck_assert_msg(at, "no line for prompt %d: %s", k, err_text);
    ck_assert_int_eq(sscanf(at + strlen(key), "%d prompt tokens (%d cached), %d generated", prompt, cached,
                            generated), 3);
}

START_TEST(test_vllm_aliases)
{
    expect_usage((const char *[]){"generate", "x", "--tensor-parallel-size", "0", NULL},
                 "nanollm-launch generate: --tp: '0' is not an integer in [1, 64] (see --help)\n");
    NEED_TOKENIZER();
    /* --num-gpu-blocks-override is --num-kv-blocks. */
    int rc = launch((const char *[]){"--device", "cpu", "--num-gpu-blocks-override", "7", "--max-model-len", "64",
                                     "--tensor-parallel-size", "1", "generate", "--max-tokens", "1", "x", NULL},
                    NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(strstr(err_text, "KV cache: 7 blocks"), "%s", err_text);
    /* One sequence at a time, the second copy of a 3-block prompt finds the
     * first's full blocks cached, unless prefix caching is off; the later
     * of --enable/--no-enable-prefix-caching wins. */
    static const char prompt[] =
        "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill, "
        "and the farmer counts his sheep one by one as the sun sets slowly behind the distant hills.";
    const char *base[] = {"--device", "cpu", "--max-model-len", "128", "--max-num-seqs", "1",
                          "generate", "--max-tokens", "1", prompt, prompt};
    const char *args[20];
    int prompt_tokens, cached, generated;
    for (int off = 0; off < 2; off++) {
        int n = 0;
        for (size_t k = 0; k < sizeof base / sizeof base[0]; k++) args[n++] = base[k];
        args[n++] = off ? "--enable-prefix-caching" : "--no-enable-prefix-caching";
        args[n++] = off ? "--no-enable-prefix-caching" : "--enable-prefix-caching";
        args[n] = NULL;
        rc = launch(args, NULL);
        ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
        prompt_counts(2, &prompt_tokens, &cached, &generated);
        ck_assert_int_ge(prompt_tokens, 33);
        if (off) ck_assert_int_eq(cached, 0);
        else ck_assert_int_eq(cached, prompt_tokens / 16 * 16 == prompt_tokens ? prompt_tokens - 16
                                                                                  : prompt_tokens / 16 * 16);
    }
}
END_TEST

/* ---- generate --------------------------------------------------------------------- */

START_TEST(test_generate_logprobs)
{
    NEED_TOKENIZER();
    enum { N = 3, STEPS = 5 };
    int rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "generate", "--temperature", "0",
                                     "--max-tokens", "5", "--logprobs", "3", "Hello there", NULL},
                    NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    /* The batch job's JSON for the same request is the reference for the
     * numbers the table prints. */
    static char table[1 << 16];
    snprintf(table, sizeof table, "%s", out_text);
    static const char line[] =
        "{\"prompt\": \"Hello there\", \"max_tokens\": 5, \"temperature\": 0, \"logprobs\": 3}\n";
    write_bytes(path_in("lp.jsonl"), line, strlen(line));
    rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "batch", "--input", path_in("lp.jsonl"),
                                 "--output", path_in("lp-out.jsonl"), NULL},
                NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    json_error_t jerr;
    json_t *ref = json_load_file(path_in("lp-out.jsonl"), 0, &jerr);
    ck_assert_msg(ref, "%s", jerr.text);
    json_t *lps = json_object_get(ref, "logprobs");
    ck_assert_int_eq((int)json_array_size(lps), STEPS);

    const char *at = strstr(table, "logprobs [1]");
    ck_assert_msg(at, "no logprobs table: %s", table);
    at = strchr(at, '\n') + 1;
    for (int i = 0; i < STEPS; i++) {
        json_t *want = json_array_get(lps, (size_t)i);
        int pos, id, n;
        float lp;
        ck_assert_msg(sscanf(at, " %d %d %f top%n", &pos, &id, &lp, &n) == 3, "row %d: %s", i, at);
        ck_assert_int_eq(pos, i);
        ck_assert_int_eq(id, (int)json_integer_value(json_object_get(want, "token_id")));
        ck_assert_double_eq_tol(lp, json_real_value(json_object_get(want, "logprob")), 1e-4);
        ck_assert(lp <= 0.0f);
        at += n;
        json_t *top = json_object_get(want, "top");
        ck_assert_int_eq((int)json_array_size(top), N);
        float prev = 0.0f;
        for (int t = 0; t < N; t++) {
            int tid;
            float tlp;
            ck_assert_msg(sscanf(at, " %d:%f%n", &tid, &tlp, &n) == 2, "row %d top %d: %s", i, t, at);
            at += n;
            ck_assert_int_eq(tid, (int)json_integer_value(json_array_get(json_array_get(top, (size_t)t), 0)));
            ck_assert_double_eq_tol(tlp, json_real_value(json_array_get(json_array_get(top, (size_t)t), 1)), 1e-4);
            ck_assert(t == 0 || tlp <= prev); /* best first */
            prev = tlp;
        }
        /* greedy: the chosen token is the best one */
        ck_assert_int_eq(id, (int)json_integer_value(json_array_get(json_array_get(top, 0), 0)));
        ck_assert_msg(strncmp(at, "  \"", 3) == 0, "row %d has no token text: %s", i, at);
        at = strchr(at, '\n') + 1;
    }
    json_decref(ref);
    /* Without --logprobs there is no table. */
    rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "generate", "--max-tokens", "2",
                                 "Hello", NULL},
                NULL);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_null(strstr(out_text, "logprobs"));
}
END_TEST

START_TEST(test_generate_timing_line)
{
    NEED_TOKENIZER();
    int rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "generate", "--max-tokens", "6",
                                     "--ignore-eos", "one two three", "four", NULL},
                    NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    int p1, c1, g1, p2, c2, g2;
    prompt_counts(1, &p1, &c1, &g1);
    prompt_counts(2, &p2, &c2, &g2);
    const char *at = strstr(err_text, "timing: ");
    ck_assert_msg(at, "no timing line: %s", err_text);
    long long pt, ct, gt;
    double ps, prate, gs, grate;
    ck_assert_int_eq(sscanf(at, "timing: prompt %lld tokens (%lld cached) in %lf s (%lf tok/s), generation %lld "
                                "tokens in %lf s (%lf tok/s)",
                            &pt, &ct, &ps, &prate, &gt, &gs, &grate),
                     7);
    ck_assert_int_eq((int)pt, p1 + p2 - c1 - c2);
    ck_assert_int_eq((int)ct, c1 + c2);
    ck_assert_int_eq((int)gt, g1 + g2 - 2); /* the first tokens come with the prompts */
    ck_assert(ps > 0 && gs > 0);
    /* the rates are the counts over the times, up to the printed digits */
    ck_assert_double_eq_tol(prate, (double)pt / ps, prate * (0.0006 / ps + 0.01) + 0.1);
    ck_assert_double_eq_tol(grate, (double)gt / gs, grate * (0.0006 / gs + 0.01) + 0.1);
}
END_TEST

/* The completion and its token counts for args (greedy, 4 tokens). */
static void greedy(const char *const *extra, const char *in_path, char *text, size_t cap, int *prompt_tokens)
{
    const char *args[32] = {"--device", "cpu", "--max-model-len", "64", "generate", "--temperature", "0",
                            "--max-tokens", "4"};
    int n = 9;
    for (int k = 0; extra[k]; k++) args[n++] = extra[k];
    args[n] = NULL;
    int rc = launch(args, in_path);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    snprintf(text, cap, "%s", out_text);
    int cached, generated;
    prompt_counts(1, prompt_tokens, &cached, &generated);
}

START_TEST(test_generate_prompt_sources)
{
    NEED_TOKENIZER();
    char direct[4096], from_stdin[4096], from_file[4096];
    int n_direct, n_stdin, n_file;
    greedy((const char *[]){"Once upon a time", NULL}, NULL, direct, sizeof direct, &n_direct);
    write_bytes(path_in("prompt.txt"), "Once upon a time", 16);
    greedy((const char *[]){"-", NULL}, path_in("prompt.txt"), from_stdin, sizeof from_stdin, &n_stdin);
    greedy((const char *[]){"--prompt-file", path_in("prompt.txt"), NULL}, NULL, from_file, sizeof from_file,
           &n_file);
    ck_assert_int_eq(n_stdin, n_direct);
    ck_assert_int_eq(n_file, n_direct);
    ck_assert_str_eq(from_stdin, direct);
    ck_assert_str_eq(from_file, direct);
    /* Several prompts: the headers say where each came from. */
    int rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "generate", "--max-tokens", "2", "-",
                                     "--prompt-file", path_in("prompt.txt"), "plain", NULL},
                    path_in("prompt.txt"));
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(strstr(out_text, "=== [1] (stdin)\n") && strstr(out_text, "=== [3] plain\n"), "%s", out_text);
    ck_assert_msg(strstr(out_text, "=== [2] (file "), "%s", out_text);
    /* Bad sources are bad input. */
    expect_usage((const char *[]){"generate", "-", "-", NULL},
                 "nanollm-launch generate: PROMPT '-' (stdin) given twice (see --help)\n");
    write_bytes(path_in("nul.txt"), "a\0b", 3);
    ck_assert_int_eq(launch((const char *[]){"generate", "--prompt-file", path_in("nul.txt"), NULL}, NULL), 2);
    ck_assert_msg(strstr(err_text, "NUL byte at offset 1"), "%s", err_text);
    ck_assert_int_eq(launch((const char *[]){"generate", "--prompt-file", path_in("absent.txt"), NULL}, NULL), 2);
    ck_assert_msg(strstr(err_text, "absent.txt"), "%s", err_text);
}
END_TEST

START_TEST(test_generate_chat_system)
{
    expect_usage((const char *[]){"generate", "--system", "Be brief.", "hi", NULL},
                 "nanollm-launch generate: --system needs --chat (see --help)\n");
    NEED_TOKENIZER();
    char text[4096];
    int plain, with_system;
    greedy((const char *[]){"--chat", "hi", NULL}, NULL, text, sizeof text, &plain);
    greedy((const char *[]){"--chat", "--system", "You are a terse assistant.", "hi", NULL}, NULL, text, sizeof text,
           &with_system);
    /* Qwen3's template adds "<|im_start|>system\n" TEXT "<|im_end|>\n":
     * the text's tokens plus five. */
    write_bytes(path_in("sys.txt"), "You are a terse assistant.", 26);
    ck_assert_int_eq(launch((const char *[]){"tokenize", NULL}, path_in("sys.txt")), 0);
    json_error_t jerr;
    json_t *ids = json_loads(out_text, 0, &jerr);
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(with_system, plain + (int)json_array_size(ids) + 5);
    json_decref(ids);
}
END_TEST

/* ---- mkmodel, detokenize ---------------------------------------------------------- */

START_TEST(test_mkmodel_occupied_out)
{
    ck_assert_int_eq(mkdir(path_in("occupied"), 0755), 0);
    write_bytes(path_in("occupied/keep.txt"), "mine", 4);
    char want[600];
    snprintf(want, sizeof want,
             "nanollm-launch mkmodel: --out %s: exists and is not an empty directory (see --help)\n",
             path_in("occupied"));
    expect_usage((const char *[]){"mkmodel", "--no-tokenizer", "--vocab", "64", "--out", path_in("occupied"), NULL},
                 want);
    ck_assert_int_eq(slurp(path_in("occupied/keep.txt"), out_text, sizeof out_text), 4);
    write_bytes(path_in("a-file"), "x", 1);
    ck_assert_int_eq(launch((const char *[]){"mkmodel", "--out", path_in("a-file"), NULL}, NULL), 2);
    /* An empty folder is fine. */
    ck_assert_int_eq(mkdir(path_in("empty"), 0755), 0);
    int rc = launch((const char *[]){"mkmodel", "--no-tokenizer", "--vocab", "64", "--out", path_in("empty"), NULL},
                    NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(access(path_in("empty/config.json"), R_OK), 0);
}
END_TEST

START_TEST(test_mkmodel_tokenizer)
{
    expect_usage((const char *[]){"mkmodel", "--out", path_in("both"), "--tokenizer", "/x", "--no-tokenizer", NULL},
                 "nanollm-launch mkmodel: --tokenizer and --no-tokenizer exclude each other (see --help)\n");
    NEED_TOKENIZER();
    /* The tiny preset keeps Qwen3's vocabulary: the tokenizer comes along. */
    int rc = launch((const char *[]){"mkmodel", "--layers", "1", "--out", path_in("with-tok"), NULL}, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(access(path_in("with-tok/tokenizer.json"), R_OK), 0);
    ck_assert_int_eq(access(path_in("with-tok/tokenizer_config.json"), R_OK), 0);
    /* and the model generates text */
    rc = launch((const char *[]){"--model", path_in("with-tok"), "--device", "cpu", "--max-model-len", "64",
                                 "generate", "--max-tokens", "2", "Hi", NULL},
                NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    rc = launch((const char *[]){"mkmodel", "--layers", "1", "--no-tokenizer", "--out", path_in("no-tok"), NULL},
                NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_ne(access(path_in("no-tok/tokenizer.json"), F_OK), 0);
    /* A vocabulary too small for it: no tokenizer, and a note says why. */
    rc = launch((const char *[]){"mkmodel", "--vocab", "1000", "--layers", "1", "--out", path_in("small"), NULL},
                NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_ne(access(path_in("small/tokenizer.json"), F_OK), 0);
    ck_assert_msg(strstr(err_text, "does not fit a vocabulary of 1000"), "%s", err_text);
}
END_TEST

START_TEST(test_detokenize_nul)
{
    NEED_TOKENIZER();
    write_bytes(path_in("nul-text"), "a\0b", 3);
    ck_assert_int_eq(launch((const char *[]){"tokenize", NULL}, path_in("nul-text")), 0);
    write_bytes(path_in("nul-ids"), out_text, out_len);
    ck_assert_int_eq(launch((const char *[]){"detokenize", NULL}, path_in("nul-ids")), 0);
    ck_assert_int_eq((int)out_len, 3);
    ck_assert_int_eq(memcmp(out_text, "a\0b", 3), 0);
}
END_TEST

/* A folder holding src's tokenizer.json (linked) and a tokenizer_config.json
 * of our own: the same tokenizer with other add_*_token settings. */
static const char *tokenizer_variant(const char *src, const char *name, const char *config)
{
    static char dirs[4][512];
    static int k;
    char *dir = dirs[k++ % 4];
    snprintf(dir, sizeof dirs[0], "%s", path_in(name));
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/tokenizer.json", src);
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    ck_assert_int_eq(symlink(from, to), 0);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", dir);
    write_bytes(to, config, strlen(config));
    return dir;
}

/* tokenize's ids for text with the tokenizer in dir and one option (or NULL). */
static const char *tokenize_with(const char *dir, const char *option, const char *text)
{
    write_bytes(path_in("special-text"), text, strlen(text));
    const char *args[] = {"--model", dir, "tokenize", option, NULL};
    int rc = launch(args, path_in("special-text"));
    ck_assert_msg(rc == 0, "tokenize exit %d: %s", rc, err_text);
    return out_text;
}

/* The ids are Hugging Face's: "Hello" 9906 and " world" 1917 in Llama 3,
 * 9707 and 1879 in Qwen3; <|begin_of_text|> 128000, <|eot_id|> 128009,
 * <|im_end|> 151645. */
START_TEST(test_tokenize_special_tokens)
{
    char llama[4096], file[4200];
    const char *env = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    if (env && env[0]) snprintf(llama, sizeof llama, "%s", env);
    else snprintf(llama, sizeof llama, "%s/.cache/nanollm/tokenizer-llama3", getenv("HOME"));
    snprintf(file, sizeof file, "%s/tokenizer.json", llama);
    if (access(file, R_OK) != 0) {
        fprintf(stderr, "%s: no Llama 3 tokenizer, skipped\n", __func__);
    } else {
        ck_assert_str_eq(tokenize_with(llama, NULL, "Hello world"), "[128000, 9906, 1917]\n");
        ck_assert_str_eq(tokenize_with(llama, "--no-add-special-tokens", "Hello world"), "[9906, 1917]\n");
        const char *no_bos = tokenizer_variant(llama, "llama-no-bos",
            "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\", \"add_bos_token\": false}");
        ck_assert_str_eq(tokenize_with(no_bos, NULL, "Hello world"), "[9906, 1917]\n");
        const char *eos = tokenizer_variant(llama, "llama-eos",
            "{\"bos_token\": {\"content\": \"<|begin_of_text|>\"}, \"eos_token\": \"<|eot_id|>\", "
            "\"add_eos_token\": true}");
        ck_assert_str_eq(tokenize_with(eos, NULL, "Hello world"), "[128000, 9906, 1917, 128009]\n");
        ck_assert_str_eq(tokenize_with(eos, "--no-add-special-tokens", "Hello world"), "[9906, 1917]\n");
        const char *bad = tokenizer_variant(llama, "llama-bad", "{\"add_bos_token\": true}");
        write_bytes(path_in("special-text"), "x", 1);
        ck_assert_int_eq(launch((const char *[]){"--model", bad, "tokenize", NULL}, path_in("special-text")), 2);
        ck_assert_msg(strstr(err_text, "\"add_bos_token\" is true but \"bos_token\" names no token"), "%s",
                      err_text);
    }
    if (!have_tokenizer()) {
        fprintf(stderr, "%s: no Qwen3 tokenizer, skipped\n", __func__);
        return;
    }
    char qwen[4096];
    env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env && env[0]) snprintf(qwen, sizeof qwen, "%s", env);
    else snprintf(qwen, sizeof qwen, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME"));
    /* Qwen3 says add_bos_token false and has no bos_token: nothing is added. */
    ck_assert_str_eq(tokenize_with(qwen, NULL, "Hello world"), "[9707, 1879]\n");
    ck_assert_str_eq(tokenize_with(qwen, "--no-add-special-tokens", "Hello world"), "[9707, 1879]\n");
    const char *qeos = tokenizer_variant(qwen, "qwen-eos",
        "{\"add_bos_token\": false, \"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"add_eos_token\": true}");
    ck_assert_str_eq(tokenize_with(qeos, NULL, "Hello world"), "[9707, 1879, 151645]\n");
    ck_assert_str_eq(tokenize_with(qeos, "--no-add-special-tokens", "Hello world"), "[9707, 1879]\n");
}
END_TEST

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "%s/nl-cli-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("NANOLLM_CPU_KV_BYTES", "16777216", 0);
    /* The workers' start-up facts (threads, KV blocks) that the tests read
     * back are INFO messages; the default level is WARN. */
    setenv("NANOLLM_LOG_LEVEL", "info", 1);
    Suite *s = suite_create("cli");
    TCase *usage = tcase_create("usage");
    tcase_add_test(usage, test_help_every_command);
    tcase_add_test(usage, test_usage_error_wording);
    suite_add_tcase(s, usage);
    TCase *run = tcase_create("run");
    tcase_set_timeout(run, 120);
    tcase_add_test(run, test_global_options_after_command);
    tcase_add_test(run, test_vllm_aliases);
    tcase_add_test(run, test_prefill_first_option);
    tcase_add_test(run, test_generate_logprobs);
    tcase_add_test(run, test_generate_timing_line);
    tcase_add_test(run, test_generate_prompt_sources);
    tcase_add_test(run, test_generate_chat_system);
    tcase_add_test(run, test_mkmodel_occupied_out);
    tcase_add_test(run, test_mkmodel_tokenizer);
    tcase_add_test(run, test_detokenize_nul);
    tcase_add_test(run, test_tokenize_special_tokens);
    suite_add_tcase(s, run);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
