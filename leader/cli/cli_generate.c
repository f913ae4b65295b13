/* cli_generate.c — `nanollm-launch generate [options] PROMPT...`: completes
 * each prompt and prints it.
 *
 * Prompts come from the command line, from stdin (PROMPT "-") or from files
 * (--prompt-file, each file one prompt, read as is).  A single prompt is
 * streamed as it is generated; several are printed in order when done, each
 * after a "=== [i] PROMPT" header.  With --logprobs N each completion is
 * followed by a table of its tokens' log-probabilities.  On stderr: a line
 * per prompt (tokens, finish reason) and a timing line in the manner of
 * llama-cli: prompt tokens per second up to the last prompt's first token,
 * generated tokens per second after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli.h"

enum { OPT_CHAT = CLI_OWN, OPT_NO_THINKING, OPT_SYSTEM, OPT_PROMPT_FILE };

static const struct option generate_options[] = {
    CLI_SAMPLING_OPTIONS,
    {"chat", no_argument, NULL, OPT_CHAT},
    {"no-thinking", no_argument, NULL, OPT_NO_THINKING},
    {"system", required_argument, NULL, OPT_SYSTEM},
    {"prompt-file", required_argument, NULL, OPT_PROMPT_FILE},
    {NULL, 0, NULL, 0},
};

const cli_command cli_generate_command = {
    .name = "generate",
    .options = generate_options,
    .help =
    "usage: nanollm-launch generate [options] PROMPT...\n"
    "\n"
    "Completes each PROMPT and prints it: one prompt is streamed, several are printed\n"
    "in order under '=== [i] PROMPT' headers.  PROMPT '-' is read from stdin.\n"
    "\n"
    "options:\n"
    "  --prompt-file FILE   a prompt read from FILE as is (repeatable)\n"
    "  --chat               wrap each prompt as a user message in the model's chat template\n"
    "  --system TEXT        with --chat: a system message first\n"
    "  --no-thinking        with --chat: Qwen3 thinking off\n"
    "\n" CLI_SAMPLING_HELP
    "\n"
    "With --logprobs N each completion is followed by a table of its tokens: position,\n"
    "token id, logprob, the top N as id:logprob, text.  On stderr: per prompt its token\n"
    "counts and finish reason, then a timing line (prompt and generation tokens/s).\n",
};

typedef struct prompt_src {
    const char *text;
    char *owned;       /* text read from a file or stdin */
    const char *label; /* what the header shows */
    char label_buf[300];
} prompt_src;

typedef struct timing {
    uint64_t *ids;
    double *first;     /* when each request's first token came; 0 before */
    int n;
    bool stream;       /* print text deltas (one prompt) */
} timing;

static void on_stream(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, size_t text_len, bool finished)
{
    (void)new_ids;
    timing *t = user;
    if (n_new > 0) {
        for (int k = 0; k < t->n; k++)
            if (t->ids[k] == id && t->first[k] == 0) t->first[k] = cli_now();
    }
    if (!t->stream) return;
    fwrite(text_delta, 1, text_len, stdout); /* not fputs: the text may hold U+0000 */
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

/* The whole of f (a NUL-terminated string in *out); false with a message
 * when it cannot be read or holds a NUL byte (a prompt is a C string). */
static bool read_prompt(FILE *f, const char *what, char **out)
{
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    if (!buf || ferror(f)) {
        fprintf(stderr, "nanollm-launch generate: %s: %s\n", what, buf ? "read error" : "out of memory");
        free(buf);
        return false;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        fprintf(stderr, "nanollm-launch generate: %s: a NUL byte at offset %zu (a prompt is text)\n", what,
                strlen(buf));
        free(buf);
        return false;
    }
    *out = buf;
    return true;
}

/* A token's text as a quoted, escaped string ("" for special tokens, which
 * the engine's decode skips; nothing without a tokenizer). */
static void print_token_text(nl_engine *engine, int32_t id)
{
    char *text = NULL;
    size_t len = 0;
    if (nl_engine_decode(engine, &id, 1, &text, &len) != NL_OK) return;
    fputs("  \"", stdout);
    for (const unsigned char *c = (const unsigned char *)text; c < (const unsigned char *)text + len; c++) {
        if (*c == '"' || *c == '\\') printf("\\%c", *c);
        else if (*c == '\n') fputs("\\n", stdout);
        else if (*c == '\t') fputs("\\t", stdout);
        else if (*c == '\r') fputs("\\r", stdout);
        else if (*c < 0x20) printf("\\u%04x", *c);
        else fputc(*c, stdout);
    }
    fputc('"', stdout);
    free(text);
}

static void print_logprobs(nl_engine *engine, int k, const nl_result *r)
{
    if (!r->logprobs) return;
    printf("logprobs [%d] (position, token id, logprob, top id:logprob..., text):\n", k + 1);
    for (int32_t i = 0; i < r->n_tokens; i++) {
        const nl_token_logprob *lp = &r->logprobs[i];
        printf("  %d %d %.5f top", i, lp->token_id, (double)lp->logprob);
        for (int32_t t = 0; t < lp->n_top; t++) printf(" %d:%.5f", lp->top_ids[t], (double)lp->top_logprobs[t]);
        print_token_text(engine, lp->token_id);
        fputc('\n', stdout);
    }
}

/* "timing: prompt P tokens (C cached) in S s (R tok/s), generation G tokens
 * in S s (R tok/s)": the prompt phase runs until the last request's first
 * token, the generation phase from then to the end. */
static void print_timing(const timing *t, double start, double end, int64_t prompt, int64_t cached,
                         int64_t generated, int n_started)
{
    double first = start;
    for (int k = 0; k < t->n; k++)
        if (t->first[k] > first) first = t->first[k];
    double tp = first - start, tg = end - first;
    int64_t computed = prompt - cached, later = generated - n_started;
    fprintf(stderr, "timing: prompt %lld tokens (%lld cached) in %.3f s (%.1f tok/s), "
            "generation %lld tokens in %.3f s (%.1f tok/s)\n",
            (long long)computed, (long long)cached, tp, tp > 0 ? (double)computed / tp : 0.0,
            (long long)later, tg, tg > 0 ? (double)later / tg : 0.0);
}

static int run(const nl_engine_config *config, const cli_sampling *sp, prompt_src *prompts, int n_prompts,
               bool chat, bool thinking, const char *system)
{
    nl_engine *engine = NULL;
    int rc = cli_open_engine(config, &engine);
    if (rc != 0) return rc;
    cli_demo_note(engine);
    timing t = {.n = n_prompts, .stream = n_prompts == 1};
    t.ids = calloc((size_t)n_prompts, sizeof(uint64_t));
    t.first = calloc((size_t)n_prompts, sizeof(double));
    if (!t.ids || !t.first) {
        fprintf(stderr, "nanollm-launch generate: out of memory\n");
        rc = 1;
        goto out;
    }
    nl_engine_set_stream_callback(engine, on_stream, &t);
    for (int k = 0; k < n_prompts; k++) {
        nl_prompt p;
        memset(&p, 0, sizeof(p));
        nl_chat_message msgs[2] = {{"system", system}, {"user", prompts[k].text}};
        if (chat) {
            p.kind = NL_PROMPT_CHAT;
            p.messages = system ? msgs : msgs + 1;
            p.n_messages = system ? 2 : 1;
            p.enable_thinking = thinking;
        } else {
            p.kind = NL_PROMPT_TEXT;
            p.text = prompts[k].text;
        }
        if (nl_engine_submit(engine, &p, &sp->params, &t.ids[k]) != NL_OK) {
            char what[64];
            snprintf(what, sizeof(what), "prompt %d", k + 1);
            cli_report(what);
            rc = 2;
            goto out;
        }
    }
    double start = cli_now();
    if (nl_engine_run_until_done(engine) != NL_OK) {
        cli_report("generation failed");
        rc = 1;
        goto out;
    }
    double end = cli_now();
    int64_t prompt = 0, cached = 0, generated = 0;
    int n_started = 0;
    for (int k = 0; k < n_prompts; k++) {
        const nl_result *r;
        if (nl_engine_get_result(engine, t.ids[k], &r) != NL_OK) {
            cli_report("result");
            rc = 1;
            continue;
        }
        if (n_prompts > 1) {
            printf("=== [%d] %s\n", k + 1, prompts[k].label);
            if (r->text) fwrite(r->text, 1, r->text_len, stdout); /* the text may hold U+0000 */
            putchar('\n');
        }
        print_logprobs(engine, k, r);
        fprintf(stderr, "[%d] %d prompt tokens (%d cached), %d generated, finish: %s\n", k + 1,
                r->prompt_tokens, r->cached_tokens, r->n_tokens, finish_name(r->finish_reason));
        prompt += r->prompt_tokens;
        cached += r->cached_tokens;
        generated += r->n_tokens;
        n_started += r->n_tokens > 0;
    }
    fflush(stdout);
    print_timing(&t, start, end, prompt, cached, generated, n_started);
out:
    free(t.ids);
    free(t.first);
    nl_engine_close(engine);
    return rc;
}

int cli_generate(const nl_engine_config *config, int argc, char **argv)
{
    cli_sampling sp;
    cli_sampling_init(&sp);
    bool chat = false, thinking = true, used_stdin = false;
    const char *system = NULL;
    int n_prompts = 0, rc = 0;
    prompt_src *prompts = calloc((size_t)argc + 1, sizeof(prompt_src));
    cli_parser p;
    if (!prompts || !cli_parser_init(&p, &cli_generate_command, config, argc, argv)) {
        free(prompts);
        return 1;
    }
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE) {
        if (c == CLI_EXIT) goto parsed;
        int s = cli_sampling_option(&p, c, v, &sp);
        if (s == CLI_EXIT) goto parsed;
        if (s) continue;
        prompt_src *ps = &prompts[n_prompts];
        switch (c) {
        case OPT_CHAT: chat = true; break;
        case OPT_NO_THINKING: thinking = false; break;
        case OPT_SYSTEM: system = v; break;
        case OPT_PROMPT_FILE: {
            FILE *f = fopen(v, "r");
            if (!f) {
                fprintf(stderr, "nanollm-launch generate: cannot open prompt file %s: %m\n", v);
                p.exit = 2;
                goto parsed;
            }
            snprintf(ps->label_buf, sizeof ps->label_buf, "(file %s)", v);
            bool ok = read_prompt(f, ps->label_buf + 1, &ps->owned);
            fclose(f);
            if (!ok) {
                p.exit = 2;
                goto parsed;
            }
            ps->text = ps->owned;
            ps->label = ps->label_buf;
            n_prompts++;
            break;
        }
        case CLI_POSITIONAL:
            if (strcmp(v, "-") == 0) {
                if (used_stdin) {
                    cli_usage_error(&p, "PROMPT '-' (stdin) given twice");
                    goto parsed;
                }
                used_stdin = true;
                if (!read_prompt(stdin, "stdin", &ps->owned)) {
                    p.exit = 2;
                    goto parsed;
                }
                ps->text = ps->owned;
                ps->label = "(stdin)";
            } else {
                ps->text = ps->label = v;
            }
            n_prompts++;
            break;
        default:
            cli_usage_error(&p, "option %d has no handler", c);
            goto parsed;
        }
    }
    if (n_prompts == 0) cli_usage_error(&p, "no PROMPT given");
    else if (system && !chat) cli_usage_error(&p, "--system needs --chat");
    else if (!thinking && !chat) cli_usage_error(&p, "--no-thinking needs --chat");
    else p.exit = -1; /* parsed, nothing printed */
parsed:
    rc = p.exit >= 0 ? p.exit : run(&p.config, &sp, prompts, n_prompts, chat, thinking, system);
    for (int k = 0; k < n_prompts; k++) free(prompts[k].owned);
    free(prompts);
    cli_parser_free(&p);
    return rc;
}
