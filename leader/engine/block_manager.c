/* block_manager.c — KV block pool, ref counts and the prefix cache
 * (see block_manager.h for the rules). */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include "leader/engine/block_manager.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/status.h"

#define BLOCK_SIZE_MAX 4096

nl_status block_manager_create(int32_t num_blocks, int32_t block_size,
                               bool prefix_caching, block_manager **out)
{
    *out = NULL;
    if (block_size <= 0 || block_size % 16 != 0 || block_size > BLOCK_SIZE_MAX)
        return nl_error(NL_ERR_INVALID_ARG,
                        "block_size %d: must be a positive multiple of 16, at most %d",
                        block_size, BLOCK_SIZE_MAX);
    if (num_blocks <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "num_kv_blocks %d: must be positive", num_blocks);
    block_manager *bm = calloc(1, sizeof(*bm));
    if (!bm) return nl_error(NL_ERR_NOMEM, "block manager: out of memory");
    bm->num_blocks = num_blocks;
    bm->block_size = block_size;
    bm->prefix_caching = prefix_caching;
    size_t n = (size_t)num_blocks;
    bm->ref = calloc(n, sizeof(*bm->ref));
    bm->has_hash = calloc(n, 1);
    bm->hash = calloc(n, sizeof(*bm->hash));
    bm->parent = calloc(n, sizeof(*bm->parent));
    bm->prev = malloc(n * sizeof(*bm->prev));
    bm->next = malloc(n * sizeof(*bm->next));
    bm->is_free = malloc(n);
    if (prefix_caching) bm->tokens = malloc(n * (size_t)block_size * sizeof(int32_t));
    if (!bm->ref || !bm->has_hash || !bm->hash || !bm->parent || !bm->prev || !bm->next ||
        !bm->is_free || (prefix_caching && !bm->tokens)) {
        block_manager_destroy(bm);
        return nl_error(NL_ERR_NOMEM, "block manager: out of memory for %d blocks", num_blocks);
    }
    nl_status st = u64map_init(&bm->map, prefix_caching ? (uint32_t)num_blocks : 1);
    if (st != NL_OK) {
        block_manager_destroy(bm);
        return st;
    }
    for (int32_t b = 0; b < num_blocks; b++) {
        bm->prev[b] = b - 1;
        bm->next[b] = b + 1 < num_blocks ? b + 1 : -1;
        bm->is_free[b] = 1;
    }
    bm->free_head = 0;
    bm->free_tail = num_blocks - 1;
    bm->n_free = num_blocks;
    *out = bm;
    return NL_OK;
}

void block_manager_destroy(block_manager *bm)
{
    if (!bm) return;
    free(bm->ref); free(bm->has_hash); free(bm->hash); free(bm->parent);
    free(bm->prev); free(bm->next); free(bm->is_free); free(bm->tokens);
    u64map_free(&bm->map);
    free(bm);
}

/* ---- free list -------------------------------------------------------- */

static void free_list_remove(block_manager *bm, int32_t b)
{
    int32_t p = bm->prev[b], n = bm->next[b];
    if (p >= 0) bm->next[p] = n; else bm->free_head = n;
    if (n >= 0) bm->prev[n] = p; else bm->free_tail = p;
    bm->is_free[b] = 0;
    bm->n_free--;
}

static void free_list_push_tail(block_manager *bm, int32_t b)
{
    bm->prev[b] = bm->free_tail;
    bm->next[b] = -1;
    if (bm->free_tail >= 0) bm->next[bm->free_tail] = b; else bm->free_head = b;
    bm->free_tail = b;
    bm->is_free[b] = 1;
    bm->n_free++;
}

static void free_list_push_head(block_manager *bm, int32_t b)
{
    bm->prev[b] = -1;
    bm->next[b] = bm->free_head;
    if (bm->free_head >= 0) bm->prev[bm->free_head] = b; else bm->free_tail = b;
    bm->free_head = b;
    bm->is_free[b] = 1;
    bm->n_free++;
}

static void forget_hash(block_manager *bm, int32_t b)
{
    if (!bm->has_hash[b]) return;
    int64_t owner;
    if (u64map_get(&bm->map, bm->hash[b], &owner) && owner == b)
        u64map_remove(&bm->map, bm->hash[b]);
    bm->has_hash[b] = 0;
}

/* Takes the least recently freed block; its old identity is forgotten. */
static int32_t take_free_block(block_manager *bm)
{
    int32_t b = bm->free_head;
    free_list_remove(bm, b);
    forget_hash(bm, b);
    bm->ref[b] = 1;
    return b;
}

/* ---- hashing and lookup ------------------------------------------------ */

static uint64_t chain_hash(uint64_t parent, const int32_t *tokens, int32_t n)
{
    XXH64_state_t st;
    XXH64_reset(&st, 0);
    XXH64_update(&st, &parent, sizeof(parent));
    XXH64_update(&st, tokens, sizeof(int32_t) * (size_t)n);
    return XXH64_digest(&st);
}

/* Hashes the full blocks of s up to block n (exclusive); tokens only grow,
 * so hashes once computed stay valid. */
static void ensure_hashes(const block_manager *bm, seq *s, int32_t n)
{
    int32_t bs = bm->block_size;
    for (int32_t i = s->n_hashed; i < n; i++) {
        uint64_t parent = i > 0 ? s->block_hashes[i - 1] : 0;
        s->block_hashes[i] = chain_hash(parent, s->tokens + (size_t)i * bs, bs);
    }
    if (n > s->n_hashed) s->n_hashed = n;
}

/* The cached block holding s's block i, or -1. */
static int32_t find_cached(const block_manager *bm, const seq *s, int32_t i)
{
    int64_t b;
    if (!u64map_get(&bm->map, s->block_hashes[i], &b)) return -1;
    uint64_t parent = i > 0 ? s->block_hashes[i - 1] : 0;
    int32_t bs = bm->block_size;
    if (bm->parent[b] != parent ||
        memcmp(bm->tokens + (size_t)b * bs, s->tokens + (size_t)i * bs, sizeof(int32_t) * (size_t)bs) != 0)
        return -1;
    return (int32_t)b;
}

/* Leading blocks of s that the cache can serve (at most n_tokens - 1
 * tokens), and how many of those are held by other seqs now. */
static int32_t count_hits(const block_manager *bm, seq *s, int32_t *in_use)
{
    *in_use = 0;
    if (!bm->prefix_caching) return 0;
    int32_t max_hits = (s->n_tokens - 1) / bm->block_size;
    ensure_hashes(bm, s, max_hits);
    int32_t i = 0;
    for (; i < max_hits; i++) {
        int32_t b = find_cached(bm, s, i);
        if (b < 0) break;
        if (bm->ref[b] > 0) (*in_use)++;
    }
    return i;
}

/* ---- the seq-facing operations ------------------------------------------ */

bool block_manager_can_allocate(block_manager *bm, seq *s)
{
    int32_t in_use;
    count_hits(bm, s, &in_use);
    /* Hits on free blocks leave the free list like new blocks do. */
    return block_manager_blocks_for(bm, s->n_tokens) - in_use <= bm->n_free;
}

void block_manager_allocate(block_manager *bm, seq *s)
{
    int32_t in_use;
    int32_t hits = count_hits(bm, s, &in_use);
    int32_t need = block_manager_blocks_for(bm, s->n_tokens);
    for (int32_t i = 0; i < hits; i++) {
        int32_t b = find_cached(bm, s, i);
        if (bm->ref[b] == 0) free_list_remove(bm, b);
        bm->ref[b]++;
        s->block_table[i] = b;
    }
    for (int32_t i = hits; i < need; i++) s->block_table[i] = take_free_block(bm);
    s->n_blocks = need;
    s->n_registered = hits;
    s->num_cached = hits * bm->block_size;
    s->num_computed = s->num_cached;
    bm->hit_tokens += s->num_cached;
}

bool block_manager_can_append(const block_manager *bm, const seq *s)
{
    return s->n_tokens <= s->n_blocks * bm->block_size || bm->n_free > 0;
}

void block_manager_append_slot(block_manager *bm, seq *s)
{
    while (s->n_tokens > s->n_blocks * bm->block_size)
        s->block_table[s->n_blocks++] = take_free_block(bm);
}

void block_manager_commit(block_manager *bm, seq *s)
{
    /* a block is hashed once its tokens are known: placeholders are not */
    int32_t known = seq_num_known(s);
    int32_t full = (s->num_computed < known ? s->num_computed : known) / bm->block_size;
    if (!bm->prefix_caching || full <= s->n_registered) return;
    ensure_hashes(bm, s, full);
    int32_t bs = bm->block_size;
    for (int32_t i = s->n_registered; i < full; i++) {
        int32_t b = s->block_table[i];
        if (bm->has_hash[b]) continue; /* a hit: registered already */
        /* An equal block computed by another seq at the same time keeps
         * the entry; this copy simply stays private. */
        if (u64map_get(&bm->map, s->block_hashes[i], NULL)) continue;
        if (u64map_put(&bm->map, s->block_hashes[i], b) != NL_OK) continue; /* cache only */
        bm->has_hash[b] = 1;
        bm->hash[b] = s->block_hashes[i];
        bm->parent[b] = i > 0 ? s->block_hashes[i - 1] : 0;
        memcpy(bm->tokens + (size_t)b * bs, s->tokens + (size_t)i * bs, sizeof(int32_t) * (size_t)bs);
    }
    s->n_registered = full;
}

void block_manager_free(block_manager *bm, seq *s)
{
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) {
        int32_t b = s->block_table[i];
        if (--bm->ref[b] > 0) continue;
        if (bm->has_hash[b]) free_list_push_tail(bm, b);
        else free_list_push_head(bm, b);
    }
    s->n_blocks = 0;
    s->n_registered = 0;
    s->num_computed = 0;
}

nl_status block_manager_check(const block_manager *bm)
{
    int32_t n = 0, prev = -1;
    for (int32_t b = bm->free_head; b >= 0; b = bm->next[b]) {
        if (b >= bm->num_blocks) return nl_error(NL_ERR_RUNTIME, "free list: block %d out of range", b);
        if (!bm->is_free[b]) return nl_error(NL_ERR_RUNTIME, "free list: block %d not marked free", b);
        if (bm->ref[b] != 0) return nl_error(NL_ERR_RUNTIME, "free list: block %d has ref %d", b, bm->ref[b]);
        if (bm->prev[b] != prev) return nl_error(NL_ERR_RUNTIME, "free list: block %d bad prev link", b);
        prev = b;
        if (++n > bm->num_blocks) return nl_error(NL_ERR_RUNTIME, "free list: cycle");
    }
    if (prev != bm->free_tail) return nl_error(NL_ERR_RUNTIME, "free list: tail %d, last %d", bm->free_tail, prev);
    if (n != bm->n_free) return nl_error(NL_ERR_RUNTIME, "free list: %d blocks, n_free %d", n, bm->n_free);
    uint32_t hashed = 0;
    for (int32_t b = 0; b < bm->num_blocks; b++) {
        if (!bm->is_free[b] && bm->ref[b] <= 0)
            return nl_error(NL_ERR_RUNTIME, "block %d: not free but ref %d", b, bm->ref[b]);
        if (bm->has_hash[b]) {
            int64_t owner;
            if (!u64map_get(&bm->map, bm->hash[b], &owner) || owner != b)
                return nl_error(NL_ERR_RUNTIME, "block %d: hash not mapped to it", b);
            hashed++;
        }
    }
    if (hashed != bm->map.count)
        return nl_error(NL_ERR_RUNTIME, "map holds %u entries, %u blocks hashed", bm->map.count, hashed);
    return NL_OK;
}
