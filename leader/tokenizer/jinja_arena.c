/* jinja_arena.c — bump allocation in chunks, freed all at once, with a cap
 * on the total so that a template cannot take unbounded memory. */
#include <stdlib.h>

#include "leader/tokenizer/jinja_internal.h"

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} chunk;

struct jinja_arena {
    chunk *head;
    size_t total, limit;
};

jinja_arena *jinja_arena_create(size_t limit)
{
    jinja_arena *a = calloc(1, sizeof *a);
    if (a) a->limit = limit;
    return a;
}

void jinja_arena_destroy(jinja_arena *a)
{
    if (!a) return;
    for (chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(a);
}

void *jinja_arena_alloc(jinja_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 64000;
        if (a->total + cap > a->limit) return NULL;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}
