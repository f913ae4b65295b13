/* cpu_backend.h — what the CPU backend's files share: the backend object,
 * the fp32 weight, and the small thread pool that splits loops.
 *
 * Everything on the CPU is fp32 in host memory: activations, the KV cache
 * (unless it is asked to be bf16 or e4m3) and weights (converted from
 * bf16/f16 when filled).  Matrix products go to
 * OpenBLAS, which keeps its own threads; the pool here runs the other ops.
 */
#ifndef NL_KERNELS_CPU_BACKEND_H
#define NL_KERNELS_CPU_BACKEND_H

#include <pthread.h>

#include "kernels/kernels.h"

struct nl_weight {
    int64_t rows, cols;
    float *data; /* [rows, cols], 64-byte aligned, zero until filled */
};

/* A loop body: handles items [begin, end) of a parallel loop. */
typedef void (*cpu_task_fn)(void *ctx, int64_t begin, int64_t end);

typedef struct cpu_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped for every loop handed out */
    int pending;         /* workers that have not finished the current loop */
    bool stop;
    cpu_task_fn fn;
    void *ctx;
    int64_t n_items;
} cpu_pool;

typedef struct cpu_backend {
    nl_backend base;
    cpu_pool pool;
    /* NANOLLM_PROFILE=ops: the ops run synchronously, so a mark is the
     * monotonic clock's reading */
    double timer_at[NL_TIMER_MAX_MARKS];
    int32_t timer_tags[NL_TIMER_MAX_MARKS];
    int32_t timer_marks;
} cpu_backend;

/* Runs fn over [0, n) split into contiguous chunks, one per thread; small
 * loops (n < min_parallel) run on the caller alone. */
void cpu_parallel_for(cpu_backend *be, int64_t n, int64_t min_parallel, cpu_task_fn fn,
                      void *ctx);

/* The ops, in cpu_ops.c and cpu_sample.c. */
nl_status cpu_embedding(nl_backend *be, void *out, const nl_weight *table, const int32_t *ids,
                        int32_t n, int32_t vocab_start);
nl_status cpu_rmsnorm(nl_backend *be, void *out, const void *x, void *residual,
                      const nl_weight *w, int32_t n, int32_t dim, float eps);
nl_status cpu_linear(nl_backend *be, void *out, const void *x, const nl_weight *w,
                     const nl_weight *bias, int32_t n);
nl_status cpu_linear_f32(nl_backend *be, float *out, const void *x, const nl_weight *w,
                         int32_t n);
nl_status cpu_qk_norm_rope(nl_backend *be, void *qkv, const int32_t *positions,
                           const nl_weight *q_norm, const nl_weight *k_norm, const float *inv_freq,
                           int32_t n, int32_t hq, int32_t hk, int32_t hd, float eps);
nl_status cpu_store_kv(nl_backend *be, void *k_cache, void *v_cache, const void *qkv,
                       const int32_t *slots, int32_t n, int32_t hq, int32_t hk, int32_t hd,
                       int32_t block_size, nl_dtype kv_dtype);
nl_status cpu_qk_norm_rope_store(nl_backend *be, void *qkv, const int32_t *positions,
                                 const nl_weight *q_norm, const nl_weight *k_norm,
                                 const float *inv_freq, void *k_cache, void *v_cache,
                                 const int32_t *slots, int32_t n, int32_t hq, int32_t hk, int32_t hd,
                                 float eps, int32_t block_size, nl_dtype kv_dtype);
nl_status cpu_attention(nl_backend *be, void *out, const void *qkv, const void *k_cache,
                        const void *v_cache, const nl_attn_batch *batch, int32_t hq,
                        int32_t hk, int32_t hd, float scale, nl_dtype kv_dtype);
nl_status cpu_silu_mul(nl_backend *be, void *out, const void *gate_up, int32_t n,
                       int32_t inter);
nl_status cpu_norm_linear(nl_backend *be, void *out, void *xn, void *work, const void *x,
                          void *residual, const nl_weight *norm_w, float eps, const nl_weight *w,
                          const nl_weight *bias, int32_t n, bool silu_mul);
nl_status cpu_linear_add(nl_backend *be, void *residual, void *work, const void *x,
                         const nl_weight *w, const nl_weight *bias, int32_t n);
nl_status cpu_take_ids(nl_backend *be, int32_t *ids, const int32_t *src, const int32_t *pairs, int32_t n);
nl_status cpu_gather_rows(nl_backend *be, void *out, const void *x, const int32_t *rows,
                          int32_t m, int32_t dim);
nl_status cpu_sample(nl_backend *be, const float *logits, int32_t m, int32_t vocab,
                     const nl_sample_row *rows, int32_t *ids, float *logprobs,
                     int32_t *top_ids, float *top_logprobs);

#endif
