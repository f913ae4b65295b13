/* jinja_args.h — the arguments of a filter or method call, by position or
 * keyword as Python binds them, with type checks whose errors name the
 * filter or method and the argument.  Shared by jinja_filters.c and
 * jinja_builtins.c. */
#ifndef NL_LEADER_JINJA_ARGS_H
#define NL_LEADER_JINJA_ARGS_H

#include <string.h>

#include "leader/tokenizer/jinja_internal.h"

typedef struct jargs {
    jctx *c;
    const jnode *n;
    const char *what; /* "filter 'replace'" */
    const jv *pos;
    size_t npos;
    const char **kwnames;
    const jv *kw;
    size_t nkw;
} jargs;

/* Argument i (after the value) by position or by keyword name; def when absent. */
static inline jv jarg(const jargs *a, size_t i, const char *name, jv def)
{
    if (i < a->npos) return a->pos[i];
    for (size_t k = 0; k < a->nkw; k++)
        if (name && !strcmp(a->kwnames[k], name)) return a->kw[k];
    return def;
}

static inline void jarg_check(const jargs *a, size_t max, const char *const *names)
{
    if (a->npos > max)
        jinja_fail(a->c, a->n->line, "%s takes at most %zu argument(s), %zu given", a->what, max, a->npos);
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; names && names[i]; i++) known = known || !strcmp(names[i], a->kwnames[k]);
        if (!known) jinja_fail(a->c, a->n->line, "%s got an unexpected keyword argument '%s'", a->what, a->kwnames[k]);
    }
}

static inline jv_str *jarg_str(const jargs *a, jv v, const char *name)
{
    if (v.kind != JV_STR)
        jinja_fail(a->c, a->n->line, "%s: %s must be a string, not %s", a->what, name, jv_kind_name(&v));
    return v.u.s;
}

static inline int64_t jarg_int(const jargs *a, jv v, const char *name)
{
    if (!jv_is_int(&v))
        jinja_fail(a->c, a->n->line, "%s: %s must be an integer, not %s", a->what, name, jv_kind_name(&v));
    return jv_int_value(&v);
}

#endif /* NL_LEADER_JINJA_ARGS_H */
