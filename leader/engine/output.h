/* output.h — turning a request's sampled tokens into output.
 *
 * For each token the workers sampled, the output processor appends it to
 * the request's seq with its logprobs, detokenizes it, decides whether the
 * request stops (an EOS id unless ignore_eos, a stop string in the text,
 * max_tokens, max_model_len) and hands the text delta to the stream
 * callback.  It only decides: the engine finishes the request in the
 * scheduler, which frees its blocks.
 *
 * It never allocates per token once the stream buffer has grown to the
 * longest delta.
 */
#ifndef NL_LEADER_OUTPUT_H
#define NL_LEADER_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/wire.h"
#include "leader/engine/request.h"
#include "leader/tokenizer/tokenizer.h"
#include "nanollm.h"

typedef struct output_processor {
    const tokenizer *tok;         /* NULL: token ids only, no text       */
    const int32_t *eos_ids;       /* [n_eos], not owned                  */
    int32_t n_eos;
    int32_t max_model_len;
    nl_stream_callback stream_cb; /* NULL: no streaming                  */
    void *stream_user;
    char *stream_buf;             /* a NUL-terminated copy of a delta    */
    size_t stream_cap;
} output_processor;

/* tok and eos_ids must outlive the processor. */
nl_status output_processor_init(output_processor *op, const tokenizer *tok, const int32_t *eos_ids,
                                int32_t n_eos, int32_t max_model_len);
void output_processor_free(output_processor *op);

/* Takes the token sm sampled for r and streams its text delta; *finish is
 * why r stops, or NL_FINISH_NONE.  The stream callback may abort r (or any
 * request) before this returns. */
nl_status output_process_token(output_processor *op, request *r, const wire_sampled *sm,
                               nl_finish_reason *finish);

#endif
