/* wire.c — serialisation of wire.h's commands and replies.
 *
 * The encoder writes through a cursor into a buffer sized exactly in
 * advance; the decoder reads through a cursor that checks every field and
 * every array against the bytes that remain before touching them, with
 * counts widened to 64 bits so no multiplication can overflow.  Values are
 * validated as well as lengths (counts non-negative, logprob counts within
 * NL_MAX_LOGPROBS, status a known code), so whatever decodes is safe to
 * act on.
 */
#include "ipc/wire.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define WIRE_MAGIC_COMMAND 0x444d434eu /* "NCMD" */
#define WIRE_MAGIC_REPLY 0x4c50524eu   /* "NRPL" */
#define WIRE_HEADER_BYTES 24
#define WIRE_RUN_FIXED 12      /* step_id, n_seqs */
#define WIRE_SEQ_FIXED 60
#define WIRE_REPLY_FIXED 20    /* step_id, status, error_len, n_sampled */
#define WIRE_SAMPLED_FIXED 20

void wire_buf_free(wire_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = buf->cap = 0;
}

static nl_status buf_reserve(wire_buf *buf, size_t n)
{
    if (buf->cap >= n && buf->data) return NL_OK;
    size_t cap = n < 256 ? 256 : n;
    uint8_t *p = realloc(buf->data, cap);
    if (!p) return nl_error(NL_ERR_NOMEM, "wire: no memory for %zu bytes", cap);
    buf->data = p;
    buf->cap = cap;
    return NL_OK;
}

/* ---- encoding ------------------------------------------------------------ */

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
    return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    p = put_u32(p, (uint32_t)v);
    return put_u32(p, (uint32_t)(v >> 32));
}

static uint8_t *put_i32(uint8_t *p, int32_t v)
{
    return put_u32(p, (uint32_t)v);
}

static uint8_t *put_f32(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return put_u32(p, u);
}

static uint8_t *put_header(uint8_t *p, uint32_t magic, uint32_t kind, uint64_t total)
{
    p = put_u32(p, magic);
    p = put_u32(p, WIRE_VERSION);
    p = put_u32(p, kind);
    p = put_u32(p, 0);
    return put_u64(p, total);
}

size_t wire_run_size(const wire_run *cmd)
{
    if (cmd->n_seqs < 0 || (cmd->n_seqs > 0 && !cmd->seqs)) return 0;
    size_t n = WIRE_HEADER_BYTES + WIRE_RUN_FIXED;
    for (int32_t i = 0; i < cmd->n_seqs; i++) {
        const wire_seq *s = &cmd->seqs[i];
        if (s->num_new < 0 || s->n_blocks < 0) return 0;
        n += WIRE_SEQ_FIXED + 4 * ((size_t)s->num_new + (size_t)s->n_blocks);
    }
    return n;
}

static nl_status check_seq_for_encode(const wire_seq *s, int32_t i)
{
    if (s->num_computed < 0 || s->num_new < 0 || s->n_blocks < 0)
        return nl_error(NL_ERR_INVALID_ARG,
                        "wire: seq %d (id %llu): num_computed %d, num_new %d, n_blocks %d must be >= 0",
                        i, (unsigned long long)s->seq_id, s->num_computed, s->num_new, s->n_blocks);
    if ((s->num_new > 0 && !s->tokens) || (s->n_blocks > 0 && !s->block_table))
        return nl_error(NL_ERR_INVALID_ARG, "wire: seq %d (id %llu): missing tokens or block table",
                        i, (unsigned long long)s->seq_id);
    if (s->sample != 0 && s->sample != 1)
        return nl_error(NL_ERR_INVALID_ARG, "wire: seq %d: sample = %d, expected 0 or 1", i, s->sample);
    if (s->sampling.n_logprobs < 0 || s->sampling.n_logprobs > NL_MAX_LOGPROBS)
        return nl_error(NL_ERR_INVALID_ARG, "wire: seq %d: n_logprobs = %d, limit %d", i,
                        s->sampling.n_logprobs, NL_MAX_LOGPROBS);
    return NL_OK;
}

nl_status wire_encode_run(const wire_run *cmd, wire_buf *out)
{
    if (cmd->kind != WIRE_RUN && cmd->kind != WIRE_SHUTDOWN)
        return nl_error(NL_ERR_INVALID_ARG, "wire: unknown command kind %d", (int)cmd->kind);
    if (cmd->n_seqs < 0 || (cmd->n_seqs > 0 && !cmd->seqs))
        return nl_error(NL_ERR_INVALID_ARG, "wire: n_seqs = %d with seqs %p", cmd->n_seqs,
                        (void *)cmd->seqs);
    if (cmd->kind == WIRE_SHUTDOWN && cmd->n_seqs != 0)
        return nl_error(NL_ERR_INVALID_ARG, "wire: SHUTDOWN carries %d seqs, expected 0", cmd->n_seqs);
    for (int32_t i = 0; i < cmd->n_seqs; i++) NL_TRY(check_seq_for_encode(&cmd->seqs[i], i));

    size_t total = wire_run_size(cmd);
    NL_TRY(buf_reserve(out, total));
    uint8_t *p = put_header(out->data, WIRE_MAGIC_COMMAND, (uint32_t)cmd->kind, total);
    p = put_u64(p, cmd->step_id);
    p = put_u32(p, (uint32_t)cmd->n_seqs);
    for (int32_t i = 0; i < cmd->n_seqs; i++) {
        const wire_seq *s = &cmd->seqs[i];
        p = put_u64(p, s->seq_id);
        p = put_i32(p, s->num_computed);
        p = put_i32(p, s->num_new);
        p = put_i32(p, s->n_blocks);
        p = put_i32(p, s->sample);
        p = put_f32(p, s->sampling.temperature);
        p = put_f32(p, s->sampling.top_p);
        p = put_f32(p, s->sampling.min_p);
        p = put_i32(p, s->sampling.top_k);
        p = put_i32(p, s->sampling.n_logprobs);
        p = put_u64(p, s->sampling.seed);
        p = put_u64(p, s->sampling.offset);
        for (int32_t k = 0; k < s->num_new; k++) p = put_i32(p, s->tokens[k]);
        for (int32_t k = 0; k < s->n_blocks; k++) p = put_i32(p, s->block_table[k]);
    }
    out->len = (size_t)(p - out->data);
    return NL_OK;
}

nl_status wire_encode_reply(const wire_reply *reply, wire_buf *out)
{
    if (reply->n_sampled < 0 || (reply->n_sampled > 0 && !reply->sampled))
        return nl_error(NL_ERR_INVALID_ARG, "wire: reply n_sampled = %d", reply->n_sampled);
    size_t err_len = reply->status != NL_OK ? strnlen(reply->error, sizeof reply->error - 1) : 0;
    size_t total = WIRE_HEADER_BYTES + WIRE_REPLY_FIXED + err_len;
    for (int32_t i = 0; i < reply->n_sampled; i++) {
        int32_t n_top = reply->sampled[i].n_top;
        if (n_top < 0 || n_top > NL_MAX_LOGPROBS)
            return nl_error(NL_ERR_INVALID_ARG, "wire: reply entry %d: n_top = %d, limit %d", i,
                            n_top, NL_MAX_LOGPROBS);
        total += WIRE_SAMPLED_FIXED + 8 * (size_t)n_top;
    }
    NL_TRY(buf_reserve(out, total));
    uint8_t *p = put_header(out->data, WIRE_MAGIC_REPLY, 0, total);
    p = put_u64(p, reply->step_id);
    p = put_i32(p, reply->status);
    p = put_u32(p, (uint32_t)err_len);
    memcpy(p, reply->error, err_len);
    p += err_len;
    p = put_u32(p, (uint32_t)reply->n_sampled);
    for (int32_t i = 0; i < reply->n_sampled; i++) {
        const wire_sampled *s = &reply->sampled[i];
        p = put_u64(p, s->seq_id);
        p = put_i32(p, s->token_id);
        p = put_f32(p, s->logprob);
        p = put_u32(p, (uint32_t)s->n_top);
        for (int32_t k = 0; k < s->n_top; k++) p = put_i32(p, s->top_ids[k]);
        for (int32_t k = 0; k < s->n_top; k++) p = put_f32(p, s->top_logprobs[k]);
    }
    out->len = (size_t)(p - out->data);
    return NL_OK;
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static uint32_t get_u32(cursor *c)
{
    const uint8_t *p = c->p;
    c->p += 4;
    c->left -= 4;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(cursor *c)
{
    uint64_t lo = get_u32(c);
    return lo | (uint64_t)get_u32(c) << 32;
}

static int32_t get_i32(cursor *c)
{
    return (int32_t)get_u32(c);
}

static float get_f32(cursor *c)
{
    uint32_t u = get_u32(c);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Fails unless n more bytes are present; what names the field. */
static nl_status need(const cursor *c, uint64_t n, const char *what, int32_t index)
{
    if (n <= c->left) return NL_OK;
    if (index >= 0)
        return nl_error(NL_ERR_FORMAT, "wire: %s of entry %d needs %llu bytes, %zu left", what,
                        index, (unsigned long long)n, c->left);
    return nl_error(NL_ERR_FORMAT, "wire: %s needs %llu bytes, %zu left", what,
                    (unsigned long long)n, c->left);
}

static nl_status get_header(cursor *c, size_t len, uint32_t magic, uint32_t *kind)
{
    NL_TRY(need(c, WIRE_HEADER_BYTES, "header", -1));
    uint32_t m = get_u32(c);
    if (m != magic)
        return nl_error(NL_ERR_FORMAT, "wire: magic 0x%08x, expected 0x%08x", m, magic);
    uint32_t version = get_u32(c);
    if (version != WIRE_VERSION)
        return nl_error(NL_ERR_FORMAT, "wire: version %u, this build speaks %d", version, WIRE_VERSION);
    *kind = get_u32(c);
    uint32_t reserved = get_u32(c);
    uint64_t total = get_u64(c);
    if (reserved != 0) return nl_error(NL_ERR_FORMAT, "wire: reserved header field = %u", reserved);
    if (total != len)
        return nl_error(NL_ERR_FORMAT, "wire: header says %llu bytes, message has %zu",
                        (unsigned long long)total, len);
    return NL_OK;
}

nl_status wire_decode_run(const void *msg, size_t len, wire_buf *arena, wire_run *out)
{
    cursor c = {.p = msg, .left = len};
    uint32_t kind;
    if (!msg) return nl_error(NL_ERR_INVALID_ARG, "wire: no message");
    NL_TRY(get_header(&c, len, WIRE_MAGIC_COMMAND, &kind));
    if (kind != WIRE_RUN && kind != WIRE_SHUTDOWN)
        return nl_error(NL_ERR_FORMAT, "wire: unknown command kind %u", kind);
    NL_TRY(need(&c, WIRE_RUN_FIXED, "command", -1));
    uint64_t step_id = get_u64(&c);
    uint32_t n_seqs = get_u32(&c);
    if ((uint64_t)n_seqs * WIRE_SEQ_FIXED > c.left)
        return nl_error(NL_ERR_FORMAT, "wire: %u seqs need at least %llu bytes, %zu left", n_seqs,
                        (unsigned long long)n_seqs * WIRE_SEQ_FIXED, c.left);
    if (kind == WIRE_SHUTDOWN && n_seqs != 0)
        return nl_error(NL_ERR_FORMAT, "wire: SHUTDOWN carries %u seqs", n_seqs);

    /* The int arrays together are shorter than the bytes left, so this
     * bound holds whatever the counts say. */
    size_t seq_bytes = (size_t)n_seqs * sizeof(wire_seq);
    NL_TRY(buf_reserve(arena, seq_bytes + c.left + 8));
    wire_seq *seqs = (wire_seq *)arena->data;
    int32_t *ints = (int32_t *)(arena->data + seq_bytes);

    for (uint32_t i = 0; i < n_seqs; i++) {
        wire_seq *s = &seqs[i];
        NL_TRY(need(&c, WIRE_SEQ_FIXED, "seq", (int32_t)i));
        s->seq_id = get_u64(&c);
        s->num_computed = get_i32(&c);
        s->num_new = get_i32(&c);
        s->n_blocks = get_i32(&c);
        s->sample = get_i32(&c);
        s->sampling.temperature = get_f32(&c);
        s->sampling.top_p = get_f32(&c);
        s->sampling.min_p = get_f32(&c);
        s->sampling.top_k = get_i32(&c);
        s->sampling.n_logprobs = get_i32(&c);
        s->sampling.seed = get_u64(&c);
        s->sampling.offset = get_u64(&c);
        if (s->num_computed < 0 || s->num_new < 0 || s->n_blocks < 0)
            return nl_error(NL_ERR_FORMAT,
                            "wire: seq %u: num_computed %d, num_new %d, n_blocks %d must be >= 0", i,
                            s->num_computed, s->num_new, s->n_blocks);
        if (s->sample != 0 && s->sample != 1)
            return nl_error(NL_ERR_FORMAT, "wire: seq %u: sample = %d, expected 0 or 1", i, s->sample);
        if (s->sampling.n_logprobs < 0 || s->sampling.n_logprobs > NL_MAX_LOGPROBS)
            return nl_error(NL_ERR_FORMAT, "wire: seq %u: n_logprobs = %d, limit %d", i,
                            s->sampling.n_logprobs, NL_MAX_LOGPROBS);
        NL_TRY(need(&c, 4 * ((uint64_t)s->num_new + (uint64_t)s->n_blocks), "token and block arrays",
                    (int32_t)i));
        s->tokens = ints;
        for (int32_t k = 0; k < s->num_new; k++) *ints++ = get_i32(&c);
        s->block_table = ints;
        for (int32_t k = 0; k < s->n_blocks; k++) *ints++ = get_i32(&c);
    }
    if (c.left != 0)
        return nl_error(NL_ERR_FORMAT, "wire: %zu bytes after the last seq", c.left);
    out->kind = (wire_kind)kind;
    out->step_id = step_id;
    out->n_seqs = (int32_t)n_seqs;
    out->seqs = n_seqs ? seqs : NULL;
    return NL_OK;
}

nl_status wire_decode_reply(const void *msg, size_t len, wire_buf *arena, wire_reply *out)
{
    cursor c = {.p = msg, .left = len};
    uint32_t kind;
    if (!msg) return nl_error(NL_ERR_INVALID_ARG, "wire: no message");
    NL_TRY(get_header(&c, len, WIRE_MAGIC_REPLY, &kind));
    if (kind != 0) return nl_error(NL_ERR_FORMAT, "wire: reply kind %u, expected 0", kind);
    NL_TRY(need(&c, 16, "reply", -1));
    uint64_t step_id = get_u64(&c);
    int32_t status = get_i32(&c);
    uint32_t err_len = get_u32(&c);
    if (status < NL_OK || status > NL_ERR_NOT_FOUND)
        return nl_error(NL_ERR_FORMAT, "wire: reply status %d is not a known code", status);
    if (err_len >= sizeof out->error)
        return nl_error(NL_ERR_FORMAT, "wire: reply error of %u bytes, limit %zu", err_len,
                        sizeof out->error - 1);
    if (status == NL_OK && err_len != 0)
        return nl_error(NL_ERR_FORMAT, "wire: a successful reply carries %u bytes of error", err_len);
    NL_TRY(need(&c, (uint64_t)err_len + 4, "reply error", -1));
    if (memchr(c.p, '\0', err_len))
        return nl_error(NL_ERR_FORMAT, "wire: reply error contains a NUL byte");
    memcpy(out->error, c.p, err_len);
    out->error[err_len] = '\0';
    c.p += err_len;
    c.left -= err_len;
    uint32_t n = get_u32(&c);
    if ((uint64_t)n * WIRE_SAMPLED_FIXED > c.left)
        return nl_error(NL_ERR_FORMAT, "wire: %u sampled entries need at least %llu bytes, %zu left",
                        n, (unsigned long long)n * WIRE_SAMPLED_FIXED, c.left);
    NL_TRY(buf_reserve(arena, (size_t)n * sizeof(wire_sampled) + 8));
    wire_sampled *sampled = (wire_sampled *)arena->data;
    for (uint32_t i = 0; i < n; i++) {
        wire_sampled *s = &sampled[i];
        NL_TRY(need(&c, WIRE_SAMPLED_FIXED, "sampled", (int32_t)i));
        s->seq_id = get_u64(&c);
        s->token_id = get_i32(&c);
        s->logprob = get_f32(&c);
        uint32_t n_top = get_u32(&c);
        if (n_top > NL_MAX_LOGPROBS)
            return nl_error(NL_ERR_FORMAT, "wire: sampled %u: n_top = %u, limit %d", i, n_top,
                            NL_MAX_LOGPROBS);
        NL_TRY(need(&c, 8 * (uint64_t)n_top, "top logprobs", (int32_t)i));
        s->n_top = (int32_t)n_top;
        for (uint32_t k = 0; k < n_top; k++) s->top_ids[k] = get_i32(&c);
        for (uint32_t k = 0; k < n_top; k++) s->top_logprobs[k] = get_f32(&c);
    }
    if (c.left != 0)
        return nl_error(NL_ERR_FORMAT, "wire: %zu bytes after the last sampled entry", c.left);
    out->step_id = step_id;
    out->status = status;
    if (status == NL_OK) out->error[0] = '\0';
    out->n_sampled = (int32_t)n;
    out->sampled = n ? sampled : NULL;
    return NL_OK;
}

int32_t wire_find_seq(const uint64_t *seq_ids, int32_t n, uint64_t seq_id, int32_t *cursor)
{
    for (int32_t k = 0; k < n; k++) {
        int32_t i = (*cursor + k) % n;
        if (seq_ids[i] != seq_id) continue;
        *cursor = i + 1 < n ? i + 1 : 0;
        return i;
    }
    return -1;
}
