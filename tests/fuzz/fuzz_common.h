/* fuzz_common.h — helpers the libFuzzer harnesses share: a private scratch
 * folder per process, and writing the fuzzer's bytes to a file in it (the
 * readers under test take paths, as they do in the engine). */
#ifndef NL_FUZZ_COMMON_H
#define NL_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *fuzz_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/nl-fuzz-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

/* Writes data[size] to DIR/name and returns the path (static storage). */
static const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    return path;
}

#endif
