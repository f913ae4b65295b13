/* jinja_eval.c — runs the syntax tree: statements write to the current
 * output, expressions compute values with Python's operators, scopes follow
 * jinja2 (each loop iteration and each macro call gets a fresh scope, so a
 * {% set %} inside a loop does not outlive the iteration; namespaces are how
 * state crosses it).  Also the entry points: template creation (newline
 * normalisation as jinja2 does, lexing, parsing) and rendering (the caller's
 * JSON variables become values; errors unwind here). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/tokenizer/jinja_internal.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static int exec_body(jctx *c, const jnode *const *kids, size_t n);

static void step(jctx *c, const jnode *n)
{
    if (++c->steps > JINJA_MAX_STEPS)
        jinja_fail(c, n->line, "the template ran past the limit of %llu steps", (unsigned long long)JINJA_MAX_STEPS);
}

/* ---- scopes ---- */

static jframe *frame_push(jctx *c, jframe *parent)
{
    jframe *f = jinja_alloc(c, sizeof *f);
    f->vars = jv_dict_new(c, 4).u.d;
    f->parent = parent;
    return f;
}

static jv lookup(jctx *c, const char *name)
{
    jv v;
    for (jframe *f = c->frame; f; f = f->parent)
        if (jv_dict_get(f->vars, name, strlen(name), &v)) return v;
    size_t n = strlen(name) + 20;
    char *hint = jinja_alloc(c, n);
    snprintf(hint, n, "'%s' is undefined", name);
    return jv_undef(hint);
}

static void assign(jctx *c, const char *name, jv v)
{
    jv_dict_set(c, c->frame->vars, name, strlen(name), v);
}

/* Binds for/set targets: one name takes the value, several unpack it. */
static void bind_targets(jctx *c, const jnode *n, jv v)
{
    if (n->n_names == 1) {
        assign(c, n->names[0], v);
        return;
    }
    if (v.kind != JV_LIST)
        jinja_fail(c, n->line, "cannot unpack a %s into %zu names", jv_kind_name(&v), n->n_names);
    if (v.u.l->n != n->n_names)
        jinja_fail(c, n->line, "cannot unpack %zu values into %zu names", v.u.l->n, n->n_names);
    for (size_t i = 0; i < n->n_names; i++) assign(c, n->names[i], v.u.l->items[i]);
}

/* ---- expressions ---- */

static _Noreturn void fail_undefined(jctx *c, int line, const jv *v)
{
    jinja_fail(c, line, "%s", v->u.undef ? v->u.undef : "a value is undefined");
}

static _Noreturn void fail_operands(jctx *c, const jnode *n, const char *op, const jv *a, const jv *b)
{
    if (a->kind == JV_UNDEFINED) fail_undefined(c, n->line, a);
    if (b->kind == JV_UNDEFINED) fail_undefined(c, n->line, b);
    jinja_fail(c, n->line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_kind_name(a), jv_kind_name(b));
}

static bool is_num(const jv *v)
{
    return jv_is_int(v) || v->kind == JV_FLOAT;
}

static double fval(const jv *v)
{
    return v->kind == JV_FLOAT ? v->u.f : (double)jv_int_value(v);
}

static jv repeat(jctx *c, const jnode *n, jv seq, int64_t times)
{
    /* an empty sequence repeated any number of times is empty: no limit
     * bounds its loop, so it takes none */
    const bool empty = seq.kind == JV_STR ? seq.u.s->len == 0 : seq.u.l->n == 0;
    if (times < 0 || empty) times = 0;
    if (seq.kind == JV_STR) {
        if (seq.u.s->len && (uint64_t)times > JINJA_MAX_OUTPUT / seq.u.s->len)
            jinja_fail(c, n->line, "string repetition passes the limit of %u MiB", JINJA_MAX_OUTPUT >> 20);
        jbuf b = {0};
        for (int64_t i = 0; i < times; i++) jbuf_put(c, &b, seq.u.s->s, seq.u.s->len);
        return jbuf_take(c, &b);
    }
    if (seq.u.l->n && (uint64_t)times > JINJA_MAX_RANGE / seq.u.l->n)
        jinja_fail(c, n->line, "list repetition passes the limit of %d items", JINJA_MAX_RANGE);
    jv out = jv_list_new(c, seq.u.l->n * (size_t)times + 1);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) jv_list_push(c, out, seq.u.l->items[k]);
    out.u.l->tuple = seq.u.l->tuple;
    return out;
}

/* "fmt" % args: conversions s r d i f F e E g G x X o c and %%, with
 * flags, width and precision, as Python's printf-style formatting. */
static jv percent_format(jctx *c, const jnode *n, jv fmt, jv args)
{
    jbuf b = {0};
    jbuf_put(c, &b, "", 0);
    size_t next = 0;
    const char *s = fmt.u.s->s;
    size_t len = fmt.u.s->len;
    bool tuple = args.kind == JV_LIST && args.u.l->tuple;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            jbuf_put(c, &b, s + i, 1);
            continue;
        }
        char spec[32] = "%";
        size_t k = 1;
        bool left = false;
        i++;
        while (i < len && strchr("-+ #0", s[i]) && k < 8) {
            left = left || s[i] == '-';
            spec[k++] = s[i++];
        }
        long width = -1, prec = -1;
        for (int part = 0; part < 2; part++) {
            if (part == 1) {
                if (i >= len || s[i] != '.') break;
                spec[k++] = s[i++];
                prec = 0;
            }
            long v = part ? 0 : -1;
            while (i < len && s[i] >= '0' && s[i] <= '9') {
                v = (v < 0 ? 0 : v) * 10 + (s[i] - '0');
                if (v > 4096) jinja_fail(c, n->line, "string formatting: width or precision past the limit of 4096");
                /* leading zeros say nothing ("%.0002f" is "%.2f"): with at
                 * most 4 digits of each number, spec cannot overflow */
                if (v == 0) i++;
                else spec[k++] = s[i++];
            }
            if (part) prec = v;
            else width = v;
        }
        char conv = i < len ? s[i] : 0;
        if (conv == '%') {
            jbuf_puts(c, &b, "%");
            continue;
        }
        if (!conv || !strchr("srdifFeEgGxXoc", conv))
            jinja_fail(c, n->line, "string formatting: unsupported format character '%c'", conv ? conv : '?');
        jv arg;
        if (tuple) {
            if (next >= args.u.l->n) jinja_fail(c, n->line, "not enough arguments for format string");
            arg = args.u.l->items[next++];
        } else {
            if (next++) jinja_fail(c, n->line, "not enough arguments for format string");
            arg = args;
        }
        if (conv == 's' || conv == 'r' || conv == 'c') {
            jbuf text = {0};
            jbuf_put(c, &text, "", 0);
            if (conv == 'r') jv_repr(c, &text, &arg);
            else if (conv == 'c' && jv_is_int(&arg)) jbuf_put(c, &text, (char[]){(char)jv_int_value(&arg)}, 1);
            else {
                jv_str *t = jv_to_str(c, &arg);
                jbuf_put(c, &text, t->s, t->len);
            }
            /* precision cuts and width pads in code points, as Python counts */
            size_t n_bytes = text.n, n_cps = ju_count(text.s, text.n);
            if (prec >= 0 && (size_t)prec < n_cps) {
                n_bytes = ju_offset(text.s, text.n, (size_t)prec);
                n_cps = (size_t)prec;
            }
            size_t padding = width > 0 && (size_t)width > n_cps ? (size_t)width - n_cps : 0;
            if (!left)
                for (size_t p = 0; p < padding; p++) jbuf_puts(c, &b, " ");
            jbuf_put(c, &b, text.s, n_bytes);
            if (left)
                for (size_t p = 0; p < padding; p++) jbuf_puts(c, &b, " ");
            continue;
        }
        if (!is_num(&arg))
            jinja_fail(c, n->line, "%%%c format: a real number is required, not %s", conv, jv_kind_name(&arg));
        char out[4096 + 4096 + 400];
        if (strchr("dixXo", conv)) {
            /* Python converts a float to its (unbounded) integer; this
             * renderer's integers are 64-bit, so a float past them, or not
             * finite, is refused rather than converted out of range */
            if (arg.kind == JV_FLOAT && !(arg.u.f > -9223372036854775808.0 && arg.u.f < 9223372036854775808.0))
                jinja_fail(c, n->line, "%%%c format: %g is not an integer this renderer can hold (64-bit)", conv,
                           arg.u.f);
            spec[k++] = 'l';
            spec[k++] = 'l';
            spec[k++] = conv == 'i' ? 'd' : conv;
            spec[k] = '\0';
            snprintf(out, sizeof out, spec, (long long)(arg.kind == JV_FLOAT ? (int64_t)arg.u.f : jv_int_value(&arg)));
        } else {
            spec[k++] = conv;
            spec[k] = '\0';
            snprintf(out, sizeof out, spec, fval(&arg));
        }
        jbuf_puts(c, &b, out);
    }
    size_t have = tuple ? args.u.l->n : 1;
    if (next < have && !(args.kind == JV_DICT)) jinja_fail(c, n->line, "not all arguments converted during string formatting");
    return jbuf_take(c, &b);
}

static jv arith(jctx *c, const jnode *n, int op, jv a, jv b)
{
    static const char *const names[] = {[JOP_ADD] = "+", [JOP_SUB] = "-", [JOP_MUL] = "*", [JOP_DIV] = "/",
                                        [JOP_FLOORDIV] = "//", [JOP_MOD] = "%", [JOP_POW] = "**"};
    if (op == JOP_CONCAT) {
        jv_str *x = jv_to_str(c, &a), *y = jv_to_str(c, &b);
        jbuf buf = {0};
        jbuf_put(c, &buf, x->s, x->len);
        jbuf_put(c, &buf, y->s, y->len);
        return jbuf_take(c, &buf);
    }
    if (is_num(&a) && is_num(&b)) {
        bool ints = jv_is_int(&a) && jv_is_int(&b);
        int64_t x = ints ? jv_int_value(&a) : 0, y = ints ? jv_int_value(&b) : 0, r;
        double f = fval(&a), g = fval(&b);
        switch (op) {
        case JOP_ADD:
            if (ints) {
                if (__builtin_add_overflow(x, y, &r)) break;
                return jv_int(r);
            }
            return jv_float(f + g);
        case JOP_SUB:
            if (ints) {
                if (__builtin_sub_overflow(x, y, &r)) break;
                return jv_int(r);
            }
            return jv_float(f - g);
        case JOP_MUL:
            if (ints) {
                if (__builtin_mul_overflow(x, y, &r)) break;
                return jv_int(r);
            }
            return jv_float(f * g);
        case JOP_DIV:
            if (g == 0.0) jinja_fail(c, n->line, "division by zero");
            return jv_float(f / g);
        case JOP_FLOORDIV:
        case JOP_MOD:
            if (ints) {
                if (y == 0) jinja_fail(c, n->line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) break;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q--;
                    m += y;
                }
                return jv_int(op == JOP_FLOORDIV ? q : m);
            }
            if (g == 0.0) jinja_fail(c, n->line, "float division or modulo by zero");
            if (op == JOP_FLOORDIV) return jv_float(floor(f / g));
            double m = fmod(f, g);
            if (m != 0.0 && ((m < 0) != (g < 0))) m += g;
            return jv_float(m);
        case JOP_POW:
            if (ints && y >= 0) {
                /* by squaring: log2(y) steps, so 0 ** 10**11 is as quick as
                 * 2 ** 62 (a loop of y multiplications never overflows
                 * for a base of 0, 1 or -1) */
                int64_t acc = 1, base = x;
                bool over = false;
                for (int64_t e = y; e > 0 && !over; e >>= 1) {
                    if (e & 1) over = __builtin_mul_overflow(acc, base, &acc);
                    if (e > 1 && !over) over = __builtin_mul_overflow(base, base, &base);
                }
                if (over) break;
                return jv_int(acc);
            }
            /* Python raises where C's pow() gives inf or nan: zero to a
             * negative power, a result past double's range; a negative
             * base to a fractional power is complex there, unsupported here */
            if (f == 0.0 && g < 0.0) jinja_fail(c, n->line, "0.0 cannot be raised to a negative power");
            if (f < 0.0 && isfinite(g) && g != floor(g))
                jinja_fail(c, n->line, "a negative number to a fractional power is complex (not supported)");
            double r = pow(f, g);
            if (isinf(r) && isfinite(f) && isfinite(g)) jinja_fail(c, n->line, "** result out of range (a float overflow)");
            return jv_float(r);
        }
        jinja_fail(c, n->line, "integer overflow in %s (values past 64 bits are not supported)", names[op]);
    }
    if (op == JOP_ADD && a.kind == JV_STR && b.kind == JV_STR) {
        jbuf buf = {0};
        jbuf_put(c, &buf, a.u.s->s, a.u.s->len);
        jbuf_put(c, &buf, b.u.s->s, b.u.s->len);
        return jbuf_take(c, &buf);
    }
    if (op == JOP_ADD && a.kind == JV_LIST && b.kind == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        jv out = jv_list_new(c, a.u.l->n + b.u.l->n + 1);
        for (size_t i = 0; i < a.u.l->n; i++) jv_list_push(c, out, a.u.l->items[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jv_list_push(c, out, b.u.l->items[i]);
        out.u.l->tuple = a.u.l->tuple;
        return out;
    }
    if (op == JOP_MUL && (a.kind == JV_STR || a.kind == JV_LIST) && jv_is_int(&b)) return repeat(c, n, a, jv_int_value(&b));
    if (op == JOP_MUL && (b.kind == JV_STR || b.kind == JV_LIST) && jv_is_int(&a)) return repeat(c, n, b, jv_int_value(&a));
    if (op == JOP_MOD && a.kind == JV_STR) return percent_format(c, n, a, b);
    fail_operands(c, n, names[op], &a, &b);
}

static bool contains(jctx *c, const jnode *n, jv needle, jv hay)
{
    switch (hay.kind) {
    case JV_STR:
        if (needle.kind != JV_STR)
            jinja_fail(c, n->line, "'in <string>' requires string as left operand, not %s", jv_kind_name(&needle));
        if (needle.u.s->len == 0) return true;
        if (needle.u.s->len > hay.u.s->len) return false;
        for (size_t i = 0; i + needle.u.s->len <= hay.u.s->len; i++)
            if (memcmp(hay.u.s->s + i, needle.u.s->s, needle.u.s->len) == 0) return true;
        return false;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (jv_equal(&needle, &hay.u.l->items[i])) return true;
        return false;
    case JV_DICT:
    case JV_NAMESPACE:
        if (hay.kind == JV_NAMESPACE) jinja_fail(c, n->line, "argument of type 'Namespace' is not iterable");
        if (needle.kind != JV_STR) return false;
        jv ignored;
        return jv_dict_get(hay.u.d, needle.u.s->s, needle.u.s->len, &ignored);
    case JV_UNDEFINED: return false;
    default: jinja_fail(c, n->line, "argument of type '%s' is not iterable", jv_kind_name(&hay));
    }
}

static bool compare(jctx *c, const jnode *n, int op, jv a, jv b)
{
    switch (op) {
    case JOP_EQ: return jv_equal(&a, &b);
    case JOP_NE: return !jv_equal(&a, &b);
    case JOP_IN: return contains(c, n, a, b);
    case JOP_NOT_IN: return !contains(c, n, a, b);
    case JOP_LT: return jv_compare(c, n->line, &a, &b) < 0;
    case JOP_LE: return jv_compare(c, n->line, &a, &b) <= 0;
    case JOP_GT: return jv_compare(c, n->line, &a, &b) > 0;
    default: return jv_compare(c, n->line, &a, &b) >= 0;
    }
}

/* Python's slice bounds on a sequence of len items. */
static void slice_bounds(jctx *c, const jnode *n, size_t len, jv *parts, int64_t *start, int64_t *stop,
                         int64_t *stepv)
{
    int64_t L = (int64_t)len;
    for (int i = 0; i < 3; i++)
        if (parts[i].kind != JV_NONE && parts[i].kind != JV_UNDEFINED && !jv_is_int(&parts[i]))
            jinja_fail(c, n->line, "slice indices must be integers or None, not %s", jv_kind_name(&parts[i]));
    bool has[3];
    for (int i = 0; i < 3; i++) has[i] = parts[i].kind != JV_NONE && parts[i].kind != JV_UNDEFINED;
    *stepv = has[2] ? jv_int_value(&parts[2]) : 1;
    if (*stepv == 0) jinja_fail(c, n->line, "slice step cannot be zero");
    int64_t lo = *stepv < 0 ? -1 : 0, hi = *stepv < 0 ? L - 1 : L;
    if (has[0]) {
        *start = jv_int_value(&parts[0]);
        if (*start < 0) *start = *start + L < lo ? lo : *start + L;
        else if (*start > hi) *start = hi;
    } else {
        *start = *stepv < 0 ? hi : lo;
    }
    if (has[1]) {
        *stop = jv_int_value(&parts[1]);
        if (*stop < 0) *stop = *stop + L < lo ? lo : *stop + L;
        else if (*stop > hi) *stop = hi;
    } else {
        *stop = *stepv < 0 ? lo : hi;
    }
}

static jv eval_slice(jctx *c, const jnode *n)
{
    jv obj = jinja_eval(c, n->a);
    jv parts[3];
    for (int i = 0; i < 3; i++) parts[i] = n->kids[i] ? jinja_eval(c, n->kids[i]) : jv_none();
    if (obj.kind == JV_UNDEFINED) fail_undefined(c, n->line, &obj);
    int64_t start, stop, st;
    if (obj.kind == JV_LIST) {
        slice_bounds(c, n, obj.u.l->n, parts, &start, &stop, &st);
        jv out = jv_list_new(c, 4);
        out.u.l->tuple = obj.u.l->tuple;
        for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st) jv_list_push(c, out, obj.u.l->items[i]);
        return out;
    }
    if (obj.kind == JV_STR) {
        size_t cps = ju_count(obj.u.s->s, obj.u.s->len);
        slice_bounds(c, n, cps, parts, &start, &stop, &st);
        jbuf b = {0};
        if (st == 1) {
            if (start < stop) {
                size_t from = ju_offset(obj.u.s->s, obj.u.s->len, (size_t)start);
                size_t to = ju_offset(obj.u.s->s, obj.u.s->len, (size_t)stop);
                jbuf_put(c, &b, obj.u.s->s + from, to - from);
            }
            return jbuf_take(c, &b);
        }
        size_t *offs = jinja_alloc(c, (cps + 1) * sizeof *offs);
        for (size_t i = 0, at = 0; i <= cps; i++) {
            offs[i] = at;
            if (at < obj.u.s->len) at = at + ju_offset(obj.u.s->s + at, obj.u.s->len - at, 1);
        }
        for (int64_t i = start; st > 0 ? i < stop : i > stop; i += st)
            jbuf_put(c, &b, obj.u.s->s + offs[i], offs[i + 1] - offs[i]);
        return jbuf_take(c, &b);
    }
    jinja_fail(c, n->line, "'%s' object is not subscriptable", jv_kind_name(&obj));
}

static jv call_macro(jctx *c, const jnode *n, const jnode *m, const jv *args, size_t nargs, const char **kwnames,
                     const jv *kwargs, size_t nkw)
{
    if (nargs > m->n_names)
        jinja_fail(c, n->line, "macro '%s' takes not more than %zu argument(s)", m->name, m->n_names);
    if (c->call_depth >= JINJA_MAX_CALL_DEPTH)
        jinja_fail(c, n->line, "macro '%s': calls nested deeper than %d", m->name, JINJA_MAX_CALL_DEPTH);
    jframe *saved = c->frame;
    jbuf *saved_out = c->out;
    c->frame = frame_push(c, c->top);
    for (size_t k = 0; k < nkw; k++) {
        size_t i = 0;
        while (i < m->n_names && strcmp(m->names[i], kwnames[k]) != 0) i++;
        if (i == m->n_names) jinja_fail(c, n->line, "macro '%s' takes no keyword argument '%s'", m->name, kwnames[k]);
        if (i < nargs) jinja_fail(c, n->line, "macro '%s' got multiple values for argument '%s'", m->name, kwnames[k]);
    }
    for (size_t i = 0; i < m->n_names; i++) {
        jv v = jv_undef(NULL);
        bool given = false;
        if (i < nargs) {
            v = args[i];
            given = true;
        }
        for (size_t k = 0; k < nkw && !given; k++)
            if (!strcmp(kwnames[k], m->names[i])) {
                v = kwargs[k];
                given = true;
            }
        if (!given && m->kwvals[i]) v = jinja_eval(c, m->kwvals[i]);
        if (!given && !m->kwvals[i]) {
            size_t len = strlen(m->names[i]) + 64;
            char *hint = jinja_alloc(c, len);
            snprintf(hint, len, "parameter '%s' was not provided", m->names[i]);
            v = jv_undef(hint);
        }
        assign(c, m->names[i], v);
    }
    jbuf out = {0};
    c->out = &out;
    c->call_depth++;
    exec_body(c, (const jnode *const *)m->kids, m->n_kids);
    c->call_depth--;
    c->out = saved_out;
    c->frame = saved;
    return jbuf_take(c, &out);
}

static jv eval_call(jctx *c, const jnode *n)
{
    size_t nargs = n->n_kids, nkw = n->n_names;
    jv *args = jinja_alloc(c, (nargs + 1) * sizeof *args);
    jv *kwargs = jinja_alloc(c, (nkw + 1) * sizeof *kwargs);
    jv callee;
    if (n->a->kind == JN_GETATTR) {
        jv obj = jinja_eval(c, n->a->a);
        for (size_t i = 0; i < nargs; i++) args[i] = jinja_eval(c, n->kids[i]);
        for (size_t i = 0; i < nkw; i++) kwargs[i] = jinja_eval(c, n->kwvals[i]);
        jv out;
        if (obj.kind == JV_UNDEFINED) fail_undefined(c, n->line, &obj);
        if (jinja_method(c, n, obj, n->a->name, args, nargs, n->names, kwargs, nkw, &out)) return out;
        callee = jinja_getattr(c, n->line, obj, n->a->name);
    } else {
        callee = jinja_eval(c, n->a);
        for (size_t i = 0; i < nargs; i++) args[i] = jinja_eval(c, n->kids[i]);
        for (size_t i = 0; i < nkw; i++) kwargs[i] = jinja_eval(c, n->kwvals[i]);
    }
    if (callee.kind == JV_MACRO) return call_macro(c, n, callee.u.macro, args, nargs, n->names, kwargs, nkw);
    if (callee.kind == JV_FUNC) return jinja_call_func(c, n, callee.u.func, args, nargs, n->names, kwargs, nkw);
    if (callee.kind == JV_UNDEFINED) fail_undefined(c, n->line, &callee);
    jinja_fail(c, n->line, "'%s' object is not callable", jv_kind_name(&callee));
}

jv jinja_eval(jctx *c, const jnode *n)
{
    step(c, n);
    switch (n->kind) {
    case JN_LITERAL: return n->value;
    case JN_NAME: return lookup(c, n->name);
    case JN_LIST:
    case JN_TUPLE: {
        jv out = jv_list_new(c, n->n_kids + 1);
        out.u.l->tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->n_kids; i++) jv_list_push(c, out, jinja_eval(c, n->kids[i]));
        return out;
    }
    case JN_DICT: {
        jv out = jv_dict_new(c, n->n_kids / 2 + 1);
        for (size_t i = 0; i + 1 < n->n_kids; i += 2) {
            jv k = jinja_eval(c, n->kids[i]);
            if (k.kind != JV_STR) jinja_fail(c, n->line, "dict keys must be strings here, not %s", jv_kind_name(&k));
            jv_dict_set(c, out.u.d, k.u.s->s, k.u.s->len, jinja_eval(c, n->kids[i + 1]));
        }
        return out;
    }
    case JN_GETATTR: return jinja_getattr(c, n->line, jinja_eval(c, n->a), n->name);
    case JN_GETITEM: {
        jv obj = jinja_eval(c, n->a);
        return jinja_getitem(c, n->line, obj, jinja_eval(c, n->b));
    }
    case JN_SLICE: return eval_slice(c, n);
    case JN_CALL: return eval_call(c, n);
    case JN_FILTER:
    case JN_TEST: {
        jv v = jinja_eval(c, n->a);
        jv *args = jinja_alloc(c, (n->n_kids + 1) * sizeof *args);
        jv *kwargs = jinja_alloc(c, (n->n_names + 1) * sizeof *kwargs);
        for (size_t i = 0; i < n->n_kids; i++) args[i] = jinja_eval(c, n->kids[i]);
        for (size_t i = 0; i < n->n_names; i++) kwargs[i] = jinja_eval(c, n->kwvals[i]);
        if (n->kind == JN_FILTER) return jinja_filter(c, n, v, args, n->n_kids, n->names, kwargs, n->n_names);
        return jv_bool(jinja_test(c, n, n->name, v, args, n->n_kids) != (n->op != 0));
    }
    case JN_UNARY: {
        jv v = jinja_eval(c, n->a);
        if (v.kind == JV_FLOAT) return jv_float(n->op == JOP_NEG ? -v.u.f : v.u.f);
        if (jv_is_int(&v)) {
            if (n->op == JOP_NEG && jv_int_value(&v) == INT64_MIN) jinja_fail(c, n->line, "integer overflow in unary -");
            return jv_int(n->op == JOP_NEG ? -jv_int_value(&v) : jv_int_value(&v));
        }
        if (v.kind == JV_UNDEFINED) fail_undefined(c, n->line, &v);
        jinja_fail(c, n->line, "bad operand type for unary %s: '%s'", n->op == JOP_NEG ? "-" : "+", jv_kind_name(&v));
    }
    case JN_BINARY: {
        jv a = jinja_eval(c, n->a);
        return arith(c, n, n->op, a, jinja_eval(c, n->b));
    }
    case JN_COMPARE: {
        jv left = jinja_eval(c, n->a);
        for (size_t i = 0; i < n->n_kids; i++) {
            jv right = jinja_eval(c, n->kids[i]);
            if (!compare(c, n, n->ops[i], left, right)) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case JN_AND: {
        jv a = jinja_eval(c, n->a);
        return jv_truthy(&a) ? jinja_eval(c, n->b) : a;
    }
    case JN_OR: {
        jv a = jinja_eval(c, n->a);
        return jv_truthy(&a) ? a : jinja_eval(c, n->b);
    }
    case JN_NOT: {
        jv a = jinja_eval(c, n->a);
        return jv_bool(!jv_truthy(&a));
    }
    case JN_COND: {
        jv cond = jinja_eval(c, n->a);
        if (jv_truthy(&cond)) return jinja_eval(c, n->b);
        return n->c ? jinja_eval(c, n->c) : jv_undef("the conditional expression had no else branch");
    }
    default: jinja_fail(c, n->line, "a statement where an expression belongs");
    }
}

/* ---- statements ---- */

static jv loop_object(jctx *c, const jv *items, size_t i, size_t len)
{
    jv loop = jv_dict_new(c, 12);
    jv_dict *d = loop.u.d;
    d->loop = true;
    jv_dict_set(c, d, "index0", 6, jv_int((int64_t)i));
    jv_dict_set(c, d, "index", 5, jv_int((int64_t)i + 1));
    jv_dict_set(c, d, "revindex0", 9, jv_int((int64_t)(len - i - 1)));
    jv_dict_set(c, d, "revindex", 8, jv_int((int64_t)(len - i)));
    jv_dict_set(c, d, "first", 5, jv_bool(i == 0));
    jv_dict_set(c, d, "last", 4, jv_bool(i + 1 == len));
    jv_dict_set(c, d, "length", 6, jv_int((int64_t)len));
    jv_dict_set(c, d, "depth", 5, jv_int(1));
    jv_dict_set(c, d, "depth0", 6, jv_int(0));
    jv_dict_set(c, d, "previtem", 8, i > 0 ? items[i - 1] : jv_undef("there is no previous item"));
    jv_dict_set(c, d, "nextitem", 8, i + 1 < len ? items[i + 1] : jv_undef("there is no next item"));
    return loop;
}

static void exec_for(jctx *c, const jnode *n)
{
    jv seq = jinja_iterable(c, n->line, jinja_eval(c, n->a));
    jframe *outer = c->frame;
    const jv *items = seq.u.l->items;
    size_t len = seq.u.l->n;
    if (n->b) { /* for-if: the loop runs over the items the filter keeps */
        jv kept = jv_list_new(c, len + 1);
        for (size_t i = 0; i < len; i++) {
            c->frame = frame_push(c, outer);
            bind_targets(c, n, items[i]);
            jv ok = jinja_eval(c, n->b);
            if (jv_truthy(&ok)) jv_list_push(c, kept, items[i]);
        }
        c->frame = outer;
        items = kept.u.l->items;
        len = kept.u.l->n;
    }
    for (size_t i = 0; i < len; i++) {
        c->frame = frame_push(c, outer);
        bind_targets(c, n, items[i]);
        assign(c, "loop", loop_object(c, items, i, len));
        int flow = exec_body(c, (const jnode *const *)n->kids, n->n_kids);
        c->frame = outer;
        if (flow == FLOW_BREAK) break;
    }
    if (len == 0 && n->c) {
        c->frame = frame_push(c, outer);
        exec_body(c, (const jnode *const *)n->c->kids, n->c->n_kids);
        c->frame = outer;
    }
}

static void exec_set(jctx *c, const jnode *n)
{
    jv v;
    if (n->a) {
        v = jinja_eval(c, n->a);
    } else {
        jbuf out = {0}, *saved = c->out;
        c->out = &out;
        exec_body(c, (const jnode *const *)n->kids, n->n_kids);
        c->out = saved;
        v = jbuf_take(c, &out);
    }
    if (n->attr) {
        jv ns = lookup(c, n->name);
        if (ns.kind != JV_NAMESPACE)
            jinja_fail(c, n->line, "cannot assign attribute on non-namespace object ('%s' is %s)", n->name,
                       jv_kind_name(&ns));
        jv_dict_set(c, ns.u.d, n->attr, strlen(n->attr), v);
        return;
    }
    bind_targets(c, n, v);
}

static int exec_body(jctx *c, const jnode *const *kids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const jnode *s = kids[i];
        step(c, s);
        switch (s->kind) {
        case JN_TEXT: jbuf_put(c, c->out, s->value.u.s->s, s->value.u.s->len); break;
        case JN_OUTPUT: {
            jv v = jinja_eval(c, s->a);
            jv_str *t = jv_to_str(c, &v);
            jbuf_put(c, c->out, t->s, t->len);
            break;
        }
        case JN_IF: {
            const jnode *branch = s;
            while (branch && branch->kind == JN_IF) {
                jv cond = jinja_eval(c, branch->a);
                if (jv_truthy(&cond)) break;
                branch = branch->b;
            }
            if (!branch) break;
            int flow = exec_body(c, (const jnode *const *)branch->kids, branch->n_kids);
            if (flow != FLOW_NORMAL) return flow;
            break;
        }
        case JN_BODY: {
            int flow = exec_body(c, (const jnode *const *)s->kids, s->n_kids);
            if (flow != FLOW_NORMAL) return flow;
            break;
        }
        case JN_FOR: exec_for(c, s); break;
        case JN_SET: exec_set(c, s); break;
        case JN_MACRO: {
            jv m = {.kind = JV_MACRO};
            m.u.macro = s;
            assign(c, s->name, m);
            break;
        }
        case JN_BREAK: return FLOW_BREAK;
        case JN_CONTINUE: return FLOW_CONTINUE;
        default: jinja_fail(c, s->line, "an expression where a statement belongs");
        }
    }
    return FLOW_NORMAL;
}

/* ---- entry points ---- */

nl_status jinja_template_create(const char *source, size_t len, jinja_template **out)
{
    *out = NULL;
    jinja_template *t = calloc(1, sizeof *t);
    if (!t || !(t->arena = jinja_arena_create((size_t)1 << 30))) {
        free(t);
        return nl_error(NL_ERR_NOMEM, "template: no memory");
    }
    /* jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline. */
    char *src = jinja_arena_alloc(t->arena, len + 1);
    if (!src) {
        jinja_template_destroy(t);
        return nl_error(NL_ERR_NOMEM, "template: no memory for %zu bytes", len);
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else {
            src[n++] = source[i];
        }
    }
    if (n > 0 && src[n - 1] == '\n') n--;
    src[n] = '\0';
    jinja_parse_err err;
    if (setjmp(err.jmp)) {
        jinja_template_destroy(t);
        return nl_error(NL_ERR_FORMAT, "%s", err.msg);
    }
    jtok *toks;
    size_t n_toks;
    jinja_lex(t->arena, &err, src, n, &toks, &n_toks);
    t->root = jinja_parse_tokens(t->arena, &err, toks, n_toks);
    *out = t;
    return NL_OK;
}

void jinja_template_destroy(jinja_template *t)
{
    if (!t) return;
    jinja_arena_destroy(t->arena);
    free(t);
}

static jv from_json(jctx *c, const json_t *j, int depth)
{
    if (depth > 512) jinja_fail(c, 0, "input JSON nested deeper than 512 levels");
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int(json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: return jv_strn(c, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        jv out = jv_list_new(c, json_array_size(j) + 1);
        for (size_t i = 0; i < json_array_size(j); i++) jv_list_push(c, out, from_json(c, json_array_get(j, i), depth + 1));
        return out;
    }
    case JSON_OBJECT: {
        jv out = jv_dict_new(c, json_object_size(j) + 1);
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            jv_dict_set(c, out.u.d, key, strlen(key), from_json(c, val, depth + 1));
        }
        return out;
    }
    }
    return jv_none();
}

nl_status jinja_render(const jinja_template *t, const json_t *vars, int64_t now, char **out, size_t *len,
                       bool *raised)
{
    *out = NULL;
    *len = 0;
    *raised = false;
    jctx *c = calloc(1, sizeof *c);
    if (!c || !(c->arena = jinja_arena_create(JINJA_MAX_ARENA))) {
        free(c);
        return nl_error(NL_ERR_NOMEM, "template: no memory to render");
    }
    c->now = now;
    jbuf result = {0};
    if (setjmp(c->jmp)) {
        nl_status st = nl_error(NL_ERR_INVALID_ARG, "%s", c->msg);
        *raised = c->raised;
        jinja_arena_destroy(c->arena);
        free(c);
        return st;
    }
    c->globals = frame_push(c, NULL);
    static const struct { const char *name; int func; } funcs[] = {
        {"raise_exception", JF_RAISE_EXCEPTION}, {"strftime_now", JF_STRFTIME_NOW},
        {"namespace", JF_NAMESPACE}, {"range", JF_RANGE}, {"dict", JF_DICT},
    };
    for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++) {
        jv f = {.kind = JV_FUNC};
        f.u.func = funcs[i].func;
        jv_dict_set(c, c->globals->vars, funcs[i].name, strlen(funcs[i].name), f);
    }
    if (vars) {
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)vars, key, val) {
            jv_dict_set(c, c->globals->vars, key, strlen(key), from_json(c, val, 0));
        }
    }
    c->top = c->frame = frame_push(c, c->globals);
    c->out = &result;
    exec_body(c, (const jnode *const *)t->root->kids, t->root->n_kids);
    char *text = malloc(result.n + 1);
    nl_status st = NL_OK;
    if (!text) {
        st = nl_error(NL_ERR_NOMEM, "template: no memory for %zu bytes of output", result.n);
    } else {
        if (result.n) memcpy(text, result.s, result.n);
        text[result.n] = '\0';
        *out = text;
        *len = result.n;
    }
    jinja_arena_destroy(c->arena);
    free(c);
    return st;
}
