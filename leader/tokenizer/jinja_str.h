/* jinja_str.h — Python str operations on UTF-8 text (jinja_str.c). */
#ifndef NL_LEADER_JINJA_STR_H
#define NL_LEADER_JINJA_STR_H

#include "leader/tokenizer/jinja_internal.h"

typedef enum jstr_case_mode {
    JSTR_LOWER,
    JSTR_UPPER,
    JSTR_TITLE_WORDS, /* str.title() */
    JSTR_CAPITALIZE,  /* str.capitalize() */
    JSTR_JINJA_TITLE, /* jinja2's title filter: words split at -, whitespace and ({[< */
} jstr_case_mode;

/* The code point at s[*i] (U+FFFD for a bad byte), advancing *i. */
int32_t jstr_next_cp(const char *s, size_t n, size_t *i);
void jstr_put_cp(jctx *c, jbuf *b, int32_t cp);
bool jstr_isspace(int32_t cp);
bool jstr_is_cased(int32_t cp);
/* The first occurrence of nd in h, or NULL; an empty nd is found at h. */
const char *jstr_find(const char *h, size_t hn, const char *nd, size_t nn);
/* str.strip/lstrip/rstrip(chars); chars NULL strips whitespace. */
jv jstr_strip(jctx *c, const jv_str *s, const jv_str *chars, bool left, bool right);
jv jstr_case(jctx *c, const jv_str *s, jstr_case_mode mode);
/* str.replace(old, new, count); count < 0: all. */
jv jstr_replace(jctx *c, const jv_str *s, const jv_str *old, const jv_str *new_, int64_t count);
/* str.split / str.rsplit(sep, maxsplit); sep NULL splits at whitespace runs. */
jv jstr_split(jctx *c, const jv_str *s, const jv_str *sep, int64_t maxsplit, bool from_right);
/* str.splitlines() of s + "\n", as jinja2's indent filter uses it. */
jv jstr_splitlines(jctx *c, const jv_str *s);

#endif /* NL_LEADER_JINJA_STR_H */
