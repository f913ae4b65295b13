/* jinja_value.c — the interpreter's values and how Python sees them:
 * truthiness, ==, ordering, str(), repr() and json.dumps() (the output of
 * transformers' tojson), byte for byte as CPython writes them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "leader/tokenizer/jinja_internal.h"

_Noreturn void jinja_fail(jctx *c, int line, const char *fmt, ...)
{
    int k = line > 0 ? snprintf(c->msg, sizeof c->msg, "line %d: ", line) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + k, sizeof c->msg - (size_t)k, fmt, ap);
    va_end(ap);
    longjmp(c->jmp, 1);
}

void *jinja_alloc(jctx *c, size_t n)
{
    void *p = jinja_arena_alloc(c->arena, n);
    if (!p)
        jinja_fail(c, 0, "the template's values passed the memory limit of %u MiB (or memory ran out)",
                   JINJA_MAX_ARENA >> 20);
    return p;
}

/* ---- construction ---- */

jv jv_undef(const char *name)
{
    jv v = {.kind = JV_UNDEFINED};
    v.u.undef = name;
    return v;
}

jv jv_none(void)
{
    return (jv){.kind = JV_NONE};
}

jv jv_bool(bool b)
{
    jv v = {.kind = JV_BOOL};
    v.u.b = b;
    return v;
}

jv jv_int(int64_t i)
{
    jv v = {.kind = JV_INT};
    v.u.i = i;
    return v;
}

jv jv_float(double f)
{
    jv v = {.kind = JV_FLOAT};
    v.u.f = f;
    return v;
}

jv_str *jv_str_dup(jctx *c, const char *s, size_t n)
{
    if (n > JINJA_MAX_OUTPUT) jinja_fail(c, 0, "a string of %zu bytes passes the limit (%u MiB)", n, JINJA_MAX_OUTPUT >> 20);
    jv_str *str = jinja_alloc(c, sizeof *str + n + 1);
    str->len = n;
    if (n) memcpy(str->s, s, n);
    str->s[n] = '\0';
    return str;
}

jv jv_strn(jctx *c, const char *s, size_t n)
{
    jv v = {.kind = JV_STR};
    v.u.s = jv_str_dup(c, s, n);
    return v;
}

jv jv_list_new(jctx *c, size_t cap)
{
    jv v = {.kind = JV_LIST};
    v.u.l = jinja_alloc(c, sizeof *v.u.l);
    v.u.l->n = 0;
    v.u.l->tuple = false;
    v.u.l->cap = cap ? cap : 4;
    v.u.l->items = jinja_alloc(c, v.u.l->cap * sizeof(jv));
    return v;
}

void jv_list_push(jctx *c, jv list, jv item)
{
    jv_list *l = list.u.l;
    if (l->n == l->cap) {
        jv *grown = jinja_alloc(c, 2 * l->cap * sizeof(jv));
        memcpy(grown, l->items, l->n * sizeof(jv));
        l->items = grown;
        l->cap *= 2;
    }
    l->items[l->n++] = item;
}

jv jv_dict_new(jctx *c, size_t cap)
{
    jv v = {.kind = JV_DICT};
    v.u.d = jinja_alloc(c, sizeof *v.u.d);
    v.u.d->n = 0;
    v.u.d->loop = false;
    v.u.d->cap = cap ? cap : 4;
    v.u.d->keys = jinja_alloc(c, v.u.d->cap * sizeof(jv_str *));
    v.u.d->vals = jinja_alloc(c, v.u.d->cap * sizeof(jv));
    return v;
}

static long dict_find(const jv_dict *d, const char *key, size_t klen)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i]->len == klen && memcmp(d->keys[i]->s, key, klen) == 0) return (long)i;
    return -1;
}

void jv_dict_set(jctx *c, jv_dict *d, const char *key, size_t klen, jv val)
{
    long at = dict_find(d, key, klen);
    if (at >= 0) {
        d->vals[at] = val;
        return;
    }
    if (d->n == d->cap) {
        jv_str **keys = jinja_alloc(c, 2 * d->cap * sizeof *keys);
        jv *vals = jinja_alloc(c, 2 * d->cap * sizeof *vals);
        memcpy(keys, d->keys, d->n * sizeof *keys);
        memcpy(vals, d->vals, d->n * sizeof *vals);
        d->keys = keys;
        d->vals = vals;
        d->cap *= 2;
    }
    d->keys[d->n] = jv_str_dup(c, key, klen);
    d->vals[d->n++] = val;
}

bool jv_dict_get(const jv_dict *d, const char *key, size_t klen, jv *out)
{
    long at = dict_find(d, key, klen);
    if (at < 0) return false;
    *out = d->vals[at];
    return true;
}

/* ---- Python semantics ---- */

const char *jv_kind_name(const jv *v)
{
    switch (v->kind) {
    case JV_UNDEFINED: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->u.l->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NAMESPACE: return "Namespace";
    case JV_MACRO: return "Macro";
    case JV_FUNC: return "function";
    }
    return "?";
}

bool jv_truthy(const jv *v)
{
    switch (v->kind) {
    case JV_UNDEFINED:
    case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s->len > 0;
    case JV_LIST: return v->u.l->n > 0;
    case JV_DICT: return v->u.d->n > 0;
    default: return true;
    }
}

static bool is_number(const jv *v)
{
    return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT;
}

static double as_double(const jv *v)
{
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

static int64_t as_int(const jv *v)
{
    return v->kind == JV_INT ? v->u.i : (int64_t)v->u.b;
}

bool jv_equal(const jv *a, const jv *b)
{
    if (is_number(a) && is_number(b)) {
        if (a->kind == JV_FLOAT || b->kind == JV_FLOAT) return as_double(a) == as_double(b);
        return as_int(a) == as_int(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEFINED:
    case JV_NONE: return true;
    case JV_STR: return a->u.s->len == b->u.s->len && memcmp(a->u.s->s, b->u.s->s, a->u.s->len) == 0;
    case JV_LIST:
        if (a->u.l->tuple != b->u.l->tuple || a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->items[i], &b->u.l->items[i])) return false;
        return true;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            jv other;
            if (!jv_dict_get(b->u.d, a->u.d->keys[i]->s, a->u.d->keys[i]->len, &other) ||
                !jv_equal(&a->u.d->vals[i], &other))
                return false;
        }
        return true;
    case JV_NAMESPACE: return a->u.d == b->u.d;
    case JV_MACRO: return a->u.macro == b->u.macro;
    case JV_FUNC: return a->u.func == b->u.func;
    default: return false;
    }
}

int jv_compare(jctx *c, int line, const jv *a, const jv *b)
{
    if (is_number(a) && is_number(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = as_int(a), y = as_int(b);
            return x < y ? -1 : x > y;
        }
        double x = as_double(a), y = as_double(b);
        return x < y ? -1 : x > y;
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
        int r = memcmp(a->u.s->s, b->u.s->s, n);
        if (r) return r < 0 ? -1 : 1;
        return a->u.s->len < b->u.s->len ? -1 : a->u.s->len > b->u.s->len;
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST && a->u.l->tuple == b->u.l->tuple) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(&a->u.l->items[i], &b->u.l->items[i])) continue;
            return jv_compare(c, line, &a->u.l->items[i], &b->u.l->items[i]);
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    if (a->kind == JV_UNDEFINED || b->kind == JV_UNDEFINED)
        jinja_fail(c, line, "'%s' is undefined", (a->kind == JV_UNDEFINED ? a : b)->u.undef
                   ? (a->kind == JV_UNDEFINED ? a : b)->u.undef : "value");
    jinja_fail(c, line, "comparison not supported between instances of '%s' and '%s'", jv_kind_name(a),
               jv_kind_name(b));
}

/* ---- UTF-8 as Python code points ---- */

size_t ju_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t ju_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0;
    for (; i < n && cp > 0; cp--) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

static uint32_t decode_cp(const unsigned char *s, size_t n, size_t *adv)
{
    uint32_t c = s[0];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (k > n) k = n;
    if (k > 1) c &= 0x3F >> (k - 1);
    for (size_t i = 1; i < k; i++) c = (c << 6) | (s[i] & 0x3F);
    *adv = k;
    return c;
}

/* ---- buffers ---- */

void jbuf_put(jctx *c, jbuf *b, const char *s, size_t n)
{
    if (n == 0) return;
    if (b->n + n + 1 > JINJA_MAX_OUTPUT)
        jinja_fail(c, 0, "the rendered text passes the limit of %u MiB", JINJA_MAX_OUTPUT >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *grown = jinja_alloc(c, cap);
        if (b->n) memcpy(grown, b->s, b->n);
        b->s = grown;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void jbuf_puts(jctx *c, jbuf *b, const char *s)
{
    jbuf_put(c, b, s, strlen(s));
}

jv jbuf_take(jctx *c, jbuf *b)
{
    return jv_strn(c, b->s ? b->s : "", b->n);
}

/* ---- numbers as Python prints them ---- */

/* float.__repr__: the shortest digits that read back the same, fixed
 * notation for exponents in [-4, 16), else d.ddde+XX. */
static void format_float(char *out, size_t cap, double f, bool json)
{
    if (isnan(f)) {
        snprintf(out, cap, "%s", json ? "NaN" : "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, "%s%s", f < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    char tmp[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    bool neg = tmp[0] == '-';
    const char *p = tmp + neg;
    char digits[32];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[k++] = (size_t)i < nd ? digits[i] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) out[k++] = digits[i];
            else
                out[k++] = '0';
        } else {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[k++] = '0';
            for (size_t i = 0; i < nd; i++) out[k++] = digits[i];
        }
        out[k] = '\0';
        return;
    }
    out[k++] = digits[0];
    if (nd > 1) {
        out[k++] = '.';
        for (size_t i = 1; i < nd; i++) out[k++] = digits[i];
    }
    snprintf(out + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
}

jv_str *jv_to_str(jctx *c, const jv *v)
{
    char num[64];
    switch (v->kind) {
    case JV_STR: return v->u.s;
    case JV_UNDEFINED: return jv_str_dup(c, "", 0);
    case JV_NONE: return jv_str_dup(c, "None", 4);
    case JV_BOOL: return v->u.b ? jv_str_dup(c, "True", 4) : jv_str_dup(c, "False", 5);
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        return jv_str_dup(c, num, strlen(num));
    case JV_FLOAT:
        format_float(num, sizeof num, v->u.f, false);
        return jv_str_dup(c, num, strlen(num));
    default: {
        jbuf b = {0};
        jv_repr(c, &b, v);
        return jv_str_dup(c, b.s ? b.s : "", b.n);
    }
    }
}

/* str.isprintable() of one code point: not a control, format, surrogate,
 * private-use, unassigned or separator character, except the space. */
static bool py_printable(uint32_t cp)
{
    if (cp == ' ') return true;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return false;
    default: return true;
    }
}

/* repr(str): single quotes unless the text has ' and no ", escapes for
 * backslash, the quote, \n \r \t, and \xhh, \uhhhh or \Uhhhhhhhh for the
 * code points str.isprintable() refuses. */
static void repr_str(jctx *c, jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jbuf_put(c, b, &q, 1);
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = decode_cp((const unsigned char *)s + i, n - i, &adv);
        char esc[16];
        if (cp == '\\' || cp == (uint32_t)q) {
            esc[0] = '\\';
            esc[1] = (char)cp;
            jbuf_put(c, b, esc, 2);
        } else if (cp == '\n') {
            jbuf_puts(c, b, "\\n");
        } else if (cp == '\r') {
            jbuf_puts(c, b, "\\r");
        } else if (cp == '\t') {
            jbuf_puts(c, b, "\\t");
        } else if (!py_printable(cp)) {
            snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
            jbuf_puts(c, b, esc);
        } else {
            jbuf_put(c, b, s + i, adv);
        }
        i += adv;
    }
    jbuf_put(c, b, &q, 1);
}

void jv_repr(jctx *c, jbuf *b, const jv *v)
{
    switch (v->kind) {
    case JV_STR: repr_str(c, b, v->u.s->s, v->u.s->len); return;
    case JV_UNDEFINED: return;
    case JV_LIST:
        jbuf_puts(c, b, v->u.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jbuf_puts(c, b, ", ");
            jv_repr(c, b, &v->u.l->items[i]);
        }
        if (v->u.l->tuple && v->u.l->n == 1) jbuf_puts(c, b, ",");
        jbuf_puts(c, b, v->u.l->tuple ? ")" : "]");
        return;
    case JV_NAMESPACE:
    case JV_DICT:
        jbuf_puts(c, b, v->kind == JV_NAMESPACE ? "<Namespace {" : "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) jbuf_puts(c, b, ", ");
            repr_str(c, b, v->u.d->keys[i]->s, v->u.d->keys[i]->len);
            jbuf_puts(c, b, ": ");
            jv_repr(c, b, &v->u.d->vals[i]);
        }
        jbuf_puts(c, b, v->kind == JV_NAMESPACE ? "}>" : "}");
        return;
    case JV_MACRO:
        jbuf_puts(c, b, "<Macro '");
        jbuf_puts(c, b, v->u.macro->name);
        jbuf_puts(c, b, "'>");
        return;
    case JV_FUNC: jbuf_puts(c, b, "<function>"); return;
    default: {
        jv_str *s = jv_to_str(c, v);
        jbuf_put(c, b, s->s, s->len);
    }
    }
}

/* ---- json.dumps ---- */

static void json_str(jctx *c, jbuf *b, const char *s, size_t n, bool ensure_ascii)
{
    jbuf_puts(c, b, "\"");
    for (size_t i = 0; i < n;) {
        size_t adv;
        unsigned char ch = (unsigned char)s[i];
        uint32_t cp = decode_cp((const unsigned char *)s + i, n - i, &adv);
        char esc[16];
        switch (cp) {
        case '"': jbuf_puts(c, b, "\\\""); break;
        case '\\': jbuf_puts(c, b, "\\\\"); break;
        case '\n': jbuf_puts(c, b, "\\n"); break;
        case '\r': jbuf_puts(c, b, "\\r"); break;
        case '\t': jbuf_puts(c, b, "\\t"); break;
        case '\b': jbuf_puts(c, b, "\\b"); break;
        case '\f': jbuf_puts(c, b, "\\f"); break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp >= 0x7F && ch >= 0x80)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                jbuf_puts(c, b, esc);
            } else {
                jbuf_put(c, b, s + i, adv);
            }
        }
        i += adv;
    }
    jbuf_puts(c, b, "\"");
}

static void json_newline(jctx *c, jbuf *b, const char *indent, int depth)
{
    jbuf_puts(c, b, "\n");
    for (int i = 0; i < depth; i++) jbuf_puts(c, b, indent);
}

static int key_cmp(const void *x, const void *y)
{
    const jv_str *a = *(jv_str *const *)x, *b = *(jv_str *const *)y;
    size_t n = a->len < b->len ? a->len : b->len;
    int r = memcmp(a->s, b->s, n);
    return r ? r : (a->len > b->len) - (a->len < b->len);
}

void jv_tojson(jctx *c, int line, jbuf *b, const jv *v, bool ensure_ascii, const char *indent, const char *item_sep,
               const char *key_sep, bool sort_keys, int depth)
{
    char num[64];
    if (depth > JINJA_MAX_DEPTH) jinja_fail(c, line, "tojson: nesting deeper than %d", JINJA_MAX_DEPTH);
    switch (v->kind) {
    case JV_NONE: jbuf_puts(c, b, "null"); return;
    case JV_BOOL: jbuf_puts(c, b, v->u.b ? "true" : "false"); return;
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->u.i);
        jbuf_puts(c, b, num);
        return;
    case JV_FLOAT:
        format_float(num, sizeof num, v->u.f, true);
        jbuf_puts(c, b, num);
        return;
    case JV_STR: json_str(c, b, v->u.s->s, v->u.s->len, ensure_ascii); return;
    case JV_LIST:
        if (v->u.l->n == 0) {
            jbuf_puts(c, b, "[]");
            return;
        }
        jbuf_puts(c, b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jbuf_puts(c, b, item_sep);
            if (indent) json_newline(c, b, indent, depth + 1);
            jv_tojson(c, line, b, &v->u.l->items[i], ensure_ascii, indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        if (indent) json_newline(c, b, indent, depth);
        jbuf_puts(c, b, "]");
        return;
    case JV_DICT: {
        const jv_dict *d = v->u.d;
        if (d->n == 0) {
            jbuf_puts(c, b, "{}");
            return;
        }
        jv_str **order = jinja_alloc(c, d->n * sizeof *order);
        memcpy(order, d->keys, d->n * sizeof *order);
        if (sort_keys) qsort(order, d->n, sizeof *order, key_cmp);
        jbuf_puts(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            jv val;
            jv_dict_get(d, order[i]->s, order[i]->len, &val);
            if (i) jbuf_puts(c, b, item_sep);
            if (indent) json_newline(c, b, indent, depth + 1);
            json_str(c, b, order[i]->s, order[i]->len, ensure_ascii);
            jbuf_puts(c, b, key_sep);
            jv_tojson(c, line, b, &val, ensure_ascii, indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        if (indent) json_newline(c, b, indent, depth);
        jbuf_puts(c, b, "}");
        return;
    }
    default:
        jinja_fail(c, line, "tojson: Object of type %s is not JSON serializable", jv_kind_name(v));
    }
}
