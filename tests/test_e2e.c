/* test_e2e.c — the whole product path on the CPU, through nanollm.h: an
 * engine with real forked nanollm-worker processes runs the golden models
 * (the checkpoints behind tests/fixtures/golden/, re-made with mkmodel from
 * the arguments each golden file records) and must reproduce what Hugging
 * Face transformers generated.
 *
 * - golden: greedy tokens and chosen-token logprobs against the golden
 *   file.  The engine decodes its own continuation, so after a permitted
 *   near-tie flip (HF's top two within 1e-4) the rest is no longer
 *   comparable; the comparison stops there.
 * - scheduling: prefix caching off, chunked prefill, a KV pool small enough
 *   to force preemption, and a prefix-cache hit must each give exactly the
 *   tokens of the plain run: how the work is batched never changes a token.
 * - tensor parallel: tp 2 and tp 4 (shared-memory all-reduce between the
 *   workers) against tp 1, the one-KV-head model included.
 * - an e4m3 KV cache: the golden models within vLLM's top-5 rule, and four
 *   times the blocks of the fp32 cache from the same budget.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "leader/engine/engine_internal.h"
#include "nanollm.h"

#define MAX_PROMPTS 4
#define MAX_PROMPT_LEN 64
#define MAX_STEPS 16
#define N_TOP 5
#define NEAR_TIE 1e-4
#define LOGPROB_TOL 1e-3

static const char *const model_names[] = {"qwen3_tied_gqa", "qwen3_untied_mqa", "qwen2_bias",
                                          "qwen3_sharded_mha"};
#define N_MODELS (int)(sizeof model_names / sizeof model_names[0])

typedef struct golden {
    int n_prompts, steps;
    int32_t prompts[MAX_PROMPTS][MAX_PROMPT_LEN];
    int32_t prompt_len[MAX_PROMPTS];
    int32_t tokens[MAX_PROMPTS][MAX_STEPS];
    int32_t top_ids[MAX_PROMPTS][MAX_STEPS][N_TOP];
    double top_lp[MAX_PROMPTS][MAX_STEPS][N_TOP];
} golden;

/* The models are written once, before the suite runs, under tmp_root. */
static char tmp_root[256];

static void model_dir(int m, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", tmp_root, model_names[m]);
}

static json_t *load_golden_json(const char *name)
{
    const char *fx = getenv("NL_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/%s.json", fx ? fx : "tests/fixtures", name);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) fprintf(stderr, "%s: %s (line %d)\n", path, err.text, err.line);
    return root;
}

static void load_golden(const char *name, golden *g)
{
    memset(g, 0, sizeof *g);
    json_t *root = load_golden_json(name);
    ck_assert_ptr_nonnull(root);
    json_t *ps = json_object_get(root, "prompts"), *rs = json_object_get(root, "results");
    g->n_prompts = (int)json_array_size(ps);
    g->steps = (int)json_integer_value(json_object_get(root, "steps"));
    ck_assert(g->n_prompts >= 1 && g->n_prompts <= MAX_PROMPTS);
    ck_assert(g->steps >= 1 && g->steps <= MAX_STEPS);
    ck_assert_int_eq((int)json_array_size(rs), g->n_prompts);
    for (int p = 0; p < g->n_prompts; p++) {
        json_t *pr = json_array_get(ps, p);
        g->prompt_len[p] = (int32_t)json_array_size(pr);
        ck_assert(g->prompt_len[p] >= 1 && g->prompt_len[p] <= MAX_PROMPT_LEN);
        for (int i = 0; i < g->prompt_len[p]; i++)
            g->prompts[p][i] = (int32_t)json_integer_value(json_array_get(pr, i));
        json_t *res = json_array_get(rs, p);
        json_t *toks = json_object_get(res, "tokens"), *top = json_object_get(res, "top");
        ck_assert((int)json_array_size(toks) >= g->steps && (int)json_array_size(top) >= g->steps);
        for (int k = 0; k < g->steps; k++) {
            g->tokens[p][k] = (int32_t)json_integer_value(json_array_get(toks, k));
            for (int j = 0; j < N_TOP; j++) {
                json_t *pair = json_array_get(json_array_get(top, k), j);
                g->top_ids[p][k][j] = (int32_t)json_integer_value(json_array_get(pair, 0));
                g->top_lp[p][k][j] = json_number_value(json_array_get(pair, 1));
            }
        }
    }
    json_decref(root);
}

/* Writes model m with the mkmodel arguments its golden file was made from. */
static int make_model(int m)
{
    json_t *root = load_golden_json(model_names[m]);
    if (!root) return 1;
    json_t *args = json_object_get(root, "mkmodel_args");
    char dir[512];
    model_dir(m, dir, sizeof dir);
    char *argv[64];
    int argc = 0;
    argv[argc++] = "--out";
    argv[argc++] = dir;
    for (size_t i = 0; i < json_array_size(args) && argc < 63; i++)
        argv[argc++] = (char *)json_string_value(json_array_get(args, i));
    argv[argc] = NULL;
    int rc = cli_mkmodel(argc, argv);
    json_decref(root);
    return rc;
}

/* ---- running requests through an engine ---------------------------------- */

typedef struct request {
    const int32_t *ids;
    int32_t n;
} request;

typedef struct output {
    int32_t n;
    int32_t tokens[MAX_STEPS];
    float logprob[MAX_STEPS];
    int32_t top_ids[MAX_STEPS][N_TOP];
    float top_lp[MAX_STEPS][N_TOP];
    int32_t cached;
    nl_finish_reason finish;
} output;

static void base_config(nl_engine_config *c, const char *dir, int tp)
{
    nl_engine_config_init(c);
    c->model_dir = dir;
    c->tp = tp;
    c->device = NL_DEVICE_CPU;
    c->max_num_seqs = 32;
    c->max_num_batched_tokens = 512;
    c->max_model_len = 256;
    c->num_kv_blocks = 64;
    c->enforce_eager = true;
}

static void copy_result(const nl_result *r, output *o)
{
    memset(o, 0, sizeof *o);
    ck_assert_msg(r->finish_reason == NL_FINISH_LENGTH, "request %llu finished with %d: %s",
                  (unsigned long long)r->request_id, (int)r->finish_reason, r->error ? r->error : "");
    ck_assert(r->n_tokens <= MAX_STEPS);
    ck_assert_ptr_nonnull(r->logprobs);
    o->n = r->n_tokens;
    o->cached = r->cached_tokens;
    o->finish = r->finish_reason;
    for (int k = 0; k < r->n_tokens; k++) {
        o->tokens[k] = r->token_ids[k];
        ck_assert_int_eq(r->logprobs[k].token_id, r->token_ids[k]);
        ck_assert_int_eq(r->logprobs[k].n_top, N_TOP);
        o->logprob[k] = r->logprobs[k].logprob;
        for (int j = 0; j < N_TOP; j++) {
            o->top_ids[k][j] = r->logprobs[k].top_ids[j];
            o->top_lp[k][j] = r->logprobs[k].top_logprobs[j];
        }
    }
}

static void submit(nl_engine *e, const request *rq, int32_t max_tokens, uint64_t *id)
{
    nl_prompt prompt = {.kind = NL_PROMPT_TOKENS, .token_ids = rq->ids, .n_tokens = rq->n};
    nl_sampling_params sp;
    nl_sampling_params_init(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = max_tokens;
    sp.logprobs = N_TOP;
    sp.ignore_eos = true; /* random weights may pick the EOS id; lengths must hold */
    ck_assert_msg(nl_engine_submit(e, &prompt, &sp, id) == NL_OK, "submit: %s", nl_last_error());
}

static void collect(nl_engine *e, uint64_t id, output *o)
{
    const nl_result *r;
    ck_assert_msg(nl_engine_get_result(e, id, &r) == NL_OK, "result: %s", nl_last_error());
    copy_result(r, o);
    nl_engine_release(e, id);
}

static nl_engine *open_engine(const nl_engine_config *c)
{
    nl_engine *e = NULL;
    ck_assert_msg(nl_engine_open(c, &e) == NL_OK, "open %s (tp %d): %s", c->model_dir, c->tp,
                  nl_last_error());
    return e;
}

/* Submits every request at once, runs to completion, returns the outputs
 * (and the engine's counters when stats is not NULL). */
static void run_all(const nl_engine_config *c, int n, const request *rq, int32_t max_tokens,
                    output *out, engine_stats *stats)
{
    nl_engine *e = open_engine(c);
    uint64_t *ids = calloc((size_t)n, sizeof *ids);
    for (int i = 0; i < n; i++) submit(e, &rq[i], max_tokens, &ids[i]);
    ck_assert_msg(nl_engine_run_until_done(e) == NL_OK, "run: %s", nl_last_error());
    for (int i = 0; i < n; i++) collect(e, ids[i], &out[i]);
    if (stats) engine_get_stats(e, stats);
    free(ids);
    nl_engine_close(e);
}

static void golden_requests(const golden *g, request *rq)
{
    for (int p = 0; p < g->n_prompts; p++) rq[p] = (request){g->prompts[p], g->prompt_len[p]};
}

/* ---- 1. golden through the engine ------------------------------------------ */

/* Compares one request's output with HF; returns the number of steps
 * compared (all of them, or up to and including a permitted flip). */
static int compare_golden(const char *model, int p, const golden *g, const output *o)
{
    ck_assert_int_eq(o->n, g->steps);
    for (int k = 0; k < g->steps; k++) {
        const int32_t *gid = g->top_ids[p][k];
        const double *glp = g->top_lp[p][k];
        ck_assert_int_eq(gid[0], g->tokens[p][k]);
        bool near_tie = glp[0] - glp[1] < NEAR_TIE;
        bool flipped = o->tokens[k] != gid[0];
        ck_assert_msg(!flipped || (near_tie && o->tokens[k] == gid[1]),
                      "%s prompt %d step %d: token %d, golden %d (top-2 logprobs %.6f %.6f)", model, p, k,
                      o->tokens[k], gid[0], glp[0], glp[1]);
        ck_assert_msg(fabs(o->logprob[k] - glp[0]) < LOGPROB_TOL,
                      "%s prompt %d step %d: logprob %.6f, golden %.6f", model, p, k, o->logprob[k], glp[0]);
        for (int j = 0; j < N_TOP; j++)
            ck_assert_msg(fabs(o->top_lp[k][j] - glp[j]) < LOGPROB_TOL,
                          "%s prompt %d step %d: top[%d] logprob %.6f, golden %.6f", model, p, k, j,
                          o->top_lp[k][j], glp[j]);
        if (flipped) return k + 1; /* the continuations differ from here on */
    }
    return g->steps;
}

START_TEST(test_golden_engine)
{
    golden g;
    load_golden(model_names[_i], &g);
    char dir[512];
    model_dir(_i, dir, sizeof dir);
    nl_engine_config c;
    base_config(&c, dir, 1);
    request rq[MAX_PROMPTS];
    output out[MAX_PROMPTS];
    golden_requests(&g, rq);
    run_all(&c, g.n_prompts, rq, g.steps, out, NULL);
    int compared = 0;
    for (int p = 0; p < g.n_prompts; p++) {
        ck_assert_int_eq(out[p].cached, 0);
        compared += compare_golden(model_names[_i], p, &g, &out[p]);
    }
    /* A flip may shorten one comparison, never make it vacuous. */
    ck_assert_int_ge(compared, g.n_prompts * g.steps / 2);
}
END_TEST

/* ---- 2. the same tokens however the work is scheduled ---------------------- */

static void expect_same(const char *what, int n, const output *want, const output *got)
{
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(got[i].n, want[i].n);
        for (int k = 0; k < want[i].n; k++)
            ck_assert_msg(got[i].tokens[k] == want[i].tokens[k],
                          "%s: request %d step %d: token %d, plain run %d", what, i, k, got[i].tokens[k],
                          want[i].tokens[k]);
    }
}

/* A longer prompt (several full blocks) for chunking and the prefix cache;
 * ids below 512 fit every model's vocabulary. */
static int32_t long_prompt[50];

static void init_long_prompt(void)
{
    for (int i = 0; i < 50; i++) long_prompt[i] = (i * 53 + 11) % 509 + 1;
}

START_TEST(test_scheduling_variants)
{
    golden g;
    load_golden(model_names[_i], &g);
    char dir[512];
    model_dir(_i, dir, sizeof dir);
    request rq[MAX_PROMPTS];
    golden_requests(&g, rq);
    rq[g.n_prompts] = (request){long_prompt, 50};
    int n = g.n_prompts + 1;
    output ref[MAX_PROMPTS + 1], got[MAX_PROMPTS + 1];
    nl_engine_config c;
    base_config(&c, dir, 1);
    run_all(&c, n, rq, g.steps, ref, NULL);
    for (int p = 0; p < g.n_prompts; p++) compare_golden(model_names[_i], p, &g, &ref[p]);

    base_config(&c, dir, 1);
    c.enable_prefix_caching = false;
    run_all(&c, n, rq, g.steps, got, NULL);
    expect_same("no prefix caching", n, ref, got);

    /* 8 tokens a step: every prompt but the first is chunked, and decodes
     * share steps with prompt chunks. */
    engine_stats st;
    base_config(&c, dir, 1);
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 8;
    run_all(&c, n, rq, g.steps, got, &st);
    expect_same("chunked prefill (8 tokens a step)", n, ref, got);
    ck_assert_int_ge(st.prefill_steps, 50 / 8);

    base_config(&c, dir, 1);
    c.max_num_seqs = 16;
    c.max_num_batched_tokens = 16;
    run_all(&c, n, rq, g.steps, got, NULL);
    expect_same("chunked prefill (16 tokens a step)", n, ref, got);
}
END_TEST

/* Many copies of the prompts over a KV pool of 6 blocks: decodes run out of
 * blocks, the scheduler preempts and recomputes, and nothing changes. */
START_TEST(test_preemption)
{
    golden g;
    load_golden(model_names[_i], &g);
    char dir[512];
    model_dir(_i, dir, sizeof dir);
    request base[MAX_PROMPTS + 1];
    golden_requests(&g, base);
    base[g.n_prompts] = (request){long_prompt, 50};
    int nb = g.n_prompts + 1;
    output ref[MAX_PROMPTS + 1];
    nl_engine_config c;
    base_config(&c, dir, 1);
    run_all(&c, nb, base, g.steps, ref, NULL);

    enum { COPIES = 4 };
    request rq[COPIES * (MAX_PROMPTS + 1)];
    output want[COPIES * (MAX_PROMPTS + 1)], got[COPIES * (MAX_PROMPTS + 1)];
    int n = 0;
    for (int k = 0; k < COPIES; k++)
        for (int p = 0; p < nb; p++) {
            want[n] = ref[p];
            rq[n++] = base[p];
        }
    for (int caching = 0; caching < 2; caching++) {
        engine_stats st;
        base_config(&c, dir, 1);
        c.num_kv_blocks = 6;  /* the long prompt + 16 tokens needs 5 */
        c.max_model_len = 96;
        c.enable_prefix_caching = caching;
        run_all(&c, n, rq, g.steps, got, &st);
        ck_assert_msg(st.preemptions > 0, "prefix caching %d: no preemption with 6 KV blocks", caching);
        expect_same(caching ? "preemption, prefix caching" : "preemption", n, want, got);
        ck_assert_int_eq(st.num_free_blocks, 6);
        ck_assert_int_eq(st.num_running + st.num_waiting, 0);
    }
}
END_TEST

/* The same prompt twice, one after the other: the second reuses the first
 * one's full KV blocks (never the last block) and gives the same tokens. */
START_TEST(test_prefix_cache_hit)
{
    golden g;
    load_golden(model_names[_i], &g);
    char dir[512];
    model_dir(_i, dir, sizeof dir);
    nl_engine_config c;
    base_config(&c, dir, 1);
    nl_engine *e = open_engine(&c);
    const request rq[2] = {{g.prompts[g.n_prompts - 1], g.prompt_len[g.n_prompts - 1]}, {long_prompt, 50}};
    for (int r = 0; r < 2; r++) {
        output first, second;
        uint64_t id;
        submit(e, &rq[r], g.steps, &id);
        ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
        collect(e, id, &first);
        submit(e, &rq[r], g.steps, &id);
        ck_assert_int_eq(nl_engine_run_until_done(e), NL_OK);
        collect(e, id, &second);
        /* 23 tokens: one full block cached; 50 tokens: three. */
        ck_assert_int_eq(first.cached, 0);
        ck_assert_int_eq(second.cached, (rq[r].n - 1) / 16 * 16);
        expect_same("prefix cache hit", 1, &first, &second);
        if (r == 0) compare_golden(model_names[_i], g.n_prompts - 1, &g, &second);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    ck_assert_int_eq(st.cached_tokens, 16 + 48);
    nl_engine_close(e);
}
END_TEST

/* ---- 3. tensor parallel ------------------------------------------------------ */

static void run_tp(int m, int tp)
{
    golden g;
    load_golden(model_names[m], &g);
    char dir[512];
    model_dir(m, dir, sizeof dir);
    request rq[MAX_PROMPTS + 1];
    golden_requests(&g, rq);
    rq[g.n_prompts] = (request){long_prompt, 50};
    int n = g.n_prompts + 1;
    output ref[MAX_PROMPTS + 1], got[MAX_PROMPTS + 1];
    nl_engine_config c;
    base_config(&c, dir, 1);
    run_all(&c, n, rq, g.steps, ref, NULL);
    base_config(&c, dir, tp);
    nl_engine *e = open_engine(&c);
    nl_engine_info info;
    nl_engine_get_info(e, &info);
    ck_assert_int_eq(info.tp, tp);
    nl_engine_close(e);
    c.max_num_batched_tokens = 32; /* chunked as well, to mix the step shapes */
    run_all(&c, n, rq, g.steps, got, NULL);
    char what[64];
    snprintf(what, sizeof what, "%s tp %d", model_names[m], tp);
    expect_same(what, n, ref, got);
    for (int p = 0; p < g.n_prompts; p++) compare_golden(what, p, &g, &got[p]);
}

/* Every model splits 2 ways (the MQA model's single KV head replicated). */
START_TEST(test_tp2)
{
    run_tp(_i, 2);
}
END_TEST

/* 4 ways where the heads divide: GQA (2 KV heads replicated), Qwen2 with
 * biases, MHA (8 KV heads split); the MQA model has 6 heads. */
START_TEST(test_tp4)
{
    static const int models4[] = {0, 2, 3};
    run_tp(models4[_i], 4);
}
END_TEST

START_TEST(test_tp_not_dividing)
{
    char dir[512];
    model_dir(1, dir, sizeof dir); /* 6 heads */
    nl_engine_config c;
    base_config(&c, dir, 4);
    nl_engine *e = NULL;
    ck_assert_int_ne(nl_engine_open(&c, &e), NL_OK);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(nl_last_error(), "6 attention heads"), "message: %s", nl_last_error());
}
END_TEST

/* tokenizer.json is read while the workers start: a bad one still fails
 * the open with the file's own error, and the workers already started are
 * gone again (no child left), at tp 1 and 2. */
START_TEST(test_bad_tokenizer_while_workers_start)
{
    char src[512], dir[600], path[700];
    model_dir(0, src, sizeof src);
    snprintf(dir, sizeof dir, "%s/bad-tokenizer", tmp_root);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    DIR *d = opendir(src);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        if (ent->d_name[0] == '.') continue;
        char from[1200], to[1200];
        snprintf(from, sizeof from, "%s/%s", src, ent->d_name);
        snprintf(to, sizeof to, "%s/%s", dir, ent->d_name);
        ck_assert_int_eq(symlink(from, to), 0);
    }
    closedir(d);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model\": ", f);
    fclose(f);
    for (int tp = 1; tp <= 2; tp++) {
        nl_engine_config c;
        base_config(&c, dir, tp);
        nl_engine *e = NULL;
        ck_assert_int_eq(nl_engine_open(&c, &e), NL_ERR_FORMAT);
        ck_assert_ptr_null(e);
        ck_assert_msg(strstr(nl_last_error(), "tokenizer.json"), "message: %s", nl_last_error());
        errno = 0;
        ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
        ck_assert_int_eq(errno, ECHILD);
    }
}
END_TEST

/* ---- 4. the engine and threads -------------------------------------------- */

typedef struct opener {
    nl_engine_config c;
    nl_engine *e;
    nl_status st;
} opener;

static void *open_in_thread(void *arg)
{
    opener *o = arg;
    o->st = nl_engine_open(&o->c, &o->e);
    return NULL;
}

/* A host that opens the engine in a thread and joins it: the workers belong
 * to the process, so they must still be there for the main thread's steps
 * (with PR_SET_PDEATHSIG they died when the opening thread ended). */
START_TEST(test_open_in_thread)
{
    golden g;
    load_golden(model_names[0], &g);
    char dir[512];
    model_dir(0, dir, sizeof dir);
    request rq[MAX_PROMPTS];
    golden_requests(&g, rq);
    output ref[MAX_PROMPTS], got[MAX_PROMPTS];
    opener o;
    base_config(&o.c, dir, 2);
    run_all(&o.c, g.n_prompts, rq, g.steps, ref, NULL);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, open_in_thread, &o), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(o.st == NL_OK, "open: %s", nl_last_error());
    usleep(200 * 1000); /* long enough for a death signal to have landed */
    uint64_t ids[MAX_PROMPTS];
    for (int i = 0; i < g.n_prompts; i++) submit(o.e, &rq[i], g.steps, &ids[i]);
    ck_assert_msg(nl_engine_run_until_done(o.e) == NL_OK, "run: %s", nl_last_error());
    for (int i = 0; i < g.n_prompts; i++) collect(o.e, ids[i], &got[i]);
    expect_same("opened in a joined thread", g.n_prompts, ref, got);
    nl_engine_close(o.e);
}
END_TEST

typedef struct finals {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int n;
    output out[MAX_PROMPTS];
} finals;

static void on_final(void *user, const nl_result *r)
{
    finals *f = user;
    int slot = (int)(intptr_t)r->user;
    pthread_mutex_lock(&f->lock);
    copy_result(r, &f->out[slot]);
    ck_assert_double_gt(r->time_to_first_token, 0.0);
    ck_assert_double_ge(r->latency, r->time_to_first_token);
    f->n++;
    pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
}

/* The engine's own thread steps; results arrive by the final callback with
 * the user pointer given at submission. */
START_TEST(test_background_mode)
{
    golden g;
    load_golden(model_names[0], &g);
    char dir[512];
    model_dir(0, dir, sizeof dir);
    request rq[MAX_PROMPTS];
    golden_requests(&g, rq);
    output ref[MAX_PROMPTS];
    nl_engine_config c;
    base_config(&c, dir, 1);
    run_all(&c, g.n_prompts, rq, g.steps, ref, NULL);
    nl_engine *e = open_engine(&c);
    finals f = {.n = 0};
    pthread_mutex_init(&f.lock, NULL);
    pthread_cond_init(&f.cond, NULL);
    nl_engine_set_final_callback(e, on_final, &f);
    ck_assert_int_eq(nl_engine_start(e), NL_OK);
    ck_assert_int_eq(nl_engine_start(e), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(nl_engine_step(e), NL_ERR_INVALID_ARG);
    for (int i = 0; i < g.n_prompts; i++) {
        nl_prompt prompt = {.kind = NL_PROMPT_TOKENS, .token_ids = rq[i].ids, .n_tokens = rq[i].n};
        nl_sampling_params sp;
        nl_sampling_params_init(&sp);
        sp.temperature = 0.0f;
        sp.max_tokens = g.steps;
        sp.logprobs = N_TOP;
        sp.ignore_eos = true;
        ck_assert_int_eq(nl_engine_submit_user(e, &prompt, &sp, (void *)(intptr_t)i, NULL), NL_OK);
    }
    pthread_mutex_lock(&f.lock);
    while (f.n < g.n_prompts) pthread_cond_wait(&f.cond, &f.lock);
    pthread_mutex_unlock(&f.lock);
    ck_assert(!nl_engine_has_unfinished(e));
    nl_engine_stats st;
    nl_engine_get_stats(e, &st);
    ck_assert_int_eq(st.num_finished, g.n_prompts);
    ck_assert_int_eq(st.output_tokens, (int64_t)g.n_prompts * g.steps);
    ck_assert_int_eq(st.num_running, 0);
    ck_assert_int_eq(st.num_free_kv_blocks, st.num_kv_blocks);
    ck_assert_int_eq(nl_engine_stop(e), NL_OK);
    ck_assert_int_eq(nl_engine_stop(e), NL_ERR_INVALID_ARG);
    expect_same("background mode", g.n_prompts, ref, f.out);
    nl_engine_close(e);
}
END_TEST

/* ---- 5. an e4m3 KV cache ------------------------------------------------------ */

/* Rounding K and V to 3 mantissa bits moves logprobs a little, so a token
 * whose top two are close may flip.  The rule: until the first difference
 * the chosen logprobs stay within FP8_LOGPROB_TOL of HF's; at the first
 * difference each side's token is among the other's top 5 (vLLM's rule)
 * and, in HF's logprobs, ours trails HF's token by less than twice that
 * tolerance (a near tie, which the cache's rounding may break either way). */
#define FP8_LOGPROB_TOL 0.05

START_TEST(test_golden_fp8_kv)
{
    golden g;
    load_golden(model_names[_i], &g);
    char dir[512];
    model_dir(_i, dir, sizeof dir);
    nl_engine_config c;
    base_config(&c, dir, 1);
    c.kv_cache_dtype = NL_KV_CACHE_FP8;
    request rq[MAX_PROMPTS];
    output out[MAX_PROMPTS];
    golden_requests(&g, rq);
    run_all(&c, g.n_prompts, rq, g.steps, out, NULL);
    int differing = 0, compared = 0;
    double worst = 0;
    for (int p = 0; p < g.n_prompts; p++) {
        ck_assert_int_eq(out[p].n, g.steps);
        for (int k = 0; k < g.steps; k++) {
            if (out[p].tokens[k] != g.tokens[p][k]) {
                int ours_in_hf = -1;
                bool hf_in_ours = false;
                for (int j = 0; j < N_TOP; j++) {
                    if (g.top_ids[p][k][j] == out[p].tokens[k]) ours_in_hf = j;
                    hf_in_ours |= out[p].top_ids[k][j] == g.tokens[p][k];
                }
                ck_assert_msg(ours_in_hf >= 0 && hf_in_ours, "%s prompt %d step %d: token %d, golden %d",
                              model_names[_i], p, k, out[p].tokens[k], g.tokens[p][k]);
                double gap = g.top_lp[p][k][0] - g.top_lp[p][k][ours_in_hf];
                ck_assert_msg(gap < 2 * FP8_LOGPROB_TOL, "%s prompt %d step %d: token %d trails golden "
                              "%d by %.4f in HF's logprobs", model_names[_i], p, k, out[p].tokens[k],
                              g.tokens[p][k], gap);
                differing++;
                break;
            }
            compared++;
            double d = fabs(out[p].logprob[k] - g.top_lp[p][k][0]);
            if (d > worst) worst = d;
            ck_assert_msg(d < FP8_LOGPROB_TOL, "%s prompt %d step %d: logprob %.6f, golden %.6f",
                          model_names[_i], p, k, out[p].logprob[k], g.top_lp[p][k][0]);
        }
    }
    /* Near-tie flips may shorten comparisons, never make them vacuous. */
    ck_assert_int_ge(compared, g.n_prompts * g.steps / 2);
    fprintf(stderr, "e2e fp8 KV %s: %d of %d prompts differ, %d steps compared, largest logprob "
            "difference %.4f\n", model_names[_i], differing, g.n_prompts, compared, worst);
}
END_TEST

/* Sized from the same budget, an e4m3 cache holds four times the blocks
 * of the CPU's fp32 cache and twice those of a bf16 one. */
START_TEST(test_kv_dtype_sizes_blocks)
{
    char dir[512];
    model_dir(0, dir, sizeof dir);
    static const nl_kv_cache_dtype kinds[3] = {NL_KV_CACHE_AUTO, NL_KV_CACHE_BF16, NL_KV_CACHE_FP8};
    int32_t blocks[3];
    for (int i = 0; i < 3; i++) {
        nl_engine_config c;
        base_config(&c, dir, 1);
        c.num_kv_blocks = 0; /* from NANOLLM_CPU_KV_BYTES */
        c.kv_cache_dtype = kinds[i];
        nl_engine *e = open_engine(&c);
        nl_engine_stats st;
        nl_engine_get_stats(e, &st);
        blocks[i] = st.num_kv_blocks;
        nl_engine_close(e);
    }
    ck_assert_int_gt(blocks[0], 0);
    ck_assert_int_eq(blocks[1] / 2, blocks[0]);
    ck_assert_int_eq(blocks[2] / 2, blocks[1]);
}
END_TEST

int main(void)
{
    init_long_prompt();
    snprintf(tmp_root, sizeof tmp_root, "%s/nl-e2e-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    int failed = 1;
    for (int m = 0; m < N_MODELS; m++)
        if (make_model(m) != 0) {
            fprintf(stderr, "could not write model %s\n", model_names[m]);
            goto out;
        }
    /* The workers' KV cache is sized by num_kv_blocks; keep any default small. */
    setenv("NANOLLM_CPU_KV_BYTES", "16777216", 0);

    Suite *s = suite_create("e2e");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_golden_engine, 0, N_MODELS);
    tcase_add_loop_test(tc, test_scheduling_variants, 0, N_MODELS);
    tcase_add_loop_test(tc, test_preemption, 0, N_MODELS);
    tcase_add_loop_test(tc, test_prefix_cache_hit, 0, N_MODELS);
    tcase_add_loop_test(tc, test_tp2, 0, N_MODELS);
    tcase_add_loop_test(tc, test_tp4, 0, 3);
    tcase_add_test(tc, test_tp_not_dividing);
    tcase_add_test(tc, test_bad_tokenizer_while_workers_start);
    tcase_add_test(tc, test_open_in_thread);
    tcase_add_test(tc, test_background_mode);
    tcase_add_loop_test(tc, test_golden_fp8_kv, 0, N_MODELS);
    tcase_add_test(tc, test_kv_dtype_sizes_blocks);
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
