/* cli_bench.c — `nanollm-launch bench [--workload FILE.jsonl] [--num-seqs N]`.
 *
 * Measures as nano-vllm's bench.py does: one warm-up generate, then the
 * wall time of one generate over the whole workload, reported as output
 * tokens per second.  The workload is a JSONL file of
 * {"prompt_token_ids": [...], "max_tokens": N, "temperature": T,
 * "ignore_eos": B} lines, or, without --workload, a random one shaped like
 * bench.py's: --num-seqs prompts (default 256) of 100..--max-input-len
 * random ids in [0, 10000] (below the model's vocabulary), each with
 * max_tokens 100..--max-output-len (both scaled into max_model_len when
 * they exceed it), temperature 0.6, EOS ignored (our own generator, seeded, so runs repeat;
 * a workload file can reproduce bench.py's exact draw).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

typedef struct bench_req {
    int32_t *ids;
    int32_t n;
    nl_sampling_params params;
} bench_req;

static int32_t rand_between(uint64_t *s, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(nl_random_next(s) % (uint64_t)(hi - lo + 1));
}

/* One workload line into r (r->ids malloc'd); false with why set when a
 * field is missing or out of range. */
static bool parse_request(json_t *o, bench_req *r, char *why, size_t cap)
{
    json_t *ids = json_object_get(o, "prompt_token_ids");
    json_t *mt = json_object_get(o, "max_tokens");
    json_t *temp = json_object_get(o, "temperature");
    json_t *ie = json_object_get(o, "ignore_eos");
    if (!json_is_array(ids) || json_array_size(ids) == 0 || json_array_size(ids) > INT32_MAX / 2 ||
        !json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > INT32_MAX / 2 ||
        (temp && !json_is_number(temp)) || (ie && !json_is_boolean(ie))) {
        snprintf(why, cap, "needs prompt_token_ids (a non-empty array) and max_tokens (an integer in "
                 "[1, %d]); temperature a number, ignore_eos a boolean", INT32_MAX / 2);
        return false;
    }
    nl_sampling_params_init(&r->params);
    r->n = (int32_t)json_array_size(ids);
    r->ids = malloc(sizeof(int32_t) * (size_t)r->n);
    if (!r->ids) {
        snprintf(why, cap, "out of memory for %d ids", r->n);
        return false;
    }
    for (int32_t k = 0; k < r->n; k++) {
        json_t *v = json_array_get(ids, (size_t)k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            snprintf(why, cap, "prompt_token_ids[%d] is not a token id (an integer in [0, %d])", k, INT32_MAX);
            return false;
        }
        r->ids[k] = (int32_t)json_integer_value(v);
    }
    r->params.max_tokens = (int32_t)json_integer_value(mt);
    if (temp) r->params.temperature = (float)json_number_value(temp);
    if (ie) r->params.ignore_eos = json_is_true(ie);
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
        json_error_t jerr;
        json_t *o = json_loadb(line, (size_t)len, 0, &jerr);
        char why[256];
        bench_req *r = &reqs[n];
        memset(r, 0, sizeof(*r));
        if (!o) snprintf(why, sizeof(why), "%s", jerr.text);
        bool ok = o && parse_request(o, r, why, sizeof(why));
        json_decref(o);
        n++; /* counted even when refused, so its ids are freed */
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

enum { OPT_WORKLOAD = CLI_OWN, OPT_NUM_SEQS, OPT_MAX_INPUT_LEN, OPT_MAX_OUTPUT_LEN };

static const struct option bench_options[] = {
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"num-seqs", required_argument, NULL, OPT_NUM_SEQS},
    {"max-input-len", required_argument, NULL, OPT_MAX_INPUT_LEN},
    {"max-output-len", required_argument, NULL, OPT_MAX_OUTPUT_LEN},
    {NULL, 0, NULL, 0},
};

const cli_command cli_bench_command = {
    .name = "bench",
    .options = bench_options,
    .help =
    "usage: nanollm-launch bench [--workload FILE.jsonl] [--num-seqs N] [--max-input-len N]\n"
    "                            [--max-output-len N]\n"
    "\n"
    "Throughput in the manner of nano-vllm's bench.py: one warm-up generate, then the\n"
    "timed generate of the whole workload, printed as 'Total: ...tok, Time: ...s,\n"
    "Throughput: ...tok/s'.  Without --workload, a seeded random one: --num-seqs prompts\n"
    "(256) of 100..--max-input-len (1024) ids, each with 100..--max-output-len (1024)\n"
    "output tokens.  A workload line: {\"prompt_token_ids\": [...], \"max_tokens\": N,\n"
    "\"temperature\": T, \"ignore_eos\": B}.\n",
};

int cli_bench(const nl_engine_config *config, int argc, char **argv)
{
    const char *workload = NULL;
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
            for (int32_t k = 0; k < n; k++) free(reqs[k].ids);
            free(reqs);
            return rc;
        }
    }

    nl_engine *engine = NULL;
    int open_rc = cli_open_engine(config, &engine);
    if (open_rc != 0) {
        for (int32_t k = 0; k < n; k++) free(reqs[k].ids);
        free(reqs);
        return open_rc;
    }
    cli_demo_note(engine);
    nl_engine_info info;
    nl_engine_get_info(engine, &info);
    int rc = 0;
    uint64_t *ids = NULL;
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
    if (!reqs || !ids) {
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
    if (nl_engine_run_until_done(engine) != NL_OK) {
        cli_report("bench");
        rc = 1;
        goto out;
    }
    double seconds = cli_now() - t0;
    int64_t output = 0, cached = 0;
    for (int32_t k = 0; k < n; k++) {
        const nl_result *r;
        if (nl_engine_get_result(engine, ids[k], &r) == NL_OK) {
            output += r->n_tokens;
            cached += r->cached_tokens;
        }
    }
    printf("Total: %lldtok, Time: %.2fs, Throughput: %.2ftok/s\n", (long long)output, seconds,
           seconds > 0 ? (double)output / seconds : 0.0);
    fprintf(stderr, "bench: %d requests, %lld prompt tokens (%lld cached), %lld output tokens, device %s, tp %d\n",
            n, (long long)prompt_tokens, (long long)cached, (long long)output, info.device_name, info.tp);
out:
    for (int32_t k = 0; reqs && k < n; k++) free(reqs[k].ids);
    free(reqs);
    free(ids);
    nl_engine_close(engine);
    return rc;
}
