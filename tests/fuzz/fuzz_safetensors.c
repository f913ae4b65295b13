/* fuzz_safetensors.c — a safetensors file, or an index that names shards,
 * from arbitrary bytes: the reader must refuse what is wrong by name and
 * never read outside the mapping.  The first byte picks the form. */
#include <string.h>

#include "common/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    st_model *m = NULL;
    if (data[0] & 1) {
        fuzz_write("model.safetensors", data + 1, size - 1);
        char path[256];
        snprintf(path, sizeof path, "%s/model.safetensors", fuzz_dir());
        if (st_open_file(path, &m) != NL_OK) return 0;
    } else {
        /* an index (up to the first NUL) and one shard after it */
        const uint8_t *nul = memchr(data + 1, 0, size - 1);
        size_t idx_len = nul ? (size_t)(nul - data - 1) : size - 1;
        char dir[256];
        snprintf(dir, sizeof dir, "%s", fuzz_dir());
        unlink(fuzz_write("model.safetensors", data, 0));
        fuzz_write("model.safetensors.index.json", data + 1, idx_len);
        size_t rest = nul ? size - idx_len - 2 : 0;
        fuzz_write("shard-1.safetensors", nul ? nul + 1 : data, rest);
        nl_status st = st_open(dir, &m);
        unlink(fuzz_write("model.safetensors.index.json", data, 0));
        if (st != NL_OK) return 0;
    }
    /* touch every byte the reader vouched for */
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < st_count(m); i++) {
        const st_tensor *t = st_get(m, i);
        if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
        if (st_find(m, t->name) == NULL) __builtin_trap();
    }
    (void)sink;
    st_close(m);
    return 0;
}
