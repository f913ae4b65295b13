/* fuzz_config.c — config.json text from arbitrary bytes: parsed, checked
 * field by field, and written back and re-read when accepted. */
#include <stdlib.h>
#include <string.h>

#include "common/model_config.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    nl_model_config cfg, again;
    if (model_config_parse(text, "fuzz", &cfg) == NL_OK) {
        /* what was accepted must survive its own round trip */
        if (model_config_save(&cfg, fuzz_dir()) != NL_OK) __builtin_trap();
        if (model_config_load(fuzz_dir(), &again) != NL_OK) __builtin_trap();
        if (again.hidden_size != cfg.hidden_size || again.num_hidden_layers != cfg.num_hidden_layers)
            __builtin_trap();
    }
    free(text);
    return 0;
}
