/* tokenizer_utf8.c — UTF-8 checks and lossy rendering (see the header). The
 * ranges below are those of Unicode's table of well-formed byte sequences;
 * following them exactly is what makes "maximal subpart" match Rust's. */
#include "leader/tokenizer/tokenizer_utf8.h"

#include <string.h>

utf8_scan_result utf8_scan(const uint8_t *s, size_t avail, size_t *n)
{
    uint8_t b0 = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (b0 < 0x80) {
        *n = 1;
        return UTF8_SCAN_OK;
    }
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 3;
        if (b0 == 0xE0) lo = 0xA0;      /* no overlong forms   */
        if (b0 == 0xED) hi = 0x9F;      /* no surrogates       */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 4;
        if (b0 == 0xF0) lo = 0x90;      /* no overlong forms   */
        if (b0 == 0xF4) hi = 0x8F;      /* nothing past 10FFFF */
    } else {
        *n = 1;
        return UTF8_SCAN_INVALID;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= avail) {
            *n = i;
            return UTF8_SCAN_TRUNCATED;
        }
        uint8_t b = s[i];
        bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) {
            *n = i;
            return UTF8_SCAN_INVALID;
        }
    }
    *n = need;
    return UTF8_SCAN_OK;
}

bool utf8_validate(const char *s, size_t len, size_t *bad_offset)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) { /* ASCII runs dominate real text */
            i++;
            continue;
        }
        size_t n;
        if (utf8_scan(u + i, len - i, &n) != UTF8_SCAN_OK) {
            *bad_offset = i;
            return false;
        }
        i += n;
    }
    return true;
}

size_t utf8_render_lossy(const uint8_t *s, size_t len, char *out)
{
    size_t i = 0, o = 0;
    while (i < len) {
        size_t n;
        if (utf8_scan(s + i, len - i, &n) == UTF8_SCAN_OK) {
            memcpy(out + o, s + i, n);
            o += n;
        } else {
            memcpy(out + o, UTF8_REPLACEMENT, 3);
            o += 3;
        }
        i += n;
    }
    return o;
}
