/* u64map.c — linear-probing uint64 -> int64 map (see u64map.h). */
#include "leader/engine/u64map.h"

#include <stdlib.h>

#include "common/status.h"

/* Keys are often hashes already, but request ids are sequential: a
 * multiplicative mix spreads both over the table. */
static uint32_t slot_of(const u64map *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32) & (m->cap - 1);
}

static nl_status alloc_table(u64map *m, uint32_t cap)
{
    m->keys = malloc(sizeof(*m->keys) * cap);
    m->values = malloc(sizeof(*m->values) * cap);
    m->used = calloc(cap, 1);
    if (!m->keys || !m->values || !m->used) {
        free(m->keys); free(m->values); free(m->used);
        m->keys = NULL; m->values = NULL; m->used = NULL;
        return nl_error(NL_ERR_NOMEM, "hash map: cannot allocate %u slots", cap);
    }
    m->cap = cap;
    m->count = 0;
    return NL_OK;
}

nl_status u64map_init(u64map *m, uint32_t expected)
{
    uint32_t cap = 16;
    while (cap < 2 * (uint64_t)expected && cap < (1u << 31)) cap <<= 1;
    return alloc_table(m, cap);
}

void u64map_free(u64map *m)
{
    free(m->keys); free(m->values); free(m->used);
    m->keys = NULL; m->values = NULL; m->used = NULL;
    m->cap = m->count = 0;
}

static nl_status grow(u64map *m)
{
    u64map old = *m;
    if (old.cap >= (1u << 31))
        return nl_error(NL_ERR_NOMEM, "hash map: more than 2^30 entries");
    NL_TRY(alloc_table(m, old.cap * 2));
    for (uint32_t i = 0; i < old.cap; i++)
        if (old.used[i]) u64map_put(m, old.keys[i], old.values[i]);
    u64map_free(&old);
    return NL_OK;
}

nl_status u64map_put(u64map *m, uint64_t key, int64_t value)
{
    if (2 * (m->count + 1) > m->cap) NL_TRY(grow(m));
    uint32_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) {
            m->values[i] = value;
            return NL_OK;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->values[i] = value;
    m->count++;
    return NL_OK;
}

bool u64map_get(const u64map *m, uint64_t key, int64_t *value)
{
    uint32_t i = slot_of(m, key);
    while (m->used[i]) {
        if (m->keys[i] == key) {
            if (value) *value = m->values[i];
            return true;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}

bool u64map_remove(u64map *m, uint64_t key)
{
    uint32_t mask = m->cap - 1;
    uint32_t i = slot_of(m, key);
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & mask;
    if (!m->used[i]) return false;
    /* Backward shift: pull later members of the probe run into the hole so
     * that every remaining key stays reachable from its home slot. */
    uint32_t hole = i;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j]) break;
        uint32_t home = slot_of(m, m->keys[j]);
        /* j may move to hole only if home is not cyclically in (hole, j]. */
        bool home_in_range = hole <= j ? (home > hole && home <= j)
                                       : (home > hole || home <= j);
        if (!home_in_range) {
            m->keys[hole] = m->keys[j];
            m->values[hole] = m->values[j];
            hole = j;
        }
    }
    m->used[hole] = 0;
    m->count--;
    return true;
}
