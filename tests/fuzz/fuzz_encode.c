/* fuzz_encode.c — the real Qwen3 tokenizer (NANOLLM_TOKENIZER_DIR, or the
 * cache tools/fetch-tokenizer.sh fills) on arbitrary text: invalid UTF-8 is
 * refused by position, valid text decodes back to itself byte for byte, and
 * arbitrary id sequences decode or are refused without fault. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "leader/tokenizer/tokenizer.h"

static tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    char dir[4096];
    const char *env = getenv("NANOLLM_TOKENIZER_DIR");
    if (env && env[0]) snprintf(dir, sizeof dir, "%s", env);
    else snprintf(dir, sizeof dir, "%s/.cache/nanollm/tokenizer-qwen3", getenv("HOME") ? getenv("HOME") : ".");
    if (tokenizer_load(dir, &tok) != NL_OK) {
        fprintf(stderr, "fuzz_encode: %s\n", nl_last_error());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, (const char *)data, size, &ids, &n) == NL_OK) {
        char *back = NULL;
        if (tokenizer_decode(tok, ids, n, false, &back) != NL_OK) __builtin_trap();
        /* byte-level BPE is lossless on valid UTF-8 (NFC aside: compare
         * only when the text has no byte above 0x7f) */
        bool ascii = true;
        for (size_t i = 0; i < size; i++) ascii &= data[i] < 0x80 && data[i] != 0;
        if (ascii && (strlen(back) != size || memcmp(back, data, size) != 0)) __builtin_trap();
        free(back);
        free(ids);
    }
    /* the same bytes read as token ids */
    size_t n_ids = size / 4;
    int32_t *raw = malloc((n_ids ? n_ids : 1) * sizeof *raw);
    memcpy(raw, data, n_ids * 4);
    char *text = NULL;
    if (tokenizer_decode(tok, raw, n_ids, size & 1, &text) == NL_OK) free(text);
    free(raw);
    return 0;
}
