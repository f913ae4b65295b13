/* worker_loop.c — the worker's side of the segment (see worker_loop.h).
 *
 * Errors travel to the leader through the segment, not stderr: a failed
 * init sets the rank's state to FAILED with its message; a failed RUN on
 * rank 0 becomes an error reply; a failed RUN on another rank is recorded
 * in its slot before the process exits, so the leader's death report can
 * say why.
 */
#include "worker/worker_loop.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/futex.h"
#include "common/log.h"
#include "kernels/comm_shm.h"

nl_status worker_check_leader(void *arg)
{
    worker_env *env = arg;
    if (getppid() != (pid_t)env->seg->hdr->leader_pid)
        return nl_error(NL_ERR_WORKER, "worker rank %d: the leader (pid %d) is gone", env->rank,
                        env->seg->hdr->leader_pid);
    return NL_OK;
}

static void report_failure(worker_env *env, nl_status status, const char *msg)
{
    shm_rank *slot = &env->seg->hdr->ranks[env->rank];
    slot->error_status = (int32_t)status;
    snprintf(slot->error, sizeof slot->error, "%s", msg);
    shm_rank_set_state(env->seg, env->rank, SHM_RANK_FAILED);
}

nl_status worker_comm_cpu_create(worker_env *env, nl_comm **out)
{
    if (env->config->tp == 1) {
        *out = nl_comm_single();
        return NL_OK;
    }
    if (!env->seg->comm)
        return nl_error(NL_ERR_INVALID_ARG, "worker rank %d: tp = %d but the segment has no comm area",
                        env->rank, env->config->tp);
    return nl_comm_shm_create(env->seg->comm, env->seg->comm_bytes, env->rank, env->config->tp,
                              worker_check_leader, env, out);
}

nl_status worker_publish_nccl_id(worker_env *env, const void *id, size_t bytes)
{
    shm_header *h = env->seg->hdr;
    if (bytes > sizeof h->nccl_id)
        return nl_error(NL_ERR_INVALID_ARG, "worker: NCCL id of %zu bytes, room for %zu", bytes,
                        sizeof h->nccl_id);
    memcpy(h->nccl_id, id, bytes);
    atomic_store(&h->nccl_id_ready, 1);
    futex_wake_shared(&h->nccl_id_ready);
    return NL_OK;
}

nl_status worker_wait_nccl_id(worker_env *env, void *id, size_t bytes)
{
    shm_header *h = env->seg->hdr;
    if (bytes > sizeof h->nccl_id)
        return nl_error(NL_ERR_INVALID_ARG, "worker: NCCL id of %zu bytes, room for %zu", bytes,
                        sizeof h->nccl_id);
    while (atomic_load(&h->nccl_id_ready) == 0) {
        if (atomic_load(&h->ranks[0].state) == SHM_RANK_FAILED)
            return nl_error(NL_ERR_WORKER, "worker rank %d: rank 0 failed before sharing the NCCL id",
                            env->rank);
        NL_TRY(worker_check_leader(env));
        futex_wait_shared(&h->nccl_id_ready, 0, RING_WAIT_SLICE_MS);
    }
    memcpy(id, h->nccl_id, bytes);
    return NL_OK;
}

/* The leader keeps the only write end of the life pipe: end-of-file on the
 * read end means the leader process is gone, even while this worker is
 * busy in a long step, so this thread ends the process at once. */
static void *watch_leader(void *arg)
{
    int fd = (int)(intptr_t)arg;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) _exit(1);
        char c;
        ssize_t got = read(fd, &c, 1);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) _exit(1);
    }
    return NULL;
}

static int parse_args(int argc, char **argv, int *fd, int *rank, int *life_fd)
{
    *fd = -1;
    *rank = -1;
    *life_fd = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--shm-fd") == 0 || strcmp(argv[i], "--leader-fd") == 0) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v < 0 || v > 1024) return -1;
            if (argv[i][2] == 's') *fd = (int)v; else *life_fd = (int)v;
        } else if (strcmp(argv[i], "--rank") == 0) {
            char *end;
            long r = strtol(argv[i + 1], &end, 10);
            if (*end || r < 0 || r >= SHM_MAX_RANKS) return -1;
            *rank = (int)r;
        } else {
            return -1;
        }
    }
    return *fd >= 0 && *rank >= 0 && argc % 2 == 1 ? 0 : -1;
}

/* Rank 0's answer to step_id: the reply, or st's message.  NL_OK once it
 * is in the reply ring. */
static nl_status send_reply(worker_env *env, uint64_t step_id, nl_status st, wire_reply *reply, wire_buf *out)
{
    shm_segment *seg = env->seg;
    reply->step_id = step_id;
    reply->status = st;
    if (st != NL_OK) {
        snprintf(reply->error, sizeof reply->error, "%s", nl_last_error());
        reply->n_sampled = 0;
        reply->sampled = NULL;
    }
    st = wire_encode_reply(reply, out);
    if (st != NL_OK) {
        /* The model produced an unencodable reply; say so instead. */
        wire_reply err = {.step_id = step_id, .status = st};
        snprintf(err.error, sizeof err.error, "%s", nl_last_error());
        st = wire_encode_reply(&err, out);
    }
    return st != NL_OK ? st : ring_write(&seg->reply, out->data, out->len, worker_check_leader, env);
}

/* The reply a RUN fills on this rank: rank 0's goes out (answer); the
 * others' samples are read on their devices, not on the host, so they
 * fill none. */
static wire_reply *reply_to_fill(const worker_env *env, wire_reply *reply)
{
    return env->rank == 0 ? reply : NULL;
}

/* Step step_id's end on this rank: rank 0 replies (st's message when it
 * failed); another rank answers nothing, and a failure ends it, recorded
 * in its slot for the leader.  False when the loop must stop. */
static bool answer(worker_env *env, uint64_t step_id, nl_status st, wire_reply *reply, wire_buf *out)
{
    if (env->rank == 0) return send_reply(env, step_id, st, reply, out) == NL_OK;
    if (st == NL_OK) return true;
    report_failure(env, st, nl_last_error());
    return false;
}

/* What a serving loop reads commands into and encodes replies in. */
typedef struct serve_bufs {
    ring_buf msg;
    wire_buf arena, out;
} serve_bufs;

static void serve_bufs_free(serve_bufs *b)
{
    ring_buf_free(&b->msg);
    wire_buf_free(&b->arena);
    wire_buf_free(&b->out);
}

/* Reads and decodes the next command; a bad one is reported as the rank's
 * failure. */
static nl_status next_command(worker_env *env, serve_bufs *b, wire_run *cmd)
{
    NL_TRY(ring_read(&env->seg->cmd, env->rank, &b->msg, worker_check_leader, env));
    if (wire_decode_run(b->msg.data, b->msg.len, &b->arena, cmd) != NL_OK) {
        nl_status st = nl_error_prefix(NL_ERR_FORMAT, "worker rank %d: bad command: ", env->rank);
        report_failure(env, st, nl_last_error());
        return st;
    }
    return NL_OK;
}

/* Serves commands one at a time until SHUTDOWN; returns the exit status. */
static int serve(worker_env *env, const worker_ops *ops, void *ctx)
{
    serve_bufs bufs = {0};
    int status = 0;
    for (;;) {
        wire_run cmd;
        if (next_command(env, &bufs, &cmd) != NL_OK) {
            status = 1; /* the leader is gone, or the command was reported */
            break;
        }
        if (cmd.kind == WIRE_SHUTDOWN) break;

        wire_reply reply = {.step_id = cmd.step_id};
        nl_status st = ops->execute(ctx, &cmd, reply_to_fill(env, &reply));
        if (!answer(env, cmd.step_id, st, &reply, &bufs.out)) {
            status = 1; /* the leader is gone, or this rank failed */
            break;
        }
    }
    serve_bufs_free(&bufs);
    return status;
}

/* A RUN the pipelined loop has read: launched, or refused by launch (its
 * error is its reply, in turn). */
typedef struct read_run {
    uint64_t step_id;
    nl_status launched;
    char error[512];
} read_run;

#define AWAIT_SPINS 1024
#define AWAIT_CHECK_EVERY 65536

/* While the oldest RUN is on the device: true once the next command is
 * there to launch, false once the oldest has finished first (or was never
 * launched).  Also true when the leader is gone, for ring_read to say so.
 * It polls, yielding the core between polls: a sleep would oversleep by
 * the timer slack (~50 us), longer than the gap being saved, and the wait
 * lasts at most one step. */
static bool await_command(worker_env *env, const worker_ops *ops, void *ctx, const read_run *oldest)
{
    if (oldest->launched != NL_OK) return false;
    for (long i = 0;; i++) {
        if (ring_ready(&env->seg->cmd, env->rank)) return true;
        if (ops->oldest_done(ctx)) return false;
        if (i < AWAIT_SPINS) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if (i % AWAIT_CHECK_EVERY == 0 && worker_check_leader(env) != NL_OK) return true;
    }
}

/* Serves commands until SHUTDOWN with up to two RUNs in flight (a worker
 * whose model launches and finishes apart): while step N runs on the
 * device the next command is read and launched, so the device goes from
 * one step to the next without waiting for the host's reply.  Every rank
 * samples, so each takes step N + 1's placeholders from its own device
 * (answer: rank 0 alone replies). */
static int serve_pipelined(worker_env *env, const worker_ops *ops, void *ctx)
{
    serve_bufs bufs = {0};
    read_run runs[2];
    int first = 0, n = 0, status = 0;
    bool stopping = false;
    for (;;) {
        if (n == 0 && stopping) break;
        if (n == 0 || (n == 1 && !stopping && await_command(env, ops, ctx, &runs[first]))) {
            wire_run cmd;
            if (next_command(env, &bufs, &cmd) != NL_OK) {
                status = 1;
                break;
            }
            if (cmd.kind == WIRE_SHUTDOWN) {
                stopping = true; /* after the runs in flight are answered */
                continue;
            }
            read_run *run = &runs[(first + n++) % 2];
            run->step_id = cmd.step_id;
            run->launched = ops->launch(ctx, &cmd);
            if (run->launched != NL_OK) snprintf(run->error, sizeof run->error, "%s", nl_last_error());
            continue;
        }
        read_run *run = &runs[first];
        first = (first + 1) % 2;
        n--;
        wire_reply reply = {.step_id = run->step_id};
        nl_status st = run->launched;
        if (st == NL_OK) st = ops->finish(ctx, reply_to_fill(env, &reply));
        else nl_error(st, "%s", run->error);
        if (!answer(env, run->step_id, st, &reply, &bufs.out)) {
            status = 1;
            break;
        }
    }
    serve_bufs_free(&bufs);
    return status;
}

int worker_loop_main(int argc, char **argv, const worker_ops *ops, void *ctx)
{
    int fd, rank, life_fd;
    if (parse_args(argc, argv, &fd, &rank, &life_fd) != 0) {
        fprintf(stderr, "usage: %s --shm-fd FD --rank K [--leader-fd FD]\n"
                        "(started by the nanollm leader, not by hand)\n", argv[0]);
        return 2;
    }
    if (life_fd >= 0) {
        pthread_t watcher;
        if (pthread_create(&watcher, NULL, watch_leader, (void *)(intptr_t)life_fd) != 0) {
            nl_log(NL_LOG_ERROR, "worker rank %d: cannot start the leader watch thread", rank);
            return 1;
        }
        pthread_detach(watcher);
    }
    shm_segment seg;
    if (shm_segment_attach_fd(fd, &seg) != NL_OK) {
        nl_log(NL_LOG_ERROR, "worker rank %d: %s", rank, nl_last_error());
        return 1;
    }
    worker_env env = {.rank = rank, .config = &seg.hdr->config, .seg = &seg};
    /* The leader may have died between fork and the death signal being
     * armed; then the parent is already someone else. */
    if (rank >= seg.hdr->n_ranks || worker_check_leader(&env) != NL_OK) {
        shm_segment_close(&seg);
        return 1;
    }
    shm_rank *slot = &seg.hdr->ranks[rank];
    slot->pid = (int32_t)getpid();
    shm_rank_set_state(&seg, rank, SHM_RANK_ATTACHED);

    int32_t num_kv_blocks = 0;
    nl_status init_status = ops->init(ctx, &env, &num_kv_blocks);
    if (init_status != NL_OK) {
        report_failure(&env, init_status, nl_last_error());
        ops->shutdown(ctx); /* frees whatever init made before it failed */
        shm_segment_close(&seg);
        return 1;
    }
    slot->num_kv_blocks = num_kv_blocks;
    shm_rank_set_state(&seg, rank, SHM_RANK_READY);

    bool pipelined = ops->launch && ops->finish && ops->oldest_done;
    int status = pipelined ? serve_pipelined(&env, ops, ctx) : serve(&env, ops, ctx);
    ops->shutdown(ctx);
    shm_segment_close(&seg);
    return status;
}
