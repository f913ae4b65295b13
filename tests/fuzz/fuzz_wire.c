/* fuzz_wire.c — the wire format from arbitrary bytes: a decoded command or
 * reply must re-encode to the same bytes, and nothing may be read past the
 * message.  The first byte picks command or reply. */
#include <stdlib.h>
#include <string.h>

#include "ipc/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    /* a private copy of exactly the message, so reads past it are caught */
    size_t len = size - 1;
    uint8_t *msg = malloc(len ? len : 1);
    if (!msg) return 0;
    memcpy(msg, data + 1, len);
    wire_buf arena = {0}, enc = {0};
    if (data[0] & 1) {
        wire_run run;
        if (wire_decode_run(msg, len, &arena, &run) == NL_OK) {
            if (wire_encode_run(&run, &enc) != NL_OK) __builtin_trap();
            if (enc.len != len || memcmp(enc.data, msg, len) != 0) __builtin_trap();
        }
    } else {
        wire_reply reply;
        if (wire_decode_reply(msg, len, &arena, &reply) == NL_OK) {
            if (wire_encode_reply(&reply, &enc) != NL_OK) __builtin_trap();
        }
    }
    wire_buf_free(&arena);
    wire_buf_free(&enc);
    free(msg);
    return 0;
}
