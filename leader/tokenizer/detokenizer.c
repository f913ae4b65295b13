/* detokenizer.c — streaming decode: token ids in, complete UTF-8 out.
 *
 * A token may end in the middle of a character (byte-level BPE splits
 * multi-byte characters freely), so the bytes of a character that could
 * still be completed by the next token are held back.  Bytes that can never
 * become valid are rendered as U+FFFD at once, with the same rule as
 * tokenizer_decode, so the concatenated deltas plus the flush equal the
 * decode of the whole sequence.
 */
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/tokenizer/tokenizer.h"
#include "leader/tokenizer/tokenizer_internal.h"
#include "leader/tokenizer/tokenizer_utf8.h"

struct detokenizer {
    const tokenizer *t;
    bool skip_special;
    char *pending;      /* bytes not yet emitted: at most an incomplete character */
    size_t n_pending, pending_cap;
    char *out;          /* the last delta */
    size_t out_cap;
};

nl_status detokenizer_create(const tokenizer *t, bool skip_special, detokenizer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return nl_error(NL_ERR_NOMEM, "detokenizer: no memory");
    (*out)->t = t;
    (*out)->skip_special = skip_special;
    return NL_OK;
}

void detokenizer_destroy(detokenizer *d)
{
    if (!d) return;
    free(d->pending);
    free(d->out);
    free(d);
}

static nl_status reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap) return NL_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *grown = realloc(*buf, c);
    if (!grown) return nl_error(NL_ERR_NOMEM, "detokenizer: no memory for %zu bytes", need);
    *buf = grown;
    *cap = c;
    return NL_OK;
}

nl_status detokenizer_push(detokenizer *d, int32_t id, const char **delta, size_t *len)
{
    *delta = "";
    *len = 0;
    const char *bytes;
    size_t n;
    NL_TRY(tokenizer_token_bytes(d->t, id, d->skip_special, &bytes, &n));
    /* A skipped special token adds nothing, and the held-back bytes are an
     * incomplete character still; before the first bytes, pending is NULL. */
    if (n == 0) return NL_OK;
    NL_TRY(reserve(&d->pending, &d->pending_cap, d->n_pending + n));
    memcpy(d->pending + d->n_pending, bytes, n);
    d->n_pending += n;
    NL_TRY(reserve(&d->out, &d->out_cap, 3 * d->n_pending + 1));

    const uint8_t *p = (const uint8_t *)d->pending;
    size_t i = 0, o = 0;
    while (i < d->n_pending) {
        size_t k;
        utf8_scan_result r = utf8_scan(p + i, d->n_pending - i, &k);
        if (r == UTF8_SCAN_TRUNCATED) break; /* the next token may complete it */
        if (r == UTF8_SCAN_OK) memcpy(d->out + o, p + i, k), o += k;
        else memcpy(d->out + o, UTF8_REPLACEMENT, 3), o += 3;
        i += k;
    }
    memmove(d->pending, d->pending + i, d->n_pending - i);
    d->n_pending -= i;
    d->out[o] = '\0';
    *delta = d->out;
    *len = o;
    return NL_OK;
}

nl_status detokenizer_flush(detokenizer *d, const char **delta, size_t *len)
{
    NL_TRY(reserve(&d->out, &d->out_cap, 3 * d->n_pending + 1));
    size_t o = utf8_render_lossy((const uint8_t *)d->pending, d->n_pending, d->out);
    d->out[o] = '\0';
    d->n_pending = 0;
    *delta = d->out;
    *len = o;
    return NL_OK;
}
