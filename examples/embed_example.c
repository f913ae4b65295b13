/* embed_example.c — using nanollm from a C program through nanollm.h only.
 *
 * Opens an engine (the model in $NANOLLM_MODEL, or the built-in demo model),
 * submits a text prompt and a token-id prompt, streams the first one's text
 * as it is generated, and checks what comes back.  Build it against the
 * installed library:
 *
 *   cc embed_example.c $(pkg-config --cflags --libs nanollm) -o embed_example
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nanollm.h>

static void on_tokens(void *user, uint64_t request_id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, size_t text_len, bool finished)
{
    uint64_t *streamed = user;
    (void)new_ids;
    if (request_id == 1) {
        fwrite(text_delta, 1, text_len, stdout);
        if (finished) fputc('\n', stdout);
    }
    *streamed += (uint64_t)n_new;
}

static int fail(const char *what)
{
    fprintf(stderr, "embed_example: %s: %s\n", what, nl_last_error());
    return 1;
}

int main(void)
{
    nl_engine_config config;
    nl_engine_config_init(&config);
    config.model_dir = getenv("NANOLLM_MODEL"); /* NULL: the demo model */
    config.device = NL_DEVICE_AUTO;
    config.max_num_seqs = 8;
    config.max_num_batched_tokens = 1024;

    nl_engine *engine;
    if (nl_engine_open(&config, &engine) != NL_OK) return fail("open");
    nl_engine_info info;
    nl_engine_get_info(engine, &info);
    printf("nanollm %s on %s: vocab %d, max_model_len %d, %d KV blocks of %d%s\n", nl_version(),
           info.device_name, info.vocab_size, info.max_model_len, info.num_kv_blocks, info.block_size,
           info.is_demo_model ? " (demo model: random weights, the text is noise)" : "");

    uint64_t streamed = 0;
    nl_engine_set_stream_callback(engine, on_tokens, &streamed);

    nl_sampling_params params;
    nl_sampling_params_init(&params);
    params.max_tokens = 12;
    params.temperature = 0.0f; /* greedy: the two identical prompts must agree */
    params.ignore_eos = true;

    uint64_t ids[3];
    int n_req = 0;
    if (info.has_tokenizer) {
        nl_prompt text = {.kind = NL_PROMPT_TEXT, .text = "The capital of France is"};
        if (nl_engine_submit(engine, &text, &params, &ids[n_req++]) != NL_OK) return fail("submit text");
    }
    const int32_t tokens[] = {785, 6722, 315, 9625, 374};
    nl_prompt tp = {.kind = NL_PROMPT_TOKENS, .token_ids = tokens, .n_tokens = 5};
    if (nl_engine_submit(engine, &tp, &params, &ids[n_req++]) != NL_OK) return fail("submit tokens");
    if (nl_engine_submit(engine, &tp, &params, &ids[n_req++]) != NL_OK) return fail("submit tokens");
    if (nl_engine_run_until_done(engine) != NL_OK) return fail("generate");

    int bad = 0;
    const nl_result *r[3];
    for (int k = 0; k < n_req; k++) {
        if (nl_engine_get_result(engine, ids[k], &r[k]) != NL_OK) return fail("result");
        if (r[k]->finish_reason != NL_FINISH_LENGTH || r[k]->n_tokens != params.max_tokens) {
            fprintf(stderr, "embed_example: request %d: finish %d with %d tokens, want length with %d\n", k,
                    (int)r[k]->finish_reason, r[k]->n_tokens, params.max_tokens);
            bad = 1;
        }
        for (int32_t i = 0; i < r[k]->n_tokens; i++)
            if (r[k]->token_ids[i] < 0 || r[k]->token_ids[i] >= info.vocab_size) bad = 1;
        if (info.has_tokenizer != (r[k]->text != NULL)) bad = 1;
    }
    const nl_result *a = r[n_req - 2], *b = r[n_req - 1];
    if (memcmp(a->token_ids, b->token_ids, sizeof(int32_t) * (size_t)a->n_tokens) != 0) {
        fprintf(stderr, "embed_example: greedy decoding of the same prompt differs\n");
        bad = 1;
    }
    if (streamed != (uint64_t)n_req * (uint64_t)params.max_tokens) {
        fprintf(stderr, "embed_example: streamed %llu tokens, want %d\n", (unsigned long long)streamed,
                n_req * params.max_tokens);
        bad = 1;
    }
    printf("%d requests, %d tokens each, prompt 2 and 3 agree: %s\n", n_req, params.max_tokens,
           bad ? "FAILED" : "ok");
    for (int k = 0; k < n_req; k++) nl_engine_release(engine, ids[k]);
    nl_engine_close(engine);
    return bad;
}
