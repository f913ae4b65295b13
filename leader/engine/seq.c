/* seq.c — a request's tokens and blocks as the scheduler sees them (see seq.h). */
#include "leader/engine/seq.h"

#include <stdlib.h>
#include <string.h>

#include "common/status.h"

/* Output tokens room is made for at first; most requests of a large batch
 * stop early, and the arrays double from here. */
#define SEQ_FIRST_OUTPUT 16

nl_status seq_init(seq *s, uint64_t id, const int32_t *prompt, int32_t prompt_len,
                   const nl_sampling_params *params, uint64_t seed, int32_t block_size)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->status = SEQ_WAITING;
    s->params = *params;
    s->params.stop = NULL; /* the caller's arrays: the request keeps copies */
    s->params.n_stop = 0;
    s->params.stop_token_ids = NULL;
    s->params.n_stop_token_ids = 0;
    s->seed = seed;
    s->prompt_len = prompt_len;
    s->prompt_cached = -1;
    s->n_tokens = prompt_len;
    s->max_len = prompt_len + params->max_tokens;
    s->block_size = block_size;
    s->cap_tokens = prompt_len + (params->max_tokens < SEQ_FIRST_OUTPUT ? params->max_tokens : SEQ_FIRST_OUTPUT);
    s->tokens = malloc(sizeof(int32_t) * (size_t)s->cap_tokens);
    s->cap_blocks = (s->cap_tokens + block_size - 1) / block_size;
    s->block_table = malloc(sizeof(int32_t) * (size_t)s->cap_blocks);
    s->block_hashes = malloc(sizeof(uint64_t) * (size_t)s->cap_blocks);
    if (!s->tokens || !s->block_table || !s->block_hashes) {
        seq_fini(s);
        return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %d tokens",
                        (unsigned long long)id, prompt_len);
    }
    memcpy(s->tokens, prompt, sizeof(int32_t) * (size_t)prompt_len);
    return NL_OK;
}

void seq_fini(seq *s)
{
    free(s->tokens);
    free(s->block_table);
    free(s->block_hashes);
    s->tokens = NULL;
    s->block_table = NULL;
    s->block_hashes = NULL;
}

nl_status seq_create(uint64_t id, const int32_t *prompt, int32_t prompt_len,
                     const nl_sampling_params *params, uint64_t seed,
                     int32_t block_size, seq **out)
{
    *out = NULL;
    seq *s = malloc(sizeof(*s));
    if (!s) return nl_error(NL_ERR_NOMEM, "request %llu: out of memory", (unsigned long long)id);
    nl_status st = seq_init(s, id, prompt, prompt_len, params, seed, block_size);
    if (st != NL_OK) {
        free(s);
        return st;
    }
    *out = s;
    return NL_OK;
}

void seq_destroy(seq *s)
{
    if (!s) return;
    seq_fini(s);
    free(s);
}

static nl_status seq_grow(seq *s)
{
    int64_t cap = (int64_t)s->cap_tokens * 2;
    if (cap > s->max_len) cap = s->max_len;
    int32_t cap_blocks = (int32_t)((cap + s->block_size - 1) / s->block_size);
    int32_t *tokens = realloc(s->tokens, sizeof(int32_t) * (size_t)cap);
    if (!tokens) goto oom;
    s->tokens = tokens;
    if (cap_blocks > s->cap_blocks) {
        int32_t *table = realloc(s->block_table, sizeof(int32_t) * (size_t)cap_blocks);
        if (!table) goto oom;
        s->block_table = table;
        uint64_t *hashes = realloc(s->block_hashes, sizeof(uint64_t) * (size_t)cap_blocks);
        if (!hashes) goto oom;
        s->block_hashes = hashes;
        s->cap_blocks = cap_blocks;
    }
    s->cap_tokens = (int32_t)cap;
    return NL_OK;
oom:
    return nl_error(NL_ERR_NOMEM, "request %llu: out of memory for %lld tokens",
                    (unsigned long long)s->id, (long long)cap);
}

nl_status seq_append_token(seq *s, int32_t token)
{
    /* The engine finishes a seq at max_tokens, so running past max_len is
     * a programming error. */
    if (s->n_tokens >= s->max_len) return NL_OK;
    if (s->n_tokens == s->cap_tokens) NL_TRY(seq_grow(s));
    s->tokens[s->n_tokens++] = token;
    return NL_OK;
}

nl_status seq_add_pending(seq *s)
{
    int32_t n = s->n_tokens;
    NL_TRY(seq_append_token(s, SEQ_TOKEN_PENDING));
    if (s->n_tokens > n) s->n_pending++;
    return NL_OK;
}

nl_status seq_put_sample(seq *s, int32_t token)
{
    if (s->n_pending == 0) return seq_append_token(s, token);
    s->tokens[s->n_tokens - s->n_pending] = token;
    s->n_pending--;
    return NL_OK;
}

void seq_drop_pending(seq *s)
{
    s->n_tokens -= s->n_pending;
    s->n_pending = 0;
}
