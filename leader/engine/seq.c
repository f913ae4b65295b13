/* seq.c — a request's tokens, text and stop state (see seq.h). */
#define _GNU_SOURCE /* memmem */
#include "leader/engine/seq.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

nl_status seq_create(uint64_t id, const int32_t *prompt, int32_t prompt_len,
                     const nl_sampling_params *params, uint64_t seed,
                     int32_t block_size, seq **out)
{
    *out = NULL;
    seq *s = calloc(1, sizeof(*s));
    if (!s) return nl_error(NL_ERR_NOMEM, "request %llu: out of memory", (unsigned long long)id);
    s->id = id;
    s->status = SEQ_WAITING;
    s->params = *params;
    s->params.stop = NULL;
    s->seed = seed;
    s->prompt_len = prompt_len;
    s->prompt_cached = -1;
    s->n_tokens = prompt_len;
    s->cap_tokens = prompt_len + params->max_tokens;
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap_tokens);
    if (!s->tokens) goto oom;
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)prompt_len);
    s->cap_blocks = (s->cap_tokens + block_size - 1) / block_size;
    s->block_table = malloc(sizeof(int32_t) * (size_t)s->cap_blocks);
    s->block_hashes = malloc(sizeof(uint64_t) * (size_t)s->cap_blocks);
    if (!s->block_table || !s->block_hashes) goto oom;
    if (params->n_stop > 0) {
        s->stop = calloc((size_t)params->n_stop, sizeof(char *));
        if (!s->stop) goto oom;
        for (int32_t i = 0; i < params->n_stop; i++) {
            s->stop[i] = strdup(params->stop[i]);
            if (!s->stop[i]) goto oom;
            size_t len = strlen(s->stop[i]);
            if (len > s->max_stop_len) s->max_stop_len = len;
        }
    }
    if (params->logprobs > 0) {
        s->logprobs = calloc((size_t)params->max_tokens, sizeof(nl_token_logprob));
        if (!s->logprobs) goto oom;
    }
    *out = s;
    return NL_OK;
oom:
    seq_destroy(s);
    return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %d tokens",
                    (unsigned long long)id, prompt_len);
}

void seq_destroy(seq *s)
{
    if (!s) return;
    if (s->stop)
        for (int32_t i = 0; i < s->params.n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->tokens);
    free(s->block_table);
    free(s->block_hashes);
    free(s->text);
    free(s->logprobs);
    free(s->error);
    free(s);
}

void seq_append_token(seq *s, int32_t token)
{
    /* Room for prompt_len + max_tokens was reserved; the engine finishes a
     * seq at max_tokens, so running past it is a programming error. */
    if (s->n_tokens < s->cap_tokens) s->tokens[s->n_tokens++] = token;
}

nl_status seq_append_text(seq *s, const char *text, size_t len, bool *stopped)
{
    *stopped = false;
    if (len == 0) return NL_OK;
    if (s->text_len + len + 1 > s->text_cap) {
        size_t cap = s->text_cap ? s->text_cap : 64;
        while (cap < s->text_len + len + 1) cap *= 2;
        char *p = realloc(s->text, cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %zu bytes of text",
                                (unsigned long long)s->id, cap);
        s->text = p;
        s->text_cap = cap;
    }
    size_t old_len = s->text_len;
    memcpy(s->text + old_len, text, len);
    s->text_len += len;
    s->text[s->text_len] = '\0';
    if (s->params.n_stop == 0) return NL_OK;

    /* A match must end inside the new text, so it starts at most
     * max_stop_len - 1 bytes before it. */
    size_t from = old_len > s->max_stop_len - 1 ? old_len - (s->max_stop_len - 1) : 0;
    size_t best = SIZE_MAX;
    for (int32_t i = 0; i < s->params.n_stop; i++) {
        const char *hit = memmem(s->text + from, s->text_len - from, s->stop[i], strlen(s->stop[i]));
        if (hit && (size_t)(hit - s->text) < best) best = (size_t)(hit - s->text);
    }
    if (best != SIZE_MAX) {
        s->text_len = best;
        s->text[best] = '\0';
        *stopped = true;
    }
    return NL_OK;
}

void seq_take_stream_text(seq *s, bool finished, const char **text, size_t *len)
{
    size_t end = s->text_len;
    if (!finished && s->max_stop_len > 1) {
        size_t hold = s->max_stop_len - 1;
        end = end > hold ? end - hold : 0;
        /* Never split a UTF-8 character: back up over continuation bytes. */
        while (end > s->text_streamed && ((unsigned char)s->text[end] & 0xC0) == 0x80) end--;
    }
    if (end < s->text_streamed) end = s->text_streamed;
    *text = s->text ? s->text + s->text_streamed : "";
    *len = end - s->text_streamed;
    s->text_streamed = end;
}
