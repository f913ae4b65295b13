/* model_runner.h — one worker's shard of the model, its KV cache and sampler.
 *
 * The runner loads its shard's weights from the mmapped checkpoint, sizes
 * and allocates the paged KV cache, and executes RUN commands: it builds the
 * device inputs (positions, slot mapping, cu_seqlens, block tables), runs the
 * forward pass (worker/qwen.c) and samples (every rank, the same ids).
 */
#ifndef NL_WORKER_MODEL_RUNNER_H
#define NL_WORKER_MODEL_RUNNER_H

#include <stdbool.h>

#include "common/engine_settings.h"
#include "ipc/wire.h"
#include "kernels/comm.h"
#include "kernels/kernels.h"

typedef struct model_runner model_runner;

/* Builds rank `rank` of settings->tp from resolved settings (checked with
 * engine_settings_validate).  Takes ownership of neither be nor comm. */
nl_status model_runner_create(const engine_settings *settings, int32_t rank, nl_backend *be,
                              nl_comm *comm, model_runner **out);
void model_runner_destroy(model_runner *r);

int32_t model_runner_num_kv_blocks(const model_runner *r);

/* Executes one RUN: launch, then finish.  reply->sampled gets one entry
 * per seq with sample == 1 (storage owned by the runner, valid
 * until the next call). */
nl_status model_runner_execute(model_runner *r, const wire_run *cmd, wire_reply *reply);

/* Launches one RUN on the backend without waiting for it; up to NL_FENCES
 * may be in flight.  cmd may change once this returns.  A seq's
 * WIRE_TOKEN_PREVIOUS input is the token the RUN launched just before
 * sampled for it (that RUN must be step_id - 1 and have sampled the seq),
 * taken on the device, so it may still be running. */
nl_status model_runner_launch(model_runner *r, const wire_run *cmd);
/* Waits for the oldest launched RUN; fills reply as execute does (reply
 * may be NULL). */
nl_status model_runner_finish(model_runner *r, wire_reply *reply);
/* Without blocking: whether the oldest launched RUN has finished on the
 * backend (true when none is in flight). */
bool model_runner_oldest_done(model_runner *r);

#endif
