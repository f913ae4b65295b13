/* fuzz_tokenizer_files.c — tokenizer.json and tokenizer_config.json from
 * arbitrary bytes (split at the first NUL): loading must refuse what is
 * wrong by name; a tokenizer that loads must encode and decode a fixed text
 * without fault. */
#include <string.h>

#include "leader/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t a = nul ? (size_t)(nul - data) : size;
    fuzz_write("tokenizer.json", data, a);
    if (nul) fuzz_write("tokenizer_config.json", nul + 1, size - a - 1);
    else unlink(fuzz_write("tokenizer_config.json", data, 0));
    tokenizer *t;
    if (tokenizer_load(fuzz_dir(), &t) != NL_OK) return 0;
    static const char text[] = "Hello, wörld! 123 <|im_start|> \xf0\x9f\x98\x80 tabs\t\tand  spaces\n";
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(t, text, sizeof text - 1, &ids, &n) == NL_OK) {
        char *back = NULL;
        if (tokenizer_decode(t, ids, n, false, &back) == NL_OK) free(back);
        free(ids);
    }
    tokenizer_destroy(t);
    return 0;
}
