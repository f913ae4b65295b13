/* test_block_manager.c — the KV block pool and prefix cache: chained
 * hashes, hits, the last-block rule, LRU reuse, ref counts, no-cache mode. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "leader/engine/block_manager.h"
#include "tests/check_run.h"

static nl_sampling_params params(int32_t max_tokens)
{
    nl_sampling_params p;
    memset(&p, 0, sizeof(p));
    p.max_tokens = max_tokens;
    p.top_p = 1.0f;
    return p;
}

/* A seq whose prompt is base, base+1, ... (n tokens). */
static seq *make_seq(uint64_t id, int32_t base, int32_t n, int32_t bs)
{
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    for (int32_t i = 0; i < n; i++) t[i] = base + i;
    nl_sampling_params p = params(64);
    seq *s = NULL;
    ck_assert_int_eq(seq_create(id, t, n, &p, 1, bs, &s), NL_OK);
    free(t);
    return s;
}

/* Runs s's whole prefill as the engine would and registers its blocks. */
static void compute_all(block_manager *bm, seq *s)
{
    s->num_computed = s->n_tokens;
    block_manager_commit(bm, s);
}

static void check_ok(const block_manager *bm)
{
    nl_status st = block_manager_check(bm);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
}

START_TEST(test_create_validates)
{
    block_manager *bm = NULL;
    ck_assert_int_eq(block_manager_create(10, 8, true, &bm), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "block_size 8"));
    ck_assert_int_eq(block_manager_create(10, 24, true, &bm), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(block_manager_create(0, 16, true, &bm), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "num_kv_blocks 0"));
    ck_assert_int_eq(block_manager_create(10, 32, true, &bm), NL_OK);
    ck_assert_int_eq(bm->n_free, 10);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_hash_chain)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(8, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 100, 40, 16);
    ck_assert(block_manager_can_allocate(bm, a));
    block_manager_allocate(bm, a);
    ck_assert_int_eq(a->n_blocks, 3);
    ck_assert_int_eq(a->num_cached, 0);
    compute_all(bm, a);
    /* Independent reference: xxh64 over (8-byte parent hash, 16 ids). */
    uint8_t buf[8 + 16 * 4];
    uint64_t parent = 0;
    for (int32_t blk = 0; blk < 2; blk++) {
        memcpy(buf, &parent, 8);
        memcpy(buf + 8, a->tokens + blk * 16, 64);
        uint64_t h = XXH64(buf, sizeof(buf), 0);
        ck_assert_uint_eq(a->block_hashes[blk], h);
        ck_assert(bm->has_hash[a->block_table[blk]]);
        ck_assert_uint_eq(bm->hash[a->block_table[blk]], h);
        parent = h;
    }
    /* The partial third block is never registered. */
    ck_assert(!bm->has_hash[a->block_table[2]]);
    ck_assert_uint_eq(bm->map.count, 2);
    check_ok(bm);
    block_manager_free(bm, a);
    seq_destroy(a);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_hits_and_refcounts)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(16, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 48, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    /* Same 48 tokens: at most 47 may hit, so only 2 full blocks. */
    seq *b = make_seq(2, 0, 48, 16);
    ck_assert(block_manager_can_allocate(bm, b));
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 32);
    ck_assert_int_eq(b->num_computed, 32);
    ck_assert_int_eq(b->block_table[0], a->block_table[0]);
    ck_assert_int_eq(b->block_table[1], a->block_table[1]);
    ck_assert_int_ne(b->block_table[2], a->block_table[2]);
    ck_assert_int_eq(bm->ref[a->block_table[0]], 2);
    ck_assert_int_eq(bm->ref[a->block_table[2]], 1);
    ck_assert_int_eq(bm->n_free, 16 - 4);
    /* 49 tokens sharing 48: all three blocks hit. */
    seq *c = make_seq(3, 0, 49, 16);
    block_manager_allocate(bm, c);
    ck_assert_int_eq(c->num_cached, 48);
    ck_assert_int_eq(bm->ref[a->block_table[2]], 2);
    /* A different first token shares nothing, even with equal later blocks. */
    seq *d = make_seq(4, 0, 49, 16);
    d->tokens[0] = 999;
    block_manager_allocate(bm, d);
    ck_assert_int_eq(d->num_cached, 0);
    check_ok(bm);
    block_manager_free(bm, a);
    ck_assert_int_eq(bm->ref[b->block_table[0]], 2);
    block_manager_free(bm, b);
    block_manager_free(bm, c);
    block_manager_free(bm, d);
    ck_assert_int_eq(bm->n_free, 16);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b); seq_destroy(c); seq_destroy(d);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_last_block_rule)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(16, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 32, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    ck_assert_uint_eq(bm->map.count, 2);
    /* Exactly the cached 32 tokens: the second block must be computed. */
    seq *b = make_seq(2, 0, 32, 16);
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 16);
    /* One token longer: both blocks hit. */
    seq *c = make_seq(3, 0, 33, 16);
    block_manager_allocate(bm, c);
    ck_assert_int_eq(c->num_cached, 32);
    /* A 16-token prompt never hits. */
    seq *d = make_seq(4, 0, 16, 16);
    block_manager_allocate(bm, d);
    ck_assert_int_eq(d->num_cached, 0);
    block_manager_free(bm, a); block_manager_free(bm, b);
    block_manager_free(bm, c); block_manager_free(bm, d);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b); seq_destroy(c); seq_destroy(d);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_lru_reuse)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(4, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 32, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    int32_t a0 = a->block_table[0], a1 = a->block_table[1];
    block_manager_free(bm, a);
    seq *b = make_seq(2, 1000, 32, 16);
    block_manager_allocate(bm, b);
    compute_all(bm, b);
    block_manager_free(bm, b);
    ck_assert_uint_eq(bm->map.count, 4);
    /* A new unrelated 16-token seq takes the least recently freed block:
     * a's deeper block (a seq frees last-to-first). */
    seq *c = make_seq(3, 5000, 16, 16);
    block_manager_allocate(bm, c);
    ck_assert_int_eq(c->block_table[0], a1);
    ck_assert_uint_eq(bm->map.count, 3);
    int32_t b0 = b->block_table[0], b1 = b->block_table[1];
    ck_assert(!bm->has_hash[a1]);
    ck_assert(bm->has_hash[a0] && bm->has_hash[b0] && bm->has_hash[b1]);
    /* a's prefix block still hits; its second block comes from the head of
     * the free list, now b's deeper block. */
    seq *a2 = make_seq(4, 0, 17, 16);
    block_manager_allocate(bm, a2);
    ck_assert_int_eq(a2->num_cached, 16);
    ck_assert_int_eq(a2->block_table[0], a0);
    ck_assert_int_eq(a2->block_table[1], b1);
    ck_assert(bm->has_hash[b0]);
    block_manager_free(bm, a2);
    block_manager_free(bm, c);
    /* b's first block is still cached. */
    seq *b2 = make_seq(5, 1000, 20, 16);
    block_manager_allocate(bm, b2);
    ck_assert_int_eq(b2->num_cached, 16);
    ck_assert_int_eq(b2->block_table[0], b0);
    block_manager_free(bm, b2);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b); seq_destroy(c); seq_destroy(a2); seq_destroy(b2);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_unhashed_blocks_reused_first)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(4, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 16, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a); /* one full block, registered */
    seq *b = make_seq(2, 100, 8, 16);
    block_manager_allocate(bm, b);
    compute_all(bm, b); /* partial, not registered */
    int32_t b0 = b->block_table[0];
    block_manager_free(bm, a);
    block_manager_free(bm, b);
    seq *c = make_seq(3, 200, 8, 16);
    block_manager_allocate(bm, c);
    ck_assert_int_eq(c->block_table[0], b0);
    block_manager_free(bm, c);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b); seq_destroy(c);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_collision_needs_equal_tokens)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(8, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 32, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    block_manager_free(bm, a);
    /* Pretend a different block content produced the same hash. */
    bm->tokens[(size_t)a->block_table[0] * 16 + 3] = 77777;
    seq *b = make_seq(2, 0, 33, 16);
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 0);
    block_manager_free(bm, b);
    seq_destroy(a); seq_destroy(b);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_can_allocate_counts_shared_hits)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(3, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 48, 16);
    ck_assert(block_manager_can_allocate(bm, a));
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    ck_assert_int_eq(bm->n_free, 0);
    /* Needs 2 blocks, 1 is a hit held by a: still one new block, none free. */
    seq *b = make_seq(2, 0, 17, 16);
    ck_assert(!block_manager_can_allocate(bm, b));
    block_manager_free(bm, a);
    /* Now the hit is a free block: it leaves the free list like a new one. */
    ck_assert(block_manager_can_allocate(bm, b));
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 16);
    ck_assert_int_eq(bm->n_free, 1);
    check_ok(bm);
    seq *big = make_seq(3, 500, 64, 16);
    ck_assert(!block_manager_can_allocate(bm, big));
    block_manager_free(bm, b);
    seq_destroy(a); seq_destroy(b); seq_destroy(big);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_append_slot_registers_full_block)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(4, 16, true, &bm), NL_OK);
    seq *a = make_seq(1, 0, 15, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    ck_assert_uint_eq(bm->map.count, 0);
    seq_append_token(a, 15);               /* 16 tokens: still one block */
    ck_assert(block_manager_can_append(bm, a));
    block_manager_append_slot(bm, a);
    ck_assert_int_eq(a->n_blocks, 1);
    a->num_computed = 16;                  /* the decode step computed it */
    block_manager_commit(bm, a);
    ck_assert_uint_eq(bm->map.count, 1);
    seq_append_token(a, 16);               /* 17 tokens: a second block */
    block_manager_append_slot(bm, a);
    ck_assert_int_eq(a->n_blocks, 2);
    ck_assert_int_eq(bm->n_free, 2);
    /* The block completed by decoding serves a later prompt. */
    seq *b = make_seq(2, 0, 20, 16);
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 16);
    ck_assert_int_eq(b->block_table[0], a->block_table[0]);
    block_manager_free(bm, a);
    block_manager_free(bm, b);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_no_prefix_caching)
{
    block_manager *bm;
    ck_assert_int_eq(block_manager_create(8, 16, false, &bm), NL_OK);
    seq *a = make_seq(1, 0, 40, 16);
    block_manager_allocate(bm, a);
    compute_all(bm, a);
    ck_assert_uint_eq(bm->map.count, 0);
    seq *b = make_seq(2, 0, 40, 16);
    block_manager_allocate(bm, b);
    ck_assert_int_eq(b->num_cached, 0);
    for (int i = 0; i < 3; i++) ck_assert_int_ne(a->block_table[i], b->block_table[i]);
    block_manager_free(bm, a);
    block_manager_free(bm, b);
    ck_assert_int_eq(bm->n_free, 8);
    check_ok(bm);
    seq_destroy(a); seq_destroy(b);
    block_manager_destroy(bm);
}
END_TEST

START_TEST(test_u64map_churn)
{
    /* Insert/remove many keys against a plain array model. */
    u64map m;
    ck_assert_int_eq(u64map_init(&m, 4), NL_OK);
    enum { N = 5000 };
    static int64_t model[N];
    for (int i = 0; i < N; i++) model[i] = -1;
    uint64_t x = 12345;
    for (int it = 0; it < 200000; it++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((x >> 33) % N);
        uint64_t key = (uint64_t)k * 0x100000001ull; /* clustered keys */
        if ((x >> 20) & 1) {
            ck_assert_int_eq(u64map_put(&m, key, it), NL_OK);
            model[k] = it;
        } else {
            ck_assert_int_eq(u64map_remove(&m, key), model[k] >= 0);
            model[k] = -1;
        }
    }
    uint32_t count = 0;
    for (int k = 0; k < N; k++) {
        int64_t v;
        bool found = u64map_get(&m, (uint64_t)k * 0x100000001ull, &v);
        ck_assert_int_eq(found, model[k] >= 0);
        if (found) {
            ck_assert_int_eq(v, model[k]);
            count++;
        }
    }
    ck_assert_uint_eq(count, m.count);
    u64map_free(&m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("block_manager");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_create_validates);
    tcase_add_test(tc, test_hash_chain);
    tcase_add_test(tc, test_hits_and_refcounts);
    tcase_add_test(tc, test_last_block_rule);
    tcase_add_test(tc, test_lru_reuse);
    tcase_add_test(tc, test_unhashed_blocks_reused_first);
    tcase_add_test(tc, test_collision_needs_equal_tokens);
    tcase_add_test(tc, test_can_allocate_counts_shared_hits);
    tcase_add_test(tc, test_append_slot_registers_full_block);
    tcase_add_test(tc, test_no_prefix_caching);
    tcase_add_test(tc, test_u64map_churn);
    suite_add_tcase(s, tc);
    return check_run(s);
}
