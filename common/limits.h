/* limits.h — the fixed limits that more than one process, or more than one
 * representation of the same data, must agree on.
 *
 * Each limit is defined here once; the public header spells some of them as
 * array sizes (nanollm.h cannot include internal headers), and the
 * static_asserts below tie those spellings to these definitions, so a change
 * on one side without the other does not compile.
 */
#ifndef NL_COMMON_LIMITS_H
#define NL_COMMON_LIMITS_H

#include <assert.h>

#include "nanollm.h"

/* Top-N logprobs a request may ask for per generated token: the sampler's
 * output rows, the reply wire format and nl_token_logprob all hold this many. */
#define NL_MAX_LOGPROBS 20
/* stop_token_ids per request (nl_sampling_params) */
#define NL_MAX_STOP_TOKEN_IDS 1024

/* Tensor-parallel worker processes of one engine (the shared segment has a
 * slot for each). */
#define NL_MAX_TP 64

/* End-of-sequence ids a model may declare (config.json,
 * generation_config.json and tokenizer_config.json together). */
#define NL_MAX_EOS 16

/* Bytes of the model directory's path, with its terminating NUL, as the
 * workers receive it. */
#define NL_MODEL_DIR_MAX 4096

#define NL_ARRAY_LEN_(type, field) (sizeof(((type *)0)->field) / sizeof(((type *)0)->field[0]))
static_assert(NL_ARRAY_LEN_(nl_token_logprob, top_ids) == NL_MAX_LOGPROBS,
              "nl_token_logprob.top_ids must hold NL_MAX_LOGPROBS entries");
static_assert(NL_ARRAY_LEN_(nl_token_logprob, top_logprobs) == NL_MAX_LOGPROBS,
              "nl_token_logprob.top_logprobs must hold NL_MAX_LOGPROBS entries");
#undef NL_ARRAY_LEN_

#endif
