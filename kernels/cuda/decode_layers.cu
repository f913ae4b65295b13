/* decode_layers.cu — every decoder layer of a one-token step in one kernel.
 *
 * At one token a layer is six small kernels (qkv, QK-norm + RoPE + store,
 * attention, o, gate_up, down) whose bytes take ~7.5 us at 0.6B but whose
 * boundaries cost 1.5-2.5 us each: the grid's completion, the next grid's
 * ramp and first loads.  Here one block an SM runs every layer, and a grid
 * barrier (an arrival count and a generation word in global memory,
 * ~1.6 us on an H200) stands where a kernel boundary stood.  The weights
 * do not depend on the activations, so each phase starts its first weight
 * loads before it waits at the barrier: the next phase's bytes are in
 * flight while the last blocks finish the phase before.
 *
 * Phases of a layer, each over every block:
 *   1. qkv: each block normalises the residual itself into shared memory,
 *      then its share of the rows (gemv_rows, as the one-token GEMV);
 *   2. attention: a block per (kv head, context split).  Each block
 *      normalises and rotates its group's query heads and the new key
 *      itself (as the per-warp QK-norm + RoPE kernel rounds them) and
 *      reads the new key and value from shared memory; the block of split
 *      0 stores them in the cache.  Its warps take the split's keys in
 *      turn with an online softmax each, the block merges its warps, and
 *      the last block of a kv head to finish (an arrival count) merges the
 *      splits into the attention output;
 *   3. o: residual += attention @ W_o^T;
 *   4. gate_up: silu(g) * u of the normalised residual;
 *   5. down: residual += that @ W_down^T.
 * The final norm, the LM head and the sampler stay kernels of their own.
 *
 * The split count depends on the grid alone, never on the context, and
 * each block sizes its split from context_lens at run time: so a graph
 * captured once serves every context, and the eager step computes what
 * the graph does.  Activations written by other blocks inside the kernel
 * are read through L2 (ld.global.cg): an SM's L1 is not kept coherent
 * with other SMs' writes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gemv.cuh"

#define DL_THREADS (GEMV_WARPS * 32)
/* Blocks an SM (PER_SM, a template parameter): one block of 16 warps
 * with up to 128 registers a thread and 8 pieces a lane in flight, or two
 * with up to 64 and 4: the same bytes in flight an SM either way.
 * NANOLLM_DECODE_LAYERS_PER_SM picks; DL_PER_SM is the default. */
#define DL_PER_SM 1
/* NANOLLM_DECODE_LAYERS=1 or 0 turns the kernel on or off; DL_DEFAULT
 * says what a one-token step at tp 1 runs without it. */
#define DL_DEFAULT 0
#define DL_SPLIT_KEYS 32  /* keys a context split takes: two a warp */
#define DL_MAX_SPLITS 64  /* splits of a kv head at most (the merge's buffer) */

struct dl_layer { /* one layer's device pointers; NULL: the weight is absent */
    const bf16 *input_norm, *qkv, *qkv_bias, *q_norm, *k_norm, *o, *o_bias;
    const bf16 *post_norm, *gate_up, *gate_up_bias, *down, *down_bias;
    void *k_cache, *v_cache;
};

struct dl_params {
    const dl_layer *layers;
    int n_layers;
    bf16 *residual, *qkv, *attn, *mlp;
    const int32_t *positions, *slots, *context_lens, *block_tables;
    const float *inv_freq;
    float *part;    /* [hk * n_splits][group * (hd + 2)]: each split's o, m, l */
    unsigned *sync; /* [0] arrivals, [1] generation, [2 + h] kv head h's splits done */
    int hidden, hq, hk, group, inter, block_size, n_splits;
    int ks_qkv, ks_o, ks_gate_up, ks_down; /* gemv_rows' row splits */
    float eps, scale_log2;
    unsigned long long *trace; /* NULL, or per phase ns summed by block 0 (dl_trace) */
};

/* NANOLLM_DECODE_LAYERS_TRACE=1: block 0 adds the time between the grid
 * barriers' exits, each phase's critical path and its barrier, to
 * trace[phase] (qkv, attention, o, gate_up, down) and counts the launches
 * in trace[DL_PHASES]; the plan prints the means when it is freed. */
enum { DL_QKV, DL_ATTN, DL_O, DL_GATE_UP, DL_DOWN, DL_PHASES };
static const char *const dl_phase_names[DL_PHASES] = {"qkv", "attention", "o", "gate_up", "down"};

static __device__ __forceinline__ unsigned long long dl_now(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

/* Every block arrives; the last one resets the count and opens the next
 * generation; the others wait for it.  gen: the block's copy of the
 * generation it waits to leave. */
static __device__ __forceinline__ void dl_grid_barrier(unsigned *sync, unsigned *gen)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(&sync[0], 1u) == gridDim.x - 1) {
            atomicExch(&sync[0], 0u);
            __threadfence();
            atomicExch(&sync[1], g + 1);
        } else {
            unsigned now;
            do {
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(sync + 1) : "memory");
            } while (now == g);
        }
        __threadfence();
        *gen = g + 1;
    }
    __syncthreads();
}

static __device__ __forceinline__ void dl_put(bf16 *p, float v) { *p = __float2bfloat16(v); }
static __device__ __forceinline__ void dl_put(fp8 *p, float v)
{
    /* as the QK-norm + RoPE kernel stores it: nearest even, saturating */
    *(__nv_fp8_storage_t *)p = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

/* EPL consecutive cache elements (EPL = 2, 4) as floats; p may point to
 * global or shared memory. */
template <int EPL>
static __device__ __forceinline__ void dl_load(const bf16 *p, float *f)
{
    if constexpr (EPL == 4) {
        const uint2 v = *(const uint2 *)p;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
        const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
        f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
    } else {
        const float2 a = __bfloat1622float2(*(const __nv_bfloat162 *)p);
        f[0] = a.x, f[1] = a.y;
    }
}

template <int EPL>
static __device__ __forceinline__ void dl_load(const fp8 *p, float *f)
{
    const __nv_fp8x2_storage_t *q = (const __nv_fp8x2_storage_t *)p;
#pragma unroll
    for (int i = 0; i < EPL / 2; i++) {
        const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q[i], __NV_E4M3)));
        f[2 * i] = t.x, f[2 * i + 1] = t.y;
    }
}

/* Shared memory of the attention phase, carved from the kernel's dynamic
 * buffer (the qkv and gate_up phases use its start for the normalised x). */
template <typename KV, int HD, int G>
struct dl_attn_smem {
    float q[G][HD];              /* the group's rotated query heads     */
    float wm[GEMV_WARPS][G];     /* each warp's running max and sum     */
    float wl[GEMV_WARPS][G];
    float wo[GEMV_WARPS][G][HD]; /* ... and unnormalised output          */
    alignas(16) KV knew[HD];     /* the new key and value, as cached    */
    alignas(16) KV vnew[HD];
    float sw[DL_MAX_SPLITS][G];  /* the merge: each split's m, then its weight */
    float sl[DL_MAX_SPLITS][G];  /* ... and l                           */
    float total[G];              /* each head's merged l                */
    int last;                    /* this block merges the kv head's splits */
};

/* Warp wi < g normalises and rotates query head h * g + wi into s.q, warp
 * g the new key, warp g + 1 copies the new value; the key and value go to
 * s.knew and s.vnew as the cache holds them, and, from the block of split
 * 0, into the cache at the token's slot.  The roundings are those of the
 * per-warp QK-norm + RoPE kernel. */
template <typename KV, int HD, int G>
static __device__ void dl_prepare_heads(const dl_params &p, const dl_layer &L, int h, int split,
                                        dl_attn_smem<KV, HD, G> &s, const float *cs,
                                        const float *sn)
{
    constexpr int HALF = HD / 2;
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, g = p.group;
    if (wi > g + 1) return;
    const int head = wi < g ? h * g + wi : wi == g ? p.hq + h : p.hq + p.hk + h;
    const bf16 *x = p.qkv + (size_t)head * HD;
    const bf16 *w = wi < g ? L.q_norm : wi == g ? L.k_norm : NULL;
    float a[HALF / 32], b[HALF / 32];
    float ss = 0.0f; /* summed in the per-warp kernel's order: lane, lane + 32, ... */
#pragma unroll
    for (int j = 0; j < HALF / 32; j++) {
        a[j] = __bfloat162float(__ldcg(x + lane + 32 * j));
        b[j] = __bfloat162float(__ldcg(x + lane + 32 * j + HALF));
    }
#pragma unroll
    for (int j = 0; j < HALF / 32; j++) ss += a[j] * a[j];
#pragma unroll
    for (int j = 0; j < HALF / 32; j++) ss += b[j] * b[j];
    const int32_t slot = p.slots[0];
    KV *dst = NULL;
    if (wi >= g && split == 0 && slot >= 0)
        dst = (KV *)(wi == g ? L.k_cache : L.v_cache) + ((size_t)slot * p.hk + h) * HD;
    KV *mine = wi == g ? s.knew : s.vnew;
    if (wi <= g) {
        if (w) {
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float inv = rsqrtf(ss / HD + p.eps);
#pragma unroll
            for (int j = 0; j < HALF / 32; j++) {
                const int i = lane + 32 * j;
                a[j] = round_bf16(rms_weighted1(a[j], inv, __bfloat162float(w[i])));
                b[j] = round_bf16(rms_weighted1(b[j], inv, __bfloat162float(w[i + HALF])));
            }
        }
#pragma unroll
        for (int j = 0; j < HALF / 32; j++) {
            const int i = lane + 32 * j;
            const float lo = round_bf16(a[j] * cs[i] - b[j] * sn[i]);
            const float hi = round_bf16(b[j] * cs[i] + a[j] * sn[i]);
            a[j] = lo, b[j] = hi;
        }
    }
#pragma unroll
    for (int j = 0; j < HALF / 32; j++) {
        const int i = lane + 32 * j;
        if (wi < g) {
            s.q[wi][i] = a[j];
            s.q[wi][i + HALF] = b[j];
        } else {
            dl_put(mine + i, a[j]);
            dl_put(mine + i + HALF, b[j]);
            if (dst) {
                dl_put(dst + i, a[j]);
                dl_put(dst + i + HALF, b[j]);
            }
        }
    }
}

/* The splits a context of ctx keys uses: one per DL_SPLIT_KEYS keys, at
 * most n_splits (the grid's), so a short context spreads over few blocks
 * and merges few partials.  Computed from context_lens on the device, as
 * everything else, so a graph replays what the eager step does. */
static __device__ __forceinline__ int dl_splits_of(int ctx, int n_splits)
{
    const int want = (ctx + DL_SPLIT_KEYS - 1) / DL_SPLIT_KEYS;
    return want < 1 ? 1 : want < n_splits ? want : n_splits;
}

/* One (kv head h, split) of the attention phase: the split's keys over the
 * block's warps, then the warps merged into the split's partial in p.part;
 * the kv head's last split to finish merges them all into p.attn. */
template <typename KV, int HD, int G, int PER_SM>
static __device__ void dl_attention_split(const dl_params &p, const dl_layer &L, int h, int split,
                                          dl_attn_smem<KV, HD, G> &s, const float *cs,
                                          const float *sn)
{
    constexpr int EPL = HD / 32; /* a lane's elements of a head row */
    constexpr int U = PER_SM == 1 ? 2 : 1; /* keys a warp loads before it uses any */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = p.group;
    const int ctx = p.context_lens[0], n_used = dl_splits_of(ctx, p.n_splits);
    if (split >= n_used) return; /* every block alike: no barrier skipped */
    const int chunk = (ctx + n_used - 1) / n_used;
    dl_prepare_heads<KV, HD, G>(p, L, h, split, s, cs, sn);
    __syncthreads();

    const int k0 = split * chunk, k1 = min(ctx, k0 + chunk);
    float q[G][EPL], o[G][EPL], m[G], l[G];
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        m[gi] = -INFINITY, l[gi] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            q[gi][e] = gi < g ? s.q[gi][lane * EPL + e] : 0.0f;
            o[gi][e] = 0.0f;
        }
    }
    const KV *kc = (const KV *)L.k_cache, *vc = (const KV *)L.v_cache;
    for (int t0 = k0 + warp; t0 < k1; t0 += GEMV_WARPS * U) {
        float kf[U][EPL], vf[U][EPL];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int t = t0 + u * GEMV_WARPS;
            if (t >= k1) continue;
            const KV *kp = s.knew, *vp = s.vnew;
            if (t != ctx - 1) {
                const int32_t blk = p.block_tables[t / p.block_size];
                const size_t row = ((size_t)blk * p.block_size + t % p.block_size) * p.hk + h;
                kp = kc + row * HD, vp = vc + row * HD;
            }
            dl_load<EPL>(kp + lane * EPL, kf[u]);
            dl_load<EPL>(vp + lane * EPL, vf[u]);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (t0 + u * GEMV_WARPS >= k1) continue;
#pragma unroll
            for (int gi = 0; gi < G; gi++) {
                if (gi >= g) continue;
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) d = fmaf(q[gi][e], kf[u][e], d);
                for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(0xffffffffu, d, off);
                const float sc = d * p.scale_log2, mn = fmaxf(m[gi], sc);
                const float c = exp2f(m[gi] - mn), pr = exp2f(sc - mn);
                l[gi] = l[gi] * c + pr;
#pragma unroll
                for (int e = 0; e < EPL; e++) o[gi][e] = fmaf(o[gi][e], c, pr * vf[u][e]);
                m[gi] = mn;
            }
        }
    }
#pragma unroll
    for (int gi = 0; gi < G; gi++) {
        if (gi >= g) continue;
        if (lane == 0) s.wm[warp][gi] = m[gi], s.wl[warp][gi] = l[gi];
#pragma unroll
        for (int e = 0; e < EPL; e++) s.wo[warp][gi][lane * EPL + e] = o[gi][e];
    }
    __syncthreads();

    /* the block's warps merged into the split's partial */
    const int stride = g * (HD + 2);
    float *part = p.part + (size_t)(h * p.n_splits + split) * stride;
    for (int i = threadIdx.x; i < g * HD; i += DL_THREADS) {
        const int gi = i / HD, d = i % HD;
        float mx = -INFINITY;
        for (int w = 0; w < GEMV_WARPS; w++) mx = fmaxf(mx, s.wm[w][gi]);
        float sum_l = 0.0f, sum_o = 0.0f;
        if (mx != -INFINITY)
            for (int w = 0; w < GEMV_WARPS; w++) {
                const float c = exp2f(s.wm[w][gi] - mx);
                sum_l += s.wl[w][gi] * c;
                sum_o += s.wo[w][gi][d] * c;
            }
        part[gi * HD + d] = sum_o;
        if (d == 0) part[g * HD + 2 * gi] = mx, part[g * HD + 2 * gi + 1] = sum_l;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        s.last = atomicAdd(&p.sync[2 + h], 1u) == (unsigned)n_used - 1;
        if (s.last) atomicExch(&p.sync[2 + h], 0u);
    }
    __syncthreads();
    if (!s.last) return;
    __threadfence();
    /* the splits' m and l staged in shared memory, each head's weights
     * computed once, then every output sums its splits' o with loads in
     * flight together (a split's loads do not wait for the one before) */
    const float *parts = p.part + (size_t)h * p.n_splits * stride;
    for (int i = threadIdx.x; i < n_used * g; i += DL_THREADS) {
        const int sp = i / g, gi = i % g;
        s.sw[sp][gi] = __ldcg(parts + sp * stride + g * HD + 2 * gi);
        s.sl[sp][gi] = __ldcg(parts + sp * stride + g * HD + 2 * gi + 1);
    }
    __syncthreads();
    if ((int)threadIdx.x < g) {
        const int gi = threadIdx.x;
        float mx = -INFINITY, total = 0.0f;
        for (int sp = 0; sp < n_used; sp++) mx = fmaxf(mx, s.sw[sp][gi]);
        for (int sp = 0; sp < n_used; sp++) {
            const float c = s.sw[sp][gi] == -INFINITY ? 0.0f : exp2f(s.sw[sp][gi] - mx);
            s.sw[sp][gi] = c;
            total += s.sl[sp][gi] * c;
        }
        s.total[gi] = total;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < g * HD; i += DL_THREADS) {
        const int gi = i / HD;
        float sum_o = 0.0f;
#pragma unroll 8
        for (int sp = 0; sp < n_used; sp++) sum_o += __ldcg(parts + sp * stride + i) * s.sw[sp][gi];
        p.attn[(size_t)h * g * HD + i] = __float2bfloat16(sum_o / s.total[gi]);
    }
}

template <typename KV, int HD, int G, int PER_SM>
__global__ void __launch_bounds__(DL_THREADS, PER_SM) kernel_decode_layers(dl_params p)
{
    extern __shared__ uint4 dl_smem[];
    __shared__ unsigned gen;
    __shared__ float cs[HD / 2], sn[HD / 2];
    auto &as = *(dl_attn_smem<KV, HD, G> *)dl_smem;
    __shared__ unsigned long long traced; /* block 0: the last barrier's exit */
    if (threadIdx.x == 0) gen = *(volatile unsigned *)&p.sync[1], traced = dl_now();
    /* a grid barrier that ends phase `ended` (the lambdas capture values
     * only: a reference to the parameters would copy them to the stack) */
    unsigned *const sync = p.sync;
    unsigned long long *const trace = p.trace;
    const auto barrier = [sync, trace](int ended) {
        dl_grid_barrier(sync, &gen);
        if (trace && blockIdx.x == 0 && threadIdx.x == 0) {
            const unsigned long long now = dl_now();
            trace[ended] += now - traced;
            traced = now;
        }
    };
    if (p.trace && blockIdx.x == 0 && threadIdx.x == 0) p.trace[DL_PHASES] += 1;
    /* the token's rotary angles, the same for every layer (sincosf, not
     * the fast intrinsic: large positions stay accurate) */
    const float pos = (float)p.positions[0];
    for (int i = threadIdx.x; i < HD / 2; i += DL_THREADS) sincosf(pos * p.inv_freq[i], &sn[i], &cs[i]);
    __syncthreads();
    const int qkv_rows = (p.hq + 2 * p.hk) * HD, attn_cols = p.hq * HD;
    for (int li = 0; li < p.n_layers; li++) {
        const dl_layer &L = p.layers[li];
        /* the first phase waits for nothing: the embedding ran before the launch */
        gemv_rows<bf16, GEMV_STORE, true, 0, true, 8 / PER_SM>(p.qkv, p.residual, L.qkv, L.qkv_bias, qkv_rows,
                                                   p.hidden, L.input_norm, p.eps, p.ks_qkv, dl_smem,
                                                   [barrier, li] { if (li > 0) barrier(DL_DOWN); });
        barrier(DL_QKV);
        for (int item = blockIdx.x; item < p.hk * p.n_splits; item += gridDim.x) {
            dl_attention_split<KV, HD, G, PER_SM>(p, L, item / p.n_splits, item % p.n_splits, as, cs, sn);
            __syncthreads();
        }
        gemv_rows<bf16, GEMV_ADD, false, 0, true, 8 / PER_SM, true>(p.residual, p.attn, L.o, L.o_bias, p.hidden,
                                                  attn_cols, NULL, 0.0f, p.ks_o, dl_smem,
                                                  [barrier] { barrier(DL_ATTN); });
        gemv_rows<bf16, GEMV_SILU_MUL, true, 0, true, 4 / PER_SM>(p.mlp, p.residual, L.gate_up, L.gate_up_bias,
                                                      p.inter, p.hidden, L.post_norm, p.eps,
                                                      p.ks_gate_up, dl_smem,
                                                      [barrier] { barrier(DL_O); });
        gemv_rows<bf16, GEMV_ADD, false, 0, true, 8 / PER_SM, true>(p.residual, p.mlp, L.down, L.down_bias, p.hidden,
                                                  p.inter, NULL, 0.0f, p.ks_down, dl_smem,
                                                  [barrier] { barrier(DL_GATE_UP); });
    }
}

/* ---- host side ------------------------------------------------------------------- */

typedef void (*dl_kernel)(dl_params);

struct cuda_decode_plan {
    dl_params p;       /* every field but the step's inputs */
    dl_layer *layers;  /* device copy of the layer table */
    dl_kernel kernel;
    int blocks;
    size_t smem;
};

template <typename KV, int HD, int G>
static dl_kernel dl_pick_one(int per_sm, size_t *smem)
{
    *smem = sizeof(dl_attn_smem<KV, HD, G>);
    return per_sm == 1 ? kernel_decode_layers<KV, HD, G, 1> : kernel_decode_layers<KV, HD, G, 2>;
}

template <typename KV, int HD>
static dl_kernel dl_pick_group(int group, int per_sm, size_t *smem)
{
    if (group <= 2) return dl_pick_one<KV, HD, 2>(per_sm, smem);
    if (group <= 4) return dl_pick_one<KV, HD, 4>(per_sm, smem);
    return dl_pick_one<KV, HD, 8>(per_sm, smem);
}

static dl_kernel dl_pick(nl_dtype kv, int hd, int group, int per_sm, size_t *smem)
{
    if (kv == NL_DTYPE_BF16)
        return hd == 64 ? dl_pick_group<bf16, 64>(group, per_sm, smem)
                        : dl_pick_group<bf16, 128>(group, per_sm, smem);
    return hd == 64 ? dl_pick_group<fp8, 64>(group, per_sm, smem)
                    : dl_pick_group<fp8, 128>(group, per_sm, smem);
}

static bool dl_aligned(const nl_weight *w) { return !w || ((uintptr_t)w->data & 15) == 0; }
static const bf16 *dl_ptr(const nl_weight *w) { return w ? w->data : NULL; }
static bool dl_shape(const nl_weight *w, int64_t rows, int64_t cols)
{
    return w && w->rows == rows && w->cols == cols && dl_aligned(w);
}
static bool dl_vector(const nl_weight *w, int64_t n) { return !w || w->rows * w->cols == n; }

/* Whether the kernel takes the model (anything else keeps the per-op path). */
static bool dl_takes(const cuda_backend *be, const nl_decode_model *m)
{
    const char *env = getenv("NANOLLM_DECODE_LAYERS");
    if (env ? strcmp(env, "1") != 0 : !DL_DEFAULT) return false;
    if (m->kv_dtype != NL_DTYPE_BF16 && m->kv_dtype != NL_DTYPE_F8_E4M3) return false;
    if ((m->hd != 64 && m->hd != 128) || m->hk <= 0 || m->hq % m->hk != 0 || m->hq / m->hk > 8)
        return false;
    if (m->hidden % 8 != 0 || m->hidden > CUDA_GEMV_NORM_MAX_COLS || m->inter % 8 != 0 ||
        m->block_size <= 0 || m->n_layers <= 0 || !m->inv_freq)
        return false;
    const int64_t qkv = (int64_t)(m->hq + 2 * m->hk) * m->hd, attn = (int64_t)m->hq * m->hd;
    for (int l = 0; l < m->n_layers; l++) {
        const nl_decode_layer *L = &m->layers[l];
        if (!dl_shape(L->qkv, qkv, m->hidden) || !dl_shape(L->o_proj, m->hidden, attn) ||
            !dl_shape(L->gate_up, 2 * (int64_t)m->inter, m->hidden) ||
            !dl_shape(L->down, m->hidden, m->inter) || !L->input_norm || !L->post_norm ||
            !dl_aligned(L->input_norm) || !dl_aligned(L->post_norm) ||
            !dl_vector(L->input_norm, m->hidden) || !dl_vector(L->post_norm, m->hidden) ||
            !dl_vector(L->q_norm, m->hd) || !dl_vector(L->k_norm, m->hd) ||
            !dl_vector(L->qkv_bias, qkv) || !dl_vector(L->o_bias, m->hidden) ||
            !dl_vector(L->gate_up_bias, 2 * (int64_t)m->inter) ||
            !dl_vector(L->down_bias, m->hidden) || !L->k_cache || !L->v_cache)
            return false;
    }
    int coop = 0;
    cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, be->device);
    return coop != 0;
}

nl_status cuda_decode_layers_prepare(nl_backend *b, const nl_decode_model *m, void **out)
{
    cuda_backend *be = cuda_be(b);
    *out = NULL;
    if (!dl_takes(be, m)) return NL_OK;
    size_t attn_smem = 0;
    const char *env = getenv("NANOLLM_DECODE_LAYERS_PER_SM");
    const int want = env && (strcmp(env, "1") == 0 || strcmp(env, "2") == 0) ? atoi(env) : DL_PER_SM;
    const dl_kernel kernel = dl_pick(m->kv_dtype, m->hd, m->hq / m->hk, want, &attn_smem);
    /* the attention phase's buffers, or the x a projection reads: the
     * normalised residual, the attention output, the MLP's activations */
    size_t smem = attn_smem;
    const int64_t xs[] = {m->hidden, (int64_t)m->hq * m->hd, m->inter};
    for (int i = 0; i < 3; i++)
        if ((size_t)xs[i] * sizeof(bf16) > smem) smem = (size_t)xs[i] * sizeof(bf16);
    NL_CUDA_CHECK(cudaFuncSetAttribute((const void *)kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = cuda_blocks_per_sm(kernel, DL_THREADS, smem);
    if (per_sm < 1) return NL_OK;
    if (per_sm > want) per_sm = want;

    cuda_decode_plan *plan = (cuda_decode_plan *)calloc(1, sizeof *plan);
    if (!plan) return nl_error(NL_ERR_NOMEM, "decode layers: no memory for the plan");
    plan->kernel = kernel;
    plan->smem = smem;
    plan->blocks = be->num_sms * per_sm;
    dl_params &p = plan->p;
    p.n_layers = m->n_layers;
    p.hidden = m->hidden, p.hq = m->hq, p.hk = m->hk, p.group = m->hq / m->hk;
    p.inter = m->inter, p.block_size = m->block_size;
    p.n_splits = plan->blocks / m->hk > 0 ? plan->blocks / m->hk : 1;
    if (p.n_splits > DL_MAX_SPLITS) p.n_splits = DL_MAX_SPLITS;
    p.eps = m->eps;
    p.scale_log2 = 1.4426950408889634f / sqrtf((float)m->hd);
    p.inv_freq = m->inv_freq;
    const long long warps = (long long)plan->blocks * GEMV_WARPS;
    p.ks_qkv = gemv_split_of((m->hq + 2 * m->hk) * m->hd, m->hidden, warps);
    p.ks_o = gemv_split_of(m->hidden, m->hq * m->hd, warps);
    p.ks_gate_up = gemv_split_of(m->inter, m->hidden, warps);
    p.ks_down = gemv_split_of(m->hidden, m->inter, warps);

    dl_layer *host = (dl_layer *)calloc((size_t)m->n_layers, sizeof *host);
    if (!host) {
        free(plan);
        return nl_error(NL_ERR_NOMEM, "decode layers: no memory for %d layers", m->n_layers);
    }
    for (int l = 0; l < m->n_layers; l++) {
        const nl_decode_layer *L = &m->layers[l];
        host[l] = (dl_layer){dl_ptr(L->input_norm), dl_ptr(L->qkv), dl_ptr(L->qkv_bias),
                             dl_ptr(L->q_norm), dl_ptr(L->k_norm), dl_ptr(L->o_proj),
                             dl_ptr(L->o_bias), dl_ptr(L->post_norm), dl_ptr(L->gate_up),
                             dl_ptr(L->gate_up_bias), dl_ptr(L->down), dl_ptr(L->down_bias),
                             L->k_cache, L->v_cache};
    }
    const size_t part_floats = (size_t)m->hk * p.n_splits * p.group * (m->hd + 2);
    const size_t sync_words = 2 + (size_t)m->hk;
    cudaError_t e = cudaMalloc((void **)&plan->layers, (size_t)m->n_layers * sizeof *host);
    if (e == cudaSuccess)
        e = cudaMemcpy(plan->layers, host, (size_t)m->n_layers * sizeof *host, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMalloc((void **)&p.part, part_floats * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&p.sync, sync_words * sizeof(unsigned));
    if (e == cudaSuccess) e = cudaMemset(p.sync, 0, sync_words * sizeof(unsigned));
    const char *trace = getenv("NANOLLM_DECODE_LAYERS_TRACE");
    if (e == cudaSuccess && trace && strcmp(trace, "1") == 0) {
        e = cudaMalloc((void **)&p.trace, (DL_PHASES + 1) * sizeof *p.trace);
        if (e == cudaSuccess) e = cudaMemset(p.trace, 0, (DL_PHASES + 1) * sizeof *p.trace);
    }
    free(host);
    p.layers = plan->layers;
    if (e != cudaSuccess) {
        cuda_decode_layers_free(b, plan);
        return nl_error(NL_ERR_NOMEM, "decode layers: %s", cudaGetErrorString(e));
    }
    *out = plan;
    return NL_OK;
}

nl_status cuda_decode_layers(nl_backend *b, void *plan_v, const nl_decode_step *st)
{
    cuda_backend *be = cuda_be(b);
    const cuda_decode_plan *plan = (const cuda_decode_plan *)plan_v;
    const nl_attn_batch *ab = st->batch;
    if (!plan || ab->n_seqs != 1 || ab->n_tokens != 1)
        return nl_error(NL_ERR_INVALID_ARG, "decode layers: one sequence of one token (got %d, %d)",
                        ab->n_seqs, ab->n_tokens);
    if (ab->block_size != plan->p.block_size)
        return nl_error(NL_ERR_INVALID_ARG, "decode layers: cache blocks of %d tokens, planned %d",
                        ab->block_size, plan->p.block_size);
    dl_params p = plan->p;
    p.residual = (bf16 *)st->residual, p.qkv = (bf16 *)st->qkv;
    p.attn = (bf16 *)st->attn, p.mlp = (bf16 *)st->mlp;
    p.positions = st->positions, p.slots = st->slots;
    p.context_lens = ab->context_lens, p.block_tables = ab->block_tables;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)plan->blocks);
    cfg.blockDim = dim3(DL_THREADS);
    cfg.dynamicSmemBytes = plan->smem;
    cfg.stream = be->stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    NL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, plan->kernel, p));
    return NL_OK;
}

void cuda_decode_layers_free(nl_backend *b, void *plan_v)
{
    (void)b;
    cuda_decode_plan *plan = (cuda_decode_plan *)plan_v;
    if (!plan) return;
    unsigned long long t[DL_PHASES + 1];
    if (plan->p.trace && cudaMemcpy(t, plan->p.trace, sizeof t, cudaMemcpyDeviceToHost) == cudaSuccess &&
        t[DL_PHASES] > 0) {
        const double per = 1e3 * (double)t[DL_PHASES] * plan->p.n_layers;
        fprintf(stderr, "decode layers trace (%llu launches, %d blocks, us a layer):", t[DL_PHASES],
                plan->blocks);
        for (int i = 0; i < DL_PHASES; i++) fprintf(stderr, " %s %.2f", dl_phase_names[i], t[i] / per);
        fprintf(stderr, "\n");
    }
    cudaFree(plan->p.trace);
    cudaFree(plan->layers);
    cudaFree(plan->p.part);
    cudaFree(plan->p.sync);
    free(plan);
}
