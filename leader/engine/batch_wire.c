/* batch_wire.c — a scheduled batch as a RUN command (see batch_wire.h). */
#include "leader/engine/batch_wire.h"

#include "common/sampling.h"

int32_t batch_wire_build(const sched_batch *b, uint64_t step_id, wire_seq *seqs, wire_run *cmd)
{
    int32_t n_sample = 0;
    for (int32_t i = 0; i < b->n_seqs; i++) {
        const seq *s = b->seqs[i];
        wire_seq *w = &seqs[i];
        w->seq_id = s->id;
        w->num_computed = s->num_computed;
        w->num_new = s->num_new;
        w->n_blocks = s->n_blocks;
        /* Only the chunk that completes the seq's tokens samples. */
        w->sample = s->num_computed + s->num_new == s->n_tokens;
        /* The sample's index in the output, counting the placeholders of
         * samples still in flight: seeded sampling draws the same numbers
         * with or without async scheduling. */
        w->sampling = sampling_row_from_params(&s->params, s->seed, (uint64_t)(s->n_tokens - s->prompt_len));
        w->tokens = s->tokens + s->num_computed;
        w->block_table = s->block_table;
        n_sample += w->sample;
    }
    *cmd = (wire_run){.kind = WIRE_RUN, .step_id = step_id, .n_seqs = b->n_seqs, .seqs = seqs};
    return n_sample;
}
