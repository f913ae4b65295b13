/* comm_shm.c — all-reduce and all-gather between CPU workers through shared
 * memory.
 *
 * Area layout: the abort word of common/comm_area.h, a barrier (arrival
 * count and generation word), each on its own cache line, then size + 1
 * equal slots: one per rank for its input, and a result slot.  Large
 * buffers go through in chunks of one slot.
 *
 * All-reduce of one chunk: every rank copies its values into its slot;
 * barrier; rank r sums its 1/size share of the elements over slots 0, 1, ...
 * in that order into the result slot; barrier; every rank copies the result
 * back.  The next chunk's first barrier keeps a fast rank from overwriting
 * the result before everyone has read it.  Sums are in fp32 whatever the
 * element type, rounded once at the end.
 *
 * The barrier trusts nothing it reads from the area: an arrival count past
 * the number of ranks is a corrupt segment, and a wait is bounded (ranks do
 * equal work between barriers, so their skew is far below the bound): a
 * stuck peer or a scribbled word ends the step with an error, never a hang.
 */
#include "kernels/comm_shm.h"

#include <assert.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/comm_area.h"
#include "common/futex.h"

#define COMM_HEADER_BYTES 4096
#define COMM_SPINS 2000
#define COMM_WAIT_SLICE_MS 50
#define COMM_BARRIER_TIMEOUT_S 60

typedef struct comm_shared {
    alignas(64) _Atomic uint32_t abort_word; /* common/comm_area.h, at offset 0 */
    alignas(64) _Atomic uint32_t arrived;
    alignas(64) _Atomic uint32_t generation;
} comm_shared;

typedef struct comm_shm {
    nl_comm base;
    comm_shared *sh;
    uint8_t *slots;    /* [size + 1][slot_bytes]; slot size is the result */
    size_t slot_bytes;
    nl_comm_check_fn check;
    void *check_ctx;
    double timeout_s;  /* longest wait at one barrier */
} comm_shm;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static_assert(offsetof(comm_shared, abort_word) == 0, "the abort word opens the area");
static_assert(sizeof(comm_shared) <= COMM_HEADER_BYTES, "comm_shm header");

static nl_status barrier(comm_shm *c)
{
    comm_shared *sh = c->sh;
    uint32_t gen = atomic_load(&sh->generation);
    uint32_t before = atomic_fetch_add(&sh->arrived, 1);
    if (before >= (uint32_t)c->base.size)
        return nl_error(NL_ERR_RUNTIME, "comm_shm: corrupt shared memory: %u ranks arrived at a "
                        "barrier of %d", before + 1, c->base.size);
    if (before == (uint32_t)c->base.size - 1) {
        atomic_store(&sh->arrived, 0);
        atomic_fetch_add(&sh->generation, 1);
        futex_wake_shared(&sh->generation);
        return NL_OK;
    }
    for (int i = 0; i < COMM_SPINS; i++) {
        if (atomic_load(&sh->generation) != gen) return NL_OK;
        if (i % 64 == 63) sched_yield();
    }
    double deadline = now_seconds() + c->timeout_s;
    while (atomic_load(&sh->generation) == gen) {
        futex_wait_shared(&sh->generation, gen, COMM_WAIT_SLICE_MS);
        if (atomic_load(&sh->generation) != gen) break;
        uint32_t why = atomic_load(&sh->abort_word);
        if (why != NL_COMM_ABORT_NONE)
            return nl_error(NL_ERR_WORKER, "comm_shm: rank %d: the group gave up (reason %#x)",
                            c->base.rank, why);
        if (c->check) NL_TRY(c->check(c->check_ctx));
        if (now_seconds() > deadline)
            return nl_error(NL_ERR_RUNTIME, "comm_shm: rank %d waited %.0f s at a barrier that %u of "
                            "%d ranks reached (a peer is stuck or the segment was overwritten)",
                            c->base.rank, c->timeout_s, atomic_load(&sh->arrived), c->base.size);
    }
    return NL_OK;
}

static uint8_t *slot(comm_shm *c, int i)
{
    return c->slots + (size_t)i * c->slot_bytes;
}

static float load_f32(const uint8_t *p, nl_dtype t, size_t i)
{
    uint16_t h;
    switch (t) {
    case NL_DTYPE_F32: return ((const float *)p)[i];
    case NL_DTYPE_BF16: memcpy(&h, p + 2 * i, 2); return nl_bf16_to_f32(h);
    case NL_DTYPE_F16: memcpy(&h, p + 2 * i, 2); return nl_f16_to_f32(h);
    default: return 0.0f;
    }
}

static void store_f32(uint8_t *p, nl_dtype t, size_t i, float v)
{
    uint16_t h;
    switch (t) {
    case NL_DTYPE_F32: ((float *)p)[i] = v; break;
    case NL_DTYPE_BF16: h = nl_f32_to_bf16(v); memcpy(p + 2 * i, &h, 2); break;
    case NL_DTYPE_F16: h = nl_f32_to_f16(v); memcpy(p + 2 * i, &h, 2); break;
    default: break;
    }
}

/* result[lo, hi) = sum over ranks in rank order. */
static void reduce_share(comm_shm *c, nl_dtype t, size_t lo, size_t hi)
{
    int size = c->base.size;
    uint8_t *res = slot(c, size);
    if (t == NL_DTYPE_F32) {
        float *out = (float *)res;
        memcpy(out + lo, (const float *)slot(c, 0) + lo, (hi - lo) * sizeof(float));
        for (int r = 1; r < size; r++) {
            const float *in = (const float *)slot(c, r);
            for (size_t i = lo; i < hi; i++) out[i] += in[i];
        }
    } else if (t == NL_DTYPE_I32) {
        int32_t *out = (int32_t *)res;
        for (size_t i = lo; i < hi; i++) {
            int64_t acc = 0;
            for (int r = 0; r < size; r++) acc += ((const int32_t *)slot(c, r))[i];
            out[i] = (int32_t)acc;
        }
    } else {
        for (size_t i = lo; i < hi; i++) {
            float acc = load_f32(slot(c, 0), t, i);
            for (int r = 1; r < size; r++) acc += load_f32(slot(c, r), t, i);
            store_f32(res, t, i, acc);
        }
    }
}

static nl_status shm_all_reduce(nl_comm *base, void *buf, size_t count, nl_dtype dtype)
{
    comm_shm *c = (comm_shm *)base;
    size_t elem = nl_dtype_size(dtype);
    size_t per_chunk = c->slot_bytes / elem;
    int size = base->size, rank = base->rank;
    uint8_t *p = buf;
    for (size_t off = 0; off < count; off += per_chunk) {
        size_t n = count - off < per_chunk ? count - off : per_chunk;
        memcpy(slot(c, rank), p + off * elem, n * elem);
        NL_TRY(barrier(c));
        size_t share = (n + size - 1) / size;
        size_t lo = (size_t)rank * share < n ? (size_t)rank * share : n;
        size_t hi = lo + share < n ? lo + share : n;
        reduce_share(c, dtype, lo, hi);
        NL_TRY(barrier(c));
        memcpy(p + off * elem, slot(c, size), n * elem);
    }
    return NL_OK;
}

/* A chunk: every rank copies its values into its slot; barrier; every rank
 * copies every slot out; barrier (before the next chunk overwrites them). */
static nl_status shm_all_gather(nl_comm *base, const void *send, void *recv, size_t count,
                                nl_dtype dtype)
{
    comm_shm *c = (comm_shm *)base;
    size_t elem = nl_dtype_size(dtype);
    size_t per_chunk = c->slot_bytes / elem;
    const uint8_t *s = send;
    uint8_t *d = recv;
    for (size_t off = 0; off < count; off += per_chunk) {
        size_t n = count - off < per_chunk ? count - off : per_chunk;
        memcpy(slot(c, base->rank), s + off * elem, n * elem);
        NL_TRY(barrier(c));
        for (int r = 0; r < base->size; r++)
            memcpy(d + ((size_t)r * count + off) * elem, slot(c, r), n * elem);
        NL_TRY(barrier(c));
    }
    return NL_OK;
}

static void shm_destroy(nl_comm *base)
{
    free(base);
}

static const nl_comm_ops shm_ops = {
    .all_reduce_sum = shm_all_reduce,
    .all_gather = shm_all_gather,
    .destroy = shm_destroy,
};

nl_status nl_comm_shm_create(void *area, size_t bytes, int rank, int size,
                             nl_comm_check_fn check, void *check_ctx, nl_comm **out)
{
    if (size < 1 || rank < 0 || rank >= size)
        return nl_error(NL_ERR_INVALID_ARG, "comm_shm: rank %d of %d", rank, size);
    if (!area || bytes < COMM_HEADER_BYTES + ((size_t)size + 1) * 64)
        return nl_error(NL_ERR_INVALID_ARG, "comm_shm: area of %zu bytes is too small for %d ranks",
                        bytes, size);
    comm_shm *c = calloc(1, sizeof *c);
    if (!c) return nl_error(NL_ERR_NOMEM, "comm_shm: out of memory");
    c->base = (nl_comm){.ops = &shm_ops, .rank = rank, .size = size};
    c->sh = area;
    c->slots = (uint8_t *)area + COMM_HEADER_BYTES;
    c->slot_bytes = ((bytes - COMM_HEADER_BYTES) / ((size_t)size + 1)) & ~(size_t)63;
    c->check = check;
    c->check_ctx = check_ctx;
    nl_status st = nl_comm_timeout_s(COMM_BARRIER_TIMEOUT_S, &c->timeout_s);
    if (st != NL_OK) {
        free(c);
        return st;
    }
    *out = &c->base;
    return NL_OK;
}
