/* pretokenize.h — the "normalizer" and "pre_tokenizer" stages of
 * tokenizer.json: Unicode normalisation (utf8proc) and splitting text into
 * words with the file's own regular expressions (PCRE2, UTF + UCP + JIT).
 *
 * Supported: normalizer null, NFC/NFD/NFKC/NFKD, or a Sequence of those;
 * pre_tokenizer a ByteLevel (add_prefix_space false) optionally preceded, in a
 * Sequence, by Split steps with behavior "Isolated" and invert false.
 * ByteLevel with use_regex true adds the GPT-2 split pattern.  Anything else
 * is refused with NL_ERR_UNSUPPORTED when the tokenizer loads.  The byte-level
 * mapping itself is left to the BPE model, which works on raw bytes.
 */
#ifndef NL_LEADER_PRETOKENIZE_H
#define NL_LEADER_PRETOKENIZE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "nanollm.h"

typedef struct pretokenizer pretokenizer;

/* normalizer / pre_tokenizer: those members of tokenizer.json (NULL or JSON
 * null allowed for the normalizer); path names the file in errors. */
nl_status pretokenizer_create(const json_t *normalizer, const json_t *pre_tokenizer,
                              const char *path, pretokenizer **out);
void pretokenizer_destroy(pretokenizer *p);

/* Normalises valid UTF-8.  *out is text itself when nothing changes, else a
 * malloc'd buffer that the caller frees (then *allocated is true). */
nl_status pretokenizer_normalize(const pretokenizer *p, const char *text, size_t len,
                                 const char **out, size_t *out_len, bool *allocated);

typedef nl_status (*pretokenizer_word_fn)(void *user, const char *word, size_t len);

/* Calls fn for each word of normalised text, in order; a non-OK status from
 * fn stops the split and is returned. */
nl_status pretokenizer_split(pretokenizer *p, const char *text, size_t len,
                             pretokenizer_word_fn fn, void *user);

#endif /* NL_LEADER_PRETOKENIZE_H */
