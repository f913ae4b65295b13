/* make_shm_seed.c — writes a real shared segment, as the leader formats it,
 * for fuzz_shm_attach's seed corpus: two ranks, a RUN in the command ring
 * whose decoding seqs take their token from the step before (placeholders)
 * and a reply in the reply ring.  Mutations of it reach past attach's
 * header checks into the rings, which a corpus of zeros never does.
 *   make_shm_seed OUT
 * Built from the source tree with the project's ipc and common code, e.g.
 *   cc -std=gnu11 -I. -Iinclude tests/fuzz/make_shm_seed.c ipc/*.c common/*.c \
 *      $(pkg-config --cflags --libs jansson libxxhash) -lm -lpthread
 * its output is committed as corpus/fuzz_shm_attach/segment-v5.bin; make it
 * again whenever the segment's layout (SHM_VERSION) changes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ipc/shm.h"
#include "ipc/wire.h"

static int fail(const char *what)
{
    fprintf(stderr, "make_shm_seed: %s: %s\n", what, nl_last_error());
    return 1;
}

static nl_status never_wait(void *ctx)
{
    (void)ctx;
    return NL_ERR_WORKER;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_shm_seed OUT\n");
        return 2;
    }
    /* small rings, so the whole segment fits a fuzz input */
    shm_layout layout = {.n_ranks = 2, .cmd_capacity = 1024, .reply_capacity = 512, .comm_bytes = 0};
    engine_settings config;
    memset(&config, 0, sizeof config);
    config.tp = 2;
    config.max_num_seqs = 4;
    shm_segment seg;
    if (shm_segment_create(&layout, &config, &seg) != NL_OK) return fail("create");

    /* step 3: seq 21 decodes from step 2's sample, seq 14 from a known token */
    int32_t prev = WIRE_TOKEN_PREVIOUS, known = 42;
    int32_t table[2] = {0, 1};
    wire_seq seqs[2] = {
        {.seq_id = 21, .num_computed = 5, .num_new = 1, .tokens = &prev, .n_blocks = 1,
         .block_table = table, .sample = 1, .sampling = {.temperature = 0.7f, .top_p = 1.0f}},
        {.seq_id = 14, .num_computed = 9, .num_new = 1, .tokens = &known, .n_blocks = 2,
         .block_table = table, .sample = 1, .sampling = {.top_p = 1.0f}},
    };
    wire_run cmd = {.kind = WIRE_RUN, .step_id = 3, .n_seqs = 2, .seqs = seqs};
    wire_buf buf = {0};
    if (wire_encode_run(&cmd, &buf) != NL_OK) return fail("encode run");
    if (ring_write(&seg.cmd, buf.data, buf.len, never_wait, NULL) != NL_OK) return fail("write run");

    wire_sampled sampled[2] = {{.seq_id = 21, .token_id = 7, .logprob = -0.5f},
                               {.seq_id = 14, .token_id = 8, .logprob = -1.5f}};
    wire_reply reply = {.step_id = 2, .status = NL_OK, .n_sampled = 2, .sampled = sampled};
    buf.len = 0;
    if (wire_encode_reply(&reply, &buf) != NL_OK) return fail("encode reply");
    if (ring_write(&seg.reply, buf.data, buf.len, never_wait, NULL) != NL_OK) return fail("write reply");
    wire_buf_free(&buf);

    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(seg.base, 1, seg.bytes, f) != seg.bytes || fclose(f) != 0) {
        fprintf(stderr, "make_shm_seed: cannot write %s\n", argv[1]);
        return 1;
    }
    printf("%s: %zu bytes\n", argv[1], seg.bytes);
    shm_segment_close(&seg);
    return 0;
}
