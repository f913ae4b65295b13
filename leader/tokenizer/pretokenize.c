/* pretokenize.c — normalisation and regex word splitting (see header).
 *
 * The split patterns are compiled exactly as tokenizer.json writes them;
 * PCRE2 with UTF and UCP gives \s, \p{L}, \p{N} and (?i:) their Unicode
 * meaning, as the Oniguruma engine behind Hugging Face does.
 */
#include "leader/tokenizer/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/status.h"

#define MAX_NORMALIZERS 8
#define MAX_SPLITS 8

/* What ByteLevel with use_regex true splits on (GPT-2's pattern). */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct split_step {
    pcre2_code *code;
    pcre2_match_data *match;
    bool jit;
} split_step;

struct pretokenizer {
    utf8proc_option_t norm[MAX_NORMALIZERS]; /* applied in order */
    int n_norm;
    split_step splits[MAX_SPLITS];           /* applied in order, each to the pieces of the last */
    int n_splits;
};

/* ---- normalizer ---- */

static nl_status add_normalizer(pretokenizer *p, const json_t *n, const char *path)
{
    if (!n || json_is_null(n)) return NL_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type) return nl_error(NL_ERR_FORMAT, "%s: normalizer has no \"type\"", path);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return nl_error(NL_ERR_FORMAT, "%s: normalizer Sequence has no \"normalizers\" array", path);
        for (size_t i = 0; i < json_array_size(list); i++)
            NL_TRY(add_normalizer(p, json_array_get(list, i), path));
        return NL_OK;
    }
    utf8proc_option_t opt;
    if (strcmp(type, "NFC") == 0) opt = UTF8PROC_COMPOSE;
    else if (strcmp(type, "NFD") == 0) opt = UTF8PROC_DECOMPOSE;
    else if (strcmp(type, "NFKC") == 0) opt = UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    else if (strcmp(type, "NFKD") == 0) opt = UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    else
        return nl_error(NL_ERR_UNSUPPORTED, "%s: normalizer type \"%s\" is not supported "
                        "(supported: NFC, NFD, NFKC, NFKD, Sequence)", path, type);
    if (p->n_norm == MAX_NORMALIZERS)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: more than %d normalizers", path, MAX_NORMALIZERS);
    p->norm[p->n_norm++] = (utf8proc_option_t)(opt | UTF8PROC_STABLE);
    return NL_OK;
}

nl_status pretokenizer_normalize(const pretokenizer *p, const char *text, size_t len,
                                 const char **out, size_t *out_len, bool *allocated)
{
    *out = text;
    *out_len = len;
    *allocated = false;
    if (p->n_norm == 0) return NL_OK;
    bool ascii = true; /* every normal form leaves ASCII alone */
    for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)text[i] < 0x80;
    if (ascii) return NL_OK;
    for (int i = 0; i < p->n_norm; i++) {
        utf8proc_uint8_t *dst = NULL;
        utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)*out, (utf8proc_ssize_t)*out_len,
                                          &dst, p->norm[i]);
        if (*allocated) free((void *)*out);
        if (n < 0) {
            *allocated = false;
            return nl_error(n == UTF8PROC_ERROR_NOMEM ? NL_ERR_NOMEM : NL_ERR_INVALID_ARG,
                            "normalizing %zu bytes of text: %s", len, utf8proc_errmsg(n));
        }
        *out = (const char *)dst;
        *out_len = (size_t)n;
        *allocated = true;
    }
    return NL_OK;
}

/* ---- pre-tokenizer ---- */

static nl_status add_split(pretokenizer *p, const char *pattern, size_t len, bool literal,
                           const char *path)
{
    if (p->n_splits == MAX_SPLITS)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: more than %d Split pre-tokenizers", path, MAX_SPLITS);
    int err;
    PCRE2_SIZE err_off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &err_off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return nl_error(NL_ERR_FORMAT, "%s: pre_tokenizer pattern /%.*s/ does not compile at "
                        "offset %zu: %s", path, (int)len, pattern, (size_t)err_off, (char *)msg);
    }
    split_step *s = &p->splits[p->n_splits++];
    s->code = code;
    s->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    s->match = pcre2_match_data_create_from_pattern(code, NULL);
    if (!s->match) return nl_error(NL_ERR_NOMEM, "%s: no memory for regex match data", path);
    return NL_OK;
}

static nl_status add_pre_tokenizer(pretokenizer *p, const json_t *pt, const char *path,
                                   bool *saw_byte_level)
{
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (!type) return nl_error(NL_ERR_FORMAT, "%s: pre_tokenizer has no \"type\"", path);
    if (*saw_byte_level)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: pre_tokenizer \"%s\" after ByteLevel is not "
                        "supported", path, type);
    if (strcmp(type, "Split") == 0) {
        const char *behavior = json_string_value(json_object_get(pt, "behavior"));
        if (!behavior || strcmp(behavior, "Isolated") != 0)
            return nl_error(NL_ERR_UNSUPPORTED, "%s: Split behavior \"%s\" is not supported (only "
                            "\"Isolated\")", path, behavior ? behavior : "(missing)");
        if (json_is_true(json_object_get(pt, "invert")))
            return nl_error(NL_ERR_UNSUPPORTED, "%s: Split with invert true is not supported", path);
        const json_t *pattern = json_object_get(pt, "pattern");
        const json_t *regex = json_object_get(pattern, "Regex");
        const json_t *literal = json_object_get(pattern, "String");
        if (json_is_string(regex))
            return add_split(p, json_string_value(regex), json_string_length(regex), false, path);
        if (json_is_string(literal))
            return add_split(p, json_string_value(literal), json_string_length(literal), true, path);
        return nl_error(NL_ERR_FORMAT, "%s: Split pattern is neither {\"Regex\": ...} nor "
                        "{\"String\": ...}", path);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(pt, "add_prefix_space")))
            return nl_error(NL_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space true is not "
                            "supported", path);
        const json_t *use_regex = json_object_get(pt, "use_regex");
        if (!use_regex || json_is_true(use_regex)) /* the default is true */
            NL_TRY(add_split(p, gpt2_pattern, strlen(gpt2_pattern), false, path));
        *saw_byte_level = true;
        return NL_OK;
    }
    return nl_error(NL_ERR_UNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported "
                    "(supported: Sequence of Split, ByteLevel)", path, type);
}

nl_status pretokenizer_create(const json_t *normalizer, const json_t *pre_tokenizer,
                              const char *path, pretokenizer **out)
{
    *out = NULL;
    pretokenizer *p = calloc(1, sizeof *p);
    if (!p) return nl_error(NL_ERR_NOMEM, "%s: no memory for the pre-tokenizer", path);
    nl_status st = add_normalizer(p, normalizer, path);
    bool saw_byte_level = false;
    if (st == NL_OK && !json_is_object(pre_tokenizer))
        st = nl_error(NL_ERR_UNSUPPORTED, "%s: pre_tokenizer is missing; only byte-level "
                      "tokenizers are supported", path);
    if (st == NL_OK) {
        const char *type = json_string_value(json_object_get(pre_tokenizer, "type"));
        if (type && strcmp(type, "Sequence") == 0) {
            const json_t *list = json_object_get(pre_tokenizer, "pretokenizers");
            size_t n = json_array_size(list);
            for (size_t i = 0; st == NL_OK && i < n; i++)
                st = add_pre_tokenizer(p, json_array_get(list, i), path, &saw_byte_level);
        } else {
            st = add_pre_tokenizer(p, pre_tokenizer, path, &saw_byte_level);
        }
    }
    if (st == NL_OK && !saw_byte_level)
        st = nl_error(NL_ERR_UNSUPPORTED, "%s: pre_tokenizer has no ByteLevel step; only "
                      "byte-level tokenizers are supported", path);
    if (st != NL_OK) {
        pretokenizer_destroy(p);
        return st;
    }
    *out = p;
    return NL_OK;
}

void pretokenizer_destroy(pretokenizer *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_splits; i++) {
        pcre2_match_data_free(p->splits[i].match);
        pcre2_code_free(p->splits[i].code);
    }
    free(p);
}

static size_t utf8_char_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* Splits text with step `level` and hands each piece to the next step;
 * matches and the gaps between them are both pieces ("Isolated"). */
static nl_status split_level(pretokenizer *p, int level, const char *text, size_t len,
                             pretokenizer_word_fn fn, void *user)
{
    if (len == 0) return NL_OK;
    if (level == p->n_splits) return fn(user, text, len);
    split_step *s = &p->splits[level];
    size_t start = 0, gap = 0;
    while (start < len) {
        int rc = s->jit
            ? pcre2_jit_match(s->code, (PCRE2_SPTR)text, len, start, 0, s->match, NULL)
            : pcre2_match(s->code, (PCRE2_SPTR)text, len, start, PCRE2_NO_UTF_CHECK, s->match, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return nl_error(NL_ERR_RUNTIME, "pre-tokenizer regex failed at byte %zu: %s", start,
                            (char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->match);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing */
            if (ms >= len) break;
            start = ms + utf8_char_len((unsigned char)text[ms]);
            continue;
        }
        if (ms > gap) NL_TRY(split_level(p, level + 1, text + gap, ms - gap, fn, user));
        NL_TRY(split_level(p, level + 1, text + ms, me - ms, fn, user));
        gap = start = me;
    }
    if (gap < len) NL_TRY(split_level(p, level + 1, text + gap, len - gap, fn, user));
    return NL_OK;
}

nl_status pretokenizer_split(pretokenizer *p, const char *text, size_t len,
                             pretokenizer_word_fn fn, void *user)
{
    return split_level(p, 0, text, len, fn, user);
}
