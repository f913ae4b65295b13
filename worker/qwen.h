/* qwen.h — the dense decoder forward pass (Qwen3, Qwen2, Llama) over the
 * op interface.
 *
 * qwen_state holds everything the forward pass writes: activations sized
 * for the step maxima and the paged KV cache.  All of it is allocated once,
 * so a step allocates nothing and a decode step can be captured as a CUDA
 * graph.  The inputs are backend memory filled by the model runner.
 */
#ifndef NL_WORKER_QWEN_H
#define NL_WORKER_QWEN_H

#include "kernels/comm.h"
#include "kernels/kernels.h"
#include "worker/weights.h"

typedef struct qwen_inputs {
    int32_t n_tokens;
    const int32_t *ids;         /* [n_tokens]                                */
    const int32_t *positions;   /* [n_tokens]                                */
    const int32_t *slots;       /* [n_tokens] KV slot, -1 for padding        */
    nl_attn_batch attn;
    int32_t n_logits;           /* rows whose logits are computed            */
    const int32_t *logit_rows;  /* [n_logits] token index of each, ascending
                                   (so n_logits == n_tokens means all rows) */
    const int32_t *gather_perm; /* [tp n_logits], with tp > 1: row i tp + r
                                   of the result is row r n + i of the
                                   gathered [tp, n_logits, vocab/tp]         */
} qwen_inputs;

typedef struct qwen_state {
    int32_t max_tokens, max_logits;
    size_t act_size;        /* bytes per activation element              */
    void *x;                /* [max_tokens, hidden] layer output          */
    void *xn;               /* [max_tokens, hidden] normed input          */
    void *residual;         /* [max_tokens, hidden] residual stream       */
    void *work;             /* qkv [max_tokens, (hq + 2 hk) hd], later
                               gate_up [max_tokens, 2 inter]: never both */
    void *work2;            /* attention out [max_tokens, hq hd], later
                               silu_mul out [max_tokens, inter]           */
    void *last;             /* [max_logits, hidden] rows for the LM head  */
    float *logits_shard;    /* [max_logits, vocab / tp]                   */
    float *logits_gathered; /* [tp, max_logits, vocab / tp], tp > 1      */
    float *logits;          /* [max_logits, vocab]: the result, each rank */
    int32_t num_blocks, block_size;
    nl_dtype kv_dtype;         /* the cache's elements (kernels.h)           */
    void **k_cache, **v_cache; /* per layer [num_blocks, block_size, hk, hd] */
    bool time_ops;             /* mark each op for the backend's op timer:
                                  eager steps of NANOLLM_PROFILE=ops only  */
    uint32_t left_out;         /* bit op: the forward skips that op, for
                                  timing what it costs (NANOLLM_PROFILE=
                                  skip:...); the results are then wrong     */
} qwen_state;

/* The forward's ops as NANOLLM_PROFILE=ops reports them (an op's interval
 * runs from its launch to the next op's). */
typedef enum qwen_op {
    QWEN_OP_EMBEDDING,
    QWEN_OP_RMSNORM,     /* the final residual add + RMSNorm */
    QWEN_OP_QKV,         /* RMSNorm (with the pending residual add) + qkv linear */
    QWEN_OP_ROPE_STORE,  /* QK-norm + RoPE + the K/V store */
    QWEN_OP_ATTENTION,
    QWEN_OP_O_PROJ,
    QWEN_OP_ALL_REDUCE,
    QWEN_OP_GATE_UP,     /* RMSNorm + gate_up linear + SiLU-and-multiply */
    QWEN_OP_DOWN,
    QWEN_OP_LM_HEAD,     /* gather of the sampled rows + the vocab GEMM */
    QWEN_OP_LOGITS_GATHER,
    QWEN_OP_COUNT
} qwen_op;
extern const char *const qwen_op_names[QWEN_OP_COUNT];

/* The left_out mask of a comma-separated list of op keys (embedding,
 * final_norm, qkv, rope, attention, o_proj, all_reduce, gate_up, down,
 * lm_head, logits_gather); an unknown key is an error naming it. */
nl_status qwen_parse_left_out(const char *list, uint32_t *mask);

/* Bytes of KV cache one block takes over all layers of this shard. */
size_t qwen_kv_block_bytes(const qwen_weights *w, nl_dtype kv_dtype, int32_t block_size);

/* Bytes of backend memory qwen_state_create takes for these maxima (the
 * memory plan adds it up before anything is allocated). */
size_t qwen_state_bytes(nl_backend *be, const qwen_weights *w, int32_t max_tokens, int32_t max_logits);
/* Allocates the activations for max_tokens tokens and max_logits sampled
 * rows. */
nl_status qwen_state_create(nl_backend *be, const qwen_weights *w, int32_t max_tokens,
                            int32_t max_logits, qwen_state **out);
/* Allocates (zeroed) the KV cache: num_blocks blocks of block_size tokens
 * of kv_dtype elements. */
nl_status qwen_state_alloc_kv(nl_backend *be, const qwen_weights *w, qwen_state *s,
                              int32_t num_blocks, int32_t block_size, nl_dtype kv_dtype);
void qwen_state_destroy(nl_backend *be, const qwen_weights *w, qwen_state *s);

/* The linear ops qwen_forward runs for n tokens and n_logits logits rows,
 * one entry per distinct shape (every layer's are alike), so that a backend
 * can prepare them ahead (linear_warm_start); returns how many it wrote. */
#define QWEN_LINEAR_SHAPES 5
int32_t qwen_linear_shapes(const qwen_weights *w, int32_t n, int32_t n_logits,
                           nl_linear_shape out[QWEN_LINEAR_SHAPES]);

/* Runs the model over in->n_tokens tokens, storing their K/V, and leaves
 * the logits of in->logit_rows in s->logits on every rank ([n_logits,
 * vocab], fp32, the same bytes on each).  Every rank must call it with the
 * same inputs. */
nl_status qwen_forward(nl_backend *be, nl_comm *comm, const qwen_weights *w, qwen_state *s,
                       const qwen_inputs *in);

#endif
