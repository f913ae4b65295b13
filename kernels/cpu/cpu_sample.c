/* cpu_sample.c — the CPU sampler: exactly the procedure of kernels.h.
 *
 * Per row: log_softmax of the raw logits for the reported logprobs (sums in
 * double); argmax at temperature 0; otherwise the exponential race over the
 * kept tokens.  Only top_k and top_p need the row in order, and only its
 * head: the tokens they can keep.  With a top_k of at most SELECT_MAX that
 * head is the top_k tokens, which one pass selects (a heap of top_k) and a
 * sort of top_k puts in order.  For top_p without such a top_k, one pass
 * bins the row by distance below its largest logit, counting each bin's
 * mass, and the nearest bins holding top_p of the row's mass (with a margin
 * for rounding) are the head, gathered and sorted (the CUDA sampler's way,
 * sample_head.cuh).  Only a top_k or a head of over SELECT_MAX tokens (a
 * flat row) puts the whole row in descending order (ties: lower id first)
 * by a stable radix sort of the logits.  The cuts are made over that order in
 * double.  Ordering by logit equals ordering by p = softmax(logits / T) for
 * T > 0.
 *
 * top_p is measured on the distribution renormalised over the top_k kept
 * tokens (as vLLM does); min_p compares with the most likely token, which
 * no renormalisation changes.  Rows are independent and run in parallel.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_backend.h"

/* Maps a float to an unsigned key whose ascending order is the float's
 * descending order; -0 becomes +0 first (f + 0.0f), so that equal floats
 * share a key and the stable sort keeps them in id order. */
static inline uint32_t descending_key(float f)
{
    uint32_t b;
    f += 0.0f;
    memcpy(&b, &f, sizeof b);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ~b;
}

/* Fills order[vocab] with token ids by descending logit, ties by id:
 * LSD radix sort, stable, starting from ids in ascending order. */
static void sort_descending(const float *logits, int32_t vocab, int32_t *order, uint32_t *keys,
                            int32_t *tmp_ids, uint32_t *tmp_keys)
{
    for (int32_t i = 0; i < vocab; i++) {
        order[i] = i;
        keys[i] = descending_key(logits[i]);
    }
    for (int shift = 0; shift < 32; shift += 8) {
        size_t count[257] = {0};
        for (int32_t i = 0; i < vocab; i++) count[((keys[i] >> shift) & 0xff) + 1]++;
        if (count[((keys[0] >> shift) & 0xff) + 1] == (size_t)vocab) continue; /* one bucket */
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int32_t i = 0; i < vocab; i++) {
            size_t dst = count[(keys[i] >> shift) & 0xff]++;
            tmp_keys[dst] = keys[i];
            tmp_ids[dst] = order[i];
        }
        memcpy(keys, tmp_keys, sizeof(uint32_t) * (size_t)vocab);
        memcpy(order, tmp_ids, sizeof(int32_t) * (size_t)vocab);
    }
}

/* True when logit a (id ia) ranks before logit b (id ib). */
static inline bool ranks_before(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* top_k up to this many is selected rather than sorted out of the row. */
#define SELECT_MAX 4096

typedef struct ranked {
    float l;
    int32_t id;
} ranked;

static int rank_order(const void *a_, const void *b_)
{
    const ranked *a = a_, *b = b_;
    return ranks_before(a->l, a->id, b->l, b->id) ? -1 : 1; /* ids differ: never equal */
}

/* Sorts r[n] into the order and writes their ids to order[n]. */
static void order_ranked(ranked *r, int32_t n, int32_t *order)
{
    qsort(r, (size_t)n, sizeof *r, rank_order);
    for (int32_t i = 0; i < n; i++) order[i] = r[i].id;
}

/* Moves heap[at] down to its place in a heap whose root ranks last. */
static void sift_down(ranked *heap, int32_t n, int32_t at)
{
    for (;;) {
        int32_t last = at, c = 2 * at + 1;
        for (int32_t k = c; k < n && k <= c + 1; k++)
            if (ranks_before(heap[last].l, heap[last].id, heap[k].l, heap[k].id)) last = k;
        if (last == at) return;
        ranked t = heap[at];
        heap[at] = heap[last];
        heap[last] = t;
        at = last;
    }
}

/* Fills order[k] with the ids of the k first tokens of the order (k <
 * vocab): a heap of the k best so far, whose root (the one ranking last)
 * each later token must beat, then those k sorted.  heap: k entries. */
static void select_first(const float *l, int32_t vocab, int32_t k, int32_t *order, ranked *heap)
{
    for (int32_t i = 0; i < k; i++) heap[i] = (ranked){l[i], i};
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i);
    for (int32_t i = k; i < vocab; i++)
        if (ranks_before(l[i], i, heap[0].l, heap[0].id)) {
            heap[0] = (ranked){l[i], i};
            sift_down(heap, k, 0);
        }
    order_ranked(heap, k, order);
}

#define HEAD_BINS 2048
#define HEAD_BINS_PER_LOGIT 16.0 /* 128 logits below the max binned */
#define HEAD_MASS_MARGIN (1.0 + 1e-9) /* the bins' sums are in double */

static inline int32_t head_bin(float l, float lmax)
{
    double d = ((double)lmax - l) * HEAD_BINS_PER_LOGIT;
    if (!(d < HEAD_BINS - 1)) return HEAD_BINS - 1; /* far below, or NaN */
    return d > 0.0 ? (int32_t)d : 0;
}

/* Fills order[] with the row's head in order: the tokens of the nearest
 * bins below lmax that hold top_p of the row's mass at 1 / inv_t, whose
 * total goes to *row_mass.  Returns the head's size, or -1 when it is over
 * SELECT_MAX tokens.  head: SELECT_MAX entries. */
static int32_t select_head(const float *l, int32_t vocab, float lmax, double top_p, double inv_t,
                           int32_t *order, ranked *head, double *row_mass)
{
    int32_t count[HEAD_BINS] = {0};
    double mass[HEAD_BINS] = {0.0}, total = 0.0;
    for (int32_t i = 0; i < vocab; i++) {
        double w = exp((l[i] - (double)lmax) * inv_t);
        int32_t b = head_bin(l[i], lmax);
        count[b]++;
        mass[b] += w;
        total += w;
    }
    int32_t last = 0, n = 0;
    double cum = 0.0;
    for (; last < HEAD_BINS - 1; last++) {
        n += count[last];
        cum += mass[last];
        if (cum >= top_p * total * HEAD_MASS_MARGIN) break;
    }
    if (last == HEAD_BINS - 1) n += count[last];
    if (n > SELECT_MAX) return -1;
    int32_t at = 0;
    for (int32_t i = 0; i < vocab; i++)
        if (head_bin(l[i], lmax) <= last) head[at++] = (ranked){l[i], i};
    order_ranked(head, at, order);
    *row_mass = total;
    return at;
}

struct sample_ctx {
    const float *logits;
    int32_t vocab;
    const nl_sample_row *rows;
    int32_t *ids, *top_ids;
    float *logprobs, *top_logprobs;
    atomic_bool failed; /* rows run on several threads */
};

/* The race over ids[0, n) (ids == NULL: over 0..n-1) whose p relative to
 * the most likely token is at least min_ratio; tokens out of reach of the
 * best so far (common/sampling.h) skip the hash and the logarithms. */
static int32_t race(const float *l, const int32_t *ids, int32_t n, const nl_sample_row *sr,
                    float lmax, double min_ratio)
{
    float inv_t = 1.0f / sr->temperature;
    uint64_t key = nl_rng_row_key(sr->seed, sr->offset);
    float best = -INFINITY;
    int32_t chosen = -1;
    for (int32_t k = 0; k < n; k++) {
        int32_t i = ids ? ids[k] : k;
        float x = l[i] * inv_t;
        if (nl_race_out_of_reach(x, best)) continue;
        if (min_ratio > 0.0 && exp(((double)l[i] - lmax) / sr->temperature) < min_ratio) continue;
        uint32_t bits = nl_rng_race_bits(key, (uint32_t)i);
        if (nl_race_bits_out_of_reach(x, bits, best)) continue;
        float score = nl_race_score(l[i], inv_t, nl_rng_race_uniform(bits));
        if (chosen < 0 || score > best || (score == best && i < chosen)) {
            best = score;
            chosen = i;
        }
    }
    return chosen;
}

/* The kept prefix of order[n] (the first n tokens of the order: the row,
 * its top_k or a head of it) after top_k and top_p.  top_p is measured
 * against the mass of the top_k kept or of the whole row; with only a head
 * in order that is row_mass, and -1 is returned when the head ends before
 * the mass is reached (rounding at its margin). */
static int32_t kept_prefix(const float *l, int32_t n, int32_t vocab, const nl_sample_row *sr,
                           const int32_t *order, double row_mass)
{
    double inv_t = 1.0 / sr->temperature, lmax = l[order[0]];
    bool by_k = nl_sample_cuts_by_k(sr, vocab);
    int32_t kept = by_k && sr->top_k < n ? sr->top_k : n;
    if (sr->top_p < 1.0f) {
        /* p relative to the most likely token: ratios are all that matter. */
        double mass = row_mass;
        if (by_k || n == vocab) {
            mass = 0.0;
            for (int32_t i = 0; i < kept; i++) mass += exp((l[order[i]] - lmax) * inv_t);
        }
        double cum = 0.0, target = (double)sr->top_p * mass;
        int32_t i = 0;
        while (i < kept) {
            cum += exp((l[order[i]] - lmax) * inv_t);
            i++;
            if (cum >= target) return i;
        }
        if (!by_k && n < vocab) return -1;
    }
    return kept;
}

static void sample_task(void *ctx_, int64_t begin, int64_t end)
{
    struct sample_ctx *c = ctx_;
    int32_t vocab = c->vocab;
    int32_t *order = NULL, *tmp_ids = NULL;
    uint32_t *keys = NULL, *tmp_keys = NULL;
    ranked *heap = NULL;
    for (int64_t r = begin; r < end; r++) {
        const float *l = c->logits + r * vocab;
        const nl_sample_row *sr = &c->rows[r];
        float lmax = -INFINITY;
        int32_t best = 0;
        for (int32_t i = 0; i < vocab; i++)
            if (l[i] > lmax) {
                lmax = l[i];
                best = i;
            }
        double sum = 0.0;
        for (int32_t i = 0; i < vocab; i++) sum += exp((double)l[i] - lmax);
        double lse = lmax + log(sum);

        /* top-N by insertion: N <= 20, and most logits fail the first test */
        int32_t n_top = sr->n_logprobs < 0 ? 0 : sr->n_logprobs > NL_MAX_LOGPROBS ? NL_MAX_LOGPROBS : sr->n_logprobs;
        if (n_top > vocab) n_top = vocab;
        int32_t *tid = c->top_ids + r * NL_MAX_LOGPROBS, have = 0;
        float *tlp = c->top_logprobs + r * NL_MAX_LOGPROBS;
        for (int32_t i = 0; i < vocab && n_top > 0; i++) {
            if (have == n_top && !ranks_before(l[i], i, l[tid[have - 1]], tid[have - 1])) continue;
            int32_t j = have < n_top ? have++ : have - 1;
            while (j > 0 && ranks_before(l[i], i, l[tid[j - 1]], tid[j - 1])) {
                tid[j] = tid[j - 1];
                j--;
            }
            tid[j] = i;
        }
        for (int32_t j = 0; j < NL_MAX_LOGPROBS; j++) {
            if (j < n_top) {
                tlp[j] = (float)(l[tid[j]] - lse);
            } else {
                tid[j] = -1;
                tlp[j] = 0.0f;
            }
        }

        int32_t chosen = best;
        const bool by_k = nl_sample_cuts_by_k(sr, vocab), cuts = by_k || sr->top_p < 1.0f;
        if (sr->temperature > 0.0f && !cuts) {
            chosen = race(l, NULL, vocab, sr, lmax, sr->min_p);
        } else if (sr->temperature > 0.0f) {
            if (!order) order = malloc(sizeof(int32_t) * (size_t)vocab);
            if (!order) {
                atomic_store(&c->failed, true);
                break;
            }
            if (!heap) heap = malloc(sizeof(ranked) * SELECT_MAX);
            if (!heap) {
                atomic_store(&c->failed, true);
                break;
            }
            double inv_t = 1.0 / sr->temperature, row_mass = 0.0;
            int32_t kept = -1;
            if (by_k && sr->top_k <= SELECT_MAX) {
                select_first(l, vocab, sr->top_k, order, heap);
                kept = kept_prefix(l, sr->top_k, vocab, sr, order, 0.0);
            } else if (!by_k) {
                int32_t n = select_head(l, vocab, lmax, sr->top_p, inv_t, order, heap, &row_mass);
                if (n >= 0) kept = kept_prefix(l, n, vocab, sr, order, row_mass);
            }
            if (kept < 0) { /* the head is too large: the whole row in order */
                if (!tmp_ids) tmp_ids = malloc(sizeof(int32_t) * (size_t)vocab);
                if (!keys) keys = malloc(sizeof(uint32_t) * (size_t)vocab);
                if (!tmp_keys) tmp_keys = malloc(sizeof(uint32_t) * (size_t)vocab);
                if (!tmp_ids || !keys || !tmp_keys) {
                    atomic_store(&c->failed, true);
                    break;
                }
                sort_descending(l, vocab, order, keys, tmp_ids, tmp_keys);
                kept = kept_prefix(l, vocab, vocab, sr, order, 0.0);
            }
            chosen = race(l, order, kept, sr, lmax, sr->min_p);
        }
        c->ids[r] = chosen;
        c->logprobs[r] = (float)(l[chosen] - lse);
    }
    free(order);
    free(tmp_ids);
    free(keys);
    free(tmp_keys);
    free(heap);
}

nl_status cpu_sample(nl_backend *be, const float *logits, int32_t m, int32_t vocab,
                     const nl_sample_row *rows, int32_t *ids, float *logprobs, int32_t *top_ids,
                     float *top_logprobs)
{
    if (vocab <= 0) return nl_error(NL_ERR_INVALID_ARG, "sample: vocab %d must be positive", vocab);
    for (int32_t r = 0; r < m; r++)
        if (!(rows[r].temperature >= 0.0f) || !(rows[r].top_p > 0.0f) || rows[r].top_p > 1.0f ||
            !(rows[r].min_p >= 0.0f) || rows[r].min_p > 1.0f)
            return nl_error(NL_ERR_INVALID_ARG,
                            "sample: row %d has temperature %g, top_p %g, min_p %g (need T >= 0, "
                            "top_p in (0, 1], min_p in [0, 1])", r, rows[r].temperature,
                            rows[r].top_p, rows[r].min_p);
    struct sample_ctx c = {logits, vocab, rows, ids, top_ids, logprobs, top_logprobs, false};
    cpu_parallel_for((cpu_backend *)be, m, 2, sample_task, &c);
    if (atomic_load(&c.failed)) return nl_error(NL_ERR_NOMEM, "sample: no memory to sort %d logits", vocab);
    return NL_OK;
}
