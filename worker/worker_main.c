/* worker_main.c — nanollm-worker: one rank of the data plane.
 *
 * The leader starts one of these per GPU (or per CPU shard) with the
 * segment's name and the rank on the command line.  This file only picks
 * the pieces for the configured device: the backend (CPU or CUDA), the
 * communicator (none for tp == 1, the shared-memory all-reduce between CPU
 * ranks, NCCL between GPUs) and the model runner; worker_loop.c does the
 * rest.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/kernels.h"
#include "worker/model_runner.h"
#include "worker/worker_loop.h"
#ifdef NL_HAVE_CUDA
#include "kernels/cuda/comm_nccl.h"
#endif

typedef struct real_worker {
    nl_backend *be;
    nl_comm *comm;
    model_runner *runner;
} real_worker;

static nl_status make_backend(real_worker *w, const worker_env *env)
{
    const engine_settings *cfg = env->config;
    if (cfg->device == NL_DEVICE_CUDA) {
#ifdef NL_HAVE_CUDA
        return nl_backend_cuda_create(env->rank, &w->be);
#else
        return nl_error(NL_ERR_UNSUPPORTED, "worker rank %d: this build has no CUDA backend", env->rank);
#endif
    }
    /* Unless told, the CPU ranks share the machine's cores. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cfg->cpu_threads > 0 ? cfg->cpu_threads : cores > 0 ? (int)(cores / cfg->tp) : 1;
    if (threads < 1) threads = 1;
    if (env->rank == 0) nl_log(NL_LOG_INFO, "CPU backend: threads per worker: %d", threads);
    return nl_backend_cpu_create(threads, &w->be);
}

/* One GPU needs no communicator, but NANOLLM_NCCL=1 makes a single worker
 * build and use an NCCL one anyway, so the NCCL path can be exercised on a
 * machine with one GPU. */
static bool nccl_forced(void)
{
    const char *v = getenv("NANOLLM_NCCL");
    return v && strcmp(v, "1") == 0;
}

static nl_status make_comm(real_worker *w, worker_env *env)
{
    const engine_settings *cfg = env->config;
    if (cfg->device != NL_DEVICE_CUDA || (cfg->tp == 1 && !nccl_forced()))
        return worker_comm_cpu_create(env, &w->comm);
#ifdef NL_HAVE_CUDA
    uint8_t id[NL_NCCL_UNIQUE_ID_BYTES];
    if (env->rank == 0) {
        NL_TRY(nl_comm_nccl_unique_id(id));
        NL_TRY(worker_publish_nccl_id(env, id, sizeof id));
    } else {
        NL_TRY(worker_wait_nccl_id(env, id, sizeof id));
    }
    NL_TRY(nl_comm_nccl_create(env->rank, cfg->tp, id, w->be, &w->comm));
    if (env->rank == 0) nl_log(NL_LOG_INFO, "NCCL communicator of %d rank(s) ready", cfg->tp);
    return NL_OK;
#else
    return nl_error(NL_ERR_UNSUPPORTED, "worker rank %d: this build has no NCCL", env->rank);
#endif
}

static nl_status real_init(void *ctx, worker_env *env, int32_t *num_kv_blocks)
{
    real_worker *w = ctx;
    NL_TRY(make_backend(w, env));
    NL_TRY(make_comm(w, env));
    NL_TRY(model_runner_create(env->config, env->rank, w->be, w->comm, &w->runner));
    *num_kv_blocks = model_runner_num_kv_blocks(w->runner);
    return NL_OK;
}

static nl_status real_execute(void *ctx, const wire_run *cmd, wire_reply *reply)
{
    real_worker *w = ctx;
    return model_runner_execute(w->runner, cmd, reply);
}

static void real_shutdown(void *ctx)
{
    real_worker *w = ctx;
    model_runner_destroy(w->runner);
    nl_comm_destroy(w->comm);
    nl_backend_destroy(w->be);
}

int main(int argc, char **argv)
{
    static const worker_ops ops = {real_init, real_execute, real_shutdown};
    real_worker w = {0};
    return worker_loop_main(argc, argv, &ops, &w);
}
