/* cli_generate.c — `nanollm-launch generate [sampling options] [--chat]
 * PROMPT...`: completes each prompt and prints it.  A single prompt is
 * streamed as it is generated; several are printed in order when done,
 * each after a "=== [i] PROMPT" header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

static void on_stream(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, bool finished)
{
    (void)user; (void)id; (void)new_ids; (void)n_new;
    fputs(text_delta, stdout);
    if (finished) fputc('\n', stdout);
    fflush(stdout);
}

static const char *finish_name(nl_finish_reason r)
{
    switch (r) {
    case NL_FINISH_STOP: return "stop";
    case NL_FINISH_LENGTH: return "length";
    case NL_FINISH_ABORT: return "abort";
    case NL_FINISH_ERROR: return "error";
    default: return "running";
    }
}

int cli_generate(const nl_engine_config *config, int argc, char **argv)
{
    cli_sampling sp;
    cli_sampling_init(&sp);
    bool chat = false, thinking = true;
    int n_prompts = 0;
    char **prompts = calloc((size_t)argc + 1, sizeof(char *));
    if (!prompts) return 1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--chat") == 0) {
            chat = true;
            continue;
        }
        if (strcmp(argv[i], "--no-thinking") == 0) {
            thinking = false;
            continue;
        }
        if (strcmp(argv[i], "--") == 0) {
            for (i++; i < argc; i++) prompts[n_prompts++] = argv[i];
            break;
        }
        int m = cli_sampling_option(argc, argv, &i, &sp);
        if (m < 0) goto usage;
        if (m > 0) continue;
        if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "nanollm-launch: generate: unknown option '%s'\n", argv[i]);
            goto usage;
        }
        prompts[n_prompts++] = argv[i];
    }
    if (n_prompts == 0) {
        fprintf(stderr, "nanollm-launch: generate: no PROMPT given\n");
        goto usage;
    }

    nl_engine *engine = NULL;
    int open_rc = cli_open_engine(config, &engine);
    if (open_rc != 0) {
        free(prompts);
        return open_rc;
    }
    cli_demo_note(engine);
    int rc = 0;
    uint64_t *ids = calloc((size_t)n_prompts, sizeof(uint64_t));
    if (!ids) {
        rc = 1;
        goto out;
    }
    if (n_prompts == 1) nl_engine_set_stream_callback(engine, on_stream, NULL);
    for (int k = 0; k < n_prompts; k++) {
        nl_prompt p;
        memset(&p, 0, sizeof(p));
        nl_chat_message msg = {"user", prompts[k]};
        if (chat) {
            p.kind = NL_PROMPT_CHAT;
            p.messages = &msg;
            p.n_messages = 1;
            p.enable_thinking = thinking;
        } else {
            p.kind = NL_PROMPT_TEXT;
            p.text = prompts[k];
        }
        if (nl_engine_submit(engine, &p, &sp.params, &ids[k]) != NL_OK) {
            char what[64];
            snprintf(what, sizeof(what), "prompt %d", k + 1);
            cli_report(what);
            rc = 2;
            goto out;
        }
    }
    if (nl_engine_run_until_done(engine) != NL_OK) {
        cli_report("generation failed");
        rc = 1;
        goto out;
    }
    for (int k = 0; k < n_prompts; k++) {
        const nl_result *r;
        if (nl_engine_get_result(engine, ids[k], &r) != NL_OK) {
            cli_report("result");
            rc = 1;
            continue;
        }
        if (n_prompts > 1) {
            printf("=== [%d] %s\n%s\n", k + 1, prompts[k], r->text ? r->text : "");
        }
        fprintf(stderr, "[%d] %d prompt tokens (%d cached), %d generated, finish: %s\n", k + 1,
                r->prompt_tokens, r->cached_tokens, r->n_tokens, finish_name(r->finish_reason));
    }
out:
    free(ids);
    free(prompts);
    nl_engine_close(engine);
    return rc;
usage:
    free(prompts);
    fprintf(stderr, "Try 'nanollm-launch --help'.\n");
    return 2;
}
