/* cli_bench.c — `nanollm-launch bench [--workload FILE.jsonl] [--num-seqs N]`.
 *
 * Measures as nano-vllm's bench.py does: one warm-up generate, then the
 * wall time of one generate over the whole workload, reported as output
 * tokens per second.  The workload is a JSONL file of native batch lines
 * (cli_batch.h) with prompt_token_ids and max_tokens, such as
 * {"prompt_token_ids": [...], "max_tokens": N, "temperature": T,
 * "ignore_eos": B}; their other sampling fields (top_k, top_p, min_p,
 * seed, stop, ...) are read as `batch` reads them.  Or, without --workload, a random one shaped like
 * bench.py's: --num-seqs prompts (default 256) of 100..--max-input-len
 * random ids in [0, 10000] (below the model's vocabulary), each with
 * max_tokens 100..--max-output-len (both scaled into max_model_len when
 * they exceed it), temperature 0.6, EOS ignored (our own generator, seeded, so runs repeat;
 * a workload file can reproduce bench.py's exact draw).
 *
 * While it runs, a progress line on stderr (a terminal: redrawn; otherwise
 * every 10 s).  At the end, bench.py's line ("Total: ..tok, Time: ..s,
 * Throughput: ..tok/s") and a summary in the shape of `vllm bench`'s
 * (requests/s, output and total tokens/s, TTFT and TPOT mean, median, p99,
 * the prefill/decode split) on stdout; --json FILE also writes it as one
 * JSON record (date, commit: $NANOLLM_COMMIT when set, else the build's own,
 * nl_build_commit(); device, the model's shape from its
 * config.json, workload, tp, engine options, figures, peak KV blocks) for
 * bench/RESULTS.md.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "leader/cli/cli_batch.h"

/* One request: its ids and sampling, owned by its workload line when it
 * has one (the stop strings point into the line), else malloc'd here. */
typedef struct bench_req {
    int32_t *ids;
    int32_t n;
    nl_sampling_params params;
    batch_request *line;
} bench_req;

static void bench_reqs_free(bench_req *reqs, int32_t n)
{
    for (int32_t k = 0; reqs && k < n; k++) {
        if (reqs[k].line) {
            batch_request_free(reqs[k].line);
            free(reqs[k].line);
        } else {
            free(reqs[k].ids);
        }
    }
    free(reqs);
}

static int32_t rand_between(uint64_t *s, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(nl_random_next(s) % (uint64_t)(hi - lo + 1));
}

/* Workload line `index` (0-based) into r; false with why set when the
 * line is refused: anything `batch` refuses, a prompt that is not
 * prompt_token_ids (bench replays ids), or no max_tokens. */
static bool parse_request(const char *text, size_t len, int64_t index, bench_req *r, char *why,
                          size_t cap)
{
    r->line = calloc(1, sizeof(*r->line));
    if (!r->line) {
        snprintf(why, cap, "out of memory");
        return false;
    }
    cli_sampling defaults;
    cli_sampling_init(&defaults);
    batch_request *rq = r->line;
    batch_request_parse(rq, &defaults, text, len, index);
    if (rq->error) {
        snprintf(why, cap, "%s", rq->error);
        return false;
    }
    if (rq->meta.format != BATCH_NATIVE || rq->prompt.kind != NL_PROMPT_TOKENS || rq->prompt.n_tokens == 0) {
        snprintf(why, cap, "needs a non-empty \"prompt_token_ids\" (a native batch line: bench replays "
                 "token ids)");
        return false;
    }
    if (!json_object_get(rq->obj, "max_tokens")) {
        snprintf(why, cap, "needs \"max_tokens\"");
        return false;
    }
    r->ids = rq->ids; /* the prompt's ids, owned by the line */
    r->n = rq->prompt.n_tokens;
    r->params = rq->params;
    return true;
}

static int read_workload(const char *path, bench_req **out, int32_t *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "nanollm-launch: bench: cannot open workload %s: %m\n", path);
        return 2;
    }
    bench_req *reqs = NULL;
    int32_t n = 0, cap = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    int rc = 0;
    for (int32_t lineno = 1; (len = getline(&line, &line_cap, f)) >= 0; lineno++) {
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            bench_req *p = realloc(reqs, sizeof(*reqs) * (size_t)cap);
            if (!p) {
                fprintf(stderr, "nanollm-launch: bench: out of memory at %s:%d\n", path, lineno);
                rc = 1;
                break;
            }
            reqs = p;
        }
        char why[512];
        bench_req *r = &reqs[n];
        memset(r, 0, sizeof(*r));
        bool ok = parse_request(line, (size_t)len, lineno - 1, r, why, sizeof(why));
        n++; /* counted even when refused, so its line is freed */
        if (!ok) {
            fprintf(stderr, "nanollm-launch: bench: %s:%d: %s\n", path, lineno, why);
            rc = 2;
            break;
        }
    }
    free(line);
    fclose(f);
    *out = reqs;
    *n_out = n;
    if (rc == 0 && n == 0) {
        fprintf(stderr, "nanollm-launch: bench: %s holds no requests\n", path);
        rc = 2;
    }
    return rc;
}

/* bench.py's workload, fitted to the model: prompt and output lengths are
 * scaled into max_len together, ids stay below the vocabulary. */
static void random_workload(int32_t num_seqs, int32_t max_in, int32_t max_out, int32_t max_len,
                            int32_t vocab_size, bench_req **out)
{
    uint64_t s = 0;
    bench_req *reqs = calloc((size_t)num_seqs, sizeof(*reqs));
    if ((int64_t)max_in + max_out > max_len) {
        /* Keep bench.py's shape, scaled into the model's context; each side
         * keeps at least one token (max_len >= 2 was checked). */
        double scale = (double)max_len / ((double)max_in + (double)max_out);
        max_in = (int32_t)(max_in * scale);
        if (max_in < 1) max_in = 1;
        if (max_in > max_len - 1) max_in = max_len - 1;
        max_out = max_len - max_in;
    }
    int32_t min_in = max_in < 100 ? 1 : 100, min_out = max_out < 100 ? 1 : 100;
    int32_t max_id = vocab_size - 1 < 10000 ? vocab_size - 1 : 10000;
    for (int32_t k = 0; reqs && k < num_seqs; k++) {
        bench_req *r = &reqs[k];
        r->n = rand_between(&s, min_in, max_in);
        r->ids = malloc(sizeof(int32_t) * (size_t)r->n);
        for (int32_t i = 0; r->ids && i < r->n; i++) r->ids[i] = rand_between(&s, 0, max_id);
        nl_sampling_params_init(&r->params);
        r->params.max_tokens = rand_between(&s, min_out, max_out);
        r->params.temperature = 0.6f;
        r->params.ignore_eos = true;
    }
    *out = reqs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of sorted v[0..n), linearly interpolated as
 * numpy's default does. */
static double percentile(const double *v, int32_t n, double p)
{
    if (n == 0) return 0.0;
    double pos = p / 100.0 * (double)(n - 1);
    int32_t lo = (int32_t)floor(pos);
    int32_t hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - (double)lo);
}

typedef struct latency_summary {
    double mean, median, p99;
    int32_t n;
} latency_summary;

/* Sorts v in place. */
static latency_summary summarize(double *v, int32_t n)
{
    latency_summary s = {0, 0, 0, n};
    if (n == 0) return s;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (int32_t k = 0; k < n; k++) sum += v[k];
    s.mean = sum / n;
    s.median = percentile(v, n, 50);
    s.p99 = percentile(v, n, 99);
    return s;
}

typedef struct bench_progress {
    double start, last;
    int64_t total_tokens; /* max_tokens over the workload */
    bool tty;
} bench_progress;

static void bench_draw(bench_progress *p, const nl_engine_stats *st, int64_t base_tokens, int64_t finished,
                       int32_t n, bool final)
{
    double now = cli_now();
    if (!final && now - p->last < (p->tty ? 0.2 : 10.0)) return;
    p->last = now;
    int64_t done = st->output_tokens - base_tokens;
    double dt = now - p->start;
    double frac = p->total_tokens > 0 ? (double)done / (double)p->total_tokens : 0;
    fprintf(stderr, "%sbench: %lld/%d requests, %lld/%lld tokens (%.0f%%), %.0f tok/s, %d running, %d waiting, "
                    "%d/%d KV blocks, %.1f s%s",
            p->tty ? "\r" : "", (long long)finished, n, (long long)done, (long long)p->total_tokens, 100 * frac,
            dt > 0 ? (double)done / dt : 0.0, st->num_running, st->num_waiting, st->num_kv_blocks - st->num_free_kv_blocks,
            st->num_kv_blocks, dt, p->tty && !final ? " " : "\n");
}

/* The model's shape from its config.json, or null. */
static json_t *model_shape(const char *dir)
{
    if (!dir) return json_null();
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    if (!c) return json_null();
    static const char *const keys[] = {"model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
                                       "torch_dtype", "tie_word_embeddings"};
    json_t *o = json_object();
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = json_object_get(c, keys[k]);
        if (v) json_object_set(o, keys[k], v);
    }
    json_decref(c);
    return o;
}

enum { OPT_WORKLOAD = CLI_OWN, OPT_NUM_SEQS, OPT_MAX_INPUT_LEN, OPT_MAX_OUTPUT_LEN, OPT_JSON };

static const struct option bench_options[] = {
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"num-seqs", required_argument, NULL, OPT_NUM_SEQS},
    {"max-input-len", required_argument, NULL, OPT_MAX_INPUT_LEN},
    {"max-output-len", required_argument, NULL, OPT_MAX_OUTPUT_LEN},
    {"json", required_argument, NULL, OPT_JSON},
    {NULL, 0, NULL, 0},
};

const cli_command cli_bench_command = {
    .name = "bench",
    .options = bench_options,
    .help =
    "usage: nanollm-launch bench [--workload FILE.jsonl] [--num-seqs N] [--max-input-len N]\n"
    "                            [--max-output-len N] [--json FILE]\n"
    "\n"
    "Throughput in the manner of nano-vllm's bench.py: one warm-up generate, then the\n"
    "timed generate of the whole workload, printed as 'Total: ...tok, Time: ...s,\n"
    "Throughput: ...tok/s'.  Without --workload, a seeded random one: --num-seqs prompts\n"
    "(256) of 100..--max-input-len (1024) ids, each with 100..--max-output-len (1024)\n"
    "output tokens.  A workload line: {\"prompt_token_ids\": [...], \"max_tokens\": N,\n"
    "\"temperature\": T, \"ignore_eos\": B}.  Progress goes to stderr while it runs; then a\n"
    "summary like vllm bench's (requests/s, output and total tok/s, TTFT and TPOT mean,\n"
    "median and p99, prefill/decode split, peak KV blocks).  --json FILE also writes it\n"
    "as one JSON record (date, $NANOLLM_COMMIT, device, model shape, workload, options).\n",
};

int cli_bench(const nl_engine_config *config, int argc, char **argv)
{
    const char *workload = NULL, *json_path = NULL;
    int64_t num_seqs = 256, max_in = 1024, max_out = 1024;
    cli_parser p;
    if (!cli_parser_init(&p, &cli_bench_command, config, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        bool ok = true;
        if (c == OPT_WORKLOAD) workload = v;
        else if (c == OPT_NUM_SEQS) ok = cli_parse_int(&p, "--num-seqs", v, 1, 1 << 20, &num_seqs);
        else if (c == OPT_MAX_INPUT_LEN) ok = cli_parse_int(&p, "--max-input-len", v, 1, 1 << 24, &max_in);
        else if (c == OPT_MAX_OUTPUT_LEN) ok = cli_parse_int(&p, "--max-output-len", v, 1, 1 << 24, &max_out);
        else if (c == OPT_JSON) json_path = v;
        else if (c == CLI_POSITIONAL) ok = cli_usage_error(&p, "unexpected argument '%s'", v) != CLI_EXIT;
        else ok = cli_usage_error(&p, "option %d has no handler", c) != CLI_EXIT;
        if (!ok) break;
    }
    nl_engine_config engine_config = p.config;
    cli_parser_free(&p);
    if (c != CLI_DONE) return p.exit;
    config = &engine_config;
    bench_req *reqs = NULL;
    int32_t n = 0;
    if (workload) {
        int rc = read_workload(workload, &reqs, &n);
        if (rc != 0) {
            bench_reqs_free(reqs, n);
            return rc;
        }
    }

    nl_engine *engine = NULL;
    int open_rc = cli_open_engine(config, &engine);
    if (open_rc != 0) {
        bench_reqs_free(reqs, n);
        return open_rc;
    }
    cli_demo_note(engine);
    nl_engine_info info;
    nl_engine_get_info(engine, &info);
    int rc = 0;
    uint64_t *ids = NULL;
    double *ttft = NULL, *tpot = NULL;
    if (info.max_model_len < 2) {
        fprintf(stderr, "nanollm-launch: bench: max_model_len %d leaves no room for a prompt and an "
                "output token\n", info.max_model_len);
        rc = 2;
        goto out;
    }
    if (!workload) {
        n = (int32_t)num_seqs;
        random_workload(n, (int32_t)max_in, (int32_t)max_out, info.max_model_len, info.vocab_size, &reqs);
    }
    ids = calloc((size_t)n, sizeof(uint64_t));
    ttft = calloc((size_t)n, sizeof(double));
    tpot = calloc((size_t)n, sizeof(double));
    if (!reqs || !ids || !ttft || !tpot) {
        fprintf(stderr, "nanollm-launch: bench: out of memory for %d requests\n", n);
        rc = 1;
        goto out;
    }

    /* Warm-up: one short generate, as bench.py does. */
    int32_t warm_ids[4] = {33, 44, 55, 66};
    for (int k = 0; k < 4; k++) warm_ids[k] %= info.vocab_size;
    nl_sampling_params wsp;
    nl_sampling_params_init(&wsp);
    int32_t warm_n = info.max_model_len < 20 ? 1 : 4;
    if (wsp.max_tokens > info.max_model_len - warm_n) wsp.max_tokens = info.max_model_len - warm_n;
    nl_prompt wp = {.kind = NL_PROMPT_TOKENS, .token_ids = warm_ids, .n_tokens = warm_n};
    uint64_t wid;
    if (nl_engine_submit(engine, &wp, &wsp, &wid) != NL_OK || nl_engine_run_until_done(engine) != NL_OK) {
        cli_report("bench warm-up");
        rc = 1;
        goto out;
    }
    nl_engine_release(engine, wid);

    nl_engine_stats before;
    nl_engine_get_stats(engine, &before);
    bench_progress prog = {.start = cli_now(), .tty = isatty(STDERR_FILENO) != 0};
    for (int32_t k = 0; k < n; k++) prog.total_tokens += reqs[k].params.max_tokens;
    double t0 = cli_now();
    int64_t prompt_tokens = 0;
    for (int32_t k = 0; k < n; k++) {
        nl_prompt p = {.kind = NL_PROMPT_TOKENS, .token_ids = reqs[k].ids, .n_tokens = reqs[k].n};
        if (nl_engine_submit(engine, &p, &reqs[k].params, &ids[k]) != NL_OK) {
            char what[64];
            snprintf(what, sizeof(what), "bench request %d", k + 1);
            cli_report(what);
            rc = 2;
            goto out;
        }
        prompt_tokens += reqs[k].n;
    }
    int32_t peak_blocks = 0;
    nl_engine_stats st = before;
    while (nl_engine_has_unfinished(engine)) {
        if (nl_engine_step(engine) != NL_OK) {
            if (prog.tty) fputc('\n', stderr);
            cli_report("bench");
            rc = 1;
            goto out;
        }
        nl_engine_get_stats(engine, &st);
        int32_t used = st.num_kv_blocks - st.num_free_kv_blocks;
        if (used > peak_blocks) peak_blocks = used;
        bench_draw(&prog, &st, before.output_tokens, st.num_finished - before.num_finished, n, false);
    }
    double seconds = cli_now() - t0;
    bench_draw(&prog, &st, before.output_tokens, st.num_finished - before.num_finished, n, true);
    int64_t output = 0, cached = 0;
    int32_t n_tpot = 0, n_done = 0;
    for (int32_t k = 0; k < n; k++) {
        const nl_result *r;
        if (nl_engine_get_result(engine, ids[k], &r) == NL_OK) {
            output += r->n_tokens;
            cached += r->cached_tokens;
            ttft[n_done++] = r->time_to_first_token * 1e3;
            if (r->n_tokens > 1)
                tpot[n_tpot++] = (r->latency - r->time_to_first_token) * 1e3 / (double)(r->n_tokens - 1);
        }
    }
    latency_summary t1 = summarize(ttft, n_done), t2 = summarize(tpot, n_tpot);
    double prefill_s = st.prefill_seconds - before.prefill_seconds, decode_s = st.decode_seconds - before.decode_seconds;
    int64_t prefill_steps = st.prefill_steps - before.prefill_steps, decode_steps = st.decode_steps - before.decode_steps;
    printf("Total: %lldtok, Time: %.2fs, Throughput: %.2ftok/s\n", (long long)output, seconds,
           seconds > 0 ? (double)output / seconds : 0.0);
    printf("============ Benchmark Result ============\n");
    printf("%-40s %d\n", "Successful requests:", n_done);
    printf("%-40s %.2f\n", "Benchmark duration (s):", seconds);
    printf("%-40s %lld\n", "Total input tokens:", (long long)prompt_tokens);
    printf("%-40s %lld\n", "Total generated tokens:", (long long)output);
    printf("%-40s %.2f\n", "Request throughput (req/s):", seconds > 0 ? n_done / seconds : 0.0);
    printf("%-40s %.2f\n", "Output token throughput (tok/s):", seconds > 0 ? (double)output / seconds : 0.0);
    printf("%-40s %.2f\n", "Total token throughput (tok/s):",
           seconds > 0 ? (double)(output + prompt_tokens) / seconds : 0.0);
    printf("---------------Time to First Token----------------\n");
    printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean TTFT (ms):", t1.mean, "Median TTFT (ms):", t1.median,
           "P99 TTFT (ms):", t1.p99);
    printf("-----Time per Output Token (excl. 1st token)------\n");
    printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean TPOT (ms):", t2.mean, "Median TPOT (ms):", t2.median,
           "P99 TPOT (ms):", t2.p99);
    printf("-----------------Engine steps---------------------\n");
    printf("%-40s %lld, %.2f s\n", "Prefill steps, time:", (long long)prefill_steps, prefill_s);
    printf("%-40s %lld, %.2f s\n", "Decode steps, time:", (long long)decode_steps, decode_s);
    printf("%-40s %d of %d\n", "Peak KV blocks:", peak_blocks, info.num_kv_blocks);
    printf("==================================================\n");
    fprintf(stderr, "bench: %d requests, %lld prompt tokens (%lld cached), %lld output tokens, device %s, tp %d\n",
            n, (long long)prompt_tokens, (long long)cached, (long long)output, info.device_name, info.tp);
    if (json_path) {
        char date[32];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        const char *commit = getenv("NANOLLM_COMMIT");
        if (!commit) commit = nl_build_commit();
        json_t *wl = workload ? json_pack("{s:s, s:s, s:i}", "kind", "file", "path", workload, "requests", n)
                              : json_pack("{s:s, s:i, s:I, s:I}", "kind", "random", "requests", n,
                                          "max_input_len", (json_int_t)max_in, "max_output_len", (json_int_t)max_out);
        json_t *opts = json_pack("{s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:b, s:f}", "max_num_seqs", config->max_num_seqs,
                                 "max_num_batched_tokens", config->max_num_batched_tokens, "max_model_len",
                                 info.max_model_len, "block_size", info.block_size, "num_kv_blocks", info.num_kv_blocks,
                                 "enforce_eager", config->enforce_eager, "enable_prefix_caching",
                                 config->enable_prefix_caching, "prefill_first", config->prefill_first,
                                 "gpu_memory_utilization", (double)config->gpu_memory_utilization);
        json_t *rec = json_pack(
            "{s:s, s:o, s:s, s:o, s:b, s:o, s:i, s:o, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:i}",
            "date", date, "commit", commit ? json_string(commit) : json_null(), "device", info.device_name,
            "model", model_shape(info.model_dir), "demo_model", info.is_demo_model, "workload", wl, "tp", info.tp,
            "options", opts, "requests", (json_int_t)n_done, "prompt_tokens", (json_int_t)prompt_tokens,
            "output_tokens", (json_int_t)output, "seconds", seconds, "output_tok_per_s",
            seconds > 0 ? (double)output / seconds : 0.0, "total_tok_per_s",
            seconds > 0 ? (double)(output + prompt_tokens) / seconds : 0.0, "request_per_s",
            seconds > 0 ? n_done / seconds : 0.0,
            "split", json_pack("{s:I, s:f, s:I, s:f}", "prefill_steps", (json_int_t)prefill_steps, "prefill_seconds",
                               prefill_s, "decode_steps", (json_int_t)decode_steps, "decode_seconds", decode_s),
            "ttft_ms", json_pack("{s:f, s:f, s:f}", "mean", t1.mean, "p50", t1.median, "p99", t1.p99),
            "tpot_ms", json_pack("{s:f, s:f, s:f}", "mean", t2.mean, "p50", t2.median, "p99", t2.p99),
            "peak_kv_blocks", peak_blocks);
        if (!rec || json_dump_file(rec, json_path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            fprintf(stderr, "nanollm-launch: bench: writing %s failed: %m\n", json_path);
            rc = 2;
        }
        json_decref(rec);
    }
out:
    bench_reqs_free(reqs, n);
    free(ids);
    free(ttft);
    free(tpot);
    nl_engine_close(engine);
    return rc;
}
