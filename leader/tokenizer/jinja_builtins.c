/* jinja_builtins.c — what templates call by name: jinja2's filters and
 * tests, the str and dict methods Python would run (startswith, split,
 * strip, get, items ...), the global functions transformers provides
 * (raise_exception, strftime_now) with jinja2's own (namespace, range, dict),
 * and attribute/item lookup as jinja2's sandboxed environment resolves it.
 * Undefined values behave as jinja2's default Undefined: empty when printed
 * or iterated, false, and an error when an attribute is taken from them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "leader/tokenizer/jinja_internal.h"

/* ---- argument helpers ---- */

typedef struct args {
    jctx *c;
    const jnode *n;
    const char *what; /* "filter 'replace'" */
    const jv *pos;
    size_t npos;
    const char **kwnames;
    const jv *kw;
    size_t nkw;
} args;

/* Argument i (after the value) by position or by keyword name; def when absent. */
static jv arg(const args *a, size_t i, const char *name, jv def)
{
    if (i < a->npos) return a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (name && !strcmp(a->kwnames[k], name)) return a->kw[k];
    return def;
}

static void check_arity(const args *a, size_t max, const char *const *names)
{
    if (a->npos > max)
        jinja_fail(a->c, a->n->line, "%s takes at most %zu argument(s), %zu given", a->what, max, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; names && names[i]; i++) known = known || !strcmp(names[i], a->kwnames[k]);
        if (!known) jinja_fail(a->c, a->n->line, "%s got an unexpected keyword argument '%s'", a->what, a->kwnames[k]);
    }
}

static jv_str *str_arg(const args *a, jv v, const char *name)
{
    if (v.kind != JV_STR)
        jinja_fail(a->c, a->n->line, "%s: %s must be a string, not %s", a->what, name, jv_kind_name(&v));
    return v.u.s;
}

static bool is_intlike(const jv *v)
{
    return v->kind == JV_INT || v->kind == JV_BOOL;
}

static int64_t ival(const jv *v)
{
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

static int64_t int_arg(const args *a, jv v, const char *name)
{
    if (!is_intlike(&v))
        jinja_fail(a->c, a->n->line, "%s: %s must be an integer, not %s", a->what, name, jv_kind_name(&v));
    return ival(&v);
}

/* ---- Unicode-aware string pieces ---- */

static int32_t next_cp(const char *s, size_t n, size_t *i)
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

static void put_cp(jctx *c, jbuf *b, int32_t cp)
{
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    jbuf_put(c, b, (const char *)tmp, (size_t)k);
}

/* str.isspace() of one code point, as CPython defines whitespace. */
static bool py_space(int32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static bool in_chars(int32_t cp, const jv_str *chars)
{
    for (size_t i = 0; i < chars->len;)
        if (next_cp(chars->s, chars->len, &i) == cp) return true;
    return false;
}

/* str.strip/lstrip/rstrip(chars): chars NULL strips whitespace. */
static jv strip(jctx *c, const jv_str *s, const jv_str *chars, bool left, bool right)
{
    size_t from = 0, to = s->len;
    if (left) {
        while (from < to) {
            size_t i = from;
            int32_t cp = next_cp(s->s, s->len, &i);
            if (chars ? !in_chars(cp, chars) : !py_space(cp)) break;
            from = i;
        }
    }
    if (right) {
        while (to > from) {
            size_t start = to - 1;
            while (start > from && ((unsigned char)s->s[start] & 0xC0) == 0x80) start--;
            size_t i = start;
            int32_t cp = next_cp(s->s, s->len, &i);
            if (chars ? !in_chars(cp, chars) : !py_space(cp)) break;
            to = start;
        }
    }
    return jv_strn(c, s->s + from, to - from);
}

typedef enum { CASE_LOWER, CASE_UPPER, CASE_TITLE_WORDS, CASE_CAPITALIZE, CASE_JINJA_TITLE } case_mode;

static bool is_cased_letter(int32_t cp)
{
    return utf8proc_tolower(cp) != cp || utf8proc_toupper(cp) != cp;
}

static bool jinja_title_sep(int32_t cp)
{
    return cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_space(cp);
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
    put_cp(c, b, which == 0 ? utf8proc_tolower(cp) : which == 1 ? utf8proc_toupper(cp) : utf8proc_totitle(cp));
}

static jv change_case(jctx *c, const jv_str *s, case_mode mode)
{
    jbuf b = {0};
    bool start = true; /* at the start of a word (title) or of the string (capitalize) */
    jbuf_put(c, &b, "", 0);
    for (size_t i = 0; i < s->len;) {
        int32_t cp = next_cp(s->s, s->len, &i);
        int which = 0; /* lower, upper, title; -1 = as is */
        switch (mode) {
        case CASE_LOWER: which = 0; break;
        case CASE_UPPER: which = 1; break;
        case CASE_CAPITALIZE: /* str.capitalize(): the first character in title case */
            which = start ? 2 : 0;
            start = false;
            break;
        case CASE_TITLE_WORDS: /* str.title(): a cased letter after an uncased one starts a word */
            which = start ? 2 : 0;
            start = !is_cased_letter(cp);
            break;
        case CASE_JINJA_TITLE: /* jinja2's title: words split at -, whitespace and ({[<; upper() first */
            if (jinja_title_sep(cp)) {
                start = true;
                which = -1;
            } else {
                which = start ? 1 : 0;
                start = false;
            }
            break;
        }
        if (which < 0) put_cp(c, &b, cp);
        else put_case(c, &b, cp, which);
    }
    return jbuf_take(c, &b);
}

static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

static jv replace(jctx *c, const jv_str *s, const jv_str *old, const jv_str *new_, int64_t count)
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
            next_cp(s->s, s->len, &i);
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
        const char *hit = find_bytes(s->s + at, s->len - at, old->s, old->len);
        if (!hit) break;
        jbuf_put(c, &b, s->s + at, (size_t)(hit - (s->s + at)));
        jbuf_put(c, &b, new_->s, new_->len);
        at = (size_t)(hit - s->s) + old->len;
    }
    jbuf_put(c, &b, s->s + at, s->len - at);
    return jbuf_take(c, &b);
}

/* str.split / str.rsplit */
static jv split(jctx *c, const jv_str *s, const jv_str *sep, int64_t maxsplit, bool from_right)
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
            const char *hit = find_bytes(s->s + at, s->len - at, sep->s, sep->len);
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
            while (end > 0 && py_space((unsigned char)s->s[end - 1])) end--;
            if (end == 0) break;
            size_t start = end;
            while (start > 0 && !py_space((unsigned char)s->s[start - 1])) start--;
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
            if (!py_space(next_cp(s->s, s->len, &k))) break;
            i = k;
        }
        if (i >= s->len) break;
        if (maxsplit >= 0 && done == maxsplit) {
            size_t end = s->len;
            while (end > i && py_space((unsigned char)s->s[end - 1])) end--;
            jv_list_push(c, out, jv_strn(c, s->s + i, end - i));
            break;
        }
        size_t start = i;
        while (i < s->len) {
            size_t k = i;
            if (py_space(next_cp(s->s, s->len, &k))) break;
            i = k;
        }
        jv_list_push(c, out, jv_strn(c, s->s + start, i - start));
        done++;
    }
    return out;
}

/* str.splitlines() of s + "\n": Python's line boundaries, the ends dropped. */
static jv splitlines(jctx *c, const jv_str *s)
{
    jv out = jv_list_new(c, 8);
    size_t start = 0;
    for (size_t i = 0; i < s->len;) {
        size_t at = i;
        int32_t cp = next_cp(s->s, s->len, &i);
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

/* ---- lookup and iteration ---- */

static jv missing(jctx *c, const jv *obj, const char *name)
{
    size_t n = strlen(name) + 64;
    char *hint = jinja_alloc(c, n);
    if (obj->kind == JV_NONE) snprintf(hint, n, "'None' has no attribute '%s'", name);
    else snprintf(hint, n, "'%s object' has no attribute '%s'", jv_kind_name(obj), name);
    return jv_undef(hint);
}

jv jinja_getattr(jctx *c, int line, jv obj, const char *name)
{
    jv v;
    if (obj.kind == JV_UNDEFINED)
        jinja_fail(c, line, "%s", obj.u.undef ? obj.u.undef : "a value is undefined");
    if ((obj.kind == JV_DICT || obj.kind == JV_NAMESPACE) && jv_dict_get(obj.u.d, name, strlen(name), &v)) return v;
    return missing(c, &obj, name);
}

static jv index_missing(jctx *c, const jv *obj, const jv *key)
{
    jbuf b = {0};
    jbuf_puts(c, &b, "'");
    jbuf_puts(c, &b, jv_kind_name(obj));
    jbuf_puts(c, &b, " object' has no element ");
    jv_repr(c, &b, key);
    return jv_undef(b.s);
}

jv jinja_getitem(jctx *c, int line, jv obj, jv key)
{
    if (obj.kind == JV_UNDEFINED)
        jinja_fail(c, line, "%s", obj.u.undef ? obj.u.undef : "a value is undefined");
    if (key.kind == JV_STR && (obj.kind == JV_DICT || obj.kind == JV_NAMESPACE)) {
        jv v;
        if (jv_dict_get(obj.u.d, key.u.s->s, key.u.s->len, &v)) return v;
        return missing(c, &obj, key.u.s->s);
    }
    if (is_intlike(&key) && obj.kind == JV_LIST) {
        int64_t i = ival(&key), n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return index_missing(c, &obj, &key);
        return obj.u.l->items[i];
    }
    if (is_intlike(&key) && obj.kind == JV_STR) {
        int64_t i = ival(&key), n = (int64_t)ju_count(obj.u.s->s, obj.u.s->len);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return index_missing(c, &obj, &key);
        size_t from = ju_offset(obj.u.s->s, obj.u.s->len, (size_t)i);
        size_t to = from + ju_offset(obj.u.s->s + from, obj.u.s->len - from, 1);
        return jv_strn(c, obj.u.s->s + from, to - from);
    }
    if (key.kind == JV_STR) return missing(c, &obj, key.u.s->s);
    return index_missing(c, &obj, &key);
}

jv jinja_iterable(jctx *c, int line, jv v)
{
    switch (v.kind) {
    case JV_LIST: return v;
    case JV_UNDEFINED: return jv_list_new(c, 1);
    case JV_DICT: {
        jv out = jv_list_new(c, v.u.d->n + 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv k = {.kind = JV_STR};
            k.u.s = v.u.d->keys[i];
            jv_list_push(c, out, k);
        }
        return out;
    }
    case JV_STR: {
        jv out = jv_list_new(c, v.u.s->len + 1);
        for (size_t i = 0; i < v.u.s->len;) {
            size_t from = i;
            next_cp(v.u.s->s, v.u.s->len, &i);
            jv_list_push(c, out, jv_strn(c, v.u.s->s + from, i - from));
        }
        return out;
    }
    default: jinja_fail(c, line, "'%s' object is not iterable", jv_kind_name(&v));
    }
}

static size_t length_of(jctx *c, int line, const jv *v)
{
    switch (v->kind) {
    case JV_STR: return ju_count(v->u.s->s, v->u.s->len);
    case JV_LIST: return v->u.l->n;
    case JV_DICT: return v->u.d->n;
    case JV_UNDEFINED: return 0;
    default: jinja_fail(c, line, "object of type '%s' has no len()", jv_kind_name(v));
    }
}

/* ---- tests ---- */

bool jinja_test(jctx *c, const jnode *n, const char *name, jv v, const jv *argv, size_t nargs)
{
    const jv *a0 = nargs > 0 ? &argv[0] : NULL;
#define NEED_ARG                                                                                 \
    do {                                                                                         \
        if (!a0) jinja_fail(c, n->line, "test '%s' needs an argument", name);                    \
    } while (0)
    if (!strcmp(name, "defined")) return v.kind != JV_UNDEFINED;
    if (!strcmp(name, "undefined")) return v.kind == JV_UNDEFINED;
    if (!strcmp(name, "none")) return v.kind == JV_NONE;
    if (!strcmp(name, "boolean")) return v.kind == JV_BOOL;
    if (!strcmp(name, "false")) return v.kind == JV_BOOL && !v.u.b;
    if (!strcmp(name, "true")) return v.kind == JV_BOOL && v.u.b;
    if (!strcmp(name, "integer")) return v.kind == JV_INT;
    if (!strcmp(name, "float")) return v.kind == JV_FLOAT;
    if (!strcmp(name, "number")) return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
    if (!strcmp(name, "string")) return v.kind == JV_STR;
    if (!strcmp(name, "mapping")) return v.kind == JV_DICT;
    if (!strcmp(name, "iterable"))
        return v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_STR || v.kind == JV_UNDEFINED;
    if (!strcmp(name, "sequence"))
        return v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_STR || v.kind == JV_UNDEFINED;
    if (!strcmp(name, "callable")) return v.kind == JV_MACRO || v.kind == JV_FUNC;
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (!is_intlike(&v)) jinja_fail(c, n->line, "test '%s' needs an integer, not %s", name, jv_kind_name(&v));
        int64_t x = ival(&v), d = 2;
        if (name[0] == 'd') {
            NEED_ARG;
            if (!is_intlike(a0) || ival(a0) == 0) jinja_fail(c, n->line, "test 'divisibleby' needs a nonzero integer");
            d = ival(a0);
        }
        bool div = x % d == 0;
        return name[0] == 'o' ? !div : div;
    }
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==")) {
        NEED_ARG;
        return jv_equal(&v, a0);
    }
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) {
        NEED_ARG;
        return !jv_equal(&v, a0);
    }
    if (!strcmp(name, "sameas")) {
        NEED_ARG;
        return v.kind == a0->kind && jv_equal(&v, a0);
    }
    static const char *const ord[][2] = {{"lt", "lessthan"}, {"le", "<="}, {"gt", "greaterthan"}, {"ge", ">="}};
    for (int k = 0; k < 4; k++) {
        if (strcmp(name, ord[k][0]) && strcmp(name, ord[k][1])) continue;
        NEED_ARG;
        int r = jv_compare(c, n->line, &v, a0);
        return k == 0 ? r < 0 : k == 1 ? r <= 0 : k == 2 ? r > 0 : r >= 0;
    }
    if (!strcmp(name, "in")) {
        NEED_ARG;
        if (a0->kind == JV_STR) {
            if (v.kind != JV_STR) jinja_fail(c, n->line, "'in <string>' requires string as left operand");
            return find_bytes(a0->u.s->s, a0->u.s->len, v.u.s->s, v.u.s->len) != NULL;
        }
        if (a0->kind == JV_DICT) {
            jv ignored;
            return v.kind == JV_STR && jv_dict_get(a0->u.d, v.u.s->s, v.u.s->len, &ignored);
        }
        jv seq = jinja_iterable(c, n->line, *a0);
        for (size_t i = 0; i < seq.u.l->n; i++)
            if (jv_equal(&v, &seq.u.l->items[i])) return true;
        return false;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.kind != JV_STR) return false;
        jv other = change_case(c, v.u.s, name[0] == 'l' ? CASE_LOWER : CASE_UPPER);
        bool cased = false;
        for (size_t i = 0; i < v.u.s->len;) {
            int32_t cp = next_cp(v.u.s->s, v.u.s->len, &i);
            cased = cased || is_cased_letter(cp);
        }
        return cased && jv_equal(&v, &other);
    }
#undef NEED_ARG
    jinja_fail(c, n->line, "no test named '%s'", name);
}

/* ---- filters ---- */

/* The item's attribute for attribute= arguments: "a.b" walks, digits index. */
static jv attr_path(jctx *c, int line, jv item, const jv_str *path)
{
    size_t at = 0;
    while (at <= path->len) {
        const char *dot = memchr(path->s + at, '.', path->len - at);
        size_t end = dot ? (size_t)(dot - path->s) : path->len;
        jv key = jv_strn(c, path->s + at, end - at);
        bool digits = end > at;
        for (size_t i = at; i < end; i++) digits = digits && path->s[i] >= '0' && path->s[i] <= '9';
        if (digits) key = jv_int(strtoll(key.u.s->s, NULL, 10));
        item = jinja_getitem(c, line, item, key);
        if (!dot) break;
        at = end + 1;
    }
    return item;
}

static jv select_items(const args *a, jv v, bool by_attr, bool keep_when)
{
    jctx *c = a->c;
    jv seq = jinja_iterable(c, a->n->line, v);
    size_t at = 0;
    const jv_str *attr = NULL;
    if (by_attr) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "%s needs an attribute name", a->what);
        attr = str_arg(a, a->pos[0], "the attribute");
        at = 1;
    }
    const char *test = NULL;
    if (a->npos > at) test = str_arg(a, a->pos[at], "the test name")->s;
    jv out = jv_list_new(c, seq.u.l->n + 1);
    for (size_t i = 0; i < seq.u.l->n; i++) {
        jv item = seq.u.l->items[i];
        jv probe = attr ? attr_path(c, a->n->line, item, attr) : item;
        bool ok = test ? jinja_test(c, a->n, test, probe, a->pos + at + 1, a->npos - at - 1) : jv_truthy(&probe);
        if (ok == keep_when) jv_list_push(c, out, item);
    }
    return out;
}

static jv join(const args *a, jv v)
{
    jctx *c = a->c;
    jv seq = jinja_iterable(c, a->n->line, v);
    jv sep = arg(a, 0, "d", jv_strn(c, "", 0));
    jv attr = arg(a, 1, "attribute", jv_none());
    jv_str *s = jv_to_str(c, &sep);
    jbuf b = {0};
    jbuf_put(c, &b, "", 0);
    for (size_t i = 0; i < seq.u.l->n; i++) {
        jv item = seq.u.l->items[i];
        if (attr.kind == JV_STR) item = attr_path(c, a->n->line, item, attr.u.s);
        if (i) jbuf_put(c, &b, s->s, s->len);
        jv_str *t = jv_to_str(c, &item);
        jbuf_put(c, &b, t->s, t->len);
    }
    return jbuf_take(c, &b);
}

static jv tojson(const args *a, jv v)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    check_arity(a, 4, names);
    jctx *c = a->c;
    jv ea = arg(a, 0, "ensure_ascii", jv_bool(false));
    jv indent = arg(a, 1, "indent", jv_none());
    jv seps = arg(a, 2, "separators", jv_none());
    jv sort = arg(a, 3, "sort_keys", jv_bool(false));
    const char *ind = NULL;
    if (is_intlike(&indent)) {
        int64_t k = ival(&indent);
        if (k > 64) jinja_fail(c, a->n->line, "tojson: indent %lld is past the limit of 64", (long long)k);
        char *spaces = jinja_alloc(c, (size_t)(k > 0 ? k : 0) + 1);
        memset(spaces, ' ', (size_t)(k > 0 ? k : 0));
        spaces[k > 0 ? k : 0] = '\0';
        ind = spaces;
    } else if (indent.kind == JV_STR) {
        ind = indent.u.s->s;
    } else if (indent.kind != JV_NONE) {
        jinja_fail(c, a->n->line, "tojson: indent must be an integer, a string or None");
    }
    const char *item_sep = ind ? "," : ", ", *key_sep = ": ";
    if (seps.kind != JV_NONE) {
        if (seps.kind != JV_LIST || seps.u.l->n != 2 || seps.u.l->items[0].kind != JV_STR ||
            seps.u.l->items[1].kind != JV_STR)
            jinja_fail(c, a->n->line, "tojson: separators must be a pair of strings");
        item_sep = seps.u.l->items[0].u.s->s;
        key_sep = seps.u.l->items[1].u.s->s;
    }
    jbuf b = {0};
    jbuf_put(c, &b, "", 0);
    jv_tojson(c, a->n->line, &b, &v, jv_truthy(&ea), ind, item_sep, key_sep, jv_truthy(&sort), 0);
    return jbuf_take(c, &b);
}

/* Python int(str): optional sign, digits with single underscores, blanks around. */
static bool parse_int(const jv_str *s, int64_t base, int64_t *out)
{
    size_t i = 0, n = s->len;
    while (i < n && py_space((unsigned char)s->s[i])) i++;
    while (n > i && py_space((unsigned char)s->s[n - 1])) n--;
    bool neg = false;
    if (i < n && (s->s[i] == '+' || s->s[i] == '-')) neg = s->s[i++] == '-';
    if (i + 1 < n && s->s[i] == '0') { /* int("0x1A", 16) and int("0x1A", 0) take the prefix */
        char p = (char)(s->s[i + 1] | 0x20);
        int64_t pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) {
            base = pb;
            i += 2;
        }
    }
    if (base == 0) base = 10;
    if (i >= n) return false;
    int64_t v = 0;
    bool any = false;
    for (; i < n; i++) {
        char ch = s->s[i];
        if (ch == '_' && any && i + 1 < n && s->s[i + 1] != '_') continue;
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10 : 99;
        if (d >= base) return false;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
        any = true;
    }
    *out = neg ? -v : v;
    return any;
}

static bool parse_float(const jv_str *s, double *out)
{
    char *end;
    size_t i = 0;
    while (i < s->len && py_space((unsigned char)s->s[i])) i++;
    if (i == s->len) return false;
    double f = strtod(s->s + i, &end);
    while (*end && py_space((unsigned char)*end)) end++;
    if (*end || end == s->s + i) return false;
    *out = f;
    return true;
}

static jv to_int(const args *a, jv v)
{
    jv def = arg(a, 0, "default", jv_int(0));
    int64_t base = int_arg(a, arg(a, 1, "base", jv_int(10)), "base");
    if (is_intlike(&v)) return jv_int(ival(&v));
    if (v.kind == JV_FLOAT) return v.u.f >= -9.2e18 && v.u.f <= 9.2e18 ? jv_int((int64_t)v.u.f) : def;
    if (v.kind == JV_STR) {
        int64_t i;
        double f;
        if (parse_int(v.u.s, base, &i)) return jv_int(i);
        if (base == 10 && parse_float(v.u.s, &f) && f >= -9.2e18 && f <= 9.2e18) return jv_int((int64_t)f);
    }
    return def;
}

static jv to_list(jctx *c, int line, jv v)
{
    jv seq = jinja_iterable(c, line, v);
    if (v.kind != JV_LIST) return seq;
    jv out = jv_list_new(c, seq.u.l->n + 1);
    for (size_t i = 0; i < seq.u.l->n; i++) jv_list_push(c, out, seq.u.l->items[i]);
    return out;
}

typedef struct sort_item {
    jv key, val;
    size_t idx;
} sort_item;

static void sort_items(jctx *c, int line, sort_item *it, size_t n, bool reverse)
{
    /* insertion sort: stable, and the comparison may fail (longjmp) safely */
    for (size_t i = 1; i < n; i++) {
        sort_item x = it[i];
        size_t j = i;
        while (j > 0) {
            int r = jv_compare(c, line, &it[j - 1].key, &x.key);
            if (reverse ? r >= 0 : r <= 0) break;
            it[j] = it[j - 1];
            j--;
        }
        it[j] = x;
    }
}

static jv sort_key(jctx *c, jv v, bool case_sensitive)
{
    if (!case_sensitive && v.kind == JV_STR) return change_case(c, v.u.s, CASE_LOWER);
    return v;
}

jv jinja_filter(jctx *c, const jnode *n, jv v, const jv *argv, size_t nargs, const char **kwnames, const jv *kwargs,
                size_t nkw)
{
    const char *name = n->name;
    char what[96];
    snprintf(what, sizeof what, "filter '%s'", name);
    args a = {c, n, what, argv, nargs, kwnames, kwargs, nkw};
    int line = n->line;

    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv def = arg(&a, 0, "default_value", jv_strn(c, "", 0));
        jv boolean = arg(&a, 1, "boolean", jv_bool(false));
        if (v.kind == JV_UNDEFINED || (jv_truthy(&boolean) && !jv_truthy(&v))) return def;
        return v;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) return jv_int((int64_t)length_of(c, line, &v));
    if (!strcmp(name, "tojson")) return tojson(&a, v);
    if (!strcmp(name, "list")) return to_list(c, line, v);
    if (!strcmp(name, "items")) {
        if (v.kind == JV_UNDEFINED) return jv_list_new(c, 1);
        if (v.kind != JV_DICT) jinja_fail(c, line, "filter 'items': can only get item pairs from a mapping");
        jv out = jv_list_new(c, v.u.d->n + 1);
        for (size_t i = 0; i < v.u.d->n; i++) {
            jv pair = jv_list_new(c, 2);
            pair.u.l->tuple = true;
            jv k = {.kind = JV_STR};
            k.u.s = v.u.d->keys[i];
            jv_list_push(c, pair, k);
            jv_list_push(c, pair, v.u.d->vals[i]);
            jv_list_push(c, out, pair);
        }
        return out;
    }
    if (!strcmp(name, "dictsort")) {
        jv cs = arg(&a, 0, "case_sensitive", jv_bool(false));
        jv by = arg(&a, 1, "by", jv_strn(c, "key", 3));
        jv reverse = arg(&a, 2, "reverse", jv_bool(false));
        if (v.kind != JV_DICT) jinja_fail(c, line, "filter 'dictsort': a mapping is required, not %s", jv_kind_name(&v));
        bool by_value = by.kind == JV_STR && !strcmp(by.u.s->s, "value");
        if (!by_value && !(by.kind == JV_STR && !strcmp(by.u.s->s, "key")))
            jinja_fail(c, line, "filter 'dictsort': by must be 'key' or 'value'");
        size_t m = v.u.d->n;
        sort_item *it = jinja_alloc(c, (m + 1) * sizeof *it);
        for (size_t i = 0; i < m; i++) {
            jv k = {.kind = JV_STR};
            k.u.s = v.u.d->keys[i];
            jv pair = jv_list_new(c, 2);
            pair.u.l->tuple = true;
            jv_list_push(c, pair, k);
            jv_list_push(c, pair, v.u.d->vals[i]);
            it[i] = (sort_item){sort_key(c, by_value ? v.u.d->vals[i] : k, jv_truthy(&cs)), pair, i};
        }
        sort_items(c, line, it, m, jv_truthy(&reverse));
        jv out = jv_list_new(c, m + 1);
        for (size_t i = 0; i < m; i++) jv_list_push(c, out, it[i].val);
        return out;
    }
    if (!strcmp(name, "attr")) { /* Python attributes only, never items: nothing a JSON value has */
        if (nargs < 1) jinja_fail(c, line, "filter 'attr' needs an attribute name");
        if (v.kind == JV_UNDEFINED) return v;
        if (v.kind == JV_NAMESPACE) return jinja_getattr(c, line, v, str_arg(&a, argv[0], "the attribute name")->s);
        return missing(c, &v, str_arg(&a, argv[0], "the attribute name")->s);
    }
    if (!strcmp(name, "selectattr")) return select_items(&a, v, true, true);
    if (!strcmp(name, "rejectattr")) return select_items(&a, v, true, false);
    if (!strcmp(name, "select")) return select_items(&a, v, false, true);
    if (!strcmp(name, "reject")) return select_items(&a, v, false, false);
    if (!strcmp(name, "map")) {
        jv seq = jinja_iterable(c, line, v);
        jv out = jv_list_new(c, seq.u.l->n + 1);
        jv attr = arg(&a, 99, "attribute", jv_none());
        if (attr.kind != JV_NONE) {
            jv def = arg(&a, 99, "default", jv_undef(NULL));
            jv_str *path = jv_to_str(c, &attr);
            for (size_t i = 0; i < seq.u.l->n; i++) {
                jv x = attr_path(c, line, seq.u.l->items[i], path);
                jv_list_push(c, out, x.kind == JV_UNDEFINED && def.kind != JV_UNDEFINED ? def : x);
            }
            return out;
        }
        if (nargs < 1) jinja_fail(c, line, "filter 'map' needs a filter name or attribute=");
        jnode sub = *n;
        sub.name = str_arg(&a, argv[0], "the filter name")->s;
        for (size_t i = 0; i < seq.u.l->n; i++)
            jv_list_push(c, out, jinja_filter(c, &sub, seq.u.l->items[i], argv + 1, nargs - 1, kwnames, kwargs, nkw));
        return out;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (v.kind == JV_DICT && name[0] == 'l') jinja_fail(c, line, "filter 'last': 'dict' object is not reversible");
        jv seq = jinja_iterable(c, line, v);
        if (seq.u.l->n == 0) return jv_undef("the sequence is empty");
        return seq.u.l->items[name[0] == 'f' ? 0 : seq.u.l->n - 1];
    }
    if (!strcmp(name, "reverse")) {
        if (v.kind == JV_STR) {
            jv chars = jinja_iterable(c, line, v);
            jbuf b = {0};
            jbuf_put(c, &b, "", 0);
            for (size_t i = chars.u.l->n; i-- > 0;) jbuf_put(c, &b, chars.u.l->items[i].u.s->s, chars.u.l->items[i].u.s->len);
            return jbuf_take(c, &b);
        }
        jv seq = jinja_iterable(c, line, v);
        jv out = jv_list_new(c, seq.u.l->n + 1);
        for (size_t i = seq.u.l->n; i-- > 0;) jv_list_push(c, out, seq.u.l->items[i]);
        return out;
    }
    if (!strcmp(name, "sort") || !strcmp(name, "unique") || !strcmp(name, "min") || !strcmp(name, "max")) {
        bool is_sort = name[0] == 's', is_unique = name[0] == 'u';
        jv reverse = is_sort ? arg(&a, 0, "reverse", jv_bool(false)) : jv_bool(false);
        jv cs = arg(&a, is_sort ? 1 : 0, "case_sensitive", jv_bool(false));
        jv attr = arg(&a, is_sort ? 2 : 1, "attribute", jv_none());
        jv seq = jinja_iterable(c, line, v);
        size_t m = seq.u.l->n;
        sort_item *it = jinja_alloc(c, (m + 1) * sizeof *it);
        for (size_t i = 0; i < m; i++) {
            jv x = seq.u.l->items[i];
            jv k = attr.kind == JV_STR ? attr_path(c, line, x, attr.u.s) : x;
            it[i] = (sort_item){sort_key(c, k, jv_truthy(&cs)), x, i};
        }
        if (is_unique) {
            jv out = jv_list_new(c, m + 1);
            for (size_t i = 0; i < m; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++) seen = jv_equal(&it[j].key, &it[i].key);
                if (!seen) jv_list_push(c, out, it[i].val);
            }
            return out;
        }
        sort_items(c, line, it, m, jv_truthy(&reverse));
        if (!is_sort) {
            if (m == 0) return jv_undef("the sequence is empty");
            return name[1] == 'i' ? it[0].val : it[m - 1].val;
        }
        jv out = jv_list_new(c, m + 1);
        for (size_t i = 0; i < m; i++) jv_list_push(c, out, it[i].val);
        return out;
    }
    if (!strcmp(name, "sum")) {
        jv attr = arg(&a, 0, "attribute", jv_none());
        jv total = arg(&a, 1, "start", jv_int(0));
        jv seq = jinja_iterable(c, line, v);
        for (size_t i = 0; i < seq.u.l->n; i++) {
            jv x = attr.kind == JV_STR ? attr_path(c, line, seq.u.l->items[i], attr.u.s) : seq.u.l->items[i];
            jnode add = {.kind = JN_BINARY, .line = line, .op = JOP_ADD};
            jnode lit_a = {.kind = JN_LITERAL, .line = line, .value = total};
            jnode lit_b = {.kind = JN_LITERAL, .line = line, .value = x};
            add.a = &lit_a;
            add.b = &lit_b;
            total = jinja_eval(c, &add);
        }
        return total;
    }
    if (!strcmp(name, "abs")) {
        if (is_intlike(&v)) return jv_int(ival(&v) < 0 ? -ival(&v) : ival(&v));
        if (v.kind == JV_FLOAT) return jv_float(v.u.f < 0 ? -v.u.f : v.u.f);
        jinja_fail(c, line, "filter 'abs': bad operand type '%s'", jv_kind_name(&v));
    }
    if (!strcmp(name, "int")) return to_int(&a, v);
    if (!strcmp(name, "float")) {
        jv def = arg(&a, 0, "default", jv_float(0.0));
        double f;
        if (v.kind == JV_FLOAT) return v;
        if (is_intlike(&v)) return jv_float((double)ival(&v));
        if (v.kind == JV_STR && parse_float(v.u.s, &f)) return jv_float(f);
        return def;
    }
    if (!strcmp(name, "round")) {
        int64_t prec = int_arg(&a, arg(&a, 0, "precision", jv_int(0)), "precision");
        jv method = arg(&a, 1, "method", jv_strn(c, "common", 6));
        if (!is_intlike(&v) && v.kind != JV_FLOAT) jinja_fail(c, line, "filter 'round' needs a number");
        double f = v.kind == JV_FLOAT ? v.u.f : (double)ival(&v), m = 1, r;
        if (prec < 0 || prec > 20) jinja_fail(c, line, "filter 'round': precision %lld is outside 0..20", (long long)prec);
        for (int64_t i = 0; i < prec; i++) m *= 10;
        const char *how = method.kind == JV_STR ? method.u.s->s : "common";
        if (!strcmp(how, "floor")) {
            r = floor(f * m) / m;
        } else if (!strcmp(how, "ceil")) {
            r = ceil(f * m) / m;
        } else { /* Python's round(): the correctly rounded decimal, halves to even, as printf rounds */
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, f);
            r = strtod(buf, NULL);
        }
        return jv_float(r);
    }

    /* the rest work on str(value) */
    if (!strcmp(name, "join")) return join(&a, v);
    if (!strcmp(name, "format")) {
        jv tuple = jv_list_new(c, nargs + 1);
        tuple.u.l->tuple = true;
        for (size_t i = 0; i < nargs; i++) jv_list_push(c, tuple, argv[i]);
        jnode mod = {.kind = JN_BINARY, .line = line, .op = JOP_MOD};
        jnode lit_a = {.kind = JN_LITERAL, .line = line, .value = jv_strn(c, jv_to_str(c, &v)->s, jv_to_str(c, &v)->len)};
        jnode lit_b = {.kind = JN_LITERAL, .line = line, .value = tuple};
        mod.a = &lit_a;
        mod.b = &lit_b;
        return jinja_eval(c, &mod);
    }
    jv_str *s = jv_to_str(c, &v);
    if (!strcmp(name, "string") || !strcmp(name, "safe")) return jv_strn(c, s->s, s->len);
    if (!strcmp(name, "trim")) {
        jv chars = arg(&a, 0, "chars", jv_none());
        return strip(c, s, chars.kind == JV_STR ? chars.u.s : NULL, true, true);
    }
    if (!strcmp(name, "lower")) return change_case(c, s, CASE_LOWER);
    if (!strcmp(name, "upper")) return change_case(c, s, CASE_UPPER);
    if (!strcmp(name, "title")) return change_case(c, s, CASE_JINJA_TITLE);
    if (!strcmp(name, "capitalize")) return change_case(c, s, CASE_CAPITALIZE);
    if (!strcmp(name, "replace")) {
        if (nargs < 2) jinja_fail(c, line, "filter 'replace' needs old and new strings");
        jv count = arg(&a, 2, "count", jv_none());
        jv_str *old = jv_to_str(c, &argv[0]), *new_ = jv_to_str(c, &argv[1]);
        return replace(c, s, old, new_, count.kind == JV_NONE ? -1 : int_arg(&a, count, "count"));
    }
    if (!strcmp(name, "indent")) { /* jinja2's: splitlines() of s + "\n", rejoined with "\n" */
        jv width = arg(&a, 0, "width", jv_int(4));
        bool first = jv_truthy((jv[]){arg(&a, 1, "first", jv_bool(false))});
        bool blank = jv_truthy((jv[]){arg(&a, 2, "blank", jv_bool(false))});
        jv_str *pad;
        if (width.kind == JV_STR) {
            pad = width.u.s;
        } else {
            int64_t w = int_arg(&a, width, "width");
            if (w < 0) w = 0;
            if (w > 256) jinja_fail(c, line, "filter 'indent': width %lld is past the limit of 256", (long long)w);
            char sp[257];
            memset(sp, ' ', (size_t)w);
            pad = jv_str_dup(c, sp, (size_t)w);
        }
        jv lines = splitlines(c, s);
        jbuf b = {0};
        jbuf_put(c, &b, "", 0);
        if (first) jbuf_put(c, &b, pad->s, pad->len);
        for (size_t i = 0; i < lines.u.l->n; i++) {
            const jv_str *l = lines.u.l->items[i].u.s;
            if (i) {
                jbuf_puts(c, &b, "\n");
                if (blank || l->len) jbuf_put(c, &b, pad->s, pad->len);
            }
            jbuf_put(c, &b, l->s, l->len);
        }
        return jbuf_take(c, &b);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e")) {
        jbuf b = {0};
        jbuf_put(c, &b, "", 0);
        for (size_t i = 0; i < s->len; i++) {
            switch (s->s[i]) {
            case '&': jbuf_puts(c, &b, "&amp;"); break;
            case '<': jbuf_puts(c, &b, "&lt;"); break;
            case '>': jbuf_puts(c, &b, "&gt;"); break;
            case '"': jbuf_puts(c, &b, "&#34;"); break;
            case '\'': jbuf_puts(c, &b, "&#39;"); break;
            default: jbuf_put(c, &b, s->s + i, 1);
            }
        }
        return jbuf_take(c, &b);
    }
    if (!strcmp(name, "wordcount")) {
        jv words = split(c, s, NULL, -1, false);
        return jv_int((int64_t)words.u.l->n);
    }
    jinja_fail(c, line, "no filter named '%s'", name);
}

/* ---- methods ---- */

/* str.format with "{}", "{0}", "{name}" fields and "{{" "}}" escapes. */
static jv str_format(const args *a, const jv_str *fmt)
{
    jctx *c = a->c;
    jbuf b = {0};
    jbuf_put(c, &b, "", 0);
    size_t auto_idx = 0;
    for (size_t i = 0; i < fmt->len; i++) {
        char ch = fmt->s[i];
        if ((ch == '{' || ch == '}') && i + 1 < fmt->len && fmt->s[i + 1] == ch) {
            jbuf_put(c, &b, &ch, 1);
            i++;
            continue;
        }
        if (ch == '}') jinja_fail(c, a->n->line, "str.format: single '}' encountered in format string");
        if (ch != '{') {
            jbuf_put(c, &b, &ch, 1);
            continue;
        }
        const char *close = memchr(fmt->s + i, '}', fmt->len - i);
        if (!close) jinja_fail(c, a->n->line, "str.format: single '{' encountered in format string");
        size_t from = i + 1, to = (size_t)(close - fmt->s);
        for (size_t k = from; k < to; k++)
            if (fmt->s[k] == ':' || fmt->s[k] == '!' || fmt->s[k] == '.' || fmt->s[k] == '[')
                jinja_fail(c, a->n->line, "str.format: format specs and field paths are not supported");
        jv val;
        if (from == to) {
            if (auto_idx >= a->npos) jinja_fail(c, a->n->line, "str.format: replacement index %zu out of range", auto_idx);
            val = a->pos[auto_idx++];
        } else if (fmt->s[from] >= '0' && fmt->s[from] <= '9') {
            size_t idx = (size_t)strtoul(fmt->s + from, NULL, 10);
            if (idx >= a->npos) jinja_fail(c, a->n->line, "str.format: replacement index %zu out of range", idx);
            val = a->pos[idx];
        } else {
            size_t k = 0;
            while (k < a->nkw && (strlen(a->kwnames[k]) != to - from || memcmp(a->kwnames[k], fmt->s + from, to - from)))
                k++;
            if (k == a->nkw) jinja_fail(c, a->n->line, "str.format: no argument named '%.*s'", (int)(to - from), fmt->s + from);
            val = a->kw[k];
        }
        jv_str *t = jv_to_str(c, &val);
        jbuf_put(c, &b, t->s, t->len);
        i = to;
    }
    return jbuf_take(c, &b);
}

static bool affix_match(const args *a, const jv_str *s, jv what, bool prefix)
{
    if (what.kind == JV_LIST && what.u.l->tuple) {
        for (size_t i = 0; i < what.u.l->n; i++)
            if (affix_match(a, s, what.u.l->items[i], prefix)) return true;
        return false;
    }
    const jv_str *p = str_arg(a, what, prefix ? "the prefix" : "the suffix");
    if (p->len > s->len) return false;
    return memcmp(prefix ? s->s : s->s + s->len - p->len, p->s, p->len) == 0;
}

static bool str_method(const args *a, const jv_str *s, const char *name, jv *out)
{
    jctx *c = a->c;
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.%s needs an argument", name);
        *out = jv_bool(affix_match(a, s, a->pos[0], name[0] == 's'));
        return true;
    }
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        jv chars = arg(a, 0, "chars", jv_none());
        const jv_str *set = chars.kind == JV_NONE ? NULL : str_arg(a, chars, "chars");
        *out = strip(c, s, set, name[0] != 'r', name[0] != 'l');
        return true;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = arg(a, 0, "sep", jv_none());
        int64_t maxsplit = int_arg(a, arg(a, 1, "maxsplit", jv_int(-1)), "maxsplit");
        const jv_str *set = sep.kind == JV_NONE ? NULL : str_arg(a, sep, "sep");
        if (set && set->len == 0) jinja_fail(c, a->n->line, "str.%s: empty separator", name);
        *out = split(c, s, set, maxsplit, name[0] == 'r');
        return true;
    }
    if (!strcmp(name, "lower")) return *out = change_case(c, s, CASE_LOWER), true;
    if (!strcmp(name, "upper")) return *out = change_case(c, s, CASE_UPPER), true;
    if (!strcmp(name, "title")) return *out = change_case(c, s, CASE_TITLE_WORDS), true;
    if (!strcmp(name, "capitalize")) return *out = change_case(c, s, CASE_CAPITALIZE), true;
    if (!strcmp(name, "replace")) {
        if (a->npos < 2) jinja_fail(c, a->n->line, "str.replace needs old and new strings");
        int64_t count = int_arg(a, arg(a, 2, "count", jv_int(-1)), "count");
        *out = replace(c, s, str_arg(a, a->pos[0], "old"), str_arg(a, a->pos[1], "new"), count);
        return true;
    }
    if (!strcmp(name, "format")) return *out = str_format(a, s), true;
    if (!strcmp(name, "join")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.join needs an iterable");
        jv seq = jinja_iterable(c, a->n->line, a->pos[0]);
        jbuf b = {0};
        jbuf_put(c, &b, "", 0);
        for (size_t i = 0; i < seq.u.l->n; i++) {
            if (i) jbuf_put(c, &b, s->s, s->len);
            jv_str *t = str_arg(a, seq.u.l->items[i], "each joined item");
            jbuf_put(c, &b, t->s, t->len);
        }
        *out = jbuf_take(c, &b);
        return true;
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count") || !strcmp(name, "index")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.%s needs a substring", name);
        const jv_str *sub = str_arg(a, a->pos[0], "the substring");
        int64_t count = 0, first = -1, last = -1;
        for (size_t i = 0; i + sub->len <= s->len;) {
            if (memcmp(s->s + i, sub->s, sub->len) == 0) {
                int64_t cp = (int64_t)ju_count(s->s, i);
                if (first < 0) first = cp;
                last = cp;
                count++;
                i += sub->len ? sub->len : 1;
            } else {
                i++;
            }
        }
        if (sub->len == 0) count = (int64_t)ju_count(s->s, s->len) + 1;
        if (name[0] == 'c') *out = jv_int(count);
        else if (name[0] == 'r') *out = jv_int(last);
        else if (name[0] == 'i' && first < 0) jinja_fail(c, a->n->line, "str.index: substring not found");
        else *out = jv_int(first);
        return true;
    }
    static const char *const preds[] = {"isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", NULL};
    for (int k = 0; preds[k]; k++) {
        if (strcmp(name, preds[k])) continue;
        bool ok = s->len > 0, cased = false;
        for (size_t i = 0; i < s->len;) {
            int32_t cp = next_cp(s->s, s->len, &i);
            utf8proc_category_t cat = utf8proc_category(cp);
            bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            switch (k) {
            case 0: ok = ok && digit; break;
            case 1: ok = ok && alpha; break;
            case 2: ok = ok && (alpha || digit); break;
            case 3: ok = ok && py_space(cp); break;
            case 4:
                if (utf8proc_toupper(cp) != cp) cased = true;
                if (utf8proc_tolower(cp) != cp) ok = false;
                break;
            default:
                if (utf8proc_tolower(cp) != cp) cased = true;
                if (utf8proc_toupper(cp) != cp) ok = false;
            }
        }
        *out = jv_bool(k >= 4 ? ok && cased : ok);
        return true;
    }
    return false;
}

static bool dict_method(const args *a, jv obj, const char *name, jv *out)
{
    jctx *c = a->c;
    jv_dict *d = obj.u.d;
    if (!strcmp(name, "get")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "dict.get needs a key");
        jv def = a->npos > 1 ? a->pos[1] : jv_none();
        jv key = a->pos[0];
        if (key.kind != JV_STR || !jv_dict_get(d, key.u.s->s, key.u.s->len, out)) *out = def;
        return true;
    }
    if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
        jv list = jv_list_new(c, d->n + 1);
        for (size_t i = 0; i < d->n; i++) {
            jv k = {.kind = JV_STR};
            k.u.s = d->keys[i];
            if (name[0] == 'k') {
                jv_list_push(c, list, k);
            } else if (name[0] == 'v') {
                jv_list_push(c, list, d->vals[i]);
            } else {
                jv pair = jv_list_new(c, 2);
                pair.u.l->tuple = true;
                jv_list_push(c, pair, k);
                jv_list_push(c, pair, d->vals[i]);
                jv_list_push(c, list, pair);
            }
        }
        *out = list;
        return true;
    }
    static const char *const mutators[] = {"update", "pop", "popitem", "setdefault", "clear", NULL};
    for (int k = 0; mutators[k]; k++)
        if (!strcmp(name, mutators[k]))
            jinja_fail(c, a->n->line, "dict.%s: the template may not modify its inputs (immutable sandbox)", name);
    return false;
}

bool jinja_method(jctx *c, const jnode *n, jv obj, const char *name, const jv *argv, size_t nargs,
                  const char **kwnames, const jv *kwargs, size_t nkw, jv *out)
{
    char what[96];
    snprintf(what, sizeof what, "method '%s'", name);
    args a = {c, n, what, argv, nargs, kwnames, kwargs, nkw};
    if (obj.kind == JV_STR) return str_method(&a, obj.u.s, name, out);
    if (obj.kind == JV_DICT && obj.u.d->loop && !strcmp(name, "cycle")) { /* args[index0 % n] */
        if (nargs == 0) jinja_fail(c, n->line, "loop.cycle needs at least one value");
        jv index0;
        jv_dict_get(obj.u.d, "index0", 6, &index0);
        *out = argv[(size_t)index0.u.i % nargs];
        return true;
    }
    if (obj.kind == JV_DICT) return dict_method(&a, obj, name, out);
    if (obj.kind == JV_LIST) {
        static const char *const mutators[] = {"append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear", NULL};
        for (int k = 0; mutators[k]; k++)
            if (!strcmp(name, mutators[k]))
                jinja_fail(c, n->line, "list.%s: the template may not modify its inputs (immutable sandbox)", name);
    }
    return false;
}

/* ---- global functions ---- */

jv jinja_call_func(jctx *c, const jnode *n, int func, const jv *argv, size_t nargs, const char **kwnames,
                   const jv *kwargs, size_t nkw)
{
    switch (func) {
    case JF_RAISE_EXCEPTION: {
        jv_str *msg = nargs ? jv_to_str(c, &argv[0]) : jv_str_dup(c, "", 0);
        c->raised = true;
        snprintf(c->msg, sizeof c->msg, "%s", msg->s);
        longjmp(c->jmp, 1);
    }
    case JF_STRFTIME_NOW: {
        if (nargs < 1 || argv[0].kind != JV_STR) jinja_fail(c, n->line, "strftime_now needs a format string");
        time_t t = c->now >= 0 ? (time_t)c->now : time(NULL);
        struct tm tm;
        if (c->now >= 0) gmtime_r(&t, &tm);
        else localtime_r(&t, &tm);
        char buf[256];
        size_t len = strftime(buf, sizeof buf, argv[0].u.s->s, &tm);
        return jv_strn(c, buf, len);
    }
    case JF_NAMESPACE:
    case JF_DICT: {
        jv out = jv_dict_new(c, nkw + 4);
        if (func == JF_NAMESPACE) out.kind = JV_NAMESPACE;
        for (size_t i = 0; i < nargs; i++) {
            if (argv[i].kind != JV_DICT) jinja_fail(c, n->line, "%s() takes keyword arguments or a dict",
                                                    func == JF_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < argv[i].u.d->n; k++)
                jv_dict_set(c, out.u.d, argv[i].u.d->keys[k]->s, argv[i].u.d->keys[k]->len, argv[i].u.d->vals[k]);
        }
        for (size_t i = 0; i < nkw; i++) jv_dict_set(c, out.u.d, kwnames[i], strlen(kwnames[i]), kwargs[i]);
        return out;
    }
    case JF_RANGE: {
        int64_t lo = 0, hi, st = 1;
        for (size_t i = 0; i < nargs; i++)
            if (!is_intlike(&argv[i])) jinja_fail(c, n->line, "range() takes integers, not %s", jv_kind_name(&argv[i]));
        if (nargs == 1) hi = ival(&argv[0]);
        else if (nargs == 2 || nargs == 3) lo = ival(&argv[0]), hi = ival(&argv[1]);
        else jinja_fail(c, n->line, "range() takes 1 to 3 arguments");
        if (nargs == 3) st = ival(&argv[2]);
        if (st == 0) jinja_fail(c, n->line, "range() step must not be zero");
        double count = st > 0 ? ((double)hi - (double)lo) / (double)st : ((double)lo - (double)hi) / (double)-st;
        if (count > JINJA_MAX_RANGE) jinja_fail(c, n->line, "range() of more than %d items", JINJA_MAX_RANGE);
        jv out = jv_list_new(c, 8);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jv_list_push(c, out, jv_int(i));
        return out;
    }
    }
    jinja_fail(c, n->line, "unknown function");
}
