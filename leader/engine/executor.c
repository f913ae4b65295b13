/* executor.c — the leader's side of the worker processes (see
 * executor.h).
 *
 * Liveness: every wait on the rings or on the start-up handshake sleeps in
 * slices of RING_WAIT_SLICE_MS and then polls each worker with
 * waitpid(WNOHANG).  The first death found fails the pool for good: the
 * other workers are killed and reaped at once and every later submit or wait
 * returns the same message.
 *
 * Ctrl-C: executor_kill_all() must work from a signal handler, so each
 * live pool also sits in a fixed table of atomic pids that the handler can
 * walk without locks or allocation.
 */
#define _GNU_SOURCE
#include "leader/engine/executor.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/comm_area.h"
#include "common/futex.h"
#include "common/log.h"
#include "ipc/shm.h"
#include "nl_paths.h" /* NL_PKGLIBEXECDIR, written by make */

#define POOL_CMD_RING_BYTES ((size_t)64 << 20)
#define POOL_REPLY_RING_BYTES ((size_t)4 << 20)
#define POOL_SHUTDOWN_WAIT_MS 5000
#define POOL_MAX_LIVE 32
#define POOL_WORKER_NAME "nanollm-worker"

_Static_assert(EXECUTOR_LIFE_FD == SHM_WORKER_FD + 1, "the worker's two inherited descriptors are adjacent");

extern char **environ;

/* ---- the table executor_kill_all walks -------------------------------- */

typedef struct pool_registry_slot {
    _Atomic int in_use;
    _Atomic int pids[NL_MAX_TP]; /* 0: none or reaped */
} pool_registry_slot;

static pool_registry_slot registry[POOL_MAX_LIVE];

static pool_registry_slot *registry_acquire(void)
{
    for (int i = 0; i < POOL_MAX_LIVE; i++) {
        int expected = 0;
        pool_registry_slot *s = &registry[i];
        if (atomic_compare_exchange_strong(&s->in_use, &expected, 2)) {
            /* 2 while being filled: the handler skips it */
            for (int r = 0; r < NL_MAX_TP; r++) atomic_store(&s->pids[r], 0);
            atomic_store(&s->in_use, 1);
            return s;
        }
    }
    return NULL;
}

static void registry_release(pool_registry_slot *s)
{
    if (!s) return;
    atomic_store(&s->in_use, 2);
    for (int r = 0; r < NL_MAX_TP; r++) atomic_store(&s->pids[r], 0);
    atomic_store(&s->in_use, 0);
}

void executor_kill_all(void)
{
    int saved_errno = errno;
    for (int i = 0; i < POOL_MAX_LIVE; i++) {
        pool_registry_slot *s = &registry[i];
        if (atomic_load(&s->in_use) != 1) continue;
        for (int r = 0; r < NL_MAX_TP; r++) {
            int pid = atomic_load(&s->pids[r]);
            if (pid > 0) kill(pid, SIGKILL);
        }
    }
    errno = saved_errno;
}

/* nanollm.h's name for it, for front-ends' signal handlers. */
void nl_kill_all_workers(void)
{
    executor_kill_all();
}

/* ---- the pool ------------------------------------------------------------ */

typedef struct executor {
    runner base;
    shm_segment seg;
    int32_t tp;
    pid_t pids[NL_MAX_TP]; /* 0 once reaped */
    pool_registry_slot *reg;
    bool failed;                    /* a worker died: the pool is unusable */
    nl_status failure_status;
    char failure[1024];
    wire_buf enc, arena;
    ring_buf msg;
    uint64_t sent[RUNNER_MAX_IN_FLIGHT]; /* step ids awaiting replies, oldest first */
    int32_t n_sent;
    int life_fd;                    /* write end of the workers' life pipe */
} executor;

static void pool_forget_pid(executor *pool, int rank)
{
    pool->pids[rank] = 0;
    if (pool->reg) atomic_store(&pool->reg->pids[rank], 0);
}

/* SIGKILLs and reaps every worker still there. */
static void pool_kill_all(executor *pool)
{
    for (int r = 0; r < pool->tp; r++)
        if (pool->pids[r] > 0) kill(pool->pids[r], SIGKILL);
    for (int r = 0; r < pool->tp; r++) {
        if (pool->pids[r] <= 0) continue;
        while (waitpid(pool->pids[r], NULL, 0) < 0 && errno == EINTR) {
        }
        pool_forget_pid(pool, r);
    }
}

static void describe_exit(char *buf, size_t n, int status)
{
    if (WIFSIGNALED(status))
        snprintf(buf, n, "killed by signal %d", WTERMSIG(status));
    else if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, n, "ended with wait status 0x%x", status);
}

/* Records why the pool failed, kills the rest and returns the error. */
static nl_status pool_fail(executor *pool, nl_status status, const char *fmt, ...)
    NL_PRINTF(3, 4);
static nl_status pool_fail(executor *pool, nl_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pool->failure, sizeof pool->failure, fmt, ap);
    va_end(ap);
    pool->failed = true;
    pool->failure_status = status;
    pool_kill_all(pool);
    return nl_error(status, "%s", pool->failure);
}

/* The message a rank left in its slot when it failed on purpose. */
static const char *rank_error(executor *pool, int rank)
{
    shm_rank *slot = &pool->seg.hdr->ranks[rank];
    if (atomic_load(&slot->state) != SHM_RANK_FAILED) return NULL;
    slot->error[sizeof slot->error - 1] = '\0';
    return slot->error;
}

/* The status a FAILED rank reported, NL_ERR_WORKER when it is not one. */
static nl_status rank_status(executor *pool, int rank)
{
    int32_t s = pool->seg.hdr->ranks[rank].error_status;
    return s > NL_OK && s <= NL_ERR_NOT_FOUND ? (nl_status)s : NL_ERR_WORKER;
}

static nl_status pool_rank_died(executor *pool, int rank, pid_t pid, int wait_status,
                                bool status_known)
{
    char how[64] = "its exit status was collected elsewhere";
    if (status_known) describe_exit(how, sizeof how, wait_status);
    pool_forget_pid(pool, rank);
    /* peers waiting for this rank inside a collective stop waiting */
    if (pool->seg.comm) nl_comm_area_abort(pool->seg.comm, NL_COMM_ABORT_RANK_DEAD + (uint32_t)rank);
    const char *why = rank_error(pool, rank);
    if (why) return pool_fail(pool, NL_ERR_WORKER, "worker rank %d: %s", rank, why);
    bool never_attached = atomic_load(&pool->seg.hdr->ranks[rank].state) == SHM_RANK_STARTING;
    if (status_known && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 127 && never_attached)
        return pool_fail(pool, NL_ERR_WORKER,
                         "worker rank %d (pid %d) died: %s (the worker program could not be run)",
                         rank, (int)pid, how);
    return pool_fail(pool, NL_ERR_WORKER, "worker rank %d (pid %d) died: %s", rank, (int)pid, how);
}

/* The liveness check of every wait: NL_OK while all workers live. */
static nl_status pool_check(void *arg)
{
    executor *pool = arg;
    if (pool->failed) return nl_error(pool->failure_status, "%s", pool->failure);
    for (int r = 0; r < pool->tp; r++) {
        pid_t pid = pool->pids[r];
        if (pid <= 0) continue;
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return pool_rank_died(pool, r, pid, st, true);
        if (w < 0 && errno == ECHILD) return pool_rank_died(pool, r, pid, 0, false);
    }
    return NL_OK;
}

/* Waits until every rank has reached want, a rank reports FAILED, or a
 * worker dies. */
static nl_status pool_wait_states(executor *pool, shm_rank_state want)
{
    shm_header *h = pool->seg.hdr;
    for (;;) {
        uint32_t seq = atomic_load(&h->state_seq);
        bool all = true;
        for (int r = 0; r < pool->tp; r++) {
            uint32_t st = atomic_load(&h->ranks[r].state);
            if (st > SHM_RANK_FAILED)
                return pool_fail(pool, NL_ERR_WORKER, "worker rank %d: corrupt shared memory: "
                                 "start-up state %u", r, st);
            if (st == SHM_RANK_FAILED) /* a start-up failure keeps the rank's own status */
                return pool_fail(pool, rank_status(pool, r), "worker rank %d: %s", r,
                                 rank_error(pool, r));
            if (st < (uint32_t)want) all = false;
        }
        if (all) return NL_OK;
        NL_TRY(pool_check(pool));
        futex_wait_shared(&h->state_seq, seq, RING_WAIT_SLICE_MS);
    }
}

static nl_status pool_submit(runner *r, const wire_run *cmd)
{
    executor *pool = (executor *)r;
    if (pool->failed) return nl_error(pool->failure_status, "%s", pool->failure);
    if (cmd->kind != WIRE_RUN)
        return nl_error(NL_ERR_INVALID_ARG, "worker pool: submit takes RUN commands, got kind %d",
                        (int)cmd->kind);
    if (pool->n_sent == RUNNER_MAX_IN_FLIGHT)
        return nl_error(NL_ERR_INVALID_ARG, "worker pool: %d steps already await their replies",
                        RUNNER_MAX_IN_FLIGHT);
    NL_TRY(wire_encode_run(cmd, &pool->enc));
    nl_status st = ring_write(&pool->seg.cmd, pool->enc.data, pool->enc.len, pool_check, pool);
    if (st == NL_ERR_INVALID_ARG)
        return nl_error_prefix(st, "worker pool: step %llu with %d seqs: ",
                               (unsigned long long)cmd->step_id, cmd->n_seqs);
    NL_TRY(st);
    pool->sent[pool->n_sent++] = cmd->step_id;
    return NL_OK;
}

static nl_status pool_wait(runner *r, wire_reply *reply)
{
    executor *pool = (executor *)r;
    if (pool->failed) return nl_error(pool->failure_status, "%s", pool->failure);
    if (pool->n_sent == 0) return nl_error(NL_ERR_INVALID_ARG, "worker pool: no step awaits a reply");
    uint64_t want = pool->sent[0];
    pool->n_sent--;
    memmove(pool->sent, pool->sent + 1, sizeof(pool->sent[0]) * (size_t)pool->n_sent);
    NL_TRY(ring_read(&pool->seg.reply, 0, &pool->msg, pool_check, pool));
    wire_reply got;
    if (wire_decode_reply(pool->msg.data, pool->msg.len, &pool->arena, &got) != NL_OK) {
        nl_error_prefix(NL_ERR_WORKER, "worker rank 0 sent a bad reply: ");
        return pool_fail(pool, NL_ERR_WORKER, "%s", nl_last_error());
    }
    if (got.step_id != want)
        return pool_fail(pool, NL_ERR_WORKER, "worker rank 0 answered step %llu, expected %llu",
                         (unsigned long long)got.step_id, (unsigned long long)want);
    if (got.status != NL_OK)
        return nl_error((nl_status)got.status, "worker rank 0: %s", got.error);
    *reply = got;
    return NL_OK;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

typedef struct shutdown_ctx {
    executor *pool;
    double deadline_ms;
} shutdown_ctx;

static nl_status shutdown_check(void *arg)
{
    shutdown_ctx *c = arg;
    NL_TRY(pool_check(c->pool));
    if (now_ms() > c->deadline_ms) return nl_error(NL_ERR_WORKER, "worker pool: shutdown timed out");
    return NL_OK;
}

static void pool_free(executor *pool)
{
    if (pool->life_fd >= 0) close(pool->life_fd);
    registry_release(pool->reg);
    shm_segment_close(&pool->seg);
    wire_buf_free(&pool->enc);
    wire_buf_free(&pool->arena);
    ring_buf_free(&pool->msg);
    free(pool);
}

static void pool_destroy(runner *r)
{
    executor *pool = (executor *)r;
    if (!pool) return;
    if (!pool->failed) {
        shutdown_ctx c = {.pool = pool, .deadline_ms = now_ms() + POOL_SHUTDOWN_WAIT_MS};
        wire_run bye = {.kind = WIRE_SHUTDOWN};
        if (wire_encode_run(&bye, &pool->enc) == NL_OK &&
            ring_write(&pool->seg.cmd, pool->enc.data, pool->enc.len, shutdown_check, &c) == NL_OK) {
            for (;;) {
                bool any = false;
                for (int k = 0; k < pool->tp; k++) {
                    if (pool->pids[k] <= 0) continue;
                    pid_t w = waitpid(pool->pids[k], NULL, WNOHANG);
                    if (w == pool->pids[k] || (w < 0 && errno == ECHILD))
                        pool_forget_pid(pool, k);
                    else
                        any = true;
                }
                if (!any || now_ms() > c.deadline_ms) break;
                usleep(5000);
            }
        }
    }
    pool_kill_all(pool);
    nl_error_clear();
    pool_free(pool);
}

static nl_status pool_check_runner(runner *r)
{
    return pool_check((executor *)r);
}

static const runner_ops pool_ops = {
    .submit = pool_submit,
    .wait = pool_wait,
    .check = pool_check_runner,
    .destroy = pool_destroy,
};

pid_t executor_pid(const runner *r, int rank)
{
    const executor *pool = (const executor *)r;
    if (!pool || rank < 0 || rank >= pool->tp) return -1;
    return pool->pids[rank];
}

/* ---- start-up ------------------------------------------------------------ */

static nl_status find_worker(const char *given, char *out, size_t n)
{
    const char *how = "worker_path";
    if (!given) {
        given = getenv("NANOLLM_WORKER");
        how = "NANOLLM_WORKER";
    }
    if (given && given[0]) {
        if (access(given, X_OK) != 0)
            return nl_error(NL_ERR_IO, "worker program %s (from %s): %s", given, how,
                            strerror(errno));
        snprintf(out, n, "%s", given);
        return NL_OK;
    }
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) {
        self[len] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) {
            slash[1] = '\0';
            snprintf(out, n, "%s%s", self, POOL_WORKER_NAME);
            if (access(out, X_OK) == 0) return NL_OK;
        }
    }
    snprintf(out, n, "%s/%s", NL_PKGLIBEXECDIR, POOL_WORKER_NAME);
    if (access(out, X_OK) != 0)
        return nl_error(NL_ERR_IO,
                        "worker program not found: NANOLLM_WORKER is unset, none beside %s, and %s: %s",
                        len > 0 ? self : "this program", out, strerror(errno));
    return NL_OK;
}

/* In the child between fork and exec: async-signal-safe calls only.
 * The segment becomes descriptor SHM_WORKER_FD and the read end of the
 * life pipe EXECUTOR_LIFE_FD; everything else the host has open is closed. */
static _Noreturn void child_exec(const char *path, char *const argv[], char *const envp[],
                                 pid_t leader, int seg_fd, int life_read_fd)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* Ctrl-C reaches the whole process group; the leader decides what
     * happens to its workers. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGINT, &ign, NULL);
    if (getppid() != leader) _exit(127);
    /* Out of the way of the two fixed numbers first (F_DUPFD clears
     * close-on-exec), then the segment as SHM_WORKER_FD (dup2 drops its
     * close-on-exec flag; when it is that number already, fcntl does). */
    int life = fcntl(life_read_fd, F_DUPFD, EXECUTOR_LIFE_FD + 1);
    if (life < 0) _exit(127);
    if (seg_fd != SHM_WORKER_FD ? dup2(seg_fd, SHM_WORKER_FD) < 0
                                : fcntl(seg_fd, F_SETFD, 0) < 0)
        _exit(127);
    if (dup2(life, EXECUTOR_LIFE_FD) < 0) _exit(127);
#ifdef SYS_close_range
    /* the host's descriptors stay with the host */
    syscall(SYS_close_range, (unsigned)EXECUTOR_LIFE_FD + 1, ~0u, 0u);
#else
    close(life);
#endif
    execve(path, argv, envp);
    _exit(127);
}

nl_status executor_start(const engine_settings *p, const char *worker_path, runner **out)
{
    *out = NULL;
    nl_status st = engine_settings_validate(p, true);
    if (st != NL_OK) return nl_error_prefix(st, "worker pool: ");
    char path[4096];
    NL_TRY(find_worker(worker_path, path, sizeof path));

    shm_layout layout = {
        .n_ranks = p->tp,
        .cmd_capacity = POOL_CMD_RING_BYTES,
        .reply_capacity = POOL_REPLY_RING_BYTES,
        .comm_bytes = p->tp == 1 ? 0
                      : p->device == NL_DEVICE_CPU ? SHM_COMM_BYTES(p->tp) : NL_COMM_AREA_CUDA_BYTES,
    };

    executor *pool = calloc(1, sizeof *pool);
    if (!pool) return nl_error(NL_ERR_NOMEM, "worker pool: out of memory");
    pool->base.ops = &pool_ops;
    pool->tp = p->tp;
    pool->life_fd = -1;
    /* The workers' lifeline: they hold the read end and exit when it
     * reports end-of-file, which happens when the last write end closes —
     * at pool_free, or when the leader process dies, whichever thread
     * started the pool.  (PR_SET_PDEATHSIG would fire when the forking
     * *thread* ends, killing the workers of a host that opens the engine
     * in a thread it later joins.)  Close-on-exec keeps the write end out
     * of every exec'd program, the workers included. */
    int life[2];
    if (pipe2(life, O_CLOEXEC) != 0) {
        free(pool);
        return nl_error(NL_ERR_RUNTIME, "worker pool: pipe: %s", strerror(errno));
    }
    pool->life_fd = life[1];
    st = shm_segment_create(&layout, p, &pool->seg);
    if (st != NL_OK) {
        close(life[0]);
        close(life[1]);
        free(pool);
        return st;
    }
    pool->reg = registry_acquire();
    if (!pool->reg) {
        close(life[0]);
        pool_free(pool);
        return nl_error(NL_ERR_RUNTIME, "worker pool: more than %d pools alive at once", POOL_MAX_LIVE);
    }

    /* The workers log at the leader's level (they cannot reach its log
     * callback): the environment with NANOLLM_LOG_LEVEL set to it. */
    size_t n_env = 0;
    while (environ && environ[n_env]) n_env++;
    char **envp = calloc(n_env + 2, sizeof(char *));
    char level_var[40];
    if (!envp) {
        close(life[0]);
        pool_free(pool);
        return nl_error(NL_ERR_NOMEM, "worker pool: out of memory");
    }
    size_t k_env = 0;
    for (size_t i = 0; i < n_env; i++)
        if (strncmp(environ[i], "NANOLLM_LOG_LEVEL=", 18) != 0) envp[k_env++] = environ[i];
    snprintf(level_var, sizeof level_var, "NANOLLM_LOG_LEVEL=%s", nl_log_level_name(nl_get_log_level()));
    envp[k_env++] = level_var;
    envp[k_env] = NULL;

    char rank_str[NL_MAX_TP][12];
    pid_t leader = getpid();
    for (int r = 0; r < p->tp; r++) {
        snprintf(rank_str[r], sizeof rank_str[r], "%d", r);
        char *argv[] = {path, "--shm-fd", SHM_WORKER_FD_STR, "--rank", rank_str[r],
                        "--leader-fd", EXECUTOR_LIFE_FD_STR, NULL};
        pid_t pid = fork();
        if (pid == 0) child_exec(path, argv, envp, leader, pool->seg.fd, life[0]);
        if (pid < 0) {
            st = pool_fail(pool, NL_ERR_RUNTIME, "worker pool: fork for rank %d: %s", r,
                           strerror(errno));
            close(life[0]);
            free(envp);
            pool_free(pool);
            return st;
        }
        pool->pids[r] = pid;
        atomic_store(&pool->reg->pids[r], pid);
    }

    /* Every worker holds its own copy of the descriptors now. */
    close(life[0]);
    free(envp);
    close(pool->seg.fd);
    pool->seg.fd = -1;
    st = pool_wait_states(pool, SHM_RANK_ATTACHED);
    if (st == NL_OK) st = pool_wait_states(pool, SHM_RANK_READY);
    if (st != NL_OK) {
        pool_free(pool);
        return st;
    }
    /* every rank sized the same cache; a count out of range is a scribbled
     * segment, not a number to build a block manager from */
    int32_t blocks = INT32_MAX;
    for (int r = 0; r < p->tp && st == NL_OK; r++) {
        int32_t b = pool->seg.hdr->ranks[r].num_kv_blocks;
        if (b < 1)
            st = pool_fail(pool, NL_ERR_WORKER, "worker rank %d: corrupt shared memory: %d KV "
                           "blocks", r, (int)b);
        else if (b < blocks) blocks = b;
    }
    if (st != NL_OK) {
        pool_free(pool);
        return st;
    }
    pool->base.num_kv_blocks = blocks;
    *out = &pool->base;
    return NL_OK;
}
