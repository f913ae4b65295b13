/* engine_config.c — nl_engine_config: its defaults and the checks every
 * engine runs on it before opening (ranges, named in messages). */
#include <string.h>

#include "common/status.h"
#include "leader/engine/engine_internal.h"

void nl_engine_config_init(nl_engine_config *c)
{
    memset(c, 0, sizeof(*c));
    c->model_dir = NULL;
    c->tp = 1;
    c->device = NL_DEVICE_AUTO;
    c->max_num_seqs = 512;
    c->max_num_batched_tokens = 16384;
    c->max_model_len = 0;
    /* 16 is the finest granularity the prefix cache and the kernels accept;
     * a larger block may be faster for attention on a given GPU — choose it
     * by measurement there. */
    c->block_size = 16;
    c->num_kv_blocks = 0;
    c->gpu_memory_utilization = 0.9f;
    c->enforce_eager = false;
    c->enable_prefix_caching = true;
}

nl_status engine_config_validate(const nl_engine_config *c)
{
    if (c->tp < 1 || c->tp > 64)
        return nl_error(NL_ERR_INVALID_ARG, "tp %d: must be in [1, 64]", c->tp);
    if (c->device != NL_DEVICE_AUTO && c->device != NL_DEVICE_CPU && c->device != NL_DEVICE_CUDA)
        return nl_error(NL_ERR_INVALID_ARG, "device %d: not auto, cpu or cuda", (int)c->device);
    if (c->max_num_seqs < 1 || c->max_num_seqs > 65536)
        return nl_error(NL_ERR_INVALID_ARG, "max_num_seqs %d: must be in [1, 65536]", c->max_num_seqs);
    if (c->max_num_batched_tokens < c->max_num_seqs || c->max_num_batched_tokens > (1 << 24))
        return nl_error(NL_ERR_INVALID_ARG,
                        "max_num_batched_tokens %d: must be in [max_num_seqs (%d), %d]",
                        c->max_num_batched_tokens, c->max_num_seqs, 1 << 24);
    if (c->max_model_len < 0)
        return nl_error(NL_ERR_INVALID_ARG, "max_model_len %d: must be >= 0 (0: from the model)",
                        c->max_model_len);
    if (c->block_size < 16 || c->block_size % 16 != 0 || c->block_size > 4096)
        return nl_error(NL_ERR_INVALID_ARG, "block_size %d: must be a multiple of 16 in [16, 4096]",
                        c->block_size);
    if (c->num_kv_blocks < 0)
        return nl_error(NL_ERR_INVALID_ARG, "num_kv_blocks %d: must be >= 0 (0: sized from memory)",
                        c->num_kv_blocks);
    if (!(c->gpu_memory_utilization > 0.0f && c->gpu_memory_utilization <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "gpu_memory_utilization %g: must be in (0, 1]",
                        (double)c->gpu_memory_utilization);
    return NL_OK;
}
