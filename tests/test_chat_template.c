/* test_chat_template.c — the chat template API and the Jinja interpreter's
 * contract beyond jinja2 parity (which test_chat_parity holds): the Qwen
 * families' rules with expected texts written out by hand from the
 * templates; any template renders (no family recognition) and the tool role
 * works; errors name the template line and the construct; hostile templates
 * end with an error naming the limit, quickly; loading from a model
 * directory; and the `chat-template` command's output and exit codes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/status.h"
#include "leader/tokenizer/chat_template.h"
#include "tests/check_run.h"

static char qwen3_dir[4096], qwen2_5_dir[4096];

/* Qwen2-Instruct's template: plain ChatML with a default system prompt. */
static const char qwen2_src[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static chat_template *load(const char *dir)
{
    chat_template *t = NULL;
    nl_status st = chat_template_load(dir, &t);
    ck_assert_msg(st == NL_OK && t, "%s: %s (run tools/fetch-tokenizer.sh and tools/fetch-chat-templates.sh)", dir,
                  st == NL_OK ? "no template" : nl_last_error());
    return t;
}

static chat_template *create(const char *src)
{
    chat_template *t = NULL;
    nl_status st = chat_template_create(src, "<s>", "</s>", &t);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
    return t;
}

static char *render(const chat_template *t, const nl_chat_message *m, size_t n, bool gen, bool think)
{
    char *out = NULL;
    nl_status st = chat_template_render(t, m, n, gen, think, &out);
    ck_assert_msg(st == NL_OK, "%s", nl_last_error());
    return out;
}

#define ASSERT_RENDERS(t, msgs, gen, think, want)                                          \
    do {                                                                                   \
        char *got_ = render(t, msgs, sizeof msgs / sizeof msgs[0], gen, think);            \
        ck_assert_str_eq(got_, want);                                                      \
        free(got_);                                                                        \
    } while (0)

/* Renders a request given as JSON text; returns the status, *out the text. */
static nl_status render_json(const chat_template *t, const char *json, char **out, bool *raised)
{
    json_error_t jerr;
    json_t *req = json_loads(json, 0, &jerr);
    ck_assert_msg(req != NULL, "test request: %s", jerr.text);
    size_t len;
    nl_status st = chat_template_render_request(t, req, out, &len, raised);
    json_decref(req);
    return st;
}

START_TEST(test_qwen3_reasoning_rules)
{
    chat_template *t = load(qwen3_dir);
    nl_chat_message history[] = {
        {"user", "q1"},
        {"assistant", "<think>\nr1\n</think>\n\na1"},
        {"user", "q2"},
    };
    ASSERT_RENDERS(t, history, true, false,
                   "<|im_start|>user\nq1<|im_end|>\n"
                   "<|im_start|>assistant\na1<|im_end|>\n" /* before the last query: reasoning dropped */
                   "<|im_start|>user\nq2<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    nl_chat_message tail[] = {
        {"system", "s"},
        {"user", "q"},
        {"assistant", "plain"},                        /* after the query, not last, no reasoning */
        {"assistant", "x<think>\n\nr\n</think>\n\n\nA"}, /* last: reasoning kept, re-wrapped */
    };
    ASSERT_RENDERS(t, tail, false, true,
                   "<|im_start|>system\ns<|im_end|>\n"
                   "<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\nplain<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nr\n</think>\n\nA<|im_end|>\n");
    nl_chat_message tool_result[] = {
        {"user", "q"},
        {"assistant", "<think>t</think>calling"},
        {"user", "<tool_response>\nok\n</tool_response>"},
    };
    /* A wrapped tool result is no query, so the assistant turn keeps its reasoning. */
    ASSERT_RENDERS(t, tool_result, true, true,
                   "<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>assistant\n<think>\nt\n</think>\n\ncalling<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n");
    /* The tool role, once refused: consecutive results share one user turn. */
    nl_chat_message tools[] = {{"user", "q"}, {"tool", "1"}, {"tool", "2"}};
    ASSERT_RENDERS(t, tools, false, true,
                   "<|im_start|>user\nq<|im_end|>\n"
                   "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>"
                   "<|im_end|>\n");
    chat_template_destroy(t);
}
END_TEST

START_TEST(test_chatml_families)
{
    chat_template *q25 = load(qwen2_5_dir), *q2 = create(qwen2_src);
    nl_chat_message no_system[] = {{"user", "hi"}, {"assistant", "hello"}, {"user", "bye"}};
    ASSERT_RENDERS(q25, no_system, true, false,
                   "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                   "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n");
    nl_chat_message with_system[] = {{"system", "S"}, {"user", "hi"}};
    ASSERT_RENDERS(q2, with_system, false, true,
                   "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    ASSERT_RENDERS(q2, no_system, false, true,
                   "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                   "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
                   "<|im_start|>user\nbye<|im_end|>\n");
    chat_template_destroy(q25);
    chat_template_destroy(q2);
}
END_TEST

/* Templates are rendered, not recognised: anything jinja2 would run runs. */
START_TEST(test_any_template)
{
    chat_template *t = create("{{ bos_token }}{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n"
                              "{% endfor %}{% if add_generation_prompt %}[ASSISTANT]{% endif %}{{ eos_token }}");
    nl_chat_message m[] = {{"developer", "x"}, {"tool", "42"}};
    ASSERT_RENDERS(t, m, true, true, "<s>[DEVELOPER] x\n[TOOL] 42\n[ASSISTANT]</s>");
    chat_template_destroy(t);
    t = create("{{ enable_thinking }}|{{ tools }}|{{ documents }}|{{ messages[0].extra }}|{{ kw }}");
    char *out;
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"user\", \"extra\": [1, \"é\"]}], "
                                    "\"chat_template_kwargs\": {\"kw\": {\"a\": null}}}", &out, NULL), NL_OK);
    ck_assert_str_eq(out, "|None|None|[1, 'é']|{'a': None}");
    free(out);
    chat_template_destroy(t);
}
END_TEST

START_TEST(test_errors_name_line_and_construct)
{
    chat_template *t = NULL;
    ck_assert_int_eq(chat_template_create("ok\n{% if x %}\n{% for %}", NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "line 3"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "variable name"));
    ck_assert_int_eq(chat_template_create("{% if x %}\nno end", NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "endif"));
    ck_assert_int_eq(chat_template_create("{% include 'x' %}", NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "'include' statement is not supported"));
    ck_assert_int_eq(chat_template_create("{{ 'open }}", NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "unterminated string"));

    t = create("a\nb\n{{ messages | bogus }}");
    char *out;
    bool raised = true;
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"user\"}]}", &out, &raised), NL_ERR_INVALID_ARG);
    ck_assert(!raised);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "line 3"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "no filter named 'bogus'"));
    chat_template_destroy(t);

    t = create("\n{{ messages[0].content.missing.deeper }}");
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"c\"}]}", &out, NULL),
                     NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "line 2"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "'str object' has no attribute 'missing'"));
    chat_template_destroy(t);

    t = create("{% if messages | length > 1 %}{{ raise_exception('Only one message, got ' ~ messages | length) }}"
               "{% endif %}fine");
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"a\"}, {\"role\": \"b\"}]}", &out, &raised),
                     NL_ERR_INVALID_ARG);
    ck_assert(raised);
    ck_assert_str_eq(nl_last_error(), "Only one message, got 2");
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"a\"}]}", &out, &raised), NL_OK);
    ck_assert(!raised);
    ck_assert_str_eq(out, "fine");
    free(out);

    /* the request's shape */
    static const char *const bad[][2] = {
        {"[]", "not a JSON object"},
        {"{}", "\"messages\" must be a non-empty array"},
        {"{\"messages\": [\"x\"]}", "message 0 is not an object"},
        {"{\"messages\": [{\"content\": \"x\"}]}", "message 0 has no string \"role\""},
        {"{\"messages\": [{\"role\": \"u\"}], \"tools\": {}}", "\"tools\" must be an array"},
        {"{\"messages\": [{\"role\": \"u\"}], \"add_generation_prompt\": 1}", "must be true or false"},
        {"{\"messages\": [{\"role\": \"u\"}], \"chat_template_kwargs\": []}", "must be an object"},
        {"{\"messages\": [{\"role\": \"u\"}], \"temperature\": 1}", "unknown field \"temperature\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(render_json(t, bad[i][0], &out, NULL), NL_ERR_INVALID_ARG);
        ck_assert_msg(strstr(nl_last_error(), bad[i][1]), "%s: %s", bad[i][0], nl_last_error());
    }
    nl_chat_message none[] = {{"user", NULL}};
    ck_assert_int_eq(chat_template_render(t, none, 1, true, true, &out), NL_ERR_INVALID_ARG);
    ck_assert_int_eq(chat_template_render(t, none, 0, true, true, &out), NL_ERR_INVALID_ARG);
    chat_template_destroy(t);
}
END_TEST

/* 200000 iterations of 100 additions: past the step limit, within memory. */
#define PLUS10 "1+1+1+1+1+1+1+1+1+1+"
#define STEPS_TEMPLATE \
    "{% for i in range(200000) %}{{ " PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 PLUS10 \
    "1 }}{% endfor %}"

/* Hostile templates: each ends quickly with an error that names the limit. */
START_TEST(test_limits)
{
    static const char *const cases[][2] = {
        {"{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", "memory limit"},
        {STEPS_TEMPLATE, "steps"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested deeper than 64"},
        {"{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", "64 MiB"},
        {"{% set ns = namespace(s='xy') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
         "64 MiB"},
        {"{{ range(100000000) | length }}", "range() of more than"},
        {"{{ 'x' * 100000000000 }}", "limit"},
        {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
        {"{{ '%d' % 3.5e26 }}", "64-bit"},
        {"{{ '%x' % (1e308 * 10) }}", "64-bit"},
        {"{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
         "memory limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        chat_template *t = create(cases[i][0]);
        char *out;
        time_t start = time(NULL);
        nl_status st = render_json(t, "{\"messages\": [{\"role\": \"u\"}]}", &out, NULL);
        ck_assert_msg(st == NL_ERR_INVALID_ARG, "case %zu rendered", i);
        ck_assert_msg(strstr(nl_last_error(), cases[i][1]), "case %zu: %s", i, nl_last_error());
        ck_assert_int_le(time(NULL) - start, 20);
        chat_template_destroy(t);
    }
    /* Leading zeros of a width or precision count for nothing, however many
     * (Python: '%.0000000000000000000000000000000002f' % 3.14159 is '3.14');
     * they once ran past the conversion spec's buffer. */
    {
        chat_template *z = create("{{ '%.0000000000000000000000000000000002f|%7.00000000000000000000000000003f|%.0f'"
                                  " % (3.14159, 2.5, 2.5) }}");
        char *out;
        ck_assert_int_eq(render_json(z, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &out, NULL), NL_OK);
        ck_assert_str_eq(out, "3.14|  2.500|2");
        free(out);
        chat_template_destroy(z);
    }
    /* Nesting is bounded while parsing, before anything can recurse deeply. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 16);
    strcpy(deep, "{{ ");
    memset(deep + 3, '(', depth);
    strcpy(deep + 3 + depth, "1");
    memset(deep + 4 + depth, ')', depth);
    strcpy(deep + 4 + 2 * depth, " }}");
    chat_template *t = NULL;
    ck_assert_int_eq(chat_template_create(deep, NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "nesting deeper"));
    free(deep);
    size_t n = 5000;
    char *ifs = malloc(n * 24 + 1), *p = ifs;
    for (size_t i = 0; i < n; i++) p += sprintf(p, "{%% if true %%}");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "{%% endif %%}");
    ck_assert_int_eq(chat_template_create(ifs, NULL, NULL, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "nesting deeper"));
    free(ifs);
}
END_TEST

/* Renders src against one user message, in at most 2 seconds. */
static nl_status render_quickly(const char *src, char **out)
{
    chat_template *t = create(src);
    time_t start = time(NULL);
    nl_status st = render_json(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", out, NULL);
    ck_assert_int_le(time(NULL) - start, 2);
    chat_template_destroy(t);
    return st;
}

/* Powers as Python computes them: integers in log2(exponent) steps (a base
 * of 0, 1 or -1 with a huge exponent once ran y multiplications), and an
 * error where Python raises instead of C's inf or nan. */
START_TEST(test_integer_power)
{
    static const char *const cases[][2] = {
        {"{{ 0 ** 100000000000 }}", "0"},
        {"{{ (-1) ** 100000000001 }}", "-1"},
        {"{{ 1 ** 9223372036854775807 }}", "1"},
        {"{{ 2 ** 62 }}", "4611686018427387904"},
        {"{{ (-2) ** 63 }}", "-9223372036854775808"},
        {"{{ 3 ** 39 }}", "4052555153018976267"},
        {"{{ 7 ** 0 }}", "1"},
        {"{{ 2 ** 63 }}", NULL},
        {"{{ 3 ** 40 }}", NULL},
        {"{{ 2 ** -1 }}", "0.5"},
        {"{{ (-2.0) ** 3 }}", "-8.0"},
        /* where Python raises, an error naming the case */
        {"{{ 1.5 ** 100000 }}", NULL},
        {"{{ 0 ** -1 }}", NULL},
        {"{{ 0.0 ** -1.5 }}", NULL},
        {"{{ (-8) ** 0.5 }}", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        nl_status st = render_quickly(cases[i][0], &out);
        if (cases[i][1]) {
            ck_assert_msg(st == NL_OK, "%s: %s", cases[i][0], nl_last_error());
            ck_assert_str_eq(out, cases[i][1]);
        } else {
            ck_assert_msg(st == NL_ERR_INVALID_ARG, "%s rendered %s", cases[i][0], out ? out : "");
            const char *msg = nl_last_error();
            ck_assert_msg(strstr(msg, "overflow") || strstr(msg, "negative power") || strstr(msg, "complex"),
                          "%s: %s", cases[i][0], msg);
        }
        free(out);
    }
}
END_TEST

/* An empty string or list repeated any number of times is empty, at once
 * (as in Python); a huge count once ran that many empty iterations. */
START_TEST(test_empty_repetition)
{
    static const char *const cases[][2] = {
        {"{{ '' * 100000000000 }}|", "|"},
        {"{{ ([] * 9223372036854775807) | length }}", "0"},
        {"{{ 4744500044 * '' ~ 'x' }}", "x"},
        {"{{ ('ab' * 0) ~ ('ab' * -5) ~ ('ab' * 2) }}", "abab"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        ck_assert_msg(render_quickly(cases[i][0], &out) == NL_OK, "%s: %s", cases[i][0], nl_last_error());
        ck_assert_str_eq(out, cases[i][1]);
        free(out);
    }
}
END_TEST

/* Loading: the config's string, a named list's "default", else
 * chat_template.jinja; special tokens as strings or {"content"} objects. */
START_TEST(test_load_from_directory)
{
    char dir[] = "/tmp/nl-chat-XXXXXX", path[4200];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    chat_template *t = NULL;
    ck_assert_int_eq(chat_template_load(dir, &t), NL_OK);
    ck_assert_ptr_null(t); /* no template at all */

    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w");
    fputs("{{ bos_token }}jinja file{{ eos_token }}\n", f); /* the trailing newline is dropped, as in jinja2 */
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    f = fopen(path, "w");
    fputs("{\"bos_token\": {\"content\": \"<B>\"}, \"eos_token\": \"<E>\", \"model_max_length\": "
          "1000000000000000019884624838656}", f);
    fclose(f);
    t = load(dir);
    char *out;
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"u\"}]}", &out, NULL), NL_OK);
    ck_assert_str_eq(out, "<B>jinja file<E>");
    free(out);
    chat_template_destroy(t);

    f = fopen(path, "w");
    fputs("{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"tools\"}, "
          "{\"name\": \"default\", \"template\": \"named {{ messages | length }}\"}]}", f);
    fclose(f);
    t = load(dir);
    ck_assert_int_eq(render_json(t, "{\"messages\": [{\"role\": \"u\"}]}", &out, NULL), NL_OK);
    ck_assert_str_eq(out, "named 1");
    free(out);
    chat_template_destroy(t);

    f = fopen(path, "w");
    fputs("{\"chat_template\": \"line one\\n{% if %}\"}", f);
    fclose(f);
    ck_assert_int_eq(chat_template_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "tokenizer_config.json"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "line 2"));
    unlink(path);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Runs nanollm-launch with stdin text; returns the exit code and the outputs. */
static int run_launch(const char *const *args, const char *input, char *out, size_t out_cap, char *err,
                      size_t err_cap)
{
    const char *launch = getenv("NANOLLM_LAUNCH") ? getenv("NANOLLM_LAUNCH") : "./nanollm-launch";
    char in_path[] = "/tmp/nl-ct-in-XXXXXX", out_path[] = "/tmp/nl-ct-out-XXXXXX", err_path[] = "/tmp/nl-ct-err-XXXXXX";
    int fi = mkstemp(in_path), fo = mkstemp(out_path), fe = mkstemp(err_path);
    ck_assert(write(fi, input, strlen(input)) == (ssize_t)strlen(input));
    close(fi);
    pid_t pid = fork();
    if (pid == 0) {
        freopen(in_path, "r", stdin);
        dup2(fo, 1);
        dup2(fe, 2);
        const char *argv[16] = {launch};
        size_t k = 1;
        for (; args[k - 1]; k++) argv[k] = args[k - 1];
        argv[k] = NULL;
        execv(launch, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    ssize_t n = pread(fo, out, out_cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    n = pread(fe, err, err_cap - 1, 0);
    err[n > 0 ? n : 0] = '\0';
    close(fo);
    close(fe);
    unlink(in_path);
    unlink(out_path);
    unlink(err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(test_command)
{
    char dir[] = "/tmp/nl-chat-cmd-XXXXXX", path[4200], link[4200], out[8192], err[8192];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    FILE *f = fopen(path, "w");
    fputs("{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('Role bad is not allowed') }}"
          "{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<gen>{% endif %}", f);
    fclose(f);
    snprintf(link, sizeof link, "%s/tokenizer.json", dir); /* a model directory has its tokenizer */
    snprintf(path, sizeof path, "%s/tokenizer.json", qwen3_dir);
    ck_assert_int_eq(symlink(path, link), 0);
    const char *args[] = {"--model", dir, "chat-template", NULL};
    int rc = run_launch(args, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\\nthere\"}]}", out, sizeof out,
                        err, sizeof err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_str_eq(out, "<user>hi\nthere<gen>"); /* exactly, no newline added */
    rc = run_launch(args, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": false}",
                    out, sizeof out, err, sizeof err);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(out, "<user>x");
    rc = run_launch(args, "{\"messages\": [{\"role\": \"bad\", \"content\": \"x\"}]}", out, sizeof out, err, sizeof err);
    ck_assert_int_eq(rc, 2);
    ck_assert_str_eq(out, "");
    ck_assert_str_eq(err, "nanollm-launch chat-template: Role bad is not allowed\n");
    rc = run_launch(args, "{\"messages\": ", out, sizeof out, err, sizeof err);
    ck_assert_int_eq(rc, 2);
    ck_assert_ptr_nonnull(strstr(err, "bad JSON"));
    const char *extra[] = {"--model", dir, "chat-template", "x.json", NULL};
    ck_assert_int_eq(run_launch(extra, "{}", out, sizeof out, err, sizeof err), 2);
    ck_assert_ptr_nonnull(strstr(err, "unexpected argument 'x.json'"));
    unlink(link);
    ck_assert_int_eq(run_launch(args, "{}", out, sizeof out, err, sizeof err), 2); /* no tokenizer.json */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    rmdir(dir);
    /* Without --model: the demo model's tokenizer, Qwen3's template. */
    const char *demo[] = {"chat-template", NULL};
    rc = run_launch(demo, "{\"messages\": [{\"role\": \"tool\", \"content\": \"42\"}], "
                          "\"chat_template_kwargs\": {\"enable_thinking\": false}}", out, sizeof out, err, sizeof err);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    ck_assert_str_eq(out, "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}
END_TEST

int main(void)
{
    const char *home = getenv("HOME") ? getenv("HOME") : ".";
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (env && env[0]) snprintf(qwen3_dir, sizeof qwen3_dir, "%s", env);
    else if (xdg && xdg[0]) snprintf(qwen3_dir, sizeof qwen3_dir, "%s/nanollm/tokenizer-qwen3", xdg);
    else snprintf(qwen3_dir, sizeof qwen3_dir, "%s/.cache/nanollm/tokenizer-qwen3", home);
    env = getenv("NANOLLM_CHAT_TEMPLATES_DIR");
    if (env && env[0]) snprintf(qwen2_5_dir, sizeof qwen2_5_dir, "%s/qwen2_5", env);
    else if (xdg && xdg[0]) snprintf(qwen2_5_dir, sizeof qwen2_5_dir, "%s/nanollm/chat-templates/qwen2_5", xdg);
    else snprintf(qwen2_5_dir, sizeof qwen2_5_dir, "%s/.cache/nanollm/chat-templates/qwen2_5", home);

    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_qwen3_reasoning_rules);
    tcase_add_test(tc, test_chatml_families);
    tcase_add_test(tc, test_any_template);
    tcase_add_test(tc, test_errors_name_line_and_construct);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_integer_power);
    tcase_add_test(tc, test_empty_repetition);
    tcase_add_test(tc, test_load_from_directory);
    tcase_add_test(tc, test_command);
    suite_add_tcase(s, tc);
    return check_run(s);
}
