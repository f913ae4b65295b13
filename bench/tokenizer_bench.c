/* tokenizer_bench.c — single-threaded encode speed on a text file.
 *
 * Usage: tokenizer_bench TEXT_FILE [TOKENIZER_DIR]
 * Encodes the whole text in one call, then line by line (each line keeps its
 * "\n"), each mode on a freshly loaded tokenizer: the first run has a cold
 * word cache, the best of the next runs a warm one.  Prints MB/s and a
 * checksum of the ids (sum of (position + 1) * id, mod 2^64) that
 * tests/golden/tokenizer_bench_hf.py prints for Hugging Face on the same text,
 * so the speed comparison doubles as a parity check on a large input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/tokenizer/tokenizer.h"
#include "leader/tokenizer/tokenizer_internal.h"

#define RUNS 4

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct result {
    size_t n_ids;
    unsigned long long checksum;
} result;

static void add_ids(result *r, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) r->checksum += (unsigned long long)(r->n_ids + i + 1) * (unsigned long long)ids[i];
    r->n_ids += n;
}

static int encode_all(tokenizer *t, const char *text, size_t len, bool by_line, result *r)
{
    size_t start = 0;
    while (start < len) {
        size_t end = len;
        if (by_line) {
            const char *nl = memchr(text + start, '\n', len - start);
            if (nl) end = (size_t)(nl - text) + 1;
        }
        int32_t *ids;
        size_t n;
        /* as the Hugging Face side: add_special_tokens=False */
        if (tokenizer_encode_ex(t, text + start, end - start, true, false, &ids, &n) != NL_OK) {
            fprintf(stderr, "tokenizer_bench: %s\n", nl_last_error());
            return 1;
        }
        add_ids(r, ids, n);
        free(ids);
        start = end;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tokenizer_bench TEXT_FILE [TOKENIZER_DIR]\n");
        return 2;
    }
    char dir[4096];
    if (argc > 2) snprintf(dir, sizeof dir, "%s", argv[2]);
    else if (getenv("NANOLLM_TOKENIZER_DIR")) snprintf(dir, sizeof dir, "%s", getenv("NANOLLM_TOKENIZER_DIR"));
    else snprintf(dir, sizeof dir, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME"));

    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "tokenizer_bench: cannot read %s\n", argv[1]);
        return 1;
    }
    fclose(f);
    double mb = (double)size / 1e6;
    printf("text: %s, %.2f MB\n", argv[1], mb);

    for (int by_line = 0; by_line <= 1; by_line++) {
        tokenizer *t;
        double t0 = now();
        if (tokenizer_load(dir, &t) != NL_OK) {
            fprintf(stderr, "tokenizer_bench: %s\n", nl_last_error());
            return 1;
        }
        double load_s = now() - t0, first = 0, best = 1e30;
        result r0 = {0};
        for (int run = 0; run < RUNS; run++) {
            result r = {0};
            t0 = now();
            if (encode_all(t, text, (size_t)size, by_line, &r)) return 1;
            double s = now() - t0;
            if (run == 0) first = s, r0 = r;
            else if (s < best) best = s;
        }
        printf("nanollm %-5s load %.3f s | cold %.2f MB/s | warm %.2f MB/s | ids %zu checksum %llu\n",
               by_line ? "lines" : "whole", load_s, mb / first, mb / best, r0.n_ids, r0.checksum);
        tokenizer_destroy(t);
    }
    free(text);
    return 0;
}
