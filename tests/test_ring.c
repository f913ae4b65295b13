/* test_ring.c — the shared-memory ring: wrap-around, back-pressure, large
 * messages, several readers, and waits that give up when a check fails. */
#include <check.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ipc/ring.h"
#include "ipc/wire.h"
#include "tests/check_run.h"

/* Check records every passing ck_assert (a write per call); hot loops use
 * this instead so thousands of iterations stay fast. */
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) ck_abort_msg("%s:%d: %s (%s)", __FILE__, __LINE__, #cond, nl_last_error()); \
    } while (0)

/* A shared anonymous mapping, so forked readers see the writer's ring. */
static void *shared_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Message i has length len_of(i) and byte k = (i * 31 + k) & 0xff. */
static size_t len_of(uint64_t i, size_t max)
{
    uint64_t s = i * 0x9e3779b97f4a7c15ull + 1;
    return (size_t)(rng_next(&s) % (max + 1));
}

static void fill_msg(uint8_t *m, uint64_t i, size_t len)
{
    for (size_t k = 0; k < len; k++) m[k] = (uint8_t)(i * 31 + k);
}

static int msg_ok(const ring_buf *b, uint64_t i, size_t max)
{
    if (b->len != len_of(i, max)) return 0;
    for (size_t k = 0; k < b->len; k++)
        if (b->data[k] != (uint8_t)(i * 31 + k)) return 0;
    return 1;
}

START_TEST(test_wrap_around)
{
    const size_t cap = 4096, max = 1500;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 1, &r), NL_OK);
    ck_assert_uint_eq(ring_max_message(&r), cap - 8);

    uint8_t msg[1500];
    ring_buf b = {0};
    uint64_t written = 0, read = 0, s = 42;
    /* Irregular bursts so the message boundaries land everywhere relative
     * to the end of the data area; the ring wraps hundreds of times. */
    while (read < 5000) {
        int burst = (int)(rng_next(&s) % 3) + 1;
        for (int k = 0; k < burst && written < 5000; k++) {
            size_t len = len_of(written, max);
            uint64_t used = atomic_load(&r.sh->write_pos) - atomic_load(&r.sh->readers[0].pos);
            if (cap - used < 8 + ((len + 7) & ~(size_t)7)) break;
            fill_msg(msg, written, len);
            REQUIRE(ring_write(&r, msg, len, NULL, NULL) == NL_OK);
            written++;
        }
        while (read < written) {
            REQUIRE(ring_read(&r, 0, &b, NULL, NULL) == NL_OK);
            REQUIRE(msg_ok(&b, read, max));
            read++;
            if (rng_next(&s) % 2) break;
        }
    }
    ck_assert_uint_gt(atomic_load(&r.sh->write_pos), 100 * cap);
    ring_buf_free(&b);
    munmap(mem, ring_bytes(cap));
}
END_TEST

static int check_calls;
static nl_status count_checks(void *ctx)
{
    check_calls++;
    return NL_OK;
}

/* Reads n messages slowly in a child; exit status 0 when all were right. */
static pid_t spawn_reader(ring *r, int reader, uint64_t n, size_t max, int delay_us,
                          int initial_delay_ms)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        usleep((useconds_t)initial_delay_ms * 1000);
        ring_buf b = {0};
        for (uint64_t i = 0; i < n; i++) {
            if (ring_read(r, reader, &b, NULL, NULL) != NL_OK) _exit(2);
            if (!msg_ok(&b, i, max)) _exit(3);
            if (delay_us) usleep((useconds_t)delay_us);
        }
        _exit(0);
    }
    return pid;
}

static void expect_child_ok(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "reader failed with status 0x%x", st);
}

START_TEST(test_back_pressure)
{
    const size_t cap = 2048, max = 700;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 1, &r), NL_OK);
    /* The reader starts 150 ms late and then naps between messages: the
     * writer must stop at a full ring, sleep, and lose nothing. */
    pid_t pid = spawn_reader(&r, 0, 300, max, 200, 150);
    uint8_t msg[700];
    check_calls = 0;
    for (uint64_t i = 0; i < 300; i++) {
        size_t len = len_of(i, max);
        fill_msg(msg, i, len);
        REQUIRE(ring_write(&r, msg, len, count_checks, NULL) == NL_OK);
        uint64_t used = atomic_load(&r.sh->write_pos) - atomic_load(&r.sh->readers[0].pos);
        REQUIRE(used <= cap);
    }
    REQUIRE(check_calls > 0); /* it did wait for room */
    expect_child_ok(pid);
    munmap(mem, ring_bytes(cap));
}
END_TEST

START_TEST(test_every_reader_gets_every_message)
{
    const size_t cap = 8192, max = 2000;
    const int n_readers = 4;
    const uint64_t n = 2000;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, n_readers, &r), NL_OK);
    pid_t pids[4];
    for (int k = 0; k < n_readers; k++)
        pids[k] = spawn_reader(&r, k, n, max, k == 2 ? 50 : 0, 0);
    uint8_t msg[2000];
    for (uint64_t i = 0; i < n; i++) {
        size_t len = len_of(i, max);
        fill_msg(msg, i, len);
        ck_assert_int_eq(ring_write(&r, msg, len, NULL, NULL), NL_OK);
    }
    for (int k = 0; k < n_readers; k++) expect_child_ok(pids[k]);
    for (int k = 0; k < n_readers; k++)
        ck_assert_uint_eq(atomic_load(&r.sh->readers[k].pos), atomic_load(&r.sh->write_pos));
    munmap(mem, ring_bytes(cap));
}
END_TEST

/* The size the task is sized for: 512 seqs, each with 2048 blocks. */
START_TEST(test_large_command)
{
    const size_t cap = 64u << 20;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 2, &r), NL_OK);

    enum { N_SEQS = 512, N_BLOCKS = 2048 };
    wire_seq *seqs = calloc(N_SEQS, sizeof *seqs);
    int32_t *tables = malloc(sizeof(int32_t) * N_SEQS * N_BLOCKS);
    int32_t *tokens = malloc(sizeof(int32_t) * N_SEQS);
    for (int i = 0; i < N_SEQS; i++) {
        for (int k = 0; k < N_BLOCKS; k++) tables[i * N_BLOCKS + k] = i * 7919 + k;
        tokens[i] = 1000 + i;
        seqs[i] = (wire_seq){.seq_id = 100 + i, .num_computed = N_BLOCKS * 16 - 1, .num_new = 1,
                             .n_blocks = N_BLOCKS, .sample = 1, .sampling.temperature = 0.5f,
                             .sampling.top_p = 1.0f, .tokens = &tokens[i],
                             .block_table = &tables[i * N_BLOCKS]};
    }
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 9, .n_seqs = N_SEQS, .seqs = seqs};
    wire_buf enc = {0}, arena = {0};
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_OK);
    ck_assert_uint_gt(enc.len, (size_t)N_SEQS * N_BLOCKS * 4);
    ck_assert_int_eq(ring_write(&r, enc.data, enc.len, NULL, NULL), NL_OK);

    ring_buf b = {0};
    for (int reader = 0; reader < 2; reader++) {
        REQUIRE(ring_read(&r, reader, &b, NULL, NULL) == NL_OK);
        wire_run got;
        REQUIRE(wire_decode_run(b.data, b.len, &arena, &got) == NL_OK);
        REQUIRE(got.n_seqs == N_SEQS);
        for (int i = 0; i < N_SEQS; i++) {
            REQUIRE(got.seqs[i].seq_id == 100 + i);
            REQUIRE(got.seqs[i].n_blocks == N_BLOCKS);
            REQUIRE(got.seqs[i].tokens[0] == 1000 + i);
            REQUIRE(got.seqs[i].block_table[N_BLOCKS - 1] == i * 7919 + N_BLOCKS - 1);
            REQUIRE(memcmp(got.seqs[i].block_table, &tables[i * N_BLOCKS],
                           N_BLOCKS * sizeof(int32_t)) == 0);
        }
    }
    ring_buf_free(&b);
    wire_buf_free(&enc);
    wire_buf_free(&arena);
    free(seqs);
    free(tables);
    free(tokens);
    munmap(mem, ring_bytes(cap));
}
END_TEST

START_TEST(test_oversized_message_rejected)
{
    const size_t cap = 1024;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 1, &r), NL_OK);
    static uint8_t big[2048];
    ck_assert_int_eq(ring_write(&r, big, cap - 7, NULL, NULL), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "exceeds the ring's limit of 1016 bytes"));
    /* The largest allowed message fills the ring exactly and still works. */
    ck_assert_int_eq(ring_write(&r, big, cap - 8, NULL, NULL), NL_OK);
    ring_buf b = {0};
    ck_assert_int_eq(ring_read(&r, 0, &b, NULL, NULL), NL_OK);
    ck_assert_uint_eq(b.len, cap - 8);
    ring_buf_free(&b);
    munmap(mem, ring_bytes(cap));
}
END_TEST

static nl_status fail_on_third(void *ctx)
{
    int *n = ctx;
    if (++*n == 3) return nl_error(NL_ERR_WORKER, "peer gone");
    return NL_OK;
}

START_TEST(test_wait_gives_up_when_check_fails)
{
    const size_t cap = 256;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 1, &r), NL_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int calls = 0;
    ring_buf b = {0};
    ck_assert_int_eq(ring_read(&r, 0, &b, fail_on_third, &calls), NL_ERR_WORKER);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_int_eq(calls, 3);
    ck_assert_double_ge(ms, 2.5 * RING_WAIT_SLICE_MS);
    ck_assert_double_le(ms, 10.0 * RING_WAIT_SLICE_MS);
    ck_assert_str_eq(nl_last_error(), "peer gone");

    /* A full ring makes the writer wait the same way. */
    uint8_t msg[200] = {0};
    ck_assert_int_eq(ring_write(&r, msg, sizeof msg, NULL, NULL), NL_OK);
    calls = 0;
    ck_assert_int_eq(ring_write(&r, msg, sizeof msg, fail_on_third, &calls), NL_ERR_WORKER);
    munmap(mem, ring_bytes(cap));
}
END_TEST

START_TEST(test_attach_checks_header)
{
    const size_t cap = 256;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_attach(mem, ring_bytes(cap), &r), NL_ERR_FORMAT);
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 1, &r), NL_OK);
    ck_assert_int_eq(ring_attach(mem, ring_bytes(cap) - 8, &r), NL_ERR_FORMAT);
    ck_assert_int_eq(ring_attach(mem, ring_bytes(cap), &r), NL_OK);
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 0, &r), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), 100, 1, &r), NL_ERR_INVALID_ARG);
    munmap(mem, ring_bytes(cap));
}
END_TEST

/* A process that scribbles on the segment must cause an error, never a
 * crash or a hang: the reader count, the capacity and each side's position
 * are the handle's own, and what the segment claims is checked. */
START_TEST(test_scribbled_segment_is_an_error)
{
    const size_t cap = 256;
    void *mem = shared_zeroed(ring_bytes(cap));
    ring r;
    ck_assert_int_eq(ring_format(mem, ring_bytes(cap), cap, 2, &r), NL_OK);
    uint8_t msg[40] = {1, 2, 3};
    ring_buf b = {0};

    /* a reader count raised in the segment is not re-read: no walk past
     * the readers array, and reader 5 stays refused */
    r.sh->n_readers = 1000000;
    ck_assert_int_eq(ring_write(&r, msg, sizeof msg, NULL, NULL), NL_OK);
    ck_assert_int_eq(ring_read(&r, 5, &b, NULL, NULL), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(ring_read(&r, 0, &b, NULL, NULL), NL_OK);
    ck_assert_int_eq(ring_read(&r, 1, &b, NULL, NULL), NL_OK);

    /* a reader's position ahead of the writer would let the writer
     * overwrite unread data */
    atomic_store(&r.sh->readers[1].pos, 1u << 30);
    ck_assert_int_eq(ring_write(&r, msg, sizeof msg, NULL, NULL), NL_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "corrupt shared memory"));
    atomic_store(&r.sh->readers[1].pos, r.read_pos[1]);

    /* a writer's position more than a ring ahead, or behind the reader */
    uint64_t wp = atomic_load(&r.sh->write_pos);
    atomic_store(&r.sh->write_pos, wp + 10 * cap);
    ck_assert_int_eq(ring_read(&r, 0, &b, NULL, NULL), NL_ERR_RUNTIME);
    atomic_store(&r.sh->write_pos, 0);
    ck_assert_int_eq(ring_read(&r, 0, &b, NULL, NULL), NL_ERR_RUNTIME);
    atomic_store(&r.sh->write_pos, wp);

    /* a message length longer than what was published */
    ck_assert_int_eq(ring_write(&r, msg, 8, NULL, NULL), NL_OK);
    uint64_t bogus = 200;
    memcpy(r.data + (r.read_pos[0] % cap), &bogus, 8);
    ck_assert_int_eq(ring_read(&r, 0, &b, NULL, NULL), NL_ERR_RUNTIME);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "corrupt message length 200"));
    ring_buf_free(&b);
    munmap(mem, ring_bytes(cap));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_wrap_around);
    tcase_add_test(tc, test_back_pressure);
    tcase_add_test(tc, test_every_reader_gets_every_message);
    tcase_add_test(tc, test_large_command);
    tcase_add_test(tc, test_oversized_message_rejected);
    tcase_add_test(tc, test_wait_gives_up_when_check_fails);
    tcase_add_test(tc, test_attach_checks_header);
    tcase_add_test(tc, test_scribbled_segment_is_an_error);
    suite_add_tcase(s, tc);
    return check_run(s);
}
