/* fuzz_shm_attach.c — a worker attaching to a segment whose bytes are
 * arbitrary: attach must refuse every inconsistent header (sizes, offsets,
 * alignment, ring headers) and, when it accepts, reading a message from the
 * command ring must end in a message or an error, never a crash or a hang. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ipc/shm.h"

/* The ring's liveness check: give up at once instead of waiting. */
static nl_status no_wait(void *ctx)
{
    (void)ctx;
    return NL_ERR_WORKER;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the fuzzer's bytes overlay the start of a segment: of the size its
     * header claims when that is plausible (a real segment, as in the seed
     * corpus, is then attached whole), else of a fixed plausible size */
    size_t bytes = sizeof(shm_header) + 3 * 4096 + 2 * 8192;
    uint64_t claimed = 0;
    if (size >= offsetof(shm_header, total_bytes) + sizeof claimed) {
        memcpy(&claimed, data + offsetof(shm_header, total_bytes), sizeof claimed);
        if (claimed >= sizeof(shm_header) && claimed <= ((uint64_t)1 << 20)) bytes = (size_t)claimed;
    }
    int fd = memfd_create("nl-fuzz-shm", 0);
    if (fd < 0) return 0;
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return 0;
    }
    uint8_t *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        close(fd);
        return 0;
    }
    memcpy(mem, data, size < bytes ? size : bytes);
    /* a fuzz input may also scribble on the tail, where rings live */
    if (size > bytes) memcpy(mem + bytes - (size - bytes < bytes ? size - bytes : bytes), data,
                             size - bytes < bytes ? size - bytes : bytes);
    munmap(mem, bytes);
    shm_segment seg;
    if (shm_segment_attach_fd(fd, &seg) == NL_OK) { /* attach took the descriptor */
        ring_buf b = {0};
        /* read only where something claims to be published: an empty ring
         * would wait one slice before asking no_wait */
        for (int rank = 0; rank < seg.hdr->n_ranks && rank < 4; rank++)
            if (atomic_load(&seg.cmd.sh->write_pos) != seg.cmd.read_pos[rank])
                (void)ring_read(&seg.cmd, rank, &b, no_wait, NULL);
        if (atomic_load(&seg.reply.sh->write_pos) != seg.reply.read_pos[0])
            (void)ring_read(&seg.reply, 0, &b, no_wait, NULL);
        ring_buf_free(&b);
        shm_segment_close(&seg);
    }
    return 0;
}
