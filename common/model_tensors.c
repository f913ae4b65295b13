/* model_tensors.c — a family's tensor table expanded over a config, and
 * the checkpoint check against it.
 *
 * The table (common/model_<family>.c) says which tensors exist and their
 * shapes as rules; this file turns it into the concrete list of names and
 * shapes for one config.  The loader checks a checkpoint against this list;
 * the model writer writes this list.
 */
#include "common/model_tensors.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names shown per category in a check failure; the rest are counted. */
#define CHECK_SHOW 6

static void add(model_tensor_spec *s, size_t *n, const model_tensor_def *d, int layer,
                const nl_model_config *cfg)
{
    model_tensor_spec *t = &s[(*n)++];
    model_tensor_name(d, layer, t->name, sizeof t->name);
    t->kind = d->kind;
    t->shape[0] = model_dim_size(d->dims[0], cfg);
    t->shape[1] = model_dim_size(d->dims[1], cfg);
    t->n_dims = d->dims[1] != MODEL_DIM_NONE ? 2 : 1;
    t->def = d;
    t->layer = model_tensor_per_layer(d) ? layer : -1;
}

/* Expands the table's present rows (with spares, only the rows a
 * checkpoint may carry unused): model-wide rows once, the contiguous run of
 * per-layer rows once per layer.  With s NULL it only counts. */
static size_t expand(const model_family *f, const nl_model_config *cfg, bool spares,
                     model_tensor_spec *s)
{
    size_t k = 0;
    for (size_t i = 0; i < f->n_tensors;) {
        size_t end = i + 1;
        if (model_tensor_per_layer(&f->tensors[i]))
            while (end < f->n_tensors && model_tensor_per_layer(&f->tensors[end])) end++;
        int layers = model_tensor_per_layer(&f->tensors[i]) ? cfg->num_hidden_layers : 1;
        for (int l = 0; l < layers; l++)
            for (size_t j = i; j < end; j++) {
                const model_tensor_def *d = &f->tensors[j];
                /* a spare: the config makes it unused (a tied LM head) */
                bool present = model_tensor_present(f, d, cfg);
                bool spare = !present && d->presence == MODEL_PRESENT_IF_UNTIED;
                if (spares ? !spare : !present) continue;
                if (s) add(s, &k, d, l, cfg);
                else k++;
            }
        i = end;
    }
    return k;
}

static nl_status list_rows(const nl_model_config *cfg, bool spares, model_tensor_spec **specs,
                           size_t *n)
{
    *specs = NULL;
    *n = 0;
    const model_family *f = model_family_of(cfg);
    if (!f) return nl_error(NL_ERR_INVALID_ARG, "model_tensors_list: config has unknown arch %d",
                            (int)cfg->arch);
    if (cfg->num_hidden_layers <= 0 || cfg->vocab_size <= 0 || cfg->hidden_size <= 0 ||
        cfg->intermediate_size <= 0 || cfg->head_dim <= 0 || cfg->num_attention_heads <= 0 ||
        cfg->num_key_value_heads <= 0)
        return nl_error(NL_ERR_INVALID_ARG, "model_tensors_list: config has a non-positive size");

    const size_t cap = expand(f, cfg, spares, NULL);
    model_tensor_spec *s = calloc(cap ? cap : 1, sizeof *s);
    if (!s) return nl_error(NL_ERR_NOMEM, "model_tensors_list: out of memory for %zu specs", cap);
    *n = expand(f, cfg, spares, s);
    *specs = s;
    return NL_OK;
}

nl_status model_tensors_list(const nl_model_config *cfg, model_tensor_spec **specs, size_t *n)
{
    return list_rows(cfg, false, specs, n);
}

static int cmp_spec_name(const void *a, const void *b)
{
    return strcmp(((const model_tensor_spec *)a)->name, ((const model_tensor_spec *)b)->name);
}

static bool shape_matches(const model_tensor_spec *s, const st_tensor *t)
{
    if (t->n_dims != s->n_dims) return false;
    for (int d = 0; d < s->n_dims; d++)
        if (t->shape[d] != s->shape[d]) return false;
    return true;
}

static void fmt_shape(char *buf, size_t cap, int n_dims, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < n_dims && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, d ? ", " : "", shape[d]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

/* Appends a name to one of the report's lists, or counts it once the list
 * is full. */
typedef struct name_list {
    char text[320];
    size_t shown, total;
} name_list;

static void list_add(name_list *l, const char *item)
{
    l->total++;
    if (l->shown >= CHECK_SHOW) return;
    size_t o = strlen(l->text);
    snprintf(l->text + o, sizeof l->text - o, "%s%s", l->shown ? ", " : "", item);
    l->shown++;
}

static void list_format(char *buf, size_t cap, const char *what, const name_list *l)
{
    size_t o = strlen(buf);
    if (!l->total || o + 1 >= cap) return;
    snprintf(buf + o, cap - o, "%s%zu %s (%s%s)", o ? "; " : "", l->total, what, l->text,
             l->total > l->shown ? ", ..." : "");
}

/* Left over by some older exports; a buffer recomputed at load, not a
 * weight, so ignoring it loses nothing. */
static bool ignorable(const char *name)
{
    const char *suffix = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

static void check_shape(name_list *shapes, const model_tensor_spec *spec, const st_tensor *t)
{
    if (shape_matches(spec, t)) return;
    char want[64], got[96], item[256];
    fmt_shape(want, sizeof want, spec->n_dims, spec->shape);
    fmt_shape(got, sizeof got, t->n_dims, t->shape);
    snprintf(item, sizeof item, "%s expected %s got %s", t->name, want, got);
    list_add(shapes, item);
}

static const model_tensor_spec *find_spec(const model_tensor_spec *sorted, size_t n,
                                          const char *name)
{
    model_tensor_spec key;
    if (strlen(name) >= sizeof key.name) return NULL;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, sorted, n, sizeof *sorted, cmp_spec_name);
}

nl_status model_tensors_check(const nl_model_config *cfg, const st_model *m)
{
    model_tensor_spec *specs, *spares;
    size_t n_specs, n_spares;
    NL_TRY(list_rows(cfg, false, &specs, &n_specs));
    nl_status st = list_rows(cfg, true, &spares, &n_spares);
    if (st != NL_OK) {
        free(specs);
        return st;
    }

    name_list missing = {0}, unexpected = {0}, shapes = {0}, dtypes = {0};
    for (size_t i = 0; i < n_specs; i++) {
        const st_tensor *t = st_find(m, specs[i].name);
        if (!t) {
            list_add(&missing, specs[i].name);
            continue;
        }
        check_shape(&shapes, &specs[i], t);
        if (t->dtype != NL_DTYPE_BF16 && t->dtype != NL_DTYPE_F16 && t->dtype != NL_DTYPE_F32) {
            char item[160];
            snprintf(item, sizeof item, "%s is %s", t->name, nl_dtype_name(t->dtype));
            list_add(&dtypes, item);
        }
    }

    qsort(specs, n_specs, sizeof *specs, cmp_spec_name);
    qsort(spares, n_spares, sizeof *spares, cmp_spec_name);
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_get(m, i);
        if (find_spec(specs, n_specs, t->name)) continue;
        if (ignorable(t->name)) continue;
        /* A tied checkpoint may still carry the head; it is the embedding's
         * copy and goes unused, but a wrong shape means a wrong config. */
        const model_tensor_spec *spare = find_spec(spares, n_spares, t->name);
        if (spare) {
            check_shape(&shapes, spare, t);
            continue;
        }
        list_add(&unexpected, t->name);
    }
    free(specs);
    free(spares);

    if (!missing.total && !unexpected.total && !shapes.total && !dtypes.total) return NL_OK;
    char msg[1000] = "";
    list_format(msg, sizeof msg, "missing", &missing);
    list_format(msg, sizeof msg, "unexpected", &unexpected);
    list_format(msg, sizeof msg, "with wrong shape", &shapes);
    list_format(msg, sizeof msg, "with unsupported dtype", &dtypes);
    const char *file = st_count(m) ? st_get(m, 0)->file : "checkpoint";
    return nl_error(NL_ERR_FORMAT, "%s: tensors do not match config: %s", file, msg);
}
