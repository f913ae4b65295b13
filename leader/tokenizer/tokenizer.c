/* tokenizer.c — loading a Hugging Face tokenizer directory, encoding and
 * decoding.
 *
 * Encoding follows the order of Hugging Face `tokenizers`: added tokens are
 * found in the raw text first (leftmost, then longest), each stretch of text
 * between them is normalised, split into words by the pre-tokenizer and each
 * word is merged by the BPE model; last, the post-processor's template
 * (Llama 3's TemplateProcessing: <|begin_of_text|> first, unless
 * tokenizer_config.json's add_bos_token/add_eos_token say otherwise) wraps
 * the ids when special tokens are to be added.  Decoding concatenates the bytes of the
 * tokens and renders invalid UTF-8 as U+FFFD.  The normalisation and regex
 * stages live in pretokenize.c, the merges in bpe.c, the chat template in
 * chat_template.c.
 */
#include "leader/tokenizer/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/file.h"
#include "common/limits.h"
#include "common/model_config.h"
#include "common/status.h"
#include "leader/tokenizer/bpe.h"
#include "leader/tokenizer/chat_template.h"
#include "leader/tokenizer/pretokenize.h"
#include "leader/tokenizer/tokenizer_internal.h"
#include "leader/tokenizer/tokenizer_utf8.h"

typedef struct added_token {
    char *content;       /* as written in the file, matched in text    */
    size_t len;
    char *bytes;         /* what it decodes to                         */
    size_t n_bytes;
    int32_t id;
    bool special;        /* skipped by decode(skip_special)            */
    bool single_word;    /* only between non-word characters           */
    bool lstrip, rstrip; /* swallows whitespace on that side           */
    bool normalized;     /* matched in normalised rather than raw text */
} added_token;

struct tokenizer {
    bpe *model;
    pretokenizer *pre;
    added_token *added;
    size_t n_added;
    bool any_normalized;      /* some added token has normalized true */
    size_t *by_first_byte;    /* [n_added] indexes, by (first byte, length descending) */
    size_t first_start[257];  /* by_first_byte[first_start[c] .. first_start[c + 1]) start with c */
    int32_t *added_of_id;     /* [vocab_size] index into added, or -1 */
    int32_t vocab_size;
    chat_template *chat;      /* NULL when the model has none or it failed to load */
    nl_status chat_status;    /* why chat is NULL, when loading it failed */
    char *chat_error;
    /* The post-processor's single-sequence template: these ids before and
     * after the text's when special tokens are added. */
    int32_t *post_prefix, *post_suffix;
    size_t n_post_prefix, n_post_suffix;
    int32_t eos[NL_MAX_EOS];
    size_t n_eos;
};

/* ---- loading ---- */

static char *dup_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

static added_token *find_added_id(const tokenizer *t, int32_t id)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == id) return &t->added[i];
    return NULL;
}

/* Adds (or, for an id already added, updates) one added token from a JSON
 * object with "content" and the optional flags. */
static nl_status add_token(tokenizer *t, int32_t id, const json_t *obj, const char *where)
{
    const json_t *content = json_object_get(obj, "content");
    if (!json_is_string(content) || json_string_length(content) == 0)
        return nl_error(NL_ERR_FORMAT, "%s: added token %d has no \"content\" string", where, id);
    added_token *a = find_added_id(t, id);
    if (a) return NL_OK; /* tokenizer.json, read first, is authoritative */
    added_token *grown = realloc(t->added, (t->n_added + 1) * sizeof *grown);
    if (!grown) return nl_error(NL_ERR_NOMEM, "%s: no memory for added tokens", where);
    t->added = grown;
    a = &t->added[t->n_added];
    memset(a, 0, sizeof *a);
    a->len = json_string_length(content);
    a->content = dup_bytes(json_string_value(content), a->len);
    a->bytes = malloc(a->len + 1);
    if (!a->content || !a->bytes) {
        free(a->content);
        free(a->bytes);
        return nl_error(NL_ERR_NOMEM, "%s: no memory for added tokens", where);
    }
    if (!bpe_bytelevel_decode(a->content, a->len, a->bytes, &a->n_bytes)) {
        memcpy(a->bytes, a->content, a->len); /* not byte-level text: it stands for itself */
        a->n_bytes = a->len;
    }
    a->id = id;
    a->special = json_is_true(json_object_get(obj, "special"));
    a->single_word = json_is_true(json_object_get(obj, "single_word"));
    a->lstrip = json_is_true(json_object_get(obj, "lstrip"));
    a->rstrip = json_is_true(json_object_get(obj, "rstrip"));
    const json_t *normalized = json_object_get(obj, "normalized");
    a->normalized = normalized ? json_is_true(normalized) : !a->special;
    t->n_added++;
    return NL_OK;
}

static nl_status load_added_tokens(tokenizer *t, const json_t *list, const char *path)
{
    if (!list || json_is_null(list)) return NL_OK;
    if (!json_is_array(list)) return nl_error(NL_ERR_FORMAT, "%s: added_tokens is not an array", path);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *obj = json_array_get(list, i);
        json_int_t id = json_integer_value(json_object_get(obj, "id"));
        if (!json_is_integer(json_object_get(obj, "id")) || id < 0 || id >= BPE_ID_LIMIT)
            return nl_error(NL_ERR_FORMAT, "%s: added_tokens[%zu].id is missing or not in [0, %d)",
                            path, i, BPE_ID_LIMIT);
        NL_TRY(add_token(t, (int32_t)id, obj, path));
    }
    return NL_OK;
}

/* tokenizer_config.json may list added tokens that tokenizer.json lacks. */
static nl_status load_added_tokens_decoder(tokenizer *t, const json_t *map, const char *path)
{
    if (!json_is_object(map)) return NL_OK;
    const char *key;
    const json_t *obj;
    json_object_foreach((json_t *)map, key, obj) {
        char *end;
        long id = strtol(key, &end, 10);
        if (*end != '\0' || end == key || id < 0 || id >= BPE_ID_LIMIT)
            return nl_error(NL_ERR_FORMAT, "%s: added_tokens_decoder key \"%s\" is not a token id "
                            "in [0, %d)", path, key, BPE_ID_LIMIT);
        NL_TRY(add_token(t, (int32_t)id, obj, path));
    }
    return NL_OK;
}

/* Orders added tokens by first byte, longest first, so that the first hit
 * at a position is the longest one there. */
static bool added_before(const added_token *a, const added_token *b)
{
    unsigned char ca = (unsigned char)a->content[0], cb = (unsigned char)b->content[0];
    return ca != cb ? ca < cb : a->len > b->len;
}

static nl_status index_added_tokens(tokenizer *t)
{
    int32_t limit = bpe_id_limit(t->model);
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].id + 1 > limit) limit = t->added[i].id + 1;
        if (t->added[i].normalized) t->any_normalized = true;
    }
    t->vocab_size = limit;
    t->added_of_id = malloc((size_t)limit * sizeof *t->added_of_id);
    t->by_first_byte = malloc((t->n_added + 1) * sizeof *t->by_first_byte);
    if (!t->added_of_id || !t->by_first_byte)
        return nl_error(NL_ERR_NOMEM, "tokenizer: no memory to index %zu added tokens", t->n_added);
    memset(t->added_of_id, 0xFF, (size_t)limit * sizeof *t->added_of_id);
    for (size_t i = 0; i < t->n_added; i++) {
        t->added_of_id[t->added[i].id] = (int32_t)i;
        t->by_first_byte[i] = i;
    }
    for (size_t i = 1; i < t->n_added; i++) { /* insertion sort: a few dozen tokens */
        size_t v = t->by_first_byte[i], j = i;
        for (; j > 0 && added_before(&t->added[v], &t->added[t->by_first_byte[j - 1]]); j--)
            t->by_first_byte[j] = t->by_first_byte[j - 1];
        t->by_first_byte[j] = v;
    }
    size_t k = 0;
    for (int c = 0; c <= 256; c++) {
        while (k < t->n_added && (unsigned char)t->added[t->by_first_byte[k]].content[0] < c) k++;
        t->first_start[c] = k;
    }
    return NL_OK;
}

/* The id of a token named by its text: an added token, else a vocab entry. */
static bool token_id_of(const tokenizer *t, const char *text, size_t len, int32_t *id)
{
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].len == len && memcmp(t->added[i].content, text, len) == 0) {
            *id = t->added[i].id;
            return true;
        }
    }
    char *bytes = malloc(len + 1);
    size_t n;
    bool found = bytes && bpe_bytelevel_decode(text, len, bytes, &n) && bpe_token_id(t->model, bytes, n, id);
    free(bytes);
    return found;
}

/* Adds id to the set of EOS ids (the union over the files that name them). */
static nl_status add_eos(tokenizer *t, int32_t id, const char *path)
{
    for (size_t i = 0; i < t->n_eos; i++)
        if (t->eos[i] == id) return NL_OK;
    if (t->n_eos == NL_MAX_EOS)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: EOS id %d: more than %d distinct EOS ids in "
                        "config.json, generation_config.json and tokenizer_config.json", path, id,
                        NL_MAX_EOS);
    t->eos[t->n_eos++] = id;
    return NL_OK;
}

/* "eos_token_id": 7 or [7, 8] in config.json / generation_config.json. */
static nl_status add_eos_ids(tokenizer *t, const json_t *v, const char *path)
{
    int32_t ids[NL_MAX_EOS], n;
    NL_TRY(model_config_parse_eos_ids(v, path, BPE_ID_LIMIT, ids, &n));
    for (int32_t i = 0; i < n; i++) NL_TRY(add_eos(t, ids[i], path));
    return NL_OK;
}

/* tokenizer_config.json's add_bos_token (add_eos_token), when present,
 * decides what the post-processor puts first (last) as transformers does
 * when it rebuilds the template from them: the bos_token (eos_token) alone,
 * or nothing.  Absent, the tokenizer.json template stands (Llama 3 has no
 * add_bos_token and its template adds <|begin_of_text|>). */
static nl_status apply_add_token_flag(tokenizer *t, const json_t *cfg, bool bos, const char *path)
{
    const char *flag = bos ? "add_bos_token" : "add_eos_token", *key = bos ? "bos_token" : "eos_token";
    const json_t *v = json_object_get(cfg, flag);
    if (!v || json_is_null(v)) return NL_OK;
    if (!json_is_boolean(v)) return nl_error(NL_ERR_FORMAT, "%s: \"%s\" is not true or false", path, flag);
    int32_t **list = bos ? &t->post_prefix : &t->post_suffix;
    size_t *n = bos ? &t->n_post_prefix : &t->n_post_suffix;
    *n = 0;
    if (json_is_false(v)) return NL_OK;
    const json_t *token = json_object_get(cfg, key);
    if (json_is_object(token)) token = json_object_get(token, "content");
    int32_t id;
    if (!json_is_string(token) || !token_id_of(t, json_string_value(token), json_string_length(token), &id))
        return nl_error(NL_ERR_FORMAT, "%s: \"%s\" is true but \"%s\" names no token of the vocabulary", path,
                        flag, key);
    int32_t *p = realloc(*list, sizeof *p);
    if (!p) return nl_error(NL_ERR_NOMEM, "%s: no memory for the post-processor", path);
    p[0] = id;
    *list = p;
    *n = 1;
    return NL_OK;
}

static nl_status load_tokenizer_config(tokenizer *t, const char *dir)
{
    char path[4096];
    json_t *cfg;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    /* Numbers here are never ids, and some do not fit 64 bits (Llama 3's
     * model_max_length is 1e30 written as an integer): read them as reals. */
    NL_TRY(nl_file_read_json_ex(path, false, JSON_DECODE_INT_AS_REAL, &cfg));
    if (!cfg) return NL_OK;
    nl_status st = load_added_tokens_decoder(t, json_object_get(cfg, "added_tokens_decoder"), path);
    const json_t *eos = json_object_get(cfg, "eos_token");
    if (json_is_object(eos)) eos = json_object_get(eos, "content");
    int32_t id;
    if (st == NL_OK && json_is_string(eos) &&
        token_id_of(t, json_string_value(eos), json_string_length(eos), &id))
        st = add_eos(t, id, path);
    if (st == NL_OK) st = apply_add_token_flag(t, cfg, true, path);
    if (st == NL_OK) st = apply_add_token_flag(t, cfg, false, path);
    json_decref(cfg);
    return st;
}

/* The chat template is loaded on its own (chat_template.c); a template that
 * fails to load leaves text prompts working and is reported on chat use. */
static nl_status load_chat_template(tokenizer *t, const char *dir)
{
    nl_status st = chat_template_load(dir, &t->chat);
    if (st == NL_OK || st == NL_ERR_NOMEM) return st;
    t->chat_status = st;
    t->chat_error = strdup(nl_last_error());
    if (!t->chat_error) return nl_error(NL_ERR_NOMEM, "tokenizer: no memory");
    nl_error_clear();
    return NL_OK;
}

static nl_status load_model_eos(tokenizer *t, const char *dir, const char *file)
{
    char path[4096];
    json_t *cfg;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    NL_TRY(nl_file_read_json(path, false, &cfg));
    if (!cfg) return NL_OK;
    nl_status st = add_eos_ids(t, json_object_get(cfg, "eos_token_id"), path);
    json_decref(cfg);
    return st;
}

static nl_status check_decoder(const json_t *decoder, const char *path)
{
    if (!decoder || json_is_null(decoder)) return NL_OK;
    const char *type = json_string_value(json_object_get(decoder, "type"));
    if (!type || strcmp(type, "ByteLevel") != 0)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: decoder type \"%s\" is not supported (only "
                        "ByteLevel)", path, type ? type : "(missing)");
    return NL_OK;
}

/* Appends the ids of one template piece {"SpecialToken": {"id": NAME}} to
 * *list, as the template's special_tokens map gives them. */
static nl_status append_template_ids(const json_t *specials, const char *name, int32_t **list,
                                     size_t *n, const char *path)
{
    const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(ids))
        return nl_error(NL_ERR_FORMAT, "%s: post_processor TemplateProcessing names special "
                        "token \"%s\" but special_tokens gives it no \"ids\"", path, name);
    size_t k = json_array_size(ids);
    int32_t *grown = realloc(*list, (*n + k + 1) * sizeof *grown);
    if (!grown) return nl_error(NL_ERR_NOMEM, "%s: no memory for the post-processor", path);
    *list = grown;
    for (size_t i = 0; i < k; i++) {
        const json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= BPE_ID_LIMIT)
            return nl_error(NL_ERR_FORMAT, "%s: post_processor special token \"%s\": ids[%zu] is "
                            "not a token id in [0, %d)", path, name, i, BPE_ID_LIMIT);
        (*list)[(*n)++] = (int32_t)json_integer_value(v);
    }
    return NL_OK;
}

/* TemplateProcessing's "single" template: special tokens around one
 * {"Sequence": {"id": "A"}}; the pair template is never used here. */
static nl_status load_template(tokenizer *t, const json_t *pp, const char *path)
{
    const json_t *single = json_object_get(pp, "single");
    const json_t *specials = json_object_get(pp, "special_tokens");
    if (!json_is_array(single))
        return nl_error(NL_ERR_FORMAT, "%s: post_processor TemplateProcessing has no \"single\" "
                        "array", path);
    int32_t *before = NULL, *after = NULL;
    size_t n_before = 0, n_after = 0;
    bool seen_sequence = false;
    nl_status st = NL_OK;
    for (size_t i = 0; st == NL_OK && i < json_array_size(single); i++) {
        const json_t *item = json_array_get(single, i);
        const json_t *seq = json_object_get(item, "Sequence");
        const char *name = json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
        if (seq && !seen_sequence) {
            seen_sequence = true;
        } else if (name) {
            st = seen_sequence ? append_template_ids(specials, name, &after, &n_after, path)
                               : append_template_ids(specials, name, &before, &n_before, path);
        } else {
            st = nl_error(NL_ERR_UNSUPPORTED, "%s: post_processor TemplateProcessing single[%zu] is "
                          "neither one Sequence nor a SpecialToken", path, i);
        }
    }
    if (st == NL_OK && !seen_sequence)
        st = nl_error(NL_ERR_FORMAT, "%s: post_processor TemplateProcessing single template has no "
                      "Sequence", path);
    /* A template inside a Sequence of processors wraps what came before. */
    if (st == NL_OK && n_before) {
        int32_t *p = realloc(before, (n_before + t->n_post_prefix + 1) * sizeof *p);
        if (!p) st = nl_error(NL_ERR_NOMEM, "%s: no memory for the post-processor", path);
        else {
            if (t->n_post_prefix) memcpy(p + n_before, t->post_prefix, t->n_post_prefix * sizeof *p);
            before = p;
            free(t->post_prefix);
            t->post_prefix = before, before = NULL;
            t->n_post_prefix += n_before;
        }
    }
    if (st == NL_OK && n_after) {
        int32_t *p = realloc(t->post_suffix, (t->n_post_suffix + n_after + 1) * sizeof *p);
        if (!p) st = nl_error(NL_ERR_NOMEM, "%s: no memory for the post-processor", path);
        else {
            memcpy(p + t->n_post_suffix, after, n_after * sizeof *p);
            t->post_suffix = p;
            t->n_post_suffix += n_after;
        }
    }
    free(before);
    free(after);
    return st;
}

/* post_processor: null, ByteLevel (it moves offsets only, which are not
 * kept), TemplateProcessing, or a Sequence of those. */
static nl_status load_post_processor(tokenizer *t, const json_t *pp, const char *path)
{
    if (!pp || json_is_null(pp)) return NL_OK;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) return nl_error(NL_ERR_FORMAT, "%s: post_processor has no \"type\"", path);
    if (!strcmp(type, "ByteLevel")) return NL_OK;
    if (!strcmp(type, "TemplateProcessing")) return load_template(t, pp, path);
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list))
            return nl_error(NL_ERR_FORMAT, "%s: post_processor Sequence has no \"processors\" "
                            "array", path);
        for (size_t i = 0; i < json_array_size(list); i++)
            NL_TRY(load_post_processor(t, json_array_get(list, i), path));
        return NL_OK;
    }
    return nl_error(NL_ERR_UNSUPPORTED, "%s: post_processor type \"%s\" is not supported "
                    "(supported: ByteLevel, TemplateProcessing, Sequence)", path, type);
}

/* Every id the template adds must be a token of the vocabulary. */
static nl_status check_post_ids(const tokenizer *t)
{
    for (size_t k = 0; k < t->n_post_prefix + t->n_post_suffix; k++) {
        int32_t id = k < t->n_post_prefix ? t->post_prefix[k] : t->post_suffix[k - t->n_post_prefix];
        if (!tokenizer_has_token(t, id))
            return nl_error(NL_ERR_FORMAT, "tokenizer.json: post_processor adds token id %d, which "
                            "is not in the vocabulary", id);
    }
    return NL_OK;
}

static nl_status load_tokenizer_json(tokenizer *t, const char *dir)
{
    char path[4096];
    json_t *root;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    NL_TRY(nl_file_read_json(path, true, &root));
    nl_status st = check_decoder(json_object_get(root, "decoder"), path);
    if (st == NL_OK) st = bpe_create(json_object_get(root, "model"), path, &t->model);
    if (st == NL_OK)
        st = pretokenizer_create(json_object_get(root, "normalizer"),
                                 json_object_get(root, "pre_tokenizer"), path, &t->pre);
    if (st == NL_OK) st = load_added_tokens(t, json_object_get(root, "added_tokens"), path);
    if (st == NL_OK) st = load_post_processor(t, json_object_get(root, "post_processor"), path);
    json_decref(root);
    return st;
}

nl_status tokenizer_load(const char *dir, tokenizer **out)
{
    *out = NULL;
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nl_error(NL_ERR_NOMEM, "tokenizer: no memory");
    nl_status st = load_tokenizer_json(t, dir);
    if (st == NL_OK) st = load_model_eos(t, dir, "config.json");
    if (st == NL_OK) st = load_model_eos(t, dir, "generation_config.json");
    if (st == NL_OK) st = load_tokenizer_config(t, dir);
    if (st == NL_OK) st = load_chat_template(t, dir);
    if (st == NL_OK) st = index_added_tokens(t);
    if (st == NL_OK) st = check_post_ids(t);
    if (st != NL_OK) {
        tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return NL_OK;
}

void tokenizer_destroy(tokenizer *t)
{
    if (!t) return;
    bpe_destroy(t->model);
    pretokenizer_destroy(t->pre);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].bytes);
    }
    free(t->added);
    free(t->by_first_byte);
    free(t->added_of_id);
    chat_template_destroy(t->chat);
    free(t->chat_error);
    free(t->post_prefix);
    free(t->post_suffix);
    free(t);
}

int32_t tokenizer_vocab_size(const tokenizer *t)
{
    return t->vocab_size;
}

size_t tokenizer_eos_ids(const tokenizer *t, int32_t *out, size_t cap)
{
    size_t n = t->n_eos < cap ? t->n_eos : cap;
    memcpy(out, t->eos, n * sizeof *out);
    return t->n_eos;
}

bool tokenizer_is_special(const tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->vocab_size || t->added_of_id[id] < 0) return false;
    return t->added[t->added_of_id[id]].special;
}

bool tokenizer_has_token(const tokenizer *t, int32_t id)
{
    size_t len;
    if (id < 0 || id >= t->vocab_size) return false;
    return t->added_of_id[id] >= 0 || bpe_token_bytes(t->model, id, &len) != NULL;
}

const chat_template *tokenizer_chat_template(const tokenizer *t)
{
    return t->chat;
}

/* ---- encoding ---- */

typedef struct encode_ctx {
    tokenizer *t;
    bpe_ids ids;
    bool match_special;
} encode_ctx;

/* Rust's char::is_whitespace: the Unicode White_Space property. */
static bool is_white_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_word_char(int32_t c)
{
    if (c == '_') return true;
    utf8proc_category_t cat = utf8proc_category(c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static int32_t char_at(const char *s, size_t len, size_t i, size_t *n)
{
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(len - i), &c);
    *n = k > 0 ? (size_t)k : 1;
    return c;
}

static size_t char_start_before(const char *s, size_t i)
{
    do i--; while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

/* Leftmost, then longest, added token of the given kind at or after from. */
static const added_token *find_added(const tokenizer *t, const char *text, size_t len, size_t from,
                                     bool normalized, size_t *at)
{
    for (size_t i = from; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        for (size_t k = t->first_start[c]; k < t->first_start[c + 1]; k++) {
            const added_token *a = &t->added[t->by_first_byte[k]];
            if (a->normalized == normalized && a->len <= len - i && memcmp(text + i, a->content, a->len) == 0) {
                *at = i;
                return a;
            }
        }
    }
    return NULL;
}

static nl_status encode_word(void *user, const char *word, size_t len)
{
    encode_ctx *ctx = user;
    return bpe_encode_word(ctx->t->model, (const uint8_t *)word, len, &ctx->ids);
}

typedef nl_status (*text_fn)(encode_ctx *ctx, const char *text, size_t len);

/* Cuts text at the added tokens of one kind, appending their ids and handing
 * the text between them to on_text; lstrip/rstrip/single_word as Hugging
 * Face's added vocabulary applies them. */
static nl_status split_added(encode_ctx *ctx, const char *text, size_t len, bool normalized, text_fn on_text)
{
    const tokenizer *t = ctx->t;
    size_t pos = 0, done = 0;
    const added_token *a;
    size_t at;
    while (pos < len && (a = find_added(t, text, len, pos, normalized, &at))) {
        size_t start = at, stop = at + a->len, n;
        pos = stop;
        if (a->special && !ctx->match_special) continue;
        if (a->single_word) {
            bool word_before = start > 0 && is_word_char(char_at(text, len, char_start_before(text, start), &n));
            bool word_after = stop < len && is_word_char(char_at(text, len, stop, &n));
            if (word_before || word_after) continue;
        }
        if (a->lstrip) {
            while (start > done) {
                size_t prev = char_start_before(text, start);
                if (!is_white_space(char_at(text, len, prev, &n))) break;
                start = prev;
            }
        }
        if (a->rstrip) {
            while (stop < len && is_white_space(char_at(text, len, stop, &n))) stop += n;
            pos = stop;
        }
        if (start > done) NL_TRY(on_text(ctx, text + done, start - done));
        NL_TRY(bpe_ids_push(&ctx->ids, a->id));
        done = stop;
    }
    if (done < len) NL_TRY(on_text(ctx, text + done, len - done));
    return NL_OK;
}

static nl_status encode_normalized_text(encode_ctx *ctx, const char *text, size_t len)
{
    return pretokenizer_split(ctx->t->pre, text, len, encode_word, ctx);
}

static nl_status encode_raw_text(encode_ctx *ctx, const char *text, size_t len)
{
    const char *norm;
    size_t norm_len;
    bool allocated;
    NL_TRY(pretokenizer_normalize(ctx->t->pre, text, len, &norm, &norm_len, &allocated));
    nl_status st = ctx->t->any_normalized
        ? split_added(ctx, norm, norm_len, true, encode_normalized_text)
        : encode_normalized_text(ctx, norm, norm_len);
    if (allocated) free((void *)norm);
    return st;
}

nl_status tokenizer_encode_ex(tokenizer *t, const char *text, size_t len, bool match_special,
                              bool add_special, int32_t **ids, size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    size_t bad;
    if (!utf8_validate(text, len, &bad))
        return nl_error(NL_ERR_INVALID_ARG, "encode: invalid UTF-8 at byte offset %zu (0x%02X)", bad,
                        (unsigned char)text[bad]);
    encode_ctx ctx = {.t = t, .match_special = match_special};
    NL_TRY(bpe_ids_push(&ctx.ids, 0)); /* so that an empty result is still a malloc'd array */
    ctx.ids.n = 0;
    nl_status st = add_special ? bpe_ids_append(&ctx.ids, t->post_prefix, t->n_post_prefix) : NL_OK;
    if (st == NL_OK) st = split_added(&ctx, text, len, false, encode_raw_text);
    if (st == NL_OK && add_special) st = bpe_ids_append(&ctx.ids, t->post_suffix, t->n_post_suffix);
    if (st != NL_OK) {
        free(ctx.ids.v);
        return st;
    }
    *ids = ctx.ids.v;
    *n_ids = ctx.ids.n;
    return NL_OK;
}

nl_status tokenizer_encode(tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids)
{
    return tokenizer_encode_ex(t, text, len, true, true, ids, n_ids);
}

nl_status tokenizer_encode_flags(tokenizer *t, const char *text, size_t len, uint32_t flags, int32_t **ids,
                                 size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    uint32_t known = NL_ENCODE_NO_SPECIAL | NL_ENCODE_REPLACE_INVALID | NL_ENCODE_NO_ADD_SPECIAL;
    if (flags & ~known) return nl_error(NL_ERR_INVALID_ARG, "encode: unknown flags 0x%x", flags & ~known);
    bool match_special = !(flags & NL_ENCODE_NO_SPECIAL);
    bool add_special = !(flags & NL_ENCODE_NO_ADD_SPECIAL);
    if (!(flags & NL_ENCODE_REPLACE_INVALID))
        return tokenizer_encode_ex(t, text, len, match_special, add_special, ids, n_ids);
    /* One bad byte becomes the three bytes of U+FFFD. */
    if (len > (SIZE_MAX - 1) / 3) return nl_error(NL_ERR_NOMEM, "encode: %zu bytes of text", len);
    char *fixed = malloc(3 * len + 1);
    if (!fixed) return nl_error(NL_ERR_NOMEM, "encode: no memory for %zu bytes", 3 * len);
    size_t fixed_len = utf8_render_lossy((const uint8_t *)text, len, fixed);
    nl_status st = tokenizer_encode_ex(t, fixed, fixed_len, match_special, add_special, ids, n_ids);
    free(fixed);
    return st;
}

nl_status tokenizer_encode_chat(tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids)
{
    return tokenizer_encode_ex(t, text, len, true, false, ids, n_ids);
}

/* ---- decoding ---- */

nl_status tokenizer_token_bytes(const tokenizer *t, int32_t id, bool skip_special,
                                const char **bytes, size_t *len)
{
    if (id >= 0 && id < t->vocab_size && t->added_of_id[id] >= 0) {
        const added_token *a = &t->added[t->added_of_id[id]];
        *bytes = a->bytes;
        *len = skip_special && a->special ? 0 : a->n_bytes;
        return NL_OK;
    }
    const char *b = id >= 0 ? bpe_token_bytes(t->model, id, len) : NULL;
    if (!b)
        return nl_error(NL_ERR_INVALID_ARG, "token id %d is not in the vocabulary (size %d)", id,
                        t->vocab_size);
    *bytes = b;
    return NL_OK;
}

nl_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special, char **text)
{
    size_t len;
    return tokenizer_decode_n(t, ids, n_ids, skip_special, text, &len);
}

nl_status tokenizer_decode_n(const tokenizer *t, const int32_t *ids, size_t n_ids, bool skip_special,
                             char **text, size_t *text_len)
{
    *text = NULL;
    *text_len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const char *b;
        size_t n;
        nl_status st = tokenizer_token_bytes(t, ids[i], skip_special, &b, &n);
        if (st != NL_OK) return nl_error_prefix(st, "decode: position %zu: ", i);
        total += n;
    }
    char *raw = malloc(total + 1);
    char *out = malloc(3 * total + 1); /* each bad byte may become 3 bytes of U+FFFD */
    if (!raw || !out) {
        free(raw);
        free(out);
        return nl_error(NL_ERR_NOMEM, "decode: no memory for %zu bytes of text", total);
    }
    size_t at = 0;
    for (size_t i = 0; i < n_ids; i++) {
        const char *b;
        size_t n;
        tokenizer_token_bytes(t, ids[i], skip_special, &b, &n);
        memcpy(raw + at, b, n);
        at += n;
    }
    size_t len = utf8_render_lossy((const uint8_t *)raw, total, out);
    free(raw);
    out[len] = '\0';
    char *shrunk = realloc(out, len + 1);
    *text = shrunk ? shrunk : out;
    *text_len = len;
    return NL_OK;
}

static nl_status chat_available(const tokenizer *t)
{
    if (t->chat_error) return nl_error(t->chat_status, "chat: %s", t->chat_error);
    if (!t->chat)
        return nl_error(NL_ERR_UNSUPPORTED, "chat: the model has no chat_template (tokenizer_config.json "
                        "or chat_template.jinja)");
    return NL_OK;
}

nl_status tokenizer_apply_chat_template(const tokenizer *t, const nl_chat_message *msgs, size_t n_msgs,
                                        bool add_generation_prompt, bool enable_thinking, char **out)
{
    *out = NULL;
    NL_TRY(chat_available(t));
    return chat_template_render(t->chat, msgs, n_msgs, add_generation_prompt, enable_thinking, out);
}

nl_status tokenizer_apply_chat_request(const tokenizer *t, const char *request_json, bool as_server,
                                       char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    NL_TRY(chat_available(t));
    json_error_t jerr;
    json_t *request = json_loads(request_json, JSON_ALLOW_NUL, &jerr); /* "\u0000" is text like any other */
    if (!request)
        return nl_error(NL_ERR_INVALID_ARG, "chat: bad JSON at line %d column %d: %s", jerr.line, jerr.column,
                        jerr.text);
    nl_status st = as_server ? chat_request_decode_tool_arguments(request) : NL_OK;
    if (st == NL_OK) st = chat_template_render_request(t->chat, request, out, len, NULL);
    json_decref(request);
    return st;
}
