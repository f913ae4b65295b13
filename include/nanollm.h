/* nanollm.h — the public API of the nanollm leader library.
 *
 * An engine owns a tokenizer, a scheduler with its paged-KV block manager, and
 * a pool of worker processes (one per GPU, or per CPU shard) that it forks when
 * it opens.  The calling process never initialises CUDA.  Requests are
 * submitted with nl_engine_submit(), advanced by nl_engine_step() (or
 * nl_engine_run_until_done(), or by the engine's own thread after
 * nl_engine_start()), and their results read back per request id or handed
 * to a final callback.
 *
 * Errors: every function that can fail returns an nl_status; nl_last_error()
 * then holds a message naming what was wrong (file, field, value, limit).
 * The message is per thread and valid until the next failing call on that
 * thread.
 *
 * Threads.  One thread at a time steps the engine: the "stepping thread" is
 * the one calling nl_engine_step()/nl_engine_run_until_done(), or, after
 * nl_engine_start(), the engine's own thread.
 *   - Any thread, at any time: nl_engine_submit(), nl_engine_submit_user(),
 *     nl_engine_abort(), nl_engine_get_stats(), nl_engine_has_unfinished(),
 *     nl_engine_get_result(), nl_engine_release(), nl_engine_get_info(),
 *     nl_engine_check(), nl_engine_encode(), nl_engine_decode().  A submission or an abort from
 *     a thread other than the stepping thread goes through an inbox that the
 *     stepping thread takes at the start of its next step.
 *   - The stepping thread only (or any one thread while none steps):
 *     nl_engine_step(), nl_engine_run_until_done(), nl_engine_peek(), the
 *     callback setters.
 *   - nl_engine_start()/nl_engine_stop(): one thread, not from inside a
 *     callback; nl_engine_close(): once no other thread uses the engine.
 *   - The logging setters, nl_version(), nl_build_commit(), nl_status_name(),
 *     nl_last_error():
 *     any thread (the error message is the calling thread's own).
 * Callbacks (stream, final) run on the stepping thread, one at a time.
 * They may call any function of the first group, but not step, start, stop
 * or close.
 *
 * Memory: every pointer the library returns points into the engine and
 * stays valid as stated at its function, except where a function says the
 * caller frees it (with free()).
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

/* The git commit the library was built from ("-dirty" appended when the
 * tree had local changes), or NULL when it was not built from a checkout
 * (a release tarball). */
const char *nl_build_commit(void);

/* Static strings: never freed. */
const char *nl_status_name(nl_status status);
const char *nl_last_error(void);

/* ---- logging --------------------------------------------------------------
 * The library writes nothing to stderr by itself: it hands messages at or
 * above the log level to the log callback, which by default prints
 * "nanollm: <level>: <message>" to stderr.  The level starts as
 * $NANOLLM_LOG_LEVEL (error, warn, info or debug) or WARN.  Worker processes
 * cannot call back into the host: they print to their stderr, filtered by
 * the level the leader had when it opened the engine.  Both settings are
 * process-wide and may be changed from any thread; the callback may run on
 * any thread and must not call back into the library. */
typedef enum nl_log_level {
    NL_LOG_ERROR = 0,
    NL_LOG_WARN,
    NL_LOG_INFO,
    NL_LOG_DEBUG,
} nl_log_level;

/* message is NUL-terminated, without a trailing newline, valid during the
 * call. */
typedef void (*nl_log_callback)(void *user, nl_log_level level, const char *message);

/* cb NULL restores the stderr default. */
void nl_set_log_callback(nl_log_callback cb, void *user);
void nl_set_log_level(nl_log_level level);
nl_log_level nl_get_log_level(void);

typedef enum nl_device {
    NL_DEVICE_AUTO = 0, /* CUDA when built with it and a GPU is visible */
    NL_DEVICE_CPU,
    NL_DEVICE_CUDA,
} nl_device;

/* How GPU ranks combine their shards.  AUTO: the CUDA-IPC all-reduce when
 * every pair of the ranks' GPUs is the same GPU or has peer access, else
 * NCCL.  NCCL cannot put two ranks on one GPU. */
typedef enum nl_all_reduce {
    NL_ALL_REDUCE_AUTO = 0,
    NL_ALL_REDUCE_IPC,
    NL_ALL_REDUCE_NCCL,
} nl_all_reduce;

/* The KV cache's element type. */
typedef enum nl_kv_cache_dtype {
    NL_KV_CACHE_AUTO = 0, /* the activations' type: bf16 on CUDA, fp32 on the CPU */
    NL_KV_CACHE_BF16,
    NL_KV_CACHE_FP8,      /* e4m3 with a unit scale: twice the tokens of bf16 */
} nl_kv_cache_dtype;

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
    int32_t cpu_threads;            /* CPU backend: threads per worker (its own
                                       pool and OpenBLAS); 0: the cores divided
                                       among the tp workers                   */
    /* CUDA: the GPU of each rank, n_devices == tp entries (several ranks may
     * name one GPU; they split its gpu_memory_utilization share).  NULL:
     * rank r on GPU r.  Copied by nl_engine_open. */
    const int32_t *devices;
    int32_t n_devices;
    nl_all_reduce all_reduce;       /* default AUTO                           */
    nl_kv_cache_dtype kv_cache_dtype; /* default AUTO                         */
    bool prefill_first;             /* steps with prompt work carry no decodes
                                       (default false: mixed steps)           */
    bool async_scheduling;          /* default true: step N + 1 is sent before
                                       step N's reply is read, so the workers
                                       need not wait for the leader's handling
                                       of it; false: one step at a time       */
} nl_engine_config;

void nl_engine_config_init(nl_engine_config *config);

typedef struct nl_sampling_params {
    int32_t max_tokens;        /* default 16; 0: all that max_model_len
                                  leaves after the prompt                   */
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
    /* Token ids that end the output when sampled (vLLM's stop_token_ids):
     * the id is kept in token_ids, its text is left out, and ignore_eos
     * does not apply to them.  Copied at submission. */
    const int32_t *stop_token_ids;
    int32_t n_stop_token_ids;  /* at most 1024                               */
} nl_sampling_params;

void nl_sampling_params_init(nl_sampling_params *params);

typedef struct nl_chat_message {
    const char *role;    /* any role the model's template knows: "system", "user", "assistant", "tool" ... */
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
    bool enable_thinking;              /* chat: the template variable enable_thinking */
    /* NL_PROMPT_CHAT with everything a chat request carries: when set, it is
     * used instead of messages/n_messages/enable_thinking.  A JSON object in
     * vLLM's shape: {"messages": [{"role", "content" (string, list of parts
     * or null), "tool_calls", "tool_call_id", "name", "reasoning_content"
     * ...}], "tools": [...], "add_generation_prompt": bool (default true),
     * "chat_template_kwargs": {...}}, rendered by the model's own Jinja chat
     * template as transformers renders it, after one step of vLLM's server:
     * an assistant tool call's function.arguments given as a JSON string
     * (OpenAI's API) reaches the template as the value it encodes. */
    const char *chat_json;
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

/* A finished request (finished, aborted or failed), owned by the engine:
 * it and everything it points to stay valid and unchanged until
 * nl_engine_release() of its id or nl_engine_close().
 *
 * Times are seconds on CLOCK_MONOTONIC: arrival_time at submission,
 * first_token_time when the first output token came back (0 if none did),
 * finish_time when it ended.  time_to_first_token = first_token_time -
 * arrival_time (0 without a token), latency = finish_time - arrival_time. */
typedef struct nl_result {
    uint64_t request_id;
    const int32_t *token_ids;           /* generated ids, n_tokens of them  */
    int32_t n_tokens;
    const char *text;                   /* NULL without a tokenizer         */
    size_t text_len;                    /* its bytes (it may hold U+0000)   */
    nl_finish_reason finish_reason;
    int32_t prompt_tokens;
    int32_t cached_tokens;              /* prompt tokens served from cache  */
    const nl_token_logprob *logprobs;   /* n_tokens entries when requested  */
    const char *error;                  /* set when finish_reason is ERROR  */
    void *user;                         /* nl_engine_submit_user()'s user   */
    double arrival_time;
    double first_token_time;
    double finish_time;
    double time_to_first_token;
    double latency;
} nl_result;

typedef struct nl_engine nl_engine;

/* Called once a step for each request that produced tokens.  text_delta
 * holds only complete UTF-8 (a token ending mid-character waits), text_len
 * bytes of it plus a terminating NUL (the text may hold U+0000, so use
 * text_len); new_ids and text_delta are valid during the call.  finished is true on a request's
 * last delta when it stops by itself (stop, length); an aborted or failed
 * request gets no further delta, only its final callback.  See "Threads"
 * above for what the callback may call. */
typedef void (*nl_stream_callback)(void *user, uint64_t request_id,
                                   const int32_t *new_ids, int32_t n_new,
                                   const char *text_delta, size_t text_len,
                                   bool finished);

/* Called exactly once for every request that was accepted by a submit, when
 * it ends: finished by itself (STOP, LENGTH), aborted (ABORT) or failed
 * (ERROR, e.g. a worker died).  result (with its logprobs, text, error and
 * the request's user pointer) is the same object nl_engine_get_result()
 * returns, valid until the request is released; the callback may release
 * it.  Requests that are still unfinished when the engine closes get no
 * final callback. */
typedef void (*nl_final_callback)(void *user, const nl_result *result);

/* Opens an engine: forks the workers and waits until they are ready.  The
 * workers live as long as the engine, whichever thread opened it; if the
 * host process dies they exit by themselves.  Close with nl_engine_close(),
 * which stops the engine's thread (nl_engine_stop) first. */
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
    const char *device_name;            /* owned by the engine            */
    const char *model_dir;              /* where the model was read (the
                                         * demo model's too); owned by the
                                         * engine                          */
} nl_engine_info;

void nl_engine_get_info(const nl_engine *engine, nl_engine_info *info);

/* Counters and gauges for monitoring (a front-end's /metrics), from any
 * thread.  The counters count since the engine opened; the KV blocks in use
 * are num_kv_blocks - num_free_kv_blocks. */
typedef struct nl_engine_stats {
    int32_t num_running;        /* requests holding KV blocks               */
    int32_t num_waiting;        /* submitted, not yet (or again) running    */
    int32_t num_kv_blocks;      /* the KV pool                              */
    int32_t num_free_kv_blocks; /* unreferenced (cached prefixes included)  */
    int64_t prompt_tokens;      /* prompt tokens of all submissions         */
    int64_t cached_tokens;      /* prompt tokens served from the prefix cache */
    int64_t output_tokens;      /* generated tokens                         */
    int64_t steps;
    int64_t preemptions;
    double prefix_cache_hit_rate; /* cached_tokens / prompt tokens of the
                                   * requests that started generating, 0..1 */
    int64_t num_finished;       /* requests ended (any reason)              */
    int64_t prefill_steps;      /* steps with prompt chunks (mixed included) */
    int64_t decode_steps;       /* steps of one new token per seq only      */
    double prefill_seconds;     /* wall time of those steps                 */
    double decode_seconds;
} nl_engine_stats;

void nl_engine_get_stats(const nl_engine *engine, nl_engine_stats *stats);

/* Set before the first step (or while nl_engine_stop()ped); NULL turns the
 * callback off. */
void nl_engine_set_stream_callback(nl_engine *engine, nl_stream_callback cb,
                                   void *user);
void nl_engine_set_final_callback(nl_engine *engine, nl_final_callback cb,
                                  void *user);

/* Checks and queues a request; *request_id (when not NULL) gets its id, > 0.
 * The prompt and params are copied: the caller may free them on return.
 * A refused request leaves no trace and gets no callback. */
nl_status nl_engine_submit(nl_engine *engine, const nl_prompt *prompt,
                           const nl_sampling_params *params,
                           uint64_t *request_id);
/* nl_engine_submit, with a pointer the engine hands back untouched in the
 * request's nl_result (user). */
nl_status nl_engine_submit_user(nl_engine *engine, const nl_prompt *prompt,
                                const nl_sampling_params *params, void *user,
                                uint64_t *request_id);

/* Ends an unfinished request with NL_FINISH_ABORT: NL_OK guarantees its
 * result (and final callback) says ABORT.  From the stepping thread (or a
 * callback) it takes effect at once; from another thread at the start of the
 * next step.  NL_ERR_NOT_FOUND: the id is unknown, released, or the request
 * has already finished (then nothing changes). */
nl_status nl_engine_abort(nl_engine *engine, uint64_t request_id);

/* One step: takes the inbox, schedules and sends a step, then reads and
 * postprocesses the oldest step's reply.  With async scheduling the step
 * sent is the one after the step answered, so the workers run it meanwhile.
 * Refused (NL_ERR_INVALID_ARG) while the engine steps itself. */
nl_status nl_engine_step(nl_engine *engine);
/* Whether a submitted request has not finished yet. */
bool nl_engine_has_unfinished(const nl_engine *engine);

/* Steps until every submitted request has finished. */
nl_status nl_engine_run_until_done(nl_engine *engine);

/* Background mode: the engine's own thread steps whenever a request is
 * unfinished and sleeps otherwise; results come through the final callback
 * (on that thread) or nl_engine_get_result().  A step failure ends every
 * unfinished request with NL_FINISH_ERROR (final callbacks say why) and
 * later submissions are refused.  stop returns after the current step;
 * unfinished requests stay queued for a later start or step.  Both return
 * NL_ERR_INVALID_ARG when already started / not started. */
nl_status nl_engine_start(nl_engine *engine);
nl_status nl_engine_stop(nl_engine *engine);

/* The result of a finished request (see nl_result for its lifetime);
 * NL_ERR_NOT_FOUND while it still runs, or for an unknown/released id. */
nl_status nl_engine_get_result(nl_engine *engine, uint64_t request_id,
                               const nl_result **out);
/* The result so far of a request, running or finished: the tokens and
 * logprobs generated until now (finish_reason NL_FINISH_NONE while it
 * runs).  Stepping thread only (it reads what a step writes).  Valid until
 * the next call on the engine other than peek; may be called from the
 * stream callback, e.g. for the logprobs of the new tokens. */
nl_status nl_engine_peek(nl_engine *engine, uint64_t request_id,
                         const nl_result **out);
/* Frees a request and its result.  An unfinished one is aborted first (it
 * still gets its final callback, and is freed after it).  Unknown ids are
 * ignored. */
void nl_engine_release(nl_engine *engine, uint64_t request_id);

/* Whether the engine can still run, without blocking and without stepping:
 * NL_OK, or the failure that stopped it -- an earlier failed step, or a
 * worker process found dead now (NL_ERR_WORKER naming its rank), which
 * fails the engine like a failed step: every unfinished request ends with
 * NL_FINISH_ERROR (and its final callback, on the calling thread).  Any
 * thread; it waits for a step in progress. */
nl_status nl_engine_check(nl_engine *engine);

/* Tokenizer access (needs tokenizer.json in the model directory), as
 * nl_tokenizer_encode() and nl_tokenizer_decode() below.  encode reads len
 * bytes of UTF-8 text (which may hold U+0000) with nl_encode_flags;
 * *ids is malloc'd and the caller frees it with free().  decode skips
 * special tokens; *text is malloc'd, *len bytes plus a terminating NUL (the
 * text itself may hold U+0000, so use *len), and the caller frees it with
 * free().  On failure the outputs are NULL and 0. */
nl_status nl_engine_encode(nl_engine *engine, const char *text, size_t len,
                           uint32_t flags, int32_t **ids, int32_t *n_ids);
nl_status nl_engine_decode(nl_engine *engine, const int32_t *ids,
                           int32_t n_ids, char **text, size_t *len);

/* Ctrl-C: SIGKILLs the worker processes of every engine open in this
 * process.  Async-signal-safe (no locks, no allocation), for a SIGINT or
 * SIGTERM handler that is about to _exit(); afterwards an engine may only
 * be closed. */
void nl_kill_all_workers(void);

/* ---- a tokenizer without an engine ----------------------------------------
 *
 * The engine's tokenizer, for front-ends that turn text into ids and back
 * without loading a model (no worker processes, no weights).  A handle is
 * not thread-safe (encoding caches merges); use one per thread. */
typedef struct nl_tokenizer nl_tokenizer;

/* Loads dir/tokenizer.json and, when present, tokenizer_config.json,
 * generation_config.json and config.json.  dir NULL: the Qwen3 tokenizer the
 * demo model uses ($NANOLLM_TOKENIZER_DIR, else
 * ${XDG_CACHE_HOME:-$HOME/.cache}/nanollm/tokenizer-qwen3).  The caller
 * owns *out and frees it with nl_tokenizer_close(). */
nl_status nl_tokenizer_open(const char *dir, nl_tokenizer **out);
void nl_tokenizer_close(nl_tokenizer *tokenizer);

/* Facts about an open tokenizer; the strings belong to the handle. */
typedef struct nl_tokenizer_info {
    int32_t vocab_size;   /* highest id + 1, added tokens included */
    const char *dir;      /* the directory it was loaded from      */
} nl_tokenizer_info;

void nl_tokenizer_get_info(const nl_tokenizer *tokenizer, nl_tokenizer_info *info);

/* Flags of nl_tokenizer_encode, or'ed together. */
typedef enum nl_encode_flags {
    NL_ENCODE_DEFAULT = 0,
    /* Special-token strings in the text ("<|im_end|>") are plain text. */
    NL_ENCODE_NO_SPECIAL = 1 << 0,
    /* Invalid UTF-8 becomes U+FFFD (as Hugging Face decodes bytes) instead
     * of failing with NL_ERR_INVALID_ARG naming the byte offset. */
    NL_ENCODE_REPLACE_INVALID = 1 << 1,
    /* The post-processor's special tokens (Llama 3's <|begin_of_text|>)
     * are not added: Hugging Face's add_special_tokens=False, for text
     * that already holds them, such as a rendered chat. */
    NL_ENCODE_NO_ADD_SPECIAL = 1 << 2,
} nl_encode_flags;

/* Encodes len bytes of UTF-8 text (which may hold U+0000) exactly as
 * Hugging Face `tokenizers` does (with add_special_tokens=True unless
 * NL_ENCODE_NO_ADD_SPECIAL).  *ids is malloc'd, *n_ids long (an empty
 * text gives a valid empty array), and the caller frees it with free(). */
nl_status nl_tokenizer_encode(nl_tokenizer *tokenizer, const char *text,
                              size_t len, uint32_t flags, int32_t **ids,
                              size_t *n_ids);

/* Decodes ids to UTF-8 (bytes that form no character become U+FFFD, as
 * Hugging Face does); skip_special drops special tokens.  *text is
 * malloc'd, *len bytes plus a terminating NUL (the text itself may hold
 * U+0000, so use *len), and the caller frees it with free().  An id
 * outside the vocabulary fails with NL_ERR_INVALID_ARG naming its
 * position. */
nl_status nl_tokenizer_decode(const nl_tokenizer *tokenizer,
                              const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, size_t *len);

/* Renders a chat request with the model's own chat template
 * (tokenizer_config.json's "chat_template", the "default" of a list of
 * named ones, or chat_template.jinja) as transformers' apply_chat_template
 * does, for a request in nl_prompt.chat_json's shape: {"messages",
 * "tools", "add_generation_prompt" (default true), "chat_template_kwargs"}.
 * *text is malloc'd, *len bytes plus a terminating NUL, and the caller
 * frees it with free().  A template's raise_exception() fails with
 * NL_ERR_INVALID_ARG and exactly the template's message; other render
 * failures name the template line. */
nl_status nl_tokenizer_apply_chat_template(const nl_tokenizer *tokenizer,
                                           const char *request_json,
                                           char **text, size_t *len);

/* ---- utilities --------------------------------------------------------- */

/* The next number of the SplitMix64 sequence whose state is *state: the
 * mixer the engine derives seeds and sampling streams from.  The same state
 * gives the same numbers on every platform, so front-ends can draw
 * reproducible workloads with it. */
uint64_t nl_random_next(uint64_t *state);

#ifdef __cplusplus
}
#endif
#endif /* NANOLLM_H */
