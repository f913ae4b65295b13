/* samples.h — the tokens the last RUN sampled, published by rank 0 for
 * every rank.
 *
 * With async scheduling the leader sends step N + 1 before it has read step
 * N's reply, so a decoding seq's input token in N + 1 may be
 * WIRE_TOKEN_PREVIOUS: "the token step N sampled for this seq".  Only rank 0
 * samples, so after every RUN (failed or not) it publishes that step's
 * (seq id, token) pairs here, and every rank, rank 0 included, resolves the
 * placeholders of the next command from them before running it.  This is
 * the path of a worker that executes whole steps (worker_loop.h: no launch
 * and finish); the model runner samples on every rank and takes them on
 * its device instead, publishing nothing (worker/worker_loop.c).
 *
 * Two slots, by step parity: rank 0 writes step N + 1's slot only after
 * step N + 1 ran, which every rank joined, so nobody still reads the slot
 * of step N - 1 it overwrites.  The futex word holds the last published
 * step's low 32 bits plus one (0: none yet).
 */
#ifndef NL_IPC_SAMPLES_H
#define NL_IPC_SAMPLES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "ipc/wire.h"

typedef struct samples_slot {
    uint64_t step_id;
    int32_t status;        /* the step's nl_status on rank 0 */
    int32_t n;             /* samples, in the step's command order */
} samples_slot;

/* Followed by the slots' seq ids [2][capacity], then their tokens
 * [2][capacity]. */
typedef struct samples_header {
    _Atomic uint32_t published; /* futex: (uint32_t)step_id + 1 of the last slot written */
    _Atomic uint32_t waiters;   /* ranks asleep on published: publish wakes only then */
    uint32_t capacity;          /* samples per slot */
    samples_slot slots[2];
} samples_header;

/* One process's view of the area.  The capacity is the handle's own copy,
 * checked against the area's bytes at attach: nothing read back from the
 * shared part later can make a lookup leave the area. */
typedef struct samples_area {
    samples_header *hdr;
    uint64_t *seq_ids;      /* [2][capacity] */
    int32_t *tokens;        /* [2][capacity] */
    int32_t capacity;
    int32_t cursor;         /* where the last lookup matched, to start the next */
} samples_area;

/* Bytes of an area with room for capacity samples a step. */
size_t samples_area_bytes(int32_t capacity);
/* Formats mem[bytes] (zeroed) as an area for capacity samples a step. */
nl_status samples_area_format(void *mem, size_t bytes, int32_t capacity, samples_area *out);
/* Checks and maps an area formatted by another process. */
nl_status samples_area_attach(void *mem, size_t bytes, samples_area *out);

/* Rank 0, after each RUN: step_id's status and its samples (the reply's
 * entries; none when the step failed). */
void samples_publish(samples_area *a, uint64_t step_id, nl_status status, const wire_sampled *sampled,
                     int32_t n);

/* Every rank, before running cmd: replaces each WIRE_TOKEN_PREVIOUS input
 * (a seq's single new token) with the token step_id - 1 sampled for that
 * seq.  may_wait (every rank but 0, which published all it ran): waits for
 * rank 0 to publish step_id - 1, calling alive(arg) between waits (its
 * error ends the wait).  Without placeholders it returns at once.  cmd's
 * token arrays must be writable (a decoded command in the caller's
 * arena). */
nl_status samples_resolve(samples_area *a, wire_run *cmd, bool may_wait, nl_status (*alive)(void *), void *arg);

#endif
