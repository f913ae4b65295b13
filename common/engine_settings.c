/* engine_settings.c — the public engine config as the workers see it, and
 * the rules every setting must satisfy. */
#include "common/engine_settings.h"

#include <string.h>

nl_status engine_settings_set_model_dir(engine_settings *s, const char *dir)
{
    size_t n = dir ? strlen(dir) : 0;
    if (n >= sizeof s->model_dir)
        return nl_error(NL_ERR_INVALID_ARG, "model directory of %zu bytes: longer than %d bytes", n,
                        NL_MODEL_DIR_MAX - 1);
    memcpy(s->model_dir, dir ? dir : "", n + 1);
    return NL_OK;
}

nl_status engine_settings_from_config(const nl_engine_config *c, engine_settings *out)
{
    memset(out, 0, sizeof *out);
    out->tp = c->tp;
    out->device = (int32_t)c->device;
    out->max_num_seqs = c->max_num_seqs;
    out->max_num_batched_tokens = c->max_num_batched_tokens;
    out->max_model_len = c->max_model_len;
    out->block_size = c->block_size;
    out->num_kv_blocks = c->num_kv_blocks;
    out->gpu_memory_utilization = c->gpu_memory_utilization;
    out->enforce_eager = c->enforce_eager;
    out->enable_prefix_caching = c->enable_prefix_caching;
    out->cpu_threads = c->cpu_threads;
    out->all_reduce = (int32_t)c->all_reduce;
    if (c->devices || c->n_devices) {
        if (!c->devices || c->n_devices < 1 || c->n_devices > NL_MAX_TP || c->n_devices != c->tp)
            return nl_error(NL_ERR_INVALID_ARG,
                            "devices: %d listed for tp %d: list one GPU per rank (e.g. %s for "
                            "tp %d on GPU 0)", c->n_devices, c->tp, c->tp == 2 ? "0,0" : "0,0,0,0",
                            c->tp == 2 ? 2 : 4);
        out->n_devices = c->n_devices;
        memcpy(out->devices, c->devices, sizeof(int32_t) * (size_t)c->n_devices);
    }
    out->kv_cache_dtype = (int32_t)c->kv_cache_dtype;
    out->prefill_first = c->prefill_first;
    NL_TRY(engine_settings_validate(out, false));
    return engine_settings_set_model_dir(out, c->model_dir);
}

nl_status engine_settings_validate(const engine_settings *c, bool resolved)
{
    if (c->tp < 1 || c->tp > NL_MAX_TP)
        return nl_error(NL_ERR_INVALID_ARG, "tp %d: must be in [1, %d]", c->tp, NL_MAX_TP);
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
    if (c->cpu_threads < 0 || c->cpu_threads > 1024)
        return nl_error(NL_ERR_INVALID_ARG, "cpu_threads %d: must be in [0, 1024] (0: the cores / tp)",
                        c->cpu_threads);
    if (c->cpu_kv_bytes < 0)
        return nl_error(NL_ERR_INVALID_ARG, "cpu_kv_bytes %lld: must be >= 0 (0: a quarter of free memory)",
                        (long long)c->cpu_kv_bytes);
    if (c->kv_cache_dtype != NL_KV_CACHE_AUTO && c->kv_cache_dtype != NL_KV_CACHE_BF16 &&
        c->kv_cache_dtype != NL_KV_CACHE_FP8)
        return nl_error(NL_ERR_INVALID_ARG, "kv_cache_dtype %d: not auto (0), bf16 (1) or fp8 (2)",
                        c->kv_cache_dtype);
    if (c->enforce_eager != 0 && c->enforce_eager != 1)
        return nl_error(NL_ERR_INVALID_ARG, "enforce_eager %d: must be 0 or 1", c->enforce_eager);
    if (c->enable_prefix_caching != 0 && c->enable_prefix_caching != 1)
        return nl_error(NL_ERR_INVALID_ARG, "enable_prefix_caching %d: must be 0 or 1",
                        c->enable_prefix_caching);
    if (c->prefill_first != 0 && c->prefill_first != 1)
        return nl_error(NL_ERR_INVALID_ARG, "prefill_first %d: must be 0 or 1", c->prefill_first);
    if (c->all_reduce != NL_ALL_REDUCE_AUTO && c->all_reduce != NL_ALL_REDUCE_IPC &&
        c->all_reduce != NL_ALL_REDUCE_NCCL)
        return nl_error(NL_ERR_INVALID_ARG, "all_reduce %d: not auto, ipc or nccl", c->all_reduce);
    if (c->n_devices != 0 && c->n_devices != c->tp)
        return nl_error(NL_ERR_INVALID_ARG, "devices: %d listed for tp %d: list one GPU per rank",
                        c->n_devices, c->tp);
    for (int32_t r = 0; r < c->n_devices; r++)
        if (c->devices[r] < 0 || c->devices[r] > 1023)
            return nl_error(NL_ERR_INVALID_ARG, "devices: rank %d's GPU %d is not in [0, 1023]", r,
                            c->devices[r]);
    if (!resolved) return NL_OK;
    if (c->device != NL_DEVICE_CPU && c->device != NL_DEVICE_CUDA)
        return nl_error(NL_ERR_INVALID_ARG, "device %d: must be resolved to cpu or cuda", (int)c->device);
    if (c->max_model_len == 0)
        return nl_error(NL_ERR_INVALID_ARG, "max_model_len 0: must be resolved from the model");
    if (c->device == NL_DEVICE_CPU && c->n_devices > 0)
        return nl_error(NL_ERR_INVALID_ARG, "devices: a GPU placement was given, but the engine "
                        "runs on the CPU (device cpu, or no GPU visible)");
    if (c->device == NL_DEVICE_CPU && c->all_reduce != NL_ALL_REDUCE_AUTO)
        return nl_error(NL_ERR_INVALID_ARG, "all_reduce %s: only GPU ranks choose their all-reduce; "
                        "the engine runs on the CPU",
                        c->all_reduce == NL_ALL_REDUCE_IPC ? "ipc" : "nccl");
    if (memchr(c->model_dir, '\0', sizeof c->model_dir) == NULL || c->model_dir[0] == '\0')
        return nl_error(NL_ERR_INVALID_ARG, "model directory: missing or longer than %d bytes",
                        NL_MODEL_DIR_MAX - 1);
    return NL_OK;
}
