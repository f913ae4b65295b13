/* engine_config.c — nl_engine_config: its defaults and the checks every
 * engine runs on it before opening (the rules themselves are
 * engine_settings_validate's, common/engine_settings.c). */
#include <string.h>

#include "common/engine_settings.h"
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
    c->kv_cache_dtype = NL_KV_CACHE_AUTO;
    c->prefill_first = false;
    c->async_scheduling = true;
}

nl_status engine_config_validate(const nl_engine_config *c)
{
    engine_settings s;
    return engine_settings_from_config(c, &s);
}
