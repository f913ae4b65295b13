/* test_chat_parity.c — real model chat templates rendered by the C Jinja
 * interpreter, byte for byte against Python's jinja2 configured as
 * transformers configures it.  One python process
 * (tests/golden/chat_template_reference.py) renders every reference: fixed
 * conversations (system/user/assistant/tool turns, tools, reasoning,
 * generation prompt and thinking on and off) and seeded random ones, for
 * Qwen3, Qwen2.5, Llama 3.1, DeepSeek-V3, Gemma 3 (fetched by
 * tools/fetch-tokenizer.sh and tools/fetch-chat-templates.sh) and Llama 3.2
 * and Mistral Nemo (tests/fixtures/chat_templates); and before them about a
 * hundred snippets that each exercise one construct (whitespace control,
 * loops, scoping, macros, operators, filters, tests, methods, tojson,
 * Undefined, errors).  Where jinja2 refuses a
 * conversation the C renderer must refuse it too, with the template's own
 * message when the template raised it.
 *
 * Environment: NL_PYTHON (default python3), NL_CHAT_FUZZ (random
 * conversations per template, default 60), NL_CHAT_SEED. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/tokenizer/chat_template.h"
#include "tests/check_run.h"

#define RENDER_TIME "1735732800" /* 2025-01-01 12:00 UTC, for strftime_now */

enum { SNIPPETS = 12 }; /* the row counters' slot for the language snippets */
static char templates[SNIPPETS][2][4096];
static size_t n_templates;
static char script[4096];

static void add_template(const char *name, const char *dir)
{
    snprintf(templates[n_templates][0], sizeof templates[0][0], "%s", name);
    snprintf(templates[n_templates][1], sizeof templates[0][1], "%s", dir);
    n_templates++;
}

static void find_templates(void)
{
    const char *home = getenv("HOME") ? getenv("HOME") : ".";
    const char *xdg = getenv("XDG_CACHE_HOME");
    char cache[4096], dir[4096 + 64];
    if (xdg && xdg[0]) snprintf(cache, sizeof cache, "%s/nanollm", xdg);
    else snprintf(cache, sizeof cache, "%s/.cache/nanollm", home);
    const char *tok = getenv("NANOLLM_TOKENIZER_DIR");
    if (tok && tok[0]) snprintf(dir, sizeof dir, "%s", tok);
    else snprintf(dir, sizeof dir, "%s/tokenizer-qwen3", cache);
    add_template("qwen3", dir);
    const char *env = getenv("NANOLLM_CHAT_TEMPLATES_DIR");
    static const char *const fetched[] = {"qwen2_5", "llama3_1", "deepseek_v3", "gemma3"};
    for (size_t i = 0; i < 4; i++) {
        if (env && env[0]) snprintf(dir, sizeof dir, "%s/%s", env, fetched[i]);
        else snprintf(dir, sizeof dir, "%s/chat-templates/%s", cache, fetched[i]);
        add_template(fetched[i], dir);
    }
    const char *fixtures = getenv("NL_FIXTURES") ? getenv("NL_FIXTURES") : "tests/fixtures";
    snprintf(dir, sizeof dir, "%s/chat_templates/llama3_2", fixtures);
    add_template("llama3_2", dir);
    snprintf(dir, sizeof dir, "%s/chat_templates/mistral_nemo", fixtures);
    add_template("mistral_nemo", dir);
    snprintf(dir, sizeof dir, "%s/chat_templates/deepseek_v3_1", fixtures);
    add_template("deepseek_v3_1", dir);
    snprintf(script, sizeof script, "%s/../golden/chat_template_reference.py", fixtures);
}

/* Where two texts first differ, with some context of each, on stderr. */
static void show_difference(const char *case_name, const char *got, size_t n_got, const char *want, size_t n_want)
{
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "%s: differs at byte %zu (lengths %zu, jinja2 %zu)\n  got:    ", case_name, i, n_got, n_want);
    json_t *g = json_stringn_nocheck(got + from, (n_got > i + 60 ? i + 60 : n_got) - from);
    json_t *w = json_stringn_nocheck(want + from, (n_want > i + 60 ? i + 60 : n_want) - from);
    json_dumpf(g, stderr, JSON_ENCODE_ANY);
    fprintf(stderr, "\n  jinja2: ");
    json_dumpf(w, stderr, JSON_ENCODE_ANY);
    fprintf(stderr, "\n");
    json_decref(g);
    json_decref(w);
}

START_TEST(test_templates_match_jinja2)
{
    setenv("NANOLLM_CHAT_TIME", RENDER_TIME, 1);
    const char *python = getenv("NL_PYTHON") ? getenv("NL_PYTHON") : "python3";
    const char *fuzz = getenv("NL_CHAT_FUZZ") ? getenv("NL_CHAT_FUZZ") : "60";
    const char *seed = getenv("NL_CHAT_SEED") ? getenv("NL_CHAT_SEED") : "20241201";
    char cmd[65536];
    int k = snprintf(cmd, sizeof cmd, "'%s' '%s' --time %s --fuzz %s --seed %s", python, script, RENDER_TIME, fuzz,
                     seed);
    for (size_t i = 0; i < n_templates; i++) {
        chat_template *probe = NULL;
        nl_status st = chat_template_load(templates[i][1], &probe);
        ck_assert_msg(st == NL_OK && probe, "%s: %s (run tools/fetch-tokenizer.sh and tools/fetch-chat-templates.sh)",
                      templates[i][1], st == NL_OK ? "no chat template" : nl_last_error());
        chat_template_destroy(probe);
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " '%s=%s'", templates[i][0], templates[i][1]);
    }
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);

    size_t rendered[SNIPPETS + 1] = {0}, refused[SNIPPETS + 1] = {0}, mismatches = 0, total = 0;
    chat_template *loaded[8] = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, p)) > 0) {
        json_error_t jerr;
        json_t *row = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &jerr);
        ck_assert_msg(row, "reference line %zu: %s", total, jerr.text);
        const char *name = json_string_value(json_object_get(row, "template"));
        const char *case_name = json_string_value(json_object_get(row, "case"));
        const json_t *source = json_object_get(row, "source");
        size_t t = source ? SNIPPETS : 0;
        while (!source && t < n_templates && strcmp(templates[t][0], name)) t++;
        ck_assert_uint_lt(t, SNIPPETS + 1);
        char label[512];
        snprintf(label, sizeof label, "%s %s", name, case_name);

        char *text = NULL;
        size_t n_text = 0;
        bool raised = false;
        chat_template *snippet = NULL;
        nl_status st;
        if (source) {
            st = chat_template_create(json_string_value(source), NULL, NULL, &snippet);
            if (st == NL_OK)
                st = chat_template_render_request(snippet, json_object_get(row, "request"), &text, &n_text, &raised);
            chat_template_destroy(snippet);
        } else {
            if (!loaded[t]) ck_assert_int_eq(chat_template_load(templates[t][1], &loaded[t]), NL_OK);
            st = chat_template_render_request(loaded[t], json_object_get(row, "request"), &text, &n_text, &raised);
        }
        const json_t *want = json_object_get(row, "text");
        bool ok;
        if (want) {
            ok = st == NL_OK && n_text == json_string_length(want) &&
                 memcmp(text, json_string_value(want), n_text) == 0;
            if (!ok && st != NL_OK) fprintf(stderr, "%s: failed: %s\n", label, nl_last_error());
            else if (!ok) show_difference(label, text, n_text, json_string_value(want), json_string_length(want));
            rendered[t] += ok;
        } else {
            const char *err = json_string_value(json_object_get(row, "error"));
            bool want_raised = json_is_true(json_object_get(row, "raised"));
            ok = st != NL_OK && raised == want_raised && (!want_raised || strcmp(nl_last_error(), err) == 0);
            if (!ok)
                fprintf(stderr, "%s: jinja2 refused (%s%s) but here: %s\n", label, want_raised ? "raised: " : "",
                        err, st == NL_OK ? "rendered" : nl_last_error());
            refused[t] += ok;
        }
        mismatches += !ok;
        total++;
        free(text);
        json_decref(row);
    }
    free(line);
    int rc = pclose(p);
    ck_assert_msg(rc == 0, "the reference renderer failed (%s; python3-jinja2 installed?)", cmd);
    fprintf(stderr, "chat parity %-13s %3zu rendered identically, %3zu refused by both\n", "snippets",
            rendered[SNIPPETS], refused[SNIPPETS]);
    ck_assert_uint_ge(rendered[SNIPPETS], 80);
    for (size_t i = 0; i < n_templates; i++) {
        fprintf(stderr, "chat parity %-13s %3zu rendered identically, %3zu refused by both\n", templates[i][0],
                rendered[i], refused[i]);
        chat_template_destroy(loaded[i]);
        ck_assert_msg(rendered[i] >= 30, "%s: only %zu conversations rendered", templates[i][0], rendered[i]);
    }
    ck_assert_msg(mismatches == 0, "%zu of %zu cases differ from jinja2", mismatches, total);
}
END_TEST

int main(void)
{
    find_templates();
    Suite *s = suite_create("chat_parity");
    TCase *tc = tcase_create("jinja2");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_templates_match_jinja2);
    suite_add_tcase(s, tc);
    return check_run(s);
}
