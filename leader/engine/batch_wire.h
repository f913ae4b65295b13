/* batch_wire.h — a scheduled batch as the RUN command the workers execute.
 *
 * The one place that maps seq fields to wire_seq fields: the engine's step
 * and the tests that drive the scheduler directly both build their commands
 * here, so what the tests check is what the engine sends.
 */
#ifndef NL_LEADER_BATCH_WIRE_H
#define NL_LEADER_BATCH_WIRE_H

#include <stdint.h>

#include "ipc/wire.h"
#include "leader/engine/scheduler.h"

/* Fills seqs[0 .. b->n_seqs) (room for max_num_seqs) and *cmd, a RUN of
 * step step_id over them.  Token ids and block tables point into the seqs:
 * no copy, valid until the seqs change.  Returns how many seqs sample (the
 * replies to expect). */
int32_t batch_wire_build(const sched_batch *b, uint64_t step_id, wire_seq *seqs, wire_run *cmd);

#endif
