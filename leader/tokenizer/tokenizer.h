/* tokenizer.h — text <-> token ids for Qwen3 / Qwen2 / Llama 3 models in the
 * Hugging Face layout: byte-level BPE read from tokenizer.json, added/special
 * tokens, the post-processor's template, the chat template and a streaming
 * detokenizer.
 *
 * Encoding matches Hugging Face `tokenizers` exactly: added tokens are split
 * out of the raw text first, the rest is normalised as the file says (NFC for
 * Qwen, nothing for Llama 3), split by the file's pre-tokenizer regex
 * (PCRE2), mapped to byte-level symbols and merged by BPE rank (or taken
 * whole with ignore_merges), then wrapped by the post-processor (Llama 3's
 * <|begin_of_text|>).  The engine uses this module only through the
 * functions below.
 */
#ifndef NL_LEADER_TOKENIZER_H
#define NL_LEADER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nanollm.h"

typedef struct tokenizer tokenizer;
/* Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json (chat_template, eos_token,
 * added tokens), DIR/generation_config.json and DIR/config.json (eos_token_id). */
nl_status tokenizer_load(const char *dir, tokenizer **out);
void tokenizer_destroy(tokenizer *t);
int32_t tokenizer_vocab_size(const tokenizer *t);          /* highest id + 1, added tokens included */
/* Encodes UTF-8 text (len bytes; invalid UTF-8 -> NL_ERR_INVALID_ARG naming the byte offset).
 * *ids is malloc'd. Special/added tokens in the text are recognised as HF does, and the
 * post-processor's special tokens are added (HF encode's add_special_tokens=True: Llama 3's
 * <|begin_of_text|>, nothing for Qwen). Not thread-safe (cache). */
nl_status tokenizer_encode(tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids);
/* As tokenizer_encode with nanollm.h's nl_encode_flags (an unknown flag is NL_ERR_INVALID_ARG). */
nl_status tokenizer_encode_flags(tokenizer *t, const char *text, size_t len, uint32_t flags, int32_t **ids,
                                 size_t *n_ids);
/* As tokenizer_encode without the post-processor's tokens, for a rendered chat template,
 * which writes its own <|begin_of_text|> (as vLLM encodes chats: add_special_tokens=False). */
nl_status tokenizer_encode_chat(tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids);
/* *text malloc'd, NUL-terminated. Unknown id -> NL_ERR_INVALID_ARG naming it. */
nl_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **text);
/* The same, with the text's length in *text_len: the text holds U+0000 when an id stands for it. */
nl_status tokenizer_decode_n(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special,
                             char **text, size_t *text_len);
/* Renders messages with the model's chat template (chat_template.h); enable_thinking is passed as
 * the template variable of that name. *out malloc'd. */
nl_status tokenizer_apply_chat_template(const tokenizer *t, const nl_chat_message *msgs, size_t n_msgs,
                                        bool add_generation_prompt, bool enable_thinking, char **out);
/* The same for a request in vLLM's chat shape, as JSON text: {"messages", "tools",
 * "add_generation_prompt", "chat_template_kwargs"} (chat_template_render_request); *len the
 * text's length (it may hold U+0000).  as_server: first as vLLM's server takes a request
 * (chat_request_decode_tool_arguments); otherwise exactly as given, as transformers renders. */
nl_status tokenizer_apply_chat_request(const tokenizer *t, const char *request_json, bool as_server,
                                       char **out, size_t *len);
/* EOS/stop ids from config.json, generation_config.json and tokenizer_config.json, deduplicated. */
size_t tokenizer_eos_ids(const tokenizer *t, int32_t *out, size_t cap);
bool tokenizer_is_special(const tokenizer *t, int32_t id);
/* Whether id stands for a token: false past the end and in gaps between ids. */
bool tokenizer_has_token(const tokenizer *t, int32_t id);

typedef struct detokenizer detokenizer;  /* streaming: emits only complete UTF-8 */
nl_status detokenizer_create(const tokenizer *t, bool skip_special, detokenizer **out);
/* Appends id; *delta points to newly completed text (len bytes, valid until the next call). */
nl_status detokenizer_push(detokenizer *d, int32_t id, const char **delta, size_t *len);
/* Text still held back (an incomplete character at the end) rendered with U+FFFD, as HF decode does. */
nl_status detokenizer_flush(detokenizer *d, const char **delta, size_t *len);
void detokenizer_destroy(detokenizer *d);

#endif /* NL_LEADER_TOKENIZER_H */
