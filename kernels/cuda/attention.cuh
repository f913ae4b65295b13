/* attention.cuh — the entry points the attention kernel files export to the
 * dispatcher in attention.cu, and the small PTX helpers they share (16-byte
 * cp.async, ldmatrix, bf16 mma.sync).  Every entry point has already had its
 * arguments checked, and the shared parameters filled, by cuda_attention.
 */
#ifndef NL_KERNELS_CUDA_ATTENTION_CUH
#define NL_KERNELS_CUDA_ATTENTION_CUH

#include "kernels/cuda/cuda_common.cuh"

#define NL_LOG2E 1.4426950408889634f

/* What every attention kernel reads, filled once by cuda_attention from the
 * op's arguments.  Each kernel's parameter struct extends it with what only
 * that kernel needs (context splits, scratch pointers), so a field means the
 * same thing in all three. */
struct attn_args {
    bf16 *out;                   /* [n, hq * hd]                             */
    const bf16 *qkv;             /* [n, (hq + 2 hk) * hd]                    */
    const void *k_cache;         /* [num_blocks, block_size, hk, hd] of bf16,
                                    or of fp8 when kv_fp8 (kernels.h)        */
    const void *v_cache;
    bool kv_fp8;
    const int32_t *cu_seqlens_q; /* [n_seqs + 1]                             */
    const int32_t *context_lens; /* [n_seqs]                                 */
    const int32_t *block_tables; /* [n_seqs, max_blocks_per_seq]             */
    int hq, hk, group, hd;       /* group = hq / hk query heads per kv head  */
    int block_size, max_blocks_per_seq;
    float scale_log2;            /* softmax scale * log2(e)                  */
};

/* The scratch the split kernels keep their partials in, as floats. */
static inline float *attn_scratch(const cuda_backend *be)
{
    return (float *)be->step_scratch;
}

static inline size_t attn_scratch_floats(const cuda_backend *be)
{
    return be->step_scratch_bytes / sizeof(float);
}

/* Decode (every q_len == 1), GQA groups of any size, head_dim 32, 64, 80, 96,
 * 128 or 256:
 * one block per (context split, sequence, kv head, group slice). */
nl_status cuda_attention_decode(cuda_backend *be, const attn_args *a, const nl_attn_batch *b);

/* Prefill and mixed batches on tensor cores, head_dim 32, 64, 80, 96, 128 or
 * 256. */
nl_status cuda_attention_prefill(cuda_backend *be, const attn_args *a, const nl_attn_batch *b);

/* The first CUDA-core kernel for both cases, for any head_dim that is a
 * multiple of 8 up to 256: the path for head dims without a specialised
 * kernel, and a reference (NL_ATTN_GENERIC=1) to compare those against. */
nl_status cuda_attention_generic(cuda_backend *be, const attn_args *a, const nl_attn_batch *b);

/* Eight cache elements (bf16 or fp8 KV) as eight bf16, the 16-byte piece
 * of a shared-memory K/V row; the fp8 conversion is exact. */
template <typename KV>
static __device__ __forceinline__ uint4 attn_load8_as_bf16(const KV *p)
{
    if constexpr (sizeof(KV) == 2) {
        return *(const uint4 *)p;
    } else {
        float f[8];
        fp8x8_to_float(*(const uint2 *)p, f);
        uint4 r;
        uint32_t *w = (uint32_t *)&r;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
            w[i] = *(uint32_t *)&h;
        }
        return r;
    }
}

static __device__ __forceinline__ void attn_cp_async16(void *smem, const void *gmem)
{
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

static __device__ __forceinline__ void attn_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void attn_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 bf16 matrices; lane l gives the row address of matrix l / 8. */
static __device__ __forceinline__ void attn_ldsm_x4(uint32_t r[4], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

static __device__ __forceinline__ void attn_ldsm_x4_trans(uint32_t r[4], const bf16 *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* c[16x8] += a[16x16] * b[16x8], bf16 inputs, fp32 accumulators. */
static __device__ __forceinline__ void attn_mma_bf16(float c[4], const uint32_t a[4], uint32_t b0,
                                                     uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The same with fp16 inputs (an e4m3 cache's K/V, converted exactly). */
static __device__ __forceinline__ void attn_mma_f16(float c[4], const uint32_t a[4], uint32_t b0,
                                                    uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t attn_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

#endif
