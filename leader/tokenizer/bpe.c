/* bpe.c — byte-level BPE: loading vocab/merges and merging words by rank.
 *
 * A word starts as one symbol per byte.  Candidate merges of neighbouring
 * symbols sit in a binary heap ordered by (merge rank, position), so the
 * lowest-ranked pair is merged first and ties go to the leftmost pair, which
 * is the order Hugging Face applies them in.  Symbols form a linked list so a
 * merge is O(1); stale heap entries are recognised when popped (their pair no
 * longer stands) and dropped.  A word of n bytes costs O(n log n).
 */
#include "leader/tokenizer/bpe.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/tokenizer/bpe_map.h"

/* Cached words longer than this are rare and would crowd out short ones. */
#define BPE_CACHE_MAX_WORD 256
#define BPE_CACHE_MAX_WORDS (1u << 18)
#define BPE_CACHE_MAX_IDS (1u << 22)
/* Bytes of a merge's two tokens together; real merges are a few dozen. */
#define BPE_MERGE_MAX 1024

typedef struct bpe_symbol {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* 0: merged into its left neighbour */
} bpe_symbol;

typedef struct bpe_candidate {
    uint32_t rank;
    int32_t pos;        /* left symbol */
    int32_t left_id, right_id, new_id;
} bpe_candidate;

struct bpe {
    bpe_str_map vocab;        /* token bytes -> id */
    bpe_u64_map merges;       /* left id << 32 | right id -> rank << 32 | merged id */
    int32_t byte_ids[256];    /* the token of each single byte */
    int32_t id_limit;
    uint32_t *tok_off;        /* [id_limit] into tok_bytes; UINT32_MAX: no such id */
    uint32_t *tok_len;        /* [id_limit] */
    char *tok_bytes;
    bool ignore_merges;       /* a word found whole in the vocab is one token */

    bpe_str_map cache;        /* word bytes -> offset << 32 | count in cache_ids */
    bpe_ids cache_ids;

    bpe_symbol *syms;         /* scratch for one word */
    size_t syms_cap;
    bpe_candidate *heap;
    size_t heap_n, heap_cap;
};

nl_status bpe_ids_push(bpe_ids *ids, int32_t id)
{
    return bpe_ids_append(ids, &id, 1);
}

nl_status bpe_ids_append(bpe_ids *ids, const int32_t *src, size_t n)
{
    if (n == 0) return NL_OK; /* src may be NULL then, which memcpy may not get */
    if (ids->n + n > ids->cap) {
        size_t cap = ids->cap ? ids->cap : 64;
        while (cap < ids->n + n) cap *= 2;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return nl_error(NL_ERR_NOMEM, "token id list: cannot grow to %zu ids", cap);
        ids->v = v;
        ids->cap = cap;
    }
    memcpy(ids->v + ids->n, src, n * sizeof *src);
    ids->n += n;
    return NL_OK;
}

/* ---- the GPT-2 byte-level alphabet ----
 * Printable Latin-1 bytes stand for themselves; the other 68 bytes (controls,
 * space, DEL, NBSP, soft hyphen) are given the code points 256.. in order. */

static bool byte_is_printable(int b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* code point -> byte, or -1; code points of the alphabet are all < 324 */
static int16_t char_to_byte[324];
static pthread_once_t alphabet_once = PTHREAD_ONCE_INIT;

static void alphabet_build(void)
{
    int next = 256;
    for (int cp = 0; cp < 324; cp++) char_to_byte[cp] = -1;
    for (int b = 0; b < 256; b++) {
        if (byte_is_printable(b)) char_to_byte[b] = (int16_t)b;
        else char_to_byte[next++] = (int16_t)b;
    }
}

bool bpe_bytelevel_decode(const char *s, size_t len, char *out, size_t *out_len)
{
    pthread_once(&alphabet_once, alphabet_build);
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        if (u[i] < 0x80) {
            cp = u[i++];
        } else if ((u[i] & 0xE0) == 0xC0 && i + 1 < len) {
            cp = ((uint32_t)(u[i] & 0x1F) << 6) | (u[i + 1] & 0x3F);
            i += 2;
        } else {
            return false; /* the alphabet lies below U+0800 */
        }
        if (cp >= 324 || char_to_byte[cp] < 0) return false;
        out[o++] = (char)char_to_byte[cp];
    }
    *out_len = o;
    return true;
}

/* Token text from the file -> raw bytes (or the text itself when it is not
 * byte-level), into buf which has room for len bytes. */
static size_t token_to_bytes(const char *s, size_t len, char *buf)
{
    size_t n;
    if (bpe_bytelevel_decode(s, len, buf, &n)) return n;
    memcpy(buf, s, len);
    return len;
}

/* ---- loading ---- */

static nl_status check_model_options(const json_t *model, const char *path)
{
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE") != 0)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: model.type is \"%s\"; only \"BPE\" is supported",
                        path, type ? type : "(missing)");
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: model.dropout %g is not supported", path,
                        json_number_value(dropout));
    static const char *const empty_strings[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(model, empty_strings[i]));
        if (v && v[0])
            return nl_error(NL_ERR_UNSUPPORTED, "%s: model.%s \"%s\" is not supported", path,
                            empty_strings[i], v);
    }
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return nl_error(NL_ERR_UNSUPPORTED, "%s: model.byte_fallback true is not supported", path);
    return NL_OK;
}

static nl_status load_vocab(bpe *b, const json_t *vocab, const char *path)
{
    if (!json_is_object(vocab))
        return nl_error(NL_ERR_FORMAT, "%s: model.vocab is missing or not an object", path);
    const char *key;
    const json_t *val;
    size_t total = 0;
    b->id_limit = 0;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= BPE_ID_LIMIT)
            return nl_error(NL_ERR_FORMAT, "%s: model.vocab[\"%s\"] = %lld is not an id in [0, %d)",
                            path, key, (long long)id, BPE_ID_LIMIT);
        if (id + 1 > b->id_limit) b->id_limit = (int32_t)(id + 1);
        total += strlen(key);
    }
    b->tok_off = malloc((size_t)b->id_limit * sizeof *b->tok_off);
    b->tok_len = calloc((size_t)b->id_limit, sizeof *b->tok_len);
    b->tok_bytes = malloc(total + 1);
    if (!b->tok_off || !b->tok_len || !b->tok_bytes)
        return nl_error(NL_ERR_NOMEM, "%s: no memory for a vocabulary of %d ids", path, b->id_limit);
    memset(b->tok_off, 0xFF, (size_t)b->id_limit * sizeof *b->tok_off);
    size_t used = 0;
    json_object_foreach((json_t *)vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        if (b->tok_off[id] != UINT32_MAX)
            return nl_error(NL_ERR_FORMAT, "%s: model.vocab gives id %d to two tokens", path, id);
        size_t n = token_to_bytes(key, strlen(key), b->tok_bytes + used);
        b->tok_off[id] = (uint32_t)used;
        b->tok_len[id] = (uint32_t)n;
        NL_TRY(bpe_str_map_put(&b->vocab, b->tok_bytes + used, n, (uint64_t)id));
        used += n;
    }
    for (int c = 0; c < 256; c++) {
        uint64_t id;
        char byte = (char)c;
        if (!bpe_str_map_get(&b->vocab, &byte, 1, &id))
            return nl_error(NL_ERR_UNSUPPORTED,
                            "%s: model.vocab has no token for byte 0x%02X; only byte-level BPE "
                            "vocabularies are supported", path, c);
        b->byte_ids[c] = (int32_t)id;
    }
    return NL_OK;
}

/* A merge is "left right" or ["left", "right"]; returns the two token ids.
 * buf has room for BPE_MERGE_MAX bytes. */
static nl_status merge_parts(const bpe *b, const json_t *merge, size_t index, const char *path,
                             int32_t *left, int32_t *right, char *buf)
{
    const char *parts[2];
    size_t lens[2];
    if (json_is_string(merge)) {
        const char *s = json_string_value(merge);
        const char *space = strchr(s, ' ');
        if (!space || strchr(space + 1, ' '))
            return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu] \"%s\" is not two tokens "
                            "separated by one space", path, index, s);
        parts[0] = s;
        lens[0] = (size_t)(space - s);
        parts[1] = space + 1;
        lens[1] = strlen(space + 1);
    } else if (json_is_array(merge) && json_array_size(merge) == 2 &&
               json_is_string(json_array_get(merge, 0)) && json_is_string(json_array_get(merge, 1))) {
        for (int k = 0; k < 2; k++) {
            parts[k] = json_string_value(json_array_get(merge, k));
            lens[k] = json_string_length(json_array_get(merge, k));
        }
    } else {
        return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
                        path, index);
    }
    if (lens[0] + lens[1] >= BPE_MERGE_MAX)
        return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu] is longer than %d bytes", path, index,
                        BPE_MERGE_MAX - 1);
    int32_t *ids[2] = {left, right};
    size_t total = 0;
    for (int k = 0; k < 2; k++) {
        size_t n = token_to_bytes(parts[k], lens[k], buf + total);
        uint64_t id;
        if (!bpe_str_map_get(&b->vocab, buf + total, n, &id))
            return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu]: token \"%.*s\" is not in the vocab",
                            path, index, (int)lens[k], parts[k]);
        *ids[k] = (int32_t)id;
        total += n;
    }
    return NL_OK;
}

static nl_status load_merges(bpe *b, const json_t *merges, const char *path)
{
    if (!json_is_array(merges))
        return nl_error(NL_ERR_FORMAT, "%s: model.merges is missing or not an array", path);
    for (size_t i = 0; i < json_array_size(merges); i++) {
        int32_t left, right;
        char buf[BPE_MERGE_MAX];
        NL_TRY(merge_parts(b, json_array_get(merges, i), i, path, &left, &right, buf));
        size_t ll = 0, rl = 0;
        const char *lb = bpe_token_bytes(b, left, &ll);
        const char *rb = bpe_token_bytes(b, right, &rl);
        if (ll + rl > sizeof buf)
            return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu] is longer than %zu bytes", path, i,
                            sizeof buf);
        memcpy(buf, lb, ll);
        memcpy(buf + ll, rb, rl);
        uint64_t merged;
        if (!bpe_str_map_get(&b->vocab, buf, ll + rl, &merged))
            return nl_error(NL_ERR_FORMAT, "%s: model.merges[%zu]: the merged token is not in the vocab",
                            path, i);
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        /* a repeated pair takes its later rank, as Hugging Face's map build does */
        NL_TRY(bpe_u64_map_put(&b->merges, key, (uint64_t)i << 32 | (uint32_t)merged));
    }
    return NL_OK;
}

nl_status bpe_create(const json_t *model, const char *path, bpe **out)
{
    *out = NULL;
    if (!json_is_object(model))
        return nl_error(NL_ERR_FORMAT, "%s: \"model\" is missing or not an object", path);
    NL_TRY(check_model_options(model, path));
    bpe *b = calloc(1, sizeof *b);
    if (!b) return nl_error(NL_ERR_NOMEM, "%s: no memory for the BPE model", path);
    bpe_str_map_init(&b->vocab);
    bpe_u64_map_init(&b->merges);
    bpe_str_map_init(&b->cache);
    b->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    nl_status st = load_vocab(b, json_object_get(model, "vocab"), path);
    if (st == NL_OK) st = load_merges(b, json_object_get(model, "merges"), path);
    if (st != NL_OK) {
        bpe_destroy(b);
        return st;
    }
    *out = b;
    return NL_OK;
}

void bpe_destroy(bpe *b)
{
    if (!b) return;
    bpe_str_map_free(&b->vocab);
    bpe_u64_map_free(&b->merges);
    bpe_str_map_free(&b->cache);
    free(b->cache_ids.v);
    free(b->tok_off);
    free(b->tok_len);
    free(b->tok_bytes);
    free(b->syms);
    free(b->heap);
    free(b);
}

int32_t bpe_id_limit(const bpe *b)
{
    return b->id_limit;
}

const char *bpe_token_bytes(const bpe *b, int32_t id, size_t *len)
{
    if (id < 0 || id >= b->id_limit || b->tok_off[id] == UINT32_MAX) return NULL;
    *len = b->tok_len[id];
    return b->tok_bytes + b->tok_off[id];
}

bool bpe_token_id(const bpe *b, const char *bytes, size_t len, int32_t *id)
{
    uint64_t v;
    if (!bpe_str_map_get(&b->vocab, bytes, len, &v)) return false;
    *id = (int32_t)v;
    return true;
}

/* ---- merging ---- */

static bool candidate_before(const bpe_candidate *a, const bpe_candidate *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(bpe *b, bpe_candidate c)
{
    size_t i = b->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!candidate_before(&c, &b->heap[parent])) break;
        b->heap[i] = b->heap[parent];
        i = parent;
    }
    b->heap[i] = c;
}

static bpe_candidate heap_pop(bpe *b)
{
    bpe_candidate top = b->heap[0];
    bpe_candidate last = b->heap[--b->heap_n];
    size_t i = 0, n = b->heap_n;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && candidate_before(&b->heap[child + 1], &b->heap[child])) child++;
        if (!candidate_before(&b->heap[child], &last)) break;
        b->heap[i] = b->heap[child];
        i = child;
    }
    if (n > 0) b->heap[i] = last;
    return top;
}

/* Queues the merge of symbol pos with its right neighbour, if there is one. */
static void push_pair(bpe *b, int32_t pos)
{
    if (pos < 0) return;
    int32_t next = b->syms[pos].next;
    if (next < 0) return;
    uint64_t key = (uint64_t)(uint32_t)b->syms[pos].id << 32 | (uint32_t)b->syms[next].id;
    uint64_t v;
    if (!bpe_u64_map_get(&b->merges, key, &v)) return;
    bpe_candidate c = {(uint32_t)(v >> 32), pos, b->syms[pos].id, b->syms[next].id, (int32_t)(uint32_t)v};
    heap_push(b, c);
}

static nl_status reserve_scratch(bpe *b, size_t n)
{
    if (n <= b->syms_cap) return NL_OK;
    size_t cap = b->syms_cap ? b->syms_cap : 64;
    while (cap < n) cap *= 2;
    bpe_symbol *syms = realloc(b->syms, cap * sizeof *syms);
    if (!syms) return nl_error(NL_ERR_NOMEM, "bpe: no memory for a word of %zu bytes", n);
    b->syms = syms;
    /* every merge pushes at most two candidates on top of the n - 1 initial ones */
    bpe_candidate *heap = realloc(b->heap, 3 * cap * sizeof *heap);
    if (!heap) return nl_error(NL_ERR_NOMEM, "bpe: no memory for a word of %zu bytes", n);
    b->heap = heap;
    b->syms_cap = cap;
    b->heap_cap = 3 * cap;
    return NL_OK;
}

static nl_status merge_word(bpe *b, const uint8_t *word, size_t len, bpe_ids *out)
{
    if (len > INT32_MAX) return nl_error(NL_ERR_INVALID_ARG, "bpe: word of %zu bytes is too long", len);
    NL_TRY(reserve_scratch(b, len));
    int32_t n = (int32_t)len;
    for (int32_t i = 0; i < n; i++) {
        b->syms[i] = (bpe_symbol){b->byte_ids[word[i]], i - 1, i + 1 < n ? i + 1 : -1, 1};
    }
    b->heap_n = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(b, i);
    while (b->heap_n > 0) {
        bpe_candidate c = heap_pop(b);
        bpe_symbol *left = &b->syms[c.pos];
        if (left->len == 0 || left->id != c.left_id || left->next < 0) continue;
        bpe_symbol *right = &b->syms[left->next];
        if (right->id != c.right_id) continue;
        left->id = c.new_id;
        left->len += right->len;
        right->len = 0;
        left->next = right->next;
        if (left->next >= 0) b->syms[left->next].prev = c.pos;
        push_pair(b, left->prev);
        push_pair(b, c.pos);
    }
    for (int32_t i = 0; i >= 0; i = b->syms[i].next) NL_TRY(bpe_ids_push(out, b->syms[i].id));
    return NL_OK;
}

nl_status bpe_encode_word(bpe *b, const uint8_t *word, size_t len, bpe_ids *out)
{
    if (len == 0) return NL_OK;
    if (len == 1) return bpe_ids_push(out, b->byte_ids[word[0]]);
    uint64_t v;
    if (b->ignore_merges && bpe_str_map_get(&b->vocab, word, len, &v))
        return bpe_ids_push(out, (int32_t)v);
    bool cacheable = len <= BPE_CACHE_MAX_WORD;
    if (cacheable && bpe_str_map_get(&b->cache, word, len, &v))
        return bpe_ids_append(out, b->cache_ids.v + (v >> 32), (uint32_t)v);

    size_t first = out->n;
    NL_TRY(merge_word(b, word, len, out));
    if (!cacheable) return NL_OK;
    size_t count = out->n - first;
    if (b->cache.count >= BPE_CACHE_MAX_WORDS || b->cache_ids.n + count > BPE_CACHE_MAX_IDS) {
        bpe_str_map_clear(&b->cache);
        b->cache_ids.n = 0;
    }
    uint64_t off = b->cache_ids.n;
    NL_TRY(bpe_ids_append(&b->cache_ids, out->v + first, count));
    return bpe_str_map_put(&b->cache, word, len, off << 32 | count);
}
