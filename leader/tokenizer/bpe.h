/* bpe.h — the byte-level BPE model of tokenizer.json ("model": {"type": "BPE"}).
 *
 * Owns the vocabulary, the merge ranks and a cache of already-merged words.
 * Tokens are stored as raw bytes: the GPT-2 byte-to-character alphabet used in
 * the file is undone at load time, so encoding merges bytes and decoding is a
 * table lookup.  Splitting text into words is the pre-tokenizer's job.
 */
#ifndef NL_LEADER_BPE_H
#define NL_LEADER_BPE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nanollm.h"

/* A growable list of token ids. */
typedef struct bpe_ids {
    int32_t *v;
    size_t n, cap;
} bpe_ids;

nl_status bpe_ids_push(bpe_ids *ids, int32_t id);
nl_status bpe_ids_append(bpe_ids *ids, const int32_t *src, size_t n);

typedef struct bpe bpe;

/* Token ids (vocabulary and added tokens) lie below this.  Tables are
 * indexed by id, so a stray huge id in a file must not size them; real
 * vocabularies stay far below (Qwen: 151,936). */
#define BPE_ID_LIMIT (1 << 24)

/* model: the "model" object of tokenizer.json; path names it in errors. */
nl_status bpe_create(const json_t *model, const char *path, bpe **out);
void bpe_destroy(bpe *b);

/* Highest vocabulary id + 1. */
int32_t bpe_id_limit(const bpe *b);

/* The bytes of token id, or NULL when id is not in the vocabulary. */
const char *bpe_token_bytes(const bpe *b, int32_t id, size_t *len);

/* The id of a token given as raw bytes. */
bool bpe_token_id(const bpe *b, const char *bytes, size_t len, int32_t *id);

/* Appends the ids of one pre-tokenized word (raw bytes) to out.  Uses and
 * fills the word cache, so a bpe is used by one thread at a time. */
nl_status bpe_encode_word(bpe *b, const uint8_t *word, size_t len, bpe_ids *out);

/* Undoes the byte-level alphabet: writes the bytes that the characters of s
 * stand for (at most len of them) and returns true, or returns false when a
 * character is outside the alphabet (such text stands for itself). */
bool bpe_bytelevel_decode(const char *s, size_t len, char *out, size_t *out_len);

#endif /* NL_LEADER_BPE_H */
