/* jinja_filters.c — jinja2's filters and tests as chat templates use them,
 * with jinja2's argument names and defaults, and tojson as transformers
 * defines it (json.dumps with ensure_ascii=False, indent, separators,
 * sort_keys).  Undefined values pass through filters as jinja2's default
 * Undefined does: empty as a string, an empty sequence, length 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "leader/tokenizer/jinja_args.h"
#include "leader/tokenizer/jinja_internal.h"
#include "leader/tokenizer/jinja_str.h"

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
        if (!jv_is_int(&v)) jinja_fail(c, n->line, "test '%s' needs an integer, not %s", name, jv_kind_name(&v));
        int64_t x = jv_int_value(&v), d = 2;
        if (name[0] == 'd') {
            NEED_ARG;
            if (!jv_is_int(a0) || jv_int_value(a0) == 0) jinja_fail(c, n->line, "test 'divisibleby' needs a nonzero integer");
            d = jv_int_value(a0);
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
            return jstr_find(a0->u.s->s, a0->u.s->len, v.u.s->s, v.u.s->len) != NULL;
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
        jv other = jstr_case(c, v.u.s, name[0] == 'l' ? JSTR_LOWER : JSTR_UPPER);
        bool cased = false;
        for (size_t i = 0; i < v.u.s->len;) {
            int32_t cp = jstr_next_cp(v.u.s->s, v.u.s->len, &i);
            cased = cased || jstr_is_cased(cp);
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

static jv select_items(const jargs *a, jv v, bool by_attr, bool keep_when)
{
    jctx *c = a->c;
    jv seq = jinja_iterable(c, a->n->line, v);
    size_t at = 0;
    const jv_str *attr = NULL;
    if (by_attr) {
        if (a->npos < 1) jinja_fail(c, a->n->line, "%s needs an attribute name", a->what);
        attr = jarg_str(a, a->pos[0], "the attribute");
        at = 1;
    }
    const char *test = NULL;
    if (a->npos > at) test = jarg_str(a, a->pos[at], "the test name")->s;
    jv out = jv_list_new(c, seq.u.l->n + 1);
    for (size_t i = 0; i < seq.u.l->n; i++) {
        jv item = seq.u.l->items[i];
        jv probe = attr ? attr_path(c, a->n->line, item, attr) : item;
        bool ok = test ? jinja_test(c, a->n, test, probe, a->pos + at + 1, a->npos - at - 1) : jv_truthy(&probe);
        if (ok == keep_when) jv_list_push(c, out, item);
    }
    return out;
}

static jv join(const jargs *a, jv v)
{
    jctx *c = a->c;
    jv seq = jinja_iterable(c, a->n->line, v);
    jv sep = jarg(a, 0, "d", jv_strn(c, "", 0));
    jv attr = jarg(a, 1, "attribute", jv_none());
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

static jv tojson(const jargs *a, jv v)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    jarg_check(a, 4, names);
    jctx *c = a->c;
    jv ea = jarg(a, 0, "ensure_ascii", jv_bool(false));
    jv indent = jarg(a, 1, "indent", jv_none());
    jv seps = jarg(a, 2, "separators", jv_none());
    jv sort = jarg(a, 3, "sort_keys", jv_bool(false));
    const char *ind = NULL;
    if (jv_is_int(&indent)) {
        int64_t k = jv_int_value(&indent);
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
    while (i < n && jstr_isspace((unsigned char)s->s[i])) i++;
    while (n > i && jstr_isspace((unsigned char)s->s[n - 1])) n--;
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
    while (i < s->len && jstr_isspace((unsigned char)s->s[i])) i++;
    if (i == s->len) return false;
    double f = strtod(s->s + i, &end);
    while (*end && jstr_isspace((unsigned char)*end)) end++;
    if (*end || end == s->s + i) return false;
    *out = f;
    return true;
}

static jv to_int(const jargs *a, jv v)
{
    jv def = jarg(a, 0, "default", jv_int(0));
    int64_t base = jarg_int(a, jarg(a, 1, "base", jv_int(10)), "base");
    if (jv_is_int(&v)) return jv_int(jv_int_value(&v));
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
    if (!case_sensitive && v.kind == JV_STR) return jstr_case(c, v.u.s, JSTR_LOWER);
    return v;
}

jv jinja_filter(jctx *c, const jnode *n, jv v, const jv *argv, size_t nargs, const char **kwnames, const jv *kwargs,
                size_t nkw)
{
    const char *name = n->name;
    char what[96];
    snprintf(what, sizeof what, "filter '%s'", name);
    jargs a = {c, n, what, argv, nargs, kwnames, kwargs, nkw};
    int line = n->line;

    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv def = jarg(&a, 0, "default_value", jv_strn(c, "", 0));
        jv boolean = jarg(&a, 1, "boolean", jv_bool(false));
        if (v.kind == JV_UNDEFINED || (jv_truthy(&boolean) && !jv_truthy(&v))) return def;
        return v;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) return jv_int((int64_t)jinja_length(c, line, &v));
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
        jv cs = jarg(&a, 0, "case_sensitive", jv_bool(false));
        jv by = jarg(&a, 1, "by", jv_strn(c, "key", 3));
        jv reverse = jarg(&a, 2, "reverse", jv_bool(false));
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
        if (v.kind == JV_NAMESPACE) return jinja_getattr(c, line, v, jarg_str(&a, argv[0], "the attribute name")->s);
        return jinja_missing(c, &v, jarg_str(&a, argv[0], "the attribute name")->s);
    }
    if (!strcmp(name, "selectattr")) return select_items(&a, v, true, true);
    if (!strcmp(name, "rejectattr")) return select_items(&a, v, true, false);
    if (!strcmp(name, "select")) return select_items(&a, v, false, true);
    if (!strcmp(name, "reject")) return select_items(&a, v, false, false);
    if (!strcmp(name, "map")) {
        jv seq = jinja_iterable(c, line, v);
        jv out = jv_list_new(c, seq.u.l->n + 1);
        jv attr = jarg(&a, 99, "attribute", jv_none());
        if (attr.kind != JV_NONE) {
            jv def = jarg(&a, 99, "default", jv_undef(NULL));
            jv_str *path = jv_to_str(c, &attr);
            for (size_t i = 0; i < seq.u.l->n; i++) {
                jv x = attr_path(c, line, seq.u.l->items[i], path);
                jv_list_push(c, out, x.kind == JV_UNDEFINED && def.kind != JV_UNDEFINED ? def : x);
            }
            return out;
        }
        if (nargs < 1) jinja_fail(c, line, "filter 'map' needs a filter name or attribute=");
        jnode sub = *n;
        sub.name = jarg_str(&a, argv[0], "the filter name")->s;
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
        jv reverse = is_sort ? jarg(&a, 0, "reverse", jv_bool(false)) : jv_bool(false);
        jv cs = jarg(&a, is_sort ? 1 : 0, "case_sensitive", jv_bool(false));
        jv attr = jarg(&a, is_sort ? 2 : 1, "attribute", jv_none());
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
        jv attr = jarg(&a, 0, "attribute", jv_none());
        jv total = jarg(&a, 1, "start", jv_int(0));
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
        if (jv_is_int(&v)) return jv_int(jv_int_value(&v) < 0 ? -jv_int_value(&v) : jv_int_value(&v));
        if (v.kind == JV_FLOAT) return jv_float(v.u.f < 0 ? -v.u.f : v.u.f);
        jinja_fail(c, line, "filter 'abs': bad operand type '%s'", jv_kind_name(&v));
    }
    if (!strcmp(name, "int")) return to_int(&a, v);
    if (!strcmp(name, "float")) {
        jv def = jarg(&a, 0, "default", jv_float(0.0));
        double f;
        if (v.kind == JV_FLOAT) return v;
        if (jv_is_int(&v)) return jv_float((double)jv_int_value(&v));
        if (v.kind == JV_STR && parse_float(v.u.s, &f)) return jv_float(f);
        return def;
    }
    if (!strcmp(name, "round")) {
        int64_t prec = jarg_int(&a, jarg(&a, 0, "precision", jv_int(0)), "precision");
        jv method = jarg(&a, 1, "method", jv_strn(c, "common", 6));
        if (!jv_is_int(&v) && v.kind != JV_FLOAT) jinja_fail(c, line, "filter 'round' needs a number");
        double f = v.kind == JV_FLOAT ? v.u.f : (double)jv_int_value(&v), m = 1, r;
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
        jv chars = jarg(&a, 0, "chars", jv_none());
        return jstr_strip(c, s, chars.kind == JV_STR ? chars.u.s : NULL, true, true);
    }
    if (!strcmp(name, "lower")) return jstr_case(c, s, JSTR_LOWER);
    if (!strcmp(name, "upper")) return jstr_case(c, s, JSTR_UPPER);
    if (!strcmp(name, "title")) return jstr_case(c, s, JSTR_JINJA_TITLE);
    if (!strcmp(name, "capitalize")) return jstr_case(c, s, JSTR_CAPITALIZE);
    if (!strcmp(name, "replace")) {
        if (nargs < 2) jinja_fail(c, line, "filter 'replace' needs old and new strings");
        jv count = jarg(&a, 2, "count", jv_none());
        jv_str *old = jv_to_str(c, &argv[0]), *new_ = jv_to_str(c, &argv[1]);
        return jstr_replace(c, s, old, new_, count.kind == JV_NONE ? -1 : jarg_int(&a, count, "count"));
    }
    if (!strcmp(name, "indent")) { /* jinja2's: splitlines() of s + "\n", rejoined with "\n" */
        jv width = jarg(&a, 0, "width", jv_int(4));
        bool first = jv_truthy((jv[]){jarg(&a, 1, "first", jv_bool(false))});
        bool blank = jv_truthy((jv[]){jarg(&a, 2, "blank", jv_bool(false))});
        jv_str *pad;
        if (width.kind == JV_STR) {
            pad = width.u.s;
        } else {
            int64_t w = jarg_int(&a, width, "width");
            if (w < 0) w = 0;
            if (w > 256) jinja_fail(c, line, "filter 'indent': width %lld is past the limit of 256", (long long)w);
            char sp[257];
            memset(sp, ' ', (size_t)w);
            pad = jv_str_dup(c, sp, (size_t)w);
        }
        jv lines = jstr_splitlines(c, s);
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
        jv words = jstr_split(c, s, NULL, -1, false);
        return jv_int((int64_t)words.u.l->n);
    }
    jinja_fail(c, line, "no filter named '%s'", name);
}
