/* cpu_backend.c — the CPU backend's object: memory, weights, thread pool.
 *
 * Backend memory is ordinary host memory, so upload and download are
 * memcpy.  Weights are fp32 copies made at fill time; the conversion from
 * bf16 is exact, so the CPU computes with exactly the checkpoint's values.
 * The ops themselves live in cpu_ops.c and cpu_sample.c.
 */
#include "kernels/cpu/cpu_backend.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- thread pool --------------------------------------------------------
 * One loop at a time: the caller publishes (fn, ctx, n), bumps the
 * generation and takes chunk 0 itself; worker t takes chunk t.  Chunks are
 * contiguous so every element is always handled by the same thread for the
 * same n, which keeps results independent of timing. */

static void pool_run_chunk(cpu_pool *p, int t)
{
    int64_t per = (p->n_items + p->n_threads - 1) / p->n_threads;
    int64_t begin = (int64_t)t * per, end = begin + per;
    if (end > p->n_items) end = p->n_items;
    if (begin < end) p->fn(p->ctx, begin, end);
}

struct pool_worker_arg {
    cpu_pool *pool;
    int index;
};

static void *pool_worker(void *arg_)
{
    struct pool_worker_arg *arg = arg_;
    cpu_pool *p = arg->pool;
    int t = arg->index;
    free(arg);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        pool_run_chunk(p, t);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_stop(cpu_pool *p, int started)
{
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < started; t++) pthread_join(p->threads[t + 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
}

static nl_status pool_start(cpu_pool *p, int n_threads)
{
    memset(p, 0, sizeof *p);
    p->n_threads = n_threads;
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) return nl_error(NL_ERR_NOMEM, "cpu backend: no memory for %d threads", n_threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int t = 1; t < n_threads; t++) {
        struct pool_worker_arg *arg = malloc(sizeof *arg);
        if (arg) *arg = (struct pool_worker_arg){p, t};
        int rc = arg ? pthread_create(&p->threads[t], NULL, pool_worker, arg) : ENOMEM;
        if (rc != 0) {
            free(arg);
            pool_stop(p, t - 1);
            return nl_error(NL_ERR_RUNTIME, "cpu backend: pthread_create failed for thread %d: %s",
                            t, strerror(rc));
        }
    }
    return NL_OK;
}

void cpu_parallel_for(cpu_backend *be, int64_t n, int64_t min_parallel, cpu_task_fn fn, void *ctx)
{
    cpu_pool *p = &be->pool;
    if (n <= 0) return;
    if (p->n_threads <= 1 || n < min_parallel || n < 2) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->pending = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pool_run_chunk(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* ---- memory ------------------------------------------------------------- */

static nl_status cpu_alloc(nl_backend *be, size_t bytes, void **out)
{
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = NULL;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0)
        return nl_error(NL_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    *out = p;
    return NL_OK;
}

static void cpu_free(nl_backend *be, void *ptr)
{
    free(ptr);
}

static nl_status cpu_copy(nl_backend *be, void *dst, const void *src, size_t bytes)
{
    if (bytes) memmove(dst, src, bytes);
    return NL_OK;
}

static nl_status cpu_copy_rows(nl_backend *be, void *dst, size_t dst_pitch, const void *src,
                               size_t src_pitch, size_t row_bytes, size_t rows)
{
    for (size_t i = 0; i < rows; i++)
        memmove((char *)dst + i * dst_pitch, (const char *)src + i * src_pitch, row_bytes);
    return NL_OK;
}

static nl_status cpu_memset_zero(nl_backend *be, void *dst, size_t bytes)
{
    if (bytes) memset(dst, 0, bytes);
    return NL_OK;
}

static nl_status cpu_synchronize(nl_backend *be)
{
    return NL_OK;
}

/* Every CPU op has finished when it returns: pieces are plain copies and
 * fences pass at once. */
static nl_status cpu_copy_pieces(nl_backend *be, const nl_copy_piece *pieces, int32_t n)
{
    if (n < 0 || n > NL_COPY_PIECES_MAX)
        return nl_error(NL_ERR_INVALID_ARG, "copy_pieces: %d pieces, at most %d", n, NL_COPY_PIECES_MAX);
    for (int32_t i = 0; i < n; i++)
        NL_TRY(cpu_copy_rows(be, pieces[i].dst, pieces[i].dst_pitch, pieces[i].src,
                             pieces[i].src_pitch, pieces[i].row_bytes, pieces[i].rows));
    return NL_OK;
}

static nl_status cpu_host_alloc(nl_backend *be, size_t bytes, void **out)
{
    *out = malloc(bytes ? bytes : 1);
    return *out ? NL_OK : nl_error(NL_ERR_NOMEM, "cpu: out of memory for %zu host bytes", bytes);
}

static void cpu_host_free(nl_backend *be, void *ptr)
{
    free(ptr);
}

static nl_status cpu_fence_record(nl_backend *be, int slot)
{
    if (slot < 0 || slot >= NL_FENCES) return nl_error(NL_ERR_INVALID_ARG, "fence slot %d", slot);
    return NL_OK;
}

static nl_status cpu_fence_passed(nl_backend *be, int slot, bool *passed)
{
    *passed = true;
    return cpu_fence_record(be, slot);
}

static nl_status cpu_fence_wait(nl_backend *be, int slot)
{
    return cpu_fence_record(be, slot);
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static nl_status cpu_timer_mark(nl_backend *be_, int32_t tag)
{
    cpu_backend *be = (cpu_backend *)be_;
    if (be->timer_marks == NL_TIMER_MAX_MARKS)
        return nl_error(NL_ERR_INVALID_ARG, "op timer: more than %d marks in one step", NL_TIMER_MAX_MARKS);
    be->timer_at[be->timer_marks] = monotonic_s();
    be->timer_tags[be->timer_marks++] = tag;
    return NL_OK;
}

static nl_status cpu_timer_collect(nl_backend *be_, double *secs, int32_t n_tags)
{
    cpu_backend *be = (cpu_backend *)be_;
    double end = monotonic_s();
    for (int32_t i = 0; i < be->timer_marks; i++) {
        double next = i + 1 < be->timer_marks ? be->timer_at[i + 1] : end;
        if (be->timer_tags[i] >= 0 && be->timer_tags[i] < n_tags) secs[be->timer_tags[i]] += next - be->timer_at[i];
    }
    be->timer_marks = 0;
    return NL_OK;
}

/* Available memory counts the page cache as free, as the kernel's own
 * MemAvailable does; without /proc, sysconf's free pages are the fallback. */
static nl_status cpu_memory_info(nl_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0 || avail < 0)
        return nl_error(NL_ERR_RUNTIME, "cpu backend: sysconf cannot report memory size");
    size_t free_b = (size_t)avail * (size_t)page;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) free_b = (size_t)kb * 1024;
        fclose(f);
    }
    *free_bytes = free_b;
    *total_bytes = (size_t)total * (size_t)page;
    return NL_OK;
}

/* ---- weights ------------------------------------------------------------ */

static nl_status cpu_weight_create(nl_backend *be, int64_t rows, int64_t cols, nl_weight **out)
{
    if (rows <= 0 || cols <= 0 || rows > INT64_MAX / cols / (int64_t)sizeof(float))
        return nl_error(NL_ERR_INVALID_ARG, "cpu backend: bad weight shape [%lld, %lld]",
                        (long long)rows, (long long)cols);
    nl_weight *w = calloc(1, sizeof *w);
    if (!w) return nl_error(NL_ERR_NOMEM, "cpu backend: no memory for a weight");
    size_t bytes = (size_t)(rows * cols) * sizeof(float);
    nl_status st = cpu_alloc(be, bytes, (void **)&w->data);
    if (st != NL_OK) {
        free(w);
        return nl_error_prefix(st, "weight [%lld, %lld]: ", (long long)rows, (long long)cols);
    }
    memset(w->data, 0, bytes);
    w->rows = rows;
    w->cols = cols;
    *out = w;
    return NL_OK;
}

static nl_status cpu_weight_fill_rows(nl_backend *be, nl_weight *w, int64_t row0, int64_t n_rows,
                                      const void *src, nl_dtype src_dtype, int64_t src_stride,
                                      int64_t src_col0)
{
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > w->rows)
        return nl_error(NL_ERR_INVALID_ARG, "cpu backend: rows [%lld, %lld) outside weight of %lld rows",
                        (long long)row0, (long long)(row0 + n_rows), (long long)w->rows);
    if (src_dtype == NL_DTYPE_I32)
        return nl_error(NL_ERR_INVALID_ARG, "cpu backend: weights cannot be filled from I32 data");
    size_t esize = nl_dtype_size(src_dtype);
    for (int64_t r = 0; r < n_rows; r++) {
        const char *row = (const char *)src + (size_t)(r * src_stride + src_col0) * esize;
        nl_convert_to_f32(w->data + (row0 + r) * w->cols, row, src_dtype, (size_t)w->cols);
    }
    return NL_OK;
}

static void cpu_weight_destroy(nl_backend *be, nl_weight *w)
{
    if (!w) return;
    free(w->data);
    free(w);
}

static void cpu_destroy(nl_backend *be_)
{
    cpu_backend *be = (cpu_backend *)be_;
    pool_stop(&be->pool, be->pool.n_threads - 1);
    free(be);
}

static const nl_backend_ops cpu_ops = {
    .name = "cpu",
    .act_dtype = NL_DTYPE_F32,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .memset_zero = cpu_memset_zero,
    .synchronize = cpu_synchronize,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .copy_pieces = cpu_copy_pieces,
    .fence_record = cpu_fence_record,
    .fence_passed = cpu_fence_passed,
    .fence_wait = cpu_fence_wait,
    .memory_info = cpu_memory_info,
    .weight_create = cpu_weight_create,
    .weight_fill_rows = cpu_weight_fill_rows,
    .weight_destroy = cpu_weight_destroy,
    .embedding = cpu_embedding,
    .rmsnorm = cpu_rmsnorm,
    .linear = cpu_linear,
    .linear_f32 = cpu_linear_f32,
    .qk_norm_rope_store = cpu_qk_norm_rope_store,
    .attention = cpu_attention,
    .norm_linear = cpu_norm_linear,
    .linear_add = cpu_linear_add,
    .take_ids = cpu_take_ids,
    .gather_rows = cpu_gather_rows,
    .sample = cpu_sample,
    .timer_mark = cpu_timer_mark,
    .timer_collect = cpu_timer_collect,
};

nl_status nl_backend_cpu_create(int n_threads, nl_backend **out)
{
    if (n_threads < 0 || n_threads > 1024)
        return nl_error(NL_ERR_INVALID_ARG, "cpu backend: n_threads %d outside [0, 1024]", n_threads);
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)(n > 256 ? 256 : n) : 1;
    }
    /* OpenBLAS would otherwise take every core in every worker process. */
    openblas_set_num_threads(n_threads);
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return nl_error(NL_ERR_NOMEM, "cpu backend: no memory");
    be->base.ops = &cpu_ops;
    nl_status st = pool_start(&be->pool, n_threads);
    if (st != NL_OK) {
        free(be);
        return st;
    }
    *out = &be->base;
    return NL_OK;
}
