/* jinja_builtins.c — how templates reach into values and call things:
 * attribute and item lookup as jinja2's sandboxed environment resolves
 * them (a missing one is Undefined; taking from Undefined is an error),
 * iteration and len(), the str and dict methods Python would run
 * (startswith, split, strip, format, get, items ...; the mutating ones are
 * refused as in the immutable sandbox), loop.cycle, and the global
 * functions: transformers' raise_exception and strftime_now, jinja2's
 * namespace, range and dict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "leader/tokenizer/jinja_args.h"
#include "leader/tokenizer/jinja_internal.h"
#include "leader/tokenizer/jinja_str.h"

/* ---- lookup and iteration ---- */

jv jinja_missing(jctx *c, const jv *obj, const char *name)
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
    return jinja_missing(c, &obj, name);
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
        return jinja_missing(c, &obj, key.u.s->s);
    }
    if (jv_is_int(&key) && obj.kind == JV_LIST) {
        int64_t i = jv_int_value(&key), n = (int64_t)obj.u.l->n;
        if (i < 0) i += n;
        if (i < 0 || i >= n) return index_missing(c, &obj, &key);
        return obj.u.l->items[i];
    }
    if (jv_is_int(&key) && obj.kind == JV_STR) {
        int64_t i = jv_int_value(&key), n = (int64_t)ju_count(obj.u.s->s, obj.u.s->len);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return index_missing(c, &obj, &key);
        size_t from = ju_offset(obj.u.s->s, obj.u.s->len, (size_t)i);
        size_t to = from + ju_offset(obj.u.s->s + from, obj.u.s->len - from, 1);
        return jv_strn(c, obj.u.s->s + from, to - from);
    }
    if (key.kind == JV_STR) return jinja_missing(c, &obj, key.u.s->s);
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
            jstr_next_cp(v.u.s->s, v.u.s->len, &i);
            jv_list_push(c, out, jv_strn(c, v.u.s->s + from, i - from));
        }
        return out;
    }
    default: jinja_fail(c, line, "'%s' object is not iterable", jv_kind_name(&v));
    }
}

size_t jinja_length(jctx *c, int line, const jv *v)
{
    switch (v->kind) {
    case JV_STR: return ju_count(v->u.s->s, v->u.s->len);
    case JV_LIST: return v->u.l->n;
    case JV_DICT: return v->u.d->n;
    case JV_UNDEFINED: return 0;
    default: jinja_fail(c, line, "object of type '%s' has no len()", jv_kind_name(v));
    }
}

/* ---- methods ---- */

/* str.format with "{}", "{0}", "{name}" fields and "{{" "}}" escapes. */
static jv str_format(const jargs *a, const jv_str *fmt)
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

static bool affix_match(const jargs *a, const jv_str *s, jv what, bool prefix)
{
    if (what.kind == JV_LIST && what.u.l->tuple) {
        for (size_t i = 0; i < what.u.l->n; i++)
            if (affix_match(a, s, what.u.l->items[i], prefix)) return true;
        return false;
    }
    const jv_str *p = jarg_str(a, what, prefix ? "the prefix" : "the suffix");
    if (p->len > s->len) return false;
    return memcmp(prefix ? s->s : s->s + s->len - p->len, p->s, p->len) == 0;
}

/* str.center / ljust / rjust / zfill as Python pads: width counts code
 * points, the fill is one character; center puts the odd one on the left
 * when the width is odd (CPython's rule); zfill keeps a leading sign first. */
static jv str_pad(const jargs *a, const jv_str *s, const char *name)
{
    jctx *c = a->c;
    if (a->npos < 1) jinja_fail(c, a->n->line, "str.%s needs a width", name);
    int64_t width = jarg_int(a, a->pos[0], "width");
    bool zfill = name[0] == 'z';
    const jv_str *fill = NULL;
    if (!zfill) {
        jv f = jarg(a, 1, "fillchar", jv_none());
        if (f.kind != JV_NONE) {
            fill = jarg_str(a, f, "fillchar");
            if (ju_count(fill->s, fill->len) != 1)
                jinja_fail(c, a->n->line, "str.%s: the fill character must be exactly one character long", name);
        }
    }
    int64_t len = (int64_t)ju_count(s->s, s->len), margin = width - len;
    if (margin <= 0) return jv_strn(c, s->s, s->len);
    int64_t left = name[0] == 'l' ? 0 : name[0] == 'c' ? margin / 2 + (margin & width & 1) : margin;
    const char *f = zfill ? "0" : fill ? fill->s : " ";
    size_t flen = zfill ? 1 : fill ? fill->len : 1;
    size_t sign = zfill && s->len > 0 && (s->s[0] == '+' || s->s[0] == '-') ? 1 : 0;
    jbuf b = {0};
    jbuf_put(c, &b, s->s, sign);
    for (int64_t i = 0; i < left; i++) jbuf_put(c, &b, f, flen);
    jbuf_put(c, &b, s->s + sign, s->len - sign);
    for (int64_t i = left; i < margin; i++) jbuf_put(c, &b, f, flen);
    return jbuf_take(c, &b);
}

static bool str_method(const jargs *a, const jv_str *s, const char *name, jv *out)
{
    jctx *c = a->c;
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.%s needs an argument", name);
        *out = jv_bool(affix_match(a, s, a->pos[0], name[0] == 's'));
        return true;
    }
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        jv chars = jarg(a, 0, "chars", jv_none());
        const jv_str *set = chars.kind == JV_NONE ? NULL : jarg_str(a, chars, "chars");
        *out = jstr_strip(c, s, set, name[0] != 'r', name[0] != 'l');
        return true;
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        jv sep = jarg(a, 0, "sep", jv_none());
        int64_t maxsplit = jarg_int(a, jarg(a, 1, "maxsplit", jv_int(-1)), "maxsplit");
        const jv_str *set = sep.kind == JV_NONE ? NULL : jarg_str(a, sep, "sep");
        if (set && set->len == 0) jinja_fail(c, a->n->line, "str.%s: empty separator", name);
        *out = jstr_split(c, s, set, maxsplit, name[0] == 'r');
        return true;
    }
    if (!strcmp(name, "lower")) return *out = jstr_case(c, s, JSTR_LOWER), true;
    if (!strcmp(name, "upper")) return *out = jstr_case(c, s, JSTR_UPPER), true;
    if (!strcmp(name, "title")) return *out = jstr_case(c, s, JSTR_TITLE_WORDS), true;
    if (!strcmp(name, "capitalize")) return *out = jstr_case(c, s, JSTR_CAPITALIZE), true;
    if (!strcmp(name, "replace")) {
        if (a->npos < 2) jinja_fail(c, a->n->line, "str.replace needs old and new strings");
        int64_t count = jarg_int(a, jarg(a, 2, "count", jv_int(-1)), "count");
        *out = jstr_replace(c, s, jarg_str(a, a->pos[0], "old"), jarg_str(a, a->pos[1], "new"), count);
        return true;
    }
    if (!strcmp(name, "format")) return *out = str_format(a, s), true;
    if (!strcmp(name, "center") || !strcmp(name, "ljust") || !strcmp(name, "rjust") || !strcmp(name, "zfill"))
        return *out = str_pad(a, s, name), true;
    if (!strcmp(name, "join")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.join needs an iterable");
        jv seq = jinja_iterable(c, a->n->line, a->pos[0]);
        jbuf b = {0};
        jbuf_put(c, &b, "", 0);
        for (size_t i = 0; i < seq.u.l->n; i++) {
            if (i) jbuf_put(c, &b, s->s, s->len);
            jv_str *t = jarg_str(a, seq.u.l->items[i], "each joined item");
            jbuf_put(c, &b, t->s, t->len);
        }
        *out = jbuf_take(c, &b);
        return true;
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "count") || !strcmp(name, "index")) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "str.%s needs a substring", name);
        const jv_str *sub = jarg_str(a, a->pos[0], "the substring");
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
            int32_t cp = jstr_next_cp(s->s, s->len, &i);
            utf8proc_category_t cat = utf8proc_category(cp);
            bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            bool digit = cat == UTF8PROC_CATEGORY_ND;
            switch (k) {
            case 0: ok = ok && digit; break;
            case 1: ok = ok && alpha; break;
            case 2: ok = ok && (alpha || digit); break;
            case 3: ok = ok && jstr_isspace(cp); break;
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

static bool dict_method(const jargs *a, jv obj, const char *name, jv *out)
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
    jargs a = {c, n, what, argv, nargs, kwnames, kwargs, nkw};
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
            if (!jv_is_int(&argv[i])) jinja_fail(c, n->line, "range() takes integers, not %s", jv_kind_name(&argv[i]));
        if (nargs == 1) hi = jv_int_value(&argv[0]);
        else if (nargs == 2 || nargs == 3) lo = jv_int_value(&argv[0]), hi = jv_int_value(&argv[1]);
        else jinja_fail(c, n->line, "range() takes 1 to 3 arguments");
        if (nargs == 3) st = jv_int_value(&argv[2]);
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
