/* jinja_parse.c — tokens to the syntax tree, by recursive descent with
 * jinja2's grammar and precedence (lowest first):
 *   a if c else b;  or;  and;  not;  comparisons, in, not in;  + -;  ~;
 *   * / // %;  **;  unary - +;  then postfix .attr [sub] (call), and the
 *   filter/test chain "| f(args)", "is [not] t(args)".
 * Statements: if/elif/else, for (targets, for-if, else), set (value, block,
 * namespace attribute), macro, break, continue, and transformers'
 * generation block (rendered as its body).  Nesting is bounded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/tokenizer/jinja_internal.h"

typedef struct parser {
    jinja_arena *arena;
    jinja_parse_err *err;
    const jtok *t;
    size_t n, pos;
    int depth;
} parser;

_Noreturn static void parse_fail(parser *p, const char *fmt, const char *a, const char *b)
{
    int k = snprintf(p->err->msg, sizeof p->err->msg, "line %d: ", p->t[p->pos].line);
    snprintf(p->err->msg + k, sizeof p->err->msg - (size_t)k, fmt, a, b);
    longjmp(p->err->jmp, 1);
}

static void *palloc(parser *p, size_t n)
{
    void *m = jinja_arena_alloc(p->arena, n);
    if (!m) parse_fail(p, "no memory for the template%s%s", "", "");
    memset(m, 0, n);
    return m;
}

static const jtok *cur(parser *p)
{
    return &p->t[p->pos];
}

static const char *tok_text(parser *p, const jtok *t)
{
    switch (t->kind) {
    case JT_EOF: return "end of template";
    case JT_DATA: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_STRING: return "a string";
    default: {
        size_t n = t->len > 40 ? 40 : t->len;
        char *s = palloc(p, n + 3);
        s[0] = '\'';
        memcpy(s + 1, t->s, n);
        s[n + 1] = '\'';
        return s;
    }
    }
}

static bool is_op(parser *p, const char *op)
{
    const jtok *t = cur(p);
    return t->kind == JT_OP && strcmp(t->s, op) == 0;
}

static bool is_name(parser *p, const char *name)
{
    const jtok *t = cur(p);
    return t->kind == JT_NAME && strcmp(t->s, name) == 0;
}

static bool is_name_at(parser *p, size_t at, const char *name)
{
    return at < p->n && p->t[at].kind == JT_NAME && strcmp(p->t[at].s, name) == 0;
}

static void expect_op(parser *p, const char *op)
{
    if (!is_op(p, op)) parse_fail(p, "expected '%s', got %s", op, tok_text(p, cur(p)));
    p->pos++;
}

static void expect_kind(parser *p, jtok_kind kind, const char *what)
{
    if (cur(p)->kind != kind) parse_fail(p, "expected %s, got %s", what, tok_text(p, cur(p)));
    p->pos++;
}

static const char *expect_name(parser *p, const char *what)
{
    if (cur(p)->kind != JT_NAME) parse_fail(p, "expected %s, got %s", what, tok_text(p, cur(p)));
    return p->t[p->pos++].s;
}

static jnode *node(parser *p, jnode_kind kind)
{
    jnode *n = palloc(p, sizeof *n);
    n->kind = kind;
    n->line = cur(p)->line;
    return n;
}

/* Growing arrays of children, in the arena. */
typedef struct nodes {
    jnode **v;
    size_t n, cap;
} nodes;

static void nodes_push(parser *p, nodes *ns, jnode *x)
{
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? ns->cap * 2 : 4;
        jnode **grown = palloc(p, cap * sizeof *grown);
        if (ns->n) memcpy(grown, ns->v, ns->n * sizeof *grown);
        ns->v = grown;
        ns->cap = cap;
    }
    ns->v[ns->n++] = x;
}

static void enter(parser *p)
{
    if (++p->depth > JINJA_MAX_DEPTH) parse_fail(p, "nesting deeper than the limit (%s levels)%s", "200", "");
}

/* ---- expressions ---- */

static jnode *parse_expression(parser *p);
static jnode *parse_or(parser *p);
static jnode *parse_unary(parser *p, bool with_filter);

/* "(" args ")" into n->kids and n->names/kwvals. */
static void parse_call_args(parser *p, jnode *n)
{
    expect_op(p, "(");
    nodes pos = {0}, kw = {0};
    const char **names = NULL;
    size_t n_names = 0, cap_names = 0;
    while (!is_op(p, ")")) {
        if (pos.n + kw.n > 0) expect_op(p, ",");
        if (is_op(p, ")")) break; /* trailing comma */
        if (is_op(p, "*") || is_op(p, "**")) parse_fail(p, "%s arguments are not supported%s", "*args/**kwargs", "");
        if (cur(p)->kind == JT_NAME && p->pos + 1 < p->n && p->t[p->pos + 1].kind == JT_OP &&
            strcmp(p->t[p->pos + 1].s, "=") == 0) {
            if (n_names == cap_names) {
                cap_names = cap_names ? cap_names * 2 : 4;
                const char **grown = palloc(p, cap_names * sizeof *grown);
                if (n_names) memcpy(grown, names, n_names * sizeof *grown);
                names = grown;
            }
            names[n_names++] = p->t[p->pos].s;
            p->pos += 2;
            nodes_push(p, &kw, parse_expression(p));
        } else {
            if (kw.n) parse_fail(p, "a positional argument follows keyword arguments%s%s", "", "");
            nodes_push(p, &pos, parse_expression(p));
        }
    }
    expect_op(p, ")");
    n->kids = pos.v;
    n->n_kids = pos.n;
    n->names = names;
    n->kwvals = kw.v;
    n->n_names = n_names;
}

static jv literal_str(parser *p, const char *s, size_t len)
{
    jv v = {.kind = JV_STR};
    v.u.s = palloc(p, sizeof *v.u.s + len + 1);
    v.u.s->len = len;
    memcpy(v.u.s->s, s, len);
    v.u.s->s[len] = '\0';
    return v;
}


/* The items of a tuple, list or dict literal up to its closing bracket
 * (consumed), comma-separated with an optional trailing comma; a dict's
 * items are key, value pairs.  True when a comma was seen (a one-item
 * tuple is "(x,)", a parenthesised expression "(x)"). */
static bool parse_items(parser *p, const char *close, bool pairs, nodes *items)
{
    bool comma = false;
    while (!is_op(p, close)) {
        if (items->n) {
            expect_op(p, ",");
            comma = true;
            if (is_op(p, close)) break;
        }
        nodes_push(p, items, parse_expression(p));
        if (pairs) {
            expect_op(p, ":");
            nodes_push(p, items, parse_expression(p));
        }
    }
    expect_op(p, close);
    return comma;
}

static jnode *parse_primary(parser *p)
{
    const jtok *t = cur(p);
    jnode *n;
    switch (t->kind) {
    case JT_NAME:
        n = node(p, JN_LITERAL);
        p->pos++;
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n->value = (jv){.kind = JV_BOOL, .u.b = true};
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n->value = (jv){.kind = JV_BOOL, .u.b = false};
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n->value = (jv){.kind = JV_NONE};
        } else {
            n->kind = JN_NAME;
            n->name = t->s;
        }
        return n;
    case JT_STRING: {
        n = node(p, JN_LITERAL);
        size_t len = 0, i = p->pos;
        for (; i < p->n && p->t[i].kind == JT_STRING; i++) len += p->t[i].len;
        char *buf = palloc(p, len + 1);
        size_t k = 0;
        for (; p->pos < i; p->pos++) {
            memcpy(buf + k, p->t[p->pos].s, p->t[p->pos].len);
            k += p->t[p->pos].len;
        }
        n->value = literal_str(p, buf, len);
        return n;
    }
    case JT_INT:
        n = node(p, JN_LITERAL);
        n->value = (jv){.kind = JV_INT, .u.i = t->i};
        p->pos++;
        return n;
    case JT_FLOAT:
        n = node(p, JN_LITERAL);
        n->value = (jv){.kind = JV_FLOAT, .u.f = t->f};
        p->pos++;
        return n;
    case JT_OP:
        if (!strcmp(t->s, "(")) {
            n = node(p, JN_TUPLE);
            p->pos++;
            nodes items = {0};
            bool tuple = parse_items(p, ")", false, &items);
            if (items.n == 1 && !tuple) return items.v[0];
            n->kids = items.v;
            n->n_kids = items.n;
            return n;
        }
        if (!strcmp(t->s, "[")) {
            n = node(p, JN_LIST);
            p->pos++;
            nodes items = {0};
            parse_items(p, "]", false, &items);
            n->kids = items.v;
            n->n_kids = items.n;
            return n;
        }
        if (!strcmp(t->s, "{")) {
            n = node(p, JN_DICT);
            p->pos++;
            nodes items = {0};
            parse_items(p, "}", true, &items);
            n->kids = items.v;
            n->n_kids = items.n;
            return n;
        }
        break;
    default: break;
    }
    parse_fail(p, "unexpected %s in an expression%s", tok_text(p, t), "");
}

static jnode *parse_subscript(parser *p, jnode *obj)
{
    jnode *n = node(p, JN_GETITEM);
    n->a = obj;
    expect_op(p, "[");
    jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(p, ":")) {
        parts[0] = parse_expression(p);
        if (!is_op(p, ":")) {
            expect_op(p, "]");
            n->b = parts[0];
            return n;
        }
    }
    n->kind = JN_SLICE;
    expect_op(p, ":");
    if (!is_op(p, "]") && !is_op(p, ":")) parts[1] = parse_expression(p);
    if (is_op(p, ":")) {
        p->pos++;
        if (!is_op(p, "]")) parts[2] = parse_expression(p);
    }
    expect_op(p, "]");
    n->kids = palloc(p, 3 * sizeof *n->kids);
    memcpy(n->kids, parts, sizeof parts);
    n->n_kids = 3;
    return n;
}

static jnode *parse_postfix(parser *p, jnode *n)
{
    for (;;) {
        if (is_op(p, ".")) {
            p->pos++;
            if (cur(p)->kind == JT_INT) {
                jnode *g = node(p, JN_GETITEM);
                g->a = n;
                g->b = node(p, JN_LITERAL);
                g->b->value = (jv){.kind = JV_INT, .u.i = cur(p)->i};
                p->pos++;
                n = g;
                continue;
            }
            jnode *g = node(p, JN_GETATTR);
            g->a = n;
            g->name = expect_name(p, "an attribute name after '.'");
            n = g;
        } else if (is_op(p, "[")) {
            n = parse_subscript(p, n);
        } else if (is_op(p, "(")) {
            jnode *call = node(p, JN_CALL);
            call->a = n;
            parse_call_args(p, call);
            n = call;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *p, jnode *n)
{
    for (;;) {
        if (is_op(p, "|")) {
            p->pos++;
            jnode *f = node(p, JN_FILTER);
            f->a = n;
            f->name = expect_name(p, "a filter name after '|'");
            if (is_op(p, "(")) parse_call_args(p, f);
            n = f;
        } else if (is_name(p, "is")) {
            p->pos++;
            jnode *t = node(p, JN_TEST);
            t->a = n;
            if (is_name(p, "not")) {
                p->pos++;
                t->op = 1;
            }
            t->name = expect_name(p, "a test name after 'is'");
            const jtok *c = cur(p);
            if (is_op(p, "(")) {
                parse_call_args(p, t);
            } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                        is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is")) parse_fail(p, "cannot chain multiple tests with 'is'%s%s", "", "");
                t->kids = palloc(p, sizeof *t->kids);
                t->kids[0] = parse_postfix(p, parse_primary(p));
                t->n_kids = 1;
            }
            n = t;
        } else if (is_op(p, "(")) {
            jnode *call = node(p, JN_CALL);
            call->a = n;
            parse_call_args(p, call);
            n = call;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *p, bool with_filter)
{
    enter(p);
    jnode *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        n = node(p, JN_UNARY);
        n->op = is_op(p, "-") ? JOP_NEG : JOP_POS;
        p->pos++;
        n->a = parse_unary(p, false);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *binary(parser *p, int op, jnode *a, jnode *b)
{
    jnode *n = node(p, JN_BINARY);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *p)
{
    jnode *left = parse_unary(p, true);
    while (is_op(p, "**")) {
        p->pos++;
        left = binary(p, JOP_POW, left, parse_unary(p, true));
    }
    return left;
}

static jnode *parse_math2(parser *p)
{
    jnode *left = parse_pow(p);
    for (;;) {
        int op = is_op(p, "*") ? JOP_MUL : is_op(p, "/") ? JOP_DIV : is_op(p, "//") ? JOP_FLOORDIV
               : is_op(p, "%") ? JOP_MOD : 0;
        if (!op) return left;
        p->pos++;
        left = binary(p, op, left, parse_pow(p));
    }
}

static jnode *parse_concat(parser *p)
{
    jnode *left = parse_math2(p);
    while (is_op(p, "~")) {
        p->pos++;
        left = binary(p, JOP_CONCAT, left, parse_math2(p));
    }
    return left;
}

static jnode *parse_math1(parser *p)
{
    jnode *left = parse_concat(p);
    for (;;) {
        int op = is_op(p, "+") ? JOP_ADD : is_op(p, "-") ? JOP_SUB : 0;
        if (!op) return left;
        p->pos++;
        left = binary(p, op, left, parse_concat(p));
    }
}

static jnode *parse_compare(parser *p)
{
    jnode *first = parse_math1(p);
    nodes rest = {0};
    int ops[64];
    for (;;) {
        int op = is_op(p, "==") ? JOP_EQ : is_op(p, "!=") ? JOP_NE : is_op(p, "<") ? JOP_LT
               : is_op(p, "<=") ? JOP_LE : is_op(p, ">") ? JOP_GT : is_op(p, ">=") ? JOP_GE
               : is_name(p, "in") ? JOP_IN : 0;
        if (!op && is_name(p, "not") && is_name_at(p, p->pos + 1, "in")) {
            op = JOP_NOT_IN;
            p->pos++;
        }
        if (!op) break;
        if (rest.n == 64) parse_fail(p, "more than %s chained comparisons%s", "64", "");
        p->pos++;
        ops[rest.n] = op;
        nodes_push(p, &rest, parse_math1(p));
    }
    if (rest.n == 0) return first;
    jnode *n = node(p, JN_COMPARE);
    n->a = first;
    n->kids = rest.v;
    n->n_kids = rest.n;
    n->ops = palloc(p, rest.n * sizeof(int));
    memcpy(n->ops, ops, rest.n * sizeof(int));
    return n;
}

static jnode *parse_not(parser *p)
{
    if (is_name(p, "not")) {
        enter(p);
        jnode *n = node(p, JN_NOT);
        p->pos++;
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

/* next (word next)*, left-associative: the and / or levels. */
static jnode *parse_keyword_chain(parser *p, const char *word, jnode_kind kind, jnode *(*next)(parser *))
{
    jnode *left = next(p);
    while (is_name(p, word)) {
        jnode *n = node(p, kind);
        p->pos++;
        n->a = left;
        n->b = next(p);
        left = n;
    }
    return left;
}

static jnode *parse_and(parser *p)
{
    return parse_keyword_chain(p, "and", JN_AND, parse_not);
}

static jnode *parse_or(parser *p)
{
    return parse_keyword_chain(p, "or", JN_OR, parse_and);
}

static jnode *parse_condexpr(parser *p)
{
    enter(p);
    jnode *e = parse_or(p);
    while (is_name(p, "if")) {
        jnode *n = node(p, JN_COND);
        p->pos++;
        n->b = e;
        n->a = parse_or(p);
        if (is_name(p, "else")) {
            p->pos++;
            n->c = parse_condexpr(p);
        }
        e = n;
    }
    p->depth--;
    return e;
}

static jnode *parse_expression(parser *p)
{
    return parse_condexpr(p);
}

/* ---- statements ---- */

static jnode *parse_body(parser *p, const char *const *ends);

static bool at_tag(parser *p, const char *word)
{
    return cur(p)->kind == JT_BLOCK_BEGIN && is_name_at(p, p->pos + 1, word);
}

/* Consumes "{% word %}". */
static void expect_tag(parser *p, const char *word)
{
    expect_kind(p, JT_BLOCK_BEGIN, "'{%'");
    if (!is_name(p, word)) parse_fail(p, "expected '%s', got %s", word, tok_text(p, cur(p)));
    p->pos++;
    expect_kind(p, JT_BLOCK_END, "'%}'");
}

static jnode *parse_if(parser *p)
{
    jnode *n = node(p, JN_IF);
    n->a = parse_expression(p);
    expect_kind(p, JT_BLOCK_END, "'%}' after the if condition");
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *body = parse_body(p, ends);
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    if (at_tag(p, "elif")) {
        p->pos += 2;
        n->b = parse_if(p);
        return n;
    }
    if (at_tag(p, "else")) {
        p->pos += 2;
        expect_kind(p, JT_BLOCK_END, "'%}' after else");
        static const char *const end[] = {"endif", NULL};
        n->b = parse_body(p, end);
    }
    expect_tag(p, "endif");
    return n;
}

static void parse_targets(parser *p, jnode *n, const char *what)
{
    const char **names = palloc(p, 16 * sizeof *names);
    size_t k = 0;
    bool paren = is_op(p, "(");
    if (paren) p->pos++;
    do {
        if (k == 16) parse_fail(p, "more than %s names in a %s target", "16", what);
        names[k++] = expect_name(p, "a variable name");
    } while (is_op(p, ",") && (p->pos++, true));
    if (paren) expect_op(p, ")");
    n->names = names;
    n->n_names = k;
}

static jnode *parse_for(parser *p)
{
    jnode *n = node(p, JN_FOR);
    parse_targets(p, n, "for");
    if (!is_name(p, "in")) parse_fail(p, "expected 'in' in the for statement, got %s%s", tok_text(p, cur(p)), "");
    p->pos++;
    n->a = parse_or(p); /* no "x if c else y" here: "if" starts the loop filter */
    if (is_op(p, ",")) parse_fail(p, "iterating over a bare tuple is not supported%s%s", "", "");
    if (is_name(p, "if")) {
        p->pos++;
        n->b = parse_expression(p);
    }
    if (is_name(p, "recursive")) parse_fail(p, "recursive loops are not supported%s%s", "", "");
    expect_kind(p, JT_BLOCK_END, "'%}' after the for statement");
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *body = parse_body(p, ends);
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    if (at_tag(p, "else")) {
        p->pos += 2;
        expect_kind(p, JT_BLOCK_END, "'%}' after else");
        static const char *const end[] = {"endfor", NULL};
        n->c = parse_body(p, end);
    }
    expect_tag(p, "endfor");
    return n;
}

static jnode *parse_set(parser *p)
{
    jnode *n = node(p, JN_SET);
    if (cur(p)->kind == JT_NAME && p->pos + 2 < p->n && p->t[p->pos + 1].kind == JT_OP &&
        strcmp(p->t[p->pos + 1].s, ".") == 0) {
        n->name = expect_name(p, "a variable name");
        p->pos++;
        n->attr = expect_name(p, "an attribute name");
    } else {
        parse_targets(p, n, "set");
    }
    if (is_op(p, "=")) {
        p->pos++;
        jnode *v = parse_expression(p);
        if (is_op(p, ",")) { /* set a, b = x, y */
            jnode *t = node(p, JN_TUPLE);
            nodes items = {0};
            nodes_push(p, &items, v);
            while (is_op(p, ",")) {
                p->pos++;
                nodes_push(p, &items, parse_expression(p));
            }
            t->kids = items.v;
            t->n_kids = items.n;
            v = t;
        }
        n->a = v;
        expect_kind(p, JT_BLOCK_END, "'%}' after the set statement");
        return n;
    }
    if (n->attr || n->n_names != 1) parse_fail(p, "a block set assigns one plain variable%s%s", "", "");
    expect_kind(p, JT_BLOCK_END, "'=' or '%}' in the set statement");
    static const char *const ends[] = {"endset", NULL};
    jnode *body = parse_body(p, ends);
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    expect_tag(p, "endset");
    return n;
}

static jnode *parse_macro(parser *p)
{
    jnode *n = node(p, JN_MACRO);
    n->name = expect_name(p, "a macro name");
    expect_op(p, "(");
    const char **names = palloc(p, 32 * sizeof *names);
    jnode **defaults = palloc(p, 32 * sizeof *defaults);
    size_t k = 0;
    while (!is_op(p, ")")) {
        if (k) expect_op(p, ",");
        if (k == 32) parse_fail(p, "more than %s macro parameters%s", "32", "");
        names[k] = expect_name(p, "a parameter name");
        if (is_op(p, "=")) {
            p->pos++;
            defaults[k] = parse_expression(p);
        }
        k++;
    }
    expect_op(p, ")");
    expect_kind(p, JT_BLOCK_END, "'%}' after the macro signature");
    n->names = names;
    n->kwvals = defaults;
    n->n_names = k;
    static const char *const ends[] = {"endmacro", NULL};
    jnode *body = parse_body(p, ends);
    n->kids = body->kids;
    n->n_kids = body->n_kids;
    expect_tag(p, "endmacro");
    return n;
}

static jnode *parse_statement(parser *p)
{
    enter(p);
    const char *word = expect_name(p, "a statement name after '{%'");
    jnode *n;
    if (!strcmp(word, "if")) {
        n = parse_if(p);
    } else if (!strcmp(word, "for")) {
        n = parse_for(p);
    } else if (!strcmp(word, "set")) {
        n = parse_set(p);
    } else if (!strcmp(word, "macro")) {
        n = parse_macro(p);
    } else if (!strcmp(word, "break") || !strcmp(word, "continue")) {
        n = node(p, word[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        expect_kind(p, JT_BLOCK_END, "'%}'");
    } else if (!strcmp(word, "generation")) {
        expect_kind(p, JT_BLOCK_END, "'%}'");
        static const char *const ends[] = {"endgeneration", NULL};
        n = parse_body(p, ends);
        expect_tag(p, "endgeneration");
    } else {
        p->pos--;
        parse_fail(p, "the '%s' statement is not supported%s", word, "");
    }
    p->depth--;
    return n;
}

static bool is_end(parser *p, const char *const *ends)
{
    if (!ends || cur(p)->kind != JT_BLOCK_BEGIN) return false;
    for (size_t i = 0; ends[i]; i++)
        if (is_name_at(p, p->pos + 1, ends[i])) return true;
    return false;
}

/* Statements up to one of the end words (left unconsumed) or the end. */
static jnode *parse_body(parser *p, const char *const *ends)
{
    jnode *body = node(p, JN_BODY);
    nodes kids = {0};
    for (;;) {
        const jtok *t = cur(p);
        if (t->kind == JT_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1]) last++;
                parse_fail(p, "unexpected end of template, expected '%s'%s", ends[last], "");
            }
            break;
        }
        if (is_end(p, ends)) break;
        if (t->kind == JT_DATA) {
            jnode *n = node(p, JN_TEXT);
            n->value = literal_str(p, t->s, t->len);
            p->pos++;
            nodes_push(p, &kids, n);
        } else if (t->kind == JT_VAR_BEGIN) {
            p->pos++;
            jnode *n = node(p, JN_OUTPUT);
            n->a = parse_expression(p);
            expect_kind(p, JT_VAR_END, "'}}'");
            nodes_push(p, &kids, n);
        } else if (t->kind == JT_BLOCK_BEGIN) {
            p->pos++;
            if (cur(p)->kind == JT_NAME && !strncmp(cur(p)->s, "end", 3))
                parse_fail(p, "unexpected '%s'%s", cur(p)->s, "");
            if (is_name(p, "elif") || is_name(p, "else"))
                parse_fail(p, "unexpected '%s' outside an if or for%s", cur(p)->s, "");
            nodes_push(p, &kids, parse_statement(p));
        } else {
            parse_fail(p, "unexpected %s%s", tok_text(p, t), "");
        }
    }
    body->kids = kids.v;
    body->n_kids = kids.n;
    return body;
}

jnode *jinja_parse_tokens(jinja_arena *a, jinja_parse_err *err, const jtok *toks, size_t n)
{
    parser p = {.arena = a, .err = err, .t = toks, .n = n};
    return parse_body(&p, NULL);
}
