/* engine_state.h — struct nl_engine, shared by the files that implement
 * include/nanollm.h's engine:
 *   engine.c          opening on a runner, closing, info, stats, tokenizer
 *   engine_config.c   the engine config's defaults and checks
 *   engine_submit.c   sampling defaults and checks, prompts, submission
 *   engine_step.c     the step loop and engine failure
 *   engine_results.c  abort, results, release
 * and engine_open.c, which opens on a model directory.  Requests are the
 * unit (request.h); the scheduler sees only their seqs.
 */
#ifndef NL_LEADER_ENGINE_STATE_H
#define NL_LEADER_ENGINE_STATE_H

#include <stdint.h>

#include "ipc/wire.h"
#include "leader/engine/block_manager.h"
#include "leader/engine/engine_internal.h"
#include "leader/engine/output.h"
#include "leader/engine/request.h"
#include "leader/engine/scheduler.h"
#include "leader/engine/u64map.h"

struct nl_engine {
    nl_engine_config config;
    engine_model_facts facts;
    char device_name[32];
    runner *runner;
    tokenizer *tok;
    block_manager *bm;
    scheduler *sch;
    output_processor output;
    u64map requests;              /* request id -> request *             */
    uint64_t next_id;
    uint64_t arrival;
    uint64_t rng;                 /* seeds for unseeded requests         */
    wire_seq *wire_seqs;          /* [max_num_seqs]                      */
    uint64_t step_id;
    nl_status failed;
    char fail_msg[600];
    engine_stats stats;
};

/* The request with that id, or NULL (unknown or released). */
request *engine_find_request(const nl_engine *e, uint64_t id);

/* Ends r in the scheduler (its blocks are freed) and fills its result. */
void engine_finish_request(nl_engine *e, request *r, nl_finish_reason reason);

#endif
