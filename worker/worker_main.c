/* worker_main.c — nanollm-worker: one rank of the data plane.
 *
 * The leader starts one of these per GPU (or per CPU shard) with the
 * segment's name and the rank on the command line.  This file only picks
 * the pieces for the configured device: the backend (CPU, or CUDA on the
 * rank's GPU from the placement), the communicator (none for tp == 1, the
 * shared-memory all-reduce between CPU ranks, CUDA IPC or NCCL between
 * GPUs) and the model runner; worker_loop.c does the rest.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "kernels/kernels.h"
#include "worker/model_runner.h"
#include "worker/worker_loop.h"
#ifdef NL_HAVE_CUDA
#include "kernels/cuda/comm_ipc.h"
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
        int gpu = engine_settings_gpu(cfg, env->rank), visible = nl_cuda_device_count();
        if (gpu >= visible)
            return nl_error(NL_ERR_INVALID_ARG,
                            "rank %d is placed on GPU %d, but %d GPU(s) are visible%s", env->rank,
                            gpu, visible,
                            visible > 0 ? "; several ranks can share one GPU (--devices 0,0,...)" : "");
        return nl_backend_cuda_create(gpu, &w->be);
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
    int32_t gpus[NL_MAX_TP];
    for (int32_t r = 0; r < cfg->tp; r++) gpus[r] = engine_settings_gpu(cfg, r);
    bool ipc_ok = nl_comm_ipc_usable(gpus, cfg->tp) != 0;
    bool use_ipc = cfg->tp > 1 && (cfg->all_reduce == NL_ALL_REDUCE_IPC ||
                                   (cfg->all_reduce == NL_ALL_REDUCE_AUTO && ipc_ok));
    if (use_ipc) {
        if (!ipc_ok)
            return nl_error(NL_ERR_UNSUPPORTED,
                            "--all-reduce ipc: the %d ranks' GPUs are not all one GPU or peers "
                            "(and at most %d ranks)", cfg->tp, NL_COMM_IPC_MAX_RANKS);
        if (!env->seg->comm || env->seg->comm_bytes < NL_COMM_IPC_AREA_BYTES)
            return nl_error(NL_ERR_INVALID_ARG, "worker rank %d: the segment has no IPC comm area",
                            env->rank);
        nl_comm_ipc_params p = {.area = env->seg->comm, .area_bytes = env->seg->comm_bytes,
                                .rank = env->rank, .size = cfg->tp,
                                .check = worker_check_leader, .check_ctx = env};
        NL_TRY(nl_comm_ipc_create(&p, w->be, &w->comm));
        if (env->rank == 0)
            fprintf(stderr, "nanollm: CUDA-IPC all-reduce of %d ranks ready\n", cfg->tp);
        return NL_OK;
    }
    for (int r = 0; r < cfg->tp; r++)
        for (int q = 0; q < r; q++)
            if (gpus[r] == gpus[q])
                return nl_error(NL_ERR_UNSUPPORTED,
                                "NCCL cannot run two ranks on one GPU (ranks %d and %d on GPU %d); "
                                "use --all-reduce ipc or auto (up to %d ranks)", q, r, gpus[r],
                                NL_COMM_IPC_MAX_RANKS);
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    NL_TRY(make_backend(w, env));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const char *profile = getenv("NANOLLM_PROFILE");
    if (profile && strcmp(profile, "1") == 0 && env->rank == 0)
        nl_log(NL_LOG_WARN, "profile start-up %-22s %.3f s", "backend (device context)",
                (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    NL_TRY(make_comm(w, env));
    NL_TRY(model_runner_create(env->config, env->rank, w->be, w->comm, &w->runner));
    *num_kv_blocks = model_runner_num_kv_blocks(w->runner);
    return NL_OK;
}

/* A step's outcome: a collective the group abandoned leaves garbage, not
 * an answer. */
static nl_status checked(real_worker *w, nl_status st)
{
    nl_status cs = nl_comm_check(w->comm);
    return st != NL_OK ? st : cs;
}

static nl_status real_execute(void *ctx, const wire_run *cmd, wire_reply *reply)
{
    real_worker *w = ctx;
    return checked(w, model_runner_execute(w->runner, cmd, reply));
}

static nl_status real_launch(void *ctx, const wire_run *cmd)
{
    return model_runner_launch(((real_worker *)ctx)->runner, cmd);
}

static nl_status real_finish(void *ctx, wire_reply *reply)
{
    real_worker *w = ctx;
    return checked(w, model_runner_finish(w->runner, reply));
}

static bool real_oldest_done(void *ctx)
{
    return model_runner_oldest_done(((real_worker *)ctx)->runner);
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
    static const worker_ops ops = {.init = real_init, .execute = real_execute, .shutdown = real_shutdown,
                                   .launch = real_launch, .finish = real_finish,
                                   .oldest_done = real_oldest_done};
    real_worker w = {0};
    return worker_loop_main(argc, argv, &ops, &w);
}
