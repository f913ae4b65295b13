/* request.c — a request's stop strings and ids, text, logprobs and result (see request.h). */
#define _GNU_SOURCE /* memmem */
#include "leader/engine/request.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* Logprob rows made room for at first (they double from here): a row is
 * 172 bytes, so reserving max_tokens of them for every queued request is
 * what would make a large batch's memory follow max_tokens. */
#define REQUEST_FIRST_LOGPROBS 16

nl_status request_create(uint64_t id, const int32_t *prompt, int32_t prompt_len,
                         const nl_sampling_params *params, uint64_t seed,
                         int32_t block_size, const tokenizer *tok, request **out)
{
    *out = NULL;
    request *r = calloc(1, sizeof(*r));
    if (!r) return nl_error(NL_ERR_NOMEM, "request %llu: out of memory", (unsigned long long)id);
    nl_status st = seq_init(&r->seq, id, prompt, prompt_len, params, seed, block_size);
    if (st != NL_OK) {
        free(r);
        return st;
    }
    if (params->n_stop > 0) {
        r->stop = calloc((size_t)params->n_stop, sizeof(char *));
        if (!r->stop) goto oom;
        r->n_stop = params->n_stop;
        for (int32_t i = 0; i < params->n_stop; i++) {
            r->stop[i] = strdup(params->stop[i]);
            if (!r->stop[i]) goto oom;
            size_t len = strlen(r->stop[i]);
            if (len > r->max_stop_len) r->max_stop_len = len;
        }
    }
    if (params->n_stop_token_ids > 0) {
        r->stop_ids = malloc(sizeof(int32_t) * (size_t)params->n_stop_token_ids);
        if (!r->stop_ids) goto oom;
        memcpy(r->stop_ids, params->stop_token_ids, sizeof(int32_t) * (size_t)params->n_stop_token_ids);
        r->seq.params.stop_token_ids = r->stop_ids;
        r->seq.params.n_stop_token_ids = params->n_stop_token_ids;
    }
    if (params->logprobs > 0) {
        r->cap_logprobs = params->max_tokens < REQUEST_FIRST_LOGPROBS ? params->max_tokens : REQUEST_FIRST_LOGPROBS;
        r->logprobs = calloc((size_t)r->cap_logprobs, sizeof(nl_token_logprob));
        if (!r->logprobs) goto oom;
    }
    if (tok) {
        st = detokenizer_create(tok, true, &r->detok);
        if (st != NL_OK) {
            request_destroy(r);
            return st;
        }
    }
    *out = r;
    return NL_OK;
oom:
    request_destroy(r);
    return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %d tokens",
                    (unsigned long long)id, prompt_len);
}

void request_destroy(request *r)
{
    if (!r) return;
    if (r->detok) detokenizer_destroy(r->detok);
    if (r->stop)
        for (int32_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->text);
    free(r->logprobs);
    free(r->error);
    seq_fini(&r->seq);
    free(r);
}

nl_status request_record_logprobs(request *r, const wire_sampled *sm)
{
    if (!r->logprobs) return NL_OK;
    int32_t want = r->seq.params.logprobs;
    int32_t k = seq_num_output(&r->seq) - 1;
    if (k < 0 || k >= r->seq.params.max_tokens) return NL_OK;
    if (k >= r->cap_logprobs) {
        int64_t cap = (int64_t)r->cap_logprobs * 2;
        if (cap > r->seq.params.max_tokens) cap = r->seq.params.max_tokens;
        nl_token_logprob *p = realloc(r->logprobs, sizeof(*p) * (size_t)cap);
        if (!p)
            return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %lld logprob rows",
                            (unsigned long long)r->seq.id, (long long)cap);
        r->logprobs = p;
        r->cap_logprobs = (int32_t)cap;
    }
    nl_token_logprob *lp = &r->logprobs[k];
    lp->token_id = sm->token_id;
    lp->logprob = sm->logprob;
    lp->n_top = sm->n_top < want ? sm->n_top : want;
    if (lp->n_top < 0) lp->n_top = 0;
    memcpy(lp->top_ids, sm->top_ids, sizeof(int32_t) * (size_t)lp->n_top);
    memcpy(lp->top_logprobs, sm->top_logprobs, sizeof(float) * (size_t)lp->n_top);
    return NL_OK;
}

nl_status request_append_text(request *r, const char *text, size_t len, bool *stopped)
{
    *stopped = false;
    if (len == 0) return NL_OK;
    if (r->text_len + len + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 64;
        while (cap < r->text_len + len + 1) cap *= 2;
        char *p = realloc(r->text, cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %zu bytes of text",
                                (unsigned long long)r->seq.id, cap);
        r->text = p;
        r->text_cap = cap;
    }
    size_t old_len = r->text_len;
    memcpy(r->text + old_len, text, len);
    r->text_len += len;
    r->text[r->text_len] = '\0';
    if (r->n_stop == 0) return NL_OK;

    /* A match must end inside the new text, so it starts at most
     * max_stop_len - 1 bytes before it. */
    size_t from = old_len > r->max_stop_len - 1 ? old_len - (r->max_stop_len - 1) : 0;
    size_t best = SIZE_MAX;
    for (int32_t i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->text + from, r->text_len - from, r->stop[i], strlen(r->stop[i]));
        if (hit && (size_t)(hit - r->text) < best) best = (size_t)(hit - r->text);
    }
    if (best != SIZE_MAX) {
        r->text_len = best;
        r->text[best] = '\0';
        *stopped = true;
    }
    return NL_OK;
}

void request_take_stream_text(request *r, bool finished, const char **text, size_t *len)
{
    size_t end = r->text_len;
    if (!finished && r->max_stop_len > 1) {
        size_t hold = r->max_stop_len - 1;
        end = end > hold ? end - hold : 0;
        /* Never split a UTF-8 character: back up over continuation bytes. */
        while (end > r->text_streamed && ((unsigned char)r->text[end] & 0xC0) == 0x80) end--;
    }
    if (end < r->text_streamed) end = r->text_streamed;
    *text = r->text ? r->text + r->text_streamed : "";
    *len = end - r->text_streamed;
    r->text_streamed = end;
}

void request_fill_result(request *r)
{
    const seq *s = &r->seq;
    nl_result *res = &r->result;
    res->request_id = s->id;
    res->token_ids = s->tokens + s->prompt_len;
    res->n_tokens = seq_num_output(s);
    res->text = r->detok ? (r->text ? r->text : "") : NULL;
    res->text_len = r->detok && r->text ? r->text_len : 0;
    res->finish_reason = s->finish;
    res->prompt_tokens = s->prompt_len;
    res->cached_tokens = s->prompt_cached > 0 ? s->prompt_cached : 0;
    res->logprobs = r->logprobs;
    res->error = r->error;
    res->user = r->user;
    res->arrival_time = r->arrival_time;
    res->first_token_time = r->first_token_time;
    res->finish_time = r->finish_time;
    res->time_to_first_token = r->first_token_time > 0 ? r->first_token_time - r->arrival_time : 0.0;
    res->latency = r->finish_time - r->arrival_time;
}
