/* samples.c — the last RUN's samples, shared between the ranks (see
 * samples.h). */
#include "ipc/samples.h"

#include <string.h>

#include "common/futex.h"
#include "ipc/ring.h" /* RING_WAIT_SLICE_MS */

#define SAMPLES_SPINS 2048

size_t samples_area_bytes(int32_t capacity)
{
    return sizeof(samples_header) + 2 * (size_t)capacity * (sizeof(uint64_t) + sizeof(int32_t));
}

static nl_status map_area(void *mem, size_t bytes, int32_t capacity, samples_area *out)
{
    if (capacity < 1 || bytes < samples_area_bytes(capacity))
        return nl_error(NL_ERR_FORMAT, "samples area: %zu bytes cannot hold 2 x %d samples", bytes, capacity);
    out->hdr = mem;
    out->seq_ids = (uint64_t *)((uint8_t *)mem + sizeof(samples_header));
    out->tokens = (int32_t *)(out->seq_ids + 2 * (size_t)capacity);
    out->capacity = capacity;
    out->cursor = 0;
    return NL_OK;
}

nl_status samples_area_format(void *mem, size_t bytes, int32_t capacity, samples_area *out)
{
    NL_TRY(map_area(mem, bytes, capacity, out));
    out->hdr->capacity = (uint32_t)capacity;
    atomic_store(&out->hdr->published, 0);
    return NL_OK;
}

nl_status samples_area_attach(void *mem, size_t bytes, samples_area *out)
{
    if (bytes < sizeof(samples_header))
        return nl_error(NL_ERR_FORMAT, "samples area: %zu bytes, less than its header", bytes);
    uint32_t capacity = ((samples_header *)mem)->capacity;
    if (capacity > INT32_MAX / 2)
        return nl_error(NL_ERR_FORMAT, "samples area: capacity %u out of range", capacity);
    return map_area(mem, bytes, (int32_t)capacity, out);
}

void samples_publish(samples_area *a, uint64_t step_id, nl_status status, const wire_sampled *sampled,
                     int32_t n)
{
    samples_slot *slot = &a->hdr->slots[step_id & 1];
    size_t first = (size_t)(step_id & 1) * (size_t)a->capacity;
    if (status != NL_OK || n < 0 || n > a->capacity) {
        /* An overfull reply cannot be resolved from; the next step fails. */
        if (status == NL_OK) status = NL_ERR_WORKER;
        n = 0;
    }
    for (int32_t i = 0; i < n; i++) {
        a->seq_ids[first + i] = sampled[i].seq_id;
        a->tokens[first + i] = sampled[i].token_id;
    }
    slot->step_id = step_id;
    slot->status = (int32_t)status;
    slot->n = n;
    atomic_store(&a->hdr->published, (uint32_t)step_id + 1);
    futex_wake_counted(&a->hdr->published, &a->hdr->waiters);
}

static bool has_placeholder(const wire_run *cmd)
{
    for (int32_t s = 0; s < cmd->n_seqs; s++)
        if (cmd->seqs[s].num_new == 1 && cmd->seqs[s].tokens[0] == WIRE_TOKEN_PREVIOUS) return true;
    return false;
}

/* Whether the futex word says step_id, or a later step, is published. */
static bool reaches(uint32_t published, uint64_t step_id)
{
    return (int32_t)(published - ((uint32_t)step_id + 1)) >= 0;
}

static bool published_by(const samples_area *a, uint64_t step_id)
{
    return reaches(atomic_load(&a->hdr->published), step_id);
}

typedef struct publish_wait {
    const samples_area *a;
    uint64_t step_id;
} publish_wait;

static int step_published(const void *arg)
{
    const publish_wait *w = arg;
    return published_by(w->a, w->step_id);
}

/* Rank 0 has published every step it ran before this one; another rank
 * waits until rank 0 has published step_id, or a later step (then step_id
 * was never run and the lookup below fails). */
static nl_status wait_published(samples_area *a, uint64_t step_id, bool may_wait, nl_status (*alive)(void *),
                                void *arg)
{
    if (!may_wait || published_by(a, step_id)) return NL_OK;
    const publish_wait w = {a, step_id};
    int done;
    return futex_await_counted(&a->hdr->published, &a->hdr->waiters, step_published, &w, SAMPLES_SPINS,
                               RING_WAIT_SLICE_MS, alive, arg, &done);
}

nl_status samples_resolve(samples_area *a, wire_run *cmd, bool may_wait, nl_status (*alive)(void *), void *arg)
{
    if (!has_placeholder(cmd)) return NL_OK;
    unsigned long long step = (unsigned long long)cmd->step_id;
    uint64_t prev = cmd->step_id - 1;
    NL_TRY(wait_published(a, prev, may_wait, alive, arg));
    const samples_slot *slot = &a->hdr->slots[prev & 1];
    if (cmd->step_id == 0 || atomic_load(&a->hdr->published) == 0 || slot->step_id != prev)
        return nl_error(NL_ERR_INVALID_ARG, "step %llu: a placeholder token, but step %llu did not run just "
                        "before it", step, (unsigned long long)prev);
    if (slot->status != NL_OK)
        return nl_error(NL_ERR_WORKER, "step %llu: its input tokens come from step %llu, which failed (%s)",
                        step, (unsigned long long)prev, nl_status_name((nl_status)slot->status));
    size_t first = (size_t)(prev & 1) * (size_t)a->capacity;
    int32_t n = slot->n;
    if (n < 0 || n > a->capacity)
        return nl_error(NL_ERR_WORKER, "step %llu: step %llu published %d samples, room for %d", step,
                        (unsigned long long)prev, n, a->capacity);
    for (int32_t s = 0; s < cmd->n_seqs; s++) {
        wire_seq *q = &cmd->seqs[s];
        if (q->num_new != 1 || q->tokens[0] != WIRE_TOKEN_PREVIOUS) continue;
        int32_t i = wire_find_seq(a->seq_ids + first, n, q->seq_id, &a->cursor);
        if (i < 0)
            return nl_error(NL_ERR_INVALID_ARG,
                            "step %llu: seq %llu's input is step %llu's sample, but that step did not sample it",
                            step, (unsigned long long)q->seq_id, (unsigned long long)prev);
        ((int32_t *)q->tokens)[0] = a->tokens[first + i]; /* the caller's own decoded copy */
    }
    return NL_OK;
}
