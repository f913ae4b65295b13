/* decode_graphs.h — which decode steps the model runner captures as graphs,
 * and which captured graph a step replays.
 *
 * A graph replays one step shape for any step that fits it: a batch of at
 * most n_seqs decodes (the rest of its rows are padding) whose contexts are
 * at most max_ctx tokens.  The bound matters as much as the size: the
 * forward hands it to the backend as nl_attn_batch.max_context_len, which
 * may plan attention from it, so replaying a graph for a step with a
 * longer context than its bound would be wrong, not merely slow.
 */
#ifndef NL_WORKER_DECODE_GRAPHS_H
#define NL_WORKER_DECODE_GRAPHS_H

#include <stdint.h>

#define DECODE_GRAPHS_MAX 128

typedef struct decode_graph_shape {
    int32_t n_seqs;  /* decodes the graph is captured for */
    int32_t max_ctx; /* bound on every context of a step it replays */
} decode_graph_shape;

/* The shapes to capture for steps of at most max_seqs decodes and contexts
 * of at most max_model_len tokens, ascending by n_seqs and then by max_ctx,
 * so that the first that fits a step is the cheapest; returns how many
 * (at most DECODE_GRAPHS_MAX; max_seqs, max_model_len >= 1). */
int32_t decode_graph_shapes(int32_t max_seqs, int32_t max_model_len,
                            decode_graph_shape out[DECODE_GRAPHS_MAX]);

/* The index of the first of n shapes that holds n_seqs decodes whose
 * longest context is `longest` tokens, or -1 (the step runs eagerly). */
int32_t decode_graph_pick(const decode_graph_shape *shapes, int32_t n, int32_t n_seqs,
                          int32_t longest);

#endif
