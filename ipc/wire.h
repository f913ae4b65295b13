/* wire.h — the commands the leader sends its workers, and rank 0's replies.
 *
 * These are the decoded, in-memory forms.  wire.c serialises them into a
 * versioned, length-prefixed byte format for the rings and decodes that
 * format defensively: every count and length is checked against the bytes
 * present, so arbitrary input never crashes the decoder.
 */
#ifndef NL_IPC_WIRE_H
#define NL_IPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/limits.h"
#include "common/sampling.h"
#include "common/status.h"

#define WIRE_VERSION 1

typedef enum wire_kind {
    WIRE_RUN = 1,
    WIRE_SHUTDOWN = 2,
} wire_kind;

/* A token id that stands for the token the previous RUN sampled for the
 * same seq: the leader sends a step before it has read the reply of the
 * one before (async scheduling), so a decoding seq's input may not be known
 * to it yet.  Only a seq's single new token may be one, and only when the
 * previous RUN sampled that seq; every rank takes it on its device from
 * the ids it sampled in that RUN (worker/model_runner.h). */
#define WIRE_TOKEN_PREVIOUS (-1)

/* One sequence's share of a step. */
typedef struct wire_seq {
    uint64_t seq_id;
    int32_t num_computed;  /* tokens of this seq already in the KV cache     */
    int32_t num_new;       /* tokens to compute now: tokens[num_new]         */
    int32_t n_blocks;      /* block_table[n_blocks], covering all positions  */
    int32_t sample;        /* 1: sample a token after this chunk             */
    nl_sample_row sampling; /* used when sample == 1; offset = tokens generated so far */
    const int32_t *tokens;
    const int32_t *block_table;
} wire_seq;

typedef struct wire_run {
    wire_kind kind;
    uint64_t step_id;
    int32_t n_seqs;
    wire_seq *seqs;
} wire_run;

typedef struct wire_sampled {
    uint64_t seq_id;
    int32_t token_id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[NL_MAX_LOGPROBS];
    float top_logprobs[NL_MAX_LOGPROBS];
} wire_sampled;

/* Rank 0's answer to a RUN: one entry per seq with sample == 1, in the
 * order of the command.  status != NL_OK carries a message in error. */
typedef struct wire_reply {
    uint64_t step_id;
    int32_t status;
    char error[512];
    int32_t n_sampled;
    wire_sampled *sampled;
} wire_reply;

/* The index of seq_id in seq_ids[n] (a step's seqs, in command order), or
 * -1.  The search starts at *cursor and leaves it past the match:
 * consecutive steps list their seqs in much the same order, so looking up
 * each seq of the next step in turn costs O(1) a seq. */
int32_t wire_find_seq(const uint64_t *seq_ids, int32_t n, uint64_t seq_id, int32_t *cursor);

/* ---- serialisation ------------------------------------------------------
 *
 * Byte format, all fields little-endian and fixed width:
 *   header  u32 magic ("NCMD" command, "NRPL" reply), u32 version,
 *           u32 kind, u32 reserved (0), u64 total length incl. header
 *   command u64 step_id, u32 n_seqs, then per seq:
 *           u64 seq_id, i32 num_computed, num_new, n_blocks, sample,
 *           f32 temperature, top_p, min_p, i32 top_k, n_logprobs,
 *           u64 seed, offset (nl_sample_row), i32 tokens[num_new],
 *           i32 block_table[n_blocks]
 *   reply   u64 step_id, i32 status, u32 error_len, error bytes,
 *           u32 n_sampled, then per entry: u64 seq_id, i32 token_id,
 *           f32 logprob, u32 n_top, i32 top_ids[n_top],
 *           f32 top_logprobs[n_top]
 * Decoding copies into an arena the caller owns, so decoded pointers stay
 * valid until the arena is reused or freed.
 */

/* A growable byte buffer: encode output, or decode arena. */
typedef struct wire_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} wire_buf;

void wire_buf_free(wire_buf *buf);

/* Encoded size of cmd, or 0 when a count in it is invalid. */
size_t wire_run_size(const wire_run *cmd);

/* Serialises cmd (RUN or SHUTDOWN) into out (out->len = its size). */
nl_status wire_encode_run(const wire_run *cmd, wire_buf *out);

/* Parses msg[len]; out->seqs and their arrays point into arena. */
nl_status wire_decode_run(const void *msg, size_t len, wire_buf *arena, wire_run *out);

/* Serialises reply (its error string only when status != NL_OK). */
nl_status wire_encode_reply(const wire_reply *reply, wire_buf *out);

/* Parses msg[len]; out->sampled points into arena. */
nl_status wire_decode_reply(const void *msg, size_t len, wire_buf *arena, wire_reply *out);

#endif
