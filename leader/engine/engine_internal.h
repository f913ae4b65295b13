/* engine_internal.h — opening an engine on a runner the caller provides.
 *
 * nl_engine_open() finds the model, loads its config and tokenizer, starts
 * the worker pool and then calls engine_open_with_runner().  Tests and the
 * leader-overhead bench call it directly with a fake runner, so the whole
 * step loop (scheduling, wire commands, stop checks, streaming) runs without
 * a model.
 */
#ifndef NL_LEADER_ENGINE_INTERNAL_H
#define NL_LEADER_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/limits.h"
#include "leader/engine/runner.h"
#include "leader/tokenizer/tokenizer.h"
#include "nanollm.h"

/* What the engine needs to know about the model. */
typedef struct engine_model_facts {
    int32_t vocab_size;              /* the model's (embedding rows)         */
    int32_t max_position_embeddings;
    int32_t n_eos;
    int32_t eos_ids[NL_MAX_EOS];
    bool is_demo_model;
    const char *device_name;         /* copied                               */
    const char *model_dir;           /* copied; NULL: none (a test's fake)   */
} engine_model_facts;

/* Validates config and builds the engine around r and tok (tok may be NULL).
 * The engine owns both from this call on, even when it fails. */
nl_status engine_open_with_runner(const nl_engine_config *config,
                                  const engine_model_facts *facts, runner *r,
                                  tokenizer *tok, nl_engine **out);

/* Checks the options nl_engine_config holds (ranges, named in messages), by
 * engine_settings_from_config(). */
nl_status engine_config_validate(const nl_engine_config *config);

/* Counters for reports and tests; the stepping thread's own (other
 * threads call nl_engine_get_stats). */
typedef struct engine_stats {
    int64_t steps;
    int64_t prefill_steps;
    int64_t decode_steps;
    double prefill_seconds;
    double decode_seconds;
    int64_t preemptions;
    int64_t prompt_tokens;         /* of every request taken in          */
    int64_t started_prompt_tokens; /* of requests that produced a token  */
    int64_t cached_tokens;         /* of those, served from the cache    */
    int64_t output_tokens;
    int32_t num_free_blocks;
    int32_t num_running;
    int32_t num_waiting;
} engine_stats;

void engine_get_stats(const nl_engine *engine, engine_stats *stats);

#endif
