/* test_samples.c — the samples area (ipc/samples.h): rank 0 publishes a
 * step's samples, a rank resolves the next command's placeholders from
 * them; a placeholder the last step cannot answer, a failed step, a stale
 * slot and a corrupted count are refused with messages, never read past the
 * area. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/samples.h"
#include "tests/check_run.h"

enum { CAP = 4 };

static samples_area area;
static void *mem;

static void setup(void)
{
    size_t bytes = samples_area_bytes(CAP);
    mem = calloc(1, bytes);
    ck_assert_int_eq(samples_area_format(mem, bytes, CAP, &area), NL_OK);
}

static void teardown(void)
{
    free(mem);
}

static void publish(uint64_t step, nl_status st, int n, const uint64_t *seqs, const int32_t *tokens)
{
    wire_sampled s[CAP + 1];
    memset(s, 0, sizeof s);
    for (int i = 0; i < n; i++) {
        s[i].seq_id = seqs[i];
        s[i].token_id = tokens[i];
    }
    samples_publish(&area, step, st, s, n);
}

/* A command of step `step` over seqs[n], each with one new token: toks[i]. */
static wire_run command(uint64_t step, wire_seq *q, int n, const uint64_t *seqs, int32_t *toks)
{
    for (int i = 0; i < n; i++)
        q[i] = (wire_seq){.seq_id = seqs[i], .num_new = 1, .tokens = &toks[i]};
    return (wire_run){.kind = WIRE_RUN, .step_id = step, .n_seqs = n, .seqs = q};
}

START_TEST(test_resolve)
{
    uint64_t seqs[3] = {7, 8, 9};
    int32_t sampled[3] = {70, 80, 90};
    publish(5, NL_OK, 3, seqs, sampled);
    /* step 6: seq 9 and 7 take their samples, seq 8 brings its own token */
    uint64_t next[3] = {9, 8, 7};
    int32_t toks[3] = {WIRE_TOKEN_PREVIOUS, 123, WIRE_TOKEN_PREVIOUS};
    wire_seq q[3];
    wire_run cmd = command(6, q, 3, next, toks);
    ck_assert_int_eq(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_int_eq(toks[0], 90);
    ck_assert_int_eq(toks[1], 123);
    ck_assert_int_eq(toks[2], 70);
    /* the other slot: step 6's samples do not disturb step 5's */
    publish(6, NL_OK, 1, seqs, sampled);
    toks[0] = WIRE_TOKEN_PREVIOUS;
    cmd = command(6, q, 1, next, toks);
    ck_assert_int_eq(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_int_eq(toks[0], 90);
}
END_TEST

START_TEST(test_refusals)
{
    uint64_t seqs[2] = {1, 2};
    int32_t sampled[2] = {10, 20};
    wire_seq q[2];
    int32_t toks[2] = {WIRE_TOKEN_PREVIOUS, WIRE_TOKEN_PREVIOUS};
    /* nothing published yet */
    wire_run cmd = command(1, q, 1, seqs, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "did not run just before"));
    /* a seq the step did not sample */
    publish(1, NL_OK, 1, seqs, sampled);
    uint64_t other = 3;
    cmd = command(2, q, 1, &other, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "seq 3's input is step 1's sample"));
    /* a step that is not the one just before */
    toks[0] = WIRE_TOKEN_PREVIOUS;
    cmd = command(4, q, 1, seqs, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    /* a failed step */
    publish(2, NL_ERR_NOMEM, 0, seqs, sampled);
    cmd = command(3, q, 1, seqs, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "which failed"));
    /* more samples than the area holds: published as a failure */
    publish(3, NL_OK, CAP + 1, (uint64_t[CAP + 1]){1, 2, 3, 4, 5}, (int32_t[CAP + 1]){0});
    cmd = command(4, q, 1, seqs, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    /* a count scribbled in the shared slot is never trusted */
    publish(4, NL_OK, 2, seqs, sampled);
    area.hdr->slots[0].n = 1 << 30;
    cmd = command(5, q, 1, seqs, toks);
    ck_assert_int_ne(samples_resolve(&area, &cmd, false, NULL, NULL), NL_OK);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "room for"));
    /* a command without placeholders never looks */
    toks[0] = 5;
    toks[1] = 6;
    cmd = command(99, q, 2, seqs, toks);
    ck_assert_int_eq(samples_resolve(&area, &cmd, true, NULL, NULL), NL_OK);
}
END_TEST

/* Publishes step 10 once the waiter has counted itself as asleep (or
 * after 5 s, when the test then fails on the count). */
static void *publish_later(void *arg)
{
    bool *saw_sleeper = arg;
    for (int i = 0; i < 5000 && !*saw_sleeper; i++) {
        *saw_sleeper = atomic_load(&area.hdr->waiters) > 0;
        struct timespec pause = {0, 1000000L};
        nanosleep(&pause, NULL);
    }
    publish(10, NL_OK, 1, (uint64_t[]){3}, (int32_t[]){33});
    return NULL;
}

static nl_status leader_gone(void *ctx)
{
    (void)ctx;
    return nl_error(NL_ERR_WORKER, "the leader is gone");
}

/* Another rank sleeps until rank 0 publishes the step before its command
 * and is woken by it; a failing liveness check ends the wait instead. */
START_TEST(test_waits_for_publish)
{
    pthread_t t;
    bool saw_sleeper = false;
    ck_assert_int_eq(pthread_create(&t, NULL, publish_later, &saw_sleeper), 0);
    int32_t tok = WIRE_TOKEN_PREVIOUS;
    wire_seq q[1];
    wire_run cmd = command(11, q, 1, (uint64_t[]){3}, &tok);
    ck_assert_int_eq(samples_resolve(&area, &cmd, true, NULL, NULL), NL_OK);
    pthread_join(t, NULL);
    ck_assert(saw_sleeper);
    ck_assert_int_eq(tok, 33);
    ck_assert_int_eq(area.hdr->waiters, 0);

    tok = WIRE_TOKEN_PREVIOUS;
    cmd = command(12, q, 1, (uint64_t[]){3}, &tok); /* step 11 is never published */
    ck_assert_int_eq(samples_resolve(&area, &cmd, true, leader_gone, NULL), NL_ERR_WORKER);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "leader is gone"));
    ck_assert_int_eq(area.hdr->waiters, 0);
}
END_TEST

START_TEST(test_attach_checks_size)
{
    samples_area other;
    ck_assert_int_eq(samples_area_attach(mem, samples_area_bytes(CAP), &other), NL_OK);
    ck_assert_int_eq(other.capacity, CAP);
    ck_assert_int_ne(samples_area_attach(mem, samples_area_bytes(CAP) - 1, &other), NL_OK);
    ((samples_header *)mem)->capacity = 1u << 31;
    ck_assert_int_ne(samples_area_attach(mem, samples_area_bytes(CAP), &other), NL_OK);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("samples");
    TCase *tc = tcase_create("samples");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_resolve);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_waits_for_publish);
    tcase_add_test(tc, test_attach_checks_size);
    suite_add_tcase(s, tc);
    return check_run(s);
}
