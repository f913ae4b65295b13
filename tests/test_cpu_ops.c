/* test_cpu_ops.c — every op of the CPU backend against a double-precision
 * reference written out here, plus the sampler's defining properties.
 *
 * The references are deliberately naive loops over plain arrays (no paged
 * cache, no fused layouts) so that a layout mistake in the backend cannot
 * hide in the reference too.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "tests/check_run.h"

static nl_backend *be;

static void setup(void)
{
    ck_assert_int_eq(nl_backend_cpu_create(2, &be), NL_OK);
}

static void teardown(void)
{
    nl_backend_destroy(be);
    be = NULL;
}

/* Deterministic uniform in [-1, 1). */
static uint64_t rng_state = 1;
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) / 8388608.0 - 1.0);
}

static float *rand_array(size_t n)
{
    float *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = frand();
    return a;
}

static void *dev_copy(const void *src, size_t bytes)
{
    void *d;
    ck_assert_int_eq(be->ops->alloc(be, bytes, &d), NL_OK);
    ck_assert_int_eq(be->ops->upload(be, d, src, bytes), NL_OK);
    return d;
}

static nl_weight *weight_from(const float *src, int64_t rows, int64_t cols)
{
    nl_weight *w;
    ck_assert_int_eq(be->ops->weight_create(be, rows, cols, &w), NL_OK);
    ck_assert_int_eq(be->ops->weight_fill_rows(be, w, 0, rows, src, NL_DTYPE_F32, cols, 0), NL_OK);
    return w;
}

#define ASSERT_CLOSE(got, want, tol)                                                       \
    ck_assert_msg(fabs((double)(got) - (double)(want)) <= (tol) * (1.0 + fabs((double)(want))), \
                  "%s = %.9g, want %.9g", #got, (double)(got), (double)(want))

START_TEST(test_embedding_shard)
{
    enum { V = 10, D = 6, N = 5 };
    float *table = rand_array(V * D);
    /* this shard holds ids [4, 8) */
    nl_weight *w = weight_from(table + 4 * D, 4, D);
    int32_t ids[N] = {4, 9, 7, 0, 5};
    float out[N * D];
    int32_t *d_ids = dev_copy(ids, sizeof ids);
    ck_assert_int_eq(be->ops->embedding(be, out, w, d_ids, N, 4), NL_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) {
            float want = ids[i] >= 4 && ids[i] < 8 ? table[ids[i] * D + j] : 0.0f;
            ck_assert_float_eq(out[i * D + j], want);
        }
    be->ops->weight_destroy(be, w);
    be->ops->free(be, d_ids);
    free(table);
}
END_TEST

START_TEST(test_copy_pieces)
{
    /* the first 2 of 4 columns of 3 rows, into rows 5 wide, and a flat
     * piece beside them; more pieces than the limit are refused */
    int32_t src[3 * 4], dst[3 * 5] = {0}, flat[3] = {0};
    for (int i = 0; i < 12; i++) src[i] = 10 + i;
    nl_copy_piece pieces[2] = {
        {.dst = dst, .src = src, .dst_pitch = 5 * 4, .src_pitch = 4 * 4, .row_bytes = 2 * 4, .rows = 3},
        {.dst = flat, .src = src + 9, .dst_pitch = 12, .src_pitch = 12, .row_bytes = 12, .rows = 1},
    };
    ck_assert_int_eq(be->ops->copy_pieces(be, pieces, 2), NL_OK);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 5; c++) ck_assert_int_eq(dst[r * 5 + c], c < 2 ? src[r * 4 + c] : 0);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(flat[i], 19 + i);
    nl_copy_piece many[NL_COPY_PIECES_MAX + 1] = {{0}};
    ck_assert_int_ne(be->ops->copy_pieces(be, many, NL_COPY_PIECES_MAX + 1), NL_OK);
}
END_TEST

START_TEST(test_weight_fill_dtypes_and_slices)
{
    /* A [3, 4] weight filled from columns 2..5 of a [3, 8] bf16 source, and
     * from f16: the row-parallel column slice the loader relies on. */
    uint16_t bf[3 * 8], hf[3 * 8];
    for (int i = 0; i < 24; i++) {
        bf[i] = nl_f32_to_bf16((float)i * 0.25f - 2.0f);
        hf[i] = nl_f32_to_f16((float)i * 0.5f - 3.0f);
    }
    nl_weight *w;
    ck_assert_int_eq(be->ops->weight_create(be, 3, 4, &w), NL_OK);
    ck_assert_int_eq(be->ops->weight_fill_rows(be, w, 0, 2, bf, NL_DTYPE_BF16, 8, 2), NL_OK);
    ck_assert_int_eq(be->ops->weight_fill_rows(be, w, 2, 1, hf + 8, NL_DTYPE_F16, 8, 4), NL_OK);
    ck_assert_int_ne(be->ops->weight_fill_rows(be, w, 2, 2, hf, NL_DTYPE_F16, 8, 0), NL_OK);
    /* read back through linear with identity inputs */
    float eye[4 * 4] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}, out[4 * 3];
    ck_assert_int_eq(be->ops->linear(be, out, eye, w, NULL, 4), NL_OK);
    for (int c = 0; c < 4; c++) {
        for (int r = 0; r < 2; r++) ck_assert_float_eq(out[c * 3 + r], (r * 8 + 2 + c) * 0.25f - 2.0f);
        ck_assert_float_eq(out[c * 3 + 2], (8 + 4 + c) * 0.5f - 3.0f);
    }
    be->ops->weight_destroy(be, w);
}
END_TEST

static void ref_rmsnorm(double *out, const double *v, const float *w, int dim, double eps)
{
    double ss = 0;
    for (int j = 0; j < dim; j++) ss += v[j] * v[j];
    double inv = 1.0 / sqrt(ss / dim + eps);
    for (int j = 0; j < dim; j++) out[j] = v[j] * inv * w[j];
}

START_TEST(test_rmsnorm)
{
    enum { N = 37, D = 48 };
    float *x = rand_array(N * D), *res = rand_array(N * D), *wv = rand_array(D);
    float out[N * D], res2[N * D], x2[N * D];
    nl_weight *w = weight_from(wv, 1, D);
    memcpy(res2, res, sizeof res2);
    memcpy(x2, x, sizeof x2);
    ck_assert_int_eq(be->ops->rmsnorm(be, out, x, NULL, w, N, D, 1e-6f), NL_OK);
    /* fused residual, in place (out == x) */
    ck_assert_int_eq(be->ops->rmsnorm(be, x2, x2, res2, w, N, D, 1e-6f), NL_OK);
    for (int i = 0; i < N; i++) {
        double v[D], r[D], want[D], want_r[D];
        for (int j = 0; j < D; j++) {
            v[j] = x[i * D + j];
            r[j] = (double)res[i * D + j] + x[i * D + j];
        }
        ref_rmsnorm(want, v, wv, D, 1e-6);
        ref_rmsnorm(want_r, r, wv, D, 1e-6);
        for (int j = 0; j < D; j++) {
            ASSERT_CLOSE(out[i * D + j], want[j], 1e-5);
            ASSERT_CLOSE(x2[i * D + j], want_r[j], 1e-5);
            ASSERT_CLOSE(res2[i * D + j], r[j], 1e-6);
        }
    }
    be->ops->weight_destroy(be, w);
    free(x), free(res), free(wv);
}
END_TEST

START_TEST(test_linear)
{
    enum { R = 19, C = 33 };
    float *wv = rand_array(R * C), *bv = rand_array(R);
    nl_weight *w = weight_from(wv, R, C), *b;
    ck_assert_int_eq(be->ops->weight_create(be, R, 1, &b), NL_OK);
    ck_assert_int_eq(be->ops->weight_fill_rows(be, b, 0, R, bv, NL_DTYPE_F32, 1, 0), NL_OK);
    for (int n = 1; n <= 7; n += 6) { /* n == 1 takes the gemv path */
        float *x = rand_array((size_t)n * C), out[7 * R], out32[7 * R];
        ck_assert_int_eq(be->ops->linear(be, out, x, w, b, n), NL_OK);
        ck_assert_int_eq(be->ops->linear_f32(be, out32, x, w, n), NL_OK);
        for (int i = 0; i < n; i++)
            for (int r = 0; r < R; r++) {
                double acc = 0;
                for (int c = 0; c < C; c++) acc += (double)x[i * C + c] * wv[r * C + c];
                ASSERT_CLOSE(out32[i * R + r], acc, 1e-5);
                ASSERT_CLOSE(out[i * R + r], acc + bv[r], 1e-5);
            }
        free(x);
    }
    be->ops->weight_destroy(be, w);
    be->ops->weight_destroy(be, b);
    free(wv), free(bv);
}
END_TEST

static void check_qk_norm_rope(int hq, int hk, int hd, bool with_norm)
{
    enum { N = 6 };
    int width = (hq + 2 * hk) * hd;
    float *qkv = rand_array((size_t)N * width), *orig = malloc(sizeof(float) * N * width);
    float *qn = rand_array(hd), *kn = rand_array(hd);
    int32_t pos[N] = {0, 1, 2, 17, 300, 4095};
    memcpy(orig, qkv, sizeof(float) * N * width);
    nl_weight *wq = with_norm ? weight_from(qn, 1, hd) : NULL, *wk = with_norm ? weight_from(kn, 1, hd) : NULL;
    /* any table will do: the op turns pair i by pos * inv_freq[i] */
    float *inv = malloc(sizeof(float) * (size_t)(hd / 2));
    for (int i = 0; i < hd / 2; i++) inv[i] = (float)pow(1e6, -2.0 * i / hd) / (i % 3 ? 1.0f : 8.0f);
    /* tokens land in slots 5, 4, 3, ...; token 2 is padding (slot -1) */
    size_t kvw = (size_t)hk * hd;
    float *kc = calloc((N + 2) * kvw, sizeof(float)), *vc = calloc((N + 2) * kvw, sizeof(float));
    int32_t slots[N];
    for (int t = 0; t < N; t++) slots[t] = t == 2 ? -1 : N - 1 - t;
    ck_assert_int_eq(be->ops->qk_norm_rope_store(be, qkv, pos, wq, wk, inv, kc, vc, slots, N, hq, hk,
                                                 hd, 1e-6f, 16, NL_DTYPE_F32), NL_OK);
    /* the cache holds the rotated k and the untouched v; the padding row's
     * slot (3) stays zero */
    for (int t = 0; t < N; t++) {
        const float *k = slots[t] >= 0 ? kc + slots[t] * kvw : kc + 3 * kvw;
        const float *vv = slots[t] >= 0 ? vc + slots[t] * kvw : vc + 3 * kvw;
        for (size_t e = 0; e < kvw; e++) {
            ck_assert_float_eq(k[e], slots[t] >= 0 ? qkv[t * width + hq * hd + e] : 0.0f);
            ck_assert_float_eq(vv[e], slots[t] >= 0 ? orig[t * width + (hq + hk) * hd + e] : 0.0f);
        }
    }
    free(kc), free(vc);
    double *v = malloc(sizeof(double) * hd), *nv = malloc(sizeof(double) * hd);
    for (int t = 0; t < N; t++)
        for (int h = 0; h < hq + 2 * hk; h++) {
            const float *src = orig + t * width + h * hd;
            const float *got = qkv + t * width + h * hd;
            for (int d = 0; d < hd; d++) v[d] = src[d];
            if (h >= hq + hk) { /* v is untouched */
                for (int d = 0; d < hd; d++) ck_assert_float_eq(got[d], src[d]);
                continue;
            }
            if (with_norm) {
                ref_rmsnorm(nv, v, h < hq ? qn : kn, hd, 1e-6);
                memcpy(v, nv, sizeof(double) * hd);
            }
            for (int i = 0; i < hd / 2; i++) {
                double a = pos[t] * (double)inv[i];
                double want1 = v[i] * cos(a) - v[i + hd / 2] * sin(a);
                double want2 = v[i + hd / 2] * cos(a) + v[i] * sin(a);
                ASSERT_CLOSE(got[i], want1, 2e-5);
                ASSERT_CLOSE(got[i + hd / 2], want2, 2e-5);
            }
        }
    if (wq) be->ops->weight_destroy(be, wq), be->ops->weight_destroy(be, wk);
    free(qkv), free(orig), free(qn), free(kn), free(v), free(nv), free(inv);
}

START_TEST(test_qk_norm_rope)
{
    check_qk_norm_rope(4, 2, 16, true);
    check_qk_norm_rope(2, 1, 8, false);
    check_qk_norm_rope(3, 3, 6, true);
}
END_TEST

/* Writes n floats into a cache of kv_dtype at element offset off, rounded as
 * the cache stores them. */
static void cache_put(void *cache, nl_dtype kv_dtype, size_t off, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (kv_dtype == NL_DTYPE_F32) ((float *)cache)[off + i] = src[i];
        else if (kv_dtype == NL_DTYPE_BF16) ((uint16_t *)cache)[off + i] = nl_f32_to_bf16(src[i]);
        else ((uint8_t *)cache)[off + i] = nl_f32_to_f8e4m3(src[i]);
    }
}

/* x as a cache of kv_dtype holds it. */
static float cache_round(nl_dtype kv_dtype, float x)
{
    if (kv_dtype == NL_DTYPE_BF16) return nl_bf16_to_f32(nl_f32_to_bf16(x));
    if (kv_dtype == NL_DTYPE_F8_E4M3) return nl_f8e4m3_to_f32(nl_f32_to_f8e4m3(x));
    return x;
}

/* Causal attention in double over per-sequence keys and values [ctx, hk, hd]:
 * want[n, hq, hd]. */
static void ref_attention(double *want, const float *qkv, float *const *keys, float *const *vals,
                          const int32_t *cu, const int32_t *q_len, const int32_t *ctx, int n_seqs,
                          int hq, int hk, int hd, float scale)
{
    int width = (hq + 2 * hk) * hd, kvw = hk * hd;
    double sc[64];
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < q_len[s]; i++) {
            int t = cu[s] + i, pos = ctx[s] - q_len[s] + i;
            for (int h = 0; h < hq; h++) {
                int kvh = h / (hq / hk);
                const float *q = qkv + t * width + h * hd;
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= pos; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += (double)q[e] * keys[s][j * kvw + kvh * hd + e];
                    sc[j] = d * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= pos; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double w = 0;
                    for (int j = 0; j <= pos; j++) w += sc[j] / sum * vals[s][j * kvw + kvh * hd + e];
                    want[(size_t)t * hq * hd + h * hd + e] = w;
                }
            }
        }
}

/* A ragged batch over a shuffled paged cache of kv_dtype: a fresh prefill,
 * a chunk after a cached prefix that crosses block boundaries, and decodes.
 * The output must match attention over the values as the cache rounds them
 * (1e-5), and attention over the unrounded values within float_tol; returns
 * the largest difference from the latter. */
static double check_attention_kv(int hq, int hk, int hd, nl_dtype kv_dtype, double float_tol)
{
    enum { S = 4, BS = 16, NB = 12, MAXB = 4 };
    int32_t q_len[S] = {5, 3, 1, 1}, ctx[S] = {5, 37, 20, 48};
    int32_t tables[S][MAXB] = {{7, 0, 0, 0}, {3, 10, 1, 0}, {11, 2, 0, 0}, {4, 9, 5, 0}};
    int width = (hq + 2 * hk) * hd, kvw = hk * hd;
    int32_t cu[S + 1] = {0}, n = 0;
    for (int s = 0; s < S; s++) cu[s + 1] = cu[s] + q_len[s];
    n = cu[S];
    float *qkv = rand_array((size_t)(n + 1) * width); /* + a padding row */
    size_t esz = nl_dtype_size(kv_dtype);
    void *kc = calloc((size_t)NB * BS * kvw, esz), *vc = calloc((size_t)NB * BS * kvw, esz);
    float *keys[S], *vals[S], *keys_r[S], *vals_r[S]; /* [ctx, hk, hd]: exact, as cached */
    int32_t slots[16];
    for (int s = 0; s < S; s++) {
        keys[s] = rand_array((size_t)ctx[s] * kvw);
        vals[s] = rand_array((size_t)ctx[s] * kvw);
        keys_r[s] = malloc(sizeof(float) * ctx[s] * kvw);
        vals_r[s] = malloc(sizeof(float) * ctx[s] * kvw);
        for (int e = 0; e < ctx[s] * kvw; e++) {
            keys_r[s][e] = cache_round(kv_dtype, keys[s][e]);
            vals_r[s][e] = cache_round(kv_dtype, vals[s][e]);
        }
        for (int p = 0; p < ctx[s]; p++) {
            int slot = tables[s][p / BS] * BS + p % BS, i = p - (ctx[s] - q_len[s]);
            if (i < 0) { /* cached prefix: already in the cache */
                cache_put(kc, kv_dtype, (size_t)slot * kvw, keys[s] + p * kvw, kvw);
                cache_put(vc, kv_dtype, (size_t)slot * kvw, vals[s] + p * kvw, kvw);
            } else { /* new token: its k, v travel in qkv */
                memcpy(qkv + (cu[s] + i) * width + hq * hd, keys[s] + p * kvw, sizeof(float) * kvw);
                memcpy(qkv + (cu[s] + i) * width + (hq + hk) * hd, vals[s] + p * kvw, sizeof(float) * kvw);
                slots[cu[s] + i] = slot;
            }
        }
    }
    slots[n] = -1; /* a padding row must be skipped */
    /* a table of zero frequencies rotates by 0: the op only stores */
    float *inv0 = calloc((size_t)hd / 2, sizeof(float));
    int32_t *pos0 = calloc((size_t)n + 1, sizeof(int32_t));
    ck_assert_int_eq(be->ops->qk_norm_rope_store(be, qkv, pos0, NULL, NULL, inv0, kc, vc, slots, n + 1,
                                                 hq, hk, hd, 1e-6f, BS, kv_dtype), NL_OK);
    free(inv0), free(pos0);
    nl_attn_batch b = {.n_seqs = S, .n_tokens = n, .max_q_len = 5, .max_context_len = 48,
                       .max_blocks_per_seq = MAXB, .block_size = BS, .all_decode = false,
                       .cu_seqlens_q = cu, .context_lens = ctx, .block_tables = &tables[0][0]};
    size_t n_out = (size_t)n * hq * hd;
    float *out = malloc(sizeof(float) * n_out);
    double *want_r = malloc(sizeof(double) * n_out), *want = malloc(sizeof(double) * n_out);
    float scale = 1.0f / sqrtf((float)hd);
    ck_assert_int_eq(be->ops->attention(be, out, qkv, kc, vc, &b, hq, hk, hd, scale, kv_dtype), NL_OK);
    ref_attention(want_r, qkv, keys_r, vals_r, cu, q_len, ctx, S, hq, hk, hd, scale);
    ref_attention(want, qkv, keys, vals, cu, q_len, ctx, S, hq, hk, hd, scale);
    double worst = 0;
    for (size_t i = 0; i < n_out; i++) {
        ASSERT_CLOSE(out[i], want_r[i], 1e-5);
        ck_assert_msg(fabs(out[i] - want[i]) <= float_tol, "%s cache: out[%zu] %g, float reference %g",
                      nl_dtype_name(kv_dtype), i, (double)out[i], want[i]);
        if (fabs(out[i] - want[i]) > worst) worst = fabs(out[i] - want[i]);
    }
    for (int s = 0; s < S; s++) free(keys[s]), free(vals[s]), free(keys_r[s]), free(vals_r[s]);
    free(qkv), free(kc), free(vc), free(out), free(want_r), free(want);
    return worst;
}

static void check_attention(int hq, int hk, int hd)
{
    check_attention_kv(hq, hk, hd, NL_DTYPE_F32, 1e-5);
}

START_TEST(test_attention_gqa)
{
    check_attention(4, 2, 16); /* GQA */
}
END_TEST

START_TEST(test_attention_mqa_mha)
{
    check_attention(3, 1, 8);  /* MQA */
    check_attention(2, 2, 32); /* MHA */
}
END_TEST

/* e4m3 keeps 3 mantissa bits (relative error up to 2^-4 per value, 2^-4
 * of the value's magnitude), so with keys and values in [-1, 1) an output,
 * a weighted mean of values, may move by up to ~0.06 from rounding of V
 * alone; on average far less.  bf16 must land an order closer. */
START_TEST(test_attention_fp8_cache)
{
    double bf16_worst = check_attention_kv(4, 2, 16, NL_DTYPE_BF16, 8e-3);
    double fp8_worst = check_attention_kv(4, 2, 16, NL_DTYPE_F8_E4M3, 0.06);
    ck_assert_msg(bf16_worst < fp8_worst, "bf16 %g, fp8 %g", bf16_worst, fp8_worst);
    check_attention_kv(3, 1, 8, NL_DTYPE_F8_E4M3, 0.06);
    check_attention_kv(2, 2, 32, NL_DTYPE_F8_E4M3, 0.06);
}
END_TEST

START_TEST(test_store_kv_rejects_other_dtypes)
{
    float buf[256] = {0}, qkv[3 * 8], inv[4] = {1, 1, 1, 1};
    for (int i = 0; i < 24; i++) qkv[i] = (float)i;
    int32_t slot = 0, pos = 7;
    ck_assert_int_eq(be->ops->qk_norm_rope_store(be, qkv, &pos, NULL, NULL, inv, buf, buf, &slot, 1, 1,
                                                 1, 8, 1e-6f, 16, NL_DTYPE_I32),
                     NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "I32"));
    for (int i = 0; i < 24; i++) ck_assert_float_eq(qkv[i], (float)i); /* refused before any work */
}
END_TEST

START_TEST(test_attention_rejects_bad_lengths)
{
    int32_t cu[2] = {0, 2}, ctx[1] = {40}, table[2] = {0, 1};
    float buf[4096] = {0};
    nl_attn_batch b = {.n_seqs = 1, .n_tokens = 2, .max_q_len = 2, .max_context_len = 40,
                       .max_blocks_per_seq = 2, .block_size = 16, .cu_seqlens_q = cu,
                       .context_lens = ctx, .block_tables = table};
    ck_assert_int_eq(be->ops->attention(be, buf, buf, buf, buf, &b, 1, 1, 8, 1.0f, NL_DTYPE_F32), NL_ERR_INVALID_ARG);
}
END_TEST

/* norm_linear with and without the pending add, with SiLU-and-multiply and
 * without; linear_add */
START_TEST(test_norm_linear_add)
{
    enum { N = 9, I = 13, K = 6 };
    float *xs = rand_array(N * K), *res = rand_array(N * K), *nwv = rand_array(K);
    float *wv = rand_array(2 * I * K), *bv = rand_array(2 * I);
    float out[N * 2 * I], xn[N * K], work[N * 2 * I], res2[N * K];
    nl_weight *nw = weight_from(nwv, 1, K), *w = weight_from(wv, 2 * I, K);
    nl_weight *bias = weight_from(bv, 1, 2 * I);
    for (int pass = 0; pass < 4; pass++) {
        bool with_x = pass & 1, silu = pass & 2;
        memcpy(res2, res, sizeof res2);
        ck_assert_int_eq(be->ops->norm_linear(be, out, xn, work, with_x ? xs : NULL, res2, nw, 1e-6f, w,
                                              bias, N, silu), NL_OK);
        for (int i = 0; i < N; i++) {
            double v[K], nv[K];
            for (int k = 0; k < K; k++) {
                v[k] = (double)res[i * K + k] + (with_x ? xs[i * K + k] : 0.0);
                ASSERT_CLOSE(res2[i * K + k], v[k], 1e-6); /* updated only with x */
            }
            ref_rmsnorm(nv, v, nwv, K, 1e-6);
            for (int j = 0; j < (silu ? I : 2 * I); j++) {
                double g = bv[j], u = bv[I + j % I];
                for (int k = 0; k < K; k++) {
                    g += nv[k] * wv[j * K + k];
                    u += nv[k] * wv[(I + j % I) * K + k];
                }
                ASSERT_CLOSE(out[i * (silu ? I : 2 * I) + j], silu ? g / (1 + exp(-g)) * u : g, 1e-5);
            }
        }
    }
    nl_weight *odd = weight_from(wv, 2 * I - 1, K);
    ck_assert_int_eq(be->ops->norm_linear(be, out, xn, work, NULL, res2, nw, 1e-6f, odd, NULL, N, true),
                     NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "gate and up"));
    /* linear_add: res2 += xs @ w[:K]^T, here a [K, K] slice of the gate rows */
    nl_weight *sq = weight_from(wv, K, K);
    memcpy(res2, res, sizeof res2);
    ck_assert_int_eq(be->ops->linear_add(be, res2, work, xs, sq, NULL, N), NL_OK);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < K; j++) {
            double want = res[i * K + j];
            for (int k = 0; k < K; k++) want += (double)xs[i * K + k] * wv[j * K + k];
            ASSERT_CLOSE(res2[i * K + j], want, 1e-5);
        }
    be->ops->weight_destroy(be, nw);
    be->ops->weight_destroy(be, w);
    be->ops->weight_destroy(be, bias);
    be->ops->weight_destroy(be, odd);
    be->ops->weight_destroy(be, sq);
    free(xs), free(res), free(nwv), free(wv), free(bv);
}
END_TEST

START_TEST(test_gather_rows)
{
    enum { N = 9, D = 5 };
    float *x = rand_array(N * D), g[3 * D];
    int32_t rows[3] = {8, 0, 4};
    ck_assert_int_eq(be->ops->gather_rows(be, g, x, rows, 3, D), NL_OK);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(memcmp(g + i * D, x + rows[i] * D, sizeof(float) * D), 0);
    free(x);
}
END_TEST

/* ---- sampler ------------------------------------------------------------ */

enum { SAMPLE_OUT_ROWS = 16 };
typedef struct sample_out {
    int32_t ids[SAMPLE_OUT_ROWS];
    float lp[SAMPLE_OUT_ROWS];
    int32_t top_ids[SAMPLE_OUT_ROWS * NL_MAX_LOGPROBS];
    float top_lp[SAMPLE_OUT_ROWS * NL_MAX_LOGPROBS];
} sample_out;

static void run_sample(const float *logits, int m, int vocab, const nl_sample_row *rows, sample_out *o)
{
    ck_assert_int_le(m, SAMPLE_OUT_ROWS);
    ck_assert_int_eq(be->ops->sample(be, logits, m, vocab, rows, o->ids, o->lp, o->top_ids, o->top_lp), NL_OK);
}

static nl_sample_row greedy_row(void)
{
    return (nl_sample_row){.temperature = 0.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0};
}

START_TEST(test_sample_greedy_and_logprobs)
{
    enum { V = 1000 };
    float *l = rand_array(V);
    for (int i = 0; i < V; i++) l[i] *= 5;
    l[417] = 9.0f, l[123] = 9.0f; /* a tie: lowest id wins */
    nl_sample_row r = greedy_row();
    r.n_logprobs = 5;
    sample_out o;
    run_sample(l, 1, V, &r, &o);
    ck_assert_int_eq(o.ids[0], 123);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - 9.0);
    double lse = 9.0 + log(sum);
    ASSERT_CLOSE(o.lp[0], 9.0 - lse, 1e-6);
    ck_assert_int_eq(o.top_ids[0], 123);
    ck_assert_int_eq(o.top_ids[1], 417);
    for (int j = 0; j < 5; j++) {
        ASSERT_CLOSE(o.top_lp[j], l[o.top_ids[j]] - lse, 1e-6);
        for (int i = 0; i < V; i++) /* nothing outside the list beats its members */
            if (i != o.top_ids[0] && i != o.top_ids[1] && i != o.top_ids[2] && i != o.top_ids[3] && i != o.top_ids[4])
                ck_assert(l[i] <= l[o.top_ids[4]]);
    }
    ck_assert_int_eq(o.top_ids[5], -1);
    /* logprobs of the whole vocabulary sum to 1 */
    float small[NL_MAX_LOGPROBS];
    for (int i = 0; i < NL_MAX_LOGPROBS; i++) small[i] = l[i];
    r.n_logprobs = NL_MAX_LOGPROBS;
    run_sample(small, 1, NL_MAX_LOGPROBS, &r, &o);
    double total = 0;
    for (int j = 0; j < NL_MAX_LOGPROBS; j++) total += exp(o.top_lp[j]);
    ASSERT_CLOSE(total, 1.0, 1e-6);
    free(l);
}
END_TEST

START_TEST(test_sample_topk1_seed_and_batch_independence)
{
    enum { V = 500 };
    float *l = rand_array(4 * V);
    for (int i = 0; i < 4 * V; i++) l[i] *= 3;
    nl_sample_row rows[4];
    for (int r = 0; r < 4; r++)
        rows[r] = (nl_sample_row){.temperature = 0.8f, .top_p = 0.9f, .min_p = 0.01f, .top_k = 50,
                                  .seed = 1234 + r, .offset = 7 * r};
    rows[1].top_k = 1; /* top_k 1 == greedy */
    sample_out all, alone, again;
    run_sample(l, 4, V, rows, &all);
    int32_t argmax = 0;
    for (int i = 1; i < V; i++)
        if (l[V + i] > l[V + argmax]) argmax = i;
    ck_assert_int_eq(all.ids[1], argmax);
    for (int r = 0; r < 4; r++) {
        run_sample(l + r * V, 1, V, &rows[r], &alone);
        run_sample(l + r * V, 1, V, &rows[r], &again);
        ck_assert_int_eq(all.ids[r], alone.ids[0]);
        ck_assert_int_eq(alone.ids[0], again.ids[0]);
    }
    /* other seeds give other tokens, at least sometimes */
    int differ = 0;
    for (uint64_t s = 0; s < 20; s++) {
        nl_sample_row x = rows[0];
        x.seed = s;
        run_sample(l, 1, V, &x, &alone);
        differ += alone.ids[0] != all.ids[0];
    }
    ck_assert_int_gt(differ, 0);
    free(l);
}
END_TEST

/* Frequencies over many offsets against the distribution each filter
 * should leave (probabilities 0.5, 0.3, 0.15, 0.05 by construction). */
static void check_distribution(nl_sample_row r, const double *want)
{
    enum { N = 20000 };
    float l[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
    int32_t perm[4] = {1, 3, 2, 0}; /* want[] is in descending p */
    int count[4] = {0};
    sample_out o;
    for (int i = 0; i < N; i++) {
        r.offset = (uint64_t)i;
        run_sample(l, 1, 4, &r, &o);
        count[o.ids[0]]++;
    }
    for (int k = 0; k < 4; k++)
        ck_assert_msg(fabs(count[perm[k]] / (double)N - want[k]) < 0.012,
                      "rank %d: %d/%d, want %.3f", k, count[perm[k]], N, want[k]);
}

START_TEST(test_sample_distribution)
{
    nl_sample_row r = {.temperature = 1.0f, .top_p = 1.0f, .seed = 99};
    check_distribution(r, (double[]){0.5, 0.3, 0.15, 0.05});
    r.top_k = 2;
    check_distribution(r, (double[]){0.625, 0.375, 0, 0});
    r.top_k = 0, r.top_p = 0.7f; /* 0.5 < 0.7 <= 0.8 */
    check_distribution(r, (double[]){0.625, 0.375, 0, 0});
    r.top_p = 1.0f, r.min_p = 0.2f; /* keeps p >= 0.1 */
    check_distribution(r, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
    r.min_p = 0.0f, r.temperature = 0.5f; /* p^2, renormalised */
    double z = 0.25 + 0.09 + 0.0225 + 0.0025;
    check_distribution(r, (double[]){0.25 / z, 0.09 / z, 0.0225 / z, 0.0025 / z});
}
END_TEST

START_TEST(test_sample_rejects_bad_params)
{
    float l[4] = {0};
    nl_sample_row r = {.temperature = 1.0f, .top_p = 0.0f};
    sample_out o;
    ck_assert_int_eq(be->ops->sample(be, l, 1, 4, &r, o.ids, o.lp, o.top_ids, o.top_lp), NL_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_rng_race_uniform)
{
    /* v in (0, 1), deterministic, mean 1/2; E = -log1p(-v) has mean 1 */
    double sum = 0, sum_e = 0;
    uint64_t key = nl_rng_row_key(42, 7);
    ck_assert(key != nl_rng_row_key(42, 8) && key != nl_rng_row_key(43, 7));
    for (uint32_t i = 0; i < 100000; i++) {
        float v = nl_rng_race_uniform(nl_rng_race_bits(key, i));
        ck_assert(v > 0.0f && v < 1.0f);
        ck_assert_float_eq(v, nl_rng_race_uniform(nl_rng_race_bits(key, i)));
        sum += v;
        sum_e += -log1p(-(double)v);
    }
    ck_assert(fabs(sum / 100000 - 0.5) < 0.005);
    ck_assert(fabs(sum_e / 100000 - 1.0) < 0.01);
    /* the extremes of the 32 bits: never 0, never 1, smallest v exact */
    ck_assert_float_eq(nl_rng_race_uniform(0), 1.0f / 4294967296.0f);
    ck_assert_float_eq(nl_rng_race_uniform(2), 3.0f / 4294967296.0f);
    ck_assert_float_eq(nl_rng_race_uniform(0xffffffffu), 1.0f - 1.0f / 16777216.0f);
    /* SplitMix64: token i's bits are output i + 1 of the stream from key */
    uint64_t z = key + 2 * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    ck_assert_uint_eq(nl_rng_race_bits(key, 1), (uint32_t)((z ^ (z >> 31)) >> 32));
    ck_assert_int_eq(nl_cuda_device_count() >= 0, 1);
}
END_TEST

/* The race itself, recomputed here in double from the definition: the
 * unfiltered path picks argmax p_i / E_i, and so does the sorted path with a
 * top_k that drops only the least likely token (unless that one won). */
START_TEST(test_sample_race_definition)
{
    enum { V = 3000, M = 8 };
    float *l = rand_array(M * V);
    for (int i = 0; i < M * V; i++) l[i] *= 4;
    nl_sample_row rows[M];
    for (int r = 0; r < M; r++)
        rows[r] = (nl_sample_row){.temperature = 0.5f + 0.25f * r, .top_p = 1.0f,
                                  .seed = 77 + r, .offset = 3 * r};
    sample_out plain, wide;
    run_sample(l, M, V, rows, &plain);
    for (int r = 0; r < M; r++) rows[r].top_k = V - 1;
    run_sample(l, M, V, rows, &wide);
    for (int r = 0; r < M; r++) {
        uint64_t key = nl_rng_row_key(rows[r].seed, rows[r].offset);
        double best = -INFINITY;
        int want = -1;
        for (int i = 0; i < V; i++) {
            double v = nl_rng_race_uniform(nl_rng_race_bits(key, (uint32_t)i));
            double s = l[r * V + i] / (double)rows[r].temperature - log(-log1p(-v));
            if (s > best) best = s, want = i;
        }
        int last = 0;
        for (int i = 1; i < V; i++)
            if (l[r * V + i] <= l[r * V + last]) last = i;
        ck_assert_int_eq(plain.ids[r], want);
        if (want != last) ck_assert_int_eq(wide.ids[r], want);
    }
    free(l);
}
END_TEST

/* The order of the definition: logit descending, lower id first. */
static const float *order_logits;
static int definition_order(const void *a_, const void *b_)
{
    int a = *(const int *)a_, b = *(const int *)b_;
    float la = order_logits[a], lb = order_logits[b];
    if (la != lb) return la > lb ? -1 : 1;
    return a < b ? -1 : 1;
}

/* Row r's token by the definition (common/sampling.h), recomputed here
 * from a full sort: top_k, then top_p over the top_k kept (sums in double
 * in order), then min_p, then the race in double. */
static int sample_by_definition(const float *l, int vocab, const nl_sample_row *sr)
{
    int *order = malloc(sizeof(int) * (size_t)vocab);
    for (int i = 0; i < vocab; i++) order[i] = i;
    order_logits = l;
    qsort(order, (size_t)vocab, sizeof(int), definition_order);
    double lmax = l[order[0]], inv_t = 1.0 / sr->temperature;
    int kept = sr->top_k > 0 && sr->top_k < vocab ? sr->top_k : vocab;
    if (sr->top_p < 1.0f) {
        double mass = 0.0, cum = 0.0;
        for (int i = 0; i < kept; i++) mass += exp((l[order[i]] - lmax) * inv_t);
        int i = 0;
        while (i < kept) {
            cum += exp((l[order[i]] - lmax) * inv_t);
            i++;
            if (cum >= sr->top_p * mass) break;
        }
        kept = i;
    }
    uint64_t key = nl_rng_row_key(sr->seed, sr->offset);
    double best = -INFINITY;
    int want = -1;
    for (int k = 0; k < kept; k++) {
        int i = order[k];
        if (sr->min_p > 0.0f && exp((l[i] - lmax) * inv_t) < sr->min_p) continue;
        double v = nl_rng_race_uniform(nl_rng_race_bits(key, (uint32_t)i));
        double score = l[i] * inv_t - log(-log1p(-v));
        if (score > best || (score == best && i < want)) best = score, want = i;
    }
    free(order);
    return want;
}

/* Every cut against the definition: top_k selected (up to 4,096) or
 * sorted out of the row (above), top_p alone from a head of the row (cold
 * rows: a few quarters of logits hold the mass) or from the whole row
 * sorted (hot rows), with top_p and min_p after top_k, on logits with many
 * ties (rounded to quarters), so that the order's id rule decides
 * boundaries. */
START_TEST(test_sample_cuts_definition)
{
    enum { V = 6000, M = 11, STEPS = 32 };
    float *l = rand_array(M * V);
    for (int i = 0; i < M * V; i++) l[i] = roundf(l[i] * 16.0f) / 4.0f;
    static const float temperature[M] = {0.4f, 0.7f, 1.0f, 1.3f, 1.6f, 1.9f, 2.2f, 2.5f, 0.1f, 0.3f, 5.0f};
    static const int top_k[M] = {1, 7, 50, 4096, 4097, 0, 300, 2, 0, 0, 0};
    static const float top_p[M] = {1.0f, 0.5f, 0.9f, 0.95f, 0.8f, 0.6f, 1.0f, 1.0f, 0.9f, 0.99f, 0.9f};
    static const float min_p[M] = {0.0f, 0.0f, 0.05f, 0.0f, 0.0f, 0.01f, 0.2f, 0.0f, 0.0f, 0.02f, 0.0f};
    nl_sample_row rows[M];
    for (int r = 0; r < M; r++)
        rows[r] = (nl_sample_row){.temperature = temperature[r], .top_p = top_p[r], .min_p = min_p[r],
                                  .top_k = top_k[r], .seed = 500 + r, .offset = 11 * r};
    for (int step = 0; step < STEPS; step++) {
        sample_out o;
        for (int r = 0; r < M; r++) rows[r].offset++;
        run_sample(l, M, V, rows, &o);
        for (int r = 0; r < M; r++)
            ck_assert_msg(o.ids[r] == sample_by_definition(l + r * V, V, &rows[r]),
                          "row %d (top_k %d, top_p %g, min_p %g) step %d: %d, the definition %d", r,
                          top_k[r], top_p[r], min_p[r], step, o.ids[r],
                          sample_by_definition(l + r * V, V, &rows[r]));
    }
    free(l);
}
END_TEST

/* -0 and +0 are one logit: a flat row of both, alternating, is ordered by
 * id alone, also where the whole row is sorted (a head too large). */
START_TEST(test_sample_signed_zeros)
{
    enum { V = 6000 };
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = i % 2 ? 0.0f : -0.0f;
    nl_sample_row row = {.temperature = 1.0f, .top_p = 0.5f, .seed = 77};
    for (int step = 0; step < 16; step++) {
        sample_out o;
        row.offset = step;
        run_sample(l, 1, V, &row, &o);
        ck_assert_msg(o.ids[0] == sample_by_definition(l, V, &row), "step %d: %d, the definition %d",
                      step, o.ids[0], sample_by_definition(l, V, &row));
        ck_assert_int_lt(o.ids[0], V / 2);
    }
    free(l);
}
END_TEST

static Suite *cpu_ops_suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_embedding_shard);
    tcase_add_test(tc, test_weight_fill_dtypes_and_slices);
    tcase_add_test(tc, test_copy_pieces);
    tcase_add_test(tc, test_norm_linear_add);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_linear);
    tcase_add_test(tc, test_qk_norm_rope);
    tcase_add_test(tc, test_attention_gqa);
    tcase_add_test(tc, test_attention_mqa_mha);
    tcase_add_test(tc, test_attention_fp8_cache);
    tcase_add_test(tc, test_store_kv_rejects_other_dtypes);
    tcase_add_test(tc, test_attention_rejects_bad_lengths);
    tcase_add_test(tc, test_gather_rows);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("sampler");
    tcase_add_checked_fixture(ts, setup, teardown);
    tcase_add_test(ts, test_sample_greedy_and_logprobs);
    tcase_add_test(ts, test_sample_topk1_seed_and_batch_independence);
    tcase_add_test(ts, test_sample_distribution);
    tcase_add_test(ts, test_sample_rejects_bad_params);
    tcase_add_test(ts, test_rng_race_uniform);
    tcase_add_test(ts, test_sample_race_definition);
    tcase_add_test(ts, test_sample_cuts_definition);
    tcase_add_test(ts, test_sample_signed_zeros);
    suite_add_tcase(s, ts);
    return s;
}

int main(void)
{
    return check_run(cpu_ops_suite());
}
