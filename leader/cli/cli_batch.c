/* cli_batch.c — `nanollm-launch batch --input IN.jsonl --output OUT.jsonl`.
 *
 * Every input line is one request: `prompt` (text), `prompt_token_ids` or
 * `messages` (chat, with optional `tools`, `add_generation_prompt` and
 * `chat_template_kwargs` as vLLM names them, rendered by the model's chat
 * template), and optionally `id`, `max_tokens`, `temperature`,
 * `top_k`, `top_p`, `min_p`, `seed`, `ignore_eos`, `stop` (a string or a
 * list) and `logprobs`.  Sampling options given on the command line are the
 * defaults for fields a line leaves out.  All lines are submitted at once and
 * the engine batches them; the output has one line per input line, in input
 * order.  A line that cannot be read or is refused (bad JSON, a field of the
 * wrong type, an unknown field, too long for the model) gets an output line
 * with "finish_reason": "error" and "error": the message — it never spoils
 * the other lines.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "leader/cli/cli.h"

typedef struct batch_line {
    json_t *id;         /* the line's "id", or its 0-based line number */
    uint64_t request;   /* 0 when refused                               */
    char *error;        /* why it was refused                           */
} batch_line;

typedef struct progress {
    int32_t total;
    int32_t finished;
    int64_t output_tokens;
    double start, last_draw;
    bool draw;
} progress;

static void draw_progress(progress *p, bool final)
{
    double now = cli_now();
    if (!p->draw || (!final && now - p->last_draw < 0.1)) return;
    p->last_draw = now;
    int width = 30;
    int filled = p->total ? (int)((int64_t)width * p->finished / p->total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double dt = now - p->start;
    fprintf(stderr, "\r[%s] %d/%d requests, %.0f tok/s ", bar, p->finished, p->total,
            dt > 0 ? (double)p->output_tokens / dt : 0.0);
    if (final) fputc('\n', stderr);
}

static void on_stream(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new,
                      const char *text_delta, bool finished)
{
    (void)id; (void)new_ids; (void)text_delta;
    progress *p = user;
    p->output_tokens += n_new;
    if (finished) p->finished++;
}

static char *line_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *line_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return strdup(buf);
}

static bool get_int(json_t *v, const char *key, int64_t lo, int64_t hi, int64_t *out, char **err)
{
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char range[96];
        snprintf(range, sizeof(range), "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        *err = line_error("field \"%s\": must be %s", key, range);
        return false;
    }
    *out = json_integer_value(v);
    return true;
}

static bool get_number(json_t *v, const char *key, double *out, char **err)
{
    if (!json_is_number(v)) {
        *err = line_error("field \"%s\": must be a number%s", key, "");
        return false;
    }
    *out = json_number_value(v);
    return true;
}

/* Parses one line and submits it; on refusal fills line->error. */
static void submit_line(nl_engine *engine, const cli_sampling *defaults, const char *text,
                        size_t len, int32_t index, batch_line *line)
{
    json_error_t jerr;
    json_t *obj = json_loadb(text, len, 0, &jerr);
    line->id = json_integer(index);
    if (!obj) {
        char pos[64];
        snprintf(pos, sizeof(pos), "column %d", jerr.column);
        line->error = line_error("bad JSON at %s: %s", pos, jerr.text);
        return;
    }
    if (!json_is_object(obj)) {
        line->error = line_error("the line is not a JSON object%s%s", "", "");
        json_decref(obj);
        return;
    }
    json_t *id = json_object_get(obj, "id");
    if (id) {
        json_decref(line->id);
        line->id = json_incref(id);
    }
    nl_sampling_params sp = defaults->params;
    const char *stops[CLI_MAX_STOP];
    sp.stop = stops;
    sp.n_stop = 0;
    for (int32_t k = 0; k < defaults->params.n_stop; k++) stops[sp.n_stop++] = defaults->stop[k];
    nl_prompt prompt;
    memset(&prompt, 0, sizeof(prompt));
    int n_prompt_fields = 0;
    int32_t *ids = NULL;
    json_t *chat = json_object(); /* the chat request: messages and the template's inputs */
    char *chat_text = NULL;
    char *err = chat ? NULL : line_error("out of memory%s%s", "", "");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        int64_t iv;
        double fv;
        if (strcmp(key, "id") == 0) continue;
        if (strcmp(key, "prompt") == 0) {
            if (!json_is_string(v)) { err = line_error("field \"%s\": must be a string%s", key, ""); break; }
            prompt.kind = NL_PROMPT_TEXT;
            prompt.text = json_string_value(v);
            n_prompt_fields++;
        } else if (strcmp(key, "prompt_token_ids") == 0) {
            if (!json_is_array(v)) { err = line_error("field \"%s\": must be an array of token ids%s", key, ""); break; }
            size_t n = json_array_size(v);
            ids = malloc(sizeof(int32_t) * (n ? n : 1));
            if (!ids) { err = line_error("out of memory%s%s", "", ""); break; }
            for (size_t k = 0; k < n && !err; k++) {
                json_t *t = json_array_get(v, k);
                if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
                    err = line_error("field \"%s\": element %zu is not a token id", key, k);
                else ids[k] = (int32_t)json_integer_value(t);
            }
            if (err) break;
            prompt.kind = NL_PROMPT_TOKENS;
            prompt.token_ids = ids;
            prompt.n_tokens = (int32_t)n;
            n_prompt_fields++;
        } else if (strcmp(key, "messages") == 0) {
            /* the message fields are the template's business; the shape is checked where it renders */
            if (!json_is_array(v) || json_array_size(v) == 0) {
                err = line_error("field \"%s\": must be a non-empty array of messages%s", key, "");
                break;
            }
            json_object_set(chat, key, v);
            prompt.kind = NL_PROMPT_CHAT;
            n_prompt_fields++;
        } else if (strcmp(key, "tools") == 0 || strcmp(key, "add_generation_prompt") == 0 ||
                   strcmp(key, "chat_template_kwargs") == 0) {
            json_object_set(chat, key, v);
        } else if (strcmp(key, "max_tokens") == 0) {
            if (!get_int(v, key, 1, INT32_MAX / 2, &iv, &err)) break;
            sp.max_tokens = (int32_t)iv;
        } else if (strcmp(key, "temperature") == 0) {
            if (!get_number(v, key, &fv, &err)) break;
            sp.temperature = (float)fv;
        } else if (strcmp(key, "top_k") == 0) {
            if (!get_int(v, key, -1, INT32_MAX, &iv, &err)) break;
            sp.top_k = (int32_t)iv;
        } else if (strcmp(key, "top_p") == 0) {
            if (!get_number(v, key, &fv, &err)) break;
            sp.top_p = (float)fv;
        } else if (strcmp(key, "min_p") == 0) {
            if (!get_number(v, key, &fv, &err)) break;
            sp.min_p = (float)fv;
        } else if (strcmp(key, "seed") == 0) {
            if (!get_int(v, key, 0, INT64_MAX, &iv, &err)) break;
            sp.seed = (uint64_t)iv;
            sp.has_seed = true;
        } else if (strcmp(key, "ignore_eos") == 0) {
            if (!json_is_boolean(v)) { err = line_error("field \"%s\": must be true or false%s", key, ""); break; }
            sp.ignore_eos = json_is_true(v);
        } else if (strcmp(key, "logprobs") == 0) {
            if (!get_int(v, key, 0, 20, &iv, &err)) break;
            sp.logprobs = (int32_t)iv;
        } else if (strcmp(key, "stop") == 0) {
            sp.n_stop = 0;
            if (json_is_string(v)) {
                stops[sp.n_stop++] = json_string_value(v);
            } else if (json_is_array(v) && json_array_size(v) <= CLI_MAX_STOP) {
                for (size_t k = 0; k < json_array_size(v) && !err; k++) {
                    json_t *s = json_array_get(v, k);
                    if (!json_is_string(s)) err = line_error("field \"%s\": must hold strings%s", key, "");
                    else stops[sp.n_stop++] = json_string_value(s);
                }
                if (err) break;
            } else {
                char lim[64];
                snprintf(lim, sizeof(lim), "a string or a list of at most %d strings", CLI_MAX_STOP);
                err = line_error("field \"%s\": must be %s", key, lim);
                break;
            }
        } else {
            err = line_error("unknown field \"%s\"%s", key, "");
            break;
        }
    }
    if (!err && n_prompt_fields != 1)
        err = line_error("needs exactly one of \"prompt\", \"prompt_token_ids\", \"messages\"%s%s", "", "");
    if (!err && prompt.kind != NL_PROMPT_CHAT && json_object_size(chat) > 0)
        err = line_error("fields \"tools\", \"add_generation_prompt\" and \"chat_template_kwargs\" need "
                         "\"messages\"%s%s", "", "");
    if (!err && prompt.kind == NL_PROMPT_CHAT) {
        chat_text = json_dumps(chat, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!chat_text) err = line_error("out of memory%s%s", "", "");
        prompt.chat_json = chat_text;
    }
    if (!err && nl_engine_submit(engine, &prompt, &sp, &line->request) != NL_OK)
        err = strdup(nl_last_error());
    line->error = err;
    free(ids);
    free(chat_text);
    json_decref(chat);
    json_decref(obj);
}

static const char *finish_name(nl_finish_reason r)
{
    switch (r) {
    case NL_FINISH_STOP: return "stop";
    case NL_FINISH_LENGTH: return "length";
    default: return "error";
    }
}

static json_t *result_json(const batch_line *line, const nl_result *r, bool has_tokenizer)
{
    json_t *o = json_object();
    json_object_set(o, "id", line->id);
    json_t *toks = json_array();
    for (int32_t k = 0; r && k < r->n_tokens; k++) json_array_append_new(toks, json_integer(r->token_ids[k]));
    json_object_set_new(o, "token_ids", toks);
    if (has_tokenizer && r) json_object_set_new(o, "text", json_string(r->text ? r->text : ""));
    json_object_set_new(o, "finish_reason", json_string(r ? finish_name(r->finish_reason) : "error"));
    json_object_set_new(o, "prompt_tokens", json_integer(r ? r->prompt_tokens : 0));
    json_object_set_new(o, "cached_tokens", json_integer(r ? r->cached_tokens : 0));
    if (r && r->logprobs) {
        json_t *lps = json_array();
        for (int32_t k = 0; k < r->n_tokens; k++) {
            const nl_token_logprob *lp = &r->logprobs[k];
            json_t *top = json_array();
            for (int32_t t = 0; t < lp->n_top; t++)
                json_array_append_new(top, json_pack("[if]", lp->top_ids[t], (double)lp->top_logprobs[t]));
            json_array_append_new(lps, json_pack("{s:i, s:f, s:o}", "token_id", lp->token_id,
                                                 "logprob", (double)lp->logprob, "top", top));
        }
        json_object_set_new(o, "logprobs", lps);
    }
    if (!r) json_object_set_new(o, "error", json_string(line->error));
    else if (r->finish_reason == NL_FINISH_ERROR || r->finish_reason == NL_FINISH_ABORT)
        json_object_set_new(o, "error", json_string(r->error ? r->error : "aborted"));
    return o;
}

enum { OPT_INPUT = CLI_OWN, OPT_OUTPUT };

static const struct option batch_options[] = {
    CLI_SAMPLING_OPTIONS,
    {"input", required_argument, NULL, OPT_INPUT},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {NULL, 0, NULL, 0},
};

const cli_command cli_batch_command = {
    .name = "batch",
    .options = batch_options,
    .help =
    "usage: nanollm-launch batch --input IN.jsonl --output OUT.jsonl [sampling options]\n"
    "\n"
    "Runs every line of IN.jsonl (a JSON object with prompt, prompt_token_ids or messages,\n"
    "and optionally id and sampling fields) and writes one output line per input line, in\n"
    "input order; a bad line gets finish_reason \"error\" and never spoils the others.\n"
    "'-' is stdin or stdout.  Sampling options are the defaults for fields a line leaves out.\n"
    "\n" CLI_SAMPLING_HELP,
};

int cli_batch(const nl_engine_config *config, int argc, char **argv)
{
    cli_sampling defaults;
    cli_sampling_init(&defaults);
    const char *in_path = NULL, *out_path = NULL;
    cli_parser p;
    if (!cli_parser_init(&p, &cli_batch_command, config, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        int s = cli_sampling_option(&p, c, v, &defaults);
        if (s == CLI_EXIT) break;
        if (s) continue;
        if (c == OPT_INPUT) in_path = v;
        else if (c == OPT_OUTPUT) out_path = v;
        else if (c == CLI_POSITIONAL) cli_usage_error(&p, "unexpected argument '%s'", v);
        else cli_usage_error(&p, "option %d has no handler", c);
        if (p.exit) break;
    }
    if (c == CLI_DONE && (!in_path || !out_path))
        cli_usage_error(&p, "--input IN.jsonl and --output OUT.jsonl are required");
    nl_engine_config engine_config = p.config;
    cli_parser_free(&p);
    if (c != CLI_DONE || p.exit) return p.exit;
    config = &engine_config;
    FILE *in = strcmp(in_path, "-") == 0 ? stdin : fopen(in_path, "r");
    if (!in) {
        fprintf(stderr, "nanollm-launch: batch: cannot open input %s: %m\n", in_path);
        return 2;
    }
    FILE *out = strcmp(out_path, "-") == 0 ? stdout : fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "nanollm-launch: batch: cannot create output %s: %m\n", out_path);
        if (in != stdin) fclose(in);
        return 2;
    }

    nl_engine *engine = NULL;
    int open_rc = cli_open_engine(config, &engine);
    if (open_rc != 0) {
        if (in != stdin) fclose(in);
        if (out != stdout) fclose(out);
        return open_rc;
    }
    cli_demo_note(engine);
    nl_engine_info info;
    nl_engine_get_info(engine, &info);

    int rc = 0;
    batch_line *lines = NULL;
    int32_t n_lines = 0, cap = 0, n_rejected = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    ssize_t len;
    double t0 = cli_now();
    while ((len = getline(&buf, &buf_cap, in)) >= 0) {
        if (len > 0 && buf[len - 1] == '\n') buf[--len] = '\0';
        if (len > 0 && buf[len - 1] == '\r') buf[--len] = '\0';
        if (n_lines == cap) {
            cap = cap ? 2 * cap : 256;
            batch_line *p = realloc(lines, sizeof(*lines) * (size_t)cap);
            if (!p) {
                fprintf(stderr, "nanollm-launch: batch: out of memory at line %d\n", n_lines + 1);
                rc = 1;
                goto done;
            }
            lines = p;
        }
        batch_line *line = &lines[n_lines];
        memset(line, 0, sizeof(*line));
        submit_line(engine, &defaults, buf, (size_t)len, n_lines, line);
        if (line->error) n_rejected++;
        n_lines++;
    }
    if (ferror(in)) {
        fprintf(stderr, "nanollm-launch: batch: reading %s failed: %m\n", in_path);
        rc = 2;
        goto done;
    }

    progress prog = {.total = n_lines - n_rejected, .start = t0, .draw = isatty(STDERR_FILENO)};
    nl_engine_set_stream_callback(engine, on_stream, &prog);
    while (nl_engine_has_unfinished(engine)) {
        if (nl_engine_step(engine) != NL_OK) {
            fprintf(stderr, "\n");
            cli_report("batch");
            rc = 1;
            break;
        }
        draw_progress(&prog, false);
    }
    draw_progress(&prog, true);
    double seconds = cli_now() - t0;

    int64_t prompt_tokens = 0, cached = 0, output = 0;
    for (int32_t k = 0; k < n_lines; k++) {
        const nl_result *r = NULL;
        if (!lines[k].error && nl_engine_get_result(engine, lines[k].request, &r) != NL_OK) r = NULL;
        if (!lines[k].error && !r) lines[k].error = strdup(nl_last_error());
        json_t *o = result_json(&lines[k], r, info.has_tokenizer);
        if (r) {
            prompt_tokens += r->prompt_tokens;
            cached += r->cached_tokens;
            output += r->n_tokens;
        }
        char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
        json_decref(o);
        if (!s || fprintf(out, "%s\n", s) < 0) {
            fprintf(stderr, "nanollm-launch: batch: writing %s failed: %m\n", out_path);
            free(s);
            rc = 2;
            goto done;
        }
        free(s);
        if (r) nl_engine_release(engine, lines[k].request);
    }
    fprintf(stderr,
            "batch: %d requests (%d rejected), %lld prompt tokens (%lld cached), %lld output tokens, "
            "%.2f s, %.1f output tok/s\n",
            n_lines, n_rejected, (long long)prompt_tokens, (long long)cached, (long long)output, seconds,
            seconds > 0 ? (double)output / seconds : 0.0);
done:
    for (int32_t k = 0; k < n_lines; k++) {
        json_decref(lines[k].id);
        free(lines[k].error);
    }
    free(lines);
    free(buf);
    nl_engine_close(engine);
    if (in != stdin) fclose(in);
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "nanollm-launch: batch: writing %s failed: %m\n", out_path);
        rc = 2;
    }
    return rc;
}
