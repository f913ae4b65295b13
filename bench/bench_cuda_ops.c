/* bench_cuda_ops.c — times the CUDA backend's hot ops on model-sized shapes:
 * decode and prefill attention, the GEMMs of a Qwen3-8B layer and the LM
 * head, and the sampler.  Each figure is the mean of repeated launches after
 * a warm-up, timed around a stream synchronisation, with the bytes or flops
 * it moved, so it can be set against the GPU's ceilings.
 *
 * Usage: bench_cuda_ops [iterations] [attention|decode|stride|graph|gemv|plans|sample]
 * (prints a Markdown table; "attention" or "sample" times only those shapes,
 * "plans" a GEMM shape's first call (its cuBLASLt plan) against a repeat,
 * "decode" the decode attention of the throughput benchmark's batch sizes,
 * "stride" the same bytes of decode attention with a kv head's rows 1 KB
 * (8 kv heads) and 128 bytes (1 kv head, 8 times the sequences) apart,
 * "graph" only decode attention at small batches under a CUDA graph's host
 * maximum, "gemv" the batch-1 linear shapes).
 * NL_ATTN_GENERIC=1 in the environment times the backend's generic attention
 * kernel instead.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static nl_backend *be;
static int iters = 20;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda_ops: %s: %s\n", what, nl_last_error());
    exit(1);
}

#define FILL_BYTES ((size_t)4 << 20)

static void *dev_alloc(size_t bytes)
{
    void *p;
    if (be->ops->alloc(be, bytes, &p) != NL_OK) die("alloc");
    /* small random bf16 values (bytes 0x3c.. are about 0.01), one 4 MiB
     * pattern repeated: timing does not depend on the values, and filling
     * gigabytes on the host would take longer than the benchmark */
    static uint16_t *h;
    if (!h) {
        h = malloc(FILL_BYTES);
        for (size_t i = 0; i < FILL_BYTES / 2; i++)
            h[i] = (uint16_t)(0x3c00 + (rand() & 0x7f)) ^ (rand() & 1 ? 0x8000 : 0);
    }
    for (size_t off = 0; off < bytes; off += FILL_BYTES) {
        size_t n = bytes - off < FILL_BYTES ? bytes - off : FILL_BYTES;
        if (be->ops->upload(be, (char *)p + off, h, n) != NL_OK) die("upload");
    }
    return p;
}

static void *dev_ints(const int32_t *h, size_t n)
{
    void *p;
    if (be->ops->alloc(be, n * 4, &p) != NL_OK || be->ops->upload(be, p, h, n * 4) != NL_OK)
        die("ints");
    return p;
}

/* Runs fn iters times after two warm-ups; returns seconds per call. */
#define TIME(expr)                                                                  \
    ({                                                                              \
        for (int w_ = 0; w_ < 2; w_++)                                              \
            if ((expr) != NL_OK) die(#expr);                                        \
        if (be->ops->synchronize(be) != NL_OK) die("sync");                         \
        double t0_ = now();                                                         \
        for (int i_ = 0; i_ < iters; i_++) (void)(expr);                            \
        if (be->ops->synchronize(be) != NL_OK) die("sync");                         \
        (now() - t0_) / iters;                                                      \
    })

/* host_max > ctx: the batch carries that maximum context and a block table
 * row stride to match, as a CUDA-graph capture at max_model_len does.
 * NL_DECODE_SPREAD: contexts spread evenly over [1, 2 ctx - 1] (mean ctx),
 * as a serving batch's are, instead of all equal to ctx. */
static bool decode_spread;

static void bench_decode_kv(int n_seqs, int ctx, int hq, int hk, int hd, int bs, int host_max,
                            nl_dtype kv)
{
    int blocks_per = (ctx + bs - 1) / bs, nb = n_seqs * blocks_per;
    int longest = decode_spread ? 2 * ctx - 1 : ctx;
    int max_ctx = host_max > longest ? host_max : longest, stride = (max_ctx + bs - 1) / bs;
    size_t cache = (size_t)nb * bs * hk * hd * nl_dtype_size(kv);
    void *kc = dev_alloc(cache), *vc = dev_alloc(cache);
    void *qkv = dev_alloc((size_t)n_seqs * (hq + 2 * hk) * hd * 2);
    void *out = dev_alloc((size_t)n_seqs * hq * hd * 2);
    int32_t *cu = malloc((n_seqs + 1) * 4), *cl = malloc(n_seqs * 4);
    int32_t *tab = calloc((size_t)n_seqs * stride, 4);
    for (int s = 0; s <= n_seqs; s++) cu[s] = s;
    for (int s = 0; s < n_seqs; s++)
        cl[s] = decode_spread && n_seqs > 1 ? 1 + (int)((int64_t)(2 * ctx - 2) * ((s * 37) % n_seqs) /
                                                        (n_seqs - 1))
                                            : ctx;
    double keys = 0;
    for (int s = 0; s < n_seqs; s++) keys += cl[s];
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < (cl[s] + bs - 1) / bs; i++)
            tab[(size_t)s * stride + i] = ((s * blocks_per + i) * 7919) % nb;
    /* longest context first, as the engine orders a step's decodes
     * (NL_DECODE_ORDER=0: the seqs' own order) */
    int32_t *order = malloc(n_seqs * 4);
    int64_t *sort_keys = malloc(n_seqs * 8);
    nl_attn_decode_order(cl, n_seqs, n_seqs, sort_keys, order);
    free(sort_keys);
    bool ordered = !(getenv("NL_DECODE_ORDER") && strcmp(getenv("NL_DECODE_ORDER"), "0") == 0);
    nl_attn_batch b = {n_seqs, n_seqs, 1, max_ctx, stride, bs, true,
                       dev_ints(cu, n_seqs + 1), dev_ints(cl, n_seqs),
                       dev_ints(tab, (size_t)n_seqs * stride), 0,
                       ordered ? dev_ints(order, n_seqs) : NULL};
    double t = TIME(be->ops->attention(be, out, qkv, kc, vc, &b, hq, hk, hd, 0.088f, kv));
    double bytes = 2.0 * keys * hk * hd * (double)nl_dtype_size(kv);
    char extra[64] = "";
    if (max_ctx > longest) snprintf(extra, sizeof extra, ", host max %d", max_ctx);
    if (decode_spread) snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", spread");
    if (kv != NL_DTYPE_BF16)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %s cache", nl_dtype_name(kv));
    printf("| decode attention | %d seqs x ctx %d, hq %d hk %d hd %d%s | %.1f us | %.0f GB/s |\n",
           n_seqs, ctx, hq, hk, hd, extra, t * 1e6, bytes / t / 1e9);
    be->ops->free(be, kc);
    be->ops->free(be, vc);
    be->ops->free(be, qkv);
    be->ops->free(be, out);
    be->ops->free(be, (void *)b.cu_seqlens_q);
    be->ops->free(be, (void *)b.context_lens);
    be->ops->free(be, (void *)b.block_tables);
    if (b.decode_order) be->ops->free(be, (void *)b.decode_order);
    free(cu);
    free(cl);
    free(tab);
    free(order);
}

static void bench_decode(int n_seqs, int ctx, int hq, int hk, int hd, int bs, int host_max)
{
    bench_decode_kv(n_seqs, ctx, hq, hk, hd, bs, host_max, NL_DTYPE_BF16);
}

static void bench_prefill(int n_seqs, int len, int hq, int hk, int hd, int bs)
{
    int blocks_per = (len + bs - 1) / bs, nb = n_seqs * blocks_per, n = n_seqs * len;
    size_t cache = (size_t)nb * bs * hk * hd * 2;
    void *kc = dev_alloc(cache), *vc = dev_alloc(cache);
    void *qkv = dev_alloc((size_t)n * (hq + 2 * hk) * hd * 2);
    void *out = dev_alloc((size_t)n * hq * hd * 2);
    int32_t *cu = malloc((n_seqs + 1) * 4), *cl = malloc(n_seqs * 4);
    int32_t *tab = malloc((size_t)nb * 4);
    for (int s = 0; s <= n_seqs; s++) cu[s] = s * len;
    for (int s = 0; s < n_seqs; s++) cl[s] = len;
    for (int i = 0; i < nb; i++) tab[i] = i;
    nl_attn_batch b = {n_seqs, n, len, len, blocks_per, bs, false,
                       dev_ints(cu, n_seqs + 1), dev_ints(cl, n_seqs), dev_ints(tab, nb), 0, NULL};
    double t = TIME(be->ops->attention(be, out, qkv, kc, vc, &b, hq, hk, hd, 0.088f, NL_DTYPE_BF16));
    double flops = 4.0 * n_seqs * hq * hd * (double)len * (len + 1) / 2.0;
    printf("| prefill attention | %d seqs x %d tokens, hq %d hk %d hd %d | %.1f us | %.1f TFLOP/s |\n",
           n_seqs, len, hq, hk, hd, t * 1e6, flops / t / 1e12);
    be->ops->free(be, kc);
    be->ops->free(be, vc);
    be->ops->free(be, qkv);
    be->ops->free(be, out);
    be->ops->free(be, (void *)b.cu_seqlens_q);
    be->ops->free(be, (void *)b.context_lens);
    be->ops->free(be, (void *)b.block_tables);
    free(cu);
    free(cl);
    free(tab);
}

static void bench_gemm(const char *name, int n, int rows, int cols, bool f32)
{
    nl_weight *w;
    if (be->ops->weight_create(be, rows, cols, &w) != NL_OK) die("weight");
    void *x = dev_alloc((size_t)n * cols * 2), *out = dev_alloc((size_t)n * rows * (f32 ? 4 : 2));
    double t = f32 ? TIME(be->ops->linear_f32(be, out, x, w, n))
                   : TIME(be->ops->linear(be, out, x, w, NULL, n));
    double flops = 2.0 * n * rows * cols, bytes = 2.0 * rows * cols;
    printf("| %s | n %d, [%d x %d] | %.1f us | %.0f TFLOP/s, %.0f GB/s weights |\n", name, n, rows,
           cols, t * 1e6, flops / t / 1e12, bytes / t / 1e9);
    be->ops->weight_destroy(be, w);
    be->ops->free(be, x);
    be->ops->free(be, out);
}

/* The first call of a GEMM shape against a repeated one: the first builds
 * the shape's cuBLASLt plan (the algorithm heuristic), which graph capture
 * pays once for every shape of every captured batch size. */
static void bench_first_call(const char *name, int n, int rows, int cols)
{
    nl_weight *w;
    if (be->ops->weight_create(be, rows, cols, &w) != NL_OK) die("weight");
    void *x = dev_alloc((size_t)n * cols * 2), *out = dev_alloc((size_t)n * rows * 2);
    if (be->ops->synchronize(be) != NL_OK) die("sync");
    double t0 = now();
    if (be->ops->linear(be, out, x, w, NULL, n) != NL_OK || be->ops->synchronize(be) != NL_OK)
        die("linear");
    double first = now() - t0;
    t0 = now();
    if (be->ops->linear(be, out, x, w, NULL, n) != NL_OK || be->ops->synchronize(be) != NL_OK)
        die("linear");
    double again = now() - t0;
    printf("| %s first call | n %d, [%d x %d] | %.1f us | again %.1f us |\n", name, n, rows, cols,
           first * 1e6, again * 1e6);
    be->ops->weight_destroy(be, w);
    be->ops->free(be, x);
    be->ops->free(be, out);
}

static void bench_sample(int m, int vocab, float temperature, int top_k, float top_p, int n_logprobs)
{
    float *h = malloc((size_t)m * vocab * 4);
    for (size_t i = 0; i < (size_t)m * vocab; i++) h[i] = (float)(rand() % 20000) / 1000.0f;
    void *logits, *rows, *ids, *lps, *tids, *tlps;
    be->ops->alloc(be, (size_t)m * vocab * 4, &logits);
    be->ops->upload(be, logits, h, (size_t)m * vocab * 4);
    nl_sample_row *r = calloc(m, sizeof *r);
    for (int i = 0; i < m; i++) {
        r[i].temperature = temperature;
        r[i].top_k = top_k;
        r[i].top_p = top_p;
        r[i].seed = i;
        r[i].n_logprobs = n_logprobs;
    }
    be->ops->alloc(be, m * sizeof *r, &rows);
    be->ops->upload(be, rows, r, m * sizeof *r);
    be->ops->alloc(be, m * 4, &ids);
    be->ops->alloc(be, m * 4, &lps);
    be->ops->alloc(be, (size_t)m * NL_MAX_LOGPROBS * 4, &tids);
    be->ops->alloc(be, (size_t)m * NL_MAX_LOGPROBS * 4, &tlps);
    double t = TIME(be->ops->sample(be, logits, m, vocab, rows, ids, lps, tids, tlps));
    printf("| sample | m %d, vocab %d, T %.1f top_k %d top_p %.2f, %d logprobs | %.1f us | %.0f GB/s "
           "logits |\n", m, vocab, temperature, top_k, top_p, n_logprobs, t * 1e6,
           4.0 * m * vocab / t / 1e9);
    be->ops->free(be, logits);
    be->ops->free(be, rows);
    be->ops->free(be, ids);
    be->ops->free(be, lps);
    be->ops->free(be, tids);
    be->ops->free(be, tlps);
    free(h);
    free(r);
}

int main(int argc, char **argv)
{
    if (argc > 1) iters = atoi(argv[1]);
    if (nl_cuda_device_count() == 0) {
        fprintf(stderr, "bench_cuda_ops: no CUDA device\n");
        return 77;
    }
    if (nl_backend_cuda_create(0, &be) != NL_OK) die("backend");
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows survive a timeout */
    decode_spread = getenv("NL_DECODE_SPREAD") && strcmp(getenv("NL_DECODE_SPREAD"), "0") != 0;
    printf("| op | shape | time | rate |\n| --- | --- | --- | --- |\n");
    bool only_sample = argc > 2 && strcmp(argv[2], "sample") == 0;
    if (argc > 2 && strcmp(argv[2], "gemv") == 0) {
        /* batch-1 linear shapes of Qwen3-0.6B and Qwen3-8B (NANOLLM_GEMV=0:
         * cuBLASLt) */
        bench_gemm("0.6B qkv", 1, 4096, 1024, false);
        bench_gemm("0.6B o_proj", 1, 1024, 2048, false);
        bench_gemm("0.6B gate_up", 1, 6144, 1024, false);
        bench_gemm("0.6B down", 1, 1024, 3072, false);
        bench_gemm("0.6B lm_head", 1, 151936, 1024, true);
        bench_gemm("8B qkv", 1, 6144, 4096, false);
        bench_gemm("8B gate_up", 1, 24576, 4096, false);
        bench_gemm("8B down", 1, 4096, 12288, false);
        bench_gemm("0.6B gate_up", 4, 6144, 1024, false);
        bench_gemm("8B gate_up", 4, 24576, 4096, false);
        nl_backend_destroy(be);
        return 0;
    }
    if (only_sample) goto sample;
    if (argc > 2 && strcmp(argv[2], "plans") == 0) {
        /* the GEMM shapes of Qwen3-0.6B's decode graphs at a few batch sizes */
        int sizes[] = {16, 64, 128, 256, 512};
        for (int i = 0; i < 5; i++) {
            bench_first_call("0.6B qkv", sizes[i], 4096, 1024);
            bench_first_call("0.6B o_proj", sizes[i], 1024, 2048);
            bench_first_call("0.6B gate_up", sizes[i], 6144, 1024);
            bench_first_call("0.6B down", sizes[i], 1024, 3072);
        }
        nl_backend_destroy(be);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "stride") == 0) {
        /* the cache is [block, slot, kv head, dim]: with one kv head a
         * block's rows are contiguous, with 8 they are 8 heads apart */
        nl_dtype kv[] = {NL_DTYPE_F8_E4M3, NL_DTYPE_BF16};
        for (int i = 0; i < 2; i++) {
            bench_decode_kv(256, 1000, 16, 8, 128, 16, 0, kv[i]);
            bench_decode_kv(2048, 1000, 2, 1, 128, 16, 0, kv[i]);
            bench_decode_kv(64, 1000, 16, 8, 128, 16, 0, kv[i]);
            bench_decode_kv(512, 1000, 2, 1, 128, 16, 0, kv[i]);
        }
        nl_backend_destroy(be);
        return 0;
    }
    if (argc > 2 && strcmp(argv[2], "decode") == 0) {
        /* the throughput benchmark's decode batches, Qwen3-0.6B heads, from
         * its start (256 seqs) to its tail, eager and under a graph's host
         * maximum; with NL_DECODE_SPREAD=1 their contexts spread as there */
        int seqs[] = {256, 128, 64, 32, 16, 4, 1};
        for (int i = 0; i < 7; i++) bench_decode(seqs[i], 1000, 16, 8, 128, 16, 0);
        for (int i = 2; i < 7; i++) bench_decode(seqs[i], 1000, 16, 8, 128, 16, 40960);
        bench_decode(1, 400, 16, 8, 128, 16, 40960);
        bench_decode_kv(256, 1000, 16, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
        bench_decode_kv(64, 1000, 16, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
        /* Qwen3-8B's heads (groups of 4) */
        bench_decode(128, 1000, 32, 8, 128, 16, 0);
        bench_decode_kv(128, 1000, 32, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
        nl_backend_destroy(be);
        return 0;
    }
    /* Small batches of the throughput benchmark's tail under a graph
     * captured at max_model_len 40960 (Qwen3-0.6B heads). */
    bench_decode(8, 1000, 16, 8, 128, 16, 40960);
    bench_decode(16, 1000, 16, 8, 128, 16, 40960);
    bench_decode(32, 1000, 16, 8, 128, 16, 40960);
    bench_decode(64, 1000, 16, 8, 128, 16, 40960);
    bench_decode(1, 1000, 16, 8, 128, 16, 40960);
    if (argc > 2 && strcmp(argv[2], "graph") == 0) {
        nl_backend_destroy(be);
        return 0;
    }
    bench_decode(1, 8192, 32, 8, 128, 16, 0);
    bench_decode(64, 1024, 32, 8, 128, 16, 0);
    bench_decode(256, 1024, 32, 8, 128, 16, 0);
    bench_decode(64, 4096, 32, 8, 128, 16, 0);
    bench_decode(128, 2048, 16, 8, 128, 16, 0);
    /* Qwen3-0.6B decode shapes of the throughput benchmark */
    bench_decode(256, 1000, 16, 8, 128, 16, 0);
    bench_decode(64, 2000, 16, 8, 128, 16, 0);
    bench_decode(16, 1000, 16, 8, 128, 16, 0);
    bench_decode(1, 2000, 16, 8, 128, 16, 0);
    bench_decode(256, 1000, 16, 8, 128, 16, 4096);
    bench_decode(64, 1024, 14, 2, 64, 16, 0);
    /* other head dims: the demo model (4/2 x 32), 80, 96, 256 */
    bench_decode(64, 1024, 4, 2, 32, 16, 0);
    bench_decode(64, 1024, 32, 8, 80, 16, 0);
    bench_decode(64, 1024, 16, 4, 96, 16, 0);
    bench_decode(64, 1024, 16, 4, 256, 16, 0);
    bench_decode_kv(256, 1000, 16, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
    bench_decode_kv(64, 2000, 16, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
    bench_decode_kv(1, 2000, 16, 8, 128, 16, 0, NL_DTYPE_F8_E4M3);
    bench_prefill(1, 4096, 32, 8, 128, 16);
    bench_prefill(8, 512, 32, 8, 128, 16);
    bench_prefill(4, 1024, 16, 8, 128, 16);
    bench_prefill(1, 4096, 14, 2, 64, 16);
    bench_prefill(4, 1024, 4, 2, 32, 16);
    bench_prefill(4, 1024, 32, 8, 80, 16);
    bench_prefill(4, 1024, 16, 4, 96, 16);
    bench_prefill(4, 1024, 16, 4, 256, 16);
    if (argc > 2 && strcmp(argv[2], "attention") == 0) {
        nl_backend_destroy(be);
        return 0;
    }
    bench_gemm("linear qkv", 1, 6144, 4096, false);
    bench_gemm("linear qkv", 64, 6144, 4096, false);
    bench_gemm("linear qkv", 4096, 6144, 4096, false);
    bench_gemm("linear gate_up", 256, 24576, 4096, false);
    bench_gemm("linear down", 256, 4096, 12288, false);
    bench_gemm("linear_f32 lm_head", 64, 151936, 4096, true);
sample:
    bench_sample(64, 151936, 0.0f, 0, 1.0f, 5);
    bench_sample(64, 151936, 1.0f, 0, 1.0f, 5);
    bench_sample(64, 151936, 0.7f, 50, 0.9f, 5);
    /* the throughput benchmark's rows: uncut, no logprobs */
    bench_sample(256, 151936, 0.6f, 0, 1.0f, 0);
    bench_sample(64, 151936, 0.6f, 0, 1.0f, 0);
    bench_sample(8, 151936, 0.6f, 0, 1.0f, 0);
    bench_sample(256, 151936, 0.0f, 0, 1.0f, 0);
    bench_sample(256, 151936, 0.6f, 50, 0.9f, 0);
    /* one sequence: cuts and logprobs from the row's head, and top_p over
     * a flat row (logits uniform over 20: at T 0.7 its mass needs ~12k
     * tokens, more than a head holds), which takes the radix search */
    bench_sample(1, 151936, 0.6f, 0, 1.0f, 0);
    bench_sample(1, 151936, 0.7f, 50, 0.9f, 0);
    bench_sample(1, 151936, 0.0f, 0, 1.0f, 5);
    bench_sample(1, 151936, 0.2f, 0, 0.9f, 0);
    bench_sample(1, 151936, 0.7f, 0, 0.9f, 0);
    bench_sample(64, 151936, 0.2f, 0, 0.9f, 0);
    nl_backend_destroy(be);
    return 0;
}
