/* ring.c — the shared-memory byte ring (see ring.h for the design).
 *
 * Waking is a Dekker handshake on sequentially consistent atomics: a waiter
 * announces itself (waiters + 1) and re-checks its condition before it
 * sleeps; the other side publishes its position, bumps the sequence word and
 * only then looks for waiters.  Either the waiter sees the new position or
 * the publisher sees the waiter, and the futex compare on the sequence word
 * catches a publish that lands between the waiter's check and its sleep.
 */
#include "ipc/ring.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/futex.h"

#define RING_MAGIC 0x474e4952u /* "RING" */
#define RING_SPINS 256

static uint64_t pad8(uint64_t n)
{
    return (n + 7) & ~(uint64_t)7;
}

size_t ring_bytes(size_t capacity)
{
    return sizeof(ring_shared) + pad8(capacity);
}

nl_status ring_format(void *mem, size_t bytes, size_t capacity, int n_readers, ring *out)
{
    if (n_readers < 1 || n_readers > RING_MAX_READERS)
        return nl_error(NL_ERR_INVALID_ARG, "ring: %d readers, expected 1..%d", n_readers,
                        RING_MAX_READERS);
    if (capacity < 64 || capacity % 8 != 0)
        return nl_error(NL_ERR_INVALID_ARG, "ring: capacity %zu is not a multiple of 8 >= 64",
                        capacity);
    if (bytes < ring_bytes(capacity))
        return nl_error(NL_ERR_INVALID_ARG, "ring: %zu bytes given, %zu needed", bytes,
                        ring_bytes(capacity));
    ring_shared *sh = mem;
    memset(sh, 0, sizeof *sh);
    sh->n_readers = (uint32_t)n_readers;
    sh->capacity = capacity;
    atomic_store(&sh->write_pos, 0);
    sh->magic = RING_MAGIC;
    return ring_attach(mem, bytes, out);
}

nl_status ring_attach(void *mem, size_t bytes, ring *out)
{
    ring_shared *sh = mem;
    if (bytes < sizeof *sh || sh->magic != RING_MAGIC)
        return nl_error(NL_ERR_FORMAT, "ring: no ring at this place of the segment");
    if (sh->n_readers < 1 || sh->n_readers > RING_MAX_READERS || sh->capacity < 64 ||
        sh->capacity % 8 != 0 || sh->capacity > bytes - sizeof *sh)
        return nl_error(NL_ERR_FORMAT, "ring: header claims %u readers and %llu bytes in a %zu-byte area",
                        sh->n_readers, (unsigned long long)sh->capacity, bytes);
    out->sh = sh;
    out->data = (uint8_t *)mem + sizeof *sh;
    out->capacity = sh->capacity;
    out->n_readers = sh->n_readers;
    out->write_pos = atomic_load(&sh->write_pos);
    for (uint32_t i = 0; i < out->n_readers; i++) out->read_pos[i] = atomic_load(&sh->readers[i].pos);
    return NL_OK;
}

size_t ring_max_message(const ring *r)
{
    return (size_t)(r->capacity - 8);
}

/* What a wait's condition finds (a futex_cond_fn's value): not yet, ready,
 * or a segment whose positions contradict the handle's own (ring_corrupt
 * has said how). */
enum { RING_NOT_YET, RING_READY, RING_CORRUPT };

static int ring_corrupt(const char *what, uint64_t seen, uint64_t lo, uint64_t hi)
{
    nl_error(NL_ERR_RUNTIME, "ring: corrupt shared memory: %s is %llu, outside [%llu, %llu]", what,
             (unsigned long long)seen, (unsigned long long)lo, (unsigned long long)hi);
    return RING_CORRUPT;
}

/* What a wait's condition looks at: the ring, and the bytes of room it
 * needs or the position it reads from. */
typedef struct wait_arg {
    const ring *r;
    uint64_t value;
} wait_arg;

/* Waits until ready(arg) holds (futex_await_counted). */
static nl_status ring_wait(futex_cond_fn ready, const wait_arg *arg, _Atomic uint32_t *seq,
                           _Atomic uint32_t *waiters, ring_check_fn check, void *ctx)
{
    int rs;
    NL_TRY(futex_await_counted(seq, waiters, ready, arg, RING_SPINS, RING_WAIT_SLICE_MS, check, ctx, &rs));
    return rs == RING_READY ? NL_OK : NL_ERR_RUNTIME;
}

/* Room for need bytes once every reader has consumed enough.  A reader's
 * position can only lie between the oldest byte still held and the
 * writer's own position; anything else is a scribbled segment. */
static int has_room(const void *arg)
{
    const ring *r = ((const wait_arg *)arg)->r;
    uint64_t need = ((const wait_arg *)arg)->value;
    uint64_t lo = r->write_pos > r->capacity ? r->write_pos - r->capacity : 0;
    uint64_t slowest = r->write_pos;
    for (uint32_t i = 0; i < r->n_readers; i++) {
        uint64_t p = atomic_load(&r->sh->readers[i].pos);
        if (p < lo || p > r->write_pos) return ring_corrupt("a reader's position", p, lo, r->write_pos);
        if (p < slowest) slowest = p;
    }
    return r->capacity - (r->write_pos - slowest) >= need ? RING_READY : RING_NOT_YET;
}

static void copy_in(ring *r, uint64_t pos, const void *src, size_t len)
{
    uint64_t off = pos % r->capacity;
    size_t first = len < r->capacity - off ? len : (size_t)(r->capacity - off);
    memcpy(r->data + off, src, first);
    memcpy(r->data, (const uint8_t *)src + first, len - first);
}

static void copy_out(const ring *r, uint64_t pos, void *dst, size_t len)
{
    uint64_t off = pos % r->capacity;
    size_t first = len < r->capacity - off ? len : (size_t)(r->capacity - off);
    memcpy(dst, r->data + off, first);
    memcpy((uint8_t *)dst + first, r->data, len - first);
}

nl_status ring_write(ring *r, const void *msg, size_t len, ring_check_fn check, void *ctx)
{
    if (len > ring_max_message(r))
        return nl_error(NL_ERR_INVALID_ARG,
                        "ring: message of %zu bytes exceeds the ring's limit of %zu bytes", len,
                        ring_max_message(r));
    uint64_t need = 8 + pad8(len);
    const wait_arg room = {r, need};
    NL_TRY(ring_wait(has_room, &room, &r->sh->space_seq, &r->sh->space_waiters, check, ctx));

    uint64_t wp = r->write_pos;
    uint64_t header = len;
    copy_in(r, wp, &header, sizeof header);
    copy_in(r, wp + 8, msg, len);
    r->write_pos = wp + need;
    atomic_store(&r->sh->write_pos, wp + need);
    atomic_fetch_add(&r->sh->data_seq, 1);
    futex_wake_counted(&r->sh->data_seq, &r->sh->data_waiters);
    return NL_OK;
}

/* A message is there once the writer's position passes ours; it can never
 * be more than a ring's capacity ahead. */
static int has_message(const void *arg)
{
    const ring *r = ((const wait_arg *)arg)->r;
    uint64_t pos = ((const wait_arg *)arg)->value;
    uint64_t wp = atomic_load(&r->sh->write_pos);
    if (wp < pos || wp - pos > r->capacity)
        return ring_corrupt("the writer's position", wp, pos, pos + r->capacity);
    return wp > pos ? RING_READY : RING_NOT_YET;
}

nl_status ring_read(ring *r, int reader, ring_buf *buf, ring_check_fn check, void *ctx)
{
    if (reader < 0 || (uint32_t)reader >= r->n_readers)
        return nl_error(NL_ERR_INVALID_ARG, "ring: reader %d of %u", reader, r->n_readers);
    _Atomic uint64_t *mine = &r->sh->readers[reader].pos;
    const uint64_t pos = r->read_pos[reader];
    const wait_arg at = {r, pos};
    NL_TRY(ring_wait(has_message, &at, &r->sh->data_seq, &r->sh->data_waiters, check, ctx));

    /* the message must lie wholly inside what the writer has published */
    uint64_t len;
    uint64_t avail = atomic_load(&r->sh->write_pos) - pos;
    copy_out(r, pos, &len, sizeof len);
    if (len > ring_max_message(r) || 8 + pad8(len) > avail)
        return nl_error(NL_ERR_RUNTIME, "ring: corrupt message length %llu at position %llu",
                        (unsigned long long)len, (unsigned long long)pos);
    if (buf->cap < len || !buf->data) {
        size_t cap = len > 4096 ? (size_t)len : 4096;
        uint8_t *p = realloc(buf->data, cap);
        if (!p) return nl_error(NL_ERR_NOMEM, "ring: no memory for a %zu-byte message", cap);
        buf->data = p;
        buf->cap = cap;
    }
    copy_out(r, pos + 8, buf->data, (size_t)len);
    buf->len = (size_t)len;
    r->read_pos[reader] = pos + 8 + pad8(len);
    atomic_store(mine, r->read_pos[reader]);
    atomic_fetch_add(&r->sh->space_seq, 1);
    futex_wake_counted(&r->sh->space_seq, &r->sh->space_waiters);
    return NL_OK;
}

bool ring_ready(const ring *r, int reader)
{
    if (reader < 0 || (uint32_t)reader >= r->n_readers) return true; /* ring_read says why */
    const wait_arg at = {r, r->read_pos[reader]};
    return has_message(&at) != RING_NOT_YET;
}

void ring_buf_free(ring_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}
