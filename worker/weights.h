/* weights.h — one tensor-parallel shard of a checkpoint, loaded into
 * backend weights.
 *
 * The family's tensor table (common/model_family.h) says which checkpoint
 * tensor fills which field below, which tensors are fused into one field
 * and along which dimension each is split; a field the table leaves empty
 * for a config (q_norm in Qwen2 and Llama, biases the config does not ask
 * for) is NULL.
 *
 * Sharding (rank r of tp):
 *   query heads      hq = heads / tp, rank's heads [r hq, (r+1) hq)
 *   kv heads         hk = kv / tp when tp <= kv; else hk = 1, the rank's kv
 *                    head being r / (tp / kv) (replicated, as vLLM does)
 *   intermediate     inter / tp rows of gate and up, columns of down
 *   vocabulary       vocab / tp rows of embed and lm_head per rank (a vocab
 *                    tp does not divide is refused: the gathered logits
 *                    rows must be exactly vocab wide for the sampler)
 * Column-parallel layers (qkv, gate_up) hold their rows; row-parallel layers
 * (o_proj, down_proj) hold a slice of their columns, and the forward pass
 * all-reduces their outputs.
 */
#ifndef NL_WORKER_WEIGHTS_H
#define NL_WORKER_WEIGHTS_H

#include "common/model_config.h"
#include "common/safetensors.h"
#include "kernels/kernels.h"

typedef struct qwen_shard {
    int32_t rank, tp;
    int32_t hq, hk, hd;        /* heads of this shard, head_dim           */
    int32_t q_head0, kv_head0; /* first global query / kv head held       */
    int32_t inter;             /* intermediate columns of this shard      */
    int32_t vocab_shard;       /* rows of embed / lm_head per rank: vocab / tp */
    int32_t vocab_start;       /* rank * vocab_shard                      */
} qwen_shard;

typedef struct qwen_layer {
    nl_weight *input_norm;   /* [1, hidden]                               */
    nl_weight *qkv;          /* [(hq + 2 hk) hd, hidden]: q rows; k; v    */
    nl_weight *qkv_bias;     /* [(hq + 2 hk) hd, 1], NULL without bias    */
    nl_weight *q_norm;       /* [1, hd], Qwen3 only                       */
    nl_weight *k_norm;       /* [1, hd], Qwen3 only                       */
    nl_weight *o_proj;       /* [hidden, hq hd]: this shard's columns     */
    nl_weight *o_bias;       /* [1, hidden], every rank; NULL without     */
    nl_weight *post_norm;    /* [1, hidden]                               */
    nl_weight *gate_up;      /* [2 inter, hidden]: gate rows; up rows     */
    nl_weight *gate_up_bias; /* [2 inter, 1], NULL without mlp_bias       */
    nl_weight *down;         /* [hidden, inter]: this shard's columns     */
    nl_weight *down_bias;    /* [1, hidden], every rank; NULL without     */
} qwen_layer;

typedef struct qwen_weights {
    nl_model_config cfg;
    qwen_shard shard;
    nl_weight *embed;        /* [vocab_shard, hidden]                     */
    qwen_layer *layers;      /* [num_hidden_layers]                       */
    nl_weight *final_norm;   /* [1, hidden]                               */
    nl_weight *lm_head;      /* [vocab_shard, hidden]; == embed when tied */
    float *rope_inv_freq;    /* [hd / 2] fp32 backend memory: the rotary
                                frequencies of cfg (common/model_rope.h)  */
} qwen_weights;

/* Works out rank's shard of cfg; refuses a tp the shapes do not divide,
 * naming the numbers. */
nl_status weights_plan_shard(const nl_model_config *cfg, int32_t rank, int32_t tp,
                             qwen_shard *out);

/* Loading rank's shard of a checkpoint m (already checked by
 * model_tensors_check), as the family table of cfg->arch directs, in two
 * steps: every field allocated at its shape (contents undefined), then
 * filled from m.  Between them the caller knows every shape and device
 * address, so work that needs only those (preparing the linear ops'
 * kernels) can overlap the filling.  After a failed fill, weights_destroy
 * frees what was created. */
nl_status weights_create(nl_backend *be, const nl_model_config *cfg, int32_t rank, int32_t tp,
                         qwen_weights **out);
nl_status weights_fill(nl_backend *be, const st_model *m, qwen_weights *w);
void weights_destroy(nl_backend *be, qwen_weights *w);

#endif
