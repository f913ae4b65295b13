/* fuzz_batch_line.c — one line of a batch input file (native or OpenAI
 * format) from arbitrary bytes: the line is parsed into a request or refused
 * with a message (ranges are the engine's to check at submit, where a bad
 * value fails that line alone); either way the output line written for it
 * as a refusal is one valid JSON object ending in a newline, so one bad line
 * can never spoil the output file. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "leader/cli/cli_batch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_sampling defaults;
    cli_sampling_init(&defaults);
    batch_request rq;
    batch_request_parse(&rq, &defaults, (const char *)data, size, 7);
    if (!rq.error && (rq.params.max_tokens < 1 || rq.params.n_stop < 0 || rq.params.n_stop > CLI_MAX_STOP))
        __builtin_trap();
    batch_meta meta = batch_request_take_meta(&rq);
    size_t len = 0;
    char *line = batch_output_line(&meta, 7, NULL, BATCH_REFUSED, rq.error ? rq.error : "refused",
                                   NULL, false, &len);
    if (line) {
        if (len == 0 || line[len - 1] != '\n') __builtin_trap();
        json_error_t err;
        json_t *obj = json_loadb(line, len, 0, &err);
        if (!json_is_object(obj)) __builtin_trap();
        json_decref(obj);
        free(line);
    }
    batch_meta_free(&meta);
    batch_request_free(&rq);
    return 0;
}
