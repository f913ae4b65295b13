/* test_tokenizer.c — the Qwen3 tokenizer against Hugging Face: encode ids,
 * decode text and streaming detokenization must equal the golden files made
 * by tests/golden/make_tokenizer_golden.py; small hand-built tokenizers pin
 * the BPE merge order and added-token options; bad input fails with messages
 * that name the problem. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/limits.h"
#include "common/status.h"
#include "leader/cli/cli.h"
#include "leader/tokenizer/tokenizer.h"
#include "leader/tokenizer/tokenizer_internal.h"
#include "leader/tokenizer/tokenizer_utf8.h"

static tokenizer *qwen, *llama; /* loaded once in main; forked tests share them */
static char qwen_dir[4096], llama_dir[4096];
static char fixtures[4096];

/* The Hugging Face parity cases run on both real tokenizers: the corpus is
 * shared, each has its golden folder under tests/fixtures. */
typedef struct tok_case {
    const char *name;
    tokenizer **tok;
    const char *golden; /* folder of golden_ids.jsonl, decode_golden.jsonl, bulk.json */
} tok_case;

static const tok_case tok_cases[] = {
    {"qwen3", &qwen, "tokenizer"},
    {"llama3", &llama, "tokenizer-llama3"},
};
#define N_TOK_CASES (int)(sizeof tok_cases / sizeof tok_cases[0])

/* ---- helpers ---- */

typedef struct jsonl {
    json_t **rows;
    size_t n;
} jsonl;

/* name: a file of the golden folder dir (under tests/fixtures). */
static jsonl read_jsonl_in(const char *dir, const char *name)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s/%s", fixtures, dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    jsonl j = {0};
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t err;
        json_t *row = json_loads(line, JSON_ALLOW_NUL, &err);
        ck_assert_msg(row != NULL, "%s: %s", path, err.text);
        j.rows = realloc(j.rows, (j.n + 1) * sizeof *j.rows);
        j.rows[j.n++] = row;
    }
    free(line);
    fclose(f);
    ck_assert_msg(j.n > 0, "%s is empty", path);
    return j;
}

static jsonl read_jsonl(const char *name)
{
    return read_jsonl_in("tokenizer", name);
}

static void free_jsonl(jsonl *j)
{
    for (size_t i = 0; i < j->n; i++) json_decref(j->rows[i]);
    free(j->rows);
}

static int32_t *ids_of(const json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static void assert_ids_equal(const char *name, const int32_t *got, size_t n_got, const int32_t *want,
                             size_t n_want)
{
    size_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i]) i++;
    ck_assert_msg(i == n_got && i == n_want,
                  "%s: ids differ at position %zu (got %zu ids, want %zu; got id %d, want %d)", name, i,
                  n_got, n_want, i < n_got ? got[i] : -1, i < n_want ? want[i] : -1);
}

/* Streams ids through a detokenizer; every delta must be valid UTF-8 and the
 * whole must equal want. */
static void assert_stream_equals_with(tokenizer *t, const char *name, const int32_t *ids,
                                      size_t n, bool skip, const char *want, size_t want_len)
{
    detokenizer *d;
    ck_assert_int_eq(detokenizer_create(t, skip, &d), NL_OK);
    char *all = malloc(want_len * 3 + 64);
    size_t total = 0, bad;
    for (size_t i = 0; i <= n; i++) {
        const char *delta;
        size_t len;
        nl_status st = i < n ? detokenizer_push(d, ids[i], &delta, &len) : detokenizer_flush(d, &delta, &len);
        ck_assert_msg(st == NL_OK, "%s: %s", name, nl_last_error());
        ck_assert_msg(utf8_validate(delta, len, &bad), "%s: delta %zu is not valid UTF-8", name, i);
        ck_assert_msg(total + len <= want_len, "%s: stream longer than decode", name);
        memcpy(all + total, delta, len);
        total += len;
    }
    ck_assert_msg(total == want_len && memcmp(all, want, want_len) == 0,
                  "%s: streamed text differs from decode", name);
    free(all);
    detokenizer_destroy(d);
}

/* ---- Hugging Face parity ---- */

START_TEST(test_encode_matches_hf)
{
    const tok_case *tc = &tok_cases[_i];
    tokenizer *tok = *tc->tok;
    jsonl corpus = read_jsonl("corpus.jsonl"), golden = read_jsonl_in(tc->golden, "golden_ids.jsonl");
    ck_assert_uint_eq(corpus.n, golden.n);
    ck_assert_uint_ge(corpus.n, 100);
    for (size_t i = 0; i < corpus.n; i++) {
        const char *name = json_string_value(json_object_get(corpus.rows[i], "name"));
        const json_t *text = json_object_get(corpus.rows[i], "text");
        ck_assert_str_eq(name, json_string_value(json_object_get(golden.rows[i], "name")));
        size_t n_want, n_got;
        int32_t *want = ids_of(json_object_get(golden.rows[i], "ids"), &n_want), *got;
        nl_status st = tokenizer_encode(tok, json_string_value(text), json_string_length(text), &got, &n_got);
        ck_assert_msg(st == NL_OK, "%s: %s", name, nl_last_error());
        assert_ids_equal(name, got, n_got, want, n_want);
        free(got);
        free(want);
        /* add_special_tokens=False: no <|begin_of_text|>, as a chat encodes */
        const json_t *plain = json_object_get(golden.rows[i], "ids_plain");
        if (plain) {
            want = ids_of(plain, &n_want);
            st = tokenizer_encode_chat(tok, json_string_value(text), json_string_length(text), &got, &n_got);
            ck_assert_msg(st == NL_OK, "%s: %s", name, nl_last_error());
            assert_ids_equal(name, got, n_got, want, n_want);
            free(got);
            free(want);
        }
    }
    free_jsonl(&corpus);
    free_jsonl(&golden);
}
END_TEST

START_TEST(test_decode_matches_hf)
{
    const tok_case *tc = &tok_cases[_i];
    tokenizer *tok = *tc->tok;
    jsonl golden = read_jsonl_in(tc->golden, "golden_ids.jsonl");
    for (size_t i = 0; i < golden.n; i++) {
        const char *name = json_string_value(json_object_get(golden.rows[i], "name"));
        size_t n;
        int32_t *ids = ids_of(json_object_get(golden.rows[i], "ids"), &n);
        for (int skip = 0; skip <= 1; skip++) {
            const json_t *want = json_object_get(golden.rows[i], skip ? "decoded_skip" : "decoded");
            char *text;
            ck_assert_int_eq(tokenizer_decode(tok, ids, n, skip, &text), NL_OK);
            /* decode's result is NUL-terminated: compare up to the first NUL;
             * the stream below compares every byte */
            size_t len = strlen(text);
            ck_assert_msg(len == strnlen(json_string_value(want), json_string_length(want)) &&
                              memcmp(text, json_string_value(want), len) == 0,
                          "%s (skip_special %d): decode differs", name, skip);
            assert_stream_equals_with(tok, name, ids, n, skip, json_string_value(want),
                                      json_string_length(want));
            free(text);
        }
        free(ids);
    }
    free_jsonl(&golden);
}
END_TEST

START_TEST(test_decode_broken_utf8_matches_hf)
{
    const tok_case *tc = &tok_cases[_i];
    tokenizer *tok = *tc->tok;
    jsonl golden = read_jsonl_in(tc->golden, "decode_golden.jsonl");
    for (size_t i = 0; i < golden.n; i++) {
        const char *name = json_string_value(json_object_get(golden.rows[i], "name"));
        bool skip = json_is_true(json_object_get(golden.rows[i], "skip_special"));
        const json_t *want = json_object_get(golden.rows[i], "text");
        size_t n;
        int32_t *ids = ids_of(json_object_get(golden.rows[i], "ids"), &n);
        char *text;
        ck_assert_int_eq(tokenizer_decode(tok, ids, n, skip, &text), NL_OK);
        ck_assert_msg(strcmp(text, json_string_value(want)) == 0, "%s: decode gives \"%s\", want \"%s\"",
                      name, text, json_string_value(want));
        assert_stream_equals_with(tok, name, ids, n, skip, json_string_value(want),
                                  json_string_length(want));
        free(text);
        free(ids);
    }
    free_jsonl(&golden);
}
END_TEST

START_TEST(test_chat_template_matches_hf)
{
    jsonl golden = read_jsonl("chat_golden.jsonl");
    ck_assert_uint_ge(golden.n, 6);
    for (size_t i = 0; i < golden.n; i++) {
        const json_t *row = golden.rows[i];
        const char *name = json_string_value(json_object_get(row, "name"));
        const json_t *msgs = json_object_get(row, "messages");
        size_t n_msgs = json_array_size(msgs);
        nl_chat_message *m = calloc(n_msgs, sizeof *m);
        for (size_t k = 0; k < n_msgs; k++) {
            m[k].role = json_string_value(json_object_get(json_array_get(msgs, k), "role"));
            m[k].content = json_string_value(json_object_get(json_array_get(msgs, k), "content"));
        }
        char *text;
        nl_status st = tokenizer_apply_chat_template(qwen, m, n_msgs,
                                                     json_is_true(json_object_get(row, "add_generation_prompt")),
                                                     json_is_true(json_object_get(row, "enable_thinking")), &text);
        ck_assert_msg(st == NL_OK, "%s: %s", name, nl_last_error());
        const char *want = json_string_value(json_object_get(row, "text"));
        ck_assert_msg(strcmp(text, want) == 0, "%s: rendered\n%s\nwant\n%s", name, text, want);
        size_t n_want, n_got;
        int32_t *want_ids = ids_of(json_object_get(row, "ids"), &n_want), *got;
        ck_assert_int_eq(tokenizer_encode(qwen, text, strlen(text), &got, &n_got), NL_OK);
        assert_ids_equal(name, got, n_got, want_ids, n_want);
        free(got);
        free(want_ids);
        free(text);
        free(m);
    }
    free_jsonl(&golden);
}
END_TEST

/* ---- facts of the Qwen3 tokenizer (from its tokenizer.json) ---- */

/* About 1 MB of the corpus texts in the order and with the separators of
 * make_tokenizer_golden.py's bulk_text (the same 64-bit LCG), encoded
 * whole (with the post-processor's tokens) and line by line (without),
 * against the count and checksum Hugging Face gave for the same bytes. */
#define BULK_BYTES 1000000

static uint64_t ids_checksum(const int32_t *ids, size_t n, uint64_t *index)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += (++*index) * (uint64_t)ids[i];
    return sum;
}

START_TEST(test_bulk_matches_hf)
{
    const tok_case *tc = &tok_cases[_i];
    tokenizer *tok = *tc->tok;
    jsonl corpus = read_jsonl("corpus.jsonl");
    static const char *const sep[4] = {"", " ", "\n", "\n\n"};
    char *text = malloc(BULK_BYTES + 65536);
    size_t len = 0;
    uint64_t state = 1;
    while (len < BULK_BYTES) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const json_t *t = json_object_get(corpus.rows[(state >> 33) % corpus.n], "text");
        const char *s = sep[(state >> 20) & 3];
        memcpy(text + len, json_string_value(t), json_string_length(t));
        len += json_string_length(t);
        memcpy(text + len, s, strlen(s));
        len += strlen(s);
    }
    free_jsonl(&corpus);

    char path[8192];
    snprintf(path, sizeof path, "%s/%s/bulk.json", fixtures, tc->golden);
    json_error_t err;
    json_t *want = json_load_file(path, 0, &err);
    ck_assert_msg(want != NULL, "%s: %s", path, err.text);
    ck_assert_uint_eq(len, json_integer_value(json_object_get(want, "bytes")));

    int32_t *ids;
    size_t n;
    uint64_t index = 0;
    ck_assert_int_eq(tokenizer_encode(tok, text, len, &ids, &n), NL_OK);
    const json_t *whole = json_object_get(want, "whole");
    ck_assert_uint_eq(n, json_integer_value(json_object_get(whole, "n_ids")));
    ck_assert_msg(ids_checksum(ids, n, &index) ==
                      (uint64_t)json_integer_value(json_object_get(whole, "checksum")),
                  "%s: whole-text checksum differs", tc->name);
    free(ids);

    size_t total = 0;
    uint64_t sum = 0;
    index = 0;
    for (size_t start = 0; start < len;) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        ck_assert_int_eq(tokenizer_encode_ex(tok, text + start, end - start, true, false, &ids, &n), NL_OK);
        sum += ids_checksum(ids, n, &index);
        total += n;
        free(ids);
        start = end;
    }
    const json_t *lines = json_object_get(want, "lines");
    ck_assert_uint_eq(total, json_integer_value(json_object_get(lines, "n_ids")));
    ck_assert_msg(sum == (uint64_t)json_integer_value(json_object_get(lines, "checksum")),
                  "%s: line-by-line checksum differs", tc->name);
    json_decref(want);
    free(text);
}
END_TEST

/* Llama 3.1's tokenizer: 128,000 BPE tokens and 256 special ones, no
 * normaliser, its own split pattern, ignore_merges, and a template that
 * starts every encoding with <|begin_of_text|>. */
START_TEST(test_llama3_facts)
{
    ck_assert_int_eq(tokenizer_vocab_size(llama), 128256);
    ck_assert(tokenizer_is_special(llama, 128000)); /* <|begin_of_text|> */
    ck_assert(tokenizer_is_special(llama, 128009)); /* <|eot_id|> */
    ck_assert(!tokenizer_is_special(llama, 791));
    int32_t eos[4];
    ck_assert_uint_eq(tokenizer_eos_ids(llama, eos, 4), 1); /* tokenizer_config eos_token */
    ck_assert_int_eq(eos[0], 128009);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(llama, "", 0, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 128000);
    free(ids);
    ck_assert_int_eq(tokenizer_encode_chat(llama, "", 0, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 0);
    free(ids);
    /* a chat rendered with its own <|begin_of_text|> keeps exactly one */
    const char chat[] = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
    ck_assert_int_eq(tokenizer_encode_chat(llama, chat, sizeof chat - 1, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 7);
    ck_assert_int_eq(ids[0], 128000);
    ck_assert_int_eq(ids[1], 128006);
    ck_assert_int_eq(ids[3], 128007);
    ck_assert_int_eq(ids[6], 128009);
    free(ids);
    /* Qwen's post-processor adds nothing */
    ck_assert_int_eq(tokenizer_encode(qwen, "", 0, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 0);
    free(ids);
}
END_TEST

START_TEST(test_qwen3_facts)
{
    ck_assert_int_eq(tokenizer_vocab_size(qwen), 151669); /* 151643 BPE tokens + 26 added */
    ck_assert(tokenizer_is_special(qwen, 151643));        /* <|endoftext|> */
    ck_assert(tokenizer_is_special(qwen, 151645));        /* <|im_end|> */
    ck_assert(!tokenizer_is_special(qwen, 151657));       /* <tool_call>: added, not special */
    ck_assert(!tokenizer_is_special(qwen, 151667));       /* <think> */
    ck_assert(!tokenizer_is_special(qwen, 9707));
    ck_assert(!tokenizer_is_special(qwen, -1));
    int32_t eos[4];
    ck_assert_uint_eq(tokenizer_eos_ids(qwen, eos, 4), 1); /* tokenizer_config eos_token only */
    ck_assert_int_eq(eos[0], 151645);
}
END_TEST

/* The ids below were read off Hugging Face for these strings (the same
 * values appear in golden_ids.jsonl, which covers far more). */
START_TEST(test_known_ids)
{
    static const char text[] = "Hello world<|im_start|>  it's 'S \r\n";
    static const int32_t want[] = {9707, 1879, 151644, 220, 432, 594, 364, 50, 2529};
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(qwen, text, sizeof text - 1, &ids, &n), NL_OK);
    assert_ids_equal("known", ids, n, want, sizeof want / sizeof want[0]);
    free(ids);
    ck_assert_int_eq(tokenizer_encode(qwen, "", 0, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(ids);
    free(ids);
}
END_TEST

START_TEST(test_special_tokens_as_text)
{
    static const char text[] = "<|im_end|><think>";
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode_ex(qwen, text, sizeof text - 1, false, true, &ids, &n), NL_OK);
    ck_assert_uint_gt(n, 2);
    for (size_t i = 0; i + 1 < n; i++) ck_assert_int_ne(ids[i], 151645);
    ck_assert_int_eq(ids[n - 1], 151667); /* <think> is not special: still matched */
    char *back;
    ck_assert_int_eq(tokenizer_decode(qwen, ids, n, true, &back), NL_OK);
    ck_assert_str_eq(back, text); /* plain-text pieces are never skipped */
    free(back);
    free(ids);
}
END_TEST

START_TEST(test_invalid_input)
{
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(qwen, "ok\xE4\xBD", 4, &ids, &n), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "offset 2"));
    ck_assert_int_eq(tokenizer_encode(qwen, "\xC0\x80", 2, &ids, &n), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "offset 0"));
    ck_assert_int_eq(tokenizer_encode(qwen, "a\xED\xA0\x80", 4, &ids, &n), NL_ERR_INVALID_ARG);

    char *text;
    int32_t bad[] = {9707, 151669};
    ck_assert_int_eq(tokenizer_decode(qwen, bad, 2, false, &text), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "151669"));
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "position 1"));
    int32_t negative = -5;
    ck_assert_int_eq(tokenizer_decode(qwen, &negative, 1, false, &text), NL_ERR_INVALID_ARG);

    detokenizer *d;
    const char *delta;
    size_t len;
    ck_assert_int_eq(detokenizer_create(qwen, false, &d), NL_OK);
    ck_assert_int_eq(detokenizer_push(d, 200000, &delta, &len), NL_ERR_INVALID_ARG);
    detokenizer_destroy(d);

    /* Roles are the template's business: Qwen3 wraps a tool result as a user
     * turn and skips a role it does not know (texts from jinja2). */
    nl_chat_message tool = {"tool", "x"}, odd = {"narrator", "x"};
    ck_assert_int_eq(tokenizer_apply_chat_template(qwen, &tool, 1, true, true, &text), NL_OK);
    ck_assert_str_eq(text, "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    free(text);
    ck_assert_int_eq(tokenizer_apply_chat_template(qwen, &odd, 1, true, true, &text), NL_OK);
    ck_assert_str_eq(text, "<|im_start|>assistant\n");
    free(text);
    ck_assert_int_eq(tokenizer_apply_chat_template(qwen, &odd, 0, true, true, &text), NL_ERR_INVALID_ARG);
    size_t text_len;
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, "{\"messages\": []}", false, &text, &text_len), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "messages"));
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], "
                                                  "\"add_generation_prompt\": false}", false, &text, &text_len), NL_OK);
    ck_assert_str_eq(text, "<|im_start|>user\nq<|im_end|>\n");
    ck_assert_uint_eq(text_len, strlen(text));
    free(text);
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, "{\"messages\": [{\"role\": \"user\"}], \"stream\": 1}",
                                                  false, &text, &text_len), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "stream"));
    /* A tool call's arguments as OpenAI sends them, a JSON string: as the
     * server takes a request, the template gets the object it encodes (its
     * tojson spaces it out); as given, the string itself. */
    const char *call = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", "
                       "\"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                       "\"arguments\": \"{\\\"a\\\":1}\"}}]}], \"add_generation_prompt\": false}";
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, call, true, &text, &text_len), NL_OK);
    ck_assert_ptr_nonnull(strstr(text, "\"arguments\": {\"a\": 1}"));
    free(text);
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, call, false, &text, &text_len), NL_OK);
    ck_assert_ptr_nonnull(strstr(text, "\"arguments\": {\"a\":1}"));
    free(text);
    const char *broken = "{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": "
                         "[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \"}}]}]}";
    ck_assert_int_eq(tokenizer_apply_chat_request(qwen, broken, true, &text, &text_len), NL_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "messages[0].tool_calls[0].function.arguments"));
}
END_TEST

/* ---- hand-built tokenizers ---- */

static char tmp_dir[] = "/tmp/nl_tok_test_XXXXXX";

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* A byte-level vocab of the 256 single bytes (ids 0..255 in byte order,
 * written in the GPT-2 alphabet), then extra tokens. */
static char *tiny_tokenizer_json(const char *extra_vocab, const char *merges, const char *added,
                                 const char *normalizer)
{
    json_t *vocab = json_object();
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = printable ? b : next++;
        char key[4] = {0};
        if (cp < 0x80) key[0] = (char)cp;
        else key[0] = (char)(0xC0 | (cp >> 6)), key[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, key, json_integer(b));
    }
    json_t *extra = json_loads(extra_vocab, 0, NULL);
    json_object_update(vocab, extra);
    json_decref(extra);
    char *vocab_text = json_dumps(vocab, JSON_COMPACT);
    json_decref(vocab);
    size_t cap = strlen(vocab_text) + strlen(merges) + strlen(added) + 4096;
    char *out = malloc(cap);
    snprintf(out, cap,
             "{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s,"
             " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "  {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+|[^\\\\s]+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
             "  {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": false, \"use_regex\": false}]},"
             " \"decoder\": {\"type\": \"ByteLevel\"},"
             " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"vocab\": %s, \"merges\": %s}}",
             added, normalizer, vocab_text, merges);
    free(vocab_text);
    return out;
}

static tokenizer *load_tiny(const char *extra_vocab, const char *merges, const char *added,
                            const char *normalizer)
{
    char *json = tiny_tokenizer_json(extra_vocab, merges, added, normalizer);
    write_file(tmp_dir, "tokenizer.json", json);
    free(json);
    tokenizer *t;
    nl_status st = tokenizer_load(tmp_dir, &t);
    ck_assert_msg(st == NL_OK, "tiny tokenizer: %s", nl_last_error());
    return t;
}

static void assert_encodes(tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    ck_assert_msg(tokenizer_encode(t, text, strlen(text), &ids, &n) == NL_OK, "%s", nl_last_error());
    assert_ids_equal(text, ids, n, want, n_want);
    free(ids);
}

#define ENCODES(t, text, ...)                                                   \
    do {                                                                        \
        static const int32_t want_[] = {__VA_ARGS__};                           \
        assert_encodes(t, text, want_, sizeof want_ / sizeof want_[0]);         \
    } while (0)

static void assert_decodes(tokenizer *t, bool skip_special, const int32_t *ids, size_t n, const char *want)
{
    char *text;
    ck_assert_int_eq(tokenizer_decode(t, ids, n, skip_special, &text), NL_OK);
    ck_assert_str_eq(text, want);
    free(text);
}

/* DECODES(t, skip_special, "text", ids...) */
#define DECODES(t, skip_special, text, ...)                                     \
    do {                                                                        \
        static const int32_t ids_[] = {__VA_ARGS__};                            \
        assert_decodes(t, skip_special, ids_, sizeof ids_ / sizeof ids_[0], text); \
    } while (0)

START_TEST(test_bpe_merge_order)
{
    /* merges: "a a" rank 0, ["aa", "aa"] rank 1, "a b" rank 2, "b c" rank 3 */
    tokenizer *t = load_tiny("{\"aa\": 256, \"aaaa\": 257, \"ab\": 258, \"bc\": 259}",
                             "[\"a a\", [\"aa\", \"aa\"], \"a b\", \"b c\"]", "[]", "null");
    ENCODES(t, "aaa", 256, 'a');        /* leftmost of two equal-rank pairs first */
    ENCODES(t, "aaaa", 257);            /* aa+aa after both a+a */
    ENCODES(t, "aaaaa", 257, 'a');
    ENCODES(t, "abc", 258, 'c');        /* a b (rank 2) beats b c (rank 3) */
    ENCODES(t, "bc", 259);
    ENCODES(t, "aab", 256, 'b');        /* a a before a b */
    ENCODES(t, "ab ab", 258, ' ', 258); /* words are merged separately */
    ck_assert_int_eq(tokenizer_vocab_size(t), 260);
    DECODES(t, false, "aaaa bc", 257, 32, 259);
    tokenizer_destroy(t);
}
END_TEST

/* An empty string in the vocabulary (tokenizers accepts it) is a key like
 * any other: it loads, takes no part in encoding, and decodes to nothing. */
START_TEST(test_empty_vocab_key)
{
    tokenizer *t = load_tiny("{\"\": 256, \"ab\": 257}", "[\"a b\"]", "[]", "null");
    ENCODES(t, "abc", 257, 'c');
    DECODES(t, false, "abab", 257, 256, 257);
    tokenizer_destroy(t);
}
END_TEST

START_TEST(test_added_token_options)
{
    const char *added =
        "[{\"id\": 300, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 301, \"content\": \"<sep>\", \"special\": true, \"lstrip\": true, \"rstrip\": true, \"normalized\": false},"
        " {\"id\": 302, \"content\": \"cat\", \"special\": false, \"single_word\": true, \"normalized\": false},"
        " {\"id\": 303, \"content\": \"<s><s>\", \"special\": false, \"normalized\": false},"
        " {\"id\": 304, \"content\": \"\\u00e9t\\u00e9\", \"special\": false, \"normalized\": true}]";
    tokenizer *t = load_tiny("{}", "[]", added, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}");
    ENCODES(t, "x<s>y", 'x', 300, 'y');
    ENCODES(t, "<s><s><s>", 303, 300);      /* longest match first, then leftmost */
    ENCODES(t, "a  <sep>  b", 'a', 301, 'b'); /* lstrip/rstrip take the spaces */
    ENCODES(t, "cat", 302);
    ENCODES(t, "a cat.", 'a', ' ', 302, '.');
    ENCODES(t, "cats", 'c', 'a', 't', 's'); /* single_word: not inside a word */
    ENCODES(t, "_cat", '_', 'c', 'a', 't');
    ENCODES(t, "e\xCC\x81te\xCC\x81!", 304, '!'); /* normalized: matched after NFC */
    ck_assert(tokenizer_is_special(t, 301));
    ck_assert(!tokenizer_is_special(t, 303));
    DECODES(t, true, "a<s><s>b", 'a', 300, 303, 'b');
    tokenizer_destroy(t);
}
END_TEST

START_TEST(test_eos_from_configs)
{
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/eos", tmp_dir);
    mkdir(dir, 0700);
    char src[8192], dst[8192];
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", qwen_dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        unlink(dst);
        ck_assert_int_eq(symlink(src, dst), 0);
    }
    write_file(dir, "config.json", "{\"eos_token_id\": 151643}");
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [151645, 151643]}");
    tokenizer *t;
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_OK);
    int32_t eos[8];
    ck_assert_uint_eq(tokenizer_eos_ids(t, eos, 8), 2);
    ck_assert_int_eq(eos[0], 151643);
    ck_assert_int_eq(eos[1], 151645);
    ck_assert_uint_eq(tokenizer_eos_ids(t, eos, 1), 2); /* the count, even past cap */
    tokenizer_destroy(t);

    write_file(dir, "config.json", "{\"eos_token_id\": \"x\"}");
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "config.json"));

    /* An id no vocabulary has is refused by value, not wrapped to int32. */
    write_file(dir, "config.json", "{\"eos_token_id\": 151643}");
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [151645, 99999999999]}");
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "generation_config.json: field eos_token_id[1] = 99999999999"),
                  "%s", nl_last_error());

    /* The same reader and cap as the model config: with tokenizer_config's
     * eos_token (<|im_end|>) and 15 ids from config.json the set holds
     * NL_MAX_EOS ids, and a 17th distinct id from another file is refused,
     * not dropped. */
    write_file(dir, "config.json", "{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}");
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [15, 1]}");
    ck_assert_msg(tokenizer_load(dir, &t) == NL_OK, "%s", nl_last_error());
    int32_t all[NL_MAX_EOS];
    ck_assert_uint_eq(tokenizer_eos_ids(t, all, NL_MAX_EOS), NL_MAX_EOS);
    bool has_im_end = false;
    for (int i = 0; i < NL_MAX_EOS; i++) has_im_end |= all[i] == 151645;
    ck_assert(has_im_end);
    tokenizer_destroy(t);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": 16}");
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(nl_last_error(), "more than 16 distinct EOS ids"), "%s", nl_last_error());
}
END_TEST

START_TEST(test_load_errors)
{
    tokenizer *t;
    ck_assert_int_eq(tokenizer_load("/nonexistent/dir", &t), NL_ERR_IO);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "/nonexistent/dir/tokenizer.json"));
    ck_assert_ptr_null(t);

    char dir[8192];
    snprintf(dir, sizeof dir, "%s/bad", tmp_dir);
    mkdir(dir, 0700);
    write_file(dir, "tokenizer.json", "{\"model\": ");
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);

    char *json = tiny_tokenizer_json("{}", "[\"a q\"]", "[]", "null");
    write_file(dir, "tokenizer.json", json);
    free(json);
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT); /* "aq" is not in the vocab */
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "merges[0]"));

    json = tiny_tokenizer_json("{}", "[]", "[]", "{\"type\": \"Lowercase\"}");
    write_file(dir, "tokenizer.json", json);
    free(json);
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "Lowercase"));
}
END_TEST


/* The tiny tokenizer with a post_processor (JSON text) spliced in. */
static nl_status load_tiny_post(const char *post, tokenizer **t)
{
    char *json = tiny_tokenizer_json("{}", "[]", "[{\"id\": 300, \"content\": \"<s>\", \"special\": true},"
                                     " {\"id\": 301, \"content\": \"</s>\", \"special\": true}]", "null");
    const char *at = strstr(json, "\"decoder\"");
    size_t cap = strlen(json) + strlen(post) + 64;
    char *spliced = malloc(cap);
    snprintf(spliced, cap, "%.*s\"post_processor\": %s, %s", (int)(at - json), json, post, at);
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/post", tmp_dir);
    mkdir(dir, 0700);
    write_file(dir, "tokenizer.json", spliced);
    free(json);
    free(spliced);
    return tokenizer_load(dir, t);
}

#define TEMPLATE(single)                                                                  \
    "{\"type\": \"TemplateProcessing\", \"single\": " single ", \"pair\": [],"              \
    " \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [300], \"tokens\": [\"<s>\"]},"   \
    " \"</s>\": {\"id\": \"</s>\", \"ids\": [301], \"tokens\": [\"</s>\"]}}}"
#define SPECIAL(name) "{\"SpecialToken\": {\"id\": \"" name "\", \"type_id\": 0}}"
#define SEQ_A "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}"

/* TemplateProcessing adds its special tokens around the text's ids (only
 * when special tokens are added), inside a Sequence too; other
 * post-processors and broken templates are refused by name. */
START_TEST(test_post_processor)
{
    tokenizer *t;
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(load_tiny_post(TEMPLATE("[" SPECIAL("<s>") ", " SEQ_A ", " SPECIAL("</s>") "]"), &t), NL_OK);
    ENCODES(t, "ab", 300, 'a', 'b', 301);
    ENCODES(t, "", 300, 301);
    ck_assert_int_eq(tokenizer_encode_chat(t, "ab", 2, &ids, &n), NL_OK);
    ck_assert_uint_eq(n, 2);
    free(ids);
    tokenizer_destroy(t);

    ck_assert_int_eq(load_tiny_post("{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\","
                                    " \"trim_offsets\": false}, " TEMPLATE("[" SPECIAL("<s>") ", " SEQ_A "]") "]}", &t),
                     NL_OK);
    ENCODES(t, "a b", 300, 'a', ' ', 'b');
    tokenizer_destroy(t);

    ck_assert_int_eq(load_tiny_post("{\"type\": \"RobertaProcessing\"}", &t), NL_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "RobertaProcessing"));
    ck_assert_int_eq(load_tiny_post(TEMPLATE("[" SPECIAL("<unk>") ", " SEQ_A "]"), &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "<unk>"));
    ck_assert_int_eq(load_tiny_post(TEMPLATE("[" SPECIAL("<s>") "]"), &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "no Sequence"));
    ck_assert_int_eq(load_tiny_post("{\"type\": \"TemplateProcessing\", \"single\": [" SPECIAL("<s>") ", " SEQ_A
                                    "], \"special_tokens\": {\"<s>\": {\"ids\": [999]}}}", &t), NL_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(nl_last_error(), "999"));
}
END_TEST

/* Sizes come from the file: an id or a merge past the limits is refused by
 * name, before anything is allocated or copied for it. */
START_TEST(test_load_limits)
{
    char dir[8192];
    snprintf(dir, sizeof dir, "%s/limits", tmp_dir);
    mkdir(dir, 0700);
    tokenizer *t;

    /* A merge in the list form longer than a merge may be. */
    char part[3001];
    memset(part, 'a', 3000);
    part[3000] = '\0';
    char merges[3100];
    snprintf(merges, sizeof merges, "[[\"%s\", \"a\"]]", part);
    char *json = tiny_tokenizer_json("{}", merges, "[]", "null");
    write_file(dir, "tokenizer.json", json);
    free(json);
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "merges[0]") && strstr(nl_last_error(), "longer than"), "%s",
                  nl_last_error());

    /* Ids far beyond any vocabulary would size the id tables. */
    json = tiny_tokenizer_json("{\"zz\": 2000000000}", "[]", "[]", "null");
    write_file(dir, "tokenizer.json", json);
    free(json);
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "2000000000"), "%s", nl_last_error());
    json = tiny_tokenizer_json("{}", "[]", "[{\"id\": 2000000000, \"content\": \"<x>\"}]", "null");
    write_file(dir, "tokenizer.json", json);
    free(json);
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "added_tokens[0]"), "%s", nl_last_error());
    json = tiny_tokenizer_json("{}", "[]", "[]", "null");
    write_file(dir, "tokenizer.json", json);
    free(json);
    write_file(dir, "tokenizer_config.json",
               "{\"added_tokens_decoder\": {\"2000000000\": {\"content\": \"<x>\"}}}");
    ck_assert_int_eq(tokenizer_load(dir, &t), NL_ERR_FORMAT);
    ck_assert_msg(strstr(nl_last_error(), "2000000000"), "%s", nl_last_error());
}
END_TEST


/* ---- the tokenize / detokenize commands ---- */

typedef struct cli_run {
    int code;
    char out[4096];
} cli_run;

/* Runs a command in a child with input on stdin; collects stdout and the
 * exit code. */
static cli_run run_cli(bool tokenize, const char *model_dir, const char *input, size_t len, int argc,
                       char **argv)
{
    char in_path[8192], out_path[8192];
    snprintf(in_path, sizeof in_path, "%s/cli_in", tmp_dir);
    snprintf(out_path, sizeof out_path, "%s/cli_out", tmp_dir);
    FILE *f = fopen(in_path, "wb");
    ck_assert_ptr_nonnull(f);
    fwrite(input, 1, len, f);
    fclose(f);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int in = open(in_path, O_RDONLY), out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int devnull = open("/dev/null", O_WRONLY);
        if (in < 0 || out < 0 || devnull < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(devnull, 2) < 0)
            _exit(99);
        _exit(tokenize ? cli_tokenize(model_dir, argc, argv) : cli_detokenize(model_dir, argc, argv));
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    cli_run r = {.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1};
    f = fopen(out_path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(r.out, 1, sizeof r.out - 1, f);
    r.out[n] = '\0';
    fclose(f);
    return r;
}

START_TEST(test_cli)
{
    static const char text[] = "Hello world<|im_end|>";
    char *none[] = {NULL}, *no_special[] = {"--no-special"}, *replace[] = {"--replace-invalid"};
    char *skip[] = {"--skip-special-tokens"}, *bogus[] = {"--bogus"};

    cli_run r = run_cli(true, qwen_dir, text, sizeof text - 1, 0, none);
    ck_assert_int_eq(r.code, 0);
    ck_assert_str_eq(r.out, "[9707, 1879, 151645]\n");
    r = run_cli(true, qwen_dir, text, sizeof text - 1, 1, no_special);
    ck_assert_int_eq(r.code, 0);
    ck_assert_ptr_null(strstr(r.out, "151645"));
    ck_assert_int_eq(run_cli(true, qwen_dir, "ok\xFF", 3, 0, none).code, 2);
    r = run_cli(true, qwen_dir, "ok\xFF", 3, 1, replace);
    ck_assert_int_eq(r.code, 0);
    int32_t *ids;
    size_t n;
    ck_assert_int_eq(tokenizer_encode(qwen, "ok" UTF8_REPLACEMENT, 5, &ids, &n), NL_OK);
    char want[256] = "[";
    for (size_t i = 0; i < n; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), i ? ", %d" : "%d", ids[i]);
    strcat(want, "]\n");
    ck_assert_str_eq(r.out, want);
    free(ids);

    static const char arr[] = "[9707, 1879, 151645]";
    r = run_cli(false, qwen_dir, arr, sizeof arr - 1, 0, none);
    ck_assert_int_eq(r.code, 0);
    ck_assert_str_eq(r.out, "Hello world<|im_end|>");
    r = run_cli(false, qwen_dir, arr, sizeof arr - 1, 1, skip);
    ck_assert_str_eq(r.out, "Hello world");
    ck_assert_int_eq(run_cli(false, qwen_dir, "[1, \"x\"]", 8, 0, none).code, 2);
    ck_assert_int_eq(run_cli(false, qwen_dir, "[151669]", 8, 0, none).code, 2);
    ck_assert_int_eq(run_cli(false, qwen_dir, "[1]", 3, 1, bogus).code, 2);
    ck_assert_int_eq(run_cli(true, "/nonexistent", "x", 1, 0, none).code, 2);
}
END_TEST

int main(void)
{
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env) snprintf(qwen_dir, sizeof qwen_dir, "%s", env);
    else snprintf(qwen_dir, sizeof qwen_dir, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME"));
    env = getenv("NL_FIXTURES");
    snprintf(fixtures, sizeof fixtures, "%s", env ? env : "tests/fixtures");
    env = getenv("NANOLLM_LLAMA3_TOKENIZER_DIR");
    if (env) snprintf(llama_dir, sizeof llama_dir, "%s", env);
    else snprintf(llama_dir, sizeof llama_dir, "%s/.cache/nanollm/tokenizer-llama3", getenv("HOME"));
    if (tokenizer_load(qwen_dir, &qwen) != NL_OK || tokenizer_load(llama_dir, &llama) != NL_OK) {
        fprintf(stderr, "test_tokenizer: %s (run tools/fetch-tokenizer.sh)\n", nl_last_error());
        return 1;
    }
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }

    Suite *s = suite_create("tokenizer");
    TCase *hf = tcase_create("hugging_face_parity");
    tcase_set_timeout(hf, 120);
    tcase_add_loop_test(hf, test_encode_matches_hf, 0, N_TOK_CASES);
    tcase_add_loop_test(hf, test_decode_matches_hf, 0, N_TOK_CASES);
    tcase_add_loop_test(hf, test_decode_broken_utf8_matches_hf, 0, N_TOK_CASES);
    tcase_add_loop_test(hf, test_bulk_matches_hf, 0, N_TOK_CASES);
    tcase_add_test(hf, test_llama3_facts);
    tcase_add_test(hf, test_chat_template_matches_hf);
    suite_add_tcase(s, hf);
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60); /* test_eos_from_configs loads the 11 MB tokenizer.json often */
    tcase_add_test(core, test_qwen3_facts);
    tcase_add_test(core, test_known_ids);
    tcase_add_test(core, test_special_tokens_as_text);
    tcase_add_test(core, test_invalid_input);
    tcase_add_test(core, test_bpe_merge_order);
    tcase_add_test(core, test_empty_vocab_key);
    tcase_add_test(core, test_added_token_options);
    tcase_add_test(core, test_eos_from_configs);
    tcase_add_test(core, test_load_errors);
    tcase_add_test(core, test_post_processor);
    tcase_add_test(core, test_load_limits);
    suite_add_tcase(s, core);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120); /* each command loads the 11 MB tokenizer.json */
    tcase_add_test(cli, test_cli);
    suite_add_tcase(s, cli);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    tokenizer_destroy(qwen);
    tokenizer_destroy(llama);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "test_tokenizer: could not remove %s\n", tmp_dir);
    return failed ? 1 : 0;
}
