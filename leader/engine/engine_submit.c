/* engine_submit.c — getting a request in: the sampling parameters' defaults
 * and checks, the prompt as token ids (text and chat prompts through the
 * tokenizer), the limits a request must fit (vocabulary, max_model_len, the
 * KV pool) and queueing it in the inbox, which the stepping thread takes at
 * its next step.  Any thread may submit: everything up to the inbox works
 * on the caller's own copies (the tokenizer under tok_lock).  A refused
 * submission leaves no trace.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "common/mix64.h"
#include "common/status.h"
#include "leader/engine/engine_state.h"
#include "leader/tokenizer/tokenizer_utf8.h"

void nl_sampling_params_init(nl_sampling_params *p)
{
    memset(p, 0, sizeof(*p));
    p->max_tokens = 16;
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->logprobs = 0;
}

static nl_status validate_params(const nl_engine *e, const nl_sampling_params *p)
{
    if (p->max_tokens < 0)
        return nl_error(NL_ERR_INVALID_ARG, "max_tokens %d: must be >= 1 (0: up to max_model_len)",
                        p->max_tokens);
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return nl_error(NL_ERR_INVALID_ARG, "temperature %g: must be a finite number >= 0",
                        (double)p->temperature);
    if (p->top_k < -1)
        return nl_error(NL_ERR_INVALID_ARG, "top_k %d: must be >= -1 (0 or -1: off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "top_p %g: must be in (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "min_p %g: must be in [0, 1]", (double)p->min_p);
    if (p->logprobs < 0 || p->logprobs > NL_MAX_LOGPROBS)
        return nl_error(NL_ERR_INVALID_ARG, "logprobs %d: must be in [0, %d]", p->logprobs,
                        NL_MAX_LOGPROBS);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return nl_error(NL_ERR_INVALID_ARG, "stop: %d strings given without an array", p->n_stop);
    if (p->n_stop > 0 && !e->tok)
        return nl_error(NL_ERR_UNSUPPORTED, "stop strings need a tokenizer (tokenizer.json) in the model");
    for (int32_t i = 0; i < p->n_stop; i++) {
        size_t bad;
        if (!p->stop[i] || !p->stop[i][0])
            return nl_error(NL_ERR_INVALID_ARG, "stop string %d: empty", i);
        /* Output text is UTF-8: a stop string that is not could match
         * inside a character and cut it. */
        if (!utf8_validate(p->stop[i], strlen(p->stop[i]), &bad))
            return nl_error(NL_ERR_INVALID_ARG, "stop string %d: invalid UTF-8 at byte %zu", i, bad);
    }
    if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > NL_MAX_STOP_TOKEN_IDS ||
        (p->n_stop_token_ids > 0 && !p->stop_token_ids))
        return nl_error(NL_ERR_INVALID_ARG, "stop_token_ids: %d ids (at most %d, in an array)",
                        p->n_stop_token_ids, NL_MAX_STOP_TOKEN_IDS);
    for (int32_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= e->facts.vocab_size)
            return nl_error(NL_ERR_INVALID_ARG, "stop_token_ids[%d] = %d: outside the vocabulary [0, %d)", i,
                            p->stop_token_ids[i], e->facts.vocab_size);
    return NL_OK;
}

/* The prompt as token ids: *owned is set when *ids was allocated here. */
static nl_status prompt_ids(nl_engine *e, const nl_prompt *prompt, int32_t **ids, int32_t *n)
{
    *ids = NULL;
    *n = 0;
    char *chat_text = NULL;
    size_t chat_len = 0;
    const char *text = NULL;
    switch (prompt->kind) {
    case NL_PROMPT_TOKENS:
        if (prompt->n_tokens < 0 || (prompt->n_tokens > 0 && !prompt->token_ids))
            return nl_error(NL_ERR_INVALID_ARG, "prompt: %d token ids without an array", prompt->n_tokens);
        *ids = malloc(sizeof(int32_t) * (size_t)(prompt->n_tokens ? prompt->n_tokens : 1));
        if (!*ids) return nl_error(NL_ERR_NOMEM, "prompt: out of memory");
        if (prompt->n_tokens) memcpy(*ids, prompt->token_ids, sizeof(int32_t) * (size_t)prompt->n_tokens);
        *n = prompt->n_tokens;
        return NL_OK;
    case NL_PROMPT_TEXT:
        if (!prompt->text) return nl_error(NL_ERR_INVALID_ARG, "prompt: text is NULL");
        text = prompt->text;
        break;
    case NL_PROMPT_CHAT:
        if (!prompt->chat_json && (prompt->n_messages <= 0 || !prompt->messages))
            return nl_error(NL_ERR_INVALID_ARG, "prompt: a chat needs at least one message");
        break;
    default:
        return nl_error(NL_ERR_INVALID_ARG, "prompt: unknown kind %d", (int)prompt->kind);
    }
    if (!e->tok)
        return nl_error(NL_ERR_UNSUPPORTED,
                        "prompt: text and chat prompts need a tokenizer (tokenizer.json) in the model; "
                        "give token ids instead");
    pthread_mutex_lock(&e->tok_lock);
    nl_status st = NL_OK;
    if (prompt->kind == NL_PROMPT_CHAT) {
        if (prompt->chat_json)
            st = tokenizer_apply_chat_request(e->tok, prompt->chat_json, true, &chat_text, &chat_len);
        else
            st = tokenizer_apply_chat_template(e->tok, prompt->messages, (size_t)prompt->n_messages,
                                               true, prompt->enable_thinking, &chat_text);
        if (st != NL_OK) { /* the template's own message, as it is */
            pthread_mutex_unlock(&e->tok_lock);
            free(chat_text);
            return st;
        }
        if (!prompt->chat_json) chat_len = strlen(chat_text);
        text = chat_text;
    }
    size_t n_ids = 0;
    /* A rendered chat holds its own <|begin_of_text|>; plain text gets the
     * tokenizer's (vLLM's add_special_tokens rule). */
    size_t len = chat_text ? chat_len : strlen(text);
    st = prompt->kind == NL_PROMPT_CHAT ? tokenizer_encode_chat(e->tok, text, len, ids, &n_ids)
                                        : tokenizer_encode(e->tok, text, len, ids, &n_ids);
    pthread_mutex_unlock(&e->tok_lock);
    free(chat_text);
    if (st != NL_OK) return nl_error_prefix(st, "prompt: ");
    if (n_ids > INT32_MAX / 2) {
        free(*ids);
        *ids = NULL;
        return nl_error(NL_ERR_INVALID_ARG, "prompt: %zu tokens", n_ids);
    }
    *n = (int32_t)n_ids;
    return NL_OK;
}

/* Under lock: the refusal of an engine that failed. */
static nl_status refuse_if_failed(const nl_engine *e)
{
    if (e->failed) return nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    return NL_OK;
}

nl_status nl_engine_submit(nl_engine *e, const nl_prompt *prompt,
                           const nl_sampling_params *params, uint64_t *request_id)
{
    return nl_engine_submit_user(e, prompt, params, NULL, request_id);
}

nl_status nl_engine_submit_user(nl_engine *e, const nl_prompt *prompt,
                                const nl_sampling_params *params, void *user, uint64_t *request_id)
{
    if (request_id) *request_id = 0;
    double arrival = engine_now();
    pthread_mutex_lock(&e->lock);
    nl_status failed = refuse_if_failed(e);
    pthread_mutex_unlock(&e->lock);
    if (failed != NL_OK) return failed;
    if (!prompt || !params) return nl_error(NL_ERR_INVALID_ARG, "submit: prompt or params is NULL");
    NL_TRY(validate_params(e, params));
    int32_t *ids = NULL;
    int32_t n = 0;
    NL_TRY(prompt_ids(e, prompt, &ids, &n));
    nl_status st = NL_OK;
    /* max_tokens 0: whatever room max_model_len leaves after the prompt. */
    nl_sampling_params room;
    if (params->max_tokens == 0) {
        room = *params;
        room.max_tokens = e->config.max_model_len - n > 0 ? e->config.max_model_len - n : 1;
        params = &room;
    }
    int64_t total = (int64_t)n + params->max_tokens;
    int32_t bs = e->config.block_size;
    if (n == 0) {
        st = nl_error(NL_ERR_INVALID_ARG, "prompt: empty (at least one token is needed)");
        goto out;
    }
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= e->facts.vocab_size) {
            st = nl_error(NL_ERR_INVALID_ARG, "prompt: token %d at position %d is outside the vocabulary [0, %d)",
                          ids[i], i, e->facts.vocab_size);
            goto out;
        }
    }
    if (total > e->config.max_model_len) {
        st = nl_error(NL_ERR_INVALID_ARG,
                      "prompt of %d tokens + max_tokens %d = %lld: above max_model_len %d",
                      n, params->max_tokens, (long long)total, e->config.max_model_len);
        goto out;
    }
    if ((total + bs - 1) / bs > e->bm->num_blocks) {
        st = nl_error(NL_ERR_INVALID_ARG,
                      "prompt of %d tokens + max_tokens %d needs %lld KV blocks, the pool has %d",
                      n, params->max_tokens, (long long)((total + bs - 1) / bs), e->bm->num_blocks);
        goto out;
    }
    pthread_mutex_lock(&e->lock);
    uint64_t seed = params->has_seed ? params->seed : nl_splitmix64_next(&e->rng);
    uint64_t id = e->next_id++;
    pthread_mutex_unlock(&e->lock);
    request *r = NULL;
    st = request_create(id, ids, n, params, seed, bs, e->tok, &r);
    if (st != NL_OK) goto out;
    r->user = user;
    r->arrival_time = arrival;
    r->state = REQUEST_QUEUED;
    pthread_mutex_lock(&e->lock);
    st = refuse_if_failed(e);
    if (st == NL_OK) st = u64map_put(&e->requests, id, (int64_t)(uintptr_t)r);
    if (st == NL_OK) {
        if (e->inbox_tail) e->inbox_tail->next_queued = r; else e->inbox_head = r;
        e->inbox_tail = r;
        e->n_inbox++;
        e->n_unfinished++;
        e->pub.num_waiting++;
        e->pub.prompt_tokens += n;
        engine_wake(e);
    }
    pthread_mutex_unlock(&e->lock);
    if (st != NL_OK) {
        request_destroy(r);
        goto out;
    }
    if (request_id) *request_id = id;
out:
    free(ids);
    return st;
}
