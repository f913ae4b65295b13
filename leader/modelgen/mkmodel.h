/* mkmodel.h — writes random-weight Qwen3 / Qwen2 / Llama checkpoints.
 *
 * The checkpoint is a complete Hugging Face model directory (config.json,
 * generation_config.json, safetensors, optionally the tokenizer) whose
 * weights are deterministic in the seed: the same seed and config give the
 * same bytes whatever the thread count.  It serves the demo model, tests of
 * every shape, and benchmarks at the real sizes without downloading weights.
 */
#ifndef NL_LEADER_MKMODEL_H
#define NL_LEADER_MKMODEL_H

#include <stdint.h>

#include "common/model_config.h"
#include "common/status.h"

/* Fills cfg with a named shape: "tiny" (Qwen3 layout with the real vocab,
 * a few MB), the real Qwen3 sizes "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",
 * "qwen3-8b", "qwen3-14b", "qwen3-32b", or the Llama 3 sizes
 * "llama3.2-1b", "llama3.2-3b", "llama3.1-8b", "llama3.1-70b" (with their
 * llama3 rope scaling, vocabulary and special ids). */
nl_status mkmodel_preset(const char *name, nl_model_config *cfg);

/* Makes cfg a model of arch.  Within a family (Qwen2 and Qwen3, or Llama)
 * only the arch changes; into another family cfg takes that family's
 * defaults -- vocabulary, bos/eos ids, rope theta and scaling, rms eps --
 * so a Qwen shape made Llama gets Llama 3's (theta 500000, eps 1e-5, plain
 * rope), never Qwen's, and a Llama shape made Qwen gets Qwen3's.  The shape
 * stays.  Qwen2 has q/k/v biases, the others none. */
void mkmodel_set_arch(nl_model_config *cfg, nl_arch arch);

/* The preset names, NULL-terminated, for usage messages. */
extern const char *const mkmodel_preset_names[];

#define MKMODEL_DEFAULT_SHARD_BYTES 5000000000LL /* as transformers' "5GB" */

typedef struct mkmodel_options {
    uint64_t seed;
    int64_t shard_bytes;       /* 0: MKMODEL_DEFAULT_SHARD_BYTES             */
    const char *tokenizer_dir; /* copies tokenizer.json and
                                  tokenizer_config.json when non-NULL      */
} mkmodel_options;

/* Writes the model into out_dir, which must not exist or be empty.  The
 * files are written into a temporary directory beside it and renamed into
 * place, so out_dir is either absent or complete.  opt may be NULL. */
nl_status mkmodel_write(const nl_model_config *cfg, const mkmodel_options *opt,
                        const char *out_dir);

/* The value of element i of the tensor called name, before conversion to
 * the checkpoint's dtype: normal(0, 0.02) for matrices and biases,
 * 1 + normal(0, 0.02) for norm weights. */
float mkmodel_value(uint64_t seed, const char *name, int is_norm, uint64_t i);

#endif
