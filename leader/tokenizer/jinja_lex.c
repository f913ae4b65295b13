/* jinja_lex.c — template text to tokens, following jinja2's lexer with
 * trim_blocks and lstrip_blocks on:
 *  - text between tags is data; "{%-" / "{{-" / "{#-" strip all whitespace
 *    before the tag, "-%}" / "-}}" / "-#}" all whitespace after it;
 *  - lstrip_blocks: spaces and tabs between a line start and "{%" or "{#"
 *    (not "{{", not "{%+") are dropped;
 *  - trim_blocks: the first newline after "%}" or "#}" is dropped;
 *  - inside a tag, an end delimiter counts only outside brackets, so
 *    "{{ {'a': {'b': 1}} }}" lexes as jinja2 lexes it;
 *  - string literals decode Python's escapes (\n, \t, \xhh, \uhhhh ...).
 * Comments vanish here; "{% raw %}...{% endraw %}" becomes data. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/tokenizer/jinja_internal.h"
#include "leader/tokenizer/jinja_str.h"

typedef struct lexer {
    jinja_arena *arena;
    jinja_parse_err *err;
    const char *src;
    size_t len, pos;
    int line;
    bool line_starting; /* the last thing consumed ended a line */
    jtok *toks;
    size_t n, cap;
} lexer;

_Noreturn static void lex_fail(lexer *lx, const char *fmt, const char *what)
{
    int k = snprintf(lx->err->msg, sizeof lx->err->msg, "line %d: ", lx->line);
    snprintf(lx->err->msg + k, sizeof lx->err->msg - (size_t)k, fmt, what);
    longjmp(lx->err->jmp, 1);
}

static void *lex_alloc(lexer *lx, size_t n)
{
    void *p = jinja_arena_alloc(lx->arena, n);
    if (!p) lex_fail(lx, "%s", "no memory for the template");
    return p;
}

static jtok *emit(lexer *lx, jtok_kind kind, const char *s, size_t len)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *grown = lex_alloc(lx, cap * sizeof *grown);
        if (lx->n) memcpy(grown, lx->toks, lx->n * sizeof *grown);
        lx->toks = grown;
        lx->cap = cap;
    }
    jtok *t = &lx->toks[lx->n++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->line = lx->line;
    t->s = s;
    t->len = len;
    return t;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Whitespace as Python's \s and str.strip() see it (Unicode), for the
 * whitespace control around tags: the length of the whitespace character
 * starting at src[i] (0 when there is none). */
static size_t space_at(const char *src, size_t len, size_t i)
{
    size_t k = i;
    int32_t cp = jstr_next_cp(src, len, &k);
    return jstr_isspace(cp) ? k - i : 0;
}

/* The same for the character ending at src[e - 1] (from no earlier than start). */
static size_t space_before(const char *src, size_t start, size_t e)
{
    size_t b = e - 1;
    while (b > start && e - b < 4 && ((unsigned char)src[b] & 0xC0) == 0x80) b--;
    return space_at(src, e, b) == e - b ? e - b : 0;
}

static int count_lines(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* Consumes src[pos..to) and updates the line count. */
static void advance(lexer *lx, size_t to)
{
    lx->line += count_lines(lx->src + lx->pos, to - lx->pos);
    if (to > lx->pos) lx->line_starting = lx->src[to - 1] == '\n';
    lx->pos = to;
}

/* Data before a tag, with the tag's whitespace control applied. */
static void emit_data(lexer *lx, size_t start, size_t end, char sign, bool lstrip)
{
    size_t e = end, k;
    if (sign == '-') {
        while (e > start && (k = space_before(lx->src, start, e))) e -= k;
    } else if (sign != '+' && lstrip) {
        size_t l = e;
        while (l > start && lx->src[l - 1] != '\n') l--;
        bool all_ws = l < e;
        for (size_t i = l; i < e && all_ws; i += k) all_ws = (k = space_at(lx->src, e, i)) > 0;
        if ((l > start || lx->line_starting) && all_ws) e = l;
    }
    if (e > start) {
        jtok *t = emit(lx, JT_DATA, lx->src + start, e - start);
        t->line = lx->line;
    }
}

/* After an end delimiter at lx->pos of length n: "-" strips all following
 * whitespace, a block/comment end drops one newline (trim_blocks). */
static void end_tag(lexer *lx, size_t n, char sign, bool block)
{
    size_t to = lx->pos + n, k;
    if (sign == '-') {
        while (to < lx->len && (k = space_at(lx->src, lx->len, to))) to += k;
    } else if (sign != '+' && block && to < lx->len && lx->src[to] == '\n') {
        to++;
    }
    advance(lx, to);
}

static void put_utf8(char *out, size_t *k, uint32_t cp)
{
    if (cp < 0x80) {
        out[(*k)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*k)++] = (char)(0xC0 | (cp >> 6));
        out[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*k)++] = (char)(0xE0 | (cp >> 12));
        out[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*k)++] = (char)(0xF0 | (cp >> 18));
        out[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static bool hex_digits(const char *s, size_t avail, int n, uint32_t *out)
{
    if ((size_t)n > avail) return false;
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        if (!isxdigit((unsigned char)s[i])) return false;
        v = v * 16 + (uint32_t)(isdigit((unsigned char)s[i]) ? s[i] - '0' : (tolower((unsigned char)s[i]) - 'a' + 10));
    }
    *out = v;
    return true;
}

/* A quoted literal at lx->pos, decoded as Python's unicode-escape. */
static void lex_string(lexer *lx)
{
    char q = lx->src[lx->pos];
    size_t i = lx->pos + 1;
    while (i < lx->len && lx->src[i] != q) i += lx->src[i] == '\\' ? 2 : 1;
    if (i >= lx->len) lex_fail(lx, "%s", "unterminated string literal");
    const char *s = lx->src + lx->pos + 1;
    size_t n = i - lx->pos - 1;
    char *out = lex_alloc(lx, n + 1);
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (s[j] != '\\' || j + 1 >= n) {
            out[k++] = s[j];
            continue;
        }
        char e = s[++j];
        uint32_t cp;
        switch (e) {
        case '\n': break;
        case 'N': lex_fail(lx, "%s", "string literal: \\N{...} escapes are not supported");
        case '\\': out[k++] = '\\'; break;
        case '\'': out[k++] = '\''; break;
        case '"': out[k++] = '"'; break;
        case 'n': out[k++] = '\n'; break;
        case 't': out[k++] = '\t'; break;
        case 'r': out[k++] = '\r'; break;
        case 'a': out[k++] = '\a'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'v': out[k++] = '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
            int w = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (!hex_digits(s + j + 1, n - j - 1, w, &cp) || cp > 0x10FFFF)
                lex_fail(lx, "string literal: bad \\%c escape", (char[]){e, 0});
            put_utf8(out, &k, cp);
            j += (size_t)w;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                int d = 0;
                for (; d < 3 && j < n && s[j] >= '0' && s[j] <= '7'; d++, j++) cp = cp * 8 + (uint32_t)(s[j] - '0');
                j--;
                put_utf8(out, &k, cp);
            } else {
                out[k++] = '\\';
                out[k++] = e;
            }
        }
    }
    out[k] = '\0';
    emit(lx, JT_STRING, out, k);
    advance(lx, i + 1);
}

static void lex_number(lexer *lx)
{
    size_t i = lx->pos;
    char buf[128];
    size_t k = 0;
    bool is_float = false;
    while (i < lx->len && (isdigit((unsigned char)lx->src[i]) || lx->src[i] == '_')) {
        if (lx->src[i] != '_' && k < sizeof buf - 8) buf[k++] = lx->src[i];
        i++;
    }
    if (i + 1 < lx->len && lx->src[i] == '.' && isdigit((unsigned char)lx->src[i + 1])) {
        is_float = true;
        buf[k++] = lx->src[i++];
        while (i < lx->len && (isdigit((unsigned char)lx->src[i]) || lx->src[i] == '_')) {
            if (lx->src[i] != '_' && k < sizeof buf - 8) buf[k++] = lx->src[i];
            i++;
        }
    }
    if (i < lx->len && (lx->src[i] == 'e' || lx->src[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->len && (lx->src[j] == '+' || lx->src[j] == '-')) j++;
        if (j < lx->len && isdigit((unsigned char)lx->src[j])) {
            is_float = true;
            buf[k++] = 'e';
            for (size_t m = i + 1; m < j; m++) buf[k++] = lx->src[m];
            i = j;
            while (i < lx->len && isdigit((unsigned char)lx->src[i]))
                if (k < sizeof buf - 2) buf[k++] = lx->src[i++];
                else i++;
        }
    }
    buf[k] = '\0';
    jtok *t = emit(lx, is_float ? JT_FLOAT : JT_INT, lx->src + lx->pos, i - lx->pos);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        t->i = strtoll(buf, NULL, 10);
        if (errno) lex_fail(lx, "integer literal %s does not fit in 64 bits", buf);
    }
    advance(lx, i);
}

static const char *const operators[] = {
    "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
    "(", ")", "[", "]", "{", "}", ",", ".", ":", "|",
};

/* The tokens of one tag's expression, up to its end delimiter. */
static void lex_tag(lexer *lx, bool block)
{
    int depth = 0;
    for (;;) {
        while (lx->pos < lx->len && is_space(lx->src[lx->pos])) advance(lx, lx->pos + 1);
        if (lx->pos >= lx->len) lex_fail(lx, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
        const char *p = lx->src + lx->pos;
        size_t left = lx->len - lx->pos;
        const char *end = block ? "%}" : "}}";
        if (depth == 0) {
            if ((p[0] == '-' || (block && p[0] == '+')) && left >= 3 && memcmp(p + 1, end, 2) == 0) {
                emit(lx, block ? JT_BLOCK_END : JT_VAR_END, p, 3);
                end_tag(lx, 3, p[0], block);
                return;
            }
            if (left >= 2 && memcmp(p, end, 2) == 0) {
                emit(lx, block ? JT_BLOCK_END : JT_VAR_END, p, 2);
                end_tag(lx, 2, 0, block);
                return;
            }
        }
        if (isalpha((unsigned char)p[0]) || p[0] == '_') {
            size_t n = 1;
            while (n < left && (isalnum((unsigned char)p[n]) || p[n] == '_')) n++;
            char *name = lex_alloc(lx, n + 1);
            memcpy(name, p, n);
            name[n] = '\0';
            emit(lx, JT_NAME, name, n);
            advance(lx, lx->pos + n);
            continue;
        }
        if (isdigit((unsigned char)p[0])) {
            lex_number(lx);
            continue;
        }
        if (p[0] == '\'' || p[0] == '"') {
            lex_string(lx);
            continue;
        }
        size_t k = 0;
        for (; k < sizeof operators / sizeof operators[0]; k++) {
            size_t n = strlen(operators[k]);
            if (left >= n && memcmp(p, operators[k], n) == 0) break;
        }
        if (k == sizeof operators / sizeof operators[0]) {
            char what[2] = {p[0], 0};
            lex_fail(lx, "unexpected character '%s' in a tag", what);
        }
        const char *op = operators[k];
        size_t n = strlen(op);
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') depth++;
        if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
            if (depth == 0) lex_fail(lx, "unexpected '%s'", op);
            depth--;
        }
        emit(lx, JT_OP, op, n);
        advance(lx, lx->pos + n);
    }
}

/* "{% raw %}" at start (sign already known): true and handled when it is one. */
static bool lex_raw(lexer *lx, size_t start, size_t text_start, char sign)
{
    size_t i = start + 2 + (sign ? 1 : 0);
    while (i < lx->len && is_space(lx->src[i])) i++;
    if (lx->len - i < 3 || memcmp(lx->src + i, "raw", 3) != 0) return false;
    i += 3;
    while (i < lx->len && is_space(lx->src[i])) i++;
    char end_sign = 0;
    if (i < lx->len && lx->src[i] == '-') end_sign = '-', i++;
    if (lx->len - i < 2 || memcmp(lx->src + i, "%}", 2) != 0) return false;
    emit_data(lx, text_start, start, sign, true);
    advance(lx, i);
    end_tag(lx, 2, end_sign, false);
    /* find {%[-+]? endraw [-]?%} */
    for (size_t j = lx->pos; j + 1 < lx->len; j++) {
        if (lx->src[j] != '{' || lx->src[j + 1] != '%') continue;
        size_t k = j + 2;
        char s = 0;
        if (k < lx->len && (lx->src[k] == '-' || lx->src[k] == '+')) s = lx->src[k++];
        while (k < lx->len && is_space(lx->src[k])) k++;
        if (lx->len - k < 6 || memcmp(lx->src + k, "endraw", 6) != 0) continue;
        k += 6;
        while (k < lx->len && is_space(lx->src[k])) k++;
        char es = 0;
        if (k < lx->len && (lx->src[k] == '-' || lx->src[k] == '+')) es = lx->src[k++];
        if (lx->len - k < 2 || memcmp(lx->src + k, "%}", 2) != 0) continue;
        emit_data(lx, lx->pos, j, s, true);
        advance(lx, k);
        end_tag(lx, 2, es, true);
        return true;
    }
    lex_fail(lx, "%s", "missing end of raw directive ({% endraw %})");
}

void jinja_lex(jinja_arena *a, jinja_parse_err *err, const char *src, size_t len, jtok **toks, size_t *n)
{
    lexer lx = {.arena = a, .err = err, .src = src, .len = len, .line = 1, .line_starting = true};
    while (lx.pos < lx.len) {
        const char *hit = NULL;
        for (size_t i = lx.pos; i + 1 < lx.len; i++) {
            if (src[i] == '{' && (src[i + 1] == '{' || src[i + 1] == '%' || src[i + 1] == '#')) {
                hit = src + i;
                break;
            }
        }
        if (!hit) {
            emit_data(&lx, lx.pos, lx.len, 0, false);
            advance(&lx, lx.len);
            break;
        }
        size_t start = (size_t)(hit - src);
        char kind = hit[1];
        char sign = start + 2 < len && (src[start + 2] == '-' || src[start + 2] == '+') ? src[start + 2] : 0;
        size_t text_start = lx.pos;
        if (kind == '%' && lex_raw(&lx, start, text_start, sign)) continue;
        emit_data(&lx, text_start, start, sign, kind != '{');
        advance(&lx, start);
        size_t open = 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *close = NULL;
            for (size_t i = start + open; i + 1 < len; i++)
                if (src[i] == '#' && src[i + 1] == '}') {
                    close = src + i;
                    break;
                }
            if (!close) lex_fail(&lx, "%s", "missing end of comment tag ('#}')");
            size_t at = (size_t)(close - src);
            char end_sign = 0;
            if (at > start + open && (src[at - 1] == '-' || src[at - 1] == '+')) end_sign = src[at - 1];
            advance(&lx, at);
            end_tag(&lx, 2, end_sign, true);
            continue;
        }
        emit(&lx, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, hit, open);
        advance(&lx, start + open);
        lex_tag(&lx, kind == '%');
    }
    emit(&lx, JT_EOF, "", 0);
    *toks = lx.toks;
    *n = lx.n;
}
