/* elementwise.cu — the row-wise kernels around the GEMMs: embedding lookup,
 * fused residual-add + RMSNorm, Qwen3 QK-norm + NeoX RoPE with the KV-cache
 * store, SiLU-and-multiply and row gathers.
 *
 * All are memory bound, so rows move in 16-byte vectors (8 bf16) wherever the
 * width allows, and every intermediate is fp32.  Rounding follows the
 * reference model in bf16: a normalised value is rounded before its weight
 * multiplies it, and silu(gate) is rounded before it meets up.
 */
#include "kernels/cuda/cuda_common.cuh"

#define VEC 8 /* bf16 per 16-byte vector */

struct alignas(16) bf16x8 {
    __nv_bfloat162 h[4];
};

static __device__ __forceinline__ void unpack8(const bf16x8 &v, float *f)
{
    bf16x8_to_float(*(const uint4 *)&v, f);
}

static __device__ __forceinline__ bf16x8 pack8(const float *f)
{
    bf16x8 v;
#pragma unroll
    for (int i = 0; i < 4; i++) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return v;
}

static inline bool aligned16(const void *p)
{
    return ((uintptr_t)p & 15) == 0;
}

static __device__ float block_sum(float v, float *shared32)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) shared32[warp] = v;
    __syncthreads();
    int nw = (blockDim.x + 31) >> 5;
    v = lane < nw ? shared32[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads(); /* shared32 may be reused by the caller */
    return v;
}

/* ---- embedding: one block per token ------------------------------------------- */

__global__ void kernel_embedding(bf16 *out /* [n, cols] */, const bf16 *table /* [rows, cols] */,
                                 const int32_t *ids, int64_t rows, int64_t cols,
                                 int32_t vocab_start, bool vec)
{
    pdl_wait();
    pdl_release();
    int t = blockIdx.x;
    int64_t r = (int64_t)ids[t] - vocab_start;
    bool inside = r >= 0 && r < rows;
    bf16 *dst = out + (size_t)t * cols;
    const bf16 *src = table + (size_t)(inside ? r : 0) * cols;
    if (vec) {
        bf16x8 zero = {};
        for (int64_t c = threadIdx.x; c < cols / VEC; c += blockDim.x)
            ((bf16x8 *)dst)[c] = inside ? ((const bf16x8 *)src)[c] : zero;
    } else {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
            dst[c] = inside ? src[c] : __float2bfloat16(0.0f);
    }
}

nl_status cuda_embedding(nl_backend *b, void *out, const nl_weight *table, const int32_t *ids,
                         int32_t n, int32_t vocab_start)
{
    cuda_backend *be = cuda_be(b);
    if (n <= 0) return NL_OK;
    bool vec = table->cols % VEC == 0 && aligned16(out);
    NL_CUDA_CHECK(cuda_launch(be, kernel_embedding, n, 256, 0, (bf16 *)out, table->data, ids,
                              table->rows, table->cols, vocab_start, vec));
    return NL_OK;
}

/* ---- residual add + RMSNorm: one block per row ---------------------------------- */

/* Each thread touches the same elements in both passes, so out may alias x
 * and the residual written in pass one is read back by its own writer. */
__global__ void kernel_rmsnorm_vec(bf16 *out, const bf16 *x, bf16 *residual, const bf16 *w,
                                   int dim, float eps)
{
    pdl_wait();
    pdl_release();
    __shared__ float red[32];
    size_t base = (size_t)blockIdx.x * dim;
    const bf16x8 *xv = (const bf16x8 *)(x + base);
    bf16x8 *rv = residual ? (bf16x8 *)(residual + base) : NULL;
    int nv = dim / VEC;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float f[VEC];
        unpack8(xv[i], f);
        if (rv) {
            float r[VEC];
            unpack8(rv[i], r);
#pragma unroll
            for (int j = 0; j < VEC; j++) f[j] = round_bf16(f[j] + r[j]);
            rv[i] = pack8(f);
        }
#pragma unroll
        for (int j = 0; j < VEC; j++) ss += f[j] * f[j];
    }
    float inv = rsqrtf(block_sum(ss, red) / dim + eps);
    const bf16x8 *src = rv ? rv : xv;
    bf16x8 *ov = (bf16x8 *)(out + base);
    const bf16x8 *wv = (const bf16x8 *)w;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float f[VEC], g[VEC];
        unpack8(src[i], f);
        unpack8(wv[i], g);
#pragma unroll
        for (int j = 0; j < VEC; j++) f[j] = rms_weighted1(f[j], inv, g[j]);
        ov[i] = pack8(f);
    }
}

__global__ void kernel_rmsnorm(bf16 *out, const bf16 *x, bf16 *residual, const bf16 *w, int dim,
                               float eps)
{
    pdl_wait();
    pdl_release();
    __shared__ float red[32];
    size_t base = (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float f = __bfloat162float(x[base + i]);
        if (residual) {
            f = round_bf16(f + __bfloat162float(residual[base + i]));
            residual[base + i] = __float2bfloat16(f);
        }
        ss += f * f;
    }
    float inv = rsqrtf(block_sum(ss, red) / dim + eps);
    const bf16 *src = residual ? residual : x;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float f = __bfloat162float(src[base + i]);
        out[base + i] = __float2bfloat16(rms_weighted1(f, inv, __bfloat162float(w[i])));
    }
}

nl_status cuda_rmsnorm(nl_backend *b, void *out, const void *x, void *residual,
                       const nl_weight *w, int32_t n, int32_t dim, float eps)
{
    cuda_backend *be = cuda_be(b);
    if (n <= 0) return NL_OK;
    if (w->rows * w->cols != dim)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: rmsnorm weight has %lld values, dim is %d",
                        (long long)(w->rows * w->cols), dim);
    bool vec = dim % VEC == 0 && aligned16(out) && aligned16(x) &&
               (!residual || aligned16(residual));
    int threads = dim / (vec ? VEC : 1);
    threads = threads >= 1024 ? 1024 : ((threads + 31) / 32) * 32;
    if (vec)
        NL_CUDA_CHECK(cuda_launch(be, kernel_rmsnorm_vec, n, threads, 0, (bf16 *)out,
                                  (const bf16 *)x, (bf16 *)residual, w->data, dim, eps));
    else
        NL_CUDA_CHECK(cuda_launch(be, kernel_rmsnorm, n, threads, 0, (bf16 *)out, (const bf16 *)x,
                                  (bf16 *)residual, w->data, dim, eps));
    return NL_OK;
}

/* ---- QK-norm + RoPE + KV-cache store: one warp per (token, head) ----------------- */

static __device__ __forceinline__ void kv_put(bf16 *p, float v) { *p = __float2bfloat16(v); }
static __device__ __forceinline__ void kv_put(fp8 *p, float v)
{
    /* round to nearest even, saturating at +-448: the bytes of the host's
     * nl_f32_to_f8e4m3 */
    *(__nv_fp8_storage_t *)p = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* NeoX rotary embedding of one pair (a, b) = (x[i], x[i + hd/2]) by the
 * angle whose cosine and sine are c and s; the caller rounds. */
static __device__ __forceinline__ float2 rope_turn(float a, float b, float c, float s)
{
    return make_float2(a * c - b * s, b * c + a * s);
}

#define ROPE_PAIRS 4 /* a lane's rotary pairs whose angles come before the wait: hd <= 256 */

/* Warps of heads [0, hq + hk) normalise and rotate a q or k head in place;
 * k heads, and the warps of the v heads after them, also write their row
 * into the cache at the token's slot (none for a negative slot), as the
 * bf16 value qkv now holds, converted to KV.  Lane l owns the rotary pairs
 * (i, i + hd/2) for i = l, l + 32, ...; the frequencies come from the
 * host's fp32 table (common/model_rope.h), the angle is their fp32 product
 * with the position as in the reference, and sincosf (not the fast
 * intrinsic) keeps large positions accurate. */
template <typename KV>
__global__ void kernel_qk_norm_rope_store(bf16 *qkv, const int32_t *positions, const bf16 *q_norm,
                                          const bf16 *k_norm, const float *inv_freq,
                                          KV *k_cache, KV *v_cache, const int32_t *slots, int hq,
                                          int hk, int hd, float eps)
{
    int warps = blockDim.x >> 5;
    int head = blockIdx.y * warps + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    int t = blockIdx.x;
    if (head >= hq + 2 * hk) return;
    /* The step's positions and slots were uploaded before the kernels
     * before this one ran: they, and the angles of this lane's first
     * ROPE_PAIRS pairs, come before the wait for the projection's qkv. */
    const int32_t slot = slots[t];
    const float pos = (float)positions[t];
    const int half = hd / 2;
    float cs[ROPE_PAIRS], sn[ROPE_PAIRS];
#pragma unroll
    for (int k = 0; k < ROPE_PAIRS; k++)
        if (head < hq + hk && lane + 32 * k < half) sincosf(pos * inv_freq[lane + 32 * k], &sn[k], &cs[k]);
    pdl_wait();
    pdl_release();
    bf16 *x = qkv + (size_t)t * (hq + 2 * hk) * hd + (size_t)head * hd;
    if (head >= hq + hk) { /* a v head: the store alone */
        if (slot < 0) return;
        KV *dst = v_cache + ((size_t)slot * hk + (head - hq - hk)) * hd;
        for (int i = lane; i < hd; i += 32) kv_put(dst + i, __bfloat162float(x[i]));
        return;
    }
    KV *dst = head >= hq && slot >= 0 ? k_cache + ((size_t)slot * hk + (head - hq)) * hd : NULL;
    const bf16 *w = head < hq ? q_norm : k_norm;
    float inv = 1.0f;
    if (w) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) {
            float v = __bfloat162float(x[i]);
            ss += v * v;
        }
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        inv = rsqrtf(ss / hd + eps);
    }
    auto rotate = [&](int i, float s, float c) {
        float a = __bfloat162float(x[i]), b = __bfloat162float(x[i + half]);
        if (w) {
            a = round_bf16(rms_weighted1(a, inv, __bfloat162float(w[i])));
            b = round_bf16(rms_weighted1(b, inv, __bfloat162float(w[i + half])));
        }
        const float2 t = rope_turn(a, b, c, s);
        const bf16 lo = __float2bfloat16(t.x), hi = __float2bfloat16(t.y);
        x[i] = lo;
        x[i + half] = hi;
        if (dst) {
            kv_put(dst + i, __bfloat162float(lo));
            kv_put(dst + i + half, __bfloat162float(hi));
        }
    };
#pragma unroll
    for (int k = 0; k < ROPE_PAIRS; k++)
        if (lane + 32 * k < half) rotate(lane + 32 * k, sn[k], cs[k]);
    for (int i = lane + 32 * ROPE_PAIRS; i < half; i += 32) {
        float s, c;
        sincosf(pos * inv_freq[i], &s, &c);
        rotate(i, s, c);
    }
}

/* The same op, a block per token (and group of heads), when hd % 16 == 0:
 * the token's rotary angles are computed once into shared memory (before
 * the wait: positions are uploaded with the step) instead of once per head,
 * and a head is LPH lanes, lane j owning elements [8j, 8j + 8) of each half,
 * so every access is a 16-byte vector (8 bytes for an e4m3 cache row).  The
 * arithmetic and its roundings are the per-warp kernel's. */
#define ROPE_VEC_THREADS 256
/* Steps of at most this many tokens keep the per-warp kernel: there a
 * token's heads spread over several SMs, where the vector kernel holds them
 * in one block (batch 1 measured 0.3% slower with it, the bench 1% faster). */
#define ROPE_VEC_MIN_TOKENS 4

static __device__ __forceinline__ void kv_put8(bf16 *p, const bf16x8 &v) { *(bf16x8 *)p = v; }
static __device__ __forceinline__ void kv_put8(fp8 *p, const bf16x8 &v)
{
    uint2 out;
    __nv_fp8x2_storage_t *o = (__nv_fp8x2_storage_t *)&out;
#pragma unroll
    for (int i = 0; i < 4; i++)
        o[i] = __nv_cvt_float2_to_fp8x2(__bfloat1622float2(v.h[i]), __NV_SATFINITE, __NV_E4M3);
    *(uint2 *)p = out;
}

template <typename KV>
__global__ void __launch_bounds__(ROPE_VEC_THREADS)
    kernel_qk_norm_rope_store_vec(bf16 *qkv, const int32_t *positions, const bf16 *q_norm,
                                  const bf16 *k_norm, const float *inv_freq, KV *k_cache,
                                  KV *v_cache, const int32_t *slots, int hq, int hk, int hd,
                                  float eps, int lph)
{
    extern __shared__ float angles[]; /* cos of the half's pairs, then sin */
    const int t = blockIdx.x, half = hd / 2;
    const int head = blockIdx.y * (blockDim.x / lph) + threadIdx.x / lph;
    const int j = threadIdx.x % lph, i0 = 8 * j;
    float *cs = angles, *sn = angles + half;
    const float pos = (float)positions[t];
    const int32_t slot = slots[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) sincosf(pos * inv_freq[i], &sn[i], &cs[i]);
    __syncthreads();
    pdl_wait();
    pdl_release();
    if (head >= hq + 2 * hk) return;
    const bool live = i0 < half; /* hd 80, 96: lanes past the half idle */
    bf16 *x = qkv + ((size_t)t * (hq + 2 * hk) + head) * hd;
    if (head >= hq + hk) { /* a v head: the store alone */
        if (slot >= 0 && live) {
            KV *dst = v_cache + ((size_t)slot * hk + (head - hq - hk)) * hd;
            kv_put8(dst + i0, *(const bf16x8 *)(x + i0));
            kv_put8(dst + half + i0, *(const bf16x8 *)(x + half + i0));
        }
        return;
    }
    float a[VEC] = {}, b[VEC] = {};
    if (live) {
        unpack8(*(const bf16x8 *)(x + i0), a);
        unpack8(*(const bf16x8 *)(x + half + i0), b);
    }
    const bf16 *w = head < hq ? q_norm : k_norm;
    if (w) {
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; e++) ss += a[e] * a[e] + b[e] * b[e];
        /* the head's lanes only: a warp may end in v heads, which left */
        const unsigned lanes = (lph == 32 ? 0xffffffffu : (1u << lph) - 1u)
                               << ((threadIdx.x & 31) & ~(lph - 1));
        for (int o = lph / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(lanes, ss, o);
        const float inv = rsqrtf(ss / hd + eps);
        if (live) {
            float wa[VEC], wb[VEC];
            unpack8(*(const bf16x8 *)(w + i0), wa);
            unpack8(*(const bf16x8 *)(w + half + i0), wb);
#pragma unroll
            for (int e = 0; e < VEC; e++) {
                a[e] = round_bf16(rms_weighted1(a[e], inv, wa[e]));
                b[e] = round_bf16(rms_weighted1(b[e], inv, wb[e]));
            }
        }
    }
    if (!live) return;
    float lo[VEC], hi[VEC];
#pragma unroll
    for (int e = 0; e < VEC; e++) {
        const float2 t = rope_turn(a[e], b[e], cs[i0 + e], sn[i0 + e]);
        lo[e] = t.x;
        hi[e] = t.y;
    }
    const bf16x8 vlo = pack8(lo), vhi = pack8(hi);
    *(bf16x8 *)(x + i0) = vlo;
    *(bf16x8 *)(x + half + i0) = vhi;
    if (head >= hq && slot >= 0) {
        KV *dst = k_cache + ((size_t)slot * hk + (head - hq)) * hd;
        kv_put8(dst + i0, vlo);
        kv_put8(dst + half + i0, vhi);
    }
}

nl_status cuda_qk_norm_rope_store(nl_backend *b, void *qkv, const int32_t *positions,
                                  const nl_weight *q_norm, const nl_weight *k_norm,
                                  const float *inv_freq, void *k_cache, void *v_cache,
                                  const int32_t *slots, int32_t n, int32_t hq, int32_t hk,
                                  int32_t hd, float eps, int32_t block_size, nl_dtype kv_dtype)
{
    cuda_backend *be = cuda_be(b);
    if (kv_dtype != NL_DTYPE_BF16 && kv_dtype != NL_DTYPE_F8_E4M3)
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: a %s KV cache (BF16 or F8_E4M3)",
                        nl_dtype_name(kv_dtype));
    if (n <= 0) return NL_OK;
    if (hd % 2 != 0)
        return nl_error(NL_ERR_INVALID_ARG, "cuda: rope head_dim %d is odd", hd);
    if ((q_norm && q_norm->rows * q_norm->cols != hd) ||
        (k_norm && k_norm->rows * k_norm->cols != hd))
        return nl_error(NL_ERR_INVALID_ARG, "cuda: q/k norm weights must have head_dim %d values",
                        hd);
    if (!inv_freq) return nl_error(NL_ERR_INVALID_ARG, "cuda: rope has no inv_freq table");
    const bf16 *qn = q_norm ? q_norm->data : NULL, *kn = k_norm ? k_norm->data : NULL;
    if (n > ROPE_VEC_MIN_TOKENS && hd % 16 == 0 && hd <= 512 && aligned16(qkv) &&
        aligned16(qn) && aligned16(kn)) {
        const int lph = pow2_ceil(hd / 16); /* lanes a head */
        const int per_block = ROPE_VEC_THREADS / lph;
        const dim3 vgrid(n, (hq + 2 * hk + per_block - 1) / per_block);
        const size_t smem = (size_t)hd * sizeof(float);
        if (kv_dtype == NL_DTYPE_BF16)
            NL_CUDA_CHECK(cuda_launch(be, kernel_qk_norm_rope_store_vec<bf16>, vgrid,
                                      ROPE_VEC_THREADS, smem, (bf16 *)qkv, positions, qn, kn,
                                      inv_freq, (bf16 *)k_cache, (bf16 *)v_cache, slots, hq, hk,
                                      hd, eps, lph));
        else
            NL_CUDA_CHECK(cuda_launch(be, kernel_qk_norm_rope_store_vec<fp8>, vgrid,
                                      ROPE_VEC_THREADS, smem, (bf16 *)qkv, positions, qn, kn,
                                      inv_freq, (fp8 *)k_cache, (fp8 *)v_cache, slots, hq, hk,
                                      hd, eps, lph));
        return NL_OK;
    }
    const int warps = 8;
    dim3 grid(n, (hq + 2 * hk + warps - 1) / warps);
    if (kv_dtype == NL_DTYPE_BF16)
        NL_CUDA_CHECK(cuda_launch(be, kernel_qk_norm_rope_store<bf16>, grid, warps * 32, 0,
                                  (bf16 *)qkv, positions, qn, kn, inv_freq, (bf16 *)k_cache,
                                  (bf16 *)v_cache, slots, hq, hk, hd, eps));
    else
        NL_CUDA_CHECK(cuda_launch(be, kernel_qk_norm_rope_store<fp8>, grid, warps * 32, 0,
                                  (bf16 *)qkv, positions, qn, kn, inv_freq, (fp8 *)k_cache,
                                  (fp8 *)v_cache, slots, hq, hk, hd, eps));
    return NL_OK;
}

/* ---- SiLU * up --------------------------------------------------------------------- */

__global__ void kernel_silu_mul_vec(bf16 *out, const bf16 *gate_up, int n, int inter)
{
    pdl_wait();
    pdl_release();
    int per_row = inter / VEC;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * per_row) return;
    int t = (int)(idx / per_row), j = (int)(idx % per_row);
    const bf16x8 *g = (const bf16x8 *)(gate_up + (size_t)t * 2 * inter);
    const bf16x8 *u = (const bf16x8 *)(gate_up + (size_t)t * 2 * inter + inter);
    float fg[VEC], fu[VEC];
    unpack8(g[j], fg);
    unpack8(u[j], fu);
#pragma unroll
    for (int i = 0; i < VEC; i++) fg[i] = silu_mul1(fg[i], fu[i]);
    ((bf16x8 *)(out + (size_t)t * inter))[j] = pack8(fg);
}

__global__ void kernel_silu_mul(bf16 *out, const bf16 *gate_up, int n, int inter)
{
    pdl_wait();
    pdl_release();
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * inter) return;
    int t = (int)(idx / inter), j = (int)(idx % inter);
    const bf16 *row = gate_up + (size_t)t * 2 * inter;
    out[(size_t)t * inter + j] =
        __float2bfloat16(silu_mul1(__bfloat162float(row[j]), __bfloat162float(row[inter + j])));
}

nl_status cuda_silu_mul(nl_backend *b, void *out, const void *gate_up, int32_t n,
                        int32_t inter)
{
    cuda_backend *be = cuda_be(b);
    if (n <= 0) return NL_OK;
    int threads = 256;
    bool vec = inter % VEC == 0 && aligned16(out) && aligned16(gate_up);
    int64_t total = (int64_t)n * inter / (vec ? VEC : 1);
    unsigned blocks = (unsigned)((total + threads - 1) / threads);
    if (vec)
        NL_CUDA_CHECK(cuda_launch(be, kernel_silu_mul_vec, blocks, threads, 0, (bf16 *)out,
                                  (const bf16 *)gate_up, n, inter));
    else
        NL_CUDA_CHECK(cuda_launch(be, kernel_silu_mul, blocks, threads, 0, (bf16 *)out,
                                  (const bf16 *)gate_up, n, inter));
    return NL_OK;
}

/* ---- residual add: residual += x, one 16-byte vector a thread ---------------------- */

__global__ void kernel_add(bf16 *residual, const bf16 *x, size_t count)
{
    pdl_wait();
    pdl_release();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i * VEC + VEC <= count) {
        float r[VEC], f[VEC];
        unpack8(((const bf16x8 *)residual)[i], r);
        unpack8(((const bf16x8 *)x)[i], f);
#pragma unroll
        for (int j = 0; j < VEC; j++) r[j] += f[j];
        ((bf16x8 *)residual)[i] = pack8(r);
    } else {
        for (size_t j = i * VEC; j < count; j++)
            residual[j] = __float2bfloat16(__bfloat162float(residual[j]) + __bfloat162float(x[j]));
    }
}

nl_status cuda_add(nl_backend *b, void *residual, const void *x, size_t count)
{
    cuda_backend *be = cuda_be(b);
    if (count == 0) return NL_OK;
    if (!aligned16(residual) || !aligned16(x))
        return nl_error(NL_ERR_UNSUPPORTED, "cuda: residual add needs 16-byte aligned buffers");
    const int threads = 256;
    const size_t vectors = (count + VEC - 1) / VEC;
    NL_CUDA_CHECK(cuda_launch(be, kernel_add, (unsigned)((vectors + threads - 1) / threads), threads,
                              0, (bf16 *)residual, (const bf16 *)x, count));
    return NL_OK;
}

/* ---- take ids: a step's placeholder inputs from the last step's samples ---------- */

/* A dependent launch like the forward's kernels: the ids it writes are
 * read by the embedding after that kernel's own pdl_wait, which waits for
 * this one to finish. */
__global__ void kernel_take_ids(int32_t *ids, const int32_t *src, const int32_t *pairs, int n)
{
    pdl_wait();
    pdl_release();
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) ids[pairs[2 * k]] = src[pairs[2 * k + 1]];
}

nl_status cuda_take_ids(nl_backend *b, int32_t *ids, const int32_t *src, const int32_t *pairs, int32_t n)
{
    if (n <= 0) return NL_OK;
    NL_CUDA_CHECK(cuda_launch(cuda_be(b), kernel_take_ids, (n + 255) / 256, 256, 0, ids, src,
                              pairs, n));
    return NL_OK;
}

/* ---- copy pieces: a step's inputs and samples across the bus, by kernel ---------- */

struct copy_pieces_arg {
    nl_copy_piece piece[NL_COPY_PIECES_MAX];
};

/* Block (x, y) copies rows y, y + gridDim.y, ... of piece x in W-byte
 * words.  A dependent launch, so it sits on the SMs while the sampler
 * finishes, but one that never releases the next kernel early: the
 * forward's kernels read the step's inputs (contexts, block tables) before
 * their own pdl_wait, so none may start before what this copies is in
 * place. */
template <typename W>
__global__ void kernel_copy_pieces(copy_pieces_arg a)
{
    pdl_wait();
    const nl_copy_piece p = a.piece[blockIdx.x];
    const size_t words = p.row_bytes / sizeof(W);
    for (size_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
        const W *src = (const W *)((const uint8_t *)p.src + r * p.src_pitch);
        W *dst = (W *)((uint8_t *)p.dst + r * p.dst_pitch);
        for (size_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
    }
}

nl_status cuda_copy_pieces(nl_backend *b, const nl_copy_piece *pieces, int32_t n)
{
    if (n < 0 || n > NL_COPY_PIECES_MAX)
        return nl_error(NL_ERR_INVALID_ARG, "copy_pieces: %d pieces, at most %d", n, NL_COPY_PIECES_MAX);
    copy_pieces_arg a;
    int used = 0;
    size_t rows = 1;
    uintptr_t bits = 0; /* every address, pitch and length, for the word size */
    for (int32_t i = 0; i < n; i++) {
        const nl_copy_piece *p = &pieces[i];
        if (p->rows == 0 || p->row_bytes == 0) continue;
        a.piece[used++] = *p;
        bits |= (uintptr_t)p->dst | (uintptr_t)p->src | p->dst_pitch | p->src_pitch | p->row_bytes;
        if (p->rows > rows) rows = p->rows;
    }
    if (used == 0) return NL_OK;
    const dim3 grid((unsigned)used, (unsigned)(rows < 64 ? rows : 64));
    const cuda_backend *be = cuda_be(b);
    if (bits % 16 == 0) NL_CUDA_CHECK(cuda_launch(be, kernel_copy_pieces<uint4>, grid, 256, 0, a));
    else if (bits % 4 == 0) NL_CUDA_CHECK(cuda_launch(be, kernel_copy_pieces<uint32_t>, grid, 256, 0, a));
    else NL_CUDA_CHECK(cuda_launch(be, kernel_copy_pieces<uint8_t>, grid, 256, 0, a));
    return NL_OK;
}

/* ---- gather rows: one block per output row -------------------------------------- */

__global__ void kernel_gather_rows(bf16 *out, const bf16 *x, const int32_t *rows, int dim,
                                   bool vec)
{
    pdl_wait();
    pdl_release();
    const bf16 *src = x + (size_t)rows[blockIdx.x] * dim;
    bf16 *dst = out + (size_t)blockIdx.x * dim;
    if (vec) {
        for (int i = threadIdx.x; i < dim / VEC; i += blockDim.x)
            ((bf16x8 *)dst)[i] = ((const bf16x8 *)src)[i];
    } else {
        for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = src[i];
    }
}

nl_status cuda_gather_rows(nl_backend *b, void *out, const void *x, const int32_t *rows,
                           int32_t m, int32_t dim)
{
    cuda_backend *be = cuda_be(b);
    if (m <= 0) return NL_OK;
    bool vec = dim % VEC == 0 && aligned16(out) && aligned16(x);
    NL_CUDA_CHECK(cuda_launch(be, kernel_gather_rows, m, 256, 0, (bf16 *)out, (const bf16 *)x, rows,
                              dim, vec));
    return NL_OK;
}
