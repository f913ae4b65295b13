/* attention_decode.cuh — what the decode attention kernels share: the
 * parameters of a step's context splits, each split's size, and the merge
 * of a block's softmax states into its output (the step's output, a
 * split's partial, or, for the splits of a cluster, each other's shared
 * memory).  attention_decode.cu holds the CUDA-core kernel and the
 * launcher; attention_decode_mma.cu the tensor-core kernel.
 */
#ifndef NL_KERNELS_CUDA_ATTENTION_DECODE_CUH
#define NL_KERNELS_CUDA_ATTENTION_DECODE_CUH

#include <cooperative_groups.h>
#include <math.h>

#include "kernels/cuda/attention.cuh"

#define DEC_WARPS 4
#define DEC_CLUSTER_MAX 16   /* splits merged inside one cluster at most    */

struct dec_params : attn_args {
    float *part_o;            /* [n_seqs * hq * n_splits, hd]                */
    float *part_ml;           /* [n_seqs * hq * n_splits, 2]                 */
    int n_slices;             /* blocks per kv head's group                  */
    int block_shift;          /* log2 block_size, < 0: not a power of two    */
    int n_splits;             /* blocks per (sequence, kv head, slice)      */
    int min_chunk;            /* keys per split at least                     */
    const int32_t *order;     /* [n_seqs] seqs in launch order, or NULL     */
};

/* Keys per split of a sequence of ctx keys: the context spread over the
 * splits, rounded to 64 keys, never under min_chunk.  The decode kernel
 * and the merge must agree on it. */
static __device__ __forceinline__ int dec_chunk(int ctx, int n_splits, int min_chunk)
{
    int c = (ctx + n_splits - 1) / n_splits;
    c = (c + 63) / 64 * 64;
    return c > min_chunk ? c : min_chunk;
}

/* A block's share of the step from its index: split, sequence (through
 * the launch order), kv head and slice of its query heads, and the keys
 * [k_begin, k_end) of that split of the sequence's context (none when
 * k_begin >= k_end).  The step's inputs (orders, contexts) were uploaded
 * before the kernels before this one ran, so a block reads them before
 * pdl_wait. */
struct dec_share {
    int split, seq, kvh, slice, ctx, k_begin, k_end;
};

static __device__ __forceinline__ dec_share dec_share_of(const dec_params &p)
{
    dec_share d;
    d.split = blockIdx.x;
    d.seq = p.order ? p.order[blockIdx.z] : blockIdx.z;
    d.kvh = blockIdx.y / p.n_slices;
    d.slice = blockIdx.y % p.n_slices;
    d.ctx = p.context_lens[d.seq];
    const int chunk = dec_chunk(d.ctx, p.n_splits, p.min_chunk);
    d.k_begin = d.split * chunk;
    d.k_end = min(d.ctx, d.k_begin + chunk);
    return d;
}

/* The splits of one (sequence, kv head) as one cluster (gridDim.x blocks,
 * one a split).  The outputs of the kv head's query heads are shared out
 * in slices of `per`, one a block; each block pushes its split's partial
 * (o of each output, m and l of each head) into the shared memory of the
 * block that finishes it, so one cluster barrier hands everything over and
 * each block then merges its slice from its own memory (no block reads
 * another's, so none waits for the others to leave).  Empty splits push
 * m = -inf and weigh nothing.  Hopper only: dec_launch takes clusters
 * only there. */
struct dec_cluster {
    int n, per; /* blocks, outputs a block finishes */
};

static __device__ __forceinline__ dec_cluster dec_cluster_of(int nh, int hd)
{
    const int n = (int)gridDim.x;
    return {n, (nh * hd + n - 1) / n};
}

/* Barrier phases of the cluster (PTX barrier.cluster): every block arrives
 * once at its start, and waits for that phase just before its first push,
 * so that no block writes into one that has not started. */
static __device__ __forceinline__ void dec_cluster_arrive(bool release)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (release)
        asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
    else
        asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
#else
    __trap();
#endif
}

static __device__ __forceinline__ void dec_cluster_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#else
    __trap();
#endif
}

/* The address of `local`'s twin in the shared memory of block `rank` of
 * the cluster. */
static __device__ __forceinline__ float *dec_cluster_at(float *local, int rank)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(local, rank);
#else
    __trap();
    return local;
#endif
}

/* Block `split`'s partial of output idx (head gi, element d) to the block
 * that finishes it; the thread of each head's first element also sends
 * the head's m and l to every block. */
template <int G, int HD>
static __device__ __forceinline__ void dec_cluster_push(float *cl_o, float (*cl_ml)[G][2],
                                                        dec_cluster c, int split, int idx, int gi,
                                                        int d, float o, float m, float l)
{
    const int rank = idx / c.per;
    dec_cluster_at(cl_o, rank)[split * c.per + idx - rank * c.per] = o;
    if (d == 0)
        for (int r = 0; r < c.n; r++) {
            float *ml = dec_cluster_at(&cl_ml[split][gi][0], r);
            ml[0] = m;
            ml[1] = l;
        }
}

/* After the barrier: this block's slice of outputs from every split's
 * partial, normalised and written. */
template <int G, int HD>
static __device__ void dec_cluster_finish(const dec_params &p, const float *cl_o,
                                          float (*cl_ml)[G][2], dec_cluster c, int split, int nh,
                                          int h0, int tok)
{
    const int first = split * c.per, last = min(nh * HD, first + c.per);
    for (int idx = first + (int)threadIdx.x; idx < last; idx += blockDim.x) {
        const int gi = idx / HD, d = idx % HD;
        float mx = -INFINITY;
        for (int s = 0; s < c.n; s++) mx = fmaxf(mx, cl_ml[s][gi][0]);
        float sum_l = 0.0f, sum_o = 0.0f;
        for (int s = 0; s < c.n; s++)
            if (cl_ml[s][gi][0] != -INFINITY) {
                const float w = exp2f(cl_ml[s][gi][0] - mx);
                sum_l = fmaf(w, cl_ml[s][gi][1], sum_l);
                sum_o = fmaf(w, cl_o[s * c.per + idx - first], sum_o);
            }
        const float inv = sum_l > 0.0f ? 1.0f / sum_l : 0.0f;
        p.out[((size_t)tok * p.hq + h0 + gi) * HD + d] = __float2bfloat16(sum_o * inv);
    }
}

/* The block's PARTS softmax states (each with its o, m and l in shared
 * memory, written before the call) merged into this block's result: the
 * step's output when the context is not split, the split's partial when
 * it is, or, in a cluster, the pushes to the block that finishes each
 * output and then that block's slice. */
template <int PARTS, int G, int HD, bool CLUSTER>
static __device__ __forceinline__ void dec_finish(const dec_params &p, float (*sh_o)[G][HD],
                                                  float (*sh_m)[G], float (*sh_l)[G], float *cl_o,
                                                  float (*cl_ml)[G][2], int split, int seq,
                                                  int tok, int h0, int nh)
{
    __syncthreads();

    dec_cluster cl{};
    if constexpr (CLUSTER) {
        cl = dec_cluster_of(nh, HD);
        dec_cluster_wait(); /* every block of the cluster has started */
    }
    for (int idx = threadIdx.x; idx < nh * HD; idx += blockDim.x) {
        const int gi = idx / HD, d = idx % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int pp = 0; pp < PARTS; pp++) mx = fmaxf(mx, sh_m[pp][gi]);
        float sum_l = 0.0f, sum_o = 0.0f;
        if (mx != -INFINITY) {
#pragma unroll
            for (int pp = 0; pp < PARTS; pp++) {
                const float w = exp2f(sh_m[pp][gi] - mx);
                sum_l = fmaf(w, sh_l[pp][gi], sum_l);
                sum_o = fmaf(w, sh_o[pp][gi][d], sum_o);
            }
        }
        const int h = h0 + gi;
        if constexpr (CLUSTER) {
            dec_cluster_push<G, HD>(cl_o, cl_ml, cl, split, idx, gi, d, sum_o, mx, sum_l);
        } else if (p.n_splits == 1) {
            const float inv = sum_l > 0.0f ? 1.0f / sum_l : 0.0f;
            p.out[((size_t)tok * p.hq + h) * HD + d] = __float2bfloat16(sum_o * inv);
        } else {
            const size_t row = ((size_t)seq * p.hq + h) * p.n_splits + split;
            p.part_o[row * HD + d] = sum_o;
            if (d == 0) {
                p.part_ml[row * 2] = mx;
                p.part_ml[row * 2 + 1] = sum_l;
            }
        }
    }
    if constexpr (CLUSTER) {
        dec_cluster_arrive(true); /* the pushes, released */
        dec_cluster_wait();
        dec_cluster_finish<G, HD>(p, cl_o, cl_ml, cl, split, nh, h0, tok);
    }
}

typedef void (*dec_kernel)(dec_params);

/* The tensor-core decode kernel for batches of more than a few sequences
 * (attention_decode_mma.cu) and the dynamic shared memory it is launched
 * with; no kernel where it has no form: head_dim other than 128 or a block
 * size that is not a power of two of at least 16. */
struct dec_mma {
    dec_kernel kernel;
    size_t smem;
};
dec_mma dec_mma_kernel(int hd, int g, bool kv_fp8, int block_shift);

#endif
