/* backend.c — backend helpers that do not depend on which backends were built:
 * the decode launch order every backend may be handed.
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

#ifndef NL_HAVE_CUDA
int nl_cuda_device_count(void)
{
    return 0;
}
#endif
