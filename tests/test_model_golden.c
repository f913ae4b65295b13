/* test_model_golden.c — the model runner on the CPU against Hugging Face.
 *
 * Tiny random-weight checkpoints (Qwen3 tied and untied, Qwen2 with
 * biases, GQA, MQA, MHA, heads * head_dim != hidden, a sharded checkpoint;
 * Llama tied and untied, with attention and MLP biases, and with llama3
 * rope scaling from an original context short enough that all three of
 * its frequency bands occur at head_dim 16 and 32)
 * are written with the mkmodel command, then driven through the model
 * runner with hand-built RUN commands: one ragged prefill that also chunks
 * the longest prompt, a mixed step (that chunk's rest plus decodes), then
 * decode steps.  Each sampled token and its top-5 logprobs are compared
 * with golden files that transformers computed in fp32 from the same
 * checkpoints (tests/golden/make_model_golden.sh).  The same steps also
 * run tensor-parallel (tp 2 and 4) over forked ranks and the CPU
 * shared-memory communicator, against the same golden files.  Decode inputs are the
 * golden tokens (teacher forcing), so a near-tie that flips one token
 * cannot derail the rest of the comparison.
 *
 * `test_model_golden --make-models DIR` writes the same checkpoints, each
 * with the prompts.json the golden script reads: one definition of the
 * models serves both sides.
 */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/shm.h"
#include "kernels/comm.h"
#include "kernels/comm_shm.h"
#include "kernels/kernels.h"
#include "leader/cli/cli.h"
#include "worker/model_runner.h"
#include "worker/qwen.h"
#include "worker/runner_profile.h"
#include "worker/weights.h"
#include "tests/check_run.h"

#define N_PROMPTS 3
#define N_STEPS 12
#define N_TOP 5
#define BLOCK 16
#define MAX_ARGS 32

typedef struct golden_model {
    const char *name;
    const char *args[MAX_ARGS]; /* mkmodel arguments after --out DIR */
} golden_model;

static const golden_model models[] = {
    {"qwen3_tied_gqa", /* heads * head_dim = 128 != hidden 64 */
     {"--arch", "qwen3", "--vocab", "1024", "--hidden", "64", "--inter", "128", "--layers", "2",
      "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--tie", "--max-pos", "512",
      "--seed", "11", NULL}},
    {"qwen3_untied_mqa",
     {"--arch", "qwen3", "--vocab", "768", "--hidden", "96", "--inter", "160", "--layers", "2",
      "--heads", "6", "--kv-heads", "1", "--head-dim", "16", "--no-tie", "--max-pos", "512",
      "--seed", "12", NULL}},
    {"qwen2_bias",
     {"--arch", "qwen2", "--vocab", "512", "--hidden", "128", "--inter", "256", "--layers", "2",
      "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--tie", "--max-pos", "512",
      "--seed", "13", NULL}},
    {"qwen3_sharded_mha", /* several safetensors files */
     {"--arch", "qwen3", "--vocab", "1024", "--hidden", "64", "--inter", "192", "--layers", "2",
      "--heads", "8", "--kv-heads", "8", "--head-dim", "16", "--no-tie", "--max-pos", "512",
      "--shard-size", "0.2", "--seed", "14", NULL}},
    {"llama_tied_gqa", /* plain rope */
     {"--arch", "llama", "--rope-theta", "1000000", "--rms-eps", "1e-6", "--vocab", "1024", "--hidden", "64", "--inter", "128", "--layers", "2",
      "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--tie", "--max-pos", "512",
      "--seed", "21", NULL}},
    {"llama_untied_rope3", /* wavelengths 6 (kept), 35 (smoothed), 199.. (scaled) */
     {"--arch", "llama", "--rope-theta", "1000000", "--rms-eps", "1e-6", "--vocab", "768", "--hidden", "96", "--inter", "192", "--layers", "2",
      "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--no-tie", "--max-pos", "2048",
      "--rope-llama3", "8,1,4,64", "--seed", "22", NULL}},
    {"llama_bias_mqa", /* q/k/v/o and gate/up/down biases, llama3 rope, 1 kv head */
     {"--arch", "llama", "--rope-theta", "1000000", "--rms-eps", "1e-6", "--attention-bias", "--mlp-bias", "--vocab", "512", "--hidden", "128",
      "--inter", "256", "--layers", "2", "--heads", "4", "--kv-heads", "1", "--head-dim", "32",
      "--tie", "--max-pos", "1024", "--rope-llama3", "32,1,4,128", "--seed", "23", NULL}},
};
#define N_MODELS (int)(sizeof models / sizeof models[0])

/* Token ids below 512 fit every model's vocabulary. */
static const int32_t prompt0[] = {7};
static const int32_t prompt1[] = {101, 5, 300, 42, 42, 9, 250};
static int32_t prompt2[23];
static const int32_t *prompts[N_PROMPTS] = {prompt0, prompt1, prompt2};
static const int32_t prompt_len[N_PROMPTS] = {1, 7, 23};

static void init_prompts(void)
{
    for (int i = 0; i < 23; i++) prompt2[i] = (i * 37) % 500 + 3;
}

static int make_model(const golden_model *m, const char *dir)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/%s", dir, m->name);
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "--out";
    argv[argc++] = out;
    for (int i = 0; m->args[i]; i++) argv[argc++] = (char *)m->args[i];
    argv[argc] = NULL;
    int rc = cli_mkmodel(argc, argv);
    if (rc != 0) return rc;
    /* the prompts and step count the golden script runs */
    json_t *ps = json_array();
    for (int p = 0; p < N_PROMPTS; p++) {
        json_t *a = json_array();
        for (int i = 0; i < prompt_len[p]; i++) json_array_append_new(a, json_integer(prompts[p][i]));
        json_array_append_new(ps, a);
    }
    json_t *args = json_array();
    for (int i = 0; m->args[i]; i++) json_array_append_new(args, json_string(m->args[i]));
    json_t *root = json_pack("{s:s, s:o, s:i, s:i, s:o}", "name", m->name, "prompts", ps, "steps",
                             N_STEPS, "top", N_TOP, "mkmodel_args", args);
    char path[4200];
    snprintf(path, sizeof path, "%s/prompts.json", out);
    rc = json_dump_file(root, path, JSON_INDENT(1)) ? 1 : 0;
    json_decref(root);
    return rc;
}

/* ---- golden comparison -------------------------------------------------- */

typedef struct golden {
    int32_t tokens[N_PROMPTS][N_STEPS];
    int32_t top_ids[N_PROMPTS][N_STEPS][N_TOP];
    double top_lp[N_PROMPTS][N_STEPS][N_TOP];
} golden;

static void load_golden(const char *name, golden *g)
{
    const char *fx = getenv("NL_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/golden/%s.json", fx ? fx : "tests/fixtures", name);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    ck_assert_msg(root != NULL, "%s: %s (line %d)", path, err.text, err.line);
    json_t *results = json_object_get(root, "results");
    ck_assert_msg(json_array_size(results) == N_PROMPTS, "%s: expected %d results", path, N_PROMPTS);
    json_t *ps = json_object_get(root, "prompts");
    for (int p = 0; p < N_PROMPTS; p++) {
        json_t *pr = json_array_get(ps, p);
        ck_assert_int_eq((int)json_array_size(pr), prompt_len[p]);
        for (int i = 0; i < prompt_len[p]; i++)
            ck_assert_int_eq(json_integer_value(json_array_get(pr, i)), prompts[p][i]);
        json_t *res = json_array_get(results, p);
        json_t *toks = json_object_get(res, "tokens"), *top = json_object_get(res, "top");
        ck_assert_msg(json_array_size(toks) >= N_STEPS && json_array_size(top) >= N_STEPS,
                      "%s: result %d has fewer than %d steps", path, p, N_STEPS);
        for (int k = 0; k < N_STEPS; k++) {
            g->tokens[p][k] = (int32_t)json_integer_value(json_array_get(toks, k));
            json_t *tk = json_array_get(top, k);
            for (int j = 0; j < N_TOP; j++) {
                json_t *pair = json_array_get(tk, j);
                g->top_ids[p][k][j] = (int32_t)json_integer_value(json_array_get(pair, 0));
                g->top_lp[p][k][j] = json_number_value(json_array_get(pair, 1));
            }
        }
    }
    json_decref(root);
}

/* Compares one sampled entry with the golden step: the token must match,
 * except that where HF's top two are within 1e-4 either is right; logprobs
 * within 1e-3. */
static void compare_step(const char *model, int p, int k, const golden *g, const wire_sampled *s)
{
    const int32_t *gid = g->top_ids[p][k];
    const double *glp = g->top_lp[p][k];
    ck_assert_int_eq(gid[0], g->tokens[p][k]);
    bool near_tie = glp[0] - glp[1] < 1e-4;
    ck_assert_msg(s->token_id == gid[0] || (near_tie && s->token_id == gid[1]),
                  "%s prompt %d step %d: token %d, golden %d (top-2 logprobs %.6f %.6f)", model, p,
                  k, s->token_id, gid[0], glp[0], glp[1]);
    ck_assert_msg(fabs(s->logprob - glp[0]) < 1e-3, "%s prompt %d step %d: logprob %.6f, golden %.6f",
                  model, p, k, s->logprob, glp[0]);
    ck_assert_int_eq(s->n_top, N_TOP);
    for (int j = 0; j < N_TOP; j++) {
        ck_assert_msg(fabs(s->top_logprobs[j] - glp[j]) < 1e-3,
                      "%s prompt %d step %d: top[%d] logprob %.6f, golden %.6f", model, p, k, j,
                      s->top_logprobs[j], glp[j]);
        if (s->top_ids[j] != gid[j]) { /* only a near-tie with a neighbour may swap */
            bool tie = (j > 0 && fabs(glp[j - 1] - glp[j]) < 1e-4) ||
                       (j + 1 < N_TOP && fabs(glp[j + 1] - glp[j]) < 1e-4);
            ck_assert_msg(tie, "%s prompt %d step %d: top[%d] id %d, golden %d", model, p, k, j,
                          s->top_ids[j], gid[j]);
        }
    }
}

static char tmp_root[256];

static void make_tmp(void)
{
    snprintf(tmp_root, sizeof tmp_root, "%s/nl-golden-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(tmp_root));
}

static void remove_tree(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static engine_settings runner_params(const char *dir)
{
    engine_settings s = {.tp = 1, .device = NL_DEVICE_CPU, .block_size = BLOCK,
                         .num_kv_blocks = 48, .max_num_seqs = 8, .max_num_batched_tokens = 64,
                         .max_model_len = 128, .gpu_memory_utilization = 0.9f, .enforce_eager = 1};
    snprintf(s.model_dir, sizeof s.model_dir, "%s", dir);
    return s;
}

static model_runner *open_runner(const char *dir, nl_backend *be, nl_comm *comm)
{
    engine_settings p = runner_params(dir);
    p.tp = comm->size;
    model_runner *r = NULL;
    nl_status st = model_runner_create(&p, comm->rank, be, comm, &r);
    ck_assert_msg(st == NL_OK, "model_runner_create: %s", nl_last_error());
    ck_assert_int_eq(model_runner_num_kv_blocks(r), 48);
    return r;
}

/* Each prompt's blocks, deliberately scattered and out of order. */
static const int32_t tables[N_PROMPTS][3] = {{40, 41, 42}, {17, 3, 30}, {5, 44, 0}};

static wire_seq seq_of(int p, int32_t computed, int32_t n_new, const int32_t *tokens, bool sample)
{
    return (wire_seq){.seq_id = 100 + p, .num_computed = computed, .num_new = n_new,
                      .n_blocks = 3, .sample = sample, .sampling.temperature = 0.0f,
                      .sampling.top_p = 1.0f, .sampling.n_logprobs = N_TOP, .tokens = tokens, .block_table = tables[p]};
}

/* Runs the step sequence: one ragged prefill that chunks prompt 2, a mixed
 * step, then decodes fed with the golden tokens.  The sequence depends on
 * the golden file alone, so every rank of a tensor-parallel group runs the
 * same commands; only rank 0 (check) gets replies and compares them. */
static nl_status drive(model_runner *r, const golden_model *m, const golden *g, bool check)
{
    int32_t computed[N_PROMPTS] = {0}, done[N_PROMPTS] = {0};
    int32_t next[N_PROMPTS][1];
    wire_seq seqs[N_PROMPTS];
    wire_reply reply;
    uint64_t step = 0;

    seqs[0] = seq_of(0, 0, prompt_len[0], prompts[0], true);
    seqs[1] = seq_of(1, 0, prompt_len[1], prompts[1], true);
    seqs[2] = seq_of(2, 0, BLOCK, prompts[2], false); /* its first block only */
    for (;;) {
        int n = 0;
        wire_seq batch[N_PROMPTS];
        int owner[N_PROMPTS];
        for (int p = 0; p < N_PROMPTS; p++) {
            if (done[p] >= N_STEPS) continue;
            owner[n] = p;
            batch[n++] = seqs[p];
        }
        if (n == 0) break;
        wire_run cmd = {.kind = WIRE_RUN, .step_id = ++step, .n_seqs = n, .seqs = batch};
        nl_status st = model_runner_execute(r, &cmd, check ? &reply : NULL);
        if (!check && st != NL_OK) return st;
        if (check) {
            ck_assert_msg(st == NL_OK, "%s step %llu: %s", m->name, (unsigned long long)step,
                          nl_last_error());
            ck_assert_int_eq(reply.status, NL_OK);
            ck_assert_int_eq(reply.step_id, step);
        }
        int k = 0;
        for (int i = 0; i < n; i++) {
            int p = owner[i];
            computed[p] += batch[i].num_new;
            if (!batch[i].sample) { /* the rest of a chunked prompt comes next */
                seqs[p] = seq_of(p, computed[p], prompt_len[p] - computed[p], prompts[p] + computed[p], true);
                continue;
            }
            if (check) {
                ck_assert_int_lt(k, reply.n_sampled);
                ck_assert_int_eq(reply.sampled[k].seq_id, 100 + p);
                compare_step(m->name, p, done[p], g, &reply.sampled[k++]);
            }
            next[p][0] = g->tokens[p][done[p]++]; /* teacher forcing */
            seqs[p] = seq_of(p, computed[p], 1, next[p], true);
        }
        if (check) ck_assert_int_eq(k, reply.n_sampled);
    }
    return NL_OK;
}

static void run_model(const golden_model *m)
{
    golden *g = calloc(1, sizeof *g);
    load_golden(m->name, g);
    make_tmp();
    ck_assert_int_eq(make_model(m, tmp_root), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, m->name);
    nl_backend *be;
    ck_assert_int_eq(nl_backend_cpu_create(2, &be), NL_OK);
    model_runner *r = open_runner(dir, be, nl_comm_single());
    drive(r, m, g, true);
    model_runner_destroy(r);
    nl_backend_destroy(be);
    remove_tree(tmp_root);
    free(g);
}

/* A rank other than 0 gives up when the test process (its parent) is gone,
 * instead of waiting forever in a collective. */
static pid_t test_pid;

static nl_status parent_alive(void *ctx)
{
    return getppid() == test_pid ? NL_OK : nl_error(NL_ERR_WORKER, "test process gone");
}

/* The same steps with the shard split over tp forked processes joined by
 * the CPU shared-memory communicator; rank 0 compares with the golden. */
static void run_model_tp(const golden_model *m, int tp)
{
    golden *g = calloc(1, sizeof *g);
    load_golden(m->name, g);
    make_tmp();
    ck_assert_int_eq(make_model(m, tmp_root), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, m->name);
    size_t bytes = SHM_COMM_BYTES(tp);
    void *area = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(area, MAP_FAILED);
    test_pid = getpid();
    pid_t kids[8];
    for (int rank = 1; rank < tp; rank++) {
        kids[rank] = fork();
        ck_assert_int_ge(kids[rank], 0);
        if (kids[rank] == 0) {
            nl_backend *be;
            nl_comm *comm;
            model_runner *r;
            nl_status st = nl_backend_cpu_create(1, &be);
            if (st == NL_OK) st = nl_comm_shm_create(area, bytes, rank, tp, parent_alive, NULL, &comm);
            engine_settings p = runner_params(dir);
            p.tp = tp;
            if (st == NL_OK) st = model_runner_create(&p, rank, be, comm, &r);
            if (st == NL_OK) st = drive(r, m, g, false);
            if (st != NL_OK) fprintf(stderr, "rank %d: %s\n", rank, nl_last_error());
            _exit(st == NL_OK ? 0 : 1);
        }
    }
    nl_backend *be;
    nl_comm *comm;
    ck_assert_int_eq(nl_backend_cpu_create(1, &be), NL_OK);
    ck_assert_int_eq(nl_comm_shm_create(area, bytes, 0, tp, NULL, NULL, &comm), NL_OK);
    model_runner *r = open_runner(dir, be, comm);
    drive(r, m, g, true);
    for (int rank = 1; rank < tp; rank++) {
        int status;
        ck_assert_int_eq(waitpid(kids[rank], &status, 0), kids[rank]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed", rank);
    }
    model_runner_destroy(r);
    nl_comm_destroy(comm);
    nl_backend_destroy(be);
    munmap(area, bytes);
    remove_tree(tmp_root);
    free(g);
}

START_TEST(test_golden)
{
    run_model(&models[_i]);
}
END_TEST

/* tp 2 for every model (MQA: the kv head replicated), tp 4 where the
 * shapes allow (kv heads 2 < tp 4: replicated; 8 kv heads: split; Llama's
 * row-parallel biases added once). */
static const int tp4_models[] = {0, 3, 4, 5, 6};
#define N_TP4 (int)(sizeof tp4_models / sizeof tp4_models[0])

START_TEST(test_golden_tp2)
{
    run_model_tp(&models[_i], 2);
}
END_TEST

START_TEST(test_golden_tp4)
{
    run_model_tp(&models[tp4_models[_i]], 4);
}
END_TEST

/* Bad commands fail with a message and leave the runner usable. */
/* ---- qwen_linear_shapes against the forward's own linear ops -------------
 *
 * A backend prepares the shapes qwen_linear_shapes lists ahead of the graph
 * captures; the test records every linear op a forward really runs (through
 * the four ops that project) and asks that the two lists be the same set. */

#define MAX_RECORDED 64
static nl_linear_shape recorded[MAX_RECORDED];
static int n_recorded;
static const nl_backend_ops *cpu_ops;

static const qwen_weights *model; /* the weights being recorded */

/* Layer l's weight as layer 0's: every layer's shapes are alike, and the
 * list names layer 0's (weights are opaque, so shapes compare by field). */
static const nl_weight *as_layer0(const nl_weight *w)
{
    for (int l = 0; w && l < model->cfg.num_hidden_layers; l++) {
        const qwen_layer *L = &model->layers[l], *L0 = &model->layers[0];
        const nl_weight *const mine[] = {L->qkv, L->qkv_bias, L->o_proj, L->o_bias,
                                         L->gate_up, L->gate_up_bias, L->down, L->down_bias};
        const nl_weight *const first[] = {L0->qkv, L0->qkv_bias, L0->o_proj, L0->o_bias,
                                          L0->gate_up, L0->gate_up_bias, L0->down, L0->down_bias};
        for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
            if (w == mine[i]) return first[i];
    }
    return w;
}

static bool same_shape(const nl_linear_shape *a, const nl_linear_shape *b)
{
    return a->w == b->w && a->bias == b->bias && a->n == b->n && a->out_f32 == b->out_f32;
}

static void record(const nl_weight *w, const nl_weight *bias, int32_t n, bool out_f32)
{
    const nl_linear_shape sh = {as_layer0(w), as_layer0(bias), n, out_f32};
    for (int i = 0; i < n_recorded; i++)
        if (same_shape(&recorded[i], &sh)) return;
    ck_assert_int_lt(n_recorded, MAX_RECORDED);
    recorded[n_recorded++] = sh;
}

static nl_status rec_linear(nl_backend *be, void *out, const void *x, const nl_weight *w,
                            const nl_weight *bias, int32_t n)
{
    record(w, bias, n, false);
    return cpu_ops->linear(be, out, x, w, bias, n);
}

static nl_status rec_linear_f32(nl_backend *be, float *out, const void *x, const nl_weight *w,
                                int32_t n)
{
    record(w, NULL, n, true);
    return cpu_ops->linear_f32(be, out, x, w, n);
}

static nl_status rec_norm_linear(nl_backend *be, void *out, void *xn, void *work, const void *x,
                                 void *residual, const nl_weight *norm_w, float eps,
                                 const nl_weight *w, const nl_weight *bias, int32_t n,
                                 bool silu_mul)
{
    record(w, bias, n, false);
    return cpu_ops->norm_linear(be, out, xn, work, x, residual, norm_w, eps, w, bias, n, silu_mul);
}

static nl_status rec_linear_add(nl_backend *be, void *residual, void *work, const void *x,
                                const nl_weight *w, const nl_weight *bias, int32_t n)
{
    record(w, bias, n, false);
    return cpu_ops->linear_add(be, residual, work, x, w, bias, n);
}

static void *ints_on(nl_backend *be, const int32_t *v, size_t n)
{
    void *p;
    ck_assert_int_eq(be->ops->alloc(be, n * sizeof *v, &p), NL_OK);
    ck_assert_int_eq(be->ops->upload(be, p, v, n * sizeof *v), NL_OK);
    return p;
}

/* One sequence's prompt of n tokens (ids < 512), its last row sampled,
 * through comm (a shard's ranks gather their logits). */
static void forward_prompt_comm(nl_backend *be, nl_comm *comm, const qwen_weights *w, qwen_state *s,
                                int32_t n)
{
    int32_t ids[BLOCK * 4], pos[BLOCK * 4], table[4] = {2, 0, 3, 1};
    const int32_t cu[2] = {0, n}, ctx[1] = {n}, last[1] = {n - 1};
    for (int32_t i = 0; i < n; i++) ids[i] = (i * 37) % 500 + 3, pos[i] = i;
    int32_t slots[BLOCK * 4];
    for (int32_t i = 0; i < n; i++) slots[i] = table[i / BLOCK] * BLOCK + i % BLOCK;
    void *d_ids = ints_on(be, ids, n), *d_pos = ints_on(be, pos, n), *d_slots = ints_on(be, slots, n);
    void *d_cu = ints_on(be, cu, 2), *d_ctx = ints_on(be, ctx, 1), *d_tab = ints_on(be, table, 4);
    void *d_last = ints_on(be, last, 1);
    int32_t perm[8];
    for (int32_t r = 0; r < 8; r++) perm[r] = r;
    ck_assert_int_le(w->shard.tp, 8);
    void *d_perm = ints_on(be, perm, (size_t)w->shard.tp);
    qwen_inputs in = {.n_tokens = n, .ids = d_ids, .positions = d_pos, .slots = d_slots,
                      .n_logits = 1, .logit_rows = d_last, .gather_perm = d_perm};
    in.attn = (nl_attn_batch){.n_seqs = 1, .n_tokens = n, .max_q_len = n, .max_context_len = n,
                              .max_blocks_per_seq = 4, .block_size = BLOCK,
                              .all_decode = n == 1, .cu_seqlens_q = d_cu, .context_lens = d_ctx,
                              .block_tables = d_tab};
    nl_status st = qwen_forward(be, comm, w, s, &in);
    ck_assert_msg(st == NL_OK, "forward of %d tokens: %s", n, nl_last_error());
    void *bufs[] = {d_ids, d_pos, d_slots, d_cu, d_ctx, d_tab, d_last, d_perm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
}

static void forward_prompt(nl_backend *be, const qwen_weights *w, qwen_state *s, int32_t n)
{
    forward_prompt_comm(be, nl_comm_single(), w, s, n);
}

/* gm made in a fresh tmp_root and loaded on a one-thread CPU backend, with
 * a state of BLOCK * 4 tokens and 4 cache blocks: for forwards whose ops
 * a test watches (close_forward_model undoes it). */
typedef struct forward_model {
    nl_model_config cfg;
    nl_backend *be;
    qwen_weights *w;
    qwen_state *s;
} forward_model;

static forward_model open_forward_shard(const golden_model *gm, int32_t tp)
{
    forward_model f = {0};
    make_tmp();
    ck_assert_int_eq(make_model(gm, tmp_root), 0);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tmp_root, gm->name);
    ck_assert_int_eq(model_config_load(dir, &f.cfg), NL_OK);
    st_model *m = NULL;
    ck_assert_int_eq(st_open(dir, &m), NL_OK);
    ck_assert_int_eq(nl_backend_cpu_create(1, &f.be), NL_OK);
    ck_assert_int_eq(weights_create(f.be, &f.cfg, 0, tp, &f.w), NL_OK);
    ck_assert_int_eq(weights_fill(f.be, m, f.w), NL_OK);
    st_close(m);
    ck_assert_int_eq(qwen_state_create(f.be, f.w, BLOCK * 4, 1, &f.s), NL_OK);
    ck_assert_int_eq(qwen_state_alloc_kv(f.be, f.w, f.s, 4, BLOCK, f.be->ops->act_dtype), NL_OK);
    return f;
}

static forward_model open_forward_model(const golden_model *gm)
{
    return open_forward_shard(gm, 1);
}

static void close_forward_model(forward_model *f)
{
    qwen_state_destroy(f->be, f->w, f->s);
    weights_destroy(f->be, f->w);
    nl_backend_destroy(f->be);
    remove_tree(tmp_root);
}

START_TEST(test_linear_shapes_match_forward)
{
    const golden_model *gm = &models[_i];
    forward_model f = open_forward_model(gm);
    nl_backend *be = f.be;
    qwen_weights *w = f.w;
    qwen_state *s = f.s;
    static nl_backend_ops rec;
    model = w;
    cpu_ops = be->ops;
    rec = *cpu_ops;
    rec.linear = rec_linear;
    rec.linear_f32 = rec_linear_f32;
    rec.norm_linear = rec_norm_linear;
    rec.linear_add = rec_linear_add;
    be->ops = &rec;
    const int32_t sizes[] = {1, 2, 23};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        n_recorded = 0;
        forward_prompt(be, w, s, sizes[k]);
        nl_linear_shape listed[QWEN_LINEAR_SHAPES];
        const int32_t n_listed = qwen_linear_shapes(w, sizes[k], 1, listed);
        for (int32_t i = 0; i < n_listed; i++) {
            bool found = false;
            for (int j = 0; j < n_recorded; j++) found |= same_shape(&recorded[j], &listed[i]);
            ck_assert_msg(found, "%s, %d tokens: listed shape %d is not a linear op the forward ran",
                          gm->name, sizes[k], i);
        }
        for (int j = 0; j < n_recorded; j++) {
            bool found = false;
            for (int32_t i = 0; i < n_listed; i++) found |= same_shape(&recorded[j], &listed[i]);
            ck_assert_msg(found, "%s, %d tokens: the forward ran linear op %d (%d rows), which "
                          "is not listed", gm->name, sizes[k], j, recorded[j].n);
        }
    }
    be->ops = cpu_ops;
    close_forward_model(&f);
}
END_TEST

/* A temporary directory holding model m, and a CPU backend to run it:
 * the start of the tests that open their own runner. */
static void model_and_backend(int m, char dir[512], nl_backend **be)
{
    make_tmp();
    ck_assert_int_eq(make_model(&models[m], tmp_root), 0);
    snprintf(dir, 512, "%s/%s", tmp_root, models[m].name);
    ck_assert_int_eq(nl_backend_cpu_create(1, be), NL_OK);
}

START_TEST(test_rejects_bad_commands)
{
    char dir[512];
    nl_backend *be;
    model_and_backend(0, dir, &be);
    model_runner *r = open_runner(dir, be, nl_comm_single());
    wire_reply reply;
    int32_t toks[40] = {0}, bad_tok[1] = {1024}, bad_table[3] = {0, 48, 1};
    struct {
        wire_seq seq;
        const char *needle;
    } cases[] = {
        {{.num_new = 1, .n_blocks = 3, .tokens = bad_tok, .block_table = tables[0]}, "outside vocab"},
        {{.num_new = 1, .n_blocks = 3, .tokens = toks, .block_table = bad_table}, "block_table[1] = 48"},
        {{.num_computed = 40, .num_new = 9, .n_blocks = 3, .tokens = toks, .block_table = tables[0]}, "blocks of 16"},
        {{.num_new = 0, .n_blocks = 3, .tokens = toks, .block_table = tables[0]}, "num_new 0"},
        {{.num_computed = 120, .num_new = 9, .n_blocks = 3, .tokens = toks, .block_table = tables[0]}, "max_model_len"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wire_run cmd = {.kind = WIRE_RUN, .step_id = 1, .n_seqs = 1, .seqs = &cases[i].seq};
        ck_assert_int_eq(model_runner_execute(r, &cmd, &reply), NL_ERR_INVALID_ARG);
        ck_assert_int_eq(reply.status, NL_ERR_INVALID_ARG);
        ck_assert_msg(strstr(reply.error, cases[i].needle), "case %zu: \"%s\" lacks \"%s\"", i,
                      reply.error, cases[i].needle);
    }
    /* more tokens than max_num_batched_tokens, over two seqs */
    wire_seq two[2] = {{.num_new = 40, .n_blocks = 3, .tokens = toks, .block_table = tables[0]},
                       {.num_new = 40, .n_blocks = 3, .tokens = toks, .block_table = tables[1]}};
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 2, .n_seqs = 2, .seqs = two};
    ck_assert_int_eq(model_runner_execute(r, &cmd, &reply), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(reply.error, "max_num_batched_tokens"));
    /* still works: one valid sampled step */
    two[0].sample = 1, two[0].sampling.top_p = 1.0f;
    cmd.n_seqs = 1;
    ck_assert_int_eq(model_runner_execute(r, &cmd, &reply), NL_OK);
    ck_assert_int_eq(reply.n_sampled, 1);
    ck_assert(reply.sampled[0].token_id >= 0 && reply.sampled[0].token_id < 1024);
    model_runner_destroy(r);
    nl_backend_destroy(be);
    remove_tree(tmp_root);
}
END_TEST

/* A temperature so small that 1 / T overflows a float still means "the
 * most likely token": it must not turn every score into an infinity whose
 * ties go to the lowest id. */
START_TEST(test_tiny_temperature_is_greedy)
{
    char dir[512];
    nl_backend *be;
    model_and_backend(0, dir, &be);
    model_runner *r = open_runner(dir, be, nl_comm_single());
    wire_reply reply;
    wire_seq q = seq_of(1, 0, prompt_len[1], prompts[1], true);
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 1, .n_seqs = 1, .seqs = &q};
    q.sampling.temperature = 0.0f;
    ck_assert_int_eq(model_runner_execute(r, &cmd, &reply), NL_OK);
    int32_t greedy = reply.sampled[0].token_id;
    ck_assert_int_eq(greedy, reply.sampled[0].top_ids[0]);
    const float tiny[] = {1e-40f, 1e-38f, 1e-30f, 1e-7f};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++)
        for (uint64_t seed = 0; seed < 4; seed++) {
            q.sampling.temperature = tiny[i], q.sampling.seed = seed;
            ck_assert_int_eq(model_runner_execute(r, &cmd, &reply), NL_OK);
            ck_assert_msg(reply.sampled[0].token_id == greedy, "T %g seed %d: token %d, greedy %d",
                          (double)tiny[i], (int)seed, reply.sampled[0].token_id, greedy);
        }
    model_runner_destroy(r);
    nl_backend_destroy(be);
    remove_tree(tmp_root);
}
END_TEST

/* The shapes a runner prepares at start-up (linear_warm_start): each
 * projection at every power of two of tokens up to max_num_batched_tokens'
 * (the counts other counts run on), none past 32,768; the LM head only at
 * counts a step can sample. */
static int32_t warm_n[512];
static bool warm_logits[512];
static int n_warm;

static nl_status rec_warm_start(nl_backend *be, const nl_linear_shape *shapes, int32_t n)
{
    (void)be;
    for (int32_t i = 0; i < n && n_warm < 512; i++, n_warm++) {
        warm_n[n_warm] = shapes[i].n;
        warm_logits[n_warm] = shapes[i].out_f32;
    }
    return NL_OK;
}

START_TEST(test_warm_shapes)
{
    char dir[512];
    nl_backend *be;
    model_and_backend(0, dir, &be);
    static nl_backend_ops rec;
    const nl_backend_ops *cpu = be->ops;
    rec = *cpu;
    rec.linear_warm_start = rec_warm_start;
    be->ops = &rec;
    engine_settings p = runner_params(dir);
    p.max_num_batched_tokens = 40000;
    n_warm = 0;
    model_runner *r = NULL;
    ck_assert_msg(model_runner_create(&p, 0, be, nl_comm_single(), &r) == NL_OK, "%s", nl_last_error());
    int projections[17] = {0}, logits[17] = {0};
    for (int i = 0; i < n_warm; i++) {
        int e = 0;
        while (e < 17 && (1 << e) != warm_n[i]) e++;
        ck_assert_msg(e < 17, "prepared %d tokens: not a power of two up to 65,536", warm_n[i]);
        (warm_logits[i] ? logits : projections)[e]++;
    }
    for (int e = 0; e < 17; e++) {
        ck_assert_msg(projections[e] == (e <= 15 ? 4 : 0), "%d tokens: %d projections prepared",
                      1 << e, projections[e]);
        ck_assert_msg(logits[e] == (1 << e < 2 * p.max_num_seqs ? 1 : 0),
                      "%d tokens: %d LM heads prepared", 1 << e, logits[e]);
    }
    model_runner_destroy(r);
    be->ops = cpu;
    nl_backend_destroy(be);
    remove_tree(tmp_root);
}
END_TEST

/* NANOLLM_PROFILE's modes, and stream mode's accounting: what a step that
 * is not a graph step runs between two graph steps (a prefill) is charged
 * to no phase, so "until next step" is only the wait from one graph step's
 * end to the next one's start. */
START_TEST(test_profile_modes_and_uncharged)
{
    nl_backend *be;
    ck_assert_int_eq(nl_backend_cpu_create(1, &be), NL_OK);
    runner_profile p;
    ck_assert_int_eq(runner_profile_parse(NULL, be, 0, &p), NL_OK);
    ck_assert(!p.phases && !p.ops && !p.stream);
    ck_assert_int_eq(runner_profile_parse("1", be, 0, &p), NL_OK);
    ck_assert(p.phases && !p.ops && !p.stream);
    ck_assert_int_eq(runner_profile_parse("ops", be, 0, &p), NL_OK);
    ck_assert(p.phases && p.ops && !p.stream);
    ck_assert_int_eq(runner_profile_parse("skip:rope", be, 1, &p), NL_OK);
    ck_assert(!p.phases && p.stream && p.left_out != 0);
    ck_assert_int_ne(runner_profile_parse("skip:bogus", be, 1, &p), NL_OK);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "'bogus'"));

    ck_assert_int_eq(runner_profile_parse("stream", be, 0, &p), NL_OK);
    ck_assert(p.stream && !p.phases);
    for (int step = 0; step < 2; step++) {
        if (step == 1) {
            ck_assert_int_eq(runner_profile_step(&p, be, false), NL_OK);
            usleep(200 * 1000); /* a prefill between the graph steps */
        }
        ck_assert_int_eq(runner_profile_step(&p, be, true), NL_OK);
        for (int phase = STREAM_INPUTS; phase < STREAM_COUNT; phase++)
            ck_assert_int_eq(runner_profile_mark(&p, be, true, phase), NL_OK);
    }
    ck_assert_int_eq(p.stream_steps, 2);
    ck_assert_int_eq(runner_profile_collect(&p, be, true), NL_OK);
    double charged = 0;
    for (int phase = 0; phase < STREAM_COUNT; phase++) charged += p.stream_s[phase];
    ck_assert_msg(charged < 0.1, "%.3f s charged to the phases of two empty steps", charged);
    nl_backend_destroy(be);
}
END_TEST

START_TEST(test_rejects_tp_not_dividing)
{
    char dir[512];
    nl_backend *be;
    model_and_backend(1, dir, &be); /* 6 heads, 1 kv head, inter 160 */
    engine_settings p = runner_params(dir);
    p.tp = 4, p.num_kv_blocks = 8, p.max_num_seqs = 2, p.max_num_batched_tokens = 16;
    p.max_model_len = 64;
    struct { nl_comm c; } fake = {{.ops = nl_comm_single()->ops, .rank = 0, .size = 4}};
    model_runner *r = NULL;
    ck_assert_int_eq(model_runner_create(&p, 0, be, &fake.c, &r), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "6 attention heads"));
    nl_backend_destroy(be);
    remove_tree(tmp_root);
}
END_TEST

/* NANOLLM_PROFILE=skip:OPS: the keys parse to the forward's ops (an
 * unknown one is named in the error), and a forward leaves exactly those
 * out. */
static int n_ropes, n_heads, n_gathers;

static nl_status count_rope(nl_backend *be, void *qkv, const int32_t *positions,
                            const nl_weight *q_norm, const nl_weight *k_norm,
                            const float *inv_freq, void *k_cache, void *v_cache,
                            const int32_t *slots, int32_t n, int32_t hq, int32_t hk, int32_t hd,
                            float eps, int32_t block_size, nl_dtype kv_dtype)
{
    n_ropes++;
    return cpu_ops->qk_norm_rope_store(be, qkv, positions, q_norm, k_norm, inv_freq, k_cache,
                                       v_cache, slots, n, hq, hk, hd, eps, block_size, kv_dtype);
}

static nl_status count_head(nl_backend *be, float *out, const void *x, const nl_weight *w,
                            int32_t n)
{
    n_heads++;
    return cpu_ops->linear_f32(be, out, x, w, n);
}

/* Rank 0 of a 2-rank group whose peer's rows are zeros: the all-gather is
 * counted, all-reduces leave the rank's own sums. */
static nl_status count_gather(nl_comm *c, const void *send, void *recv, size_t count,
                              nl_dtype dtype)
{
    (void)c;
    n_gathers++;
    memcpy(recv, send, count * nl_dtype_size(dtype));
    memset((char *)recv + count * nl_dtype_size(dtype), 0, count * nl_dtype_size(dtype));
    return NL_OK;
}

static nl_status keep_own_sums(nl_comm *c, void *buf, size_t count, nl_dtype dtype)
{
    (void)c, (void)buf, (void)count, (void)dtype;
    return NL_OK;
}

START_TEST(test_left_out_ops)
{
    uint32_t mask = 0;
    ck_assert_int_eq(qwen_parse_left_out("rope,lm_head", &mask), NL_OK);
    ck_assert_uint_eq(mask, (1u << QWEN_OP_ROPE_STORE) | (1u << QWEN_OP_LM_HEAD));
    ck_assert_int_eq(qwen_parse_left_out("", &mask), NL_OK);
    ck_assert_uint_eq(mask, 0);
    ck_assert_int_eq(qwen_parse_left_out("down,ropes", &mask), NL_ERR_INVALID_ARG);
    ck_assert_msg(strstr(nl_last_error(), "'ropes'"), "%s", nl_last_error());

    const golden_model *gm = &models[0];
    forward_model f = open_forward_model(gm);
    nl_backend *be = f.be;
    qwen_weights *w = f.w;
    qwen_state *s = f.s;
    static nl_backend_ops counting;
    cpu_ops = be->ops;
    counting = *cpu_ops;
    counting.qk_norm_rope_store = count_rope;
    counting.linear_f32 = count_head;
    be->ops = &counting;
    n_ropes = n_heads = 0;
    forward_prompt(be, w, s, 3);
    ck_assert_int_eq(n_ropes, f.cfg.num_hidden_layers);
    ck_assert_int_eq(n_heads, 1);
    ck_assert_int_eq(qwen_parse_left_out("lm_head,rope", &s->left_out), NL_OK);
    n_ropes = n_heads = 0;
    forward_prompt(be, w, s, 3);
    ck_assert_int_eq(n_ropes, 0);
    ck_assert_int_eq(n_heads, 0);
    be->ops = cpu_ops;
    close_forward_model(&f);

    /* a shard's forward gathers its logits once, and not with logits_gather left out */
    f = open_forward_shard(gm, 2);
    static const nl_comm_ops two_ops = {.all_reduce_sum = keep_own_sums, .all_gather = count_gather};
    nl_comm two = {.ops = &two_ops, .rank = 0, .size = 2};
    n_gathers = 0;
    forward_prompt_comm(f.be, &two, f.w, f.s, 3);
    ck_assert_int_eq(n_gathers, 1);
    ck_assert_int_eq(qwen_parse_left_out("logits_gather", &f.s->left_out), NL_OK);
    forward_prompt_comm(f.be, &two, f.w, f.s, 3);
    ck_assert_int_eq(n_gathers, 1);
    close_forward_model(&f);
}
END_TEST

int main(int argc, char **argv)
{
    init_prompts();
    if (argc == 3 && !strcmp(argv[1], "--make-models")) {
        for (int i = 0; i < N_MODELS; i++)
            if (make_model(&models[i], argv[2]) != 0) return 1;
        return 0;
    }
    Suite *s = suite_create("model_golden");
    TCase *tc = tcase_create("golden");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_golden, 0, N_MODELS);
    tcase_add_loop_test(tc, test_golden_tp2, 0, N_MODELS);
    tcase_add_loop_test(tc, test_golden_tp4, 0, N_TP4);
    tcase_add_loop_test(tc, test_linear_shapes_match_forward, 0, N_MODELS);
    tcase_add_test(tc, test_rejects_bad_commands);
    tcase_add_test(tc, test_rejects_tp_not_dividing);
    tcase_add_test(tc, test_warm_shapes);
    tcase_add_test(tc, test_profile_modes_and_uncharged);
    tcase_add_test(tc, test_tiny_temperature_is_greedy);
    tcase_add_test(tc, test_left_out_ops);
    suite_add_tcase(s, tc);
    return check_run(s);
}
