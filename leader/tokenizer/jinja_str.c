/* jinja_str.c — Python's str operations on UTF-8 text, code point by code
 * point as CPython does them: whitespace as str.isspace() knows it, strip,
 * split, splitlines, replace, and the full case mappings of lower(),
 * upper(), title() and capitalize() (plus jinja2's own title filter).  Used
 * by the filters and by the str methods templates call. */
#include <string.h>
#include <utf8proc.h>

#include "leader/tokenizer/jinja_internal.h"
#include "leader/tokenizer/jinja_str.h"

int32_t jstr_next_cp(const char *s, size_t n, size_t *i)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &cp);
    if (k <= 0) {
        *i += 1;
        return 0xFFFD;
    }
    *i += (size_t)k;
    return cp;
}

void jstr_put_cp(jctx *c, jbuf *b, int32_t cp)
{
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    jbuf_put(c, b, (const char *)tmp, (size_t)k);
}

/* str.isspace() of one code point, as CPython defines whitespace. */
bool jstr_isspace(int32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static bool in_chars(int32_t cp, const jv_str *chars)
{
    for (size_t i = 0; i < chars->len;)
        if (jstr_next_cp(chars->s, chars->len, &i) == cp) return true;
    return false;
}

/* str.strip/lstrip/rstrip(chars): chars NULL strips whitespace. */
jv jstr_strip(jctx *c, const jv_str *s, const jv_str *chars, bool left, bool right)
{
    size_t from = 0, to = s->len;
    if (left) {
        while (from < to) {
            size_t i = from;
            int32_t cp = jstr_next_cp(s->s, s->len, &i);
            if (chars ? !in_chars(cp, chars) : !jstr_isspace(cp)) break;
            from = i;
        }
    }
    if (right) {
        while (to > from) {
            size_t start = to - 1;
            while (start > from && ((unsigned char)s->s[start] & 0xC0) == 0x80) start--;
            size_t i = start;
            int32_t cp = jstr_next_cp(s->s, s->len, &i);
            if (chars ? !in_chars(cp, chars) : !jstr_isspace(cp)) break;
            to = start;
        }
    }
    return jv_strn(c, s->s + from, to - from);
}

bool jstr_is_cased(int32_t cp)
{
    return utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}

static bool jinja_title_sep(int32_t cp)
{
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jstr_isspace(cp);
}

/* Python's full case mappings where they differ from the one-to-one ones
 * utf8proc gives (SpecialCasing.txt, the unconditional entries). */
typedef struct special_case {
    int32_t cp;
    const char *lower, *upper, *title;
} special_case;

static const special_case special_cases[] = {
    {0x00DF, NULL, "SS", "Ss"},           {0x0130, "i\xcc\x87", NULL, NULL},
    {0x0149, NULL, "\xca\xbcN", "\xca\xbcN"}, {0x01F0, NULL, "J\xcc\x8c", "J\xcc\x8c"},
    {0xFB00, NULL, "FF", "Ff"},           {0xFB01, NULL, "FI", "Fi"},
    {0xFB02, NULL, "FL", "Fl"},           {0xFB03, NULL, "FFI", "Ffi"},
    {0xFB04, NULL, "FFL", "Ffl"},         {0xFB05, NULL, "ST", "St"},
    {0xFB06, NULL, "ST", "St"},
};

/* Appends cp in lower (0), upper (1) or title (2) case. */
static void put_case(jctx *c, jbuf *b, int32_t cp, int which)
{
    for (size_t i = 0; i < sizeof special_cases / sizeof special_cases[0]; i++) {
        if (special_cases[i].cp != cp) continue;
        const char *m = which == 0 ? special_cases[i].lower : which == 1 ? special_cases[i].upper
                      : special_cases[i].title;
        if (m) {
            jbuf_puts(c, b, m);
            return;
        }
    }
    jstr_put_cp(c, b, which == 0 ? utf8proc_tolower(cp) : which == 1 ? utf8proc_toupper(cp) : utf8proc_totitle(cp));
}

jv jstr_case(jctx *c, const jv_str *s, jstr_case_mode mode)
{
    jbuf b = {0};
    bool start = true; /* at the start of a word (title) or of the string (capitalize) */
    jbuf_put(c, &b, "", 0);
    for (size_t i = 0; i < s->len;) {
        int32_t cp = jstr_next_cp(s->s, s->len, &i);
        int which = 0; /* lower, upper, title; -1 = as is */
        switch (mode) {
        case JSTR_LOWER: which = 0; break;
        case JSTR_UPPER: which = 1; break;
        case JSTR_CAPITALIZE: /* str.capitalize(): the first character in title case */
            which = start ? 2 : 0;
            start = false;
            break;
        case JSTR_TITLE_WORDS: /* str.title(): a cased letter after an uncased one starts a word */
            which = start ? 2 : 0;
            start = !jstr_is_cased(cp);
            break;
        case JSTR_JINJA_TITLE: /* jinja2's title: words split at -, whitespace and ({[<; upper() first */
            if (jinja_title_sep(cp)) {
                start = true;
                which = -1;
            } else {
                which = start ? 1 : 0;
                start = false;
            }
            break;
        }
        if (which < 0) jstr_put_cp(c, &b, cp);
        else put_case(c, &b, cp, which);
    }
    return jbuf_take(c, &b);
}

const char *jstr_find(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

jv jstr_replace(jctx *c, const jv_str *s, const jv_str *old, const jv_str *new_, int64_t count)
{
    jbuf b = {0};
    if (old->len == 0) { /* Python inserts between every code point */
        int64_t done = 0;
        size_t i = 0;
        if (count != 0) {
            jbuf_put(c, &b, new_->s, new_->len);
            done++;
        }
        while (i < s->len) {
            size_t from = i;
            jstr_next_cp(s->s, s->len, &i);
            jbuf_put(c, &b, s->s + from, i - from);
            if (count < 0 || done < count) {
                jbuf_put(c, &b, new_->s, new_->len);
                done++;
            }
        }
        return jbuf_take(c, &b);
    }
    size_t at = 0;
    for (int64_t done = 0; count < 0 || done < count; done++) {
        const char *hit = jstr_find(s->s + at, s->len - at, old->s, old->len);
        if (!hit) break;
        jbuf_put(c, &b, s->s + at, (size_t)(hit - (s->s + at)));
        jbuf_put(c, &b, new_->s, new_->len);
        at = (size_t)(hit - s->s) + old->len;
    }
    jbuf_put(c, &b, s->s + at, s->len - at);
    return jbuf_take(c, &b);
}

/* str.split / str.rsplit */
jv jstr_split(jctx *c, const jv_str *s, const jv_str *sep, int64_t maxsplit, bool from_right)
{
    jv out = jv_list_new(c, 8);
    if (sep) {
        if (from_right && maxsplit >= 0) {
            /* collect from the right, then reverse */
            jv rev = jv_list_new(c, 8);
            size_t end = s->len;
            int64_t done = 0;
            while (done < maxsplit) {
                const char *hit = NULL;
                for (size_t i = end; i >= sep->len && i - sep->len + 1 > 0; i--) {
                    if (memcmp(s->s + i - sep->len, sep->s, sep->len) == 0) {
                        hit = s->s + i - sep->len;
                        break;
                    }
                    if (i == sep->len) break;
                }
                if (!hit) break;
                size_t after = (size_t)(hit - s->s) + sep->len;
                jv_list_push(c, rev, jv_strn(c, s->s + after, end - after));
                end = (size_t)(hit - s->s);
                done++;
            }
            jv_list_push(c, out, jv_strn(c, s->s, end));
            for (size_t i = rev.u.l->n; i-- > 0;) jv_list_push(c, out, rev.u.l->items[i]);
            return out;
        }
        size_t at = 0;
        for (int64_t done = 0; maxsplit < 0 || done < maxsplit; done++) {
            const char *hit = jstr_find(s->s + at, s->len - at, sep->s, sep->len);
            if (!hit) break;
            jv_list_push(c, out, jv_strn(c, s->s + at, (size_t)(hit - (s->s + at))));
            at = (size_t)(hit - s->s) + sep->len;
        }
        jv_list_push(c, out, jv_strn(c, s->s + at, s->len - at));
        return out;
    }
    /* whitespace runs; leading/trailing whitespace gives no empty parts */
    if (from_right && maxsplit >= 0) {
        jv rev = jv_list_new(c, 8);
        size_t end = s->len;
        int64_t done = 0;
        for (;;) {
            while (end > 0 && jstr_isspace((unsigned char)s->s[end - 1])) end--;
            if (end == 0) break;
            size_t start = end;
            while (start > 0 && !jstr_isspace((unsigned char)s->s[start - 1])) start--;
            if (done == maxsplit) {
                jv_list_push(c, rev, jv_strn(c, s->s, end));
                break;
            }
            jv_list_push(c, rev, jv_strn(c, s->s + start, end - start));
            end = start;
            done++;
        }
        for (size_t i = rev.u.l->n; i-- > 0;) jv_list_push(c, out, rev.u.l->items[i]);
        return out;
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        while (i < s->len) {
            size_t k = i;
            if (!jstr_isspace(jstr_next_cp(s->s, s->len, &k))) break;
            i = k;
        }
        if (i >= s->len) break;
        if (maxsplit >= 0 && done == maxsplit) {
            size_t end = s->len;
            while (end > i && jstr_isspace((unsigned char)s->s[end - 1])) end--;
            jv_list_push(c, out, jv_strn(c, s->s + i, end - i));
            break;
        }
        size_t start = i;
        while (i < s->len) {
            size_t k = i;
            if (jstr_isspace(jstr_next_cp(s->s, s->len, &k))) break;
            i = k;
        }
        jv_list_push(c, out, jv_strn(c, s->s + start, i - start));
        done++;
    }
    return out;
}

/* str.splitlines() of s + "\n": Python's line boundaries, the ends dropped. */
jv jstr_splitlines(jctx *c, const jv_str *s)
{
    jv out = jv_list_new(c, 8);
    size_t start = 0;
    for (size_t i = 0; i < s->len;) {
        size_t at = i;
        int32_t cp = jstr_next_cp(s->s, s->len, &i);
        bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                   cp == 0x85 || cp == 0x2028 || cp == 0x2029;
        if (!brk) continue;
        jv_list_push(c, out, jv_strn(c, s->s + start, at - start));
        if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
        start = i;
    }
    jv_list_push(c, out, jv_strn(c, s->s + start, s->len - start)); /* the line the added "\n" ends */
    return out;
}
