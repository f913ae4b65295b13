/* tokenizer_utf8.h — UTF-8 validation and the lossy rendering that Hugging
 * Face decoding uses (Rust's String::from_utf8_lossy: each maximal invalid
 * subpart becomes one U+FFFD).  Shared by the encoder (input checks), the
 * decoder and the streaming detokenizer so that all three agree byte for byte.
 */
#ifndef NL_LEADER_TOKENIZER_UTF8_H
#define NL_LEADER_TOKENIZER_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

typedef enum utf8_scan_result {
    UTF8_SCAN_OK,        /* a complete, valid character                       */
    UTF8_SCAN_INVALID,   /* a maximal invalid subpart: one U+FFFD             */
    UTF8_SCAN_TRUNCATED, /* a valid prefix cut off by the end of the buffer   */
} utf8_scan_result;

/* Classifies the sequence at s (avail > 0 bytes); *n is its length. */
utf8_scan_result utf8_scan(const uint8_t *s, size_t avail, size_t *n);

/* True when s is valid UTF-8; otherwise *bad_offset is the first bad byte. */
bool utf8_validate(const char *s, size_t len, size_t *bad_offset);

/* Writes the lossy rendering of s into out (room for 3 * len bytes, since
 * one byte can become U+FFFD) and returns its length. */
size_t utf8_render_lossy(const uint8_t *s, size_t len, char *out);

#endif /* NL_LEADER_TOKENIZER_UTF8_H */
