/* ring.h — a byte ring in shared memory: one writer, up to RING_MAX_READERS
 * readers, variable-length messages.
 *
 * Every reader receives every message (the command ring: the leader writes,
 * all workers read; the reply ring: rank 0 writes, the leader reads).
 * Positions are 64-bit byte counters that only grow; a message is an 8-byte
 * length followed by its bytes padded to 8, and may wrap around the end of
 * the data area.  The writer waits while the slowest reader has not yet
 * consumed enough room (back-pressure).  A waiter spins briefly, then sleeps
 * on a futex in slices of RING_WAIT_SLICE_MS, calling the caller's check
 * function between slices so a dead peer turns into an error, never a hang.
 *
 * Nothing in the shared part is trusted after it is attached: the reader
 * count, the capacity and each side's own position live in the handle, in
 * the process's private memory, and every position read from the segment
 * (the writer's, the readers') is checked against them, so a process that
 * scribbles on the segment causes an error naming the ring, never a wild
 * copy, a crash or a hang.
 */
#ifndef NL_IPC_RING_H
#define NL_IPC_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define RING_MAX_READERS 64
#define RING_WAIT_SLICE_MS 50

/* Called between wait slices; anything but NL_OK abandons the wait and is
 * returned by the ring call (with the message the check recorded). */
typedef nl_status (*ring_check_fn)(void *ctx);

typedef struct ring_reader_pos {
    alignas(64) _Atomic uint64_t pos;
} ring_reader_pos;

/* The shared part, at the start of the ring's memory; data follows it. */
typedef struct ring_shared {
    uint32_t magic;
    uint32_t n_readers;
    uint64_t capacity;                 /* bytes of data, a multiple of 8 */
    alignas(64) _Atomic uint64_t write_pos;
    _Atomic uint32_t data_seq;         /* futex: bumped on every publish */
    _Atomic uint32_t data_waiters;
    alignas(64) _Atomic uint32_t space_seq; /* futex: bumped on every consume */
    _Atomic uint32_t space_waiters;
    ring_reader_pos readers[RING_MAX_READERS];
} ring_shared;

/* One process's handle on a ring: the facts it relies on, copied once at
 * format or attach time. */
typedef struct ring {
    ring_shared *sh;
    uint8_t *data; /* [capacity] */
    uint64_t capacity;
    uint32_t n_readers;
    uint64_t write_pos;                     /* the writer's own position */
    uint64_t read_pos[RING_MAX_READERS];    /* each reader's own position */
} ring;

/* A reader's message buffer, grown as needed; free with ring_buf_free. */
typedef struct ring_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} ring_buf;

/* Bytes of shared memory a ring with capacity bytes of data occupies. */
size_t ring_bytes(size_t capacity);

/* Formats zeroed memory of ring_bytes(capacity) bytes as an empty ring. */
nl_status ring_format(void *mem, size_t bytes, size_t capacity, int n_readers, ring *out);

/* Checks an existing ring inside mem[bytes] and opens a handle on it. */
nl_status ring_attach(void *mem, size_t bytes, ring *out);

/* The longest message the ring accepts. */
size_t ring_max_message(const ring *r);

/* Appends msg[len]; waits for room.  A message longer than
 * ring_max_message() is rejected with NL_ERR_INVALID_ARG. */
nl_status ring_write(ring *r, const void *msg, size_t len, ring_check_fn check, void *ctx);

/* Waits for the next message for reader (0..n_readers-1) and copies it into
 * buf (buf->len = its length). */
nl_status ring_read(ring *r, int reader, ring_buf *buf, ring_check_fn check, void *ctx);
/* Without waiting: whether ring_read would return at once (a message is
 * there, or something ring_read will report as an error). */
bool ring_ready(const ring *r, int reader);

void ring_buf_free(ring_buf *buf);

#endif
