/* test_e2e_cli.c — nanollm-launch end to end on the CPU, as a user runs it.
 *
 * - batch: a job mixing good and bad lines over a golden model (written
 *   with `nanollm-launch mkmodel` from the arguments its golden file
 *   records): one output line per input line, in order; bad lines carry
 *   "error" and finish_reason "error"; good lines reproduce what Hugging
 *   Face transformers generated.
 * - generate on the demo model says that its weights are random;
 *   tokenize/detokenize round-trip; exit codes 0, 1 and 2 (DESIGN.md).
 * - a Llama 3.2-shaped model with the Llama 3 tokenizer: text prompts get
 *   <|begin_of_text|>, the output carries text.
 * - kills: kill -9 of a worker ends the leader within about a second with
 *   a message naming the rank; kill -9 of the leader takes its workers down
 *   within about a second; SIGINT ends the leader with 130.  In every case
 *   no shared-memory segment of the leader and no process is left behind.
 *   The test process makes itself a child subreaper so that orphaned
 *   workers come back to it and can be counted and reaped.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/byte_tokenizer.h"

#define GOLDEN_MODEL "qwen3_tied_gqa"
#define N_TOP 5
#define MAX_STEPS 16
#define DEATH_LIMIT_S 1.5 /* "within a second", with room for a loaded CI machine */

static char tmp_root[256], model[512];
static char out_text[1 << 16], err_text[1 << 16];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* Starts nanollm-launch with args (NULL-terminated), stdin from in_path
 * (NULL: /dev/null), stdout and stderr to files under tmp_root. */
static pid_t spawn_quiet(const char *const *args, const char *in_path)
{
    const char *prog = getenv("NANOLLM_LAUNCH");
    if (!prog) return -1;
    char out_path[300], err_path[300];
    snprintf(out_path, sizeof out_path, "%s/stdout", tmp_root);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmp_root);
    pid_t pid = fork();
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
    return pid;
}

static pid_t spawn(const char *const *args, const char *in_path)
{
    ck_assert_msg(getenv("NANOLLM_LAUNCH") != NULL, "NANOLLM_LAUNCH is not set");
    pid_t pid = spawn_quiet(args, in_path);
    ck_assert_int_ge(pid, 0);
    return pid;
}

/* Exit code, or 128 + signal; reads back stdout and stderr. */
static int finish(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0) ck_assert_int_eq(errno, EINTR);
    char path[300];
    snprintf(path, sizeof path, "%s/stdout", tmp_root);
    slurp(path, out_text, sizeof out_text);
    snprintf(path, sizeof path, "%s/stderr", tmp_root);
    slurp(path, err_text, sizeof err_text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int launch(const char *const *args, const char *in_path)
{
    return finish(spawn(args, in_path));
}

static bool have_tokenizer(void)
{
    char path[4096];
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env) snprintf(path, sizeof path, "%s/tokenizer.json", env);
    else snprintf(path, sizeof path, "%s/.cache/nanollm/tokenizer-qwen3/tokenizer.json", getenv("HOME"));
    return access(path, R_OK) == 0;
}

static json_t *golden_json(void)
{
    const char *fx = getenv("NL_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/%s.json", fx ? fx : "tests/fixtures", GOLDEN_MODEL);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
    return root;
}

/* ---- batch ------------------------------------------------------------------ */

/* Output line `got` for golden prompt p: tokens and logprobs as HF made
 * them, up to a permitted near-tie flip. */
static void expect_golden_line(json_t *got, json_t *golden, int p)
{
    json_t *res = json_array_get(json_object_get(golden, "results"), p);
    json_t *gtoks = json_object_get(res, "tokens"), *gtop = json_object_get(res, "top");
    int steps = (int)json_integer_value(json_object_get(golden, "steps"));
    json_t *toks = json_object_get(got, "token_ids"), *lps = json_object_get(got, "logprobs");
    ck_assert_str_eq(json_string_value(json_object_get(got, "finish_reason")), "length");
    ck_assert_ptr_null(json_object_get(got, "error"));
    ck_assert_ptr_null(json_object_get(got, "text")); /* the model has no tokenizer */
    ck_assert_int_eq((int)json_array_size(toks), steps);
    ck_assert_int_eq((int)json_array_size(lps), steps);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "prompt_tokens")),
                     (json_int_t)json_array_size(json_array_get(json_object_get(golden, "prompts"), p)));
    for (int k = 0; k < steps; k++) {
        json_t *top = json_array_get(gtop, k);
        int32_t g0 = (int32_t)json_integer_value(json_array_get(json_array_get(top, 0), 0));
        int32_t g1 = (int32_t)json_integer_value(json_array_get(json_array_get(top, 1), 0));
        double l0 = json_number_value(json_array_get(json_array_get(top, 0), 1));
        double l1 = json_number_value(json_array_get(json_array_get(top, 1), 1));
        ck_assert_int_eq(g0, json_integer_value(json_array_get(gtoks, k)));
        int32_t tok = (int32_t)json_integer_value(json_array_get(toks, k));
        json_t *lp = json_array_get(lps, k);
        ck_assert_int_eq(json_integer_value(json_object_get(lp, "token_id")), tok);
        bool flipped = tok != g0;
        ck_assert_msg(!flipped || (l0 - l1 < 1e-4 && tok == g1), "prompt %d step %d: token %d, golden %d", p,
                      k, tok, g0);
        double lpv = json_number_value(json_object_get(lp, "logprob"));
        ck_assert_msg(fabs(lpv - l0) < 1e-3, "prompt %d step %d: logprob %.6f, golden %.6f", p, k, lpv, l0);
        json_t *mine = json_object_get(lp, "top");
        ck_assert_int_eq((int)json_array_size(mine), N_TOP);
        for (int j = 0; j < N_TOP; j++) {
            double want = json_number_value(json_array_get(json_array_get(top, j), 1));
            double have = json_number_value(json_array_get(json_array_get(mine, j), 1));
            ck_assert_msg(fabs(have - want) < 1e-3, "prompt %d step %d top %d: %.6f, golden %.6f", p, k, j,
                          have, want);
        }
        if (flipped) break;
    }
}

static void append_ids(char *buf, size_t cap, json_t *ids)
{
    size_t len = strlen(buf);
    for (size_t i = 0; i < json_array_size(ids); i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "",
                                (long long)json_integer_value(json_array_get(ids, i)));
}

START_TEST(test_batch_mixed_lines)
{
    json_t *golden = golden_json();
    ck_assert_ptr_nonnull(golden);
    json_t *prompts = json_object_get(golden, "prompts");
    int steps = (int)json_integer_value(json_object_get(golden, "steps"));
    ck_assert_int_eq((int)json_array_size(prompts), 3);

    static char in_text[8192];
    char line[2048];
    in_text[0] = '\0';
    /* input line -> golden prompt (good lines), or -1 with the expected error */
    static const struct {
        int prompt;
        const char *raw;
        const char *error;
    } lines[] = {
        {0, NULL, NULL},
        {-1, "{\"prompt_token_ids\": [1, 2", "bad JSON"},
        {-1, NULL, "max_model_len 64"}, /* 70 prompt tokens */
        {1, NULL, NULL},
        {-1, "{\"prompt_token_ids\": [5, 1024, 6], \"max_tokens\": 2}", "token 1024 at position 1"},
        {-1, "{\"prompt_token_ids\": \"5 6 7\"}", "\"prompt_token_ids\""},
        {-1, "{\"prompt_token_ids\": [5], \"temperature\": \"hot\"}", "\"temperature\""},
        {-1, "{\"prompt_token_ids\": [5], \"ignore_eos\": 1}", "\"ignore_eos\""},
        {-1, "{\"prompt_token_ids\": [5], \"colour\": \"red\"}", "unknown field \"colour\""},
        {-1, "", "bad JSON"},
        {2, NULL, NULL},
        {-1, "[1, 2, 3]", "not a JSON object"},
        {-1, "{\"prompt\": \"hello\"}", "tokenizer"},
        {-1, "{\"max_tokens\": 3}", "exactly one of"},
    };
    int n_lines = (int)(sizeof lines / sizeof lines[0]);
    for (int i = 0; i < n_lines; i++) {
        if (lines[i].prompt >= 0) {
            snprintf(line, sizeof line, "{\"id\": \"golden-%d\", \"prompt_token_ids\": [", lines[i].prompt);
            append_ids(line, sizeof line, json_array_get(prompts, lines[i].prompt));
            snprintf(line + strlen(line), sizeof line - strlen(line),
                     "], \"max_tokens\": %d, \"temperature\": 0, \"logprobs\": %d, \"ignore_eos\": true}",
                     steps, N_TOP);
        } else if (!lines[i].raw) {
            snprintf(line, sizeof line, "{\"prompt_token_ids\": [");
            for (int k = 0; k < 70; k++)
                snprintf(line + strlen(line), sizeof line - strlen(line), "%s%d", k ? "," : "", k + 3);
            snprintf(line + strlen(line), sizeof line - strlen(line), "], \"max_tokens\": 1}");
        } else {
            snprintf(line, sizeof line, "%s", lines[i].raw);
        }
        strcat(in_text, line);
        strcat(in_text, "\n");
    }
    char in_path[300], out_path[300];
    snprintf(in_path, sizeof in_path, "%s/batch-in.jsonl", tmp_root);
    snprintf(out_path, sizeof out_path, "%s/batch-out.jsonl", tmp_root);
    write_file(in_path, in_text);
    int rc = launch((const char *[]){"--model", model, "--device", "cpu", "--max-model-len", "64",
                                     "--num-kv-blocks", "16", "--max-num-batched-tokens", "16",
                                     "--max-num-seqs", "4", "batch", "--input", in_path, "--output",
                                     out_path, NULL},
                    NULL);
    ck_assert_msg(rc == 0, "batch exit %d: %s", rc, err_text);
    char summary[64];
    snprintf(summary, sizeof summary, "%d requests (%d rejected)", n_lines, n_lines - 3);
    ck_assert_msg(strstr(err_text, summary), "stderr lacks '%s': %s", summary, err_text);

    FILE *f = fopen(out_path, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&buf, &cap, f) > 0) {
        ck_assert_int_lt(n, n_lines);
        json_error_t e;
        json_t *o = json_loads(buf, 0, &e);
        ck_assert_msg(o != NULL, "output line %d: %s", n + 1, e.text);
        if (lines[n].prompt >= 0) {
            char id[32];
            snprintf(id, sizeof id, "golden-%d", lines[n].prompt);
            ck_assert_str_eq(json_string_value(json_object_get(o, "id")), id);
            ck_assert_int_eq(json_integer_value(json_object_get(o, "cached_tokens")), 0);
            expect_golden_line(o, golden, lines[n].prompt);
        } else {
            ck_assert_int_eq(json_integer_value(json_object_get(o, "id")), n); /* the line number */
            ck_assert_str_eq(json_string_value(json_object_get(o, "finish_reason")), "error");
            ck_assert_int_eq((int)json_array_size(json_object_get(o, "token_ids")), 0);
            const char *msg = json_string_value(json_object_get(o, "error"));
            ck_assert_msg(msg && strstr(msg, lines[n].error), "line %d: error \"%s\" lacks \"%s\"", n + 1,
                          msg ? msg : "(none)", lines[n].error);
        }
        json_decref(o);
        n++;
    }
    free(buf);
    fclose(f);
    ck_assert_int_eq(n, n_lines);
    json_decref(golden);
}
END_TEST

/* ---- --resume ------------------------------------------------------------------ */

enum { RESUME_LINES = 12 };

/* The output's lines, parsed, with the OpenAI record's creation time taken
 * out (it is the only field that differs between runs). */
static int read_output(const char *path, json_t **o)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&buf, &cap, f) > 0) {
        ck_assert_int_lt(n, RESUME_LINES);
        o[n] = json_loads(buf, 0, NULL);
        ck_assert_msg(o[n] != NULL, "%s line %d does not parse", path, n + 1);
        json_t *body = json_object_get(json_object_get(o[n], "response"), "body");
        if (body) json_object_del(body, "created");
        n++;
    }
    free(buf);
    fclose(f);
    return n;
}

/* Whether two records agree: equal, except that numbers may differ by tol
 * (a line batched with other lines may round its logprobs differently). */
static bool json_close(json_t *a, json_t *b, double tol)
{
    if (json_is_number(a) && json_is_number(b)) return fabs(json_number_value(a) - json_number_value(b)) <= tol;
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t k = 0; k < json_array_size(a); k++)
            if (!json_close(json_array_get(a, k), json_array_get(b, k), tol)) return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *key;
        json_t *v;
        json_object_foreach(a, key, v) {
            if (!json_close(v, json_object_get(b, key), tol)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static int run_batch(const char *in_path, const char *out_path, bool resume)
{
    return launch((const char *[]){"--model", model, "--device", "cpu", "--num-kv-blocks", "64", "--max-model-len",
                                   "64", "batch", "--input", in_path, "--output", out_path,
                                   resume ? "--resume" : NULL, NULL},
                  NULL);
}

/* A job cut short (killed mid-write, or interrupted with its unfinished
 * lines marked) finishes with --resume exactly as an uninterrupted run. */
START_TEST(test_batch_resume)
{
    static char in_text[8192];
    in_text[0] = '\0';
    for (int i = 0; i < RESUME_LINES; i++) {
        char line[512];
        if (i == 4)
            snprintf(line, sizeof line,
                     "{\"custom_id\": \"oai-%d\", \"method\": \"POST\", \"url\": \"/v1/completions\", \"body\": "
                     "{\"prompt\": [%d, %d, %d], \"max_tokens\": 5, \"temperature\": 0, \"ignore_eos\": true}}\n",
                     i, 7 * i + 3, 11 * i + 5, 13 * i + 1);
        else
            snprintf(line, sizeof line,
                     "{\"id\": \"r%d\", \"prompt_token_ids\": [%d, %d, %d], \"max_tokens\": %d, \"temperature\": 0, "
                     "\"ignore_eos\": true, \"logprobs\": %d}\n",
                     i, 7 * i + 3, 11 * i + 5, 13 * i + 1, 2 + i % 7, i % 3);
        strcat(in_text, line);
    }
    char in_path[300], ref_path[300], out_path[300];
    snprintf(in_path, sizeof in_path, "%s/resume-in.jsonl", tmp_root);
    snprintf(ref_path, sizeof ref_path, "%s/resume-ref.jsonl", tmp_root);
    snprintf(out_path, sizeof out_path, "%s/resume-out.jsonl", tmp_root);
    write_file(in_path, in_text);
    ck_assert_msg(run_batch(in_path, ref_path, false) == 0, "reference run: %s", err_text);
    json_t *ref[RESUME_LINES], *got[RESUME_LINES];
    ck_assert_int_eq(read_output(ref_path, ref), RESUME_LINES);
    static char ref_text[1 << 16];
    slurp(ref_path, ref_text, sizeof ref_text);

    for (int variant = 0; variant < 3; variant++) {
        /* 0: killed while writing line 6; 1: interrupted after line 3, the
         * rest marked incomplete; 2: already complete. */
        static char cut[1 << 16];
        cut[0] = '\0';
        const char *p = ref_text;
        int keep = variant == 0 ? 5 : variant == 1 ? 3 : RESUME_LINES;
        for (int k = 0; k < keep; k++) p = strchr(p, '\n') + 1;
        memcpy(cut, ref_text, (size_t)(p - ref_text));
        cut[p - ref_text] = '\0';
        if (variant == 0) strncat(cut, p, 20); /* half a record, no newline */
        for (int k = keep; variant == 1 && k < RESUME_LINES; k++) {
            char line[512];
            if (k == 4)
                snprintf(line, sizeof line, "{\"id\":\"batch_req_4\",\"custom_id\":\"oai-4\",\"response\":null,"
                                            "\"error\":{\"code\":\"interrupted\",\"message\":\"interrupted\"}}\n");
            else
                snprintf(line, sizeof line, "{\"id\":\"r%d\",\"token_ids\":[],\"finish_reason\":\"error\","
                                            "\"error\":\"interrupted by SIGINT\",\"incomplete\":true}\n", k);
            strcat(cut, line);
        }
        write_file(out_path, cut);
        int rc = run_batch(in_path, out_path, true);
        ck_assert_msg(rc == 0, "variant %d: resume exit %d: %s", variant, rc, err_text);
        char done[64];
        snprintf(done, sizeof done, "%d lines already done", keep);
        ck_assert_msg(strstr(err_text, done), "variant %d: stderr lacks '%s': %s", variant, done, err_text);
        ck_assert_int_eq(read_output(out_path, got), RESUME_LINES);
        for (int k = 0; k < RESUME_LINES; k++) {
            ck_assert_msg(json_close(ref[k], got[k], 1e-3), "variant %d line %d differs from the plain run", variant,
                          k + 1);
            if (k != 4) /* the OpenAI record's ids are in its body, compared above */
                ck_assert(json_equal(json_object_get(ref[k], "token_ids"), json_object_get(got[k], "token_ids")));
            json_decref(got[k]);
        }
    }
    /* An output that belongs to another input is refused and left alone. */
    write_file(out_path, "{\"id\":\"other\",\"token_ids\":[1],\"finish_reason\":\"length\"}\n");
    ck_assert_int_eq(run_batch(in_path, out_path, true), 2);
    ck_assert_msg(strstr(err_text, "another input"), "stderr: %s", err_text);
    static char now[256];
    slurp(out_path, now, sizeof now);
    ck_assert_str_eq(now, "{\"id\":\"other\",\"token_ids\":[1],\"finish_reason\":\"length\"}\n");
    for (int k = 0; k < RESUME_LINES; k++) json_decref(ref[k]);
}
END_TEST

/* ---- demo model, tokenizer, exit codes ------------------------------------------ */

START_TEST(test_generate_demo_notice)
{
    if (!have_tokenizer()) {
        fprintf(stderr, "test_generate_demo_notice: no Qwen3 tokenizer, skipped\n");
        return;
    }
    int rc = launch((const char *[]){"--device", "cpu", "--num-kv-blocks", "8", "--max-model-len", "64",
                                     "generate", "--max-tokens", "2", "--temperature", "0", "Hi", NULL},
                    NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(strstr(err_text, "demo model") && strstr(err_text, "random weights"),
                  "no demo notice: %s", err_text);
    ck_assert_msg(out_text[0] != '\0', "generate printed nothing");
    ck_assert_msg(strstr(err_text, "2 generated, finish: length"), "%s", err_text);
}
END_TEST

START_TEST(test_tokenize_round_trip)
{
    if (!have_tokenizer()) {
        fprintf(stderr, "test_tokenize_round_trip: no Qwen3 tokenizer, skipped\n");
        return;
    }
    char in_path[300];
    snprintf(in_path, sizeof in_path, "%s/text.txt", tmp_root);
    /* "Hello, world" is [9707, 11, 1879] in the Qwen2/Qwen3 vocabulary. */
    write_file(in_path, "Hello, world");
    ck_assert_int_eq(launch((const char *[]){"tokenize", NULL}, in_path), 0);
    json_error_t e;
    json_t *ids = json_loads(out_text, 0, &e);
    ck_assert_msg(ids != NULL, "tokenize printed %s", out_text);
    ck_assert_int_eq((int)json_array_size(ids), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(ids, 0)), 9707);
    ck_assert_int_eq(json_integer_value(json_array_get(ids, 1)), 11);
    ck_assert_int_eq(json_integer_value(json_array_get(ids, 2)), 1879);
    json_decref(ids);

    const char *text = "Grüße, 世界! 🙂\n\tdef f(x):  return x**2  # <|im_end|> 12345\n";
    write_file(in_path, text);
    ck_assert_int_eq(launch((const char *[]){"tokenize", NULL}, in_path), 0);
    ids = json_loads(out_text, 0, &e);
    ck_assert_msg(json_is_array(ids) && json_array_size(ids) > 10, "tokenize printed %s", out_text);
    json_decref(ids);
    char ids_path[300];
    snprintf(ids_path, sizeof ids_path, "%s/ids.json", tmp_root);
    write_file(ids_path, out_text);
    ck_assert_int_eq(launch((const char *[]){"detokenize", NULL}, ids_path), 0);
    ck_assert_str_eq(out_text, text);
}
END_TEST

/* A small model of the llama3.2-1b preset's vocabulary, with the real
 * Llama 3 tokenizer: the tokenizer's template adds <|begin_of_text|> to a
 * text prompt, and its ids reach the model. */
START_TEST(test_llama_text_prompt)
{
    char tok[4096], tok_file[4200], dir[400], in_path[300];
    const char *env = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    if (env) snprintf(tok, sizeof tok, "%s", env);
    else snprintf(tok, sizeof tok, "%s/.cache/nanollm/tokenizer-llama3", getenv("HOME"));
    snprintf(tok_file, sizeof tok_file, "%s/tokenizer.json", tok);
    if (access(tok_file, R_OK) != 0) {
        fprintf(stderr, "test_llama_text_prompt: no Llama 3 tokenizer, skipped\n");
        return;
    }
    snprintf(dir, sizeof dir, "%s/llama", tmp_root);
    int rc = launch((const char *[]){"mkmodel", "--preset", "llama3.2-1b", "--layers", "1", "--hidden",
                                     "32", "--inter", "64", "--heads", "4", "--kv-heads", "2",
                                     "--head-dim", "8", "--tokenizer", tok, "--out", dir, NULL},
                    NULL);
    ck_assert_msg(rc == 0, "mkmodel exit %d: %s", rc, err_text);

    snprintf(in_path, sizeof in_path, "%s/text.txt", tmp_root);
    write_file(in_path, "Hello, world");
    ck_assert_int_eq(launch((const char *[]){"--model", dir, "tokenize", NULL}, in_path), 0);
    ck_assert_str_eq(out_text, "[128000, 9906, 11, 1917]\n");

    snprintf(in_path, sizeof in_path, "%s/llama.jsonl", tmp_root);
    write_file(in_path, "{\"prompt\": \"The capital of France is\", \"max_tokens\": 2, "
                        "\"temperature\": 0, \"ignore_eos\": true}\n");
    char out_path[300];
    snprintf(out_path, sizeof out_path, "%s/llama_out.jsonl", tmp_root);
    rc = launch((const char *[]){"--model", dir, "--device", "cpu", "--num-kv-blocks", "8",
                                 "--max-model-len", "64", "batch", "--input", in_path, "--output",
                                 out_path, NULL},
                NULL);
    ck_assert_msg(rc == 0, "batch exit %d: %s", rc, err_text);
    json_error_t e;
    json_t *got = json_load_file(out_path, 0, &e);
    ck_assert_msg(got != NULL, "%s: %s", out_path, e.text);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "prompt_tokens")), 6); /* BOS + 5 */
    ck_assert_int_eq((int)json_array_size(json_object_get(got, "token_ids")), 2);
    ck_assert(json_is_string(json_object_get(got, "text")));
    json_decref(got);
}
END_TEST

/* A model whose tokenizer is bytes (id = byte, GPT-2's byte alphabet):
 * sampled text holds U+0000 wherever id 0 was drawn, and the batch output
 * writes it as "\u0000" -- in the text, and in the completions logprobs'
 * tokens and top_logprobs keys -- rather than cutting the string there. */
START_TEST(test_batch_text_with_nul)
{
    char tok[300], path[400], dir[300], in_path[300], out_path[300];
    snprintf(tok, sizeof tok, "%s/bytes-tok", tmp_root);
    ck_assert_int_eq(mkdir(tok, 0755), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", tok);
    write_byte_tokenizer(path, "[]");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tok);
    write_file(path, "{}");
    snprintf(dir, sizeof dir, "%s/bytes-model", tmp_root);
    int rc = launch((const char *[]){"mkmodel", "--vocab", "256", "--layers", "1", "--hidden", "16", "--inter",
                                     "16", "--heads", "2", "--kv-heads", "1", "--head-dim", "8", "--tokenizer",
                                     tok, "--out", dir, NULL},
                    NULL);
    ck_assert_msg(rc == 0, "mkmodel exit %d: %s", rc, err_text);

    /* Each seed twice: the native line gives the ids, the OpenAI line the
     * same draw's token texts. */
    enum { N = 12, STEPS = 48 };
    char lines[N * 2 * 300] = "";
    size_t at = 0;
    for (int i = 0; i < N; i++) {
        at += (size_t)snprintf(lines + at, sizeof lines - at,
                               "{\"prompt\": \"ab\", \"max_tokens\": %d, \"ignore_eos\": true, \"temperature\": 1,"
                               " \"seed\": %d, \"logprobs\": 20}\n"
                               "{\"custom_id\": \"o%d\", \"method\": \"POST\", \"url\": \"/v1/completions\", "
                               "\"body\": {\"prompt\": \"ab\", \"max_tokens\": %d, \"ignore_eos\": true, "
                               "\"temperature\": 1, \"seed\": %d, \"logprobs\": 20}}\n",
                               STEPS, i, i, STEPS, i);
    }
    snprintf(in_path, sizeof in_path, "%s/nul.jsonl", tmp_root);
    write_file(in_path, lines);
    snprintf(out_path, sizeof out_path, "%s/nul_out.jsonl", tmp_root);
    rc = launch((const char *[]){"--model", dir, "--device", "cpu", "--num-kv-blocks", "64", "--max-model-len",
                                 "64", "batch", "--input", in_path, "--output", out_path, NULL},
                NULL);
    ck_assert_msg(rc == 0, "batch exit %d: %s", rc, err_text);
    FILE *f = fopen(out_path, "r");
    ck_assert_ptr_nonnull(f);
    int nul_ids = 0, nul_keys = 0;
    static char line[1 << 20];
    for (int i = 0; i < N; i++) {
        json_error_t e;
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        json_t *native = json_loads(line, JSON_ALLOW_NUL, &e);
        ck_assert_msg(native != NULL, "%s", e.text);
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        /* jansson reads no NUL in a key: the top_logprobs key "\u0000"
         * becomes "NUL" here, counted */
        for (char *k = line; (k = strstr(k, "\"\\u0000\":")) != NULL; nul_keys++)
            memcpy(k, "\"NUL\"   :", 9);
        json_t *openai = json_loads(line, JSON_ALLOW_NUL, &e);
        ck_assert_msg(openai != NULL, "%s", e.text);
        json_t *ids = json_object_get(native, "token_ids"), *text = json_object_get(native, "text");
        json_t *choice = json_array_get(json_object_get(json_object_get(json_object_get(openai, "response"),
                                                                         "body"), "choices"), 0);
        json_t *lp = json_object_get(choice, "logprobs");
        json_t *tokens = json_object_get(lp, "tokens"), *tops = json_object_get(lp, "top_logprobs");
        ck_assert_int_eq((int)json_array_size(ids), STEPS);
        ck_assert_int_eq((int)json_array_size(tokens), STEPS);
        /* Byte 0 stands alone in UTF-8: one U+0000 in the text per id 0. */
        int zeros = 0, in_text = 0;
        for (int k = 0; k < STEPS; k++) {
            bool zero = json_integer_value(json_array_get(ids, k)) == 0;
            zeros += zero;
            json_t *t = json_array_get(tokens, k);
            ck_assert_int_eq(json_string_length(t) == 1 && json_string_value(t)[0] == '\0', zero);
            /* the alternatives are the native line's top ids, keyed by text */
            json_t *alts = json_object_get(json_array_get(json_object_get(native, "logprobs"), k), "top");
            bool zero_alt = false;
            for (size_t j = 0; j < json_array_size(alts); j++)
                zero_alt |= json_integer_value(json_array_get(json_array_get(alts, j), 0)) == 0;
            ck_assert_int_eq(json_object_get(json_array_get(tops, k), "NUL") != NULL, zero_alt);
        }
        for (size_t j = 0; j < json_string_length(text); j++) in_text += json_string_value(text)[j] == '\0';
        ck_assert_int_eq(in_text, zeros);
        ck_assert(json_equal(json_object_get(choice, "text"), text));
        nul_ids += zeros;
        json_decref(native);
        json_decref(openai);
    }
    fclose(f);
    ck_assert_msg(nul_ids > 0, "no draw sampled id 0: pick other seeds");
    ck_assert_msg(nul_keys > 0, "no top_logprobs held id 0: pick other seeds");
}
END_TEST

/* NANOLLM_PROFILE=ops: rank 0 prints each op's share of the eager
 * forwards, prefill and decode, the all-reduces and the logits gather of tp
 * 2 included; the shares of a kind of step add up to the whole. */
START_TEST(test_profile_ops)
{
    char in_path[300], out_path[300];
    snprintf(in_path, sizeof in_path, "%s/prof.jsonl", tmp_root);
    snprintf(out_path, sizeof out_path, "%s/prof-out.jsonl", tmp_root);
    write_file(in_path, "{\"prompt_token_ids\": [7, 8, 9], \"max_tokens\": 4}\n"
                        "{\"prompt_token_ids\": [5], \"max_tokens\": 3}\n");
    const char *args[] = {"--model", model, "--device", "cpu", "--tp", "2", "--num-kv-blocks", "8", "batch",
                          "--input", in_path, "--output", out_path, NULL};
    setenv("NANOLLM_PROFILE", "ops", 1);
    int rc = launch(args, NULL);
    unsetenv("NANOLLM_PROFILE");
    ck_assert_msg(rc == 0, "%s", err_text);
    static const char *const kinds[] = {"prefill", "decode (eager)"};
    for (int k = 0; k < 2; k++) {
        double share = 0;
        int lines = 0;
        bool seen_attention = false, seen_all_reduce = false;
        for (const char *at = err_text; (at = strstr(at, "profile ops ")) != NULL; at++) {
            const char *rest = at + strlen("profile ops ");
            if (strncmp(rest, kinds[k], strlen(kinds[k])) != 0 || rest[strlen(kinds[k])] != ' ') continue;
            const char *eol = strchr(rest, '\n');
            const char *pct = eol ? eol : rest + strlen(rest);
            while (pct > rest && pct[-1] != ' ') pct--; /* the last field, "NN.N%" */
            share += atof(pct);
            lines++;
            seen_attention |= strstr(rest, "attention") && strstr(rest, "attention") < eol;
            seen_all_reduce |= strstr(rest, "all-reduce") && strstr(rest, "all-reduce") < eol;
        }
        ck_assert_msg(lines >= 10, "%s: %d op lines in\n%s", kinds[k], lines, err_text);
        ck_assert_msg(seen_attention && seen_all_reduce, "%s: ops missing in\n%s", kinds[k], err_text);
        ck_assert_msg(share > 99.0 && share < 101.0, "%s: shares add up to %.1f%%", kinds[k], share);
    }
    ck_assert_ptr_nonnull(strstr(err_text, "logits gather"));
    /* NANOLLM_PROFILE=1 keeps to the phases */
    setenv("NANOLLM_PROFILE", "1", 1);
    rc = launch(args, NULL);
    unsetenv("NANOLLM_PROFILE");
    ck_assert_msg(rc == 0, "%s", err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "profile rank 0 prefill"));
    ck_assert_ptr_null(strstr(err_text, "profile ops"));
}
END_TEST

/* 0 success, 1 runtime failure, 2 bad usage or bad input files. */
START_TEST(test_exit_codes)
{
    char in_path[300], out_path[300];
    snprintf(in_path, sizeof in_path, "%s/one.jsonl", tmp_root);
    snprintf(out_path, sizeof out_path, "%s/one-out.jsonl", tmp_root);
    write_file(in_path, "{\"prompt_token_ids\": [7], \"max_tokens\": 2}\n");
    const char *ok[] = {"--model", model, "--device", "cpu", "--num-kv-blocks", "8", "batch", "--input",
                        in_path, "--output", out_path, NULL};
    ck_assert_msg(launch(ok, NULL) == 0, "%s", err_text);
    /* The heads (4) do not split 3 ways: the workers refuse at load, and
     * that is bad usage for this model. */
    const char *tp3[] = {"--model", model, "--device", "cpu", "--tp", "3", "--num-kv-blocks", "8",
                         "batch", "--input", in_path, "--output", out_path, NULL};
    ck_assert_int_eq(launch(tp3, NULL), 2);
    ck_assert_msg(strstr(err_text, "worker rank") && strstr(err_text, "tp 3"), "%s", err_text);
    /* A model the KV cache cannot hold. */
    const char *kv[] = {"--model", model, "--device", "cpu", "--num-kv-blocks", "2", "--max-model-len", "64",
                        "batch", "--input", in_path, "--output", out_path, NULL};
    ck_assert_int_eq(launch(kv, NULL), 1);
    ck_assert_msg(strstr(err_text, "max_model_len 64"), "%s", err_text);
    /* An e4m3 KV cache runs the batch; the worker says what it holds (an
     * INFO message). */
    const char *fp8[] = {"--model", model, "--device", "cpu", "--num-kv-blocks", "8", "--kv-cache-dtype",
                         "fp8", "batch", "--input", in_path, "--output", out_path, NULL};
    setenv("NANOLLM_LOG_LEVEL", "info", 1);
    int fp8_rc = launch(fp8, NULL);
    unsetenv("NANOLLM_LOG_LEVEL");
    ck_assert_msg(fp8_rc == 0, "%s", err_text);
    ck_assert_msg(strstr(err_text, "F8_E4M3"), "%s", err_text);
    const char *bad_kv[] = {"--model", model, "--kv-cache-dtype", "fp4", "batch", NULL};
    ck_assert_int_eq(launch(bad_kv, NULL), 2);
    ck_assert_msg(strstr(err_text, "--kv-cache-dtype") && strstr(err_text, "fp4"), "%s", err_text);
    const char *bad_opt[] = {"--model", model, "--tp", "two", "batch", NULL};
    ck_assert_int_eq(launch(bad_opt, NULL), 2);
    ck_assert_ptr_nonnull(strstr(err_text, "--tp"));
    const char *no_input[] = {"--model", model, "batch", "--input", "/nonexistent/in.jsonl", "--output",
                              out_path, NULL};
    ck_assert_int_eq(launch(no_input, NULL), 2);
    ck_assert_ptr_nonnull(strstr(err_text, "/nonexistent/in.jsonl"));
    char bad_out[320];
    snprintf(bad_out, sizeof bad_out, "%s/no-such-dir/out.jsonl", tmp_root);
    const char *no_output[] = {"--model", model, "batch", "--input", in_path, "--output", bad_out, NULL};
    ck_assert_int_eq(launch(no_output, NULL), 2);
    ck_assert_ptr_nonnull(strstr(err_text, "no-such-dir"));
    /* Weights cut short: the worker loading them finds it, and the leader
     * still exits 2 (a bad input file) with the worker's message. */
    char trunc_dir[320], cmd[1024], weights[400];
    snprintf(trunc_dir, sizeof trunc_dir, "%s/truncated-model", tmp_root);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", trunc_dir, model, trunc_dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(weights, sizeof weights, "%s/model.safetensors", trunc_dir);
    struct stat sb;
    ck_assert_int_eq(stat(weights, &sb), 0);
    ck_assert_int_eq(truncate(weights, sb.st_size / 2), 0);
    const char *trunc[] = {"--model", trunc_dir, "--device", "cpu", "--num-kv-blocks", "8", "batch",
                           "--input", in_path, "--output", out_path, NULL};
    ck_assert_int_eq(launch(trunc, NULL), 2);
    ck_assert_msg(strstr(err_text, "worker rank 0") && strstr(err_text, "model.safetensors"), "%s",
                  err_text);
}
END_TEST

/* ---- kills ------------------------------------------------------------------------ */

/* The worker processes of leader (nanollm-worker children), by rank. */
static int find_workers(pid_t leader, pid_t *by_rank, int tp)
{
    for (int r = 0; r < tp; r++) by_rank[r] = 0;
    char path[128];
    snprintf(path, sizeof path, "/proc/%d/task", (int)leader);
    DIR *d = opendir(path);
    if (!d) return 0;
    int found = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (ent->d_name[0] == '.') continue;
        char cpath[300], buf[4096];
        snprintf(cpath, sizeof cpath, "/proc/%d/task/%s/children", (int)leader, ent->d_name);
        slurp(cpath, buf, sizeof buf);
        char *save = NULL;
        for (char *tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
            pid_t pid = (pid_t)atoi(tok);
            char cmd_path[64], cmd[512];
            snprintf(cmd_path, sizeof cmd_path, "/proc/%d/cmdline", (int)pid);
            FILE *f = fopen(cmd_path, "r");
            if (!f) continue;
            size_t n = fread(cmd, 1, sizeof cmd - 1, f);
            fclose(f);
            cmd[n] = '\0';
            /* argv: PATH --shm-fd FD --rank R, NUL-separated */
            const char *argv[8] = {0};
            int argc = 0;
            for (size_t i = 0; i < n && argc < 8; i += strlen(cmd + i) + 1) argv[argc++] = cmd + i;
            if (argc < 5 || !strstr(argv[0], "nanollm-worker") || strcmp(argv[3], "--rank") != 0) continue;
            int rank = atoi(argv[4]);
            if (rank >= 0 && rank < tp && !by_rank[rank]) {
                by_rank[rank] = pid;
                found++;
            }
        }
    }
    closedir(d);
    return found;
}

/* Shared-memory segments named for leader ("/nanollm-<pid>-..."). */
static int leader_segments(pid_t leader)
{
    char pattern[96];
    snprintf(pattern, sizeof pattern, "/dev/shm/nanollm-%d-*", (int)leader);
    glob_t g;
    int n = glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    if (n) fprintf(stderr, "left behind: %s\n", g.gl_pathv[0]);
    globfree(&g);
    return n;
}

/* Process CPU time (utime + stime) in clock ticks, -1 when gone. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    slurp(path, buf, sizeof buf);
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    unsigned long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (long)(ut + st);
}

enum { KILL_TP = 2, LONG_LINES = 64, LONG_SHORT_LINES = 8, SHORT_TOKENS = 4 };

/* Lines of the output file so far (complete ones). */
static int count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* The output of a job cut short: one parsable line per input line, in
 * order; the first LONG_SHORT_LINES finished (written as they finished),
 * every other one an error marked incomplete whose message holds needle. */
static void expect_cut_output(const char *needle)
{
    char out_path[300];
    snprintf(out_path, sizeof out_path, "%s/long-out.jsonl", tmp_root);
    FILE *f = fopen(out_path, "r");
    ck_assert_ptr_nonnull(f);
    char *buf = NULL;
    size_t cap = 0;
    int n = 0;
    ssize_t len;
    while ((len = getline(&buf, &cap, f)) > 0) {
        ck_assert_int_lt(n, LONG_LINES);
        ck_assert_msg(buf[len - 1] == '\n', "line %d is cut", n + 1);
        json_error_t e;
        json_t *o = json_loads(buf, 0, &e);
        ck_assert_msg(o != NULL, "output line %d: %s", n + 1, e.text);
        ck_assert_int_eq(json_integer_value(json_object_get(o, "id")), n);
        const char *fin = json_string_value(json_object_get(o, "finish_reason"));
        if (n < LONG_SHORT_LINES) {
            ck_assert_str_eq(fin, "length");
            ck_assert_int_eq((int)json_array_size(json_object_get(o, "token_ids")), SHORT_TOKENS);
        } else {
            ck_assert_str_eq(fin, "error");
            ck_assert(json_is_true(json_object_get(o, "incomplete")));
            const char *msg = json_string_value(json_object_get(o, "error"));
            ck_assert_msg(msg && strstr(msg, needle), "line %d: error '%s' lacks '%s'", n + 1, msg ? msg : "",
                          needle);
        }
        json_decref(o);
        n++;
    }
    free(buf);
    fclose(f);
    ck_assert_int_eq(n, LONG_LINES);
}

/* Starts a batch job big enough to run for seconds, and returns once its
 * workers are computing and its short lines are written. */
static pid_t start_long_job(pid_t workers[KILL_TP])
{
    static char in_text[1 << 16];
    in_text[0] = '\0';
    for (int i = 0; i < LONG_LINES; i++) {
        char line[256];
        snprintf(line, sizeof line,
                 "{\"prompt_token_ids\": [%d, %d, %d, %d], \"max_tokens\": %d, \"ignore_eos\": true}\n",
                 i + 1, 2 * i + 5, 3 * i + 7, 900 - i, i < LONG_SHORT_LINES ? SHORT_TOKENS : 480);
        strcat(in_text, line);
    }
    char in_path[300], out_path[300];
    snprintf(in_path, sizeof in_path, "%s/long.jsonl", tmp_root);
    snprintf(out_path, sizeof out_path, "%s/long-out.jsonl", tmp_root);
    write_file(in_path, in_text);
    pid_t leader = spawn((const char *[]){"--model", model, "--device", "cpu", "--tp", "2",
                                          "--num-kv-blocks", "2048", "--max-model-len", "512", "batch",
                                          "--input", in_path, "--output", out_path, NULL},
                         NULL);
    double t0 = now_s();
    while (find_workers(leader, workers, KILL_TP) < KILL_TP) {
        ck_assert_msg(waitpid(leader, NULL, WNOHANG) == 0, "the leader ended before its workers started");
        ck_assert_msg(now_s() - t0 < 30, "no workers after 30 s");
        usleep(10000);
    }
    /* Loaded and decoding: rank 1 (no sampling, no start-up beyond its
     * shard) keeps using CPU time. */
    long base = cpu_ticks(workers[1]);
    do {
        ck_assert_msg(waitpid(leader, NULL, WNOHANG) == 0, "the leader ended before the kill");
        ck_assert_msg(now_s() - t0 < 30, "the workers never got busy");
        usleep(20000);
    } while (cpu_ticks(workers[1]) < base + 10 || count_lines(out_path) < LONG_SHORT_LINES);
    return leader;
}

/* Waits for pid (a child of this process) for at most limit seconds;
 * returns the seconds it took, or -1 (after SIGKILL) when it did not end. */
static double wait_exit(pid_t pid, double limit, int *status)
{
    double t0 = now_s();
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid) return now_s() - t0;
        ck_assert_int_eq(w, 0);
        if (now_s() - t0 > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            return -1;
        }
        usleep(2000);
    }
}

/* No process is left: this process (the subreaper) has no children. */
static void expect_no_children(void)
{
    int status;
    pid_t w = waitpid(-1, &status, WNOHANG);
    ck_assert_msg(w < 0 && errno == ECHILD, "a process was left behind (pid %d)", (int)w);
}

static void become_subreaper(void)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
}

/* Either rank: rank 0 is the one that answers the leader. */
START_TEST(test_kill_worker)
{
    become_subreaper();
    pid_t workers[KILL_TP];
    pid_t leader = start_long_job(workers);
    int rank = _i;
    ck_assert_int_eq(kill(workers[rank], SIGKILL), 0);
    int status;
    double took = wait_exit(leader, 10.0, &status);
    ck_assert_msg(took >= 0, "the leader did not exit within 10 s of a worker's death");
    ck_assert_msg(took < DEATH_LIMIT_S, "the leader took %.2f s to notice a dead worker", took);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "leader wait status 0x%x", status);
    char path[300];
    snprintf(path, sizeof path, "%s/stderr", tmp_root);
    slurp(path, err_text, sizeof err_text);
    char needle[64];
    snprintf(needle, sizeof needle, "worker rank %d (pid %d)", rank, (int)workers[rank]);
    ck_assert_msg(strstr(err_text, needle) && strstr(err_text, "signal 9"), "stderr lacks '%s': %s", needle,
                  err_text);
    expect_cut_output(needle);
    ck_assert_int_eq(leader_segments(leader), 0);
    expect_no_children();
}
END_TEST

START_TEST(test_kill_leader)
{
    become_subreaper();
    pid_t workers[KILL_TP];
    pid_t leader = start_long_job(workers);
    ck_assert_int_eq(kill(leader, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(leader, &status, 0), leader);
    double t0 = now_s();
    /* The orphaned workers are this process's children now. */
    for (int r = 0; r < KILL_TP; r++) {
        double left = DEATH_LIMIT_S - (now_s() - t0);
        double took = wait_exit(workers[r], left > 0 ? left : 0.001, &status);
        ck_assert_msg(took >= 0, "worker rank %d outlived its leader by %.1f s", r, DEATH_LIMIT_S);
    }
    ck_assert_int_eq(leader_segments(leader), 0);
    expect_no_children();
}
END_TEST

START_TEST(test_interrupt_leader)
{
    become_subreaper();
    pid_t workers[KILL_TP];
    pid_t leader = start_long_job(workers);
    ck_assert_int_eq(kill(leader, SIGINT), 0);
    int status;
    double took = wait_exit(leader, 10.0, &status);
    ck_assert_msg(took >= 0 && took < DEATH_LIMIT_S, "the leader took %.2f s after SIGINT", took);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 130, "leader wait status 0x%x", status);
    expect_cut_output("interrupted by SIGINT");
    double t0 = now_s();
    for (int r = 0; r < KILL_TP; r++) {
        /* Shut down and reaped by the leader (then not a child here), or
         * orphaned and adopted by this subreaper. */
        pid_t w = waitpid(workers[r], &status, WNOHANG);
        if (w == workers[r] || (w < 0 && errno == ECHILD)) continue;
        double left = DEATH_LIMIT_S - (now_s() - t0);
        ck_assert_msg(wait_exit(workers[r], left > 0 ? left : 0.001, &status) >= 0,
                      "worker rank %d still runs after SIGINT to the leader", r);
    }
    ck_assert_int_eq(leader_segments(leader), 0);
    expect_no_children();
}
END_TEST

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "%s/nl-e2e-cli-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(model, sizeof model, "%s/%s", tmp_root, GOLDEN_MODEL);
    /* The golden model, written by the product's own mkmodel command with
     * the arguments its golden file records. */
    json_t *golden = golden_json();
    int failed = 1;
    if (!golden) goto out;
    const char *args[64] = {"mkmodel", "--out", model};
    int argc = 3;
    json_t *mk = json_object_get(golden, "mkmodel_args");
    for (size_t i = 0; i < json_array_size(mk) && argc < 63; i++)
        args[argc++] = json_string_value(json_array_get(mk, i));
    args[argc] = NULL;
    pid_t pid = spawn_quiet(args, NULL);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "nanollm-launch mkmodel failed\n");
        json_decref(golden);
        goto out;
    }
    json_decref(golden);
    setenv("NANOLLM_CPU_KV_BYTES", "16777216", 0);

    Suite *s = suite_create("e2e_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_batch_mixed_lines);
    tcase_add_test(tc, test_batch_resume);
    tcase_add_test(tc, test_generate_demo_notice);
    tcase_add_test(tc, test_tokenize_round_trip);
    tcase_add_test(tc, test_llama_text_prompt);
    tcase_add_test(tc, test_batch_text_with_nul);
    tcase_add_test(tc, test_profile_ops);
    tcase_add_test(tc, test_exit_codes);
    tcase_add_loop_test(tc, test_kill_worker, 0, KILL_TP);
    tcase_add_test(tc, test_kill_leader);
    tcase_add_test(tc, test_interrupt_leader);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
out:;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
