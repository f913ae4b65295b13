/* block_manager.h — the paged KV cache's block pool and its prefix cache.
 *
 * The workers' KV cache is num_blocks blocks of block_size token slots; a
 * seq's block table lists the blocks that hold its positions in order.  A
 * block is shared between seqs (ref count > 1) only when it is full and its
 * KV is computed: such a block is identified by a chained hash, xxh64 over
 * (the parent block's hash, the block's token ids), and registered in a
 * hash -> block map.  A hit also compares the stored token ids and parent
 * hash, so a hash collision can never share a block wrongly.
 *
 * Blocks are registered only once their KV has been computed (after a step,
 * block_manager_commit), never at allocation: with chunked prefill a block
 * allocated this step may be filled several steps later, and a seq that hit
 * it early would read garbage.
 *
 * Freed blocks keep their hash and go to the tail of the free list; new
 * blocks come from the head, so the least recently freed cached block is
 * evicted first and a later request with the same prefix still hits.  A freed
 * block without a hash holds nothing reusable and goes to the head.  A seq
 * frees its blocks last-to-first so that its deeper blocks are evicted before
 * the shared prefix.
 *
 * Cache hits cover only full blocks and at most n_tokens - 1 tokens: every
 * prefill computes at least one token, whose logits the sampler needs.
 */
#ifndef NL_LEADER_BLOCK_MANAGER_H
#define NL_LEADER_BLOCK_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

#include "leader/engine/seq.h"
#include "leader/engine/u64map.h"

typedef struct block_manager {
    int32_t num_blocks;
    int32_t block_size;
    bool prefix_caching;
    int32_t *ref;         /* [num_blocks] tables holding the block          */
    uint8_t *has_hash;    /* [num_blocks] registered in the map              */
    uint64_t *hash;       /* [num_blocks] chained hash when has_hash         */
    uint64_t *parent;     /* [num_blocks] the parent hash it was made with   */
    int32_t *tokens;      /* [num_blocks, block_size] ids when has_hash      */
    int32_t *prev, *next; /* [num_blocks] free-list links, -1 at the ends    */
    uint8_t *is_free;     /* [num_blocks]                                    */
    int32_t free_head, free_tail, n_free;
    u64map map;           /* hash -> block id                                */
    int64_t hit_tokens;   /* prompt tokens served from the cache, in total   */
} block_manager;

nl_status block_manager_create(int32_t num_blocks, int32_t block_size,
                               bool prefix_caching, block_manager **out);
void block_manager_destroy(block_manager *bm);

/* Blocks that cover n tokens. */
static inline int32_t block_manager_blocks_for(const block_manager *bm, int32_t n)
{
    return (n + bm->block_size - 1) / bm->block_size;
}

/* Whether the free pool can hold all of s's tokens, counting its cache hits. */
bool block_manager_can_allocate(block_manager *bm, seq *s);
/* Gives s (which holds no blocks) blocks for all of its tokens, reusing
 * cached prefix blocks; sets num_cached and num_computed to the hit tokens.
 * Call only after can_allocate. */
void block_manager_allocate(block_manager *bm, seq *s);

/* Whether s can get the slot for one more token (its n_tokens-th). */
bool block_manager_can_append(const block_manager *bm, const seq *s);
/* Makes the table cover n_tokens; call only after can_append. */
void block_manager_append_slot(block_manager *bm, seq *s);

/* Registers the full blocks of s whose KV is now computed (num_computed)
 * in the prefix cache. */
void block_manager_commit(block_manager *bm, seq *s);

/* Releases s's blocks (ref count down; unreferenced blocks go to the free
 * list keeping their hash) and resets num_computed. */
void block_manager_free(block_manager *bm, seq *s);

/* Verifies the pool's internal invariants (free list, ref counts, map);
 * for tests.  The message names the first broken one. */
nl_status block_manager_check(const block_manager *bm);

#endif
