/* test_launch.c — nanollm-launch as a user runs it: bad usage exits 2 with a
 * message naming the culprit (no model needed), and, with the Qwen3
 * tokenizer present, a batch job over the demo model whose output keeps the
 * input order and isolates bad lines. */
#include <check.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nl_build_commit.h"
#include "tests/check_run.h"

static char out_path[64], err_path[64];
static char err_text[8192], out_text[65536];

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Runs nanollm-launch with args (NULL-terminated); returns its exit code. */
static int launch(const char *const *args)
{
    const char *prog = getenv("NANOLLM_LAUNCH");
    ck_assert_msg(prog != NULL, "NANOLLM_LAUNCH is not set");
    strcpy(out_path, "/tmp/nl-launch-out-XXXXXX");
    strcpy(err_path, "/tmp/nl-launch-err-XXXXXX");
    int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    ck_assert(out_fd >= 0 && err_fd >= 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(out_fd, 1);
        dup2(err_fd, 2);
        int null_fd = open("/dev/null", O_RDONLY);
        dup2(null_fd, 0);
        const char *argv[64] = {prog};
        int n = 1;
        for (; args[n - 1]; n++) argv[n] = args[n - 1];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    close(out_fd);
    close(err_fd);
    slurp(out_path, out_text, sizeof(out_text));
    slurp(err_path, err_text, sizeof(err_text));
    unlink(out_path);
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_usage(const char *const *args, const char *needle)
{
    int rc = launch(args);
    ck_assert_msg(rc == 2, "exit %d for %s (stderr: %s)", rc, needle, err_text);
    ck_assert_msg(strstr(err_text, needle) != NULL, "stderr lacks '%s': %s", needle, err_text);
}

/* Writes text into a new temporary file; path (a mkstemp template) gets
 * its name. */
static void write_temp(char *path, const char *text)
{
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(test_bad_usage)
{
    expect_usage((const char *[]){"--bogus", "generate", "x", NULL}, "--bogus");
    expect_usage((const char *[]){NULL}, "no command");
    expect_usage((const char *[]){"frob", NULL}, "frob");
    expect_usage((const char *[]){"--tp", "0", "generate", "x", NULL}, "--tp");
    expect_usage((const char *[]){"--tp=abc", "generate", "x", NULL}, "'abc'");
    expect_usage((const char *[]){"--block-size", "24", "generate", "x", NULL}, "--block-size");
    expect_usage((const char *[]){"--device", "gpu", "generate", "x", NULL}, "--device");
    expect_usage((const char *[]){"--gpu-memory-utilization", "0", "generate", "x", NULL},
                 "--gpu-memory-utilization");
    expect_usage((const char *[]){"--max-num-seqs", "20", "--max-num-batched-tokens", "10", "generate", "x", NULL},
                 "--max-num-batched-tokens");
    expect_usage((const char *[]){"--model", NULL}, "needs a value");
    /* GPU placement and the all-reduce choice are checked before any device */
    expect_usage((const char *[]){"--tp", "4", "--devices", "0,0", "generate", "x", NULL},
                 "--devices: 2 GPU(s) listed for --tp 4");
    expect_usage((const char *[]){"--devices", "0,0", "generate", "x", NULL}, "for --tp 1");
    expect_usage((const char *[]){"--tp", "2", "--devices", "0,x", "generate", "x", NULL}, "'x'");
    expect_usage((const char *[]){"--tp", "2", "--devices", "0,,1", "generate", "x", NULL},
                 "comma-separated");
    expect_usage((const char *[]){"--tp", "2", "--devices", "0,-1", "generate", "x", NULL}, "'-1'");
    expect_usage((const char *[]){"--tp", "2", "--devices", "0,", "generate", "x", NULL},
                 "comma-separated");
    expect_usage((const char *[]){"--all-reduce", "mpi", "generate", "x", NULL},
                 "--all-reduce: 'mpi' is not auto, ipc or nccl");
    expect_usage((const char *[]){"generate", NULL}, "no PROMPT");
    expect_usage((const char *[]){"generate", "--temperature", "-1", "x", NULL}, "--temperature");
    expect_usage((const char *[]){"generate", "--top-p", "0", "x", NULL}, "--top-p");
    expect_usage((const char *[]){"generate", "--max-tokens", NULL}, "--max-tokens");
    expect_usage((const char *[]){"generate", "--seed", "-4", "x", NULL}, "--seed");
    expect_usage((const char *[]){"generate", "--stop", "", "x", NULL}, "--stop");
    expect_usage((const char *[]){"generate", "--frobnicate", "x", NULL}, "--frobnicate");
    expect_usage((const char *[]){"batch", "--output", "/tmp/x.jsonl", NULL}, "--input");
    expect_usage((const char *[]){"batch", "--input", "/nonexistent/in.jsonl", "--output", "/tmp/x.jsonl", NULL},
                 "/nonexistent/in.jsonl");
    expect_usage((const char *[]){"bench", "--num-seqs", "0", NULL}, "--num-seqs");
    expect_usage((const char *[]){"bench", "--workload", "/nonexistent/w.jsonl", NULL}, "/nonexistent/w.jsonl");
    /* Workload lines are checked element by element, before any model loads,
     * as `batch` checks its lines. */
    static const char *const bad_lines[][2] = {
        {"{\"prompt_token_ids\": [1, \"x\"], \"max_tokens\": 4}\n", "\"prompt_token_ids\": element 1"},
        {"{\"prompt_token_ids\": [1, 4294967297], \"max_tokens\": 4}\n", "\"prompt_token_ids\": element 1"},
        {"{\"prompt_token_ids\": [1], \"max_tokens\": 4294967297}\n", "max_tokens"},
        {"{\"prompt_token_ids\": [1]}\n", "needs \"max_tokens\""},
        {"{\"prompt_token_ids\": [], \"max_tokens\": 4}\n", "non-empty \"prompt_token_ids\""},
        {"{\"prompt\": \"hi\", \"max_tokens\": 4}\n", "non-empty \"prompt_token_ids\""},
        {"{\"prompt_token_ids\": [1], \"max_tokens\": 4, \"top_p\": \"x\"}\n", "\"top_p\""},
        {"{\"prompt_token_ids\": [1], \"max_tokens\": 4, \"top_pp\": 1}\n", "unknown field \"top_pp\""},
    };
    for (size_t k = 0; k < sizeof(bad_lines) / sizeof(bad_lines[0]); k++) {
        char wl[] = "/tmp/nl-launch-wl-XXXXXX";
        write_temp(wl, bad_lines[k][0]);
        expect_usage((const char *[]){"bench", "--workload", wl, NULL}, bad_lines[k][1]);
        unlink(wl);
    }
    setenv("NANOLLM_CPU_KV_BYTES", "1G", 1);
    int rc = launch((const char *[]){"--device", "cpu", "generate", "x", NULL});
    unsetenv("NANOLLM_CPU_KV_BYTES");
    ck_assert_msg(rc == 2 && strstr(err_text, "NANOLLM_CPU_KV_BYTES '1G'"), "exit %d: %s", rc, err_text);
    /* options that size more memory than the machine has are refused by the
     * memory plan before anything is allocated, naming them and the bytes
     * (the worker used to zero-fill until the OOM killer ended it) */
    rc = launch((const char *[]){"--device", "cpu", "--max-num-seqs", "65536",
                                 "--max-num-batched-tokens", "16777216", "generate", "x", NULL});
    ck_assert_msg(rc == 1 && strstr(err_text, "memory plan: --max-num-batched-tokens 16777216 "
                                              "and --max-num-seqs 65536 need"),
                  "exit %d: %s", rc, err_text);
    /* above the model's own context is bad usage too, named */
    rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "100000", "generate", "x", NULL});
    ck_assert_msg(rc == 2 && strstr(err_text, "max_model_len 100000"), "exit %d: %s", rc, err_text);
    /* a placement or all-reduce choice for an engine that runs on the CPU */
    rc = launch((const char *[]){"--device", "cpu", "--tp", "2", "--devices", "0,0", "generate", "x", NULL});
    ck_assert_msg(rc == 2 && strstr(err_text, "devices: a GPU placement was given"), "exit %d: %s", rc,
                  err_text);
    rc = launch((const char *[]){"--device", "cpu", "--all-reduce", "ipc", "generate", "x", NULL});
    ck_assert_msg(rc == 2 && strstr(err_text, "all_reduce ipc: only GPU ranks"), "exit %d: %s", rc,
                  err_text);
    ck_assert_int_eq(launch((const char *[]){"--help", NULL}), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "usage: nanollm-launch"));
    ck_assert_ptr_nonnull(strstr(out_text, "--no-prefix-caching"));
    ck_assert_ptr_nonnull(strstr(out_text, "--devices LIST"));
    ck_assert_ptr_nonnull(strstr(out_text, "--all-reduce auto|ipc|nccl"));
}
END_TEST

static bool have_tokenizer(void)
{
    char path[4096];
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env) snprintf(path, sizeof(path), "%s/tokenizer.json", env);
    else snprintf(path, sizeof(path), "%s/.cache/nanollm/tokenizer-qwen3/tokenizer.json", getenv("HOME"));
    return access(path, R_OK) == 0;
}

/* Runs batch over lines on the demo model; the output lines parsed. */
static int run_batch_lines(const char *lines, json_t **out, int max)
{
    char in[] = "/tmp/nl-batch-in-XXXXXX", outp[] = "/tmp/nl-batch-out-XXXXXX";
    int fd = mkstemp(in);
    ck_assert_int_eq(write(fd, lines, strlen(lines)), (ssize_t)strlen(lines));
    close(fd);
    close(mkstemp(outp));
    int rc = launch((const char *[]){"--device", "cpu", "batch", "--input", in, "--output", outp, NULL});
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    FILE *f = fopen(outp, "r");
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (n < max && getline(&line, &cap, f) > 0) {
        json_error_t e;
        out[n] = json_loads(line, 0, &e);
        ck_assert_msg(out[n] != NULL, "output line %d: %s", n + 1, e.text);
        n++;
    }
    free(line);
    fclose(f);
    unlink(in);
    unlink(outp);
    return n;
}

START_TEST(test_batch_demo_model)
{
    if (!have_tokenizer()) {
        fprintf(stderr, "test_batch_demo_model: no Qwen3 tokenizer, skipped\n");
        return;
    }
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    const char *lines =
        "{\"id\": \"a\", \"prompt\": \"Hello there\", \"max_tokens\": 4, \"temperature\": 0}\n"
        "this is not json\n"
        "{\"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 3, \"logprobs\": 2, \"temperature\": 0}\n"
        "{\"prompt\": \"x\", \"max_tokens\": \"many\"}\n"
        "{\"prompt_token_ids\": [1, 2], \"max_tokens\": 100000000}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 2, \"seed\": 7}\n"
        "{\"prompt\": \"Hello there\", \"max_tokens\": 4, \"temperature\": 0, \"id\": 70}\n"
        "{\"prompt\": \"a\", \"foo\": 1}\n"
        /* vLLM's chat fields: tools, a tool turn, no generation prompt, thinking off */
        "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"\", "
        "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, "
        "{\"role\": \"tool\", \"content\": \"42\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], "
        "\"add_generation_prompt\": false, \"chat_template_kwargs\": {\"enable_thinking\": false}, \"max_tokens\": 1}\n"
        "{\"prompt\": \"x\", \"tools\": []}\n";
    json_t *o[11] = {0};
    int n = run_batch_lines(lines, o, 11);
    ck_assert_ptr_nonnull(strstr(err_text, "10 requests (5 rejected)"));
    ck_assert_ptr_nonnull(strstr(err_text, "demo model"));
    ck_assert_int_eq(n, 10);
    /* Input order, ids given or the 0-based line number. */
    ck_assert_str_eq(json_string_value(json_object_get(o[0], "id")), "a");
    for (int k = 1; k < 6; k++) ck_assert_int_eq(json_integer_value(json_object_get(o[k], "id")), k);
    ck_assert_int_eq(json_integer_value(json_object_get(o[6], "id")), 70);
    ck_assert_int_eq(json_integer_value(json_object_get(o[7], "id")), 7);
    const int bad[] = {1, 3, 4, 7, 9};
    const char *why[] = {"bad JSON", "max_tokens", "max_model_len", "unknown field \"foo\"", "need \"messages\""};
    for (int k = 0; k < 5; k++) {
        json_t *b = o[bad[k]];
        ck_assert_str_eq(json_string_value(json_object_get(b, "finish_reason")), "error");
        const char *msg = json_string_value(json_object_get(b, "error"));
        ck_assert_msg(msg && strstr(msg, why[k]), "line %d error: %s", bad[k] + 1, msg ? msg : "(none)");
    }
    /* Good lines: lengths, text, logprobs, greedy repeatability. */
    ck_assert_str_eq(json_string_value(json_object_get(o[0], "finish_reason")), "length");
    ck_assert_int_eq(json_array_size(json_object_get(o[0], "token_ids")), 4);
    ck_assert(json_is_string(json_object_get(o[0], "text")));
    ck_assert_int_eq(json_integer_value(json_object_get(o[0], "prompt_tokens")), 2);
    ck_assert(json_equal(json_object_get(o[0], "token_ids"), json_object_get(o[6], "token_ids")));
    json_t *lps = json_object_get(o[2], "logprobs");
    ck_assert_int_eq(json_array_size(lps), 3);
    for (size_t k = 0; k < 3; k++) {
        json_t *lp = json_array_get(lps, k);
        ck_assert_int_eq(json_integer_value(json_object_get(lp, "token_id")),
                         json_integer_value(json_array_get(json_object_get(o[2], "token_ids"), k)));
        ck_assert(json_real_value(json_object_get(lp, "logprob")) <= 0.0);
        json_t *top = json_object_get(lp, "top");
        ck_assert_int_eq(json_array_size(top), 2);
        /* Greedy: the chosen token is the most likely one. */
        ck_assert_int_eq(json_integer_value(json_array_get(json_array_get(top, 0), 0)),
                         json_integer_value(json_object_get(lp, "token_id")));
    }
    ck_assert_ptr_null(json_object_get(o[0], "logprobs"));
    /* Chat: <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n */
    ck_assert_int_eq(json_integer_value(json_object_get(o[5], "prompt_tokens")), 9);
    ck_assert_int_eq(json_array_size(json_object_get(o[5], "token_ids")), 2);
    /* The Qwen3 template's tool prompt, call and response (137 tokens; the
     * text is jinja2's, see test_chat_parity). */
    ck_assert_int_eq(json_integer_value(json_object_get(o[8], "prompt_tokens")), 137);
    for (int k = 0; k < 10; k++) json_decref(o[k]);
}
END_TEST

/* stop_token_ids (vLLM's name) in batch lines: the output ends at the
 * first occurrence of a listed id, kept in token_ids; a field that is not
 * a list of ids is refused by name. */
START_TEST(test_batch_stop_token_ids)
{
    if (!have_tokenizer()) {
        fprintf(stderr, "test_batch_stop_token_ids: no Qwen3 tokenizer, skipped\n");
        return;
    }
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    json_t *o[2] = {0};
    ck_assert_int_eq(run_batch_lines("{\"prompt\": \"Hello there\", \"max_tokens\": 8, \"temperature\": 0, "
                                     "\"ignore_eos\": true}\n", o, 1), 1);
    json_t *ids = json_object_get(o[0], "token_ids");
    ck_assert_int_eq(json_array_size(ids), 8);
    json_int_t stop = json_integer_value(json_array_get(ids, 4));
    size_t first = 0;
    while (json_integer_value(json_array_get(ids, first)) != stop) first++;
    char lines[512];
    snprintf(lines, sizeof lines,
             "{\"prompt\": \"Hello there\", \"max_tokens\": 8, \"temperature\": 0, \"ignore_eos\": true, "
             "\"stop_token_ids\": [%lld]}\n{\"prompt\": \"x\", \"stop_token_ids\": \"7\"}\n", (long long)stop);
    json_t *r[2] = {0};
    ck_assert_int_eq(run_batch_lines(lines, r, 2), 2);
    ck_assert_str_eq(json_string_value(json_object_get(r[0], "finish_reason")), "stop");
    json_t *cut = json_object_get(r[0], "token_ids");
    ck_assert_uint_eq(json_array_size(cut), first + 1);
    for (size_t k = 0; k <= first; k++)
        ck_assert_int_eq(json_integer_value(json_array_get(cut, k)), json_integer_value(json_array_get(ids, k)));
    const char *why = json_string_value(json_object_get(r[1], "error"));
    ck_assert_msg(why && strstr(why, "stop_token_ids"), "%s", why ? why : "(no error)");
    json_decref(o[0]);
    json_decref(r[0]);
    json_decref(r[1]);
}
END_TEST

START_TEST(test_generate_demo_model)
{
    if (!have_tokenizer()) return;
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    int rc = launch((const char *[]){"--device", "cpu", "generate", "--max-tokens", "3", "--temperature", "0",
                                     "Hello", "World", NULL});
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "its text is noise"));
    ck_assert_ptr_nonnull(strstr(out_text, "=== [1] Hello\n"));
    ck_assert_ptr_nonnull(strstr(out_text, "=== [2] World\n"));
    ck_assert_ptr_nonnull(strstr(err_text, "3 generated, finish: length"));
}
END_TEST

/* A workload line's sampling fields reach the engine as `batch` reads them:
 * cuts, a seed and stops run, and a value the engine refuses is named at
 * submission. */
START_TEST(test_bench_workload_sampling)
{
    if (!have_tokenizer()) return;
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    char wl[] = "/tmp/nl-bench-wl-XXXXXX";
    write_temp(wl, "{\"id\": \"a\", \"prompt_token_ids\": [1, 2, 3], \"max_tokens\": 4, \"temperature\": 0.7, "
                   "\"top_p\": 0.9, \"top_k\": 20, \"min_p\": 0.05, \"seed\": 7, \"stop\": [\"x\"], "
                   "\"ignore_eos\": true}\n"
                   "{\"prompt_token_ids\": [5, 6], \"max_tokens\": 3}\n");
    int rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "bench", "--workload", wl, NULL});
    unlink(wl);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "bench: 2 requests"));

    char bad[] = "/tmp/nl-bench-wl-XXXXXX";
    write_temp(bad, "{\"prompt_token_ids\": [1], \"max_tokens\": 4, \"top_p\": 0}\n");
    rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "bench", "--workload", bad, NULL});
    unlink(bad);
    ck_assert_msg(rc == 2 && strstr(err_text, "bench request 1: top_p 0"), "exit %d: %s", rc, err_text);
}
END_TEST

/* The random workload is scaled into the context: an input length far below
 * the output length once rounded the input range to nothing. */
START_TEST(test_bench_random_workload_fits)
{
    if (!have_tokenizer()) return;
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    unsetenv("NANOLLM_COMMIT");
    char json_path[] = "/tmp/nl-bench-json-XXXXXX";
    int fd = mkstemp(json_path);
    close(fd);
    int rc = launch((const char *[]){"--device", "cpu", "--max-model-len", "64", "bench", "--num-seqs", "2",
                                     "--max-input-len", "1", "--max-output-len", "1000", "--json", json_path, NULL});
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(out_text, "Throughput:"));
    ck_assert_ptr_nonnull(strstr(err_text, "bench: 2 requests"));
    /* the summary, and the same figures as a JSON record */
    ck_assert_ptr_nonnull(strstr(out_text, "Request throughput (req/s):"));
    ck_assert_ptr_nonnull(strstr(out_text, "P99 TTFT (ms):"));
    ck_assert_ptr_nonnull(strstr(out_text, "Median TPOT (ms):"));
    json_t *rec = json_load_file(json_path, 0, NULL);
    unlink(json_path);
    ck_assert_ptr_nonnull(rec);
    ck_assert_int_eq(json_integer_value(json_object_get(rec, "requests")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(rec, "tp")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(rec, "device")), "cpu");
    /* the commit this tree was built from (none outside a git checkout) */
    if (NL_BUILD_COMMIT[0])
        ck_assert_str_eq(json_string_value(json_object_get(rec, "commit")), NL_BUILD_COMMIT);
    else
        ck_assert(json_is_null(json_object_get(rec, "commit")));
    ck_assert(json_is_true(json_object_get(rec, "demo_model")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(rec, "model"), "vocab_size")), 151936);
    int64_t out_tokens = json_integer_value(json_object_get(rec, "output_tokens"));
    double secs = json_number_value(json_object_get(rec, "seconds"));
    ck_assert_int_gt(out_tokens, 2);
    ck_assert_double_eq_tol(json_number_value(json_object_get(rec, "output_tok_per_s")), out_tokens / secs, 1e-6 * out_tokens / secs);
    json_t *split = json_object_get(rec, "split");
    ck_assert_int_ge(json_integer_value(json_object_get(split, "prefill_steps")), 1);
    ck_assert_int_ge(json_integer_value(json_object_get(split, "decode_steps")), 1);
    json_t *ttft = json_object_get(rec, "ttft_ms");
    ck_assert(json_number_value(json_object_get(ttft, "p50")) > 0);
    ck_assert(json_number_value(json_object_get(ttft, "p99")) >= json_number_value(json_object_get(ttft, "p50")));
    ck_assert_int_gt(json_integer_value(json_object_get(rec, "peak_kv_blocks")), 0);
    json_decref(rec);
}
END_TEST

/* Reads a JSONL file into o[] (at most cap lines); returns the count and
 * fails the test on a line that does not parse. */
static int read_jsonl(const char *path, json_t **o, int cap)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *line = NULL;
    size_t lcap = 0;
    int n = 0;
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        ck_assert_int_lt(n, cap);
        ck_assert_msg(line[len - 1] == '\n', "line %d has no newline", n + 1);
        json_error_t e;
        o[n] = json_loads(line, 0, &e);
        ck_assert_msg(o[n] != NULL, "%s line %d: %s", path, n + 1, e.text);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
}

/* The same prompts as native lines and as OpenAI batch lines, in one file:
 * the OpenAI records carry the native lines' text and tokens in the API's
 * shape, and a bad OpenAI line gets an error record. */
START_TEST(test_batch_openai_format)
{
    if (!have_tokenizer()) return;
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    char in[] = "/tmp/nl-batch-oai-XXXXXX", outp[] = "/tmp/nl-batch-oai-out-XXXXXX";
    int fd = mkstemp(in);
    close(fd);
    fd = mkstemp(outp);
    close(fd);
    write_text(in,
               "{\"prompt\": \"Hello there\", \"max_tokens\": 5, \"temperature\": 0, \"logprobs\": 2}\n"
               "{\"custom_id\": \"req-1\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
               "{\"model\": \"demo\", \"prompt\": \"Hello there\", \"max_tokens\": 5, \"temperature\": 0, "
               "\"logprobs\": 2}}\n"
               "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 3, \"temperature\": 0}\n"
               "{\"custom_id\": \"req-3\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": "
               "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_completion_tokens\": 3, "
               "\"temperature\": 0, \"logprobs\": true, \"top_logprobs\": 1}}\n"
               "{\"custom_id\": \"req-4\", \"method\": \"POST\", \"url\": \"/v1/embeddings\", \"body\": {}}\n"
               "{\"custom_id\": \"req-5\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
               "{\"prompt\": \"x\", \"n\": 2}}\n"
               /* fields clients send at a neutral value: accepted there, as the server does */
               "{\"custom_id\": \"req-6\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
               "{\"prompt\": \"x\", \"max_tokens\": 2, \"presence_penalty\": 0, \"frequency_penalty\": 0.0, "
               "\"logit_bias\": {}, \"best_of\": 1, \"echo\": false, \"user\": \"u-1\"}}\n"
               "{\"custom_id\": \"req-7\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
               "{\"prompt\": \"x\", \"presence_penalty\": 0.5}}\n"
               "{\"custom_id\": \"req-8\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": "
               "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tool_choice\": \"auto\"}}\n");
    int rc = launch((const char *[]){"--device", "cpu", "batch", "--input", in, "--output", outp, NULL});
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    json_t *o[10];
    int n = read_jsonl(outp, o, 10);
    unlink(in);
    unlink(outp);
    ck_assert_int_eq(n, 9);
    /* completions */
    ck_assert_str_eq(json_string_value(json_object_get(o[1], "custom_id")), "req-1");
    ck_assert(json_is_null(json_object_get(o[1], "error")));
    json_t *resp = json_object_get(o[1], "response");
    ck_assert_int_eq(json_integer_value(json_object_get(resp, "status_code")), 200);
    json_t *body = json_object_get(resp, "body");
    ck_assert_str_eq(json_string_value(json_object_get(body, "object")), "text_completion");
    ck_assert_str_eq(json_string_value(json_object_get(body, "model")), "demo");
    json_t *choice = json_array_get(json_object_get(body, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(choice, "text")), json_string_value(json_object_get(o[0], "text")));
    ck_assert_str_eq(json_string_value(json_object_get(choice, "finish_reason")), "length");
    json_t *usage = json_object_get(body, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "completion_tokens")), 5);
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "prompt_tokens")),
                     json_integer_value(json_object_get(o[0], "prompt_tokens")));
    ck_assert_int_eq(json_integer_value(json_object_get(usage, "total_tokens")),
                     json_integer_value(json_object_get(usage, "prompt_tokens")) + 5);
    json_t *lp = json_object_get(choice, "logprobs");
    ck_assert_int_eq(json_array_size(json_object_get(lp, "tokens")), 5);
    for (size_t k = 0; k < 5; k++) {
        double want = json_number_value(json_object_get(json_array_get(json_object_get(o[0], "logprobs"), k), "logprob"));
        ck_assert_double_eq_tol(json_number_value(json_array_get(json_object_get(lp, "token_logprobs"), k)), want, 1e-5);
        ck_assert_int_eq(json_object_size(json_array_get(json_object_get(lp, "top_logprobs"), k)) >= 1, 1);
    }
    /* chat */
    body = json_object_get(json_object_get(o[3], "response"), "body");
    ck_assert_str_eq(json_string_value(json_object_get(body, "object")), "chat.completion");
    choice = json_array_get(json_object_get(body, "choices"), 0);
    json_t *msg = json_object_get(choice, "message");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "content")), json_string_value(json_object_get(o[2], "text")));
    json_t *content = json_object_get(json_object_get(choice, "logprobs"), "content");
    ck_assert_int_eq(json_array_size(content), 3);
    ck_assert_int_eq(json_array_size(json_object_get(json_array_get(content, 0), "top_logprobs")), 1);
    /* refused OpenAI lines */
    for (int k = 4; k < 6; k++) {
        ck_assert(json_is_null(json_object_get(o[k], "response")));
        json_t *err = json_object_get(o[k], "error");
        ck_assert_str_eq(json_string_value(json_object_get(err, "code")), "invalid_request");
    }
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(json_object_get(o[4], "error"), "message")), "url"));
    ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(json_object_get(o[5], "error"), "message")), "body.n"));
    /* neutral values pass; any other is refused by name */
    ck_assert(json_is_null(json_object_get(o[6], "error")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o[6], "response"), "status_code")), 200);
    for (int k = 7; k < 9; k++) {
        ck_assert(json_is_null(json_object_get(o[k], "response")));
        const char *m = json_string_value(json_object_get(json_object_get(o[k], "error"), "message"));
        ck_assert_ptr_nonnull(strstr(m, k == 7 ? "body.presence_penalty" : "body.tool_choice"));
        ck_assert_ptr_nonnull(strstr(m, k == 7 ? "must be 0" : "must be \"none\""));
    }
    for (int k = 0; k < n; k++) json_decref(o[k]);
}
END_TEST

/* A message longer than the error buffer that quotes multi-byte text is cut
 * on a character boundary; the error field stays (JSON needs valid UTF-8). */
START_TEST(test_batch_long_error_utf8)
{
    if (!have_tokenizer()) return;
    setenv("NANOLLM_CPU_KV_BYTES", "67108864", 1);
    char in[] = "/tmp/nl-batch-utf-XXXXXX", outp[] = "/tmp/nl-batch-utf-out-XXXXXX";
    int fd = mkstemp(in);
    close(fd);
    fd = mkstemp(outp);
    close(fd);
    static char text[8192];
    /* 1 + 2k bytes before the name: every cut position parity is tried */
    for (int pad = 0; pad < 2; pad++) {
        strcpy(text, "{\"prompt\": \"x\", \"");
        if (pad) strcat(text, "a");
        for (int k = 0; k < 700; k++) strcat(text, "\xC3\xA9"); /* é */
        strcat(text, "\": 1}\n");
        write_text(in, text);
        int rc = launch((const char *[]){"--device", "cpu", "batch", "--input", in, "--output", outp, NULL});
        ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
        json_t *o[2];
        ck_assert_int_eq(read_jsonl(outp, o, 2), 1);
        const char *msg = json_string_value(json_object_get(o[0], "error"));
        ck_assert_msg(msg != NULL, "the error field was dropped");
        ck_assert_ptr_nonnull(strstr(msg, "unknown field"));
        ck_assert_int_ge(strlen(msg), 1000);
        json_decref(o[0]);
    }
    unlink(in);
    unlink(outp);
}
END_TEST

/* --input and --output naming one file (directly, through a symlink or a
 * hard link) is refused with exit 2 and leaves the file as it was. */
START_TEST(test_batch_same_file_refused)
{
    char dir[] = "/tmp/nl-batch-same-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char in[128], sym[128], hard[128];
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(sym, sizeof sym, "%s/sym.jsonl", dir);
    snprintf(hard, sizeof hard, "%s/hard.jsonl", dir);
    const char *content = "{\"prompt_token_ids\": [1, 2], \"max_tokens\": 2}\n";
    write_text(in, content);
    ck_assert_int_eq(symlink(in, sym), 0);
    ck_assert_int_eq(link(in, hard), 0);
    const char *outs[] = {in, sym, hard};
    for (int k = 0; k < 3; k++) {
        int rc = launch((const char *[]){"--device", "cpu", "batch", "--input", in, "--output", outs[k], NULL});
        ck_assert_msg(rc == 2, "output %s: exit %d", outs[k], rc);
        ck_assert_msg(strstr(err_text, "same file"), "stderr: %s", err_text);
        static char now[256];
        slurp(in, now, sizeof now);
        ck_assert_str_eq(now, content);
    }
    unlink(sym);
    unlink(hard);
    unlink(in);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("launch");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_bad_usage);
    tcase_add_test(tc, test_batch_demo_model);
    tcase_add_test(tc, test_batch_stop_token_ids);
    tcase_add_test(tc, test_generate_demo_model);
    tcase_add_test(tc, test_bench_random_workload_fits);
    tcase_add_test(tc, test_bench_workload_sampling);
    tcase_add_test(tc, test_batch_openai_format);
    tcase_add_test(tc, test_batch_long_error_utf8);
    tcase_add_test(tc, test_batch_same_file_refused);
    suite_add_tcase(s, tc);
    return check_run(s);
}
