/* engine_open.c — nl_engine_open: from a model directory to a running
 * engine.  Picks the directory (the demo model when none is given), reads
 * config.json, resolves the device, starts the worker pool while it reads
 * tokenizer.json (when present) on a second thread, and hands everything to
 * engine_open_with_runner().
 * The engine itself is in engine.c and the files engine_state.h lists.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "common/engine_settings.h"
#include "common/model_config.h"
#include "common/status.h"
#include "leader/modelgen/demo_model.h"
#include "leader/engine/engine_internal.h"
#include "leader/engine/executor.h"

#define ENGINE_CPU_KV_BYTES_DEFAULT ((int64_t)1 << 30)

/* Whether a GPU is visible, without initialising CUDA in this process: the
 * driver lists its GPUs under /proc, and CUDA_VISIBLE_DEVICES may hide them. */
static bool gpu_visible(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && (vis[0] == '\0' || strcmp(vis, "-1") == 0)) return false;
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return access("/dev/nvidia0", F_OK) == 0;
    bool any = false;
    struct dirent *ent;
    while ((ent = readdir(d)))
        if (ent->d_name[0] != '.') any = true;
    closedir(d);
    return any;
}

static nl_status resolve_device(nl_device want, nl_device *out)
{
#ifdef NL_HAVE_CUDA
    if (want == NL_DEVICE_AUTO) want = gpu_visible() ? NL_DEVICE_CUDA : NL_DEVICE_CPU;
#else
    (void)gpu_visible;
    if (want == NL_DEVICE_CUDA)
        return nl_error(NL_ERR_UNSUPPORTED,
                        "device cuda: this build has no CUDA backend (configure found no nvcc, "
                        "cuBLASLt or NCCL); use --device cpu");
    if (want == NL_DEVICE_AUTO) want = NL_DEVICE_CPU;
#endif
    *out = want;
    return NL_OK;
}

static bool has_tokenizer_json(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof(path), "%s/tokenizer.json", dir) >= (int)sizeof(path)) return false;
    return access(path, R_OK) == 0;
}

/* NANOLLM_CPU_KV_BYTES, a positive byte count, or the default. */
static nl_status cpu_kv_bytes_from_env(int64_t *out)
{
    *out = ENGINE_CPU_KV_BYTES_DEFAULT;
    const char *env = getenv("NANOLLM_CPU_KV_BYTES");
    if (!env) return NL_OK;
    char *end;
    errno = 0;
    long long v = strtoll(env, &end, 10);
    if (errno || end == env || *end != '\0' || v <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "NANOLLM_CPU_KV_BYTES '%s': not a positive number of bytes",
                        env);
    *out = v;
    return NL_OK;
}

/* tokenizer.json is read while the workers start (reading the Qwen3 one
 * takes a few hundred milliseconds, a worker's start a second on a GPU):
 * on a thread of its own, which returns the error text with the status,
 * since the text is per thread. */
typedef struct tokenizer_job {
    const char *dir;
    tokenizer *tok;
    nl_status st;
    char error[NL_ERROR_MAX];
} tokenizer_job;

static void *tokenizer_job_run(void *arg)
{
    tokenizer_job *job = arg;
    job->st = tokenizer_load(job->dir, &job->tok);
    if (job->st != NL_OK) snprintf(job->error, sizeof job->error, "%s", nl_last_error());
    return NULL;
}

nl_status nl_engine_open(const nl_engine_config *config, nl_engine **out)
{
    *out = NULL;
    if (!config) return nl_error(NL_ERR_INVALID_ARG, "engine config is NULL");
    engine_settings settings;
    NL_TRY(engine_settings_from_config(config, &settings));
    /* On the CPU the KV cache is ordinary memory that the worker touches
     * when it starts: a fixed default keeps start-up fast and predictable;
     * NANOLLM_CPU_KV_BYTES or --num-kv-blocks size it for bigger jobs. */
    NL_TRY(cpu_kv_bytes_from_env(&settings.cpu_kv_bytes));

    char demo_dir[PATH_MAX];
    const char *dir = config->model_dir;
    bool demo = dir == NULL;
    if (demo) {
        NL_TRY(demo_model_ensure(demo_dir, sizeof(demo_dir)));
        dir = demo_dir;
    }
    nl_model_config mc;
    NL_TRY(model_config_load(dir, &mc));
    NL_TRY(engine_settings_set_model_dir(&settings, dir));
    nl_device device = NL_DEVICE_CPU;
    NL_TRY(resolve_device(config->device, &device));
    settings.device = (int32_t)device;

    engine_model_facts facts;
    memset(&facts, 0, sizeof(facts));
    facts.vocab_size = mc.vocab_size;
    facts.max_position_embeddings = mc.max_position_embeddings;
    facts.is_demo_model = demo;
    facts.device_name = device == NL_DEVICE_CUDA ? "cuda" : "cpu";
    facts.model_dir = dir;

    tokenizer_job job = {.dir = dir, .st = NL_OK};
    pthread_t loader;
    bool loading = false;
    if (has_tokenizer_json(dir)) {
        loading = pthread_create(&loader, NULL, tokenizer_job_run, &job) == 0;
        if (!loading) tokenizer_job_run(&job); /* no thread to be had: here, first */
    }

    int32_t max_len = mc.max_position_embeddings;
    if (config->max_model_len > 0 && config->max_model_len < max_len) max_len = config->max_model_len;
    settings.max_model_len = max_len;
    runner *r = NULL;
    nl_status st = job.st == NL_OK ? executor_start(&settings, NULL, &r) : job.st;
    if (loading) pthread_join(loader, NULL);
    /* a bad tokenizer is the user's file to fix: its error comes first */
    if (job.st != NL_OK) {
        if (r) r->ops->destroy(r);
        return nl_error(job.st, "%s: %s", dir, job.error);
    }
    if (st != NL_OK) {
        if (job.tok) tokenizer_destroy(job.tok);
        return st;
    }
    if (job.tok) {
        facts.n_eos = (int32_t)tokenizer_eos_ids(job.tok, facts.eos_ids, NL_MAX_EOS);
    } else {
        for (int32_t i = 0; i < mc.n_eos; i++) facts.eos_ids[i] = mc.eos_token_ids[i];
        facts.n_eos = mc.n_eos;
    }
    return engine_open_with_runner(config, &facts, r, job.tok, out);
}
