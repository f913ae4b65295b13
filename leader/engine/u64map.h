/* u64map.h — an open-addressing hash map from uint64 keys to int64 values.
 *
 * The block manager maps chained block hashes to block ids and the engine
 * maps request ids to sequences; both need O(1) insert, lookup and delete
 * without a malloc per operation.  Linear probing with backward-shift
 * deletion keeps lookups short without tombstones.  The table grows by
 * doubling when it is more than half full.
 */
#ifndef NL_LEADER_U64MAP_H
#define NL_LEADER_U64MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "nanollm.h"

typedef struct u64map {
    uint64_t *keys;   /* [cap] */
    int64_t *values;  /* [cap] */
    uint8_t *used;    /* [cap] */
    uint32_t cap;     /* a power of two */
    uint32_t count;
} u64map;

nl_status u64map_init(u64map *m, uint32_t expected);
void u64map_free(u64map *m);
/* Inserts or replaces. */
nl_status u64map_put(u64map *m, uint64_t key, int64_t value);
bool u64map_get(const u64map *m, uint64_t key, int64_t *value);
bool u64map_remove(u64map *m, uint64_t key);

#endif
