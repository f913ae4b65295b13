/* model_runner.h — one worker's shard of the model, its KV cache and sampler.
 *
 * The runner loads its shard's weights from the mmapped checkpoint, sizes
 * and allocates the paged KV cache, and executes RUN commands: it builds the
 * device inputs (positions, slot mapping, cu_seqlens, block tables), runs the
 * forward pass (worker/qwen.c) and, on rank 0, samples.
 */
#ifndef NL_WORKER_MODEL_RUNNER_H
#define NL_WORKER_MODEL_RUNNER_H

#include <stdbool.h>

#include "ipc/wire.h"
#include "kernels/comm.h"
#include "kernels/kernels.h"

typedef struct model_runner_params {
    const char *model_dir;
    int32_t rank, tp;
    int32_t block_size;
    int32_t num_kv_blocks;        /* 0: size from memory                     */
    float gpu_memory_utilization; /* CUDA: share of device memory to use     */
    int64_t cpu_kv_bytes;         /* CPU: KV budget when num_kv_blocks == 0  */
    int32_t max_num_seqs;
    int32_t max_num_batched_tokens;
    int32_t max_model_len;
    bool enforce_eager;
} model_runner_params;

typedef struct model_runner model_runner;

/* Takes ownership of neither be nor comm. */
nl_status model_runner_create(const model_runner_params *params, nl_backend *be,
                              nl_comm *comm, model_runner **out);
void model_runner_destroy(model_runner *r);

int32_t model_runner_num_kv_blocks(const model_runner *r);

/* Executes one RUN.  On rank 0, reply->sampled gets one entry per seq with
 * sample == 1 (storage owned by the runner, valid until the next call). */
nl_status model_runner_execute(model_runner *r, const wire_run *cmd, wire_reply *reply);

#endif
