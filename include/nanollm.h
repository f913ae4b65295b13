/* nanollm.h — the public API of the nanollm leader library.
 *
 * An engine owns a tokenizer, a scheduler with its paged-KV block manager, and
 * a pool of worker processes (one per GPU, or per CPU shard) that it forks when
 * it opens.  The calling process never initialises CUDA.  Requests are
 * submitted, then advanced by nl_engine_step() (or all at once with
 * nl_engine_generate()); results are read back per request id.
 *
 * Every function that can fail returns an nl_status; nl_last_error() then
 * holds a message naming what was wrong (file, field, value, limit).  The
 * message is per thread and valid until the next failing call on that thread.
 */
#ifndef NANOLLM_H
#define NANOLLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nl_status {
    NL_OK = 0,
    NL_ERR_INVALID_ARG,  /* a parameter out of range, a malformed request   */
    NL_ERR_IO,           /* a file could not be opened, read or written     */
    NL_ERR_FORMAT,       /* a file's content is corrupt or not understood   */
    NL_ERR_NOMEM,        /* host, device or KV-cache memory exhausted       */
    NL_ERR_UNSUPPORTED,  /* a valid input this build does not support       */
    NL_ERR_RUNTIME,      /* a CUDA/NCCL/system call failed                  */
    NL_ERR_WORKER,       /* a worker process died or stopped answering      */
    NL_ERR_NOT_FOUND,    /* an unknown request id or missing item           */
} nl_status;

/* "MAJOR.MINOR.PATCH" of the library. */
const char *nl_version(void);

const char *nl_status_name(nl_status status);
const char *nl_last_error(void);

typedef enum nl_device {
    NL_DEVICE_AUTO = 0, /* CUDA when built with it and a GPU is visible */
    NL_DEVICE_CPU,
    NL_DEVICE_CUDA,
} nl_device;

typedef struct nl_engine_config {
    const char *model_dir;          /* NULL: the built-in demo model          */
    int32_t tp;                     /* tensor-parallel workers, default 1     */
    nl_device device;
    int32_t max_num_seqs;           /* default 512                            */
    int32_t max_num_batched_tokens; /* default 16384                          */
    int32_t max_model_len;          /* 0: the model's max_position_embeddings */
    int32_t block_size;             /* tokens per KV block, multiple of 16    */
    int32_t num_kv_blocks;          /* 0: sized from memory                   */
    float gpu_memory_utilization;   /* default 0.9                            */
    bool enforce_eager;             /* no CUDA graphs                         */
    bool enable_prefix_caching;     /* default true                           */
} nl_engine_config;

void nl_engine_config_init(nl_engine_config *config);

typedef struct nl_sampling_params {
    int32_t max_tokens;        /* default 16                                */
    float temperature;         /* below 1e-5 = greedy; default 1.0         */
    int32_t top_k;             /* 0 or -1 = off                             */
    float top_p;               /* (0, 1], 1 = off                           */
    float min_p;               /* [0, 1], 0 = off                           */
    uint64_t seed;             /* used when has_seed                        */
    bool has_seed;
    bool ignore_eos;
    const char *const *stop;   /* stop strings, not included in the output  */
    int32_t n_stop;
    int32_t logprobs;          /* top-N logprobs per generated token, 0-20  */
} nl_sampling_params;

void nl_sampling_params_init(nl_sampling_params *params);

typedef struct nl_chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
} nl_chat_message;

typedef enum nl_prompt_kind {
    NL_PROMPT_TEXT = 0,
    NL_PROMPT_TOKENS,
    NL_PROMPT_CHAT,
} nl_prompt_kind;

typedef struct nl_prompt {
    nl_prompt_kind kind;
    const char *text;                  /* NL_PROMPT_TEXT                    */
    const int32_t *token_ids;          /* NL_PROMPT_TOKENS                  */
    int32_t n_tokens;
    const nl_chat_message *messages;   /* NL_PROMPT_CHAT                    */
    int32_t n_messages;
    bool enable_thinking;              /* chat: Qwen3 thinking on (default) */
} nl_prompt;

typedef enum nl_finish_reason {
    NL_FINISH_NONE = 0, /* still running */
    NL_FINISH_STOP,     /* EOS or a stop string */
    NL_FINISH_LENGTH,   /* max_tokens or max_model_len */
    NL_FINISH_ABORT,
    NL_FINISH_ERROR,
} nl_finish_reason;

typedef struct nl_token_logprob {
    int32_t token_id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[20];
    float top_logprobs[20];
} nl_token_logprob;

/* A finished (or aborted) request, owned by the engine until it is closed or
 * the result is released with nl_engine_release(). */
typedef struct nl_result {
    uint64_t request_id;
    const int32_t *token_ids;           /* generated ids, n_tokens of them  */
    int32_t n_tokens;
    const char *text;                   /* NULL without a tokenizer         */
    nl_finish_reason finish_reason;
    int32_t prompt_tokens;
    int32_t cached_tokens;              /* prompt tokens served from cache  */
    const nl_token_logprob *logprobs;   /* n_tokens entries when requested  */
    const char *error;                  /* set when finish_reason is ERROR  */
} nl_result;

typedef struct nl_engine nl_engine;

/* Called once a step for each request that produced tokens.  text_delta
 * holds only complete UTF-8 (a token ending mid-character waits).  The
 * callback may call nl_engine_abort(), but not step, submit or release. */
typedef void (*nl_stream_callback)(void *user, uint64_t request_id,
                                   const int32_t *new_ids, int32_t n_new,
                                   const char *text_delta, bool finished);

nl_status nl_engine_open(const nl_engine_config *config, nl_engine **out);
void nl_engine_close(nl_engine *engine);

/* Facts about the opened engine, for front-ends and reports. */
typedef struct nl_engine_info {
    int32_t vocab_size;
    int32_t max_model_len;
    int32_t block_size;
    int32_t num_kv_blocks;
    int32_t tp;
    bool has_tokenizer;
    bool is_demo_model;
    const char *device_name;
} nl_engine_info;

void nl_engine_get_info(const nl_engine *engine, nl_engine_info *info);

void nl_engine_set_stream_callback(nl_engine *engine, nl_stream_callback cb,
                                   void *user);

nl_status nl_engine_submit(nl_engine *engine, const nl_prompt *prompt,
                           const nl_sampling_params *params,
                           uint64_t *request_id);
nl_status nl_engine_abort(nl_engine *engine, uint64_t request_id);

/* One schedule -> run -> postprocess step. */
nl_status nl_engine_step(nl_engine *engine);
bool nl_engine_has_unfinished(const nl_engine *engine);

/* Steps until every submitted request has finished. */
nl_status nl_engine_run_until_done(nl_engine *engine);

/* The result of a finished request; NL_ERR_NOT_FOUND while it still runs. */
nl_status nl_engine_get_result(nl_engine *engine, uint64_t request_id,
                               const nl_result **out);
void nl_engine_release(nl_engine *engine, uint64_t request_id);

/* Tokenizer access (needs tokenizer.json in the model directory). */
nl_status nl_engine_encode(nl_engine *engine, const char *text,
                           int32_t **ids, int32_t *n_ids);
nl_status nl_engine_decode(nl_engine *engine, const int32_t *ids,
                           int32_t n_ids, char **text);

#ifdef __cplusplus
}
#endif
#endif /* NANOLLM_H */
