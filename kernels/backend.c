/* backend.c — backend helpers that do not depend on which backends were built:
 * the decode launch order every backend may be handed, and rope_attention
 * as its two ops.
 *
 * Without the CUDA backend there are no CUDA devices; the CUDA build
 * defines nl_cuda_device_count in kernels/cuda instead.
 */
#include "config.h"

#include <stdlib.h>

#include "kernels/kernels.h"

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void nl_attn_decode_order(const int32_t *context_lens, int32_t n_decodes, int32_t n,
                          int64_t *keys, int32_t *order)
{
    /* one key a seq: the context, descending, above the seq's index */
    for (int32_t s = 0; s < n_decodes; s++)
        keys[s] = ((int64_t)(INT32_MAX - context_lens[s]) << 32) | s;
    qsort(keys, (size_t)n_decodes, sizeof *keys, compare_i64);
    for (int32_t s = 0; s < n_decodes; s++) order[s] = (int32_t)(keys[s] & 0xffffffff);
    for (int32_t s = n_decodes; s < n; s++) order[s] = s;
}

nl_status nl_rope_attention_unfused(nl_backend *be, void *out, void *qkv,
                                    const nl_rope_store *rope, void *k_cache, void *v_cache,
                                    const nl_attn_batch *batch, int32_t hq, int32_t hk,
                                    int32_t hd, float scale, nl_dtype kv_dtype)
{
    NL_TRY(be->ops->qk_norm_rope_store(be, qkv, rope->positions, rope->q_norm, rope->k_norm,
                                       rope->inv_freq, k_cache, v_cache, rope->slots,
                                       batch->n_tokens, hq, hk, hd, rope->eps, batch->block_size,
                                       kv_dtype));
    return be->ops->attention(be, out, qkv, k_cache, v_cache, batch, hq, hk, hd, scale, kv_dtype);
}

#ifndef NL_HAVE_CUDA
int nl_cuda_device_count(void)
{
    return 0;
}
#endif
