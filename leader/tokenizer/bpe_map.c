/* bpe_map.c — open-addressing hash tables for the BPE model (see header). */
#include "leader/tokenizer/bpe_map.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/mix64.h"
#include "common/status.h"

static uint64_t str_hash(const void *key, size_t len)
{
    return XXH3_64bits(key, len) | 1; /* 0 marks an empty slot */
}

/* Pair keys are two small ids side by side, which would cluster badly under
 * the identity hash: nl_mix64 spreads them. */
static uint64_t u64_hash(uint64_t x)
{
    return nl_mix64(x);
}

void bpe_str_map_init(bpe_str_map *m)
{
    memset(m, 0, sizeof *m);
}

void bpe_str_map_free(bpe_str_map *m)
{
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void bpe_str_map_clear(bpe_str_map *m)
{
    if (m->slots) memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->arena_len = 0;
}

static bpe_str_entry *str_find(const bpe_str_map *m, uint64_t h, const void *key, size_t len)
{
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        bpe_str_entry *e = &m->slots[i];
        if (e->hash == 0) return e;
        if (e->hash == h && e->key_len == len && memcmp(m->arena + e->key_off, key, len) == 0)
            return e;
    }
}

static nl_status str_grow(bpe_str_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    bpe_str_entry *slots = calloc(cap, sizeof *slots);
    if (!slots) return nl_error(NL_ERR_NOMEM, "bpe map: cannot grow to %zu slots", cap);
    for (size_t i = 0; i < m->cap; i++) {
        bpe_str_entry *e = &m->slots[i];
        if (e->hash == 0) continue;
        size_t j = e->hash & (cap - 1);
        while (slots[j].hash != 0) j = (j + 1) & (cap - 1);
        slots[j] = *e;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return NL_OK;
}

nl_status bpe_str_map_put(bpe_str_map *m, const void *key, size_t len, uint64_t value)
{
    if ((m->count + 1) * 2 > m->cap) NL_TRY(str_grow(m));
    uint64_t h = str_hash(key, len);
    bpe_str_entry *e = str_find(m, h, key, len);
    if (e->hash != 0) {
        e->value = value;
        return NL_OK;
    }
    if (len > UINT32_MAX || m->arena_len + len > UINT32_MAX)
        return nl_error(NL_ERR_NOMEM, "bpe map: key arena over 4 GiB");
    /* the arena exists once any key does, the empty key too: str_find
     * compares at arena + key_off, which must not be arithmetic on NULL */
    if (m->arena_len + len > m->arena_cap || !m->arena) {
        size_t cap = m->arena_cap ? m->arena_cap : 4096;
        while (cap < m->arena_len + len) cap *= 2;
        char *arena = realloc(m->arena, cap);
        if (!arena) return nl_error(NL_ERR_NOMEM, "bpe map: cannot grow key arena to %zu bytes", cap);
        m->arena = arena;
        m->arena_cap = cap;
    }
    memcpy(m->arena + m->arena_len, key, len);
    e->hash = h;
    e->value = value;
    e->key_off = (uint32_t)m->arena_len;
    e->key_len = (uint32_t)len;
    m->arena_len += len;
    m->count++;
    return NL_OK;
}

bool bpe_str_map_get(const bpe_str_map *m, const void *key, size_t len, uint64_t *value)
{
    if (m->count == 0) return false;
    bpe_str_entry *e = str_find(m, str_hash(key, len), key, len);
    if (e->hash == 0) return false;
    *value = e->value;
    return true;
}

void bpe_u64_map_init(bpe_u64_map *m)
{
    memset(m, 0, sizeof *m);
}

void bpe_u64_map_free(bpe_u64_map *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static bpe_u64_entry *u64_find(const bpe_u64_map *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = u64_hash(key) & mask;; i = (i + 1) & mask) {
        bpe_u64_entry *e = &m->slots[i];
        if (e->key == key || e->key == BPE_U64_EMPTY) return e;
    }
}

static nl_status u64_grow(bpe_u64_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    bpe_u64_entry *slots = malloc(cap * sizeof *slots);
    if (!slots) return nl_error(NL_ERR_NOMEM, "bpe pair map: cannot grow to %zu slots", cap);
    for (size_t i = 0; i < cap; i++) slots[i].key = BPE_U64_EMPTY;
    for (size_t i = 0; i < m->cap; i++) {
        bpe_u64_entry *e = &m->slots[i];
        if (e->key == BPE_U64_EMPTY) continue;
        size_t j = u64_hash(e->key) & (cap - 1);
        while (slots[j].key != BPE_U64_EMPTY) j = (j + 1) & (cap - 1);
        slots[j] = *e;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return NL_OK;
}

nl_status bpe_u64_map_put(bpe_u64_map *m, uint64_t key, uint64_t value)
{
    if ((m->count + 1) * 2 > m->cap) NL_TRY(u64_grow(m));
    bpe_u64_entry *e = u64_find(m, key);
    if (e->key == BPE_U64_EMPTY) {
        e->key = key;
        m->count++;
    }
    e->value = value;
    return NL_OK;
}

bool bpe_u64_map_get(const bpe_u64_map *m, uint64_t key, uint64_t *value)
{
    if (m->count == 0) return false;
    bpe_u64_entry *e = u64_find(m, key);
    if (e->key == BPE_U64_EMPTY) return false;
    *value = e->value;
    return true;
}
