/* tokenizer_internal.h — what the tokenizer's own files (detokenizer, CLI,
 * chat template) need from tokenizer.c beyond the public contract. */
#ifndef NL_LEADER_TOKENIZER_INTERNAL_H
#define NL_LEADER_TOKENIZER_INTERNAL_H

#include "leader/tokenizer/tokenizer.h"

/* The bytes that token id stands for (not necessarily valid UTF-8 alone);
 * *len 0 for a special token when skip_special.  Unknown id ->
 * NL_ERR_INVALID_ARG naming it. */
nl_status tokenizer_token_bytes(const tokenizer *t, int32_t id, bool skip_special,
                                const char **bytes, size_t *len);

/* tokenizer_encode, where match_special false leaves special-token strings in
 * the text to the BPE like any other text (Hugging Face's
 * split_special_tokens); non-special added tokens are still matched.
 * add_special false leaves out the post-processor's tokens (Hugging Face's
 * add_special_tokens=False). */
nl_status tokenizer_encode_ex(tokenizer *t, const char *text, size_t len, bool match_special,
                              bool add_special, int32_t **ids, size_t *n_ids);

/* The model's chat template, or NULL when it has none (or it failed to load). */
typedef struct chat_template chat_template;
const chat_template *tokenizer_chat_template(const tokenizer *t);

#endif /* NL_LEADER_TOKENIZER_INTERNAL_H */
