/* engine.c — the step loop behind include/nanollm.h.
 *
 * Owns the requests (seqs by id), the scheduler and block manager, the
 * tokenizer (optional) and a runner.  A step schedules a batch, writes it as
 * one wire_run whose tokens and block tables point straight into the seqs
 * (no copies, no per-step allocation), runs it, then appends the sampled
 * tokens and applies the stop rules: EOS ids, stop strings on the
 * detokenized text, max_tokens and max_model_len.
 *
 * A runner failure fails the step with NL_ERR_WORKER; every unfinished
 * request then ends with NL_FINISH_ERROR and the engine refuses further
 * submissions and steps.  Opening on a model directory (demo model, config,
 * tokenizer, worker pool) lives in engine_open.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/mix64.h"
#include "common/status.h"
#include "leader/engine/engine_internal.h"
#include "leader/engine/scheduler.h"
#include "leader/engine/seq.h"
#include "leader/tokenizer/tokenizer_utf8.h"
#include "leader/engine/u64map.h"

struct nl_engine {
    nl_engine_config config;
    engine_model_facts facts;
    char device_name[32];
    runner *runner;
    tokenizer *tok;
    block_manager *bm;
    scheduler *sch;
    u64map requests;              /* request id -> seq *                 */
    uint64_t next_id;
    uint64_t arrival;
    uint64_t rng;                 /* seeds for unseeded requests         */
    wire_seq *wire_seqs;          /* [max_num_seqs]                      */
    uint64_t step_id;
    nl_stream_callback stream_cb;
    void *stream_user;
    char *stream_buf;             /* NUL-terminated text delta           */
    size_t stream_cap;
    nl_status failed;
    char fail_msg[600];
    engine_stats stats;
};

void nl_engine_config_init(nl_engine_config *c)
{
    memset(c, 0, sizeof(*c));
    c->model_dir = NULL;
    c->tp = 1;
    c->device = NL_DEVICE_AUTO;
    c->max_num_seqs = 512;
    c->max_num_batched_tokens = 16384;
    c->max_model_len = 0;
    /* 16 is the finest granularity the prefix cache and the kernels accept;
     * a larger block may be faster for attention on a given GPU — choose it
     * by measurement there. */
    c->block_size = 16;
    c->num_kv_blocks = 0;
    c->gpu_memory_utilization = 0.9f;
    c->enforce_eager = false;
    c->enable_prefix_caching = true;
}

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

nl_status engine_config_validate(const nl_engine_config *c)
{
    if (c->tp < 1 || c->tp > 64)
        return nl_error(NL_ERR_INVALID_ARG, "tp %d: must be in [1, 64]", c->tp);
    if (c->device != NL_DEVICE_AUTO && c->device != NL_DEVICE_CPU && c->device != NL_DEVICE_CUDA)
        return nl_error(NL_ERR_INVALID_ARG, "device %d: not auto, cpu or cuda", (int)c->device);
    if (c->max_num_seqs < 1 || c->max_num_seqs > 65536)
        return nl_error(NL_ERR_INVALID_ARG, "max_num_seqs %d: must be in [1, 65536]", c->max_num_seqs);
    if (c->max_num_batched_tokens < c->max_num_seqs || c->max_num_batched_tokens > (1 << 24))
        return nl_error(NL_ERR_INVALID_ARG,
                        "max_num_batched_tokens %d: must be in [max_num_seqs (%d), %d]",
                        c->max_num_batched_tokens, c->max_num_seqs, 1 << 24);
    if (c->max_model_len < 0)
        return nl_error(NL_ERR_INVALID_ARG, "max_model_len %d: must be >= 0 (0: from the model)",
                        c->max_model_len);
    if (c->block_size < 16 || c->block_size % 16 != 0 || c->block_size > 4096)
        return nl_error(NL_ERR_INVALID_ARG, "block_size %d: must be a multiple of 16 in [16, 4096]",
                        c->block_size);
    if (c->num_kv_blocks < 0)
        return nl_error(NL_ERR_INVALID_ARG, "num_kv_blocks %d: must be >= 0 (0: sized from memory)",
                        c->num_kv_blocks);
    if (!(c->gpu_memory_utilization > 0.0f && c->gpu_memory_utilization <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "gpu_memory_utilization %g: must be in (0, 1]",
                        (double)c->gpu_memory_utilization);
    return NL_OK;
}

static void destroy_request(seq *s)
{
    if (s->detok) detokenizer_destroy(s->detok);
    seq_destroy(s);
}

nl_status engine_open_with_runner(const nl_engine_config *config,
                                  const engine_model_facts *facts, runner *r,
                                  tokenizer *tok, nl_engine **out)
{
    *out = NULL;
    nl_status st = engine_config_validate(config);
    nl_engine *e = NULL;
    if (st != NL_OK) goto fail;
    if (facts->vocab_size <= 0 || facts->max_position_embeddings <= 0 || facts->n_eos < 0 ||
        facts->n_eos > ENGINE_MAX_EOS) {
        st = nl_error(NL_ERR_INVALID_ARG, "model: vocab_size %d, max_position_embeddings %d, %d eos ids",
                      facts->vocab_size, facts->max_position_embeddings, facts->n_eos);
        goto fail;
    }
    if (r->num_kv_blocks <= 0) {
        st = nl_error(NL_ERR_NOMEM, "the workers allocated %d KV blocks: no room for the KV cache",
                      r->num_kv_blocks);
        goto fail;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        st = nl_error(NL_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    e->config = *config;
    e->config.model_dir = NULL; /* not kept: the caller's string */
    e->facts = *facts;
    snprintf(e->device_name, sizeof(e->device_name), "%s", facts->device_name ? facts->device_name : "?");
    e->facts.device_name = e->device_name;
    e->runner = r;
    e->tok = tok;
    r = NULL;
    tok = NULL;

    int64_t pool_tokens = (int64_t)e->runner->num_kv_blocks * config->block_size;
    if (config->max_model_len > 0) {
        if (config->max_model_len > facts->max_position_embeddings) {
            st = nl_error(NL_ERR_INVALID_ARG, "max_model_len %d: above the model's max_position_embeddings %d",
                          config->max_model_len, facts->max_position_embeddings);
            goto fail;
        }
        if (config->max_model_len > pool_tokens) {
            st = nl_error(NL_ERR_NOMEM,
                          "max_model_len %d: the KV cache holds only %lld tokens (%d blocks of %d); "
                          "lower max_model_len or raise gpu_memory_utilization/num_kv_blocks",
                          config->max_model_len, (long long)pool_tokens, e->runner->num_kv_blocks,
                          config->block_size);
            goto fail;
        }
    } else {
        int64_t len = facts->max_position_embeddings;
        if (len > pool_tokens) len = pool_tokens;
        e->config.max_model_len = (int32_t)len;
    }

    st = block_manager_create(e->runner->num_kv_blocks, config->block_size,
                              config->enable_prefix_caching, &e->bm);
    if (st != NL_OK) goto fail;
    st = scheduler_create(e->bm, config->max_num_seqs, config->max_num_batched_tokens, &e->sch);
    if (st != NL_OK) goto fail;
    st = u64map_init(&e->requests, 1024);
    if (st != NL_OK) goto fail;
    e->wire_seqs = calloc((size_t)config->max_num_seqs, sizeof(wire_seq));
    e->stream_cap = 4096;
    e->stream_buf = malloc(e->stream_cap);
    if (!e->wire_seqs || !e->stream_buf) {
        st = nl_error(NL_ERR_NOMEM, "engine: out of memory for %d seqs", config->max_num_seqs);
        goto fail;
    }
    if (getrandom(&e->rng, sizeof(e->rng), 0) != (ssize_t)sizeof(e->rng))
        e->rng = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)e << 16);
    e->next_id = 1;
    *out = e;
    return NL_OK;
fail:;
    /* Destroying the runner shuts the workers down, which clears the
     * thread's error: keep the reason the open failed. */
    char why[600];
    snprintf(why, sizeof why, "%s", nl_last_error());
    if (e) {
        nl_engine_close(e);
    } else {
        if (r) r->ops->destroy(r);
        if (tok) tokenizer_destroy(tok);
    }
    return nl_error(st, "%s", why);
}

void nl_engine_close(nl_engine *e)
{
    if (!e) return;
    if (e->requests.used) {
        for (uint32_t i = 0; i < e->requests.cap; i++)
            if (e->requests.used[i]) destroy_request((seq *)(uintptr_t)e->requests.values[i]);
        u64map_free(&e->requests);
    }
    scheduler_destroy(e->sch);
    block_manager_destroy(e->bm);
    if (e->runner) e->runner->ops->destroy(e->runner);
    if (e->tok) tokenizer_destroy(e->tok);
    free(e->wire_seqs);
    free(e->stream_buf);
    free(e);
}

void nl_engine_get_info(const nl_engine *e, nl_engine_info *info)
{
    memset(info, 0, sizeof(*info));
    info->vocab_size = e->facts.vocab_size;
    info->max_model_len = e->config.max_model_len;
    info->block_size = e->config.block_size;
    info->num_kv_blocks = e->bm->num_blocks;
    info->tp = e->config.tp;
    info->has_tokenizer = e->tok != NULL;
    info->is_demo_model = e->facts.is_demo_model;
    info->device_name = e->device_name;
}

void engine_get_stats(const nl_engine *e, engine_stats *stats)
{
    *stats = e->stats;
    stats->preemptions = e->sch->total_preemptions;
    stats->num_free_blocks = e->bm->n_free;
    stats->num_running = e->sch->running.count;
    stats->num_waiting = e->sch->waiting.count;
}

void nl_engine_set_stream_callback(nl_engine *e, nl_stream_callback cb, void *user)
{
    e->stream_cb = cb;
    e->stream_user = user;
}

/* ---- submission ---------------------------------------------------------- */

static nl_status validate_params(const nl_engine *e, const nl_sampling_params *p)
{
    if (p->max_tokens < 1)
        return nl_error(NL_ERR_INVALID_ARG, "max_tokens %d: must be >= 1", p->max_tokens);
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return nl_error(NL_ERR_INVALID_ARG, "temperature %g: must be a finite number >= 0",
                        (double)p->temperature);
    if (p->top_k < -1)
        return nl_error(NL_ERR_INVALID_ARG, "top_k %d: must be >= -1 (0 or -1: off)", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "top_p %g: must be in (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return nl_error(NL_ERR_INVALID_ARG, "min_p %g: must be in [0, 1]", (double)p->min_p);
    if (p->logprobs < 0 || p->logprobs > WIRE_MAX_LOGPROBS)
        return nl_error(NL_ERR_INVALID_ARG, "logprobs %d: must be in [0, %d]", p->logprobs,
                        WIRE_MAX_LOGPROBS);
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
    return NL_OK;
}

/* The prompt as token ids: *owned is set when *ids was allocated here. */
static nl_status prompt_ids(nl_engine *e, const nl_prompt *prompt, int32_t **ids, int32_t *n)
{
    *ids = NULL;
    *n = 0;
    char *chat_text = NULL;
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
        if (prompt->n_messages <= 0 || !prompt->messages)
            return nl_error(NL_ERR_INVALID_ARG, "prompt: a chat needs at least one message");
        break;
    default:
        return nl_error(NL_ERR_INVALID_ARG, "prompt: unknown kind %d", (int)prompt->kind);
    }
    if (!e->tok)
        return nl_error(NL_ERR_UNSUPPORTED,
                        "prompt: text and chat prompts need a tokenizer (tokenizer.json) in the model; "
                        "give token ids instead");
    if (prompt->kind == NL_PROMPT_CHAT) {
        NL_TRY(tokenizer_apply_chat_template(e->tok, prompt->messages, (size_t)prompt->n_messages,
                                             true, prompt->enable_thinking, &chat_text));
        text = chat_text;
    }
    size_t n_ids = 0;
    nl_status st = tokenizer_encode(e->tok, text, strlen(text), ids, &n_ids);
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

nl_status nl_engine_submit(nl_engine *e, const nl_prompt *prompt,
                           const nl_sampling_params *params, uint64_t *request_id)
{
    if (request_id) *request_id = 0;
    if (e->failed)
        return nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    if (!prompt || !params) return nl_error(NL_ERR_INVALID_ARG, "submit: prompt or params is NULL");
    NL_TRY(validate_params(e, params));
    int32_t *ids = NULL;
    int32_t n = 0;
    NL_TRY(prompt_ids(e, prompt, &ids, &n));
    nl_status st = NL_OK;
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
    uint64_t seed = params->has_seed ? params->seed : nl_splitmix64_next(&e->rng);
    uint64_t id = e->next_id;
    seq *s = NULL;
    st = seq_create(id, ids, n, params, seed, bs, &s);
    if (st != NL_OK) goto out;
    if (e->tok) {
        detokenizer *d = NULL;
        st = detokenizer_create(e->tok, true, &d);
        if (st != NL_OK) {
            seq_destroy(s);
            goto out;
        }
        s->detok = d;
    }
    st = u64map_put(&e->requests, id, (int64_t)(uintptr_t)s);
    if (st != NL_OK) {
        destroy_request(s);
        goto out;
    }
    e->next_id++;
    s->arrival = e->arrival++;
    scheduler_add(e->sch, s);
    e->stats.prompt_tokens += n;
    if (request_id) *request_id = id;
out:
    free(ids);
    return st;
}

/* ---- the step ---------------------------------------------------------------- */

static bool is_eos(const nl_engine *e, int32_t token)
{
    for (int32_t i = 0; i < e->facts.n_eos; i++)
        if (e->facts.eos_ids[i] == token) return true;
    return false;
}

static void fill_result(seq *s)
{
    nl_result *r = &s->result;
    r->request_id = s->id;
    r->token_ids = s->tokens + s->prompt_len;
    r->n_tokens = seq_num_output(s);
    r->text = s->detok ? (s->text ? s->text : "") : NULL;
    r->finish_reason = s->finish;
    r->prompt_tokens = s->prompt_len;
    r->cached_tokens = s->prompt_cached > 0 ? s->prompt_cached : 0;
    r->logprobs = s->logprobs;
    r->error = s->error;
}

static void finish_seq(nl_engine *e, seq *s, nl_finish_reason reason)
{
    scheduler_finish(e->sch, s, reason);
    fill_result(s);
}

static nl_status stream(nl_engine *e, seq *s, int32_t token, bool finished)
{
    const char *text;
    size_t len;
    seq_take_stream_text(s, finished, &text, &len);
    if (len == 0 || text + len == s->text + s->text_len) {
        /* Already NUL-terminated in the seq: no copy. */
        e->stream_cb(e->stream_user, s->id, &token, 1, len ? text : "", finished);
        return NL_OK;
    }
    if (len + 1 > e->stream_cap) {
        size_t cap = e->stream_cap;
        while (cap < len + 1) cap *= 2;
        char *p = realloc(e->stream_buf, cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "stream: out of memory for %zu bytes", cap);
        e->stream_buf = p;
        e->stream_cap = cap;
    }
    memcpy(e->stream_buf, text, len);
    e->stream_buf[len] = '\0';
    e->stream_cb(e->stream_user, s->id, &token, 1, e->stream_buf, finished);
    return NL_OK;
}

/* Appends one sampled token and applies the stop rules. */
static nl_status postprocess(nl_engine *e, seq *s, const wire_sampled *sm)
{
    seq_append_token(s, sm->token_id);
    int32_t k = seq_num_output(s) - 1;
    if (s->logprobs) {
        nl_token_logprob *lp = &s->logprobs[k];
        lp->token_id = sm->token_id;
        lp->logprob = sm->logprob;
        lp->n_top = sm->n_top < s->params.logprobs ? sm->n_top : s->params.logprobs;
        if (lp->n_top < 0) lp->n_top = 0;
        memcpy(lp->top_ids, sm->top_ids, sizeof(int32_t) * (size_t)lp->n_top);
        memcpy(lp->top_logprobs, sm->top_logprobs, sizeof(float) * (size_t)lp->n_top);
    }
    e->stats.output_tokens++;
    nl_finish_reason finish = NL_FINISH_NONE;
    if (!s->params.ignore_eos && is_eos(e, sm->token_id)) finish = NL_FINISH_STOP;
    bool stopped_by_string = false;
    /* The embedding may have rows that stand for no token (padding past
     * the tokenizer's ids, or a gap between them): such an id renders as
     * no text. */
    if (s->detok && tokenizer_has_token(e->tok, sm->token_id)) {
        const char *delta;
        size_t len;
        NL_TRY(detokenizer_push(s->detok, sm->token_id, &delta, &len));
        NL_TRY(seq_append_text(s, delta, len, &stopped_by_string));
        if (stopped_by_string) finish = NL_FINISH_STOP;
    }
    if (finish == NL_FINISH_NONE &&
        (k + 1 >= s->params.max_tokens || s->n_tokens >= e->config.max_model_len))
        finish = NL_FINISH_LENGTH;
    if (finish != NL_FINISH_NONE && s->detok && !stopped_by_string) {
        const char *delta;
        size_t len;
        bool stopped;
        NL_TRY(detokenizer_flush(s->detok, &delta, &len));
        NL_TRY(seq_append_text(s, delta, len, &stopped));
    }
    if (e->stream_cb) NL_TRY(stream(e, s, sm->token_id, finish != NL_FINISH_NONE));
    /* The callback may have aborted it. */
    if (finish != NL_FINISH_NONE && s->status != SEQ_FINISHED) finish_seq(e, s, finish);
    return NL_OK;
}

/* Ends every unfinished request with the failure and stops the engine. */
static nl_status fail_engine(nl_engine *e, nl_status st)
{
    snprintf(e->fail_msg, sizeof(e->fail_msg), "%s", nl_last_error());
    e->failed = st;
    for (uint32_t i = 0; i < e->requests.cap; i++) {
        if (!e->requests.used[i]) continue;
        seq *s = (seq *)(uintptr_t)e->requests.values[i];
        if (s->status == SEQ_FINISHED) continue;
        s->error = strdup(e->fail_msg);
        finish_seq(e, s, NL_FINISH_ERROR);
    }
    return nl_error(st, "%s", e->fail_msg);
}

nl_status nl_engine_step(nl_engine *e)
{
    if (e->failed)
        return nl_error(e->failed, "engine stopped after an earlier failure: %s", e->fail_msg);
    const sched_batch *b = scheduler_schedule(e->sch);
    if (b->n_seqs == 0) return NL_OK;

    int32_t n_sample = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        seq *s = b->seqs[i];
        wire_seq *w = &e->wire_seqs[i];
        w->seq_id = s->id;
        w->num_computed = s->num_computed;
        w->num_new = s->num_new;
        w->n_blocks = s->n_blocks;
        w->sample = s->num_computed + s->num_new == s->n_tokens;
        w->temperature = s->params.temperature;
        w->top_p = s->params.top_p;
        w->min_p = s->params.min_p;
        w->top_k = s->params.top_k;
        w->n_logprobs = s->params.logprobs;
        w->seed = s->seed;
        w->sample_offset = (uint64_t)seq_num_output(s);
        w->tokens = s->tokens + s->num_computed;
        w->block_table = s->block_table;
        n_sample += w->sample;
    }
    wire_run cmd = {.kind = WIRE_RUN, .step_id = ++e->step_id, .n_seqs = b->n_seqs, .seqs = e->wire_seqs};
    wire_reply reply;
    reply.status = NL_OK;
    reply.n_sampled = 0;
    reply.sampled = NULL;
    reply.error[0] = '\0';
    nl_status st = e->runner->ops->execute(e->runner, &cmd, &reply);
    if (st != NL_OK) return fail_engine(e, nl_error_prefix(NL_ERR_WORKER, "step %llu: ",
                                                          (unsigned long long)cmd.step_id));
    if (reply.status != NL_OK)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: %s", (unsigned long long)cmd.step_id,
                                       reply.error[0] ? reply.error : nl_status_name(reply.status)));
    if (reply.n_sampled != n_sample)
        return fail_engine(e, nl_error(NL_ERR_WORKER, "step %llu: the workers sampled %d tokens, expected %d",
                                       (unsigned long long)cmd.step_id, reply.n_sampled, n_sample));

    e->stats.steps++;
    if (b->is_prefill) e->stats.prefill_steps++; else e->stats.decode_steps++;
    scheduler_commit(e->sch);
    int32_t j = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        if (!e->wire_seqs[i].sample) continue;
        seq *s = b->seqs[i];
        const wire_sampled *sm = &reply.sampled[j++];
        if (sm->seq_id != s->id || sm->token_id < 0 || sm->token_id >= e->facts.vocab_size)
            return fail_engine(e, nl_error(NL_ERR_WORKER,
                                           "step %llu: reply %d is token %d for seq %llu, expected seq %llu "
                                           "and a token in [0, %d)",
                                           (unsigned long long)cmd.step_id, j - 1, sm->token_id,
                                           (unsigned long long)sm->seq_id, (unsigned long long)s->id,
                                           e->facts.vocab_size));
        if (s->status == SEQ_FINISHED) continue; /* aborted by a stream callback this step */
        if (s->prompt_cached >= 0 && seq_num_output(s) == 0) e->stats.cached_tokens += s->prompt_cached;
        st = postprocess(e, s, sm);
        if (st != NL_OK) return fail_engine(e, st);
    }
    return NL_OK;
}

bool nl_engine_has_unfinished(const nl_engine *e)
{
    return scheduler_has_unfinished(e->sch);
}

nl_status nl_engine_run_until_done(nl_engine *e)
{
    while (nl_engine_has_unfinished(e)) NL_TRY(nl_engine_step(e));
    return NL_OK;
}

/* ---- results ------------------------------------------------------------------ */

static seq *find_request(const nl_engine *e, uint64_t id)
{
    int64_t v;
    return u64map_get(&e->requests, id, &v) ? (seq *)(uintptr_t)v : NULL;
}

nl_status nl_engine_abort(nl_engine *e, uint64_t request_id)
{
    seq *s = find_request(e, request_id);
    if (!s) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown", (unsigned long long)request_id);
    if (s->status != SEQ_FINISHED) finish_seq(e, s, NL_FINISH_ABORT);
    return NL_OK;
}

nl_status nl_engine_get_result(nl_engine *e, uint64_t request_id, const nl_result **out)
{
    *out = NULL;
    seq *s = find_request(e, request_id);
    if (!s) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    if (s->status != SEQ_FINISHED)
        return nl_error(NL_ERR_NOT_FOUND, "request %llu: still running", (unsigned long long)request_id);
    *out = &s->result;
    return NL_OK;
}

void nl_engine_release(nl_engine *e, uint64_t request_id)
{
    seq *s = find_request(e, request_id);
    if (!s) return;
    if (s->status != SEQ_FINISHED) scheduler_finish(e->sch, s, NL_FINISH_ABORT);
    u64map_remove(&e->requests, request_id);
    destroy_request(s);
}

/* ---- tokenizer access ----------------------------------------------------------- */

nl_status nl_engine_encode(nl_engine *e, const char *text, int32_t **ids, int32_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    if (!e->tok) return nl_error(NL_ERR_UNSUPPORTED, "encode: the model has no tokenizer.json");
    if (!text) return nl_error(NL_ERR_INVALID_ARG, "encode: text is NULL");
    size_t n = 0;
    NL_TRY(tokenizer_encode(e->tok, text, strlen(text), ids, &n));
    *n_ids = (int32_t)n;
    return NL_OK;
}

nl_status nl_engine_decode(nl_engine *e, const int32_t *ids, int32_t n_ids, char **text)
{
    *text = NULL;
    if (!e->tok) return nl_error(NL_ERR_UNSUPPORTED, "decode: the model has no tokenizer.json");
    if (n_ids < 0 || (n_ids > 0 && !ids)) return nl_error(NL_ERR_INVALID_ARG, "decode: %d ids", n_ids);
    return tokenizer_decode(e->tok, ids, (size_t)n_ids, true, text);
}
