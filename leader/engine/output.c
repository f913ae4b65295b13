/* output.c — stop decisions, text deltas and streaming for sampled tokens
 * (see output.h). */
#include "leader/engine/output.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

nl_status output_processor_init(output_processor *op, const tokenizer *tok, const int32_t *eos_ids,
                                int32_t n_eos, int32_t max_model_len)
{
    memset(op, 0, sizeof(*op));
    op->tok = tok;
    op->eos_ids = eos_ids;
    op->n_eos = n_eos;
    op->max_model_len = max_model_len;
    op->stream_cap = 4096;
    op->stream_buf = malloc(op->stream_cap);
    if (!op->stream_buf) return nl_error(NL_ERR_NOMEM, "output: out of memory for the stream buffer");
    return NL_OK;
}

void output_processor_free(output_processor *op)
{
    free(op->stream_buf);
    op->stream_buf = NULL;
}

static bool has_id(const int32_t *ids, int32_t n, int32_t id)
{
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

static nl_status stream(output_processor *op, request *r, int32_t token, bool finished)
{
    const char *text;
    size_t len;
    request_take_stream_text(r, finished, &text, &len);
    if (len == 0 || text + len == r->text + r->text_len) {
        /* Already NUL-terminated in the request: no copy. */
        op->stream_cb(op->stream_user, r->seq.id, &token, 1, len ? text : "", len, finished);
        return NL_OK;
    }
    if (len + 1 > op->stream_cap) {
        size_t cap = op->stream_cap;
        while (cap < len + 1) cap *= 2;
        char *p = realloc(op->stream_buf, cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "stream: out of memory for %zu bytes", cap);
        op->stream_buf = p;
        op->stream_cap = cap;
    }
    memcpy(op->stream_buf, text, len);
    op->stream_buf[len] = '\0';
    op->stream_cb(op->stream_user, r->seq.id, &token, 1, op->stream_buf, len, finished);
    return NL_OK;
}

nl_status output_process_token(output_processor *op, request *r, const wire_sampled *sm,
                               nl_finish_reason *finish)
{
    seq *s = &r->seq;
    *finish = NL_FINISH_NONE;
    NL_TRY(request_record_logprobs(r, sm));
    if (!s->params.ignore_eos && has_id(op->eos_ids, op->n_eos, sm->token_id)) *finish = NL_FINISH_STOP;
    /* a stop token ends the output without its text, as a stop string does */
    bool stop_id = has_id(s->params.stop_token_ids, s->params.n_stop_token_ids, sm->token_id);
    if (stop_id) *finish = NL_FINISH_STOP;
    bool stopped_by_string = false;
    /* The embedding may have rows that stand for no token (padding past
     * the tokenizer's ids, or a gap between them): such an id renders as
     * no text. */
    if (r->detok && !stop_id && tokenizer_has_token(op->tok, sm->token_id)) {
        const char *delta;
        size_t len;
        NL_TRY(detokenizer_push(r->detok, sm->token_id, &delta, &len));
        NL_TRY(request_append_text(r, delta, len, &stopped_by_string));
        if (stopped_by_string) *finish = NL_FINISH_STOP;
    }
    if (*finish == NL_FINISH_NONE &&
        (seq_num_output(s) >= s->params.max_tokens || seq_num_known(s) >= op->max_model_len))
        *finish = NL_FINISH_LENGTH;
    if (*finish != NL_FINISH_NONE && r->detok && !stopped_by_string) {
        const char *delta;
        size_t len;
        bool stopped;
        NL_TRY(detokenizer_flush(r->detok, &delta, &len));
        NL_TRY(request_append_text(r, delta, len, &stopped));
    }
    if (op->stream_cb) NL_TRY(stream(op, r, sm->token_id, *finish != NL_FINISH_NONE));
    return NL_OK;
}
