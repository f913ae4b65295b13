/* test_executor.c — worker processes behind the rings, driven through
 * tests/fake_worker (a known fake model): start-up, steps, shutdown, worker
 * deaths, leader death, start-up failures; and the CPU shared-memory comm
 * across processes. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"
#include "ipc/shm.h"
#include "kernels/comm_shm.h"
#include "leader/engine/executor.h"
#include "tests/check_run.h"

#ifndef FAKE_WORKER_PATH
#error "FAKE_WORKER_PATH must name the fake worker program"
#endif

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static engine_settings fake_params(int tp)
{
    return (engine_settings){
        .model_dir = "/models/fake", .tp = tp, .device = NL_DEVICE_CPU, .block_size = 16,
        .max_num_seqs = 512, .max_num_batched_tokens = 4096, .max_model_len = 4096,
        .gpu_memory_utilization = 0.9f,
    };
}

/* Segments whose name carries pid (the leader's). */
static int count_segments(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "nanollm-%d-", (int)pid);
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static void assert_nothing_left(void)
{
    ck_assert_int_eq(count_segments(getpid()), 0);
    errno = 0;
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* no child, not even a zombie */
    ck_assert_int_eq(errno, ECHILD);
}

/* One step: seqs 1..n_seqs, odd ones sample (even ones are mid-prefill). */
static nl_status run_step(runner *r, uint64_t step, int n_seqs, wire_reply *reply)
{
    wire_seq seqs[8];
    int32_t tokens[8][4], table[8][2];
    for (int i = 0; i < n_seqs; i++) {
        for (int k = 0; k < 4; k++) tokens[i][k] = 100 * i + k;
        table[i][0] = 2 * i;
        table[i][1] = 2 * i + 1;
        seqs[i] = (wire_seq){.seq_id = (uint64_t)i + 1, .num_computed = 4 * (int32_t)step,
                             .num_new = 4, .n_blocks = 2, .sample = (i + 1) % 2,
                             .sampling.temperature = 0.0f, .sampling.top_p = 1.0f, .sampling.n_logprobs = i % 3,
                             .sampling.offset = step, .tokens = tokens[i],
                             .block_table = table[i]};
    }
    wire_run cmd = {.kind = WIRE_RUN, .step_id = step, .n_seqs = n_seqs, .seqs = seqs};
    return runner_execute(r, &cmd, reply);
}

static void check_reply(const wire_reply *reply, uint64_t step, int n_seqs, int tp)
{
    ck_assert_uint_eq(reply->step_id, step);
    ck_assert_int_eq(reply->n_sampled, (n_seqs + 1) / 2);
    for (int j = 0; j < reply->n_sampled; j++) {
        uint64_t seq_id = 2 * (uint64_t)j + 1; /* seqs 1, 3, 5, ... sample */
        ck_assert_uint_eq(reply->sampled[j].seq_id, seq_id);
        ck_assert_int_eq(reply->sampled[j].token_id, (int32_t)(seq_id * 1000 + step));
        /* -(1 + 2 + ... + tp): every rank took part in the all-reduce */
        ck_assert_float_eq(reply->sampled[j].logprob, -(float)(tp * (tp + 1) / 2));
        ck_assert_int_eq(reply->sampled[j].n_top, (int)(seq_id - 1) % 3);
    }
}

/* The segment's name is gone before create returns, and a descriptor alone
 * reaches it, as a worker inherits one: a leader killed at any moment leaves
 * nothing in /dev/shm. */
START_TEST(test_segment_has_no_name)
{
    shm_layout layout = {.n_ranks = 2, .cmd_capacity = 1 << 16, .reply_capacity = 1 << 12};
    engine_settings cfg = {.tp = 2};
    shm_segment seg;
    ck_assert_msg(shm_segment_create(&layout, &cfg, &seg) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(count_segments(getpid()), 0);
    ck_assert_int_ge(seg.fd, 0);
    int fd = dup(seg.fd);
    shm_segment view;
    ck_assert_msg(shm_segment_attach_fd(fd, &view) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* attach took the descriptor over */
    ck_assert_ptr_ne(view.base, seg.base);
    ck_assert_int_eq(view.hdr->config.tp, 2);
    view.hdr->ranks[1].pid = 4321; /* one object behind both mappings */
    ck_assert_int_eq(seg.hdr->ranks[1].pid, 4321);
    shm_segment_close(&view);
    shm_segment_close(&seg);
    ck_assert_int_eq(seg.fd, -1);
}
END_TEST

static void start_steps_shutdown(int tp)
{
    engine_settings p = fake_params(tp);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    ck_assert_int_eq(r->num_kv_blocks, 1000 - 10 * (tp - 1)); /* the minimum over ranks */
    ck_assert_int_eq(count_segments(getpid()), 0); /* never a name once created */
    for (int k = 0; k < tp; k++) ck_assert_int_gt(executor_pid(r, k), 0);
    ck_assert_int_eq(executor_pid(r, tp), -1);
    for (uint64_t step = 1; step <= 50; step++) {
        wire_reply reply;
        int n = 1 + (int)(step % 8);
        ck_assert_msg(run_step(r, step, n, &reply) == NL_OK, "%s", nl_last_error());
        check_reply(&reply, step, n, tp);
    }
    r->ops->destroy(r);
    assert_nothing_left();
}

START_TEST(test_start_steps_shutdown_tp1)
{
    start_steps_shutdown(1);
}
END_TEST

START_TEST(test_start_steps_shutdown_tp3)
{
    start_steps_shutdown(3);
}
END_TEST

/* 512 seqs with 2048 blocks each: about 4 MiB of command. */
START_TEST(test_large_step)
{
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    enum { N = 512, B = 2048 };
    wire_seq *seqs = calloc(N, sizeof *seqs);
    int32_t *tables = calloc((size_t)N * B, sizeof *tables);
    int32_t token = 7;
    for (int i = 0; i < N; i++)
        seqs[i] = (wire_seq){.seq_id = (uint64_t)i, .num_computed = B * 16 - 1, .num_new = 1,
                             .n_blocks = B, .sample = 1, .sampling.offset = 5, .tokens = &token,
                             .block_table = tables + (size_t)i * B};
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 1, .n_seqs = N, .seqs = seqs};
    wire_reply reply;
    for (int rep = 0; rep < 3; rep++) {
        cmd.step_id = (uint64_t)rep + 1;
        ck_assert_msg(runner_execute(r, &cmd, &reply) == NL_OK, "%s", nl_last_error());
        ck_assert_int_eq(reply.n_sampled, N);
        ck_assert_int_eq(reply.sampled[N - 1].token_id, (N - 1) * 1000 + 5);
    }
    /* Larger than the 64 MiB ring: refused, and the pool stays usable. */
    seqs[0].n_blocks = 17 << 20;
    int32_t *huge = calloc((size_t)seqs[0].n_blocks, sizeof *huge);
    seqs[0].block_table = huge;
    ck_assert_int_eq(runner_execute(r, &cmd, &reply), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "exceeds the ring's limit"));
    free(huge);
    ck_assert_int_eq(run_step(r, 9, 3, &reply), NL_OK);
    check_reply(&reply, 9, 3, 2);
    r->ops->destroy(r);
    free(seqs);
    free(tables);
    assert_nothing_left();
}
END_TEST

typedef struct killer {
    pid_t pid;
    int delay_ms;
    double killed_at;
} killer;

static void *kill_later(void *arg)
{
    killer *k = arg;
    usleep((useconds_t)k->delay_ms * 1000);
    k->killed_at = now_ms();
    kill(k->pid, SIGKILL);
    return NULL;
}

/* Rank 0 is busy with a 5 s step when rank 1 is killed: execute must give
 * up within a second, name the rank, and leave nothing behind. */
START_TEST(test_worker_killed_mid_step)
{
    setenv("FAKE_WORKER_SLOW_STEP", "2", 1);
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    wire_reply reply;
    ck_assert_int_eq(run_step(r, 1, 2, &reply), NL_OK);

    killer k = {.pid = executor_pid(r, 1), .delay_ms = 200};
    pthread_t t;
    pthread_create(&t, NULL, kill_later, &k);
    ck_assert_int_eq(run_step(r, 2, 2, &reply), NL_ERR_WORKER);
    double noticed = now_ms();
    pthread_join(t, NULL);
    ck_assert_double_lt(noticed - k.killed_at, 1000.0);
    char want[128];
    snprintf(want, sizeof want, "worker rank 1 (pid %d) died: killed by signal 9", (int)k.pid);
    ck_assert_str_eq(nl_last_error(), want);
    assert_nothing_left(); /* rank 0 was killed and reaped as well */

    ck_assert_int_eq(run_step(r, 3, 2, &reply), NL_ERR_WORKER);
    ck_assert_str_eq(nl_last_error(), want);
    r->ops->destroy(r);
    assert_nothing_left();
    unsetenv("FAKE_WORKER_SLOW_STEP");
}
END_TEST

/* A worker that dies between steps is noticed by the next execute. */
START_TEST(test_worker_exit_between_steps)
{
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    pid_t pid = executor_pid(r, 0);
    kill(pid, SIGTERM);
    usleep(100 * 1000);
    wire_reply reply;
    double t0 = now_ms();
    ck_assert_int_eq(run_step(r, 1, 2, &reply), NL_ERR_WORKER);
    ck_assert_double_lt(now_ms() - t0, 1000.0);
    char want[128];
    snprintf(want, sizeof want, "worker rank 0 (pid %d) died: killed by signal 15", (int)pid);
    ck_assert_str_eq(nl_last_error(), want);
    r->ops->destroy(r);
    assert_nothing_left();
}
END_TEST

/* check notices a dead worker without a step, names it like execute does,
 * and the pool stays failed: the next execute gives the same message. */
START_TEST(test_check_without_a_step)
{
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    ck_assert_ptr_nonnull(r->ops->check);
    ck_assert_int_eq(r->ops->check(r), NL_OK);
    pid_t pid = executor_pid(r, 1);
    kill(pid, SIGKILL);
    double t0 = now_ms();
    nl_status st;
    while ((st = r->ops->check(r)) == NL_OK && now_ms() - t0 < 1000.0) usleep(1000);
    ck_assert_int_eq(st, NL_ERR_WORKER);
    char want[128];
    snprintf(want, sizeof want, "worker rank 1 (pid %d) died: killed by signal 9", (int)pid);
    ck_assert_str_eq(nl_last_error(), want);
    wire_reply reply;
    ck_assert_int_eq(run_step(r, 1, 2, &reply), NL_ERR_WORKER);
    ck_assert_str_eq(nl_last_error(), want);
    r->ops->destroy(r);
    assert_nothing_left();
}
END_TEST

/* A forked child plays the leader and is killed; its workers must follow.
 * This process adopts the orphans (subreaper) so it can see them end. */
START_TEST(test_leader_killed)
{
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t leader = fork();
    ck_assert_int_ge(leader, 0);
    if (leader == 0) {
        engine_settings p = fake_params(2);
        runner *r;
        pid_t pids[2] = {0, 0};
        if (executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK) {
            pids[0] = executor_pid(r, 0);
            pids[1] = executor_pid(r, 1);
        }
        if (write(fds[1], pids, sizeof pids) != sizeof pids) _exit(1);
        for (;;) pause();
    }
    pid_t pids[2];
    ck_assert_int_eq(read(fds[0], pids, sizeof pids), sizeof pids);
    ck_assert_int_gt(pids[0], 0);
    ck_assert_int_gt(pids[1], 0);
    kill(leader, SIGKILL);
    ck_assert_int_eq(waitpid(leader, NULL, 0), leader);

    double t0 = now_ms();
    for (int k = 0; k < 2; k++) {
        int st;
        pid_t w;
        while ((w = waitpid(pids[k], &st, WNOHANG)) == 0 && now_ms() - t0 < 2000) usleep(5000);
        ck_assert_msg(w == pids[k], "worker %d outlived its leader", (int)pids[k]);
        /* its watch thread saw the life pipe close */
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "worker ended with wait status 0x%x", st);
    }
    ck_assert_double_lt(now_ms() - t0, 1000.0);
    ck_assert_int_eq(count_segments(leader), 0);
    assert_nothing_left();
}
END_TEST

START_TEST(test_init_failure_reaches_leader)
{
    setenv("FAKE_WORKER_FAIL_INIT_RANK", "1", 1);
    engine_settings p = fake_params(3);
    runner *r = (runner *)1;
    /* the worker's own status (a corrupt file) reaches the leader with its message */
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_FORMAT);
    ck_assert_ptr_null(r);
    ck_assert_str_eq(nl_last_error(), "worker rank 1: /models/fake/model.safetensors: tensor "
                                      "model.layers.0.mlp.up_proj.weight truncated");
    assert_nothing_left();
    unsetenv("FAKE_WORKER_FAIL_INIT_RANK");

    setenv("FAKE_WORKER_EXIT_INIT_RANK", "2", 1);
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_WORKER);
    ck_assert_msg(strstr(nl_last_error(), "worker rank 2 (pid ") &&
                      strstr(nl_last_error(), ") died: exited with status 3"),
                  "%s", nl_last_error());
    assert_nothing_left();
    unsetenv("FAKE_WORKER_EXIT_INIT_RANK");
}
END_TEST

START_TEST(test_bad_worker_program)
{
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_int_eq(executor_start(&p, "/nonexistent/nanollm-worker", &r), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "/nonexistent/nanollm-worker"));
    /* runs, but is no worker: it exits without attaching */
    ck_assert_int_eq(executor_start(&p, "/bin/false", &r), NL_ERR_WORKER);
    ck_assert_msg(strstr(nl_last_error(), "died: exited with status 1"), "%s", nl_last_error());
    assert_nothing_left();
    p.tp = 0;
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_INVALID_ARG);
    p.tp = 1;
    p.device = NL_DEVICE_AUTO;
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_INVALID_ARG);
    /* the same rules as nl_engine_open's, from the same function */
    p.device = NL_DEVICE_CPU;
    p.block_size = 24;
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "block_size 24: must be a multiple of 16"));
    p.block_size = 16;
    p.max_model_len = 0;
    ck_assert_int_eq(executor_start(&p, FAKE_WORKER_PATH, &r), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "max_model_len 0"));
    assert_nothing_left();
}
END_TEST

START_TEST(test_step_failure_is_reported)
{
    setenv("FAKE_WORKER_FAIL_STEP", "2", 1);
    engine_settings p = fake_params(2);
    runner *r;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &r) == NL_OK, "%s", nl_last_error());
    wire_reply reply;
    ck_assert_int_eq(run_step(r, 1, 3, &reply), NL_OK);
    ck_assert_int_eq(run_step(r, 2, 3, &reply), NL_ERR_NOMEM);
    ck_assert_str_eq(nl_last_error(), "worker rank 0: fake model: step 2 does not fit");
    ck_assert_int_eq(run_step(r, 3, 3, &reply), NL_OK);
    check_reply(&reply, 3, 3, 2);
    r->ops->destroy(r);
    assert_nothing_left();
    unsetenv("FAKE_WORKER_FAIL_STEP");
}
END_TEST

START_TEST(test_kill_all)
{
    engine_settings p = fake_params(2);
    runner *a, *b;
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &a) == NL_OK, "%s", nl_last_error());
    ck_assert_msg(executor_start(&p, FAKE_WORKER_PATH, &b) == NL_OK, "%s", nl_last_error());
    executor_kill_all();
    wire_reply reply;
    ck_assert_int_eq(run_step(a, 1, 1, &reply), NL_ERR_WORKER);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "killed by signal 9"));
    a->ops->destroy(a);
    b->ops->destroy(b);
    assert_nothing_left();
}
END_TEST

/* ---- the shared-memory comm, across real processes ----------------------- */

/* Odd elements are 1, 1e8 and -1e8 on ranks 0, 1, 2, where the order of
 * addition shows in fp32: rank order gives (1 + 1e8) - 1e8 = 0, while
 * 1 + (1e8 - 1e8) would give 1.  The reference sums in rank order. */
static float value_of(int rank, size_t i)
{
    static const float v[3] = {1.0f, 1e8f, -1e8f};
    return i % 2 ? v[rank] : (float)(rank + 1) * 0.1f * (float)(i % 7);
}

START_TEST(test_comm_shm_all_reduce_and_all_gather)
{
    enum { SIZE = 3 };
    const size_t count = 5000;
    /* A small area (slots of ~1 KiB) so a buffer goes through many chunks. */
    const size_t area_bytes = 4096 + (SIZE + 1) * 1024;
    void *area = mmap(NULL, area_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(area, MAP_FAILED);
    float *results = mmap(NULL, sizeof(float) * count * (SIZE + SIZE * SIZE), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pids[SIZE];
    for (int rank = 0; rank < SIZE; rank++) {
        pids[rank] = fork();
        if (pids[rank] == 0) {
            nl_comm *c;
            if (nl_comm_shm_create(area, area_bytes, rank, SIZE, NULL, NULL, &c) != NL_OK) _exit(2);
            float *buf = malloc(sizeof(float) * count);
            for (int rep = 0; rep < 3; rep++) {
                for (size_t i = 0; i < count; i++) buf[i] = value_of(rank, i);
                if (c->ops->all_reduce_sum(c, buf, count, NL_DTYPE_F32) != NL_OK) _exit(3);
            }
            memcpy(results + (size_t)rank * count, buf, sizeof(float) * count);
            for (size_t i = 0; i < count; i++) buf[i] = (float)(rank * 100000 + (int)i);
            if (c->ops->all_gather(c, buf, results + (size_t)(SIZE + SIZE * rank) * count, count,
                                   NL_DTYPE_F32) != NL_OK)
                _exit(4);
            nl_comm_destroy(c);
            _exit(0);
        }
    }
    for (int rank = 0; rank < SIZE; rank++) {
        int st;
        ck_assert_int_eq(waitpid(pids[rank], &st, 0), pids[rank]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status 0x%x", rank, st);
    }
    int odd_zero = 0;
    for (size_t i = 0; i < count; i++) {
        float want = value_of(0, i);
        for (int r = 1; r < SIZE; r++) want += value_of(r, i);
        for (int r = 0; r < SIZE; r++)
            if (memcmp(&results[(size_t)r * count + i], &want, sizeof want) != 0)
                ck_abort_msg("rank %d element %zu: %g, expected %g", r, i,
                             results[(size_t)r * count + i], want);
        if (i % 2 && want == 0.0f) odd_zero++;
    }
    ck_assert_int_eq(odd_zero, (int)count / 2); /* (1 + 1e8) - 1e8 == 0 in fp32 */
    for (int at = 0; at < SIZE; at++) {
        const float *gathered = results + (size_t)(SIZE + SIZE * at) * count;
        for (int r = 0; r < SIZE; r++)
            for (size_t i = 0; i < count; i++)
                if (gathered[(size_t)r * count + i] != (float)(r * 100000 + (int)i))
                    ck_abort_msg("all-gather on rank %d: rank %d element %zu", at, r, i);
    }
    munmap(area, area_bytes);
    munmap(results, sizeof(float) * count * (SIZE + SIZE * SIZE));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("executor");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_segment_has_no_name);
    tcase_add_test(tc, test_start_steps_shutdown_tp1);
    tcase_add_test(tc, test_start_steps_shutdown_tp3);
    tcase_add_test(tc, test_large_step);
    tcase_add_test(tc, test_worker_killed_mid_step);
    tcase_add_test(tc, test_worker_exit_between_steps);
    tcase_add_test(tc, test_check_without_a_step);
    tcase_add_test(tc, test_leader_killed);
    tcase_add_test(tc, test_init_failure_reaches_leader);
    tcase_add_test(tc, test_bad_worker_program);
    tcase_add_test(tc, test_step_failure_is_reported);
    tcase_add_test(tc, test_kill_all);
    tcase_add_test(tc, test_comm_shm_all_reduce_and_all_gather);
    suite_add_tcase(s, tc);
    return check_run(s);
}
