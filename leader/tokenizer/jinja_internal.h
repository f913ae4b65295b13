/* jinja_internal.h — what the parts of the Jinja interpreter share: values,
 * the arena they live in, the token stream, the syntax tree and the render
 * context.  The public face is jinja.h.
 *
 * Design: every value and tree node lives in an arena freed as a whole (the
 * template's arena for the tree, one arena per render for values), so values
 * are plain structs passed by copy with no reference counts, and an error deep
 * inside an expression unwinds with longjmp to the render's entry without
 * leaking.  The arena and the output are capped, the step count and the call
 * depth are bounded, so a hostile template ends with an error naming the limit. */
#ifndef NL_LEADER_JINJA_INTERNAL_H
#define NL_LEADER_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leader/tokenizer/jinja.h"

/* ---- limits ---- */
#define JINJA_MAX_DEPTH 200            /* nesting of blocks and expressions   */
#define JINJA_MAX_CALL_DEPTH 64        /* macro calls inside macro calls      */
#define JINJA_MAX_STEPS 20000000ull    /* nodes evaluated in one render       */
#define JINJA_MAX_OUTPUT (64u << 20)   /* bytes of rendered text              */
#define JINJA_MAX_ARENA (512u << 20)   /* bytes of values made in one render  */
#define JINJA_MAX_RANGE 1000000        /* elements of one range()             */

/* ---- arena ---- */
typedef struct jinja_arena jinja_arena;
jinja_arena *jinja_arena_create(size_t limit);
void jinja_arena_destroy(jinja_arena *a);
void *jinja_arena_alloc(jinja_arena *a, size_t n); /* NULL when out of memory or past the limit */

/* ---- values ---- */
typedef enum jv_kind {
    JV_UNDEFINED = 0,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,      /* also tuples (flag), printed as (a, b) */
    JV_DICT,      /* string keys, insertion order */
    JV_NAMESPACE, /* a dict whose attributes {% set ns.x %} may change */
    JV_MACRO,
    JV_FUNC,      /* a global function: raise_exception, namespace, range ... */
} jv_kind;

typedef struct jv_str {
    size_t len;
    char s[]; /* NUL-terminated UTF-8 */
} jv_str;

struct jv;
typedef struct jv_list {
    size_t n, cap;
    bool tuple;
    struct jv *items;
} jv_list;

typedef struct jv_dict {
    size_t n, cap;
    bool loop; /* a for loop's "loop" object: it has loop.cycle() */
    jv_str **keys;
    struct jv *vals;
} jv_dict;

struct jnode;
typedef struct jv {
    jv_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        jv_str *s;
        jv_list *l;
        jv_dict *d;
        const struct jnode *macro;
        int func;
        const char *undef; /* what was looked up, for error messages; may be NULL */
    } u;
} jv;

typedef enum jinja_func {
    JF_RAISE_EXCEPTION,
    JF_STRFTIME_NOW,
    JF_NAMESPACE,
    JF_RANGE,
    JF_DICT,
} jinja_func;

/* ---- tokens ---- */
typedef enum jtok_kind {
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP,
    JT_EOF,
} jtok_kind;

typedef struct jtok {
    jtok_kind kind;
    int line;
    const char *s; /* data, name, decoded string, or operator text */
    size_t len;
    int64_t i;
    double f;
} jtok;

/* ---- syntax tree ---- */
typedef enum jnode_kind {
    /* statements */
    JN_BODY,      /* kids: statements */
    JN_TEXT,      /* str */
    JN_OUTPUT,    /* a */
    JN_IF,        /* a cond, kids then-body, b else (JN_IF for elif, or JN_BODY) */
    JN_FOR,       /* names targets, a iterable, b filter, kids body, c else body */
    JN_SET,       /* names target (or name ns + attr), a value, or kids block body */
    JN_MACRO,     /* name, names params with defaults kwvals, kids body */
    JN_BREAK,
    JN_CONTINUE,
    /* expressions */
    JN_LITERAL,   /* value */
    JN_NAME,      /* name */
    JN_LIST,      /* kids */
    JN_TUPLE,     /* kids */
    JN_DICT,      /* kids: key, value, key, value ... */
    JN_GETATTR,   /* a . name */
    JN_GETITEM,   /* a [ b ] */
    JN_SLICE,     /* a [ kids[0] : kids[1] : kids[2] ], NULL parts absent */
    JN_CALL,      /* a ( kids, names = kwvals ) */
    JN_FILTER,    /* a | name ( kids, names = kwvals ) */
    JN_TEST,      /* a is [not] name ( kids ); op = negated */
    JN_UNARY,     /* op a */
    JN_BINARY,    /* a op b */
    JN_COMPARE,   /* a, then ops[i] kids[i] */
    JN_AND,
    JN_OR,
    JN_NOT,
    JN_COND,      /* b if a else c */
} jnode_kind;

typedef enum jop {
    JOP_NONE = 0,
    JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
    JOP_EQ, JOP_NE, JOP_LT, JOP_LE, JOP_GT, JOP_GE, JOP_IN, JOP_NOT_IN,
    JOP_NEG, JOP_POS,
} jop;

typedef struct jnode {
    jnode_kind kind;
    int line;
    int op;
    const char *name;
    const char *attr;        /* JN_SET on a namespace attribute */
    jv value;                /* JN_LITERAL */
    struct jnode *a, *b, *c;
    struct jnode **kids;
    size_t n_kids;
    int *ops;                /* JN_COMPARE: one per kid */
    const char **names;      /* targets, params, keyword argument names */
    struct jnode **kwvals;   /* defaults / keyword argument values (NULL entries allowed) */
    size_t n_names;
} jnode;

struct jinja_template {
    jinja_arena *arena;
    jnode *root;
};

/* Parse-time failure: *err holds "line N: message". */
typedef struct jinja_parse_err {
    jmp_buf jmp;
    char msg[512];
} jinja_parse_err;

/* The lexer: source (already newline-normalised) to tokens in the arena. */
void jinja_lex(jinja_arena *a, jinja_parse_err *err, const char *src, size_t len, jtok **toks, size_t *n);
/* The parser: tokens to the tree. */
jnode *jinja_parse_tokens(jinja_arena *a, jinja_parse_err *err, const jtok *toks, size_t n);

/* ---- rendering ---- */
typedef struct jframe {
    jv_dict *vars;
    struct jframe *parent;
} jframe;

typedef struct jbuf {
    char *s;
    size_t n, cap;
} jbuf;

typedef struct jctx {
    jmp_buf jmp;
    jinja_arena *arena;
    jbuf *out;               /* where text goes now (a capture for macros and block sets) */
    jframe *globals;         /* the caller's variables and the global functions */
    jframe *top;             /* the template's own top-level frame */
    jframe *frame;           /* the innermost scope now */
    uint64_t steps;
    int call_depth;
    int64_t now;             /* strftime_now's clock; -1 = the real time */
    bool raised;             /* the error came from raise_exception() */
    char msg[1024];
} jctx;

_Noreturn void jinja_fail(jctx *c, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void *jinja_alloc(jctx *c, size_t n);

/* value construction (jinja_value.c) */
jv jv_undef(const char *name);
jv jv_none(void);
jv jv_bool(bool b);
jv jv_int(int64_t i);
jv jv_float(double f);
jv jv_strn(jctx *c, const char *s, size_t n);
jv jv_list_new(jctx *c, size_t cap);
void jv_list_push(jctx *c, jv list, jv item);
jv jv_dict_new(jctx *c, size_t cap);
void jv_dict_set(jctx *c, jv_dict *d, const char *key, size_t klen, jv val);
bool jv_dict_get(const jv_dict *d, const char *key, size_t klen, jv *out);
jv_str *jv_str_dup(jctx *c, const char *s, size_t n);
const char *jv_kind_name(const jv *v);
/* Python's int, bools included (True + 1 == 2). */
static inline bool jv_is_int(const jv *v)
{
    return v->kind == JV_INT || v->kind == JV_BOOL;
}
static inline int64_t jv_int_value(const jv *v)
{
    return v->kind == JV_INT ? v->u.i : v->u.b;
}
bool jv_truthy(const jv *v);
bool jv_equal(const jv *a, const jv *b);
/* -1, 0, 1; fails (on line) for values Python cannot order */
int jv_compare(jctx *c, int line, const jv *a, const jv *b);
/* Python's str() of a value (Undefined prints empty). */
jv_str *jv_to_str(jctx *c, const jv *v);
/* Python's repr(), appended to a buffer. */
void jv_repr(jctx *c, jbuf *b, const jv *v);
/* json.dumps(v, ensure_ascii, indent (NULL: none; else the text of one level), separators, sort_keys) */
void jv_tojson(jctx *c, int line, jbuf *b, const jv *v, bool ensure_ascii, const char *indent, const char *item_sep,
               const char *key_sep, bool sort_keys, int depth);
void jbuf_put(jctx *c, jbuf *b, const char *s, size_t n);
void jbuf_puts(jctx *c, jbuf *b, const char *s);
jv jbuf_take(jctx *c, jbuf *b);

/* UTF-8 helpers on strings seen as Python str (code points). */
size_t ju_count(const char *s, size_t n);
size_t ju_offset(const char *s, size_t n, size_t cp); /* byte offset of code point cp (clamped) */

/* filters and tests (jinja_filters.c) */
jv jinja_filter(jctx *c, const jnode *n, jv v, const jv *args, size_t nargs, const char **kwnames,
                const jv *kwargs, size_t nkw);
bool jinja_test(jctx *c, const jnode *n, const char *name, jv v, const jv *args, size_t nargs);

/* lookup, methods and global functions (jinja_builtins.c) */
/* A method call obj.name(args), true when obj has such a method. */
bool jinja_method(jctx *c, const jnode *n, jv obj, const char *name, const jv *args, size_t nargs,
                  const char **kwnames, const jv *kwargs, size_t nkw, jv *out);
jv jinja_call_func(jctx *c, const jnode *n, int func, const jv *args, size_t nargs, const char **kwnames,
                   const jv *kwargs, size_t nkw);
/* Iterate a value as Jinja's for does: list items, dict keys, string characters. */
jv jinja_iterable(jctx *c, int line, jv v);
/* obj.name / obj[key] as jinja2's sandboxed getattr/getitem resolve them. */
jv jinja_getattr(jctx *c, int line, jv obj, const char *name);
jv jinja_getitem(jctx *c, int line, jv obj, jv key);
/* The Undefined for obj.name that is not there ("'dict object' has no attribute 'x'"). */
jv jinja_missing(jctx *c, const jv *obj, const char *name);
/* len(v); Undefined has length 0, values without a length fail on line. */
size_t jinja_length(jctx *c, int line, const jv *v);

/* the evaluator (jinja_eval.c), used back by filters such as map and selectattr */
jv jinja_eval(jctx *c, const jnode *n);

#endif /* NL_LEADER_JINJA_INTERNAL_H */
