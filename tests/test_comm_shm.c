/* test_comm_shm.c — the CPU shared-memory all-reduce and gather between
 * forked ranks: exact sums in rank order, and barriers that end in an error
 * (never a hang) when a peer is stuck or the area is overwritten. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/comm_area.h"
#include "kernels/comm_shm.h"
#include "tests/check_run.h"

static void *shared_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

/* rank r contributes v[i] = (r + 1) * i + 0.25; the sum over ranks, in
 * rank order, is exact in fp32 for these small values. */
static float value(int rank, size_t i)
{
    return (float)(rank + 1) * (float)(i % 1000) + 0.25f;
}

START_TEST(test_all_reduce_and_gather_exact)
{
    const int tp = 3;
    const size_t count = 3u << 20; /* more than one 4 MiB slot of fp32 */
    size_t bytes = 4096 + (size_t)(tp + 1) * (1u << 20);
    void *area = shared_zeroed(bytes);
    pid_t kids[3];
    for (int rank = 0; rank < tp; rank++) {
        kids[rank] = fork();
        ck_assert_int_ge(kids[rank], 0);
        if (kids[rank] != 0) continue;
        nl_comm *c;
        if (nl_comm_shm_create(area, bytes, rank, tp, NULL, NULL, &c) != NL_OK) _exit(2);
        float *buf = malloc(count * sizeof *buf);
        for (size_t i = 0; i < count; i++) buf[i] = value(rank, i);
        if (c->ops->all_reduce_sum(c, buf, count, NL_DTYPE_F32) != NL_OK) _exit(3);
        for (size_t i = 0; i < count; i++) {
            float want = 0.0f;
            for (int r = 0; r < tp; r++) want += value(r, i);
            if (buf[i] != want) _exit(4);
        }
        int32_t mine[5], all[15];
        for (int k = 0; k < 5; k++) mine[k] = rank * 100 + k;
        if (c->ops->all_gather(c, mine, all, 5, NL_DTYPE_I32) != NL_OK) _exit(5);
        for (int r = 0; r < tp; r++) /* on every rank */
            for (int k = 0; k < 5; k++)
                if (all[r * 5 + k] != r * 100 + k) _exit(6);
        nl_comm_destroy(c);
        _exit(0);
    }
    for (int rank = 0; rank < tp; rank++) {
        int status;
        ck_assert_int_eq(waitpid(kids[rank], &status, 0), kids[rank]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d exit %d", rank,
                      WEXITSTATUS(status));
    }
    munmap(area, bytes);
}
END_TEST

/* A peer that never arrives: the waiting rank gives up after the bound. */
START_TEST(test_barrier_wait_is_bounded)
{
    setenv("NANOLLM_COMM_TIMEOUT_S", "0.3", 1);
    size_t bytes = 4096 + 3 * 4096;
    void *area = shared_zeroed(bytes);
    nl_comm *c;
    ck_assert_int_eq(nl_comm_shm_create(area, bytes, 0, 2, NULL, NULL, &c), NL_OK);
    float x = 1.0f;
    ck_assert_int_eq(c->ops->all_reduce_sum(c, &x, 1, NL_DTYPE_F32), NL_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "waited"));
    nl_comm_destroy(c);
    unsetenv("NANOLLM_COMM_TIMEOUT_S");

    /* an arrival count past the number of ranks is a corrupt area */
    memset(area, 0, bytes);
    atomic_uint *arrived = (atomic_uint *)((char *)area + 64); /* after the abort word's line */
    atomic_store(arrived, 7);
    ck_assert_int_eq(nl_comm_shm_create(area, bytes, 0, 2, NULL, NULL, &c), NL_OK);
    ck_assert_int_eq(c->ops->all_reduce_sum(c, &x, 1, NL_DTYPE_F32), NL_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "corrupt shared memory"));
    nl_comm_destroy(c);

    setenv("NANOLLM_COMM_TIMEOUT_S", "soon", 1);
    ck_assert_int_eq(nl_comm_shm_create(area, bytes, 0, 2, NULL, NULL, &c), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "NANOLLM_COMM_TIMEOUT_S"));
    unsetenv("NANOLLM_COMM_TIMEOUT_S");
    munmap(area, bytes);
}
END_TEST

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A rank that never arrives: once the abort word at the head of the area
 * is set (as the leader does when it finds a rank dead), the waiting rank
 * gives up at once instead of waiting for ever. */
START_TEST(test_abort_word)
{
    const size_t area_bytes = 4096 + 3 * 1024;
    void *area = mmap(NULL, area_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(area, MAP_FAILED);
    double *gave_up_after = mmap(NULL, sizeof(double), PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid = fork();
    if (pid == 0) {
        nl_comm *c;
        if (nl_comm_shm_create(area, area_bytes, 0, 2, NULL, NULL, &c) != NL_OK) _exit(2);
        float x = 1.0f;
        nl_status st = c->ops->all_reduce_sum(c, &x, 1, NL_DTYPE_F32);
        *gave_up_after = now_ms();
        _exit(st == NL_ERR_WORKER && strstr(nl_last_error(), "gave up (reason 0x101)") ? 0 : 3);
    }
    usleep(200 * 1000);
    double aborted_at = now_ms();
    nl_comm_area_abort(area, NL_COMM_ABORT_RANK_DEAD + 1);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status 0x%x", st);
    ck_assert_msg(*gave_up_after - aborted_at < 1000.0, "gave up %.0f ms after the abort",
                  *gave_up_after - aborted_at);
    munmap(gave_up_after, sizeof(double));
    munmap(area, area_bytes);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("comm_shm");
    TCase *tc = tcase_create("comm_shm");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_all_reduce_and_gather_exact);
    tcase_add_test(tc, test_barrier_wait_is_bounded);
    tcase_add_test(tc, test_abort_word);
    suite_add_tcase(s, tc);
    return check_run(s);
}
