/* demo_model.h — the built-in demo model, generated on first use.
 *
 * The "tiny" preset with the real Qwen3 tokenizer, written once into the
 * user's cache, so every command runs on a fresh machine without a model
 * download.  Its weights are random: the text it generates is noise.
 */
#ifndef NL_LEADER_DEMO_MODEL_H
#define NL_LEADER_DEMO_MODEL_H

#include <stddef.h>

#include "common/status.h"

/* Version of the demo's contents; bump it when the preset or the generator
 * changes, so stale caches are not reused. */
#define DEMO_MODEL_NAME "demo-tiny-v1"
#define DEMO_MODEL_SEED 20250601u

/* Makes sure ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/demo-tiny-v1 holds the
 * complete demo model, generating it if needed, and writes its path into
 * dir (cap bytes).  The tokenizer comes from $NANOLLM_TOKENIZER_DIR or
 * ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3.  Safe when
 * several processes race: each writes its own temporary copy and exactly
 * one is renamed into place. */
nl_status demo_model_ensure(char *dir, size_t cap);

/* Where the demo model's tokenizer comes from: $NANOLLM_TOKENIZER_DIR, else
 * ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3 (the folder
 * tools/fetch-tokenizer.sh fills), written into dir (cap bytes). */
nl_status demo_model_tokenizer_dir(char *dir, size_t cap);

#endif
