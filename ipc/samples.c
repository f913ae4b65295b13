/* samples.c — the last RUN's samples, shared between the ranks (see
 * samples.h). */
#include "ipc/samples.h"

#include <string.h>

#include "common/futex.h"
#include "ipc/ring.h" /* RING_WAIT_SLICE_MS */

#define SAMPLES_SPINS 2048

size_t samples_area_bytes(int32_t capacity)
{
    return sizeof(samples_header) + 2 * (size_t)capacity * sizeof(samples_entry);
}

static nl_status map_area(void *mem, size_t bytes, int32_t capacity, samples_area *out)
{
    if (capacity < 1 || bytes < samples_area_bytes(capacity))
        return nl_error(NL_ERR_FORMAT, "samples area: %zu bytes cannot hold 2 x %d samples", bytes, capacity);
    out->hdr = mem;
    out->entries = (samples_entry *)((uint8_t *)mem + sizeof(samples_header));
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
    samples_entry *e = a->entries + (size_t)(step_id & 1) * (size_t)a->capacity;
    if (status != NL_OK || n < 0 || n > a->capacity) {
        /* An overfull reply cannot be resolved from; the next step fails. */
        if (status == NL_OK) status = NL_ERR_WORKER;
        n = 0;
    }
    for (int32_t i = 0; i < n; i++) e[i] = (samples_entry){.seq_id = sampled[i].seq_id, .token = sampled[i].token_id};
    slot->step_id = step_id;
    slot->status = (int32_t)status;
    slot->n = n;
    atomic_store_explicit(&a->hdr->published, (uint32_t)step_id + 1, memory_order_release);
    futex_wake_shared(&a->hdr->published);
}

static bool has_placeholder(const wire_run *cmd)
{
    for (int32_t s = 0; s < cmd->n_seqs; s++)
        if (cmd->seqs[s].num_new == 1 && cmd->seqs[s].tokens[0] == WIRE_TOKEN_PREVIOUS) return true;
    return false;
}

/* Whether rank 0 has published step_id or a later step. */
static bool published_by(const samples_area *a, uint64_t step_id)
{
    uint32_t got = atomic_load_explicit(&a->hdr->published, memory_order_acquire);
    return (int32_t)(got - ((uint32_t)step_id + 1)) >= 0;
}

/* Rank 0 has published every step it ran before this one; another rank
 * waits until rank 0 has published step_id, or a later step (then step_id
 * was never run and the lookup below fails). */
static nl_status wait_published(samples_area *a, uint64_t step_id, bool may_wait, nl_status (*alive)(void *),
                                void *arg)
{
    if (!may_wait || published_by(a, step_id)) return NL_OK;
    for (int i = 0; i < SAMPLES_SPINS; i++) {
        if (published_by(a, step_id)) return NL_OK;
        cpu_relax();
    }
    for (;;) {
        uint32_t got = atomic_load_explicit(&a->hdr->published, memory_order_acquire);
        if (published_by(a, step_id)) return NL_OK;
        if (alive) NL_TRY(alive(arg));
        futex_wait_shared(&a->hdr->published, got, RING_WAIT_SLICE_MS);
    }
}

/* The token slot's samples gave seq_id, searched from where the last match
 * was: consecutive steps list their seqs in much the same order. */
static bool find(samples_area *a, const samples_entry *e, int32_t n, uint64_t seq_id, int32_t *token)
{
    for (int32_t k = 0; k < n; k++) {
        int32_t i = (a->cursor + k) % n;
        if (e[i].seq_id != seq_id) continue;
        *token = e[i].token;
        a->cursor = i + 1 < n ? i + 1 : 0;
        return true;
    }
    return false;
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
    const samples_entry *e = a->entries + (size_t)(prev & 1) * (size_t)a->capacity;
    int32_t n = slot->n;
    if (n < 0 || n > a->capacity)
        return nl_error(NL_ERR_WORKER, "step %llu: step %llu published %d samples, room for %d", step,
                        (unsigned long long)prev, n, a->capacity);
    for (int32_t s = 0; s < cmd->n_seqs; s++) {
        wire_seq *q = &cmd->seqs[s];
        if (q->num_new != 1 || q->tokens[0] != WIRE_TOKEN_PREVIOUS) continue;
        int32_t token;
        if (!find(a, e, n, q->seq_id, &token))
            return nl_error(NL_ERR_INVALID_ARG,
                            "step %llu: seq %llu's input is step %llu's sample, but that step did not sample it",
                            step, (unsigned long long)q->seq_id, (unsigned long long)prev);
        ((int32_t *)q->tokens)[0] = token; /* the caller's own decoded copy */
    }
    return NL_OK;
}
