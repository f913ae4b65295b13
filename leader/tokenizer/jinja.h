/* jinja.h — a Jinja template interpreter held to Python's jinja2 as
 * transformers configures it for chat templates (trim_blocks, lstrip_blocks,
 * loop controls, its tojson, raise_exception and strftime_now).
 *
 * The subset is what model chat templates use: for (loop variables, else,
 * for-if, break/continue), if/elif/else, set (block set, namespace
 * attributes, tuple targets), macros, comments, whitespace control, raw;
 * Python-like expressions with filters, tests, slicing and the str/dict
 * methods templates call.  The parts: jinja_lex.c (text to tokens),
 * jinja_parse.c (tokens to a tree), jinja_eval.c (statements and
 * expressions), jinja_filters.c (filters and tests), jinja_builtins.c
 * (lookup, methods, global functions), jinja_str.c (Python's str
 * operations), jinja_value.c (values, Python str/repr, json.dumps),
 * jinja_arena.c (memory). */
#ifndef NL_LEADER_JINJA_H
#define NL_LEADER_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nanollm.h"

typedef struct jinja_template jinja_template;

/* Parses source (len bytes, UTF-8).  A syntax error is NL_ERR_FORMAT with a
 * message "line N: ..." naming the construct. */
nl_status jinja_template_create(const char *source, size_t len, jinja_template **out);
void jinja_template_destroy(jinja_template *t);

/* Renders with the variables of a JSON object (each member a template
 * variable) plus the global functions raise_exception, strftime_now,
 * namespace, range and dict.  now: the Unix time strftime_now formats (in
 * UTC), or -1 for the current local time as transformers uses.  *out is
 * malloc'd and NUL-terminated, *len its length (the text may hold NULs).
 * Errors are NL_ERR_INVALID_ARG with "line N: ..."; *raised tells that the
 * template itself called raise_exception (the message is then exactly the
 * template's). */
nl_status jinja_render(const jinja_template *t, const json_t *vars, int64_t now, char **out, size_t *len,
                       bool *raised);

#endif /* NL_LEADER_JINJA_H */
