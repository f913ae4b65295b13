/* engine_settings.h — the engine's settings as the leader, the shared
 * segment and every worker hold them.
 *
 * The public nl_engine_config becomes an engine_settings in one place,
 * engine_settings_from_config(), which also checks it; the leader then
 * resolves what the model and the machine decide (the model directory, the
 * device, max_model_len, the CPU KV budget) and the executor copies the
 * struct as it is into the shared segment, where each worker's model runner
 * reads it.  Fixed-width fields only: the struct crosses a process boundary.
 * Every range rule lives in engine_settings_validate().
 */
#ifndef NL_COMMON_ENGINE_SETTINGS_H
#define NL_COMMON_ENGINE_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/limits.h"
#include "common/status.h"

typedef struct engine_settings {
    char model_dir[NL_MODEL_DIR_MAX]; /* "": not resolved yet (the demo model)   */
    int32_t tp;                       /* worker processes, 1..NL_MAX_TP          */
    int32_t device;                   /* nl_device; AUTO until resolved          */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    int32_t max_model_len;            /* 0 until resolved: the model's limit     */
    int32_t block_size;               /* tokens per KV block                     */
    int32_t num_kv_blocks;            /* 0: each worker sizes from memory        */
    float gpu_memory_utilization;     /* CUDA: share of device memory to use     */
    int64_t cpu_kv_bytes;             /* CPU: KV budget when num_kv_blocks == 0  */
    int32_t enforce_eager;            /* 1: no CUDA graphs                       */
    int32_t enable_prefix_caching;    /* 1: reuse cached prefix blocks           */
    int32_t cpu_threads;              /* CPU: threads per worker; 0: cores / tp  */
    int32_t all_reduce;               /* nl_all_reduce: how CUDA ranks combine   */
    int32_t n_devices;                /* 0: rank r on GPU r; else tp             */
    int32_t devices[NL_MAX_TP];       /* CUDA: the GPU of each rank, n_devices   */
    int32_t kv_cache_dtype;           /* nl_kv_cache_dtype                       */
    int32_t prefill_first;            /* 1: no decodes in a step with prompt work */
} engine_settings;

/* The GPU of a rank: its entry of devices, or the rank's own number. */
static inline int32_t engine_settings_gpu(const engine_settings *s, int32_t rank)
{
    return s->n_devices > 0 ? s->devices[rank] : rank;
}

/* How many ranks share rank's GPU (1 on the CPU): they split its memory. */
static inline int32_t engine_settings_ranks_on_gpu(const engine_settings *s, int32_t rank)
{
    if (s->device != NL_DEVICE_CUDA) return 1;
    int32_t n = 0;
    for (int32_t r = 0; r < s->tp; r++) n += engine_settings_gpu(s, r) == engine_settings_gpu(s, rank);
    return n;
}

/* Copies config into *out and validates it (unresolved: the device may be
 * AUTO and max_model_len 0).  A model directory longer than
 * NL_MODEL_DIR_MAX - 1 bytes is refused here. */
nl_status engine_settings_from_config(const nl_engine_config *config, engine_settings *out);

/* Sets the model directory; fails when it does not fit. */
nl_status engine_settings_set_model_dir(engine_settings *s, const char *dir);

/* The one set of range rules for every setting, with messages naming the
 * setting, its value and the limit.  resolved: also require what the
 * leader fills in before starting workers (a model directory, a CPU or CUDA
 * device, max_model_len > 0). */
nl_status engine_settings_validate(const engine_settings *s, bool resolved);

#endif
