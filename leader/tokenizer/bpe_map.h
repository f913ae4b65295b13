/* bpe_map.h — the two hash tables the BPE model lives on: byte strings to
 * values (vocabulary, word cache) and 64-bit keys to values (merge pairs).
 *
 * Both use open addressing with linear probing at a load factor of at most
 * one half; keys of the string map are copied into the map's own arena.  No
 * deletion: the word cache is emptied whole with bpe_str_map_clear().
 */
#ifndef NL_LEADER_BPE_MAP_H
#define NL_LEADER_BPE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nanollm.h"

typedef struct bpe_str_entry {
    uint64_t hash;     /* 0: empty slot */
    uint64_t value;
    uint32_t key_off;  /* into arena */
    uint32_t key_len;
} bpe_str_entry;

typedef struct bpe_str_map {
    bpe_str_entry *slots;
    size_t cap;        /* power of two */
    size_t count;
    char *arena;
    size_t arena_len, arena_cap;
} bpe_str_map;

void bpe_str_map_init(bpe_str_map *m);
void bpe_str_map_free(bpe_str_map *m);
void bpe_str_map_clear(bpe_str_map *m);
/* Inserts or overwrites. */
nl_status bpe_str_map_put(bpe_str_map *m, const void *key, size_t len, uint64_t value);
bool bpe_str_map_get(const bpe_str_map *m, const void *key, size_t len, uint64_t *value);

typedef struct bpe_u64_entry {
    uint64_t key;      /* BPE_U64_EMPTY: empty slot */
    uint64_t value;
} bpe_u64_entry;

#define BPE_U64_EMPTY UINT64_MAX

typedef struct bpe_u64_map {
    bpe_u64_entry *slots;
    size_t cap;
    size_t count;
} bpe_u64_map;

void bpe_u64_map_init(bpe_u64_map *m);
void bpe_u64_map_free(bpe_u64_map *m);
/* key must not be BPE_U64_EMPTY. Inserts or overwrites. */
nl_status bpe_u64_map_put(bpe_u64_map *m, uint64_t key, uint64_t value);
bool bpe_u64_map_get(const bpe_u64_map *m, uint64_t key, uint64_t *value);

#endif /* NL_LEADER_BPE_MAP_H */
