/* test_comm_ipc.c — the CUDA-IPC communicator held to a host reference.
 *
 * The program plays the leader: it forks tp worker processes (before any
 * of them touches CUDA), gives them a shared area, and watches them.  Each
 * rank runs the same list of cases: an all-reduce or an all-gather of a size,
 * dtype and algorithm, eagerly or replayed from a CUDA graph.  Inputs are
 * generated from (case, rank, element), so every rank can compute the host
 * reference for all ranks: the fp32 sum over ranks 0, 1, ... rounded once.
 * A case passes when the device result equals the reference bit for bit;
 * every rank also publishes a hash of its result and the leader checks that
 * they agree.  The inputs mix magnitudes so that summing in another order
 * changes many results (the program counts them, to show the check bites).
 *
 * Modes: by default (make check) tp 2 and rows 1 .. 64 of hidden; --full
 * the sweep of tp 2, 4, 8 and rows 1 .. 16384;
 * --bench (time per call at decode sizes, eager and in a graph, one-shot
 * against two-shot, and with --nccl against NCCL where the ranks have GPUs
 * of their own: NL_TEST_DEVICES=0,1); --fault (a rank killed inside an all-reduce: the
 * leader sets the abort word, the others must return within a second; and
 * a rank stalled with no leader help: the others time out).  Without a GPU
 * it exits 77 (skipped).  Not a Check program: it also runs on machines
 * without Check.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/comm_area.h"
#include "common/dtype.h"
#include "common/mix64.h"
#include "kernels/comm.h"
#include "kernels/cuda/comm_ipc.h"
#include "kernels/cuda/comm_nccl.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

#define MAX_CASES 512
#define MAX_TP NL_COMM_IPC_MAX_RANKS
#define REPLAYS 3

typedef enum { OP_ALL_REDUCE, OP_ALL_GATHER } op_kind;

typedef struct test_case {
    op_kind op;
    nl_dtype dtype;
    int64_t count;   /* elements per rank */
    int algo;        /* nl_comm_ipc_algo */
    bool graph;
    int64_t rows;    /* for the report */
} test_case;

/* What the ranks report to the leader, in a shared mapping. */
typedef struct report {
    _Atomic int32_t done[MAX_TP];
    _Atomic int32_t entered[MAX_TP];     /* --fault: inside the call that cannot finish */
    int32_t fail[MAX_CASES][MAX_TP];     /* mismatching elements, -1: error */
    uint64_t hash[MAX_CASES][MAX_TP];
    int64_t order_sensitive[MAX_CASES];  /* rank 0: elements another order changes */
    char error[MAX_TP][256];
    double bench_us[64][6];              /* rank 0: [row][variant], see bench_names */
    _Atomic int32_t nccl_id_ready;       /* --nccl: rank 0 published the id */
    uint8_t nccl_id[NL_NCCL_UNIQUE_ID_BYTES];
    double fault_s[MAX_TP];              /* seconds from the leader's abort to the error */
    char fault_msg[MAX_TP][256];
} report;

static test_case cases[MAX_CASES];
static int n_cases;
static int hidden = 1024;
static int devices[MAX_TP];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- inputs and references --------------------------------------------------- */

/* A value with a random sign, mantissa and exponent in [2^-6, 2^6): sums of
 * such values round differently in different orders. */
static float input_value(int c, int rank, int64_t i, int replay)
{
    uint64_t h = nl_mix64(((uint64_t)c << 48) ^ ((uint64_t)rank << 40) ^ ((uint64_t)replay << 36) ^
                          (uint64_t)i);
    float m = 1.0f + (float)(h & 0xffffff) / 16777216.0f;
    int e = (int)((h >> 24) % 13) - 6;
    float v = ldexpf(m, e);
    return (h >> 40) & 1 ? -v : v;
}

static void store_elem(void *p, nl_dtype t, int64_t i, float v)
{
    if (t == NL_DTYPE_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = nl_f32_to_bf16(v);
}

/* The value as the device sees it (rounded to the dtype). */
static float device_value(nl_dtype t, float v)
{
    return t == NL_DTYPE_F32 ? v : nl_bf16_to_f32(nl_f32_to_bf16(v));
}

static void make_input(const test_case *k, int c, int rank, int replay, void *host)
{
    for (int64_t i = 0; i < k->count; i++) store_elem(host, k->dtype, i, input_value(c, rank, i, replay));
}

/* The reference sum of element i over ranks 0..tp-1, in that order. */
static float reference(const test_case *k, int c, int tp, int64_t i, int replay, bool reverse)
{
    float acc = 0.0f;
    for (int n = 0; n < tp; n++) {
        int r = reverse ? tp - 1 - n : n;
        float x = device_value(k->dtype, input_value(c, r, i, replay));
        acc = n == 0 ? x : acc + x;
    }
    return acc;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Mismatches of an all-reduce result against the reference. */
static int64_t check_all_reduce(const test_case *k, int c, int tp, int replay, const void *got,
                                int64_t *order_sensitive)
{
    int64_t bad = 0, sensitive = 0;
    for (int64_t i = 0; i < k->count; i++) {
        float want = reference(k, c, tp, i, replay, false);
        uint32_t g, w;
        if (k->dtype == NL_DTYPE_F32) {
            memcpy(&g, (const float *)got + i, 4);
            memcpy(&w, &want, 4);
        } else {
            g = ((const uint16_t *)got)[i];
            w = nl_f32_to_bf16(want);
        }
        if (g != w) bad++;
        if (order_sensitive) {
            float rev = reference(k, c, tp, i, replay, true);
            if (k->dtype == NL_DTYPE_F32 ? rev != want : nl_f32_to_bf16(rev) != w) sensitive++;
        }
    }
    if (order_sensitive) *order_sensitive = sensitive;
    return bad;
}

static int64_t check_all_gather(const test_case *k, int c, int tp, int replay, const void *got)
{
    int64_t bad = 0;
    size_t es = nl_dtype_size(k->dtype);
    uint8_t *want = malloc(k->count * es);
    for (int r = 0; r < tp; r++) {
        make_input(k, c, r, replay, want);
        const uint8_t *g = (const uint8_t *)got + (size_t)r * k->count * es;
        for (int64_t i = 0; i < k->count; i++)
            if (memcmp(g + i * es, want + i * es, es) != 0) bad++;
    }
    free(want);
    return bad;
}

/* A device-to-device copy on the backend's stream (capturable). */
static nl_status copy_on_stream(nl_backend *be, void *dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                    (cudaStream_t)nl_backend_cuda_stream(be));
    return e == cudaSuccess ? NL_OK : nl_error(NL_ERR_RUNTIME, "cudaMemcpyAsync: %s", cudaGetErrorString(e));
}

/* ---- the case list --------------------------------------------------------------- */

static void add(op_kind op, nl_dtype t, int64_t rows, int64_t count, int algo, bool graph)
{
    if (n_cases < MAX_CASES)
        cases[n_cases++] = (test_case){op, t, count, algo, graph, rows};
}

static void build_cases(int tp, int64_t max_rows)
{
    n_cases = 0;
    static const nl_dtype types[] = {NL_DTYPE_BF16, NL_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        for (int64_t rows = 1; rows <= max_rows; rows *= 2) {
            /* every algorithm up to prefill sizes, the automatic choice above */
            int last = rows <= 1024 ? NL_COMM_IPC_TWO_SHOT : NL_COMM_IPC_AUTO;
            for (int algo = NL_COMM_IPC_AUTO; algo <= last; algo++)
                add(OP_ALL_REDUCE, types[d], rows, rows * hidden, algo, false);
        }
        /* counts that fit no 16-byte pack, or fewer elements than ranks */
        add(OP_ALL_REDUCE, types[d], 0, 1, NL_COMM_IPC_AUTO, false);
        add(OP_ALL_REDUCE, types[d], 0, hidden + 3, NL_COMM_IPC_ONE_SHOT, false);
        add(OP_ALL_REDUCE, types[d], 0, 3 * hidden + 5, NL_COMM_IPC_TWO_SHOT, false);
        for (int64_t rows = 1; rows <= max_rows; rows *= 16)
            add(OP_ALL_REDUCE, types[d], rows, rows * hidden, NL_COMM_IPC_AUTO, true);
    }
    /* logits: rows of a vocabulary shard (Qwen3's 151936 / tp) */
    int64_t shard = 151936 / tp;
    for (int64_t rows = 1; rows <= 64; rows *= 8) {
        add(OP_ALL_GATHER, NL_DTYPE_F32, rows, rows * shard, 0, false);
        add(OP_ALL_GATHER, NL_DTYPE_F32, rows, rows * shard, 0, true);
    }
    add(OP_ALL_GATHER, NL_DTYPE_BF16, 0, 7, 0, false);
}

/* ---- one rank ------------------------------------------------------------------- */

typedef struct rank_ctx {
    int rank, tp;
    nl_backend *be;
    nl_comm *comm;
    report *rep;
    void *area;
} rank_ctx;

static nl_status run_op(rank_ctx *x, const test_case *k, void *dbuf, void *drecv)
{
    if (k->op == OP_ALL_REDUCE) return x->comm->ops->all_reduce_sum(x->comm, dbuf, k->count, k->dtype);
    return x->comm->ops->all_gather(x->comm, dbuf, drecv, k->count, k->dtype);
}

static nl_status run_case(rank_ctx *x, int c)
{
    const test_case *k = &cases[c];
    nl_backend *be = x->be;
    size_t es = nl_dtype_size(k->dtype), bytes = k->count * es;
    size_t out_bytes = k->op == OP_ALL_GATHER ? bytes * x->tp : bytes;
    void *host = malloc(bytes), *out = malloc(out_bytes);
    void *dsrc = NULL, *dbuf = NULL, *drecv = NULL;
    nl_graph *g = NULL;
    nl_status st = be->ops->alloc(be, bytes, &dsrc);
    if (st == NL_OK) st = be->ops->alloc(be, bytes, &dbuf);
    if (st == NL_OK && k->op == OP_ALL_GATHER) st = be->ops->alloc(be, out_bytes, &drecv);
    nl_comm_ipc_set_algo(x->comm, (nl_comm_ipc_algo)k->algo);
    int64_t bad = 0;
    uint64_t h = 0;
    int replays = k->graph ? REPLAYS : 1;
    for (int rep = 0; rep < replays && st == NL_OK; rep++) {
        make_input(k, c, x->rank, rep, host);
        st = be->ops->upload(be, dsrc, host, bytes);
        if (st != NL_OK) break;
        if (!k->graph) {
            st = be->ops->upload(be, dbuf, host, bytes);
            if (st == NL_OK) st = run_op(x, k, dbuf, drecv);
        } else {
            if (!g) {
                /* the graph copies the fresh input in, then runs the op */
                st = be->ops->synchronize(be);
                if (st == NL_OK) st = be->ops->capture_begin(be);
                if (st == NL_OK) {
                    nl_status a = copy_on_stream(be, dbuf, dsrc, bytes);
                    if (a == NL_OK) a = run_op(x, k, dbuf, drecv);
                    nl_status e = be->ops->capture_end(be, &g);
                    st = a != NL_OK ? a : e;
                }
            }
            if (st == NL_OK) st = be->ops->graph_launch(be, g);
        }
        if (st == NL_OK) st = be->ops->synchronize(be);
        if (st == NL_OK) st = nl_comm_check(x->comm);
        if (st != NL_OK) break;
        if (k->op == OP_ALL_REDUCE) {
            st = be->ops->download(be, out, dbuf, bytes);
            if (st != NL_OK) break;
            int64_t sens = 0;
            bool count_order = x->rank == 0 && rep == 0 && x->tp > 1;
            bad += check_all_reduce(k, c, x->tp, rep, out, count_order ? &sens : NULL);
            if (count_order) x->rep->order_sensitive[c] = sens;
            h = h * 31 + hash_bytes(out, bytes);
        } else {
            st = be->ops->download(be, out, drecv, out_bytes);
            if (st != NL_OK) break;
            bad += check_all_gather(k, c, x->tp, rep, out);
            h = h * 31 + hash_bytes(out, out_bytes);
        }
    }
    if (g) be->ops->graph_destroy(be, g);
    be->ops->free(be, dsrc);
    be->ops->free(be, dbuf);
    if (drecv) be->ops->free(be, drecv);
    free(host);
    free(out);
    x->rep->fail[c][x->rank] = st != NL_OK ? -1 : (int32_t)(bad > INT32_MAX ? INT32_MAX : bad);
    x->rep->hash[c][x->rank] = h;
    return st;
}

#define N_BENCH_ROWS 7
static const int bench_rows[N_BENCH_ROWS] = {1, 8, 64, 256, 1024, 4096, 16384};
static const char *const bench_names[6] = {"ipc 1-shot", "ipc 2-shot", "ipc 1-shot graph",
                                           "ipc 2-shot graph", "nccl", "nccl graph"};
static int bench_iters = 20;
static bool bench_nccl;

/* NCCL beside the IPC comm, for comparison (ranks on distinct GPUs only). */
static nl_status make_nccl(rank_ctx *x, nl_comm **out)
{
    if (x->rank == 0) {
        NL_TRY(nl_comm_nccl_unique_id(x->rep->nccl_id));
        atomic_store(&x->rep->nccl_id_ready, 1);
    } else {
        double t0 = now_s();
        while (!atomic_load(&x->rep->nccl_id_ready)) {
            if (now_s() - t0 > 30) return nl_error(NL_ERR_RUNTIME, "no NCCL id from rank 0");
            usleep(1000);
        }
    }
    return nl_comm_nccl_create(x->rank, x->tp, x->rep->nccl_id, x->be, out);
}

/* Time per call, rank 0 reports: IPC one-shot and two-shot, eager and
 * replayed from a graph, and with --nccl NCCL eager and graph. */
static nl_status run_bench(rank_ctx *x, int n_rows, const int *rows)
{
    nl_backend *be = x->be;
    size_t max_bytes = (size_t)rows[n_rows - 1] * hidden * 2;
    void *d = NULL;
    nl_comm *nccl = NULL;
    if (bench_nccl) NL_TRY(make_nccl(x, &nccl));
    NL_TRY(be->ops->alloc(be, max_bytes, &d));
    NL_TRY(be->ops->memset_zero(be, d, max_bytes));
    for (int i = 0; i < n_rows; i++) {
        size_t count = (size_t)rows[i] * hidden;
        for (int v = 0; v < (nccl ? 6 : 4); v++) {
            nl_comm *c = v >= 4 ? nccl : x->comm;
            if (v < 4) nl_comm_ipc_set_algo(x->comm, v % 2 == 0 ? NL_COMM_IPC_ONE_SHOT : NL_COMM_IPC_TWO_SHOT);
            bool graph = v == 2 || v == 3 || v == 5;
            const int iters = bench_iters, per_graph = 10;
            nl_graph *g = NULL;
            if (graph) {
                NL_TRY(be->ops->synchronize(be));
                NL_TRY(be->ops->capture_begin(be));
                for (int k = 0; k < per_graph; k++)
                    NL_TRY(c->ops->all_reduce_sum(c, d, count, NL_DTYPE_BF16));
                NL_TRY(be->ops->capture_end(be, &g));
            }
            for (int warm = 0; warm < 2; warm++) {
                double t0 = now_s();
                int calls = 0;
                for (int k = 0; k < (graph ? iters / per_graph + 1 : iters); k++) {
                    if (g) {
                        NL_TRY(be->ops->graph_launch(be, g));
                        calls += per_graph;
                    } else {
                        NL_TRY(c->ops->all_reduce_sum(c, d, count, NL_DTYPE_BF16));
                        calls++;
                    }
                }
                NL_TRY(be->ops->synchronize(be));
                NL_TRY(nl_comm_check(x->comm));
                if (warm == 1 && x->rank == 0) x->rep->bench_us[i][v] = (now_s() - t0) / calls * 1e6;
            }
            if (g) be->ops->graph_destroy(be, g);
        }
    }
    be->ops->free(be, d);
    nl_comm_destroy(nccl);
    return NL_OK;
}

/* A survivor of --fault: one all-reduce that a dead (or stalled) peer never
 * joins; reports how long after the leader's abort the error came back. */
static nl_status run_fault(rank_ctx *x, int victim)
{
    nl_backend *be = x->be;
    void *d = NULL;
    size_t count = (size_t)hidden;
    NL_TRY(be->ops->alloc(be, count * 2, &d));
    NL_TRY(be->ops->memset_zero(be, d, count * 2));
    /* one good call first, so every rank has met */
    NL_TRY(x->comm->ops->all_reduce_sum(x->comm, d, count, NL_DTYPE_BF16));
    NL_TRY(be->ops->synchronize(be));
    if (x->rank == victim) {
        for (;;) pause(); /* stalls, or is killed here */
    }
    NL_TRY(x->comm->ops->all_reduce_sum(x->comm, d, count, NL_DTYPE_BF16));
    atomic_store(&x->rep->entered[x->rank], 1);
    nl_status st = be->ops->synchronize(be);
    if (st == NL_OK) st = nl_comm_check(x->comm);
    return st;
}

typedef enum { MODE_SWEEP, MODE_BENCH, MODE_FAULT_KILL, MODE_FAULT_STALL } run_mode;

static int rank_main(int rank, int tp, report *rep, void *area, run_mode mode, int64_t max_rows,
                     double timeout_s)
{
    rank_ctx x = {.rank = rank, .tp = tp, .rep = rep, .area = area};
    nl_status st = nl_backend_cuda_create(devices[rank], &x.be);
    nl_comm_ipc_params p = {.area = area, .area_bytes = NL_COMM_IPC_AREA_BYTES, .rank = rank,
                            .size = tp, .timeout_s = timeout_s};
    if (st == NL_OK) st = nl_comm_ipc_create(&p, x.be, &x.comm);
    if (st == NL_OK) {
        if (mode == MODE_SWEEP) {
            for (int c = 0; c < n_cases && st == NL_OK; c++) st = run_case(&x, c);
        } else if (mode == MODE_BENCH) {
            st = run_bench(&x, N_BENCH_ROWS, bench_rows);
        } else {
            st = run_fault(&x, tp - 1);
            if (st != NL_OK) {
                double at = now_s();
                rep->fault_s[rank] = at;
                snprintf(rep->fault_msg[rank], sizeof rep->fault_msg[rank], "%s", nl_last_error());
            }
        }
    }
    if (st != NL_OK && mode != MODE_FAULT_KILL && mode != MODE_FAULT_STALL)
        snprintf(rep->error[rank], sizeof rep->error[rank], "%s", nl_last_error());
    nl_comm_destroy(x.comm);
    nl_backend_destroy(x.be);
    atomic_store(&rep->done[rank], 1);
    return st == NL_OK ? 0 : 1;
}

/* ---- the leader ----------------------------------------------------------------- */

static void *shared_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Forks tp ranks and waits for them; in the fault modes, kills or outwaits
 * the last rank.  Returns the number of ranks that exited non-zero. */
static int run_group(int tp, run_mode mode, int64_t max_rows, report *rep, double *abort_at)
{
    void *area = shared_map(NL_COMM_IPC_AREA_BYTES);
    memset(rep, 0, sizeof *rep);
    pid_t pids[MAX_TP];
    fflush(stdout);
    double timeout_s = mode == MODE_FAULT_STALL ? 2.0 : 0;
    for (int r = 0; r < tp; r++) {
        pids[r] = fork();
        if (pids[r] == 0) _exit(rank_main(r, tp, rep, area, mode, max_rows, timeout_s));
    }
    int failed = 0, live = tp;
    bool victim_handled = false;
    double entered_at = 0;
    double start = now_s();
    *abort_at = 0;
    while (live > 0) {
        for (int r = 0; r < tp; r++) {
            if (pids[r] <= 0) continue;
            int status;
            pid_t w = waitpid(pids[r], &status, WNOHANG);
            if (w != pids[r]) continue;
            pids[r] = 0;
            live--;
            bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
            if (!ok) failed++;
            if (WIFSIGNALED(status) && *abort_at == 0) {
                /* as the engine's leader does: a dead rank aborts the group */
                nl_comm_area_abort(area, NL_COMM_ABORT_RANK_DEAD + (uint32_t)r);
                *abort_at = now_s();
            }
        }
        /* the victim sits in pause() once the others are inside the call */
        if ((mode == MODE_FAULT_KILL || mode == MODE_FAULT_STALL) && !victim_handled) {
            bool others_done = true, others_in = true;
            for (int r = 0; r < tp - 1; r++) {
                others_done &= atomic_load(&rep->done[r]) != 0;
                others_in &= atomic_load(&rep->entered[r]) != 0;
            }
            if (others_in && entered_at == 0) entered_at = now_s();
            /* killed while the others spin inside the kernel */
            if (mode == MODE_FAULT_KILL && entered_at > 0 && now_s() - entered_at > 0.3) {
                kill(pids[tp - 1], SIGKILL);
                victim_handled = true;
            } else if (mode == MODE_FAULT_STALL && others_done) {
                kill(pids[tp - 1], SIGKILL);
                victim_handled = true;
            }
        }
        if (now_s() - start > 600) {
            fprintf(stderr, "test_comm_ipc: tp %d still running after 600 s, killing it\n", tp);
            for (int r = 0; r < tp; r++)
                if (pids[r] > 0) kill(pids[r], SIGKILL);
        }
        usleep(1000);
    }
    munmap(area, NL_COMM_IPC_AREA_BYTES);
    return failed;
}

static const char *dtype_str(nl_dtype t) { return t == NL_DTYPE_F32 ? "f32" : "bf16"; }
static const char *algo_str(int a)
{
    return a == NL_COMM_IPC_ONE_SHOT ? "one-shot" : a == NL_COMM_IPC_TWO_SHOT ? "two-shot" : "auto";
}

static int report_sweep(int tp, int64_t max_rows, report *rep)
{
    int bad_cases = 0;
    for (int c = 0; c < n_cases; c++) {
        const test_case *k = &cases[c];
        bool ok = true, same = true;
        for (int r = 0; r < tp; r++) {
            if (rep->fail[c][r] != 0) ok = false;
            if (rep->hash[c][r] != rep->hash[c][0]) same = false;
        }
        if (!ok || !same) {
            bad_cases++;
            printf("  FAIL tp %d %s %s count %lld (%lld rows) %s%s:", tp,
                   k->op == OP_ALL_GATHER ? "all-gather" : "all-reduce", dtype_str(k->dtype),
                   (long long)k->count, (long long)k->rows, algo_str(k->algo), k->graph ? " graph" : "");
            for (int r = 0; r < tp; r++) printf(" r%d=%d", r, rep->fail[c][r]);
            printf("%s\n", same ? "" : " (ranks differ)");
        }
    }
    int64_t sens = 0, elems = 0;
    for (int c = 0; c < n_cases; c++)
        if (cases[c].op == OP_ALL_REDUCE) {
            sens += rep->order_sensitive[c];
            elems += cases[c].count;
        }
    printf("tp %d: %d cases (all-reduce bf16/f32 1..%lld rows x %d, eager and graph replays; "
           "all-gathers): %d failed; %lld of %lld summed elements would differ summed in reverse order\n",
           tp, n_cases, (long long)max_rows, hidden, bad_cases, (long long)sens,
           (long long)elems);
    for (int r = 0; r < tp; r++)
        if (rep->error[r][0]) printf("  rank %d: %s\n", r, rep->error[r]);
    return bad_cases;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    int tps[8] = {2}, n_tps = 1;
    int64_t max_rows = 64;
    run_mode mode = MODE_SWEEP;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tp") && i + 1 < argc) {
            n_tps = parse_list(argv[++i], tps, 8);
        } else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) {
            hidden = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--max-rows") && i + 1 < argc) {
            max_rows = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--full")) {
            max_rows = 16384;
            tps[0] = 2, tps[1] = 4, tps[2] = 8;
            n_tps = 3;
        } else if (!strcmp(argv[i], "--bench")) {
            mode = MODE_BENCH;
        } else if (!strcmp(argv[i], "--nccl")) {
            bench_nccl = true;
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            bench_iters = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--fault")) {
            mode = MODE_FAULT_KILL;
        } else {
            fprintf(stderr, "usage: %s [--tp 2,4,8] [--hidden N] [--max-rows N] [--full] [--bench [--nccl] [--iters N]] [--fault]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_tps < 1 || hidden < 1 || bench_iters < 1) {
        fprintf(stderr, "test_comm_ipc: bad --tp, --hidden or --iters\n");
        return 2;
    }
    /* the parent must not initialise CUDA before forking: ask a child */
    pid_t probe = fork();
    if (probe == 0) _exit(nl_cuda_device_count() > 0 ? 0 : 77);
    int ps;
    waitpid(probe, &ps, 0);
    if (!WIFEXITED(ps) || WEXITSTATUS(ps) != 0) {
        printf("test_comm_ipc: no CUDA device, skipped\n");
        return 77;
    }
    const char *dev = getenv("NL_TEST_DEVICES"); /* e.g. 0,0,0,0; default all on device 0 */
    for (int r = 0; r < MAX_TP; r++) devices[r] = 0;
    if (dev && parse_list(dev, devices, MAX_TP) < 0) {
        fprintf(stderr, "test_comm_ipc: bad NL_TEST_DEVICES '%s'\n", dev);
        return 2;
    }
    report *rep = shared_map(sizeof *rep);
    if (!rep) return 1;
    int failures = 0;
    for (int t = 0; t < n_tps; t++) {
        int tp = tps[t];
        if (tp < 2 || tp > MAX_TP) {
            fprintf(stderr, "test_comm_ipc: tp %d outside 2..%d\n", tp, MAX_TP);
            return 2;
        }
        double abort_at = 0, t0 = now_s();
        if (mode == MODE_SWEEP) {
            build_cases(tp, max_rows);
            int failed = run_group(tp, mode, max_rows, rep, &abort_at);
            failures += report_sweep(tp, max_rows, rep) + failed;
            printf("tp %d: %.1f s\n", tp, now_s() - t0);
        } else if (mode == MODE_BENCH) {
            failures += run_group(tp, mode, max_rows, rep, &abort_at);
            const int *rows = bench_rows;
            printf("tp %d, bf16, hidden %d, GPUs %s: us per all-reduce\n  %-28s", tp, hidden,
                   getenv("NL_TEST_DEVICES") ? getenv("NL_TEST_DEVICES") : "all 0", "");
            int nv = bench_nccl ? 6 : 4;
            for (int v = 0; v < nv; v++) printf(" %17s", bench_names[v]);
            printf("\n");
            for (int i = 0; i < N_BENCH_ROWS; i++) {
                printf("  rows %5d (%8d bytes):   ", rows[i], rows[i] * hidden * 2);
                for (int v = 0; v < nv; v++) printf(" %17.1f", rep->bench_us[i][v]);
                printf("\n");
            }
            for (int r = 0; r < tp; r++)
                if (rep->error[r][0]) printf("  rank %d: %s\n", r, rep->error[r]);
        } else {
            for (int m = MODE_FAULT_KILL; m <= MODE_FAULT_STALL; m++) {
                run_group(tp, (run_mode)m, max_rows, rep, &abort_at);
                int bad = 0;
                for (int r = 0; r < tp - 1; r++) {
                    double dt = rep->fault_s[r] > 0 && abort_at > 0 ? rep->fault_s[r] - abort_at : -1;
                    bool ok = rep->fault_msg[r][0] != 0;
                    if (m == MODE_FAULT_KILL) ok = ok && dt >= 0 && dt < 1.0 && strstr(rep->fault_msg[r], "died");
                    else ok = ok && strstr(rep->fault_msg[r], "bound");
                    if (!ok) bad++;
                    printf("  tp %d %s: rank %d %s (%.3f s after the abort): %s\n", tp,
                           m == MODE_FAULT_KILL ? "kill" : "stall", r, ok ? "ok" : "FAIL",
                           m == MODE_FAULT_KILL ? dt : rep->fault_s[r] - t0, rep->fault_msg[r]);
                }
                failures += bad;
                t0 = now_s();
            }
        }
    }
    printf("test_comm_ipc: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
