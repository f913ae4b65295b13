/* tokenizer_handle.c — nanollm.h's tokenizer without an engine.
 *
 * A thin public face over the tokenizer module: it owns the handle, the
 * flags and where a NULL directory leads (the demo model's tokenizer, as
 * demo_model.h resolves it).  Encoding and decoding themselves are
 * tokenizer.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "leader/modelgen/demo_model.h"
#include "leader/tokenizer/tokenizer.h"
#include "nanollm.h"

struct nl_tokenizer {
    tokenizer *tok;
    char *dir;
};

nl_status nl_tokenizer_open(const char *dir, nl_tokenizer **out)
{
    if (!out) return nl_error(NL_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    char demo_dir[4096];
    if (!dir) {
        NL_TRY(demo_model_tokenizer_dir(demo_dir, sizeof demo_dir));
        dir = demo_dir;
    }
    nl_tokenizer *h = calloc(1, sizeof *h);
    if (h) h->dir = strdup(dir);
    if (!h || !h->dir) {
        free(h);
        return nl_error(NL_ERR_NOMEM, "tokenizer: no memory");
    }
    nl_status st = tokenizer_load(dir, &h->tok);
    if (st != NL_OK) {
        free(h->dir);
        free(h);
        return st;
    }
    *out = h;
    return NL_OK;
}

void nl_tokenizer_close(nl_tokenizer *h)
{
    if (!h) return;
    tokenizer_destroy(h->tok);
    free(h->dir);
    free(h);
}

void nl_tokenizer_get_info(const nl_tokenizer *h, nl_tokenizer_info *info)
{
    info->vocab_size = tokenizer_vocab_size(h->tok);
    info->dir = h->dir;
}

nl_status nl_tokenizer_encode(nl_tokenizer *h, const char *text, size_t len, uint32_t flags,
                              int32_t **ids, size_t *n_ids)
{
    if (!ids || !n_ids) return nl_error(NL_ERR_INVALID_ARG, "encode: ids or n_ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!h || (!text && len > 0)) return nl_error(NL_ERR_INVALID_ARG, "encode: tokenizer or text is NULL");
    return tokenizer_encode_flags(h->tok, text ? text : "", len, flags, ids, n_ids);
}

nl_status nl_tokenizer_decode(const nl_tokenizer *h, const int32_t *ids, size_t n_ids, bool skip_special,
                              char **text, size_t *len)
{
    if (!text || !len) return nl_error(NL_ERR_INVALID_ARG, "decode: text or len is NULL");
    *text = NULL;
    *len = 0;
    if (!h || (!ids && n_ids > 0)) return nl_error(NL_ERR_INVALID_ARG, "decode: tokenizer or ids is NULL");
    return tokenizer_decode_n(h->tok, ids, n_ids, skip_special, text, len);
}

nl_status nl_tokenizer_apply_chat_template(const nl_tokenizer *h, const char *request_json, char **text,
                                           size_t *len)
{
    if (!text || !len) return nl_error(NL_ERR_INVALID_ARG, "chat template: text or len is NULL");
    *text = NULL;
    *len = 0;
    if (!h || !request_json) return nl_error(NL_ERR_INVALID_ARG, "chat template: tokenizer or request is NULL");
    return tokenizer_apply_chat_request(h->tok, request_json, false, text, len);
}
