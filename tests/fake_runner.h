/* fake_runner.h — a runner without a model, for tests and leader benches.
 *
 * It keeps a KV cache of token ids (one int per slot) and "samples" a token
 * that is a pure function of the whole sequence so far, read back through
 * the block table: any block-table, prefix-cache or chunking bug changes
 * the generated tokens, which tests compare with fake_runner_reference().
 * It also checks every command (block ids in range, tables covering the
 * computed positions, no slot written twice in one step, no unwritten slot
 * read).  In cheap mode it skips the KV cache and derives the token from the
 * previous token and position only, to measure the leader alone.
 */
#ifndef NL_LEADER_FAKE_RUNNER_H
#define NL_LEADER_FAKE_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "leader/engine/runner.h"

typedef struct fake_runner_options {
    int32_t num_kv_blocks;
    int32_t block_size;
    int32_t vocab_size;
    bool cheap;            /* no KV emulation: token from last token + pos */
    uint64_t fail_at_step; /* nonzero: execute fails at this step id       */
} fake_runner_options;

nl_status fake_runner_create(const fake_runner_options *opt, runner **out);

/* The token the fake model produces after tokens[0 .. n). */
int32_t fake_runner_reference(const int32_t *tokens, int32_t n, int32_t vocab_size, bool cheap);

/* The fake logprob of a token and its top-N alternatives. */
float fake_runner_logprob(int32_t token);

/* Commands executed so far. */
uint64_t fake_runner_steps(const runner *r);

/* The most commands that were ever submitted and not yet waited for. */
int32_t fake_runner_max_in_flight(const runner *r);

#endif
