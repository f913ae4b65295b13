/* test_wire.c — the wire format: byte layout against a hand-written
 * message, roundtrips of random commands and replies, rejection of
 * malformed input, and a fuzz of both decoders. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ipc/wire.h"
#include "tests/check_run.h"

/* Check records every passing ck_assert (a write per call); hot loops use
 * this instead so thousands of iterations stay fast. */
#define REQUIRE(cond)                                                          \
    do {                                                                       \
        if (!(cond)) ck_abort_msg("%s:%d: %s (%s)", __FILE__, __LINE__, #cond, nl_last_error()); \
    } while (0)

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* One seq, written out byte by byte from the format in wire.h. */
START_TEST(test_layout_by_hand)
{
    int32_t tokens[2] = {7, -1};
    int32_t table[1] = {0x01020304};
    wire_seq seq = {.seq_id = 0x1122334455667788ull, .num_computed = 16, .num_new = 2,
                    .n_blocks = 1, .sample = 1, .sampling.temperature = 1.0f, .sampling.top_p = 0.5f,
                    .sampling.min_p = 0.0f, .sampling.top_k = 40, .sampling.n_logprobs = 3, .sampling.seed = 5, .sampling.offset = 6,
                    .tokens = tokens, .block_table = table};
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 3, .n_seqs = 1, .seqs = &seq};
    static const uint8_t want[] = {
        'N', 'C', 'M', 'D', 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 108, 0, 0, 0, 0, 0, 0, 0,
        3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0,
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
        16, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
        0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x3f, 0, 0, 0, 0, /* 1.0f, 0.5f, 0.0f */
        40, 0, 0, 0, 3, 0, 0, 0,
        5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0,
        7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x04, 0x03, 0x02, 0x01,
    };
    wire_buf enc = {0};
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_OK);
    ck_assert_uint_eq(enc.len, sizeof want);
    ck_assert_uint_eq(wire_run_size(&cmd), sizeof want);
    ck_assert_int_eq(memcmp(enc.data, want, sizeof want), 0);
    wire_buf_free(&enc);
}
END_TEST

static void random_run(uint64_t *s, wire_run *cmd, wire_seq *seqs, int32_t *ints, int max_seqs)
{
    cmd->kind = rng_next(s) % 8 ? WIRE_RUN : WIRE_SHUTDOWN;
    cmd->step_id = rng_next(s);
    cmd->n_seqs = cmd->kind == WIRE_RUN ? (int32_t)(rng_next(s) % (max_seqs + 1)) : 0;
    cmd->seqs = seqs;
    for (int i = 0; i < cmd->n_seqs; i++) {
        wire_seq *q = &seqs[i];
        q->seq_id = rng_next(s);
        q->num_computed = (int32_t)(rng_next(s) % 100000);
        q->num_new = (int32_t)(rng_next(s) % 40);
        q->n_blocks = (int32_t)(rng_next(s) % 40);
        q->sample = (int32_t)(rng_next(s) % 2);
        q->sampling.temperature = (float)(rng_next(s) % 1000) / 500.0f;
        q->sampling.top_p = (float)(rng_next(s) % 1001) / 1000.0f;
        q->sampling.min_p = (float)(rng_next(s) % 1001) / 1000.0f;
        q->sampling.top_k = (int32_t)(rng_next(s) % 200) - 1;
        q->sampling.n_logprobs = (int32_t)(rng_next(s) % (NL_MAX_LOGPROBS + 1));
        q->sampling.seed = rng_next(s);
        q->sampling.offset = rng_next(s) % 5000;
        int32_t *t = ints + i * 80;
        for (int k = 0; k < q->num_new + q->n_blocks; k++) t[k] = (int32_t)rng_next(s);
        q->tokens = t;
        q->block_table = t + q->num_new;
    }
}

static void assert_runs_equal(const wire_run *a, const wire_run *b)
{
    REQUIRE(a->kind == b->kind);
    REQUIRE(a->step_id == b->step_id);
    REQUIRE(a->n_seqs == b->n_seqs);
    for (int i = 0; i < a->n_seqs; i++) {
        const wire_seq *x = &a->seqs[i], *y = &b->seqs[i];
        REQUIRE(x->seq_id == y->seq_id);
        REQUIRE(x->num_computed == y->num_computed);
        REQUIRE(x->num_new == y->num_new);
        REQUIRE(x->n_blocks == y->n_blocks);
        REQUIRE(x->sample == y->sample);
        REQUIRE(x->sampling.temperature == y->sampling.temperature && x->sampling.top_p == y->sampling.top_p && x->sampling.min_p == y->sampling.min_p);
        REQUIRE(x->sampling.top_k == y->sampling.top_k);
        REQUIRE(x->sampling.n_logprobs == y->sampling.n_logprobs);
        REQUIRE(x->sampling.seed == y->sampling.seed);
        REQUIRE(x->sampling.offset == y->sampling.offset);
        REQUIRE(memcmp(x->tokens, y->tokens, 4 * (size_t)x->num_new) == 0);
        REQUIRE(memcmp(x->block_table, y->block_table, 4 * (size_t)x->n_blocks) == 0);
    }
}

START_TEST(test_run_roundtrip)
{
    static wire_seq seqs[64];
    static int32_t ints[64 * 80];
    wire_buf enc = {0}, arena = {0};
    uint64_t s = 0x1234567;
    for (int iter = 0; iter < 2000; iter++) {
        wire_run cmd, got;
        random_run(&s, &cmd, seqs, ints, 64);
        REQUIRE(wire_encode_run(&cmd, &enc) == NL_OK);
        REQUIRE(enc.len == wire_run_size(&cmd));
        REQUIRE(wire_decode_run(enc.data, enc.len, &arena, &got) == NL_OK);
        assert_runs_equal(&cmd, &got);
    }
    wire_buf_free(&enc);
    wire_buf_free(&arena);
}
END_TEST

static void random_reply(uint64_t *s, wire_reply *r, wire_sampled *sampled, int max)
{
    memset(r, 0, sizeof *r);
    r->step_id = rng_next(s);
    r->status = rng_next(s) % 4 ? NL_OK : NL_ERR_RUNTIME;
    if (r->status != NL_OK) {
        int n = (int)(rng_next(s) % 511);
        for (int k = 0; k < n; k++) r->error[k] = (char)('a' + rng_next(s) % 26);
    }
    r->n_sampled = (int32_t)(rng_next(s) % (max + 1));
    r->sampled = sampled;
    for (int i = 0; i < r->n_sampled; i++) {
        wire_sampled *x = &sampled[i];
        memset(x, 0, sizeof *x);
        x->seq_id = rng_next(s);
        x->token_id = (int32_t)(rng_next(s) % 151936);
        x->logprob = -(float)(rng_next(s) % 10000) / 100.0f;
        x->n_top = (int32_t)(rng_next(s) % (NL_MAX_LOGPROBS + 1));
        for (int k = 0; k < x->n_top; k++) {
            x->top_ids[k] = (int32_t)(rng_next(s) % 151936);
            x->top_logprobs[k] = -(float)k * 0.25f;
        }
    }
}

START_TEST(test_reply_roundtrip)
{
    static wire_sampled sampled[64];
    wire_buf enc = {0}, arena = {0};
    uint64_t s = 99;
    for (int iter = 0; iter < 2000; iter++) {
        wire_reply r, got;
        random_reply(&s, &r, sampled, 64);
        REQUIRE(wire_encode_reply(&r, &enc) == NL_OK);
        REQUIRE(wire_decode_reply(enc.data, enc.len, &arena, &got) == NL_OK);
        REQUIRE(got.step_id == r.step_id);
        REQUIRE(got.status == r.status);
        ck_assert_str_eq(got.error, r.status == NL_OK ? "" : r.error);
        REQUIRE(got.n_sampled == r.n_sampled);
        for (int i = 0; i < r.n_sampled; i++) {
            REQUIRE(got.sampled[i].seq_id == r.sampled[i].seq_id);
            REQUIRE(got.sampled[i].token_id == r.sampled[i].token_id);
            REQUIRE(got.sampled[i].logprob == r.sampled[i].logprob);
            REQUIRE(got.sampled[i].n_top == r.sampled[i].n_top);
            for (int k = 0; k < r.sampled[i].n_top; k++) {
                REQUIRE(got.sampled[i].top_ids[k] == r.sampled[i].top_ids[k]);
                REQUIRE(got.sampled[i].top_logprobs[k] == r.sampled[i].top_logprobs[k]);
            }
        }
    }
    wire_buf_free(&enc);
    wire_buf_free(&arena);
}
END_TEST

static void put32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

START_TEST(test_malformed_commands)
{
    int32_t tok = 5;
    wire_seq seq = {.seq_id = 1, .num_new = 1, .tokens = &tok};
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 1, .n_seqs = 1, .seqs = &seq}, got;
    wire_buf enc = {0}, arena = {0};
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_OK);
    uint8_t *m = malloc(enc.len + 16);

    /* every truncation fails */
    for (size_t n = 0; n < enc.len; n++)
        ck_assert_int_eq(wire_decode_run(enc.data, n, &arena, &got), NL_ERR_FORMAT);
    /* extra bytes fail even with a matching total length */
    memcpy(m, enc.data, enc.len);
    m[enc.len] = 0;
    put32(m + 16, (uint32_t)enc.len + 1);
    ck_assert_int_eq(wire_decode_run(m, enc.len + 1, &arena, &got), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "1 bytes after the last seq"));

    memcpy(m, enc.data, enc.len);
    put32(m + 4, 2); /* version */
    ck_assert_int_eq(wire_decode_run(m, enc.len, &arena, &got), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "version 2"));

    memcpy(m, enc.data, enc.len);
    put32(m + 8, 7); /* kind */
    ck_assert_int_eq(wire_decode_run(m, enc.len, &arena, &got), NL_ERR_FORMAT);

    /* a huge seq count is refused before anything is allocated for it */
    memcpy(m, enc.data, enc.len);
    put32(m + 32, 0xffffffffu);
    ck_assert_int_eq(wire_decode_run(m, enc.len, &arena, &got), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "4294967295 seqs"));
    ck_assert_uint_lt(arena.cap, 1u << 20);

    /* num_new of 2^31 - 1 and of -1 */
    memcpy(m, enc.data, enc.len);
    put32(m + 36 + 12, 0x7fffffffu);
    ck_assert_int_eq(wire_decode_run(m, enc.len, &arena, &got), NL_ERR_FORMAT);
    put32(m + 36 + 12, 0xffffffffu);
    ck_assert_int_eq(wire_decode_run(m, enc.len, &arena, &got), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "num_new -1"));

    /* the encoder refuses what the decoder would refuse */
    seq.sampling.n_logprobs = 21;
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_ERR_INVALID_ARG);
    seq.sampling.n_logprobs = 0;
    seq.num_new = -2;
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_ERR_INVALID_ARG);
    ck_assert_uint_eq(wire_run_size(&cmd), 0);
    seq.num_new = 1;
    cmd.kind = WIRE_SHUTDOWN;
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_ERR_INVALID_ARG);
    cmd.n_seqs = 0;
    ck_assert_int_eq(wire_encode_run(&cmd, &enc), NL_OK);
    ck_assert_int_eq(wire_decode_run(enc.data, enc.len, &arena, &got), NL_OK);
    ck_assert_int_eq(got.kind, WIRE_SHUTDOWN);
    /* a command is not a reply, and the other way round */
    wire_reply rep;
    ck_assert_int_eq(wire_decode_reply(enc.data, enc.len, &arena, &rep), NL_ERR_FORMAT);
    free(m);
    wire_buf_free(&enc);
    wire_buf_free(&arena);
}
END_TEST

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Decodes arbitrary bytes.  Whatever decodes must re-encode to the very same
 * bytes: the format has one spelling per value, so a decoder that accepted
 * something inconsistent would show up here. */
START_TEST(test_fuzz_decoders)
{
    static wire_seq seqs[16];
    static int32_t ints[16 * 80];
    static wire_sampled sampled[16];
    wire_buf enc = {0}, re = {0}, arena = {0};
    uint8_t *m = malloc(1 << 16);
    uint64_t s = 0xfeedface;
    int accepted_mutants = 0, rejected = 0;
    double t0 = now_s();
    for (int iter = 0; iter < 20000; iter++) {
        bool reply = iter % 2;
        size_t len;
        int mode = (int)(rng_next(&s) % 4);
        if (mode == 0) { /* random bytes behind a valid-looking header, or none */
            len = rng_next(&s) % 512;
            for (size_t k = 0; k < len; k++) m[k] = (uint8_t)rng_next(&s);
            if (len >= 24 && rng_next(&s) % 2) {
                memcpy(m, reply ? "NRPL" : "NCMD", 4);
                put32(m + 4, WIRE_VERSION);
                put32(m + 8, reply ? 0 : 1 + (uint32_t)(rng_next(&s) % 2));
                put32(m + 12, 0);
                put32(m + 16, (uint32_t)len);
                put32(m + 20, 0);
            }
        } else { /* a valid message, then a few mutations */
            if (reply) {
                wire_reply r;
                random_reply(&s, &r, sampled, 16);
                REQUIRE(wire_encode_reply(&r, &enc) == NL_OK);
            } else {
                wire_run cmd;
                random_run(&s, &cmd, seqs, ints, 16);
                REQUIRE(wire_encode_run(&cmd, &enc) == NL_OK);
            }
            len = enc.len;
            memcpy(m, enc.data, len);
            int n_mut = 1 + (int)(rng_next(&s) % 4);
            for (int k = 0; k < n_mut && len > 0; k++) {
                size_t at = rng_next(&s) % len;
                switch (rng_next(&s) % 4) {
                case 0: m[at] ^= (uint8_t)(1u << (rng_next(&s) % 8)); break;
                case 1: m[at] = (uint8_t)rng_next(&s); break;
                case 2: len = at; break;                      /* truncate */
                case 3: /* a whole 4-byte field */
                    if (len >= 4) put32(m + (rng_next(&s) % (len / 4)) * 4, (uint32_t)rng_next(&s));
                    break;
                }
            }
        }
        nl_status st;
        if (reply) {
            wire_reply got;
            st = wire_decode_reply(m, len, &arena, &got);
            if (st == NL_OK) {
                REQUIRE(wire_encode_reply(&got, &re) == NL_OK);
                REQUIRE(re.len == len);
                REQUIRE(memcmp(re.data, m, len) == 0);
            }
        } else {
            wire_run got;
            st = wire_decode_run(m, len, &arena, &got);
            if (st == NL_OK) {
                REQUIRE(wire_encode_run(&got, &re) == NL_OK);
                REQUIRE(re.len == len);
                REQUIRE(memcmp(re.data, m, len) == 0);
            }
        }
        if (st == NL_OK && mode != 0) accepted_mutants++;
        if (st != NL_OK) {
            REQUIRE(st == NL_ERR_FORMAT);
            rejected++;
        }
    }
    /* both outcomes happen: mutated payload bytes decode, broken framing does not */
    ck_assert_int_gt(accepted_mutants, 100);
    ck_assert_int_gt(rejected, 5000);
    ck_assert_double_lt(now_s() - t0, 10.0);
    free(m);
    wire_buf_free(&enc);
    wire_buf_free(&re);
    wire_buf_free(&arena);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("wire");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_layout_by_hand);
    tcase_add_test(tc, test_run_roundtrip);
    tcase_add_test(tc, test_reply_roundtrip);
    tcase_add_test(tc, test_malformed_commands);
    tcase_add_test(tc, test_fuzz_decoders);
    suite_add_tcase(s, tc);
    return check_run(s);
}
