/* request.h — one request: the seq the scheduler runs, and its output.
 *
 * The seq (seq.h) is what scheduling needs: token ids, counters, the block
 * table, the sampling knobs.  Everything the caller gets back lives beside
 * it here and the scheduler never looks at it: the stop strings, the
 * streaming detokenizer (when the model has a tokenizer), the text decoded
 * so far (without a stopping string) and how much of it was streamed,
 * per-token logprobs, the error message and the public nl_result.
 *
 * The seq is embedded, so the engine finds a scheduled seq's request in
 * O(1) with request_of().
 */
#ifndef NL_LEADER_REQUEST_H
#define NL_LEADER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/wire.h"
#include "leader/engine/seq.h"
#include "leader/tokenizer/tokenizer.h"
#include "nanollm.h"

/* Where a request is, as other threads see it (engine_state.h). */
typedef enum request_state {
    REQUEST_QUEUED = 0,        /* in the engine's inbox                      */
    REQUEST_ACTIVE,            /* in the scheduler                           */
    REQUEST_FINISHED,          /* result filled, never changes again         */
} request_state;

typedef struct request {
    seq seq;

    /* Guarded by the engine's lock; only the stepping thread changes state. */
    request_state state;
    bool abort_requested;      /* it ends as NL_FINISH_ABORT                 */
    bool released;             /* freed by the stepping thread once finished */
    struct request *next_queued; /* the inbox                                */

    void *user;                /* nl_engine_submit_user()'s pointer          */
    double arrival_time, first_token_time, finish_time;

    char **stop;               /* [n_stop], owned copies                     */
    int32_t n_stop;
    size_t max_stop_len;
    int32_t *stop_ids;         /* owned copy of stop_token_ids, which
                                  seq.params points at from submission on   */

    detokenizer *detok;        /* NULL without a tokenizer: ids only         */
    char *text;                /* NUL-terminated, or NULL while empty        */
    size_t text_len;
    size_t text_cap;
    size_t text_streamed;

    nl_token_logprob *logprobs; /* [cap_logprobs] when params.logprobs > 0,  */
    int32_t cap_logprobs;       /* growing with the output                    */
    char *error;               /* finish == NL_FINISH_ERROR                  */
    nl_result result;          /* the public view, filled when finished      */
} request;

static inline request *request_of(seq *s)
{
    return (request *)((char *)s - offsetof(request, seq));
}

/* Creates the seq (see seq_init), copies the stop strings and reserves the
 * logprob rows; with tok, also a streaming detokenizer. */
nl_status request_create(uint64_t id, const int32_t *prompt, int32_t prompt_len,
                         const nl_sampling_params *params, uint64_t seed,
                         int32_t block_size, const tokenizer *tok, request **out);
void request_destroy(request *r);

/* Records the logprobs of the output token just appended to the seq
 * (NL_ERR_NOMEM when the rows cannot grow). */
nl_status request_record_logprobs(request *r, const wire_sampled *sm);

/* Appends detokenized text and looks for a stop string in the part that the
 * new text could complete.  On a match the text is cut where the stop string
 * begins and true is returned. */
nl_status request_append_text(request *r, const char *text, size_t len, bool *stopped);

/* The streamable tail of the text: everything not yet streamed except the
 * bytes that could still turn out to begin a stop string (all of it once
 * finished), cut at a UTF-8 character boundary.  Marks it streamed. */
void request_take_stream_text(request *r, bool finished, const char **text, size_t *len);

/* Fills r->result from the seq, the output and the times (when r
 * finishes). */
void request_fill_result(request *r);

#endif
