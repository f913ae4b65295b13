/* seq.h — one request as the scheduler and block manager see it.
 *
 * A seq owns its token ids (prompt followed by output), its block table and
 * the sampling knobs the workers use (a copy of the request's parameters
 * without the stop strings, which belong to the request's output side in
 * request.h).  Queue membership is intrusive (prev/next) so the scheduler
 * moves and aborts seqs in O(1) without allocating.
 *
 * Counters, for a seq with n_tokens ids:
 *   num_cached   prompt tokens whose KV came from the prefix cache at the last
 *                admission (reported as cached_tokens);
 *   num_computed tokens whose KV is in the cache (or being computed by a
 *                step in flight); a running seq computes
 *                tokens[num_computed .. n_tokens) next, in chunks.
 *   n_pending    the last n_pending tokens are placeholders
 *                (SEQ_TOKEN_PENDING): tokens that steps in flight are
 *                sampling.  A step may be sent before the reply of the one
 *                before it (async scheduling): the placeholder goes to the
 *                workers as WIRE_TOKEN_PREVIOUS, and the reply fills it in.
 * A seq whose num_computed == n_tokens - 1 is decoding; one whose
 * num_computed == n_tokens has its last sample in flight and nothing to
 * compute.
 */
#ifndef NL_LEADER_SEQ_H
#define NL_LEADER_SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/wire.h"
#include "nanollm.h"

/* A token a step in flight is sampling (see n_pending). */
#define SEQ_TOKEN_PENDING WIRE_TOKEN_PREVIOUS

typedef enum seq_status {
    SEQ_WAITING = 0,
    SEQ_RUNNING,
    SEQ_FINISHED,
} seq_status;

typedef struct seq {
    uint64_t id;
    uint64_t arrival;          /* submission order                           */
    seq_status status;
    nl_finish_reason finish;

    int32_t *tokens;           /* [cap_tokens], prompt then output           */
    int32_t n_tokens;
    int32_t cap_tokens;        /* grows with the output, up to max_len       */
    int32_t max_len;           /* prompt_len + max_tokens                    */
    int32_t block_size;
    int32_t prompt_len;
    int32_t num_cached;
    int32_t num_computed;
    int32_t prompt_cached;     /* num_cached at the first admission, or -1   */
    int32_t n_pending;         /* trailing placeholder tokens                */
    int32_t in_flight;         /* steps sent, not yet answered, that hold it */

    int32_t *block_table;      /* [cap_blocks], room for cap_tokens' blocks  */
    int32_t n_blocks;
    int32_t cap_blocks;
    uint64_t *block_hashes;    /* [cap_blocks], chained hash of full blocks  */
    int32_t n_hashed;          /* block_hashes[0 .. n_hashed) are valid      */
    int32_t n_registered;      /* leading blocks offered to the prefix cache */

    /* Sampling, copied at submission (stop = NULL, n_stop = 0). */
    nl_sampling_params params;
    uint64_t seed;             /* params.seed, or a random one               */

    /* Scheduler bookkeeping. */
    struct seq *prev, *next;   /* the queue the seq is in                    */
    int32_t num_new;           /* tokens scheduled in the current step       */
} seq;

/* Copies tokens and params into *s with room for the prompt and the first
 * few output tokens and their blocks; the room grows (doubling, up to
 * prompt_len + max_tokens) as tokens are appended, so a request's memory
 * follows what it generated, not its max_tokens.  Appending happens after a
 * step, so the scheduler and the block manager always find room for
 * n_tokens.  The seq starts WAITING.  On failure *s holds nothing to free. */
nl_status seq_init(seq *s, uint64_t id, const int32_t *prompt, int32_t prompt_len,
                   const nl_sampling_params *params, uint64_t seed, int32_t block_size);
/* Frees what seq_init allocated (not s itself). */
void seq_fini(seq *s);

/* seq_init on a seq of its own, and its release. */
nl_status seq_create(uint64_t id, const int32_t *prompt, int32_t prompt_len,
                     const nl_sampling_params *params, uint64_t seed,
                     int32_t block_size, seq **out);
void seq_destroy(seq *s);

/* Tokens known: the placeholders of samples in flight not counted. */
static inline int32_t seq_num_known(const seq *s)
{
    return s->n_tokens - s->n_pending;
}

/* Output tokens known. */
static inline int32_t seq_num_output(const seq *s)
{
    return seq_num_known(s) - s->prompt_len;
}

/* Appends a sampled token, growing the arrays when full; NL_ERR_NOMEM when
 * they cannot grow.  Appending past max_len is a programming error and is
 * ignored. */
nl_status seq_append_token(seq *s, int32_t token);

/* A step that samples s was sent: appends a placeholder for its token. */
nl_status seq_add_pending(seq *s);
/* The oldest sample in flight came back: fills its placeholder, or appends
 * the token when it had none (a sample that ends the seq by length). */
nl_status seq_put_sample(seq *s, int32_t token);
/* Forgets the placeholders (the seq finished: what is in flight for it is
 * discarded). */
void seq_drop_pending(seq *s);

#endif
