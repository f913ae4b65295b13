/* kernels.h — the op interface a model is written against.
 *
 * A backend (kernels/cpu, kernels/cuda) fills an nl_backend_ops table; the
 * model code in worker/ calls the nl_op_* wrappers below and never knows which
 * backend runs.  All pointers passed to ops are *backend memory* (from
 * nl_backend_alloc); the host reaches it only through upload/download.
 *
 * Activations and the KV cache use the backend's act_dtype (CPU: F32, CUDA:
 * BF16); accumulation is always fp32.  Weights are opaque nl_weight handles
 * filled from host data of any dtype, so a worker can load just its shard.
 *
 * Shapes are written [rows, cols] row-major.  Notation: n = tokens in the
 * step, hq / hk = query / key-value heads *of this shard*, hd = head_dim.
 *
 * KV cache, one pair of buffers per layer: [num_blocks, block_size, hk, hd].
 * A token's slot is block_id * block_size + offset_in_block.  Its element
 * type (kv_dtype of qk_norm_rope_store and attention) is the act_dtype or
 * NL_DTYPE_F8_E4M3: e4m3 with one scale of 1.0 for the whole cache, i.e. a
 * cached value is the activation rounded to the nearest e4m3 (saturating at
 * +-448, nl_f32_to_f8e4m3), and attention reads it back exactly.  A single
 * unit scale (vLLM's default without calibration) keeps both the store and
 * the read a plain conversion with no extra bytes per token; it suits what
 * the cache holds here: e4m3 keeps 3 mantissa bits at every magnitude in
 * [2^-6, 448], K rows of Qwen3 come out of an RMSNorm, and V rows of a
 * transformer layer sit well inside that range.
 */
#ifndef NL_KERNELS_H
#define NL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/sampling.h"
#include "common/status.h"

typedef struct nl_backend nl_backend;
typedef struct nl_weight nl_weight; /* backend-owned [rows, cols] matrix */
typedef struct nl_graph nl_graph;   /* a captured op sequence (CUDA graph) */

/* Everything attention needs about a varlen batch; arrays are backend
 * memory.  Sequence s has q_len = cu_seqlens_q[s+1] - cu_seqlens_q[s] new
 * tokens whose K/V are already stored in the cache, and context_lens[s]
 * tokens in the cache in all (cached prefix + earlier chunks + these).  Its
 * i-th new token sits at position context_lens[s] - q_len + i and attends,
 * causally, to cache positions [0, that position]. */
typedef struct nl_attn_batch {
    int32_t n_seqs;
    int32_t n_tokens;            /* cu_seqlens_q[n_seqs]                     */
    int32_t max_q_len;           /* host copies of maxima, for launch shapes */
    int32_t max_context_len;     /* at least every context_lens[s]: a bound
                                    (a graph's, for every step it replays),
                                    which kernels may plan their work from  */
    int32_t max_blocks_per_seq;  /* row stride of block_tables               */
    int32_t block_size;
    bool all_decode;             /* every q_len == 1                         */
    const int32_t *cu_seqlens_q; /* [n_seqs + 1]                             */
    const int32_t *context_lens; /* [n_seqs]                                 */
    const int32_t *block_tables; /* [n_seqs, max_blocks_per_seq]             */
    /* A mixed batch may declare that its first n_leading_decodes seqs have
     * q_len 1 (the scheduler puts running decodes first), so that a backend
     * can give them its decode kernel; 0 declares nothing. */
    int32_t n_leading_decodes;
    /* Optional: the decode seqs (all of them, or the leading decodes of a
     * mixed batch) in the order a backend should start them, longest
     * context first, so that the longest do not start last and finish
     * after everything else; NULL is their own order. */
    const int32_t *decode_order;
} nl_attn_batch;

/* Fills order[n] for nl_attn_batch.decode_order: seqs [0, n_decodes) by
 * context_lens descending, ties in seq order; the seqs after them keep
 * their places.  keys[n_decodes] is the caller's scratch (the sort runs on
 * every step, so it allocates nothing). */
void nl_attn_decode_order(const int32_t *context_lens, int32_t n_decodes, int32_t n,
                          int64_t *keys, int32_t *order);

/* nl_sample_row, the sampler's exact semantics and its random race are
 * defined in common/sampling.h. */

/* One linear op a forward pass will run: out[n, w.rows] = x[n, w.cols] @
 * w^T (+ bias), out fp32 (linear_f32) or the act dtype. */
typedef struct nl_linear_shape {
    const nl_weight *w;
    const nl_weight *bias;
    int32_t n;
    bool out_f32;
} nl_linear_shape;

/* One piece of a copy_pieces call: rows rows of row_bytes bytes each, from
 * src (rows src_pitch bytes apart) to dst (rows dst_pitch apart). */
typedef struct nl_copy_piece {
    void *dst;
    const void *src;
    size_t dst_pitch, src_pitch, row_bytes, rows;
} nl_copy_piece;
#define NL_COPY_PIECES_MAX 16

#define NL_TIMER_MAX_MARKS 4096 /* op timer marks per step: 128 layers make ~1,550 */
#define NL_FENCES 2             /* fence slots: the steps a worker has launched */

typedef struct nl_backend_ops {
    const char *name;
    nl_dtype act_dtype;
    void (*destroy)(nl_backend *be);

    /* memory */
    nl_status (*alloc)(nl_backend *be, size_t bytes, void **out);
    void (*free)(nl_backend *be, void *ptr);
    nl_status (*upload)(nl_backend *be, void *dst, const void *src, size_t bytes);
    nl_status (*download)(nl_backend *be, void *dst, const void *src, size_t bytes);
    nl_status (*memset_zero)(nl_backend *be, void *dst, size_t bytes);
    nl_status (*synchronize)(nl_backend *be);
    nl_status (*memory_info)(nl_backend *be, size_t *free_bytes, size_t *total_bytes);

    /* Running ahead of the device (a worker launches step N + 1 before it
     * reads step N's samples).  host_alloc gives host memory that
     * copy_pieces may read or write (pinned and mapped on CUDA).
     * fence_record marks the current point of the work as fence `slot`
     * (0 .. NL_FENCES - 1); fence_passed says without blocking whether the
     * work before that mark is done, and fence_wait blocks until it is.  A
     * backend whose ops finish before they return (the CPU) passes every
     * fence at once. */
    nl_status (*host_alloc)(nl_backend *be, size_t bytes, void **out);
    void (*host_free)(nl_backend *be, void *ptr);
    /* Copies each piece (nl_copy_piece), ordered with the ops, on the
     * backend's compute units: either side may be host_alloc memory, which
     * the device reads or writes over the bus, so a step's inputs go up and
     * its samples come down without a copy-engine transfer between two
     * kernels.  Host memory it reads or writes must stay untouched until a
     * fence recorded after it has passed. */
    nl_status (*copy_pieces)(nl_backend *be, const nl_copy_piece *pieces, int32_t n);
    nl_status (*fence_record)(nl_backend *be, int slot);
    nl_status (*fence_passed)(nl_backend *be, int slot, bool *passed);
    nl_status (*fence_wait)(nl_backend *be, int slot);

    /* weights: create [rows, cols], then fill row ranges from host data.
     * fill_rows writes rows [row0, row0 + n_rows) from
     * src[r * src_stride + src_col0 + c] for c in [0, cols) -- so a shard's
     * rows or columns, or one part of a fused matrix, load without copies. */
    nl_status (*weight_create)(nl_backend *be, int64_t rows, int64_t cols, nl_weight **out);
    nl_status (*weight_fill_rows)(nl_backend *be, nl_weight *w, int64_t row0, int64_t n_rows,
                                  const void *src, nl_dtype src_dtype, int64_t src_stride,
                                  int64_t src_col0);
    void (*weight_destroy)(nl_backend *be, nl_weight *w);

    /* ops */
    /* out[n, cols] = table[ids[i] - vocab_start] for ids inside this shard's
     * rows, zero rows otherwise (vocab-parallel embedding). */
    nl_status (*embedding)(nl_backend *be, void *out, const nl_weight *table,
                           const int32_t *ids, int32_t n, int32_t vocab_start);
    /* With residual == NULL: out = rmsnorm(x) * w.
     * Otherwise: residual += x; out = rmsnorm(residual) * w.  out may be x. */
    nl_status (*rmsnorm)(nl_backend *be, void *out, const void *x, void *residual,
                         const nl_weight *w, int32_t n, int32_t dim, float eps);
    /* out[n, w.rows] = x[n, w.cols] @ w^T (+ bias[w.rows]). */
    nl_status (*linear)(nl_backend *be, void *out, const void *x, const nl_weight *w,
                        const nl_weight *bias, int32_t n);
    /* As linear, but out is fp32 (logits). */
    nl_status (*linear_f32)(nl_backend *be, float *out, const void *x, const nl_weight *w,
                            int32_t n);
    /* In place on qkv[n, (hq + 2 hk) * hd]: optional per-head RMSNorm of q and
     * k (Qwen3; weights [1, hd]), then NeoX rotary embedding (rotate half) of
     * q and k at positions[n]: pair (i, i + hd/2) turns by the angle
     * positions[t] * inv_freq[i].  inv_freq [hd / 2] is fp32 backend memory
     * the host filled once (common/model_rope.h), so every rope type is the
     * same op.  Then copies the k part (rotated) and the v part into the
     * paged cache at slots[n], converted to kv_dtype; a negative slot is
     * skipped (padding).  One op, so a backend can do both in one pass. */
    nl_status (*qk_norm_rope_store)(nl_backend *be, void *qkv, const int32_t *positions,
                                    const nl_weight *q_norm, const nl_weight *k_norm,
                                    const float *inv_freq, void *k_cache, void *v_cache,
                                    const int32_t *slots, int32_t n, int32_t hq, int32_t hk,
                                    int32_t hd, float eps, int32_t block_size,
                                    nl_dtype kv_dtype);
    /* out[n, hq * hd] = causal softmax(q k^T * scale) v over the paged cache
     * of kv_dtype, GQA: query head h reads kv head h / (hq / hk). */
    nl_status (*attention)(nl_backend *be, void *out, const void *qkv,
                           const void *k_cache, const void *v_cache,
                           const nl_attn_batch *batch, int32_t hq, int32_t hk,
                           int32_t hd, float scale, nl_dtype kv_dtype);
    /* A projection of the normalised residual stream: with x, residual += x
     * first (x == NULL: residual is complete and stays as it is); then
     * y = rmsnorm(residual) * norm_w @ w^T (+ bias), and out = y, or with
     * silu_mul (w holds the gate rows, then the up rows [2 inter, cols])
     * out[n, inter] = silu(g) * u for y = [g | u].  xn [n, w.cols] and work
     * [n, w.rows] are the caller's scratch for the steps between; a backend
     * that fuses them may leave them unused. */
    nl_status (*norm_linear)(nl_backend *be, void *out, void *xn, void *work, const void *x,
                             void *residual, const nl_weight *norm_w, float eps,
                             const nl_weight *w, const nl_weight *bias, int32_t n,
                             bool silu_mul);
    /* residual[n, w.rows] += x[n, w.cols] @ w^T (+ bias), the product rounded
     * to the act dtype first, as a linear op and the add would; work
     * [n, w.rows] is scratch. */
    nl_status (*linear_add)(nl_backend *be, void *residual, void *work, const void *x,
                            const nl_weight *w, const nl_weight *bias, int32_t n);
    /* ids[pairs[2k]] = src[pairs[2k + 1]] for k < n: a step's input tokens
     * taken from the ids the step before it sampled (src: backend or
     * host_alloc memory). */
    nl_status (*take_ids)(nl_backend *be, int32_t *ids, const int32_t *src, const int32_t *pairs, int32_t n);
    /* out[m, dim] = x[rows[i], :], to take each sequence's last token. */
    nl_status (*gather_rows)(nl_backend *be, void *out, const void *x, const int32_t *rows,
                             int32_t m, int32_t dim);
    /* Samples each row of logits[m, vocab] as nl_sample_row describes.
     * Outputs (backend or host_alloc memory, written in place with no
     * copy after the op): ids[m], logprobs[m] of the chosen ids, and
     * top_ids / top_logprobs [m, NL_MAX_LOGPROBS] (first n_logprobs valid). */
    nl_status (*sample)(nl_backend *be, const float *logits, int32_t m, int32_t vocab,
                        const nl_sample_row *rows, int32_t *ids, float *logprobs,
                        int32_t *top_ids, float *top_logprobs);

    /* Optional (NULL: nothing to prepare).  Starts preparing the linear ops
     * of shapes (n of them, copied) on helper threads: a GPU library picks
     * each shape's algorithm and loads its kernel on first use, which costs
     * milliseconds a shape; prepared here, that overlaps the caller's work
     * until linear_warm_join, and the forward passes after it find both
     * ready.  The ops may read the weights before they hold their values.
     * Between start and join the caller may only allocate memory and create,
     * fill or upload weights.  Failing to prepare a shape is not an error
     * (the op itself reports it when it runs).  A token count without a
     * prepared shape of its own runs on the one of the power of two above
     * it, so preparing the powers of two covers every count. */
    nl_status (*linear_warm_start)(nl_backend *be, const nl_linear_shape *shapes, int32_t n);
    nl_status (*linear_warm_join)(nl_backend *be);

    /* Op timing for NANOLLM_PROFILE=ops; never called inside a capture.
     * A step may mark at most NL_TIMER_MAX_MARKS times.
     * timer_mark starts an interval labelled tag (0 <= tag < n_tags of the
     * collect) at this point of the backend's work, ending the one before;
     * timer_collect ends the last, waits for the work and adds each
     * interval's seconds to secs[tag] (a tag outside [0, n_tags) is
     * charged nowhere), then starts afresh. */
    nl_status (*timer_mark)(nl_backend *be, int32_t tag);
    nl_status (*timer_collect)(nl_backend *be, double *secs, int32_t n_tags);

    /* CUDA graphs; NULL where the backend has none. */
    nl_status (*capture_begin)(nl_backend *be);
    nl_status (*capture_end)(nl_backend *be, nl_graph **out);
    nl_status (*graph_launch)(nl_backend *be, nl_graph *g);
    void (*graph_destroy)(nl_backend *be, nl_graph *g);
} nl_backend_ops;

struct nl_backend {
    const nl_backend_ops *ops;
};

/* Backend constructors.  device_index selects the GPU (CUDA_VISIBLE_DEVICES
 * applies); n_threads 0 = all cores (CPU). */
nl_status nl_backend_cpu_create(int n_threads, nl_backend **out);
#ifdef NL_HAVE_CUDA
nl_status nl_backend_cuda_create(int device_index, nl_backend **out);
#endif
/* Number of CUDA devices visible, 0 without CUDA support or devices. */
int nl_cuda_device_count(void);

static inline void nl_backend_destroy(nl_backend *be)
{
    if (be) be->ops->destroy(be);
}

#endif
