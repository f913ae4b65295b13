/* engine.c — an engine's lifetime and what it reports.
 *
 * engine_open_with_runner() builds the engine around a runner (the worker
 * pool, or a test's fake) and a tokenizer; nl_engine_close() releases
 * everything.  Also here: engine info and stats, the callbacks, and the
 * tokenizer for callers.  See engine_state.h for the other files;
 * opening on a model directory lives in engine_open.c.
 *
 * A runner failure fails the step with NL_ERR_WORKER; every unfinished
 * request then ends with NL_FINISH_ERROR and the engine refuses further
 * submissions and steps (engine_step.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/log.h"
#include "common/status.h"
#include "leader/engine/engine_state.h"

nl_status engine_open_with_runner(const nl_engine_config *config,
                                  const engine_model_facts *facts, runner *r,
                                  tokenizer *tok, nl_engine **out)
{
    *out = NULL;
    nl_status st = engine_config_validate(config);
    nl_engine *e = NULL;
    if (st != NL_OK) goto fail;
    if (facts->vocab_size <= 0 || facts->max_position_embeddings <= 0 || facts->n_eos < 0 ||
        facts->n_eos > NL_MAX_EOS) {
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
    pthread_mutex_init(&e->step_lock, NULL);
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->tok_lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    e->driver = pthread_self();
    e->config = *config;
    e->config.model_dir = NULL; /* not kept: the caller's string */
    e->facts = *facts;
    snprintf(e->device_name, sizeof(e->device_name), "%s", facts->device_name ? facts->device_name : "?");
    e->facts.device_name = e->device_name;
    e->model_dir = facts->model_dir ? strdup(facts->model_dir) : NULL;
    e->facts.model_dir = e->model_dir;
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
    st = scheduler_create(e->bm, config->max_num_seqs, config->max_num_batched_tokens,
                          config->prefill_first, &e->sch);
    if (st != NL_OK) goto fail;
    st = u64map_init(&e->requests, 1024);
    if (st != NL_OK) goto fail;
    e->wire_seqs = calloc((size_t)config->max_num_seqs, sizeof(wire_seq));
    bool flights_ok = true;
    for (int32_t i = 0; i < RUNNER_MAX_IN_FLIGHT; i++) {
        e->flights[i].seqs = calloc((size_t)config->max_num_seqs, sizeof(seq *));
        e->flights[i].sample = calloc((size_t)config->max_num_seqs, sizeof(bool));
        flights_ok = flights_ok && e->flights[i].seqs && e->flights[i].sample;
    }
    if (!e->wire_seqs || !flights_ok) {
        st = nl_error(NL_ERR_NOMEM, "engine: out of memory for %d seqs", config->max_num_seqs);
        goto fail;
    }
    st = output_processor_init(&e->output, e->tok, e->facts.eos_ids, e->facts.n_eos,
                               e->config.max_model_len);
    if (st != NL_OK) goto fail;
    if (getrandom(&e->rng, sizeof(e->rng), 0) != (ssize_t)sizeof(e->rng))
        e->rng = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)e << 16);
    e->next_id = 1;
    engine_publish_stats(e);
    nl_log(NL_LOG_INFO,
           "engine open: %s, %d KV blocks of %d tokens, max_model_len %d, tp %d, %s steps of up to %d "
           "tokens",
           e->device_name, e->bm->num_blocks, config->block_size, e->config.max_model_len, config->tp,
           config->prefill_first ? "prefill-first" : "mixed", config->max_num_batched_tokens);
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
    if (e->background) nl_engine_stop(e);
    /* Every request is in exactly one of: the map (not released), the
     * free queue (released, finished), the abort queue (released,
     * unfinished). */
    for (int32_t i = 0; i < e->aborts.n; i++)
        if (e->aborts.items[i]->released && e->aborts.items[i]->state != REQUEST_FINISHED)
            request_destroy(e->aborts.items[i]);
    for (int32_t i = 0; i < e->frees.n; i++) request_destroy(e->frees.items[i]);
    free(e->aborts.items);
    free(e->frees.items);
    if (e->requests.used) {
        for (uint32_t i = 0; i < e->requests.cap; i++)
            if (e->requests.used[i]) request_destroy((request *)(uintptr_t)e->requests.values[i]);
        u64map_free(&e->requests);
    }
    scheduler_destroy(e->sch);
    block_manager_destroy(e->bm);
    if (e->runner) e->runner->ops->destroy(e->runner);
    if (e->tok) tokenizer_destroy(e->tok);
    free(e->wire_seqs);
    for (int32_t i = 0; i < RUNNER_MAX_IN_FLIGHT; i++) {
        free(e->flights[i].seqs);
        free(e->flights[i].sample);
    }
    free(e->model_dir);
    output_processor_free(&e->output);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->tok_lock);
    pthread_mutex_destroy(&e->lock);
    pthread_mutex_destroy(&e->step_lock);
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
    info->model_dir = e->model_dir;
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
    e->output.stream_cb = cb;
    e->output.stream_user = user;
}

void nl_engine_set_final_callback(nl_engine *e, nl_final_callback cb, void *user)
{
    e->final_cb = cb;
    e->final_user = user;
}

/* ---- tokenizer access ----------------------------------------------------------- */

nl_status nl_engine_encode(nl_engine *e, const char *text, size_t len, uint32_t flags, int32_t **ids,
                           int32_t *n_ids)
{
    if (!ids || !n_ids) return nl_error(NL_ERR_INVALID_ARG, "encode: ids or n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!e->tok) return nl_error(NL_ERR_UNSUPPORTED, "encode: the model has no tokenizer.json");
    if (!text && len > 0) return nl_error(NL_ERR_INVALID_ARG, "encode: text is NULL");
    size_t n = 0;
    pthread_mutex_lock(&e->tok_lock);
    nl_status st = tokenizer_encode_flags(e->tok, text ? text : "", len, flags, ids, &n);
    pthread_mutex_unlock(&e->tok_lock);
    if (st != NL_OK) return st;
    if (n > INT32_MAX) {
        free(*ids);
        *ids = NULL;
        return nl_error(NL_ERR_INVALID_ARG, "encode: %zu tokens, more than an int32 count", n);
    }
    *n_ids = (int32_t)n;
    return NL_OK;
}

nl_status nl_engine_decode(nl_engine *e, const int32_t *ids, int32_t n_ids, char **text, size_t *len)
{
    if (!text || !len) return nl_error(NL_ERR_INVALID_ARG, "decode: text or len is NULL");
    *text = NULL;
    *len = 0;
    if (!e->tok) return nl_error(NL_ERR_UNSUPPORTED, "decode: the model has no tokenizer.json");
    if (n_ids < 0 || (n_ids > 0 && !ids)) return nl_error(NL_ERR_INVALID_ARG, "decode: %d ids", n_ids);
    return tokenizer_decode_n(e->tok, ids, (size_t)n_ids, true, text, len);
}
