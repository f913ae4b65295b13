/* byte_tokenizer.h — writes the smallest byte-level tokenizer.json: one id
 * per byte (GPT-2's alphabet: printable Latin-1 bytes stand for themselves,
 * the others take the code points 256.. in order), no merges, so any byte
 * string, U+0000 included, has exactly one encoding. */
#ifndef NL_TESTS_BYTE_TOKENIZER_H
#define NL_TESTS_BYTE_TOKENIZER_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>

/* added_tokens: the JSON array of the file's added tokens. */
static inline void write_byte_tokenizer(const char *path, const char *added_tokens)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"added_tokens\": %s, \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\"},"
               " \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {",
            added_tokens);
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        fprintf(f, "%s\"\\u%04x\": %d", b ? ", " : "", printable ? b : next++, b);
    }
    fputs("}}}", f);
    ck_assert_int_eq(fclose(f), 0);
}

#endif
