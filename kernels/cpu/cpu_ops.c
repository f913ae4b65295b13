/* cpu_ops.c — the CPU backend's compute ops (fp32, see kernels.h).
 *
 * These are the reference the CUDA backend is tested against, so they are
 * written to be plainly right first: reductions (norms, softmax sums) run
 * in double, RoPE angles are computed in double, and attention is the
 * textbook two-pass softmax over the paged cache.  Matrix products use
 * OpenBLAS; every other op splits its rows or (token, head) pairs over the
 * backend's thread pool.
 */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"

#define CPU(be) ((cpu_backend *)(be))

/* Rows per thread below which splitting a loop costs more than it saves. */
#define ROWS_MIN_PARALLEL 8

nl_status cpu_embedding(nl_backend *be, void *out_, const nl_weight *table, const int32_t *ids,
                        int32_t n, int32_t vocab_start)
{
    float *out = out_; /* [n, cols] */
    int64_t cols = table->cols;
    for (int32_t i = 0; i < n; i++) {
        int64_t row = (int64_t)ids[i] - vocab_start;
        if (row >= 0 && row < table->rows)
            memcpy(out + i * cols, table->data + row * cols, (size_t)cols * sizeof(float));
        else
            memset(out + i * cols, 0, (size_t)cols * sizeof(float));
    }
    return NL_OK;
}

/* ---- rmsnorm ------------------------------------------------------------ */

struct rmsnorm_ctx {
    float *out, *residual;
    const float *x, *w;
    int32_t dim;
    float eps;
};

/* out = v / sqrt(mean(v^2) + eps) * w, the sum of squares in double. */
static void rmsnorm_row(float *out, const float *v, const float *w, int32_t dim, float eps)
{
    double ss = 0.0;
    for (int32_t j = 0; j < dim; j++) ss += (double)v[j] * v[j];
    float inv = (float)(1.0 / sqrt(ss / dim + (double)eps));
    for (int32_t j = 0; j < dim; j++) out[j] = w[j] * (v[j] * inv);
}

static void rmsnorm_task(void *ctx_, int64_t begin, int64_t end)
{
    struct rmsnorm_ctx *c = ctx_;
    for (int64_t i = begin; i < end; i++) {
        const float *x = c->x + i * c->dim;
        float *out = c->out + i * c->dim;
        if (c->residual) {
            float *r = c->residual + i * c->dim;
            for (int32_t j = 0; j < c->dim; j++) r[j] += x[j];
            rmsnorm_row(out, r, c->w, c->dim, c->eps);
        } else {
            rmsnorm_row(out, x, c->w, c->dim, c->eps);
        }
    }
}

nl_status cpu_rmsnorm(nl_backend *be, void *out, const void *x, void *residual, const nl_weight *w,
                      int32_t n, int32_t dim, float eps)
{
    if (w->rows * w->cols != dim)
        return nl_error(NL_ERR_INVALID_ARG, "rmsnorm: weight has %lld elements, dim is %d",
                        (long long)(w->rows * w->cols), dim);
    struct rmsnorm_ctx c = {out, residual, x, w->data, dim, eps};
    cpu_parallel_for(CPU(be), n, ROWS_MIN_PARALLEL, rmsnorm_task, &c);
    return NL_OK;
}

/* ---- linear ------------------------------------------------------------- */

static void matmul_wt(float *out, const float *x, const nl_weight *w, int32_t n)
{
    int rows = (int)w->rows, cols = (int)w->cols;
    if (n == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, cols, 1.0f, w->data, cols, x, 1, 0.0f,
                    out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x, cols,
                    w->data, cols, 0.0f, out, rows);
}

nl_status cpu_linear(nl_backend *be, void *out_, const void *x, const nl_weight *w,
                     const nl_weight *bias, int32_t n)
{
    float *out = out_; /* [n, w.rows] */
    if (n <= 0) return NL_OK;
    if (bias && bias->rows * bias->cols != w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "linear: bias has %lld elements, weight %lld rows",
                        (long long)(bias->rows * bias->cols), (long long)w->rows);
    matmul_wt(out, x, w, n);
    if (bias)
        for (int32_t i = 0; i < n; i++)
            for (int64_t j = 0; j < w->rows; j++) out[i * w->rows + j] += bias->data[j];
    return NL_OK;
}

nl_status cpu_linear_f32(nl_backend *be, float *out, const void *x, const nl_weight *w, int32_t n)
{
    if (n > 0) matmul_wt(out, x, w, n);
    return NL_OK;
}

/* ---- qk norm + rope ----------------------------------------------------- */

struct rope_ctx {
    float *qkv;
    const int32_t *positions;
    const float *q_norm, *k_norm;
    const float *inv_freq; /* [hd / 2] */
    int32_t hq, hk, hd;
    float eps;
    atomic_bool failed; /* a thread had no memory for its table */
};

/* The angle is formed in double from the fp32 frequency, so a large
 * position loses nothing beyond the reference's own fp32 product. */
static void rope_task(void *ctx_, int64_t begin, int64_t end)
{
    struct rope_ctx *c = ctx_;
    int32_t half = c->hd / 2, width = (c->hq + 2 * c->hk) * c->hd;
    float *cs = malloc(sizeof(float) * 2 * (size_t)half);
    if (!cs) {
        atomic_store(&c->failed, true);
        return;
    }
    float *sn = cs + half;
    for (int64_t t = begin; t < end; t++) {
        double pos = c->positions[t];
        for (int32_t i = 0; i < half; i++) {
            double angle = pos * (double)c->inv_freq[i];
            cs[i] = (float)cos(angle);
            sn[i] = (float)sin(angle);
        }
        float *row = c->qkv + t * width;
        for (int32_t h = 0; h < c->hq + c->hk; h++) {
            float *v = row + (int64_t)h * c->hd;
            const float *nw = h < c->hq ? c->q_norm : c->k_norm;
            if (nw) rmsnorm_row(v, v, nw, c->hd, c->eps);
            for (int32_t i = 0; i < half; i++) {
                float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs[i] - x2 * sn[i];
                v[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
    free(cs);
}

nl_status cpu_qk_norm_rope(nl_backend *be, void *qkv, const int32_t *positions,
                           const nl_weight *q_norm, const nl_weight *k_norm, const float *inv_freq,
                           int32_t n, int32_t hq, int32_t hk, int32_t hd, float eps)
{
    if (hd <= 0 || hd % 2)
        return nl_error(NL_ERR_INVALID_ARG, "qk_norm_rope: head_dim %d must be even", hd);
    if ((q_norm && q_norm->rows * q_norm->cols != hd) || (k_norm && k_norm->rows * k_norm->cols != hd))
        return nl_error(NL_ERR_INVALID_ARG, "qk_norm_rope: q/k norm weights must have %d elements", hd);
    if (!inv_freq) return nl_error(NL_ERR_INVALID_ARG, "qk_norm_rope: no inv_freq table");
    struct rope_ctx c = {qkv, positions, q_norm ? q_norm->data : NULL,
                         k_norm ? k_norm->data : NULL, inv_freq, hq, hk, hd, eps, false};
    cpu_parallel_for(CPU(be), n, ROWS_MIN_PARALLEL, rope_task, &c);
    if (atomic_load(&c.failed))
        return nl_error(NL_ERR_NOMEM, "qk_norm_rope: no memory for the rotary table of head_dim %d", hd);
    return NL_OK;
}

/* The cache types the CPU stores and reads: fp32 (its act_dtype), and bf16
 * and e4m3 so that CI runs the narrow caches the GPU uses. */
static bool cpu_kv_dtype_ok(nl_dtype t)
{
    return t == NL_DTYPE_F32 || t == NL_DTYPE_BF16 || t == NL_DTYPE_F8_E4M3;
}

nl_status cpu_store_kv(nl_backend *be, void *k_cache, void *v_cache, const void *qkv_,
                       const int32_t *slots, int32_t n, int32_t hq, int32_t hk, int32_t hd,
                       int32_t block_size, nl_dtype kv_dtype)
{
    const float *qkv = qkv_; /* [n, (hq + 2 hk) * hd] */
    size_t kv = (size_t)hk * hd, width = (size_t)(hq + 2 * hk) * hd;
    if (!cpu_kv_dtype_ok(kv_dtype))
        return nl_error(NL_ERR_UNSUPPORTED, "store_kv: KV cache dtype %s (cpu: F32, BF16 or F8_E4M3)",
                        nl_dtype_name(kv_dtype));
    for (int32_t t = 0; t < n; t++) {
        if (slots[t] < 0) continue;
        const float *row = qkv + t * width + (size_t)hq * hd;
        if (kv_dtype == NL_DTYPE_F32) {
            memcpy((float *)k_cache + (size_t)slots[t] * kv, row, kv * sizeof(float));
            memcpy((float *)v_cache + (size_t)slots[t] * kv, row + kv, kv * sizeof(float));
        } else if (kv_dtype == NL_DTYPE_BF16) {
            uint16_t *k16 = (uint16_t *)k_cache + (size_t)slots[t] * kv;
            uint16_t *v16 = (uint16_t *)v_cache + (size_t)slots[t] * kv;
            for (size_t i = 0; i < kv; i++) {
                k16[i] = nl_f32_to_bf16(row[i]);
                v16[i] = nl_f32_to_bf16(row[kv + i]);
            }
        } else {
            uint8_t *k8 = (uint8_t *)k_cache + (size_t)slots[t] * kv;
            uint8_t *v8 = (uint8_t *)v_cache + (size_t)slots[t] * kv;
            for (size_t i = 0; i < kv; i++) {
                k8[i] = nl_f32_to_f8e4m3(row[i]);
                v8[i] = nl_f32_to_f8e4m3(row[kv + i]);
            }
        }
    }
    return NL_OK;
}

nl_status cpu_qk_norm_rope_store(nl_backend *be, void *qkv, const int32_t *positions,
                                 const nl_weight *q_norm, const nl_weight *k_norm,
                                 const float *inv_freq, void *k_cache, void *v_cache,
                                 const int32_t *slots, int32_t n, int32_t hq, int32_t hk, int32_t hd,
                                 float eps, int32_t block_size, nl_dtype kv_dtype)
{
    if (!cpu_kv_dtype_ok(kv_dtype)) /* before qkv changes */
        return nl_error(NL_ERR_UNSUPPORTED, "store_kv: KV cache dtype %s (cpu: F32, BF16 or F8_E4M3)",
                        nl_dtype_name(kv_dtype));
    NL_TRY(cpu_qk_norm_rope(be, qkv, positions, q_norm, k_norm, inv_freq, n, hq, hk, hd, eps));
    return cpu_store_kv(be, k_cache, v_cache, qkv, slots, n, hq, hk, hd, block_size, kv_dtype);
}

/* ---- attention ---------------------------------------------------------- */

struct attn_ctx {
    float *out;
    const float *qkv;
    const void *k_cache, *v_cache;
    const nl_attn_batch *b;
    int32_t hq, hk, hd;
    float scale;
    nl_dtype kv_dtype;             /* F32, BF16 or F8_E4M3                  */
    const float *f8;               /* [256] e4m3 byte -> value              */
    atomic_bool failed; /* a thread had no memory for its scores */
};

/* The hd values of kv head kvh at a slot, as floats: in place for an F32
 * cache, decoded into tmp[hd] for a narrower one. */
static const float *kv_head_row(const struct attn_ctx *c, const void *cache, size_t slot,
                                int32_t kvh, float *tmp)
{
    size_t off = (slot * c->hk + kvh) * c->hd;
    if (c->kv_dtype == NL_DTYPE_F32) return (const float *)cache + off;
    if (c->kv_dtype == NL_DTYPE_BF16) {
        const uint16_t *p = (const uint16_t *)cache + off;
        for (int32_t d = 0; d < c->hd; d++) tmp[d] = nl_bf16_to_f32(p[d]);
    } else {
        const uint8_t *p = (const uint8_t *)cache + off;
        for (int32_t d = 0; d < c->hd; d++) tmp[d] = c->f8[p[d]];
    }
    return tmp;
}

/* Eight partial sums: vectorisable, and closer to the exact sum than one. */
static float dot_f32(const float *a, const float *b, int32_t n)
{
    float acc[8] = {0};
    int32_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[j + k] * b[j + k];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; j < n; j++) s += a[j] * b[j];
    return s;
}

/* Items are (token, query head) pairs, token-major. */
static void attn_task(void *ctx_, int64_t begin, int64_t end)
{
    struct attn_ctx *c = ctx_;
    const nl_attn_batch *b = c->b;
    int32_t hd = c->hd, group = c->hq / c->hk, bs = b->block_size;
    size_t width = (size_t)(c->hq + 2 * c->hk) * hd;
    float *scores = malloc(sizeof(float) * ((size_t)b->max_context_len + 1 + 2 * (size_t)hd));
    if (!scores) {
        atomic_store(&c->failed, true);
        return;
    }
    float *acc = scores + b->max_context_len + 1, *tmp = acc + hd;
    int32_t s = 0;
    for (int64_t item = begin; item < end; item++) {
        int32_t t = (int32_t)(item / c->hq), h = (int32_t)(item % c->hq), kvh = h / group;
        while (b->cu_seqlens_q[s + 1] <= t) s++; /* items ascend, so s only moves forward */
        int32_t q_len = b->cu_seqlens_q[s + 1] - b->cu_seqlens_q[s];
        int32_t pos = b->context_lens[s] - q_len + (t - b->cu_seqlens_q[s]);
        const int32_t *table = b->block_tables + (size_t)s * b->max_blocks_per_seq;
        const float *q = c->qkv + t * width + (size_t)h * hd;
        float mx = -INFINITY;
        for (int32_t j = 0; j <= pos; j++) {
            size_t slot = (size_t)table[j / bs] * bs + j % bs;
            scores[j] = dot_f32(q, kv_head_row(c, c->k_cache, slot, kvh, tmp), hd) * c->scale;
            if (scores[j] > mx) mx = scores[j];
        }
        double sum = 0.0;
        for (int32_t j = 0; j <= pos; j++) {
            scores[j] = expf(scores[j] - mx);
            sum += scores[j];
        }
        memset(acc, 0, sizeof(float) * hd);
        for (int32_t j = 0; j <= pos; j++) {
            size_t slot = (size_t)table[j / bs] * bs + j % bs;
            const float *v = kv_head_row(c, c->v_cache, slot, kvh, tmp);
            float p = scores[j];
            for (int32_t d = 0; d < hd; d++) acc[d] += p * v[d];
        }
        float inv = (float)(1.0 / sum), *o = c->out + (size_t)t * c->hq * hd + (size_t)h * hd;
        for (int32_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
    free(scores);
}

nl_status cpu_attention(nl_backend *be, void *out, const void *qkv, const void *k_cache,
                        const void *v_cache, const nl_attn_batch *batch, int32_t hq, int32_t hk,
                        int32_t hd, float scale, nl_dtype kv_dtype)
{
    if (!cpu_kv_dtype_ok(kv_dtype))
        return nl_error(NL_ERR_UNSUPPORTED, "attention: KV cache dtype %s (cpu: F32, BF16 or F8_E4M3)",
                        nl_dtype_name(kv_dtype));
    if (hk <= 0 || hq % hk)
        return nl_error(NL_ERR_INVALID_ARG, "attention: %d query heads not a multiple of %d kv heads", hq, hk);
    /* The host maxima size the scratch; check them against the real lengths
     * so a stale maximum cannot overrun it. */
    for (int32_t s = 0; s < batch->n_seqs; s++) {
        int32_t q_len = batch->cu_seqlens_q[s + 1] - batch->cu_seqlens_q[s];
        int32_t ctx = batch->context_lens[s];
        if (q_len < 0 || ctx < q_len || ctx > batch->max_context_len ||
            (ctx + batch->block_size - 1) / batch->block_size > batch->max_blocks_per_seq)
            return nl_error(NL_ERR_INVALID_ARG,
                            "attention: seq %d has q_len %d, context %d (max_context_len %d, "
                            "%d blocks of %d)", s, q_len, ctx, batch->max_context_len,
                            batch->max_blocks_per_seq, batch->block_size);
    }
    float f8[256];
    for (int i = 0; i < 256; i++) f8[i] = nl_f8e4m3_to_f32((uint8_t)i);
    struct attn_ctx c = {out, qkv, k_cache, v_cache, batch, hq, hk, hd, scale, kv_dtype, f8, false};
    cpu_parallel_for(CPU(be), (int64_t)batch->n_tokens * hq, 2, attn_task, &c);
    if (atomic_load(&c.failed))
        return nl_error(NL_ERR_NOMEM, "attention: no memory for the scores of %d context tokens",
                        batch->max_context_len);
    return NL_OK;
}

/* ---- silu_mul, gather_rows ---------------------------------------------- */

struct silu_ctx {
    float *out;
    const float *gate_up;
    int32_t inter;
};

static void silu_task(void *ctx_, int64_t begin, int64_t end)
{
    struct silu_ctx *c = ctx_;
    for (int64_t i = begin; i < end; i++) {
        const float *g = c->gate_up + i * 2 * c->inter, *u = g + c->inter;
        float *o = c->out + i * c->inter;
        for (int32_t j = 0; j < c->inter; j++) o[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
}

nl_status cpu_silu_mul(nl_backend *be, void *out, const void *gate_up, int32_t n, int32_t inter)
{
    struct silu_ctx c = {out, gate_up, inter};
    cpu_parallel_for(CPU(be), n, ROWS_MIN_PARALLEL, silu_task, &c);
    return NL_OK;
}

nl_status cpu_norm_linear(nl_backend *be, void *out, void *xn, void *work, const void *x,
                          void *residual, const nl_weight *norm_w, float eps, const nl_weight *w,
                          const nl_weight *bias, int32_t n, bool silu_mul)
{
    if (silu_mul && w->rows % 2 != 0)
        return nl_error(NL_ERR_INVALID_ARG, "norm_linear: gate_up weight has %lld rows, not gate "
                        "and up halves", (long long)w->rows);
    NL_TRY(cpu_rmsnorm(be, xn, x ? x : residual, x ? residual : NULL, norm_w, n, (int32_t)w->cols, eps));
    if (!silu_mul) return cpu_linear(be, out, xn, w, bias, n);
    NL_TRY(cpu_linear(be, work, xn, w, bias, n));
    return cpu_silu_mul(be, out, work, n, (int32_t)(w->rows / 2));
}

nl_status cpu_linear_add(nl_backend *be, void *residual_, void *work_, const void *x,
                         const nl_weight *w, const nl_weight *bias, int32_t n)
{
    NL_TRY(cpu_linear(be, work_, x, w, bias, n));
    float *residual = residual_;
    const float *work = work_;
    for (size_t i = 0; i < (size_t)n * (size_t)w->rows; i++) residual[i] += work[i];
    return NL_OK;
}

nl_status cpu_take_ids(nl_backend *be, int32_t *ids, const int32_t *src, const int32_t *pairs, int32_t n)
{
    for (int32_t k = 0; k < n; k++) ids[pairs[2 * k]] = src[pairs[2 * k + 1]];
    return NL_OK;
}

nl_status cpu_gather_rows(nl_backend *be, void *out, const void *x, const int32_t *rows, int32_t m,
                          int32_t dim)
{
    for (int32_t i = 0; i < m; i++)
        memmove((float *)out + (size_t)i * dim, (const float *)x + (size_t)rows[i] * dim,
                sizeof(float) * (size_t)dim);
    return NL_OK;
}
