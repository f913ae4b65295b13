/* test_cuda_ops.c — every op of the CUDA backend against the CPU backend on
 * the same random inputs, plus CUDA-graph replay and the NCCL communicator.
 *
 * Inputs are rounded to bf16 on the host first, so both backends see the
 * same numbers and the comparison measures only the GPU's bf16 activations
 * and its summation order: ‖gpu − cpu‖ / ‖cpu‖ must stay under 1e-2.  The
 * sampler must pick the CPU's ids except where the CPU's choice sits at a
 * near-tie (checked with a double-precision run of the same procedure: a
 * cut's threshold or the race's top two scores).
 * Skipped (77) without a GPU.
 */
#include "config.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/comm.h"
#include "kernels/cuda/comm_nccl.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

#define TOL 1e-2

static nl_backend *cpu, *gpu;

/* ---- random data ------------------------------------------------------------- */

static uint64_t rng_state = 0x1234567ull;
static uint64_t rnext(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 33;
}
static float frand(void) /* [-1, 1) */
{
    return (float)((double)(rnext() & 0xffffff) / 8388608.0 - 1.0);
}
static float gauss(void)
{
    double u1 = ((rnext() & 0xffffff) + 1) / 16777218.0, u2 = (rnext() & 0xffffff) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Values already representable in bf16. */
static float *rand_bf16(size_t n, float scale)
{
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = nl_bf16_to_f32(nl_f32_to_bf16(frand() * scale));
    return a;
}

/* ---- a tensor on both backends ---------------------------------------------- */

typedef struct pair {
    void *c, *g; /* cpu (f32), gpu (bf16) */
    size_t n;
} pair;

static pair pair_new(size_t n)
{
    pair p = {NULL, NULL, n};
    ck_assert_int_eq(cpu->ops->alloc(cpu, n * 4, &p.c), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, n * 2 + 16, &p.g), NL_OK);
    return p;
}

static void pair_set(pair p, const float *h)
{
    uint16_t *b = malloc(p.n * 2 + 2);
    for (size_t i = 0; i < p.n; i++) b[i] = nl_f32_to_bf16(h[i]);
    ck_assert_int_eq(cpu->ops->upload(cpu, p.c, h, p.n * 4), NL_OK);
    ck_assert_int_eq(gpu->ops->upload(gpu, p.g, b, p.n * 2), NL_OK);
    free(b);
}

static pair pair_from(const float *h, size_t n)
{
    pair p = pair_new(n);
    pair_set(p, h);
    return p;
}

static void pair_get(pair p, float *hc, float *hg)
{
    uint16_t *b = malloc(p.n * 2 + 2);
    ck_assert_int_eq(cpu->ops->download(cpu, hc, p.c, p.n * 4), NL_OK);
    ck_assert_int_eq(gpu->ops->download(gpu, b, p.g, p.n * 2), NL_OK);
    for (size_t i = 0; i < p.n; i++) hg[i] = nl_bf16_to_f32(b[i]);
    free(b);
}

static void pair_free(pair p)
{
    cpu->ops->free(cpu, p.c);
    gpu->ops->free(gpu, p.g);
}

/* Raw bytes (ints, fp32 logits, sample rows) on both backends. */
typedef struct raw {
    void *c, *g;
} raw;

static raw raw_from(const void *h, size_t bytes)
{
    raw r;
    ck_assert_int_eq(cpu->ops->alloc(cpu, bytes, &r.c), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, bytes, &r.g), NL_OK);
    if (h) {
        ck_assert_int_eq(cpu->ops->upload(cpu, r.c, h, bytes), NL_OK);
        ck_assert_int_eq(gpu->ops->upload(gpu, r.g, h, bytes), NL_OK);
    }
    return r;
}

/* The first `bytes` of r from each backend: the CPU's into hc, the GPU's into hg. */
static void raw_get(raw r, void *hc, void *hg, size_t bytes)
{
    ck_assert_int_eq(cpu->ops->download(cpu, hc, r.c, bytes), NL_OK);
    ck_assert_msg(gpu->ops->download(gpu, hg, r.g, bytes) == NL_OK, "%s", nl_last_error());
}

static void raw_free(raw r)
{
    cpu->ops->free(cpu, r.c);
    gpu->ops->free(gpu, r.g);
}

typedef struct wpair {
    nl_weight *c, *g;
} wpair;

static wpair weight_from(const float *h, int64_t rows, int64_t cols)
{
    wpair w;
    ck_assert_int_eq(cpu->ops->weight_create(cpu, rows, cols, &w.c), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_create(gpu, rows, cols, &w.g), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_fill_rows(cpu, w.c, 0, rows, h, NL_DTYPE_F32, cols, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_fill_rows(gpu, w.g, 0, rows, h, NL_DTYPE_F32, cols, 0), NL_OK);
    return w;
}

static void weight_free(wpair w)
{
    cpu->ops->weight_destroy(cpu, w.c);
    gpu->ops->weight_destroy(gpu, w.g);
}

static double rel_err(const float *got, const float *want, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Downloads p from both backends and checks the relative error. */
static void expect_close(pair p, const char *what)
{
    float *hc = malloc(p.n * 4), *hg = malloc(p.n * 4);
    pair_get(p, hc, hg);
    double e = rel_err(hg, hc, p.n);
    printf("  %-58s rel err %.2e\n", what, e);
    ck_assert_msg(e < TOL, "%s: relative error %g", what, e);
    free(hc);
    free(hg);
}

static void sync_both(void)
{
    ck_assert_int_eq(cpu->ops->synchronize(cpu), NL_OK);
    ck_assert_msg(gpu->ops->synchronize(gpu) == NL_OK, "%s", nl_last_error());
}

#define OK_BOTH(call_c, call_g)                                                  \
    do {                                                                         \
        ck_assert_msg((call_c) == NL_OK, "cpu: %s", nl_last_error());            \
        ck_assert_msg((call_g) == NL_OK, "cuda: %s", nl_last_error());           \
    } while (0)

/* ---- linear ------------------------------------------------------------------ */

static void check_linear(int n, int rows, int cols, bool bias, bool f32)
{
    float *x = rand_bf16((size_t)n * cols, 1.0f), *w = rand_bf16((size_t)rows * cols, 0.05f);
    float *b = rand_bf16(rows, 0.5f);
    pair px = pair_from(x, (size_t)n * cols);
    wpair pw = weight_from(w, rows, cols), pb = weight_from(b, 1, rows);
    char what[96];
    if (f32) {
        raw out = raw_from(NULL, (size_t)n * rows * 4);
        OK_BOTH(cpu->ops->linear_f32(cpu, out.c, px.c, pw.c, n),
                gpu->ops->linear_f32(gpu, out.g, px.g, pw.g, n));
        float *hc = malloc((size_t)n * rows * 4), *hg = malloc((size_t)n * rows * 4);
        raw_get(out, hc, hg, (size_t)n * rows * 4);
        double e = rel_err(hg, hc, (size_t)n * rows);
        snprintf(what, sizeof what, "linear_f32 n=%d [%d x %d]", n, rows, cols);
        printf("  %-58s rel err %.2e\n", what, e);
        ck_assert_msg(e < 1e-3, "%s: %g", what, e); /* fp32 output: tighter */
        free(hc);
        free(hg);
        raw_free(out);
    } else {
        pair out = pair_new((size_t)n * rows);
        OK_BOTH(cpu->ops->linear(cpu, out.c, px.c, pw.c, bias ? pb.c : NULL, n),
                gpu->ops->linear(gpu, out.g, px.g, pw.g, bias ? pb.g : NULL, n));
        snprintf(what, sizeof what, "linear n=%d [%d x %d]%s", n, rows, cols, bias ? " +bias" : "");
        expect_close(out, what);
        pair_free(out);
    }
    pair_free(px);
    weight_free(pw);
    weight_free(pb);
    free(x);
    free(w);
    free(b);
}

/* copy_pieces, host memory to the device and back, on the GPU's cores: the
 * first 3 of 7 columns of 5 rows from host_alloc memory into a zeroed table
 * (the rest stays zero), a 16-byte-aligned piece beside it, an odd-sized
 * piece, and then the table back into host_alloc memory once the fence
 * after it has passed; more pieces than the limit are refused. */
START_TEST(test_copy_pieces)
{
    int32_t *src, *back;
    uint8_t *odd_src, odd_got[7];
    ck_assert_int_eq(gpu->ops->host_alloc(gpu, 64 * 4, (void **)&src), NL_OK);
    ck_assert_int_eq(gpu->ops->host_alloc(gpu, 35 * 4, (void **)&back), NL_OK);
    ck_assert_int_eq(gpu->ops->host_alloc(gpu, 7, (void **)&odd_src), NL_OK);
    for (int i = 0; i < 64; i++) src[i] = 100 + i;
    for (int i = 0; i < 7; i++) odd_src[i] = (uint8_t)(200 + i);
    void *table, *flat, *odd;
    ck_assert_int_eq(gpu->ops->alloc(gpu, 35 * 4, &table), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, 16 * 4, &flat), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, 8, &odd), NL_OK);
    ck_assert_int_eq(gpu->ops->memset_zero(gpu, table, 35 * 4), NL_OK);
    nl_copy_piece up[3] = {
        {.dst = table, .src = src, .dst_pitch = 7 * 4, .src_pitch = 7 * 4, .row_bytes = 3 * 4, .rows = 5},
        {.dst = flat, .src = src + 48, .dst_pitch = 64, .src_pitch = 64, .row_bytes = 64, .rows = 1},
        {.dst = odd, .src = odd_src, .dst_pitch = 7, .src_pitch = 7, .row_bytes = 7, .rows = 1},
    };
    ck_assert_int_eq(gpu->ops->copy_pieces(gpu, up, 3), NL_OK);
    nl_copy_piece down = {.dst = back, .src = table, .dst_pitch = 35 * 4, .src_pitch = 35 * 4,
                          .row_bytes = 35 * 4, .rows = 1};
    ck_assert_int_eq(gpu->ops->copy_pieces(gpu, &down, 1), NL_OK);
    ck_assert_int_eq(gpu->ops->fence_record(gpu, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->fence_wait(gpu, 0), NL_OK);
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 7; c++) ck_assert_int_eq(back[r * 7 + c], c < 3 ? src[r * 7 + c] : 0);
    int32_t flat_got[16];
    ck_assert_int_eq(gpu->ops->download(gpu, flat_got, flat, sizeof flat_got), NL_OK);
    for (int i = 0; i < 16; i++) ck_assert_int_eq(flat_got[i], 148 + i);
    ck_assert_int_eq(gpu->ops->download(gpu, odd_got, odd, 7), NL_OK);
    for (int i = 0; i < 7; i++) ck_assert_int_eq(odd_got[i], 200 + i);
    nl_copy_piece many[NL_COPY_PIECES_MAX + 1] = {{0}};
    ck_assert_int_ne(gpu->ops->copy_pieces(gpu, many, NL_COPY_PIECES_MAX + 1), NL_OK);
    gpu->ops->free(gpu, table);
    gpu->ops->free(gpu, flat);
    gpu->ops->free(gpu, odd);
    gpu->ops->host_free(gpu, src);
    gpu->ops->host_free(gpu, back);
    gpu->ops->host_free(gpu, odd_src);
}
END_TEST

/* take_ids puts the last step's samples into the next step's inputs, and
 * a copy into host_alloc memory has landed once the fence recorded after
 * it passed. */
START_TEST(test_take_ids_and_fences)
{
    int32_t ids[8] = {10, 11, 12, 13, 14, 15, 16, 17}, samples[4] = {900, 901, 902, 903};
    int32_t pairs[3 * 2] = {1, 3, 4, 0, 7, 2}; /* ids[1] = samples[3], ids[4] = samples[0], ... */
    void *d_ids, *d_samples, *d_pairs;
    ck_assert_int_eq(gpu->ops->alloc(gpu, sizeof ids, &d_ids), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, sizeof samples, &d_samples), NL_OK);
    ck_assert_int_eq(gpu->ops->alloc(gpu, sizeof pairs, &d_pairs), NL_OK);
    ck_assert_int_eq(gpu->ops->upload(gpu, d_ids, ids, sizeof ids), NL_OK);
    ck_assert_int_eq(gpu->ops->upload(gpu, d_samples, samples, sizeof samples), NL_OK);
    ck_assert_int_eq(gpu->ops->upload(gpu, d_pairs, pairs, sizeof pairs), NL_OK);
    ck_assert_int_eq(gpu->ops->take_ids(gpu, d_ids, d_samples, d_pairs, 3), NL_OK);
    int32_t *host;
    ck_assert_int_eq(gpu->ops->host_alloc(gpu, sizeof ids, (void **)&host), NL_OK);
    nl_copy_piece down = {.dst = host, .src = d_ids, .dst_pitch = sizeof ids, .src_pitch = sizeof ids,
                          .row_bytes = sizeof ids, .rows = 1};
    ck_assert_int_eq(gpu->ops->copy_pieces(gpu, &down, 1), NL_OK);
    ck_assert_int_eq(gpu->ops->fence_record(gpu, 1), NL_OK);
    ck_assert_int_eq(gpu->ops->fence_wait(gpu, 1), NL_OK);
    bool passed = false;
    ck_assert_int_eq(gpu->ops->fence_passed(gpu, 1, &passed), NL_OK);
    ck_assert(passed);
    int32_t want[8] = {10, 903, 12, 13, 900, 15, 16, 902};
    for (int i = 0; i < 8; i++) ck_assert_int_eq(host[i], want[i]);
    ck_assert_int_ne(gpu->ops->fence_record(gpu, NL_FENCES), NL_OK);
    gpu->ops->host_free(gpu, host);
    gpu->ops->free(gpu, d_ids);
    gpu->ops->free(gpu, d_samples);
    gpu->ops->free(gpu, d_pairs);
}
END_TEST

START_TEST(test_linear)
{
    check_linear(1, 64, 64, false, false);
    check_linear(7, 1024, 896, true, false);
    check_linear(33, 4608, 1024, false, false);
    check_linear(256, 1024, 3072, false, false);
    check_linear(1, 6144, 4096, false, false);
    check_linear(100, 384, 512, true, false);
    check_linear(5, 10000, 512, false, true);
    check_linear(64, 32000, 1024, false, true);
    /* small batches around the GEMV kernel (one token; gemm.cu): ragged k
     * (a tail of 16-byte pieces), bias, fp32 out, the LM head's wide rows */
    check_linear(1, 1000, 8 * 300 + 8, true, false);
    check_linear(2, 1000, 8 * 300 + 8, true, false);
    check_linear(3, 4096, 1024, false, false);
    check_linear(4, 4096, 2048, true, false);
    check_linear(1, 151936 / 8, 1024, false, true);
    check_linear(4, 3000, 1024, false, true);
    /* rows whose pieces end a few lanes into a warp's round (k / 8 = 133:
     * every lane must leave the row together), and rows split across warps:
     * 0.6B's down projection (4 parts), ragged parts (603 pieces in 4) */
    check_linear(1, 1000, 8 * 133, true, false);
    check_linear(1, 1024, 3072, false, false);
    check_linear(1, 100, 8 * 603, true, false);
    check_linear(1, 100, 8 * 603, false, true);
    /* the same shape again reuses the cached plan */
    check_linear(7, 1024, 896, true, false);
}
END_TEST

/* A token count without a plan of its own runs on the plan of the power of
 * two above it (gemm.cu): every count from 65 to 127 costs the one
 * algorithm query of 128, and each still computes its own rows. */
START_TEST(test_linear_bucket_plans)
{
    const int before = nl_backend_cuda_plans(gpu);
    for (int n = 65; n < 128; n++) check_linear(n, 256, 136, n % 2 == 0, false);
    ck_assert_int_eq(nl_backend_cuda_plans(gpu) - before, 2); /* with and without bias */
    check_linear(128, 256, 136, false, false);
    check_linear(3000, 256, 136, false, true);
    ck_assert_int_eq(nl_backend_cuda_plans(gpu) - before, 3); /* 4096's, fp32 out */
}
END_TEST

/* Plans prepared ahead while the weights are filled (linear_warm_start reads
 * them before they hold their values), then the ops on the filled weights:
 * the prepared plans must compute what fresh ones would.  Shapes no other
 * test uses, so none is cached before. */
START_TEST(test_linear_warm)
{
    const int rows = 1536, cols = 768, vocab = 2050;
    float *w = rand_bf16((size_t)rows * cols, 0.05f), *b = rand_bf16(rows, 0.5f);
    float *h = rand_bf16((size_t)vocab * cols, 0.05f), *x = rand_bf16((size_t)9 * cols, 1.0f);
    wpair pw, pb, ph;
    ck_assert_int_eq(cpu->ops->weight_create(cpu, rows, cols, &pw.c), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_create(gpu, rows, cols, &pw.g), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_create(cpu, 1, rows, &pb.c), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_create(gpu, 1, rows, &pb.g), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_create(cpu, vocab, cols, &ph.c), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_create(gpu, vocab, cols, &ph.g), NL_OK);
    const nl_linear_shape shapes[] = {
        {pw.g, pb.g, 5, false}, {pw.g, NULL, 9, false}, {ph.g, NULL, 3, true},
        {pw.g, NULL, 1, false}, /* the GEMV's: nothing to prepare */
        {pw.g, pb.g, 5, false}, /* listed twice */
    };
    ck_assert_ptr_nonnull(gpu->ops->linear_warm_start);
    ck_assert_int_eq(gpu->ops->linear_warm_start(gpu, shapes, 5), NL_OK);
    ck_assert_int_ne(gpu->ops->linear_warm_start(gpu, shapes, 5), NL_OK); /* one at a time */
    ck_assert_int_eq(cpu->ops->weight_fill_rows(cpu, pw.c, 0, rows, w, NL_DTYPE_F32, cols, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_fill_rows(gpu, pw.g, 0, rows, w, NL_DTYPE_F32, cols, 0), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_fill_rows(cpu, pb.c, 0, 1, b, NL_DTYPE_F32, rows, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_fill_rows(gpu, pb.g, 0, 1, b, NL_DTYPE_F32, rows, 0), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_fill_rows(cpu, ph.c, 0, vocab, h, NL_DTYPE_F32, cols, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_fill_rows(gpu, ph.g, 0, vocab, h, NL_DTYPE_F32, cols, 0), NL_OK);
    ck_assert_int_eq(gpu->ops->linear_warm_join(gpu), NL_OK);
    ck_assert_int_eq(gpu->ops->linear_warm_join(gpu), NL_OK); /* nothing left to join */

    pair px = pair_from(x, (size_t)9 * cols);
    const int ns[] = {5, 9};
    for (int i = 0; i < 2; i++) {
        pair out = pair_new((size_t)ns[i] * rows);
        const bool bias = ns[i] == 5;
        OK_BOTH(cpu->ops->linear(cpu, out.c, px.c, pw.c, bias ? pb.c : NULL, ns[i]),
                gpu->ops->linear(gpu, out.g, px.g, pw.g, bias ? pb.g : NULL, ns[i]));
        char what[96];
        snprintf(what, sizeof what, "prepared linear n=%d [%d x %d]%s", ns[i], rows, cols,
                 bias ? " +bias" : "");
        expect_close(out, what);
        pair_free(out);
    }
    raw logits = raw_from(NULL, (size_t)3 * vocab * 4);
    OK_BOTH(cpu->ops->linear_f32(cpu, logits.c, px.c, ph.c, 3),
            gpu->ops->linear_f32(gpu, logits.g, px.g, ph.g, 3));
    float *hc = malloc((size_t)3 * vocab * 4), *hg = malloc((size_t)3 * vocab * 4);
    raw_get(logits, hc, hg, (size_t)3 * vocab * 4);
    const double e = rel_err(hg, hc, (size_t)3 * vocab);
    printf("  %-58s rel err %.2e\n", "prepared linear_f32 n=3", e);
    ck_assert_msg(e < 1e-3, "prepared linear_f32: %g", e);
    free(hc);
    free(hg);
    raw_free(logits);
    pair_free(px);
    weight_free(pw);
    weight_free(pb);
    weight_free(ph);
    free(w);
    free(b);
    free(h);
    free(x);
}
END_TEST

/* A shape whose scratch the device cannot hold is left to its first use;
 * the others are still prepared (before, one such shape left every shape
 * unprepared). */
START_TEST(test_linear_warm_scratch_short)
{
    const int rows = 640, cols = 384;
    float *w = rand_bf16((size_t)rows * cols, 0.05f);
    wpair pw;
    ck_assert_int_eq(cpu->ops->weight_create(cpu, rows, cols, &pw.c), NL_OK);
    ck_assert_int_eq(gpu->ops->weight_create(gpu, rows, cols, &pw.g), NL_OK);
    const nl_linear_shape shapes[] = {
        {pw.g, NULL, 6, false},
        {pw.g, NULL, 1 << 30, false}, /* 768 GiB of input scratch */
    };
    const int before = nl_backend_cuda_plans(gpu);
    ck_assert_int_eq(gpu->ops->linear_warm_start(gpu, shapes, 2), NL_OK);
    ck_assert_int_eq(cpu->ops->weight_fill_rows(cpu, pw.c, 0, rows, w, NL_DTYPE_F32, cols, 0),
                     NL_OK);
    ck_assert_int_eq(gpu->ops->weight_fill_rows(gpu, pw.g, 0, rows, w, NL_DTYPE_F32, cols, 0),
                     NL_OK);
    ck_assert_int_eq(gpu->ops->linear_warm_join(gpu), NL_OK);
    ck_assert_int_eq(nl_backend_cuda_plans(gpu) - before, 1);
    float *x = rand_bf16((size_t)6 * cols, 1.0f);
    pair px = pair_from(x, (size_t)6 * cols), out = pair_new((size_t)6 * rows);
    OK_BOTH(cpu->ops->linear(cpu, out.c, px.c, pw.c, NULL, 6),
            gpu->ops->linear(gpu, out.g, px.g, pw.g, NULL, 6));
    expect_close(out, "prepared linear n=6 beside a shape too large to prepare");
    ck_assert_int_eq(nl_backend_cuda_plans(gpu) - before, 1);
    pair_free(out);
    pair_free(px);
    weight_free(pw);
    free(x);
    free(w);
}
END_TEST

/* ---- embedding, rmsnorm, silu, gather ------------------------------------------ */

START_TEST(test_embedding)
{
    int rows = 500, cols = 256, n = 40, start = 1000;
    float *t = rand_bf16((size_t)rows * cols, 1.0f);
    wpair w = weight_from(t, rows, cols);
    int32_t ids[40];
    for (int i = 0; i < n; i++) ids[i] = i % 5 == 0 ? (i % 10 == 0 ? 3 : 1600) : start + (int)(rnext() % rows);
    ids[1] = start;
    ids[2] = start + rows - 1;
    raw pid = raw_from(ids, sizeof ids);
    pair out = pair_new((size_t)n * cols);
    OK_BOTH(cpu->ops->embedding(cpu, out.c, w.c, pid.c, n, start),
            gpu->ops->embedding(gpu, out.g, w.g, pid.g, n, start));
    float *hc = malloc((size_t)n * cols * 4), *hg = malloc((size_t)n * cols * 4);
    pair_get(out, hc, hg);
    for (size_t i = 0; i < (size_t)n * cols; i++) ck_assert_float_eq(hg[i], hc[i]); /* exact copy */
    for (int c = 0; c < cols; c++) ck_assert_float_eq(hg[c], 0.0f); /* id 3: other shard */
    printf("  embedding vocab-parallel [%d x %d], %d ids              exact\n", rows, cols, n);
    free(hc);
    free(hg);
    pair_free(out);
    raw_free(pid);
    weight_free(w);
    free(t);
}
END_TEST

static void check_rmsnorm(int n, int dim, bool residual, bool in_place)
{
    float *x = rand_bf16((size_t)n * dim, 2.0f), *r = rand_bf16((size_t)n * dim, 2.0f);
    float *w = rand_bf16(dim, 1.0f);
    pair px = pair_from(x, (size_t)n * dim), pr = pair_from(r, (size_t)n * dim);
    wpair pw = weight_from(w, 1, dim);
    pair out = in_place ? px : pair_new((size_t)n * dim);
    OK_BOTH(cpu->ops->rmsnorm(cpu, out.c, px.c, residual ? pr.c : NULL, pw.c, n, dim, 1e-6f),
            gpu->ops->rmsnorm(gpu, out.g, px.g, residual ? pr.g : NULL, pw.g, n, dim, 1e-6f));
    char what[96];
    snprintf(what, sizeof what, "rmsnorm n=%d dim=%d%s%s", n, dim, residual ? " +residual" : "",
             in_place ? " in place" : "");
    expect_close(out, what);
    if (residual) {
        snprintf(what, sizeof what, "rmsnorm n=%d dim=%d residual sum", n, dim);
        expect_close(pr, what);
    }
    if (!in_place) pair_free(out);
    pair_free(px);
    pair_free(pr);
    weight_free(pw);
    free(x);
    free(r);
    free(w);
}

START_TEST(test_rmsnorm)
{
    check_rmsnorm(3, 1024, false, false);
    check_rmsnorm(17, 896, true, false);
    check_rmsnorm(5, 4096, true, true);
    check_rmsnorm(2, 8192, false, true);
    check_rmsnorm(4, 100, true, false); /* not a multiple of 8: scalar path */
}
END_TEST

/* norm_linear: one token with a complete residual takes the GEMV that
 * normalises it itself (gemv.cu), with a pending add or more tokens the
 * RMSNorm kernel and then the GEMV or cuBLASLt (and silu_mul); the residual
 * it leaves must match too.  Gate values of a few units reach SiLU's bend. */
static void check_norm_linear(int n, int rows, int cols, bool with_x, bool silu, bool bias)
{
    float *x = rand_bf16((size_t)n * cols, 1.0f), *res = rand_bf16((size_t)n * cols, 1.0f);
    float *nw = rand_bf16(cols, 1.0f), *w = rand_bf16((size_t)rows * cols, 0.2f);
    float *b = rand_bf16(rows, 1.0f);
    int out_cols = silu ? rows / 2 : rows;
    pair px = pair_from(x, (size_t)n * cols), pr = pair_from(res, (size_t)n * cols);
    pair out = pair_new((size_t)n * out_cols), xn = pair_new((size_t)n * cols);
    pair work = pair_new((size_t)n * rows);
    wpair pn = weight_from(nw, 1, cols), pw = weight_from(w, rows, cols), pb = weight_from(b, 1, rows);
    OK_BOTH(cpu->ops->norm_linear(cpu, out.c, xn.c, work.c, with_x ? px.c : NULL, pr.c, pn.c, 1e-6f,
                                  pw.c, bias ? pb.c : NULL, n, silu),
            gpu->ops->norm_linear(gpu, out.g, xn.g, work.g, with_x ? px.g : NULL, pr.g, pn.g, 1e-6f,
                                  pw.g, bias ? pb.g : NULL, n, silu));
    char what[112];
    snprintf(what, sizeof what, "norm_linear n=%d [%d x %d]%s%s%s", n, rows, cols,
             with_x ? " +x" : "", silu ? " silu" : "", bias ? " +bias" : "");
    expect_close(out, what);
    expect_close(pr, "  its residual");
    pair_free(px);
    pair_free(pr);
    pair_free(out);
    pair_free(xn);
    pair_free(work);
    weight_free(pn);
    weight_free(pw);
    weight_free(pb);
    free(x);
    free(res);
    free(nw);
    free(w);
    free(b);
}

/* linear_add: one token adds in the GEMV's epilogue, more through cuBLASLt
 * and the add kernel. */
static void check_linear_add(int n, int rows, int cols, bool bias)
{
    float *x = rand_bf16((size_t)n * cols, 1.0f), *res = rand_bf16((size_t)n * rows, 1.0f);
    float *w = rand_bf16((size_t)rows * cols, 0.05f), *b = rand_bf16(rows, 0.5f);
    pair px = pair_from(x, (size_t)n * cols), pr = pair_from(res, (size_t)n * rows);
    pair work = pair_new((size_t)n * rows);
    wpair pw = weight_from(w, rows, cols), pb = weight_from(b, 1, rows);
    OK_BOTH(cpu->ops->linear_add(cpu, pr.c, work.c, px.c, pw.c, bias ? pb.c : NULL, n),
            gpu->ops->linear_add(gpu, pr.g, work.g, px.g, pw.g, bias ? pb.g : NULL, n));
    char what[96];
    snprintf(what, sizeof what, "linear_add n=%d [%d x %d]%s", n, rows, cols, bias ? " +bias" : "");
    expect_close(pr, what);
    pair_free(px);
    pair_free(pr);
    pair_free(work);
    weight_free(pw);
    weight_free(pb);
    free(x);
    free(res);
    free(w);
    free(b);
}

START_TEST(test_norm_linear_add)
{
    for (int pass = 0; pass < 4; pass++) {
        bool with_x = pass & 1, silu = pass & 2;
        check_norm_linear(1, 6144, 1024, with_x, silu, false);  /* 0.6B gate_up / qkv-like */
        check_norm_linear(1, 2 * 1000, 8 * 37, with_x, silu, true); /* ragged rows */
        check_norm_linear(1, 2 * 512, 4096, with_x, silu, false); /* long rows: 8 in flight */
        check_norm_linear(7, 2 * 300, 896, with_x, silu, true);
        check_norm_linear(1, 2 * 1024, 8 * 273, with_x, silu, true); /* split, ragged round */
    }
    /* the widest row the GEMV normalises itself, and one past it (the
     * RMSNorm kernel, then the GEMV) */
    check_norm_linear(1, 2 * 64, 16384, false, true, false);
    check_norm_linear(1, 2 * 64, 16384 + 8, false, true, false);
    check_linear_add(1, 1024, 2048, false);
    check_linear_add(1, 1000, 8 * 300 + 8, true);
    check_linear_add(1, 4096, 12288, false);
    check_linear_add(5, 1024, 3072, true);
}
END_TEST

START_TEST(test_gather_rows)
{
    int n = 30, dim = 512, m = 6;
    float *x = rand_bf16((size_t)n * dim, 1.0f);
    int32_t rows[6] = {29, 0, 7, 7, 15, 3};
    pair px = pair_from(x, (size_t)n * dim), out = pair_new((size_t)m * dim);
    raw pr = raw_from(rows, sizeof rows);
    OK_BOTH(cpu->ops->gather_rows(cpu, out.c, px.c, pr.c, m, dim),
            gpu->ops->gather_rows(gpu, out.g, px.g, pr.g, m, dim));
    expect_close(out, "gather_rows m=6 dim=512");
    pair_free(px);
    pair_free(out);
    raw_free(pr);
    free(x);
}
END_TEST

/* ---- qk_norm_rope_store -------------------------------------------------------------- */

/* The slot of token i in a cache of `slots_total` slots: scattered, every
 * ninth token padding (-1). */
static int32_t test_slot(int i, int slots_total)
{
    return i % 9 == 4 ? -1 : (int32_t)((i * 37 + 5) % slots_total);
}

static void check_rope(int n, int hq, int hk, int hd, bool norm, float theta)
{
    /* the table as the loader makes it; the llama3 rescaling divides some
     * frequencies, which the kernels cannot tell from any other table */
    float *inv = (float *)malloc(sizeof(float) * (size_t)(hd / 2));
    for (int i = 0; i < hd / 2; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hd);
    raw pinv = raw_from(inv, sizeof(float) * (size_t)(hd / 2));
    size_t width = (size_t)(hq + 2 * hk) * hd;
    float *q = rand_bf16(n * width, 3.0f), *qn = rand_bf16(hd, 1.5f), *kn = rand_bf16(hd, 1.5f);
    int32_t *pos = malloc(n * sizeof *pos);
    for (int i = 0; i < n; i++) pos[i] = i < 4 ? i : (int)(rnext() % 32768);
    pair pq = pair_from(q, n * width);
    wpair wq = weight_from(qn, 1, hd), wk = weight_from(kn, 1, hd);
    raw pp = raw_from(pos, n * sizeof *pos);
    int bs = 16, slots_total = 4 * bs;
    size_t cache = (size_t)slots_total * hk * hd;
    float *zero = calloc(cache, 4);
    int32_t *slots = malloc(n * sizeof *slots);
    for (int i = 0; i < n; i++) slots[i] = test_slot(i, slots_total);
    pair kc = pair_from(zero, cache), vc = pair_from(zero, cache);
    raw ps = raw_from(slots, n * sizeof *slots);
    OK_BOTH(cpu->ops->qk_norm_rope_store(cpu, pq.c, pp.c, norm ? wq.c : NULL, norm ? wk.c : NULL,
                                         (const float *)pinv.c, kc.c, vc.c, ps.c, n, hq, hk, hd,
                                         1e-6f, bs, NL_DTYPE_F32),
            gpu->ops->qk_norm_rope_store(gpu, pq.g, pp.g, norm ? wq.g : NULL, norm ? wk.g : NULL,
                                         (const float *)pinv.g, kc.g, vc.g, ps.g, n, hq, hk, hd,
                                         1e-6f, bs, NL_DTYPE_BF16));
    char what[96];
    snprintf(what, sizeof what, "qk_norm_rope n=%d hq=%d hk=%d hd=%d%s theta=%g", n, hq, hk, hd,
             norm ? " +norm" : "", theta);
    expect_close(pq, what);
    snprintf(what, sizeof what, "  its k cache (slots with -1) hd=%d", hd);
    expect_close(kc, what);
    snprintf(what, sizeof what, "  its v cache hd=%d", hd);
    expect_close(vc, what);
    pair_free(kc);
    pair_free(vc);
    raw_free(ps);
    free(zero);
    free(slots);
    pair_free(pq);
    raw_free(pp);
    raw_free(pinv);
    free(inv);
    weight_free(wq);
    weight_free(wk);
    free(q);
    free(qn);
    free(kn);
    free(pos);
}

START_TEST(test_qk_norm_rope)
{
    check_rope(11, 16, 8, 128, true, 1000000.0f);
    check_rope(5, 32, 8, 128, false, 10000.0f);
    check_rope(7, 14, 2, 64, false, 1000000.0f);
    check_rope(3, 16, 1, 64, true, 10000.0f);
    /* the other head dims attention takes: the demo model's 32, 80, 96, 256 */
    check_rope(9, 4, 2, 32, true, 1000000.0f);
    check_rope(5, 10, 2, 80, true, 10000.0f);
    check_rope(5, 12, 4, 96, false, 1000000.0f);
    check_rope(5, 8, 2, 256, true, 1000000.0f);
    /* steps of more than 4 tokens take the vector kernel where hd % 16 == 0
     * (elementwise.cu): above, both kinds; here a warp holding k heads and
     * v heads (hd 64: 8 heads a warp), and a head dim that is not a
     * multiple of 16 (the per-warp kernel) */
    check_rope(4, 8, 2, 256, true, 1000000.0f);
    check_rope(6, 12, 2, 64, true, 1000000.0f);
    check_rope(6, 6, 2, 40, true, 10000.0f);
}
END_TEST

/* ---- attention over a paged cache ------------------------------------------------- */

/* > 0: the batch carries host maxima this many blocks past every context and
 * block-table rows padded with block 0, as a CUDA-graph capture does. */
static int attn_extra_blocks;
/* >= 0: sequences from this index on are a graph's padding rows: context 1
 * and a block-table row of block 0 (a block other sequences use). */
static int attn_pad_from = -1;

/* true: the cache is e4m3 on both backends (the same bytes). */
static bool attn_kv_fp8;

/* Sequences with q_len new tokens each on top of prefix cached tokens; the
 * cache holds random K/V in randomly placed blocks. */
static void check_attention(int n_seqs, const int *q_lens, const int *prefix, int hq, int hk,
                            int hd, int bs, const char *label)
{
    int32_t cu[65], ctx[64];
    int max_q = 0, max_ctx = 0, max_blocks = 0, total_blocks = 0;
    bool all_decode = true;
    cu[0] = 0;
    for (int s = 0; s < n_seqs; s++) {
        cu[s + 1] = cu[s] + q_lens[s];
        ctx[s] = prefix[s] + q_lens[s];
        if (q_lens[s] > max_q) max_q = q_lens[s];
        if (ctx[s] > max_ctx) max_ctx = ctx[s];
        int nb = (ctx[s] + bs - 1) / bs;
        if (nb > max_blocks) max_blocks = nb;
        total_blocks += nb;
        if (q_lens[s] != 1) all_decode = false;
    }
    if (attn_extra_blocks > 0) {
        max_blocks += attn_extra_blocks;
        max_ctx = max_blocks * bs;
    }
    int num_blocks = total_blocks + 3;
    /* a random permutation of the blocks, handed out in order */
    int32_t *perm = malloc(num_blocks * sizeof *perm);
    for (int i = 0; i < num_blocks; i++) perm[i] = i;
    for (int i = num_blocks - 1; i > 0; i--) {
        int j = (int)(rnext() % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *table = calloc((size_t)n_seqs * max_blocks, sizeof *table);
    for (int s = 0, next = 0; s < n_seqs; s++)
        for (int b = 0; b < (ctx[s] + bs - 1) / bs; b++) table[s * max_blocks + b] = perm[next++];
    if (attn_pad_from >= 0)
        for (int s = attn_pad_from; s < n_seqs; s++) {
            ck_assert_int_eq(ctx[s], 1);
            table[s * max_blocks] = 0;
        }

    int n = cu[n_seqs];
    size_t cache = (size_t)num_blocks * bs * hk * hd, width = (size_t)(hq + 2 * hk) * hd;
    float *hk_ = rand_bf16(cache, 1.0f), *hv = rand_bf16(cache, 1.0f);
    float *hq_ = rand_bf16((size_t)n * width, 1.0f);
    pair kc = pair_from(hk_, cache), vc = pair_from(hv, cache), pq = pair_from(hq_, (size_t)n * width);
    pair out = pair_new((size_t)n * hq * hd);
    uint8_t *k8 = malloc(cache), *v8 = malloc(cache);
    for (size_t i = 0; i < cache; i++) {
        k8[i] = nl_f32_to_f8e4m3(hk_[i]);
        v8[i] = nl_f32_to_f8e4m3(hv[i]);
    }
    raw rk8 = raw_from(k8, cache), rv8 = raw_from(v8, cache);
    nl_dtype kv_c = attn_kv_fp8 ? NL_DTYPE_F8_E4M3 : NL_DTYPE_F32;
    nl_dtype kv_g = attn_kv_fp8 ? NL_DTYPE_F8_E4M3 : NL_DTYPE_BF16;
    void *kcc = attn_kv_fp8 ? rk8.c : kc.c, *vcc = attn_kv_fp8 ? rv8.c : vc.c;
    void *kcg = attn_kv_fp8 ? rk8.g : kc.g, *vcg = attn_kv_fp8 ? rv8.g : vc.g;
    raw rcu = raw_from(cu, (n_seqs + 1) * 4), rctx = raw_from(ctx, n_seqs * 4);
    raw rtab = raw_from(table, (size_t)n_seqs * max_blocks * 4);
    nl_attn_batch bc = {n_seqs, n, max_q, max_ctx, max_blocks, bs, all_decode, rcu.c, rctx.c, rtab.c, 0, NULL};
    nl_attn_batch bg = {n_seqs, n, max_q, max_ctx, max_blocks, bs, all_decode, rcu.g, rctx.g, rtab.g, 0, NULL};
    /* a mixed batch declares its leading decodes, as the worker does */
    while (bg.n_leading_decodes < n_seqs && q_lens[bg.n_leading_decodes] == 1) bg.n_leading_decodes++;
    bc.n_leading_decodes = bg.n_leading_decodes;
    /* ... and orders its decodes longest context first */
    int32_t order[64];
    int64_t keys[64];
    nl_attn_decode_order(ctx, all_decode ? n_seqs : bg.n_leading_decodes, n_seqs, keys, order);
    raw rorder = raw_from(order, n_seqs * 4);
    bg.decode_order = rorder.g;
    float scale = 1.0f / sqrtf((float)hd);
    OK_BOTH(cpu->ops->attention(cpu, out.c, pq.c, kcc, vcc, &bc, hq, hk, hd, scale, kv_c),
            gpu->ops->attention(gpu, out.g, pq.g, kcg, vcg, &bg, hq, hk, hd, scale, kv_g));
    char what[128];
    snprintf(what, sizeof what, "attention %s hq=%d hk=%d hd=%d bs=%d max_ctx=%d%s", label, hq, hk,
             hd, bs, max_ctx, attn_kv_fp8 ? " fp8 KV" : "");
    expect_close(out, what);
    raw_free(rk8);
    raw_free(rv8);
    free(k8);
    free(v8);
    pair_free(kc);
    pair_free(vc);
    pair_free(pq);
    pair_free(out);
    raw_free(rcu);
    raw_free(rctx);
    raw_free(rtab);
    raw_free(rorder);
    free(hk_);
    free(hv);
    free(hq_);
    free(perm);
    free(table);
}

START_TEST(test_attention_prefill)
{
    int q1[] = {1, 17, 64, 100, 33}, p1[] = {0, 5, 32, 0, 70};
    check_attention(5, q1, p1, 16, 8, 128, 16, "prefill ragged+prefix");
    check_attention(5, q1, p1, 32, 8, 128, 32, "prefill ragged+prefix");
    check_attention(5, q1, p1, 16, 1, 64, 16, "prefill MQA");
    check_attention(5, q1, p1, 14, 2, 64, 16, "prefill");
    int q2[] = {300}, p2[] = {0};
    check_attention(1, q2, p2, 16, 8, 128, 16, "prefill long");
    int q3[] = {3, 1, 64}, p3[] = {61, 0, 64}; /* mixed: a decode row among prefills */
    check_attention(3, q3, p3, 32, 8, 128, 16, "mixed");
    /* running decodes first, then prompt chunks: the decode rows take the
     * decode kernel (one with a context of several chunks), the rest the
     * prefill kernel */
    int q4[] = {1, 1, 1, 1, 40, 7}, p4[] = {700, 5, 3000, 64, 20, 0};
    check_attention(6, q4, p4, 16, 8, 128, 16, "mixed, leading decodes");
    check_attention(6, q4, p4, 32, 4, 64, 16, "mixed, leading decodes");
    /* every head_dim with a kernel of its own: the demo model's 4/2 x 32,
     * odd k-steps (80), and 256's narrower tiles */
    check_attention(5, q1, p1, 4, 2, 32, 16, "prefill");
    check_attention(5, q1, p1, 8, 8, 80, 16, "prefill");
    check_attention(5, q1, p1, 12, 4, 96, 16, "prefill");
    check_attention(5, q1, p1, 8, 2, 256, 16, "prefill");
    check_attention(1, q2, p2, 16, 4, 256, 16, "prefill long");
    check_attention(3, q3, p3, 4, 2, 32, 16, "mixed");
    check_attention(3, q3, p3, 10, 2, 80, 32, "mixed");
    /* no kernel of its own: the generic kernel */
    check_attention(5, q1, p1, 8, 2, 72, 16, "prefill generic");
    check_attention(3, q3, p3, 4, 4, 200, 16, "mixed generic");
}
END_TEST

/* The prefill kernel whose warps hold two m-tiles (128 rows a block,
 * head_dim up to 128: two heads' 64 tokens where the group is even, else
 * 128 tokens of one head once a prompt passes 64): rows at the edges of
 * its blocks, warps and m-tiles, a chunk on a long prefix, both caches. */
START_TEST(test_attention_prefill_wide)
{
    int q[] = {128, 129, 255, 65, 1}, pre[] = {0, 1000, 7, 64, 300};
    /* hq, hk, head_dim, block size: groups of 2 and 4 (two heads a block),
     * 7, 5 and 3 (one) */
    static const int shapes[][4] = {{16, 8, 128, 16}, {32, 8, 128, 32}, {14, 2, 64, 16},
                                    {4, 2, 32, 16},   {10, 2, 80, 16},  {12, 4, 96, 16}};
    for (int fp8 = 0; fp8 < 2; fp8++) {
        attn_kv_fp8 = fp8;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            check_attention(5, q, pre, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                            "prefill two m-tiles");
    }
    attn_kv_fp8 = false;
}
END_TEST

START_TEST(test_attention_decode)
{
    int q[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int p1[] = {0, 15, 16, 17, 63, 64, 65, 200};
    check_attention(8, q, p1, 16, 8, 128, 16, "decode block edges");
    check_attention(8, q, p1, 32, 8, 64, 16, "decode block edges");
    int p2[] = {8191, 4000, 1, 8000};
    check_attention(4, q, p2, 16, 8, 128, 16, "decode long split-K");
    check_attention(4, q, p2, 32, 8, 128, 32, "decode long split-K");
    check_attention(4, q, p2, 16, 1, 128, 16, "decode long MQA");
    check_attention(4, q, p2, 14, 2, 64, 16, "decode long");
    int p3[] = {2047};
    check_attention(1, q, p3, 32, 8, 128, 16, "decode single seq");
    attn_extra_blocks = 300;
    check_attention(8, q, p1, 16, 8, 128, 16, "decode graph maxima");
    check_attention(4, q, p2, 32, 8, 64, 16, "decode graph maxima");
    check_attention(4, q, p2, 16, 1, 128, 16, "decode graph maxima MQA");
    attn_extra_blocks = 0;

    /* every head_dim with a kernel of its own */
    check_attention(8, q, p1, 4, 2, 32, 16, "decode block edges");
    check_attention(8, q, p1, 10, 2, 80, 16, "decode block edges");
    check_attention(8, q, p1, 12, 4, 96, 16, "decode block edges");
    check_attention(8, q, p1, 8, 2, 256, 16, "decode block edges");
    check_attention(4, q, p2, 4, 2, 32, 16, "decode long split-K");
    check_attention(4, q, p2, 8, 8, 80, 16, "decode long split-K");
    check_attention(4, q, p2, 32, 8, 96, 32, "decode long split-K");
    check_attention(4, q, p2, 16, 2, 256, 16, "decode long split-K");
    /* no kernel of its own: the generic kernel */
    check_attention(8, q, p1, 8, 2, 72, 16, "decode generic");
    check_attention(4, q, p2, 4, 4, 200, 16, "decode long generic");
}
END_TEST

/* Batches of up to 4 sequences whose bound on contexts is at most 1,024
 * keys: the splits of a (sequence, kv head) run as one cluster of blocks
 * and merge in its shared memory.  Contexts from one key (every split but
 * the first empty) to the bound, at split edges (64 keys), exact bounds
 * and a graph's (1,024) with padding rows, every head layout. */
START_TEST(test_attention_decode_clusters)
{
    int q[4] = {1, 1, 1, 1};
    int one[] = {639}, edges[] = {0, 63, 64, 1000}, two[] = {1023, 127};
    check_attention(1, q, one, 16, 8, 128, 16, "decode cluster, one seq");
    check_attention(4, q, edges, 16, 8, 128, 16, "decode cluster, split edges");
    check_attention(2, q, two, 32, 8, 128, 16, "decode cluster, at the bound");
    check_attention(4, q, edges, 32, 8, 128, 16, "decode cluster, groups of 4");
    check_attention(4, q, edges, 16, 1, 128, 16, "decode cluster, MQA slices");
    check_attention(4, q, edges, 14, 2, 64, 16, "decode cluster, partial slice");
    check_attention(4, q, edges, 4, 2, 32, 16, "decode cluster");
    check_attention(4, q, edges, 10, 2, 80, 16, "decode cluster");
    check_attention(4, q, edges, 12, 4, 96, 16, "decode cluster");
    check_attention(4, q, edges, 8, 2, 256, 16, "decode cluster");
    attn_kv_fp8 = true;
    check_attention(4, q, edges, 16, 8, 128, 16, "decode cluster");
    check_attention(4, q, edges, 32, 8, 128, 16, "decode cluster, groups of 4");
    check_attention(4, q, edges, 64, 8, 128, 16, "decode cluster, groups of 8");
    attn_kv_fp8 = false;
    /* a graph's bound: 1,024 keys, padding rows after the first two */
    int pad[] = {700, 40, 0, 0};
    attn_extra_blocks = 1024 / 16 - 701 / 16 - 1;
    attn_pad_from = 2;
    check_attention(4, q, pad, 16, 8, 128, 16, "decode cluster, graph bound + padding");
    check_attention(4, q, pad, 32, 8, 128, 16, "decode cluster, graph bound + padding");
    attn_pad_from = -1;
    attn_extra_blocks = 0;
}
END_TEST

/* Small batches under a graph captured at max_model_len: the host says
 * 40960, the device contexts are ~1000 (several splits live) or 1 (padding
 * rows), and a longer one (3000) must still merge every live split; 40
 * sequences of 8 kv heads are enough blocks to run unsplit. */
START_TEST(test_attention_decode_graph_small)
{
    int q[64], p[64];
    for (int s = 0; s < 64; s++) {
        q[s] = 1;
        p[s] = 900 + (int)(rnext() % 200);
    }
    p[3] = 2999;
    p[5] = 255;
    p[6] = 256;
    attn_extra_blocks = 40960 / 16 - 3000 / 16;
    check_attention(16, q, p, 16, 8, 128, 16, "decode graph small batch");
    check_attention(8, q, p, 4, 2, 32, 16, "decode graph small batch");
    check_attention(8, q, p, 16, 2, 256, 16, "decode graph small batch");
    p[14] = p[15] = 0; /* the last two rows pad the batch */
    attn_pad_from = 14;
    check_attention(16, q, p, 16, 8, 128, 16, "decode graph small batch + padding");
    attn_pad_from = -1;
    for (int s = 0; s < 40; s++) p[s] = 200 + s;
    check_attention(40, q, p, 16, 8, 128, 16, "decode graph 40 seqs");
    /* contexts from a few keys to several chunks, more work items than one
     * wave of blocks: each block walks several items, some sequences are
     * written directly and others merged */
    for (int s = 0; s < 64; s++) p[s] = 1 + (int)(rnext() % 3000);
    check_attention(64, q, p, 16, 8, 128, 16, "decode graph 64 mixed lengths");
    attn_kv_fp8 = true;
    check_attention(64, q, p, 16, 8, 128, 16, "decode graph 64 mixed lengths");
    check_attention(64, q, p, 32, 4, 128, 16, "decode graph 64 mixed lengths");
    attn_kv_fp8 = false;
    attn_extra_blocks = 0;
    check_attention(64, q, p, 16, 8, 128, 16, "decode 64 mixed lengths");
}
END_TEST

/* Batches past the tiny ones on the tensor-core kernel (head_dim 128,
 * block sizes that are powers of two from 16): every group width a block
 * serves (1, 2, 4, 8 and slices of 8), both caches, contexts ending inside
 * a tile and at its edges, splits (few sequences of long contexts), graph
 * maxima with padding rows; and beside it the shapes it leaves to the
 * CUDA-core kernel (head_dim 64, block size 24). */
START_TEST(test_attention_decode_mma)
{
    int q[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int edges[] = {0, 15, 16, 17, 63, 64, 65, 200};
    int longer[] = {8191, 4000, 1, 8000, 31, 1500, 2047, 33};
    for (int fp8 = 0; fp8 < 2; fp8++) {
        attn_kv_fp8 = fp8;
        check_attention(8, q, edges, 8, 8, 128, 16, "decode mma, groups of 1");
        check_attention(8, q, edges, 16, 8, 128, 16, "decode mma, groups of 2");
        check_attention(8, q, edges, 32, 8, 128, 32, "decode mma, groups of 4");
        check_attention(8, q, edges, 64, 8, 128, 16, "decode mma, groups of 8");
        check_attention(8, q, edges, 16, 1, 128, 16, "decode mma, MQA slices");
        check_attention(8, q, edges, 14, 2, 64, 16, "decode mma, partial slice");
        check_attention(8, q, edges, 16, 2, 64, 64, "decode mma");
        check_attention(8, q, longer, 16, 8, 128, 16, "decode mma, long split-K");
        check_attention(8, q, longer, 32, 4, 64, 16, "decode mma, long split-K");
        check_attention(8, q, edges, 16, 8, 128, 24, "decode, block size without mma");
        attn_extra_blocks = 300;
        attn_pad_from = 6;
        int pad[] = {900, 17, 5000, 64, 31, 128, 0, 0};
        check_attention(8, q, pad, 16, 8, 128, 16, "decode mma, graph maxima + padding");
        attn_pad_from = -1;
        attn_extra_blocks = 0;
    }
    attn_kv_fp8 = false;
}
END_TEST

/* An e4m3 cache: the CPU and the GPU read the same bytes, through the
 * decode, prefill and generic kernels. */
START_TEST(test_attention_fp8_kv)
{
    attn_kv_fp8 = true;
    int q1[] = {1, 17, 64, 100, 33}, p1[] = {0, 5, 32, 0, 70};
    check_attention(5, q1, p1, 16, 8, 128, 16, "prefill ragged+prefix");
    check_attention(5, q1, p1, 4, 2, 32, 16, "prefill");
    check_attention(5, q1, p1, 8, 8, 80, 16, "prefill");
    check_attention(5, q1, p1, 8, 2, 256, 16, "prefill");
    check_attention(5, q1, p1, 8, 2, 72, 16, "prefill generic");
    int q3[] = {3, 1, 64}, p3[] = {61, 0, 64};
    check_attention(3, q3, p3, 32, 8, 128, 16, "mixed");
    int q4[] = {1, 1, 1, 1, 40, 7}, p4[] = {700, 5, 3000, 64, 20, 0};
    check_attention(6, q4, p4, 16, 8, 128, 16, "mixed, leading decodes");
    int q[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    int pd[] = {0, 15, 16, 17, 63, 64, 65, 200};
    check_attention(8, q, pd, 16, 8, 128, 16, "decode block edges");
    check_attention(8, q, pd, 10, 2, 80, 16, "decode block edges");
    check_attention(8, q, pd, 32, 8, 64, 16, "decode block edges");
    check_attention(8, q, pd, 8, 2, 72, 16, "decode generic");
    int p2[] = {8191, 4000, 1, 8000};
    check_attention(4, q, p2, 16, 8, 128, 16, "decode long split-K");
    check_attention(4, q, p2, 16, 1, 128, 16, "decode long MQA");
    check_attention(4, q, p2, 16, 2, 256, 16, "decode long split-K");
    attn_extra_blocks = 300;
    check_attention(8, q, pd, 16, 8, 128, 16, "decode graph maxima");
    attn_extra_blocks = 0;
    attn_kv_fp8 = false;
}
END_TEST

/* The e4m3 store writes the bytes the host's rounding (nl_f32_to_f8e4m3)
 * gives for the k and v the op leaves in qkv: with a zero rotation and no
 * norms those are the inputs, past +-448 (saturation) and subnormal too;
 * with a rotation, the rotated k. */
START_TEST(test_store_kv_fp8)
{
    static const int shapes[][3] = {{16, 8, 128}, {4, 2, 32}, {10, 2, 80}, {6, 2, 40}};
    for (size_t c = 0; c < 2 * sizeof shapes / sizeof shapes[0]; c++) {
        int hq = shapes[c / 2][0], hk = shapes[c / 2][1], hd = shapes[c / 2][2];
        bool rotate = c % 2;
        int n = 37, bs = 16, blocks = 8, slots_total = blocks * bs;
        size_t cache = (size_t)slots_total * hk * hd, width = (size_t)(hq + 2 * hk) * hd;
        float *q = rand_bf16((size_t)n * width, rotate ? 3.0f : 600.0f);
        for (size_t i = 0; i < (size_t)n * width; i += 3) /* subnormals, still bf16 values */
            q[i] = nl_bf16_to_f32(nl_f32_to_bf16(q[i] * 1e-3f));
        int32_t slots[37], pos[37];
        for (int i = 0; i < n; i++) slots[i] = test_slot(i, slots_total), pos[i] = 3 * i + 1;
        float *inv = calloc((size_t)hd / 2, sizeof(float));
        for (int i = 0; rotate && i < hd / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / hd);
        pair pq = pair_from(q, (size_t)n * width);
        raw kc = raw_from(NULL, cache), vc = raw_from(NULL, cache), ps = raw_from(slots, sizeof slots);
        raw pp = raw_from(pos, sizeof pos), pinv = raw_from(inv, sizeof(float) * (size_t)(hd / 2));
        ck_assert_int_eq(gpu->ops->memset_zero(gpu, kc.g, cache), NL_OK);
        ck_assert_int_eq(gpu->ops->memset_zero(gpu, vc.g, cache), NL_OK);
        ck_assert_msg(gpu->ops->qk_norm_rope_store(gpu, pq.g, pp.g, NULL, NULL, (const float *)pinv.g,
                                                   kc.g, vc.g, ps.g, n, hq, hk, hd, 1e-6f, bs,
                                                   NL_DTYPE_F8_E4M3) == NL_OK,
                      "%s", nl_last_error());
        float *rq = malloc((size_t)n * width * 4);
        uint8_t *want = calloc(cache, 1), *got = malloc(cache);
        pair_get(pq, rq, rq); /* the GPU's qkv after the op (the cpu copy is unused) */
        for (int which = 0; which < 2; which++) {
            memset(want, 0, cache);
            for (int t = 0; t < n; t++)
                for (int e = 0; slots[t] >= 0 && e < hk * hd; e++)
                    want[(size_t)slots[t] * hk * hd + e] =
                        nl_f32_to_f8e4m3(rq[t * width + (size_t)(hq + which * hk) * hd + e]);
            ck_assert_int_eq(gpu->ops->download(gpu, got, which ? vc.g : kc.g, cache), NL_OK);
            size_t diff = 0;
            for (size_t i = 0; i < cache; i++) diff += want[i] != got[i];
            printf("  store fp8 %s cache hd=%d%s: %zu of %zu bytes differ\n", which ? "v" : "k", hd,
                   rotate ? " rotated" : "", diff, cache);
            ck_assert_msg(diff == 0, "store fp8 hd=%d: %zu bytes differ", hd, diff);
        }
        free(rq);
        free(want);
        free(got);
        free(inv);
        pair_free(pq);
        raw_free(kc);
        raw_free(vc);
        raw_free(ps);
        raw_free(pp);
        raw_free(pinv);
        free(q);
    }
}
END_TEST

/* Head dims are refused by value when no kernel can take them. */
START_TEST(test_attention_head_dim_refused)
{
    static const int bad[] = {36, 264, 4};
    int32_t cu[2] = {0, 1}, ctx[1] = {1}, tab[1] = {0};
    raw rcu = raw_from(cu, sizeof cu), rctx = raw_from(ctx, sizeof ctx);
    raw rtab = raw_from(tab, sizeof tab);
    nl_attn_batch b = {1, 1, 1, 1, 1, 16, true, rcu.g, rctx.g, rtab.g, 0, NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nl_status st = gpu->ops->attention(gpu, NULL, NULL, NULL, NULL, &b, 2, 1, bad[i], 0.1f, NL_DTYPE_BF16);
        ck_assert_int_eq(st, NL_ERR_UNSUPPORTED);
        char want[16];
        snprintf(want, sizeof want, "head_dim %d", bad[i]);
        ck_assert_msg(strstr(nl_last_error(), want), "message '%s' lacks '%s'", nl_last_error(),
                      want);
    }
    raw_free(rcu);
    raw_free(rctx);
    raw_free(rtab);
}
END_TEST

/* ---- CUDA graphs ------------------------------------------------------------------ */

START_TEST(test_graph_replay)
{
    int n = 8, dim = 512, rows = 768;
    float *x = rand_bf16((size_t)n * dim, 1.0f), *w = rand_bf16((size_t)rows * dim, 0.05f);
    float *nw = rand_bf16(dim, 1.0f);
    wpair pw = weight_from(w, rows, dim), pn = weight_from(nw, 1, dim);
    pair px = pair_from(x, (size_t)n * dim), h = pair_new((size_t)n * dim);
    pair eager = pair_new((size_t)n * rows), graphed = pair_new((size_t)n * rows);
    ck_assert_int_eq(gpu->ops->rmsnorm(gpu, h.g, px.g, NULL, pn.g, n, dim, 1e-6f), NL_OK);
    ck_assert_int_eq(gpu->ops->linear(gpu, eager.g, h.g, pw.g, NULL, n), NL_OK);
    sync_both();
    nl_graph *g;
    ck_assert_msg(gpu->ops->capture_begin(gpu) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(gpu->ops->rmsnorm(gpu, h.g, px.g, NULL, pn.g, n, dim, 1e-6f), NL_OK);
    ck_assert_int_eq(gpu->ops->linear(gpu, graphed.g, h.g, pw.g, NULL, n), NL_OK);
    ck_assert_msg(gpu->ops->capture_end(gpu, &g) == NL_OK, "%s", nl_last_error());
    uint16_t *a = malloc((size_t)n * rows * 2), *b = malloc((size_t)n * rows * 2);
    uint16_t *zeros = calloc((size_t)n * dim, 2);
    gpu->ops->download(gpu, a, eager.g, (size_t)n * rows * 2);
    /* The linear may start while the norm runs (dependent launch): with
     * the norm's output cleared before each replay, a linear that read it
     * before the norm had written it would differ. */
    for (int i = 0; i < 3; i++) {
        gpu->ops->upload(gpu, h.g, zeros, (size_t)n * dim * 2);
        ck_assert_int_eq(gpu->ops->graph_launch(gpu, g), NL_OK);
        gpu->ops->download(gpu, b, graphed.g, (size_t)n * rows * 2);
        ck_assert_int_eq(memcmp(a, b, (size_t)n * rows * 2), 0);
    }
    printf("  graph replay of rmsnorm + linear                           identical\n");
    free(zeros);
    gpu->ops->graph_destroy(gpu, g);
    free(a);
    free(b);
    pair_free(px);
    pair_free(h);
    pair_free(eager);
    pair_free(graphed);
    weight_free(pw);
    weight_free(pn);
    free(x);
    free(w);
    free(nw);
}
END_TEST

/* ---- sampler ------------------------------------------------------------------------- */

static int cmp_desc_logit;
static const float *cmp_logits;
static int by_rank(const void *a, const void *b)
{
    int ia = *(const int *)a, ib = *(const int *)b;
    float la = cmp_logits[ia], lb = cmp_logits[ib];
    if (la != lb) return la > lb ? -1 : 1;
    return ia - ib;
}

/* The smallest distance between a quantity the procedure compares and its
 * threshold (masses relative to the kept mass; race scores, which are logs,
 * relative to their size); tiny means the CPU's choice could flip with
 * summation order or a last-place rounding of a logarithm. */
static double tie_margin(const float *l, int vocab, const nl_sample_row *sr, int *order)
{
    (void)cmp_desc_logit;
    for (int i = 0; i < vocab; i++) order[i] = i;
    cmp_logits = l;
    qsort(order, vocab, sizeof *order, by_rank);
    double inv_t = 1.0 / sr->temperature, lmax = l[order[0]], margin = 1.0;
    int kept = sr->top_k > 0 && sr->top_k < vocab ? sr->top_k : vocab;
    double mass = 0.0;
    for (int i = 0; i < kept; i++) mass += exp((l[order[i]] - lmax) * inv_t);
    if (sr->top_p < 1.0f) {
        double cum = 0.0, target = sr->top_p * mass;
        int i = 0;
        while (i < kept) {
            cum += exp((l[order[i]] - lmax) * inv_t);
            i++;
            margin = fmin(margin, fabs(cum - target) / mass);
            if (cum >= target) break;
        }
        kept = i;
    }
    if (sr->min_p > 0.0f) {
        int i = 1;
        while (i < kept && exp((l[order[i]] - lmax) * inv_t) >= sr->min_p) i++;
        if (i < kept) margin = fmin(margin, fabs(exp((l[order[i]] - lmax) * inv_t) - sr->min_p));
        kept = i;
    }
    uint64_t key = nl_rng_row_key(sr->seed, sr->offset);
    double best = -INFINITY, second = -INFINITY;
    for (int i = 0; i < kept; i++) {
        double v = nl_rng_race_uniform(nl_rng_race_bits(key, (uint32_t)order[i]));
        double score = l[order[i]] * inv_t - log(-log1p(-v));
        if (score > best) {
            second = best;
            best = score;
        } else if (score > second) {
            second = score;
        }
    }
    if (kept > 1) margin = fmin(margin, (best - second) / (1.0 + fabs(best)));
    return margin;
}

/* One sampler call on both backends, and what each returned: ids, their
 * logprobs, top-N ids and logprobs (c: the CPU's, g: the GPU's), all in
 * one allocation that starts at ic. */
typedef struct both_samples {
    int32_t *ic, *ig, *tic, *tig;
    float *lc, *lg, *tlc, *tlg;
} both_samples;

static both_samples sample_both(const float *logits, int m, int vocab, const nl_sample_row *rows)
{
    const size_t n = (size_t)m * 4, n_top = (size_t)m * NL_MAX_LOGPROBS * 4;
    raw pl = raw_from(logits, (size_t)m * vocab * 4), pr = raw_from(rows, m * sizeof *rows);
    raw ids = raw_from(NULL, n), lps = raw_from(NULL, n);
    raw tids = raw_from(NULL, n_top), tlps = raw_from(NULL, n_top);
    OK_BOTH(cpu->ops->sample(cpu, pl.c, m, vocab, pr.c, ids.c, lps.c, tids.c, tlps.c),
            gpu->ops->sample(gpu, pl.g, m, vocab, pr.g, ids.g, lps.g, tids.g, tlps.g));
    /* ids and logprobs (n bytes each), then the four top-N arrays (n_top each) */
    char *block = malloc(4 * n + 4 * n_top), *top = block + 4 * n;
    both_samples s = {
        .ic = (int32_t *)block, .ig = (int32_t *)(block + n),
        .lc = (float *)(block + 2 * n), .lg = (float *)(block + 3 * n),
        .tic = (int32_t *)top, .tig = (int32_t *)(top + n_top),
        .tlc = (float *)(top + 2 * n_top), .tlg = (float *)(top + 3 * n_top),
    };
    raw_get(ids, s.ic, s.ig, n);
    raw_get(lps, s.lc, s.lg, n);
    raw_get(tids, s.tic, s.tig, n_top);
    raw_get(tlps, s.tlc, s.tlg, n_top);
    raw_free(pl);
    raw_free(pr);
    raw_free(ids);
    raw_free(lps);
    raw_free(tids);
    raw_free(tlps);
    return s;
}

static void both_samples_free(both_samples *s)
{
    free(s->ic);
}

static void check_sample(int m, int vocab, float spread, bool ties)
{
    float *logits = malloc((size_t)m * vocab * 4);
    for (size_t i = 0; i < (size_t)m * vocab; i++) {
        logits[i] = gauss() * spread;
        if (ties) logits[i] = roundf(logits[i] * 2.0f) / 2.0f;
    }
    nl_sample_row *rows = calloc(m, sizeof *rows);
    /* greedy, uncut races (with and without logprobs, top_k past the
     * vocabulary) and every cut */
    enum { PATTERNS = 10 };
    static const float temps[PATTERNS] = {0.0f, 1.0f, 0.7f, 1.5f, 0.0f, 1.0f, 0.3f, 1.0f, 0.6f, 2.0f};
    static const int topk[PATTERNS] = {0, 0, 50, 0, 0, 1, 20, 0, 0, 1 << 30};
    static const float topp[PATTERNS] = {1.0f, 1.0f, 0.9f, 0.5f, 1.0f, 1.0f, 1.0f, 0.95f, 1.0f, 1.0f};
    static const float minp[PATTERNS] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.05f, 0.1f, 0.0f, 0.0f};
    static const int nlp[PATTERNS] = {0, 5, 20, 1, 20, 0, 3, 0, 0, 0};
    for (int r = 0; r < m; r++) {
        rows[r].temperature = temps[r % PATTERNS];
        rows[r].top_k = topk[r % PATTERNS];
        rows[r].top_p = topp[r % PATTERNS];
        rows[r].min_p = minp[r % PATTERNS];
        rows[r].n_logprobs = nlp[r % PATTERNS];
        rows[r].seed = 1000 + r / 8;
        rows[r].offset = r;
    }
    both_samples res = sample_both(logits, m, vocab, rows);
    const int32_t *ic = res.ic, *ig = res.ig, *tic = res.tic, *tig = res.tig;
    const float *lc = res.lc, *lg = res.lg, *tlc = res.tlc, *tlg = res.tlg;
    int *order = malloc(vocab * sizeof *order);
    int greedy = 0, sampled = 0, near = 0;
    double max_lp = 0.0;
    for (int r = 0; r < m; r++) {
        const float *l = logits + (size_t)r * vocab;
        if (rows[r].temperature == 0.0f) {
            ck_assert_msg(ig[r] == ic[r], "greedy row %d: cuda %d, cpu %d", r, ig[r], ic[r]);
            greedy++;
        } else if (ig[r] != ic[r]) {
            double margin = tie_margin(l, vocab, &rows[r], order);
            ck_assert_msg(margin < 1e-4, "row %d (T=%g k=%d p=%g minp=%g): cuda %d, cpu %d, margin %g",
                          r, rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].min_p,
                          ig[r], ic[r], margin);
            near++;
        } else {
            sampled++;
        }
        ck_assert_int_ge(ig[r], 0);
        ck_assert_int_lt(ig[r], vocab);
        ck_assert_msg(fabsf(lg[r] - (l[ig[r]] - (l[ic[r]] - lc[r]))) < 1e-3,
                      "row %d chosen logprob %g", r, lg[r]);
        for (int j = 0; j < NL_MAX_LOGPROBS; j++) {
            size_t k = (size_t)r * NL_MAX_LOGPROBS + j;
            if (j >= rows[r].n_logprobs) { /* unused entries read as none */
                ck_assert_int_eq(tig[k], -1);
                continue;
            }
            ck_assert_msg(tig[k] == tic[k] || l[tig[k]] == l[tic[k]],
                          "row %d top %d: cuda %d, cpu %d", r, j, tig[k], tic[k]);
            double d = fabs((double)tlg[k] - tlc[k]);
            if (d > max_lp) max_lp = d;
            ck_assert_msg(d < 1e-3, "row %d top %d logprob %g vs %g", r, j, tlg[k], tlc[k]);
        }
    }
    printf("  sample m=%d vocab=%d%s: %d greedy equal, %d sampled equal, %d near-ties, "
           "max |dlogprob| %.1e\n", m, vocab, ties ? " (tied logits)" : "", greedy, sampled, near,
           max_lp);
    ck_assert_int_le(near, m / 20 + 1);
    free(order);
    both_samples_free(&res);
    free(logits);
    free(rows);
}

START_TEST(test_sample)
{
    check_sample(1, 151936, 3.0f, false);  /* one sequence: the most blocks a row */
    check_sample(64, 151936, 3.0f, false);
    check_sample(256, 151936, 0.5f, false); /* the throughput benchmark's batch */
    check_sample(3, 1001, 1.0f, false);     /* odd vocabulary: unaligned rows */
    check_sample(48, 1000, 1.0f, false);
    check_sample(32, 5000, 2.0f, true);
    check_sample(16, 32000, 0.05f, false); /* nearly flat: long kept prefixes */
    /* Which way a row is cut depends on its head: peaked rows sort a short
     * head in shared memory, flat rows' cuts (and the top_p rows of spread
     * 3 above) need the radix search.  Both must pick the CPU's ids. */
    check_sample(40, 151936, 8.0f, false);
    check_sample(20, 151936, 0.01f, false);
}
END_TEST

/* -0 and +0 are one logit: rows of both, alternating, are ordered by id
 * alone, through the sorted head (vocab 3,000) and the radix search (a flat
 * row of 6,000 is a head too large), in the logprobs and in every cut. */
START_TEST(test_sample_signed_zeros)
{
    enum { M = 4 };
    static const int vocabs[2] = {3000, 6000};
    for (int v = 0; v < 2; v++) {
        const int vocab = vocabs[v];
        float *logits = malloc(sizeof(float) * M * vocab);
        for (int i = 0; i < M * vocab; i++) logits[i] = i % 2 ? 0.0f : -0.0f;
        nl_sample_row rows[M] = {
            {.temperature = 0.0f, .top_p = 1.0f, .n_logprobs = 5},
            {.temperature = 1.0f, .top_p = 1.0f, .top_k = 10, .seed = 3, .n_logprobs = 5},
            {.temperature = 1.0f, .top_p = 0.5f, .seed = 4},
            {.temperature = 1.0f, .top_p = 0.25f, .top_k = 100, .seed = 5},
        };
        both_samples res = sample_both(logits, M, vocab, rows);
        const int32_t *ic = res.ic, *ig = res.ig, *tic = res.tic, *tig = res.tig;
        static const int kept[M] = {1, 10, 0, 25}; /* 0: half the row */
        for (int r = 0; r < M; r++) {
            int bound = kept[r] ? kept[r] : vocab / 2;
            ck_assert_msg(ig[r] == ic[r], "vocab %d row %d: cuda %d, cpu %d", vocab, r, ig[r], ic[r]);
            ck_assert_msg(ig[r] < bound, "vocab %d row %d: %d is not among the first %d", vocab, r,
                          ig[r], bound);
            for (int j = 0; j < rows[r].n_logprobs; j++) {
                ck_assert_int_eq(tic[r * NL_MAX_LOGPROBS + j], j);
                ck_assert_int_eq(tig[r * NL_MAX_LOGPROBS + j], j);
            }
        }
        both_samples_free(&res);
        free(logits);
    }
}
END_TEST

/* ---- NCCL ------------------------------------------------------------------------------ */

typedef struct comm_job {
    int rank, size;
    unsigned char id[NL_NCCL_UNIQUE_ID_BYTES];
    nl_status status;
    char error[256];
    double err;
} comm_job;

/* One rank: all-reduce of rank-dependent values in fp32 and bf16, then a
 * gather to rank 0, each checked against the closed form. */
static void *comm_rank(void *arg)
{
    comm_job *j = arg;
    nl_backend *be = NULL;
    nl_comm *c = NULL;
    const size_t count = 4096;
    float *h = malloc(count * 4), *back = malloc(count * 4 * j->size);
    uint16_t *hb = malloc(count * 2);
    void *buf = NULL, *bbuf = NULL, *gath = NULL;
    j->status = nl_backend_cuda_create(j->rank, &be);
    if (j->status == NL_OK) j->status = nl_comm_nccl_create(j->rank, j->size, j->id, be, &c);
    if (j->status == NL_OK) j->status = be->ops->alloc(be, count * 4, &buf);
    if (j->status == NL_OK) j->status = be->ops->alloc(be, count * 2, &bbuf);
    if (j->status == NL_OK) j->status = be->ops->alloc(be, count * 4 * j->size, &gath);
    if (j->status != NL_OK) goto out;
    for (size_t i = 0; i < count; i++) {
        h[i] = (float)(i % 97) * 0.25f + (float)j->rank;
        hb[i] = nl_f32_to_bf16((float)(i % 13) + (float)j->rank);
    }
    be->ops->upload(be, buf, h, count * 4);
    be->ops->upload(be, bbuf, hb, count * 2);
    j->status = c->ops->all_reduce_sum(c, buf, count, NL_DTYPE_F32);
    if (j->status == NL_OK) j->status = c->ops->all_reduce_sum(c, bbuf, count, NL_DTYPE_BF16);
    if (j->status == NL_OK) j->status = c->ops->all_gather(c, buf, gath, count, NL_DTYPE_F32);
    if (j->status == NL_OK) j->status = be->ops->download(be, h, buf, count * 4);
    if (j->status == NL_OK) j->status = be->ops->download(be, hb, bbuf, count * 2);
    if (j->status == NL_OK) j->status = be->ops->download(be, back, gath, count * 4 * j->size);
    if (j->status != NL_OK) goto out;
    double ranks = j->size * (j->size - 1) / 2.0;
    j->err = 0.0;
    for (size_t i = 0; i < count; i++) {
        double want = (double)(i % 97) * 0.25 * j->size + ranks;
        double wantb = (double)(i % 13) * j->size + ranks;
        j->err = fmax(j->err, fabs(h[i] - want));
        j->err = fmax(j->err, fabs(nl_bf16_to_f32(hb[i]) - wantb));
        for (int r = 0; r < j->size; r++) /* every rank's all-gather */
            j->err = fmax(j->err, fabs(back[(size_t)r * count + i] - want));
    }
out:
    if (j->status != NL_OK) snprintf(j->error, sizeof j->error, "%s", nl_last_error());
    if (be) {
        be->ops->free(be, buf);
        be->ops->free(be, bbuf);
        be->ops->free(be, gath);
    }
    nl_comm_destroy(c);
    nl_backend_destroy(be);
    free(h);
    free(back);
    free(hb);
    return NULL;
}

static void check_comm(int size)
{
    comm_job jobs[8];
    pthread_t th[8];
    unsigned char id[NL_NCCL_UNIQUE_ID_BYTES];
    ck_assert_msg(nl_comm_nccl_unique_id(id) == NL_OK, "%s", nl_last_error());
    for (int r = 0; r < size; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].rank = r;
        jobs[r].size = size;
        memcpy(jobs[r].id, id, sizeof id);
        pthread_create(&th[r], NULL, comm_rank, &jobs[r]);
    }
    for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < size; r++) {
        ck_assert_msg(jobs[r].status == NL_OK, "rank %d: %s", r, jobs[r].error);
        ck_assert_msg(jobs[r].err == 0.0, "rank %d: max error %g", r, jobs[r].err);
    }
    printf("  nccl all_reduce f32/bf16 + gather, %d rank(s)               exact\n", size);
}

START_TEST(test_nccl)
{
    check_comm(1);
    int n = nl_cuda_device_count();
    if (n > 1) check_comm(n > 8 ? 8 : n);
}
END_TEST

int main(void)
{
    if (nl_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    if (nl_backend_cpu_create(0, &cpu) != NL_OK || nl_backend_cuda_create(0, &gpu) != NL_OK) {
        fprintf(stderr, "backend creation failed: %s\n", nl_last_error());
        return 1;
    }
    Suite *s = suite_create("cuda_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_copy_pieces);
    tcase_add_test(tc, test_take_ids_and_fences);
    tcase_add_test(tc, test_linear);
    tcase_add_test(tc, test_linear_bucket_plans);
    tcase_add_test(tc, test_linear_warm);
    tcase_add_test(tc, test_linear_warm_scratch_short);
    tcase_add_test(tc, test_norm_linear_add);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_gather_rows);
    tcase_add_test(tc, test_qk_norm_rope);
    tcase_add_test(tc, test_store_kv_fp8);
    tcase_add_test(tc, test_attention_fp8_kv);
    tcase_add_test(tc, test_attention_prefill);
    tcase_add_test(tc, test_attention_prefill_wide);
    tcase_add_test(tc, test_attention_decode);
    tcase_add_test(tc, test_attention_decode_mma);
    tcase_add_test(tc, test_attention_decode_graph_small);
    tcase_add_test(tc, test_attention_decode_clusters);
    tcase_add_test(tc, test_attention_head_dim_refused);
    tcase_add_test(tc, test_graph_replay);
    tcase_add_test(tc, test_sample);
    tcase_add_test(tc, test_sample_signed_zeros);
    tcase_add_test(tc, test_nccl);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* CUDA state does not survive fork(): run the tests in this process. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    nl_backend_destroy(gpu);
    nl_backend_destroy(cpu);
    return failed ? 1 : 0;
}
