/* decode_graphs.c — the decode step shapes captured as graphs (see the
 * header). */
#include "worker/decode_graphs.h"

/* Batch sizes: 1, 2, 4, 8, then steps of 8 to 32, of 16 to 128, of 32 to
 * 256 and of 64 beyond, and the largest itself: 21 graphs for 512 seqs
 * instead of 68 in steps of 8, since each costs an eager warm-up, a capture
 * and an instantiation at start-up.  Padding rows cost little in a decode
 * step (no KV written, one key read), so a coarser step loses little. */
static int32_t size_after(int32_t n)
{
    return n < 8 ? 2 * n : n < 32 ? n + 8 : n < 128 ? n + 16 : n < 256 ? n + 32 : n + 64;
}

/* Batches of at most SHORT_SEQS decodes are captured twice: with their
 * contexts bounded by SHORT_CONTEXT tokens and by max_model_len.  A tiny
 * batch's attention plan is all about its contexts: under the short bound
 * the CUDA backend merges a sequence's context splits inside one cluster of
 * blocks, a kernel fewer a layer. */
#define SHORT_SEQS 4
#define SHORT_CONTEXT 1024

int32_t decode_graph_shapes(int32_t max_seqs, int32_t max_model_len,
                            decode_graph_shape out[DECODE_GRAPHS_MAX])
{
    int32_t count = 0;
    for (int32_t n = 1;; n = size_after(n)) {
        const int32_t size = n < max_seqs ? n : max_seqs;
        if (size <= SHORT_SEQS && SHORT_CONTEXT < max_model_len) {
            if (count == DECODE_GRAPHS_MAX) break;
            out[count++] = (decode_graph_shape){size, SHORT_CONTEXT};
        }
        if (count == DECODE_GRAPHS_MAX) break;
        out[count++] = (decode_graph_shape){size, max_model_len};
        if (n >= max_seqs) break;
    }
    return count;
}

int32_t decode_graph_pick(const decode_graph_shape *shapes, int32_t n, int32_t n_seqs,
                          int32_t longest)
{
    for (int32_t i = 0; i < n; i++)
        if (shapes[i].n_seqs >= n_seqs && shapes[i].max_ctx >= longest) return i;
    return -1;
}
