/* safetensors.c — validated, mmapped reading of .safetensors files.
 *
 * A file is: 8-byte little-endian header length N, N bytes of JSON mapping
 * each tensor name to {dtype, shape, data_offsets}, then the data region the
 * offsets point into.  Everything the header claims is checked against the
 * real file size before a pointer is handed out, so a truncated or corrupt
 * file is an error message, never a fault.  A sharded checkpoint is read
 * through model.safetensors.index.json; each shard is mapped once.  What the
 * tensors must be for a given model is model_tensors.c's business.
 */
#define _GNU_SOURCE /* qsort_r */
#include "common/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"

/* A header is a few hundred bytes per tensor; 100 MB is far beyond any real
 * checkpoint and keeps a corrupt length from allocating gigabytes. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

typedef struct st_file {
    char *path;
    void *map;              /* whole file, read-only                      */
    size_t size;
    const uint8_t *data;    /* data region, after the header              */
    size_t data_size;
} st_file;

struct st_model {
    st_file *files;
    size_t n_files, cap_files;
    st_tensor *tensors;
    size_t n_tensors, cap_tensors;
    size_t *by_name;        /* tensor indices sorted by name, for st_find  */
};

static void file_unmap(st_file *f)
{
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

void st_close(st_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_files; i++) file_unmap(&m->files[i]);
    for (size_t i = 0; i < m->n_tensors; i++) free((char *)m->tensors[i].name);
    free(m->files);
    free(m->tensors);
    free(m->by_name);
    free(m);
}

size_t st_count(const st_model *m) { return m->n_tensors; }

const st_tensor *st_get(const st_model *m, size_t i)
{
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}

static int cmp_by_name(const void *a, const void *b, void *ctx)
{
    const st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

const st_tensor *st_find(const st_model *m, const char *name)
{
    size_t lo = 0, hi = m->n_tensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const st_tensor *t = &m->tensors[m->by_name[mid]];
        int c = strcmp(name, t->name);
        if (!c) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

static nl_status map_file(const char *path, st_file *f)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nl_error(NL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb)) {
        int e = errno;
        close(fd);
        return nl_error(NL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nl_error(NL_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 8) {
        close(fd);
        return nl_error(NL_ERR_FORMAT, "%s: %lld bytes is too short for a safetensors header",
                        path, (long long)sb.st_size);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return nl_error(NL_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    f->path = strdup(path);
    f->map = map;
    f->size = (size_t)sb.st_size;
    if (!f->path) {
        file_unmap(f);
        return nl_error(NL_ERR_NOMEM, "%s: out of memory", path);
    }
    return NL_OK;
}

static nl_status parse_dtype(const char *s, nl_dtype *t)
{
    if (!strcmp(s, "BF16")) *t = NL_DTYPE_BF16;
    else if (!strcmp(s, "F16")) *t = NL_DTYPE_F16;
    else if (!strcmp(s, "F32")) *t = NL_DTYPE_F32;
    else return NL_ERR_UNSUPPORTED;
    return NL_OK;
}

static nl_status push_tensor(st_model *m, const st_tensor *t)
{
    if (m->n_tensors == m->cap_tensors) {
        size_t cap = m->cap_tensors ? 2 * m->cap_tensors : 256;
        st_tensor *n = realloc(m->tensors, cap * sizeof *n);
        if (!n) return nl_error(NL_ERR_NOMEM, "out of memory for %zu tensors", cap);
        m->tensors = n;
        m->cap_tensors = cap;
    }
    m->tensors[m->n_tensors++] = *t;
    return NL_OK;
}

/* Checks one header entry against the data region and appends it. */
static nl_status parse_entry(st_model *m, const st_file *f, const char *name, const json_t *v)
{
    const char *path = f->path;
    if (!json_is_object(v))
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: header entry is not an object", path, name);
    st_tensor t = {0};
    const json_t *dt = json_object_get(v, "dtype");
    if (!json_is_string(dt))
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: missing or non-string dtype", path, name);
    if (parse_dtype(json_string_value(dt), &t.dtype))
        return nl_error(NL_ERR_UNSUPPORTED, "%s: tensor %s: dtype %s is not supported "
                        "(BF16, F16, F32)", path, name, json_string_value(dt));

    const json_t *shape = json_object_get(v, "shape");
    if (!json_is_array(shape))
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: missing or non-array shape", path, name);
    if (json_array_size(shape) > ST_MAX_DIMS)
        return nl_error(NL_ERR_UNSUPPORTED, "%s: tensor %s: %zu dimensions (limit %d)", path, name,
                        json_array_size(shape), ST_MAX_DIMS);
    uint64_t nbytes = nl_dtype_size(t.dtype);
    bool overflow = false;
    size_t i;
    const json_t *d;
    json_array_foreach(shape, i, d) {
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return nl_error(NL_ERR_FORMAT, "%s: tensor %s: shape[%zu] is not a non-negative "
                            "integer", path, name, i);
        t.shape[i] = (int64_t)json_integer_value(d);
        if (!overflow && __builtin_mul_overflow(nbytes, (uint64_t)t.shape[i], &nbytes))
            overflow = true;
    }
    t.n_dims = (int32_t)json_array_size(shape);
    /* A zero dimension makes the product 0 whatever overflowed before it. */
    for (int k = 0; k < t.n_dims; k++)
        if (t.shape[k] == 0) overflow = false, nbytes = 0;
    if (overflow)
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: shape overflows 64-bit byte count", path,
                        name);

    const json_t *offs = json_object_get(v, "data_offsets");
    const json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_is_integer(b) ||
        !json_is_integer(e) || json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: data_offsets must be [begin, end] of "
                        "non-negative integers", path, name);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    if (begin > end)
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                        "] end before begin", path, name, begin, end);
    if (end > f->data_size)
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: data_offsets end %" PRIu64 " is past the "
                        "data region of %zu bytes (file truncated?)", path, name, end,
                        f->data_size);
    if (end - begin != nbytes)
        return nl_error(NL_ERR_FORMAT, "%s: tensor %s: data_offsets span %" PRIu64 " bytes but "
                        "shape and dtype %s need %" PRIu64, path, name, end - begin,
                        nl_dtype_name(t.dtype), nbytes);
    t.data = f->data + begin;
    t.nbytes = (size_t)nbytes;
    t.file = f->path;
    t.name = strdup(name);
    if (!t.name) return nl_error(NL_ERR_NOMEM, "%s: out of memory", path);
    nl_status st = push_tensor(m, &t);
    if (st) free((char *)t.name);
    return st;
}

/* jansson reports a duplicate key without naming it; the key is the string
 * that ends just before the error position. */
static void duplicate_key_name(const char *text, size_t pos, char *out, size_t cap)
{
    snprintf(out, cap, "?");
    size_t end = pos;
    while (end > 0 && text[end - 1] != '"') end--;
    if (end == 0) return;
    size_t start = end - 1;
    while (start > 0 && text[start - 1] != '"') start--;
    if (start == 0) return;
    size_t len = end - 1 - start;
    if (len >= cap) len = cap - 1;
    memcpy(out, text + start, len);
    out[len] = '\0';
}

/* Maps path and appends its tensors to m. */
static nl_status load_file(st_model *m, const char *path)
{
    if (m->n_files == m->cap_files) {
        size_t cap = m->cap_files ? 2 * m->cap_files : 4;
        st_file *n = realloc(m->files, cap * sizeof *n);
        if (!n) return nl_error(NL_ERR_NOMEM, "out of memory");
        m->files = n;
        m->cap_files = cap;
    }
    st_file *f = &m->files[m->n_files];
    NL_TRY(map_file(path, f));
    m->n_files++;
    path = f->path;

    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > f->size - 8)
        return nl_error(NL_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the %zu bytes after "
                        "it (file truncated?)", path, hlen, f->size - 8);
    if (hlen >= ST_MAX_HEADER)
        return nl_error(NL_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the limit of %u",
                        path, hlen, ST_MAX_HEADER);
    f->data = p + 8 + hlen;
    f->data_size = f->size - 8 - hlen;

    const char *text = (const char *)p + 8;
    json_error_t err;
    json_t *root = json_loadb(text, (size_t)hlen, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        if (json_error_code(&err) == json_error_duplicate_key) {
            char key[256];
            duplicate_key_name(text, (size_t)err.position, key, sizeof key);
            return nl_error(NL_ERR_FORMAT, "%s: tensor %s appears twice in the header", path, key);
        }
        return nl_error(NL_ERR_FORMAT, "%s: header is not valid JSON (line %d column %d): %s",
                        path, err.line, err.column, err.text);
    }
    nl_status st = NL_OK;
    if (!json_is_object(root)) {
        st = nl_error(NL_ERR_FORMAT, "%s: header is not a JSON object", path);
    } else {
        const char *name;
        const json_t *v;
        json_object_foreach((json_t *)root, name, v) {
            if (!strcmp(name, "__metadata__")) continue;
            st = parse_entry(m, f, name, v);
            if (st) break;
        }
    }
    json_decref(root);
    return st;
}

/* Sorts the name index; two tensors of one name (from different shards) are
 * an error since either could be the one meant. */
static nl_status build_index(st_model *m)
{
    m->by_name = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof *m->by_name);
    if (!m->by_name) return nl_error(NL_ERR_NOMEM, "out of memory for %zu tensors", m->n_tensors);
    for (size_t i = 0; i < m->n_tensors; i++) m->by_name[i] = i;
    qsort_r(m->by_name, m->n_tensors, sizeof *m->by_name, cmp_by_name, m->tensors);
    for (size_t i = 1; i < m->n_tensors; i++) {
        const st_tensor *a = &m->tensors[m->by_name[i - 1]], *b = &m->tensors[m->by_name[i]];
        if (!strcmp(a->name, b->name))
            return nl_error(NL_ERR_FORMAT, "tensor %s appears twice: in %s and in %s", a->name,
                            a->file, b->file);
    }
    return NL_OK;
}

nl_status st_open_file(const char *path, st_model **out)
{
    *out = NULL;
    st_model *m = calloc(1, sizeof *m);
    if (!m) return nl_error(NL_ERR_NOMEM, "%s: out of memory", path);
    nl_status st = load_file(m, path);
    if (!st) st = build_index(m);
    if (st) {
        st_close(m);
        return st;
    }
    *out = m;
    return NL_OK;
}

/* A shard name from the index must stay inside the model directory. */
static bool shard_name_ok(const char *s)
{
    return s[0] && s[0] != '/' && !strstr(s, "..");
}

static nl_status open_sharded(st_model *m, const char *dir, const char *index_path)
{
    json_t *root;
    NL_TRY(nl_file_read_json(index_path, true, &root));
    nl_status st = NL_OK;
    const json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        st = nl_error(NL_ERR_FORMAT, "%s: missing or non-object weight_map", index_path);
        goto done;
    }

    /* Every shard once, in first-mention order. */
    const char *name;
    const json_t *v;
    json_t *opened = json_object();
    json_object_foreach((json_t *)wm, name, v) {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            st = nl_error(NL_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a file name inside the "
                          "model directory", index_path, name);
            break;
        }
        const char *shard = json_string_value(v);
        if (json_object_get(opened, shard)) continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, shard) >= sizeof path) {
            st = nl_error(NL_ERR_INVALID_ARG, "%s/%s: path too long", dir, shard);
            break;
        }
        json_object_set_new(opened, shard, json_integer((json_int_t)m->n_files));
        st = load_file(m, path);
        if (st) {
            if (st == NL_ERR_IO) nl_error_prefix(st, "%s names a shard that is missing: ",
                                                 index_path);
            break;
        }
    }
    if (!st) st = build_index(m);
    /* The index is the contract: a tensor it promises must be in the shard
     * it names. */
    if (!st) {
        json_object_foreach((json_t *)wm, name, v) {
            const st_tensor *t = st_find(m, name);
            size_t fi = (size_t)json_integer_value(json_object_get(opened, json_string_value(v)));
            if (!t || t->file != m->files[fi].path) {
                st = nl_error(NL_ERR_FORMAT, "%s: tensor %s is listed in %s but absent from that "
                              "shard", m->files[fi].path, name, index_path);
                break;
            }
        }
    }
    json_decref(opened);
done:
    json_decref(root);
    return st;
}

nl_status st_open(const char *model_dir, st_model **out)
{
    *out = NULL;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/model.safetensors.index.json", model_dir) >=
        sizeof path)
        return nl_error(NL_ERR_INVALID_ARG, "%s: model path too long", model_dir);
    if (access(path, F_OK) == 0) {
        st_model *m = calloc(1, sizeof *m);
        if (!m) return nl_error(NL_ERR_NOMEM, "%s: out of memory", path);
        nl_status st = open_sharded(m, model_dir, path);
        if (st) {
            st_close(m);
            return st;
        }
        *out = m;
        return NL_OK;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
    if (access(path, F_OK) != 0)
        return nl_error(NL_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json",
                        model_dir);
    return st_open_file(path, out);
}
