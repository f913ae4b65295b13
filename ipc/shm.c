/* shm.c — creating, attaching and removing the engine's segment.
 *
 * The segment is sized once with ftruncate; tmpfs hands out pages only when
 * they are touched, so a generous command ring costs memory only when a
 * step is that large.  Every region starts on a page boundary.
 */
#include "ipc/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/futex.h"

#define SHM_MAGIC 0x4d534c4eu /* "NLSM" */
#define SHM_VERSION 5
#define SHM_ALIGN 4096

static uint64_t align_up(uint64_t n)
{
    return (n + SHM_ALIGN - 1) & ~(uint64_t)(SHM_ALIGN - 1);
}

static nl_status make_name(char name[SHM_NAME_MAX])
{
    uint64_t r;
    ssize_t got = getrandom(&r, sizeof r, 0);
    if (got != (ssize_t)sizeof r)
        return nl_error(NL_ERR_RUNTIME, "shm: getrandom failed: %s", strerror(errno));
    snprintf(name, SHM_NAME_MAX, "/nanollm-%d-%016llx", (int)getpid(), (unsigned long long)r);
    return NL_OK;
}

nl_status shm_segment_create(const shm_layout *layout, const engine_settings *config,
                             shm_segment *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (layout->n_ranks < 1 || layout->n_ranks > SHM_MAX_RANKS)
        return nl_error(NL_ERR_INVALID_ARG, "shm: %d ranks, expected 1..%d", layout->n_ranks,
                        SHM_MAX_RANKS);
    uint64_t cmd_offset = align_up(sizeof(shm_header));
    uint64_t cmd_bytes = align_up(ring_bytes(layout->cmd_capacity));
    uint64_t reply_offset = cmd_offset + cmd_bytes;
    uint64_t reply_bytes = align_up(ring_bytes(layout->reply_capacity));
    uint64_t comm_offset = reply_offset + reply_bytes;
    uint64_t comm_bytes = align_up(layout->comm_bytes);
    uint64_t total = comm_offset + comm_bytes;

    char name[SHM_NAME_MAX];
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        NL_TRY(make_name(name));
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return nl_error(NL_ERR_RUNTIME, "shm: shm_open %s: %s", name, strerror(errno));
    }
    if (fd < 0) return nl_error(NL_ERR_RUNTIME, "shm: no free segment name after 8 attempts");
    shm_unlink(name);
    out->fd = fd;

    nl_status st = NL_OK;
    if (ftruncate(fd, (off_t)total) != 0) {
        st = nl_error(NL_ERR_NOMEM, "shm: sizing the segment to %llu bytes: %s",
                      (unsigned long long)total, strerror(errno));
        goto fail;
    }
    void *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        st = nl_error(NL_ERR_NOMEM, "shm: mapping the segment (%llu bytes): %s",
                      (unsigned long long)total, strerror(errno));
        goto fail;
    }
    out->base = base;
    out->bytes = total;

    shm_header *h = base;
    h->version = SHM_VERSION;
    h->total_bytes = total;
    h->leader_pid = (int32_t)getpid();
    h->n_ranks = layout->n_ranks;
    h->cmd_offset = cmd_offset;
    h->cmd_bytes = cmd_bytes;
    h->reply_offset = reply_offset;
    h->reply_bytes = reply_bytes;
    h->comm_offset = comm_offset;
    h->comm_bytes = comm_bytes;
    h->config = *config;
    h->config.model_dir[NL_MODEL_DIR_MAX - 1] = '\0';
    if ((st = ring_format((uint8_t *)base + cmd_offset, cmd_bytes, layout->cmd_capacity,
                          layout->n_ranks, &out->cmd)) != NL_OK ||
        (st = ring_format((uint8_t *)base + reply_offset, reply_bytes, layout->reply_capacity, 1,
                          &out->reply)) != NL_OK)
        goto fail;
    out->hdr = h;
    out->comm = comm_bytes ? (uint8_t *)base + comm_offset : NULL;
    out->comm_bytes = comm_bytes;
    atomic_thread_fence(memory_order_release);
    h->magic = SHM_MAGIC;
    return NL_OK;

fail:
    shm_segment_close(out);
    return st;
}

nl_status shm_segment_attach_fd(int fd, shm_segment *out)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    const char *name = "the inherited segment";
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return nl_error(NL_ERR_RUNTIME, "shm: fstat %s: %s", name, strerror(e));
    }
    size_t size = (size_t)sb.st_size;
    if (size < sizeof(shm_header)) {
        close(fd);
        return nl_error(NL_ERR_FORMAT, "shm: %s has %zu bytes, less than its header", name, size);
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (base == MAP_FAILED) return nl_error(NL_ERR_RUNTIME, "shm: mapping %s: %s", name, strerror(e));
    out->base = base;
    out->bytes = size;
    shm_header *h = base;
    nl_status st;
    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION || h->total_bytes != size) {
        st = nl_error(NL_ERR_FORMAT, "shm: %s is not a version %d nanollm segment of %zu bytes",
                      name, SHM_VERSION, size);
        goto fail;
    }
    if (h->n_ranks < 1 || h->n_ranks > SHM_MAX_RANKS || h->cmd_offset > size ||
        h->cmd_bytes > size - h->cmd_offset || h->reply_offset > size ||
        h->reply_bytes > size - h->reply_offset || h->comm_offset > size ||
        h->comm_bytes > size - h->comm_offset) {
        st = nl_error(NL_ERR_FORMAT, "shm: %s: regions outside the %zu-byte segment", name, size);
        goto fail;
    }
    if (h->cmd_offset % SHM_ALIGN || h->reply_offset % SHM_ALIGN || h->comm_offset % SHM_ALIGN) {
        st = nl_error(NL_ERR_FORMAT, "shm: %s: region offsets %llu, %llu, %llu are not multiples of %d",
                      name, (unsigned long long)h->cmd_offset, (unsigned long long)h->reply_offset,
                      (unsigned long long)h->comm_offset, SHM_ALIGN);
        goto fail;
    }
    if ((st = ring_attach((uint8_t *)base + h->cmd_offset, h->cmd_bytes, &out->cmd)) != NL_OK ||
        (st = ring_attach((uint8_t *)base + h->reply_offset, h->reply_bytes, &out->reply)) != NL_OK)
        goto fail;
    out->hdr = h;
    out->comm = h->comm_bytes ? (uint8_t *)base + h->comm_offset : NULL;
    out->comm_bytes = h->comm_bytes;
    return NL_OK;
fail:
    munmap(base, size);
    memset(out, 0, sizeof *out);
    out->fd = -1;
    return st;
}

void shm_segment_close(shm_segment *seg)
{
    if (seg->fd >= 0) close(seg->fd);
    seg->fd = -1;
    if (seg->base) munmap(seg->base, seg->bytes);
    seg->base = NULL;
    seg->hdr = NULL;
    seg->comm = NULL;
}

void shm_rank_set_state(shm_segment *seg, int rank, shm_rank_state state)
{
    atomic_store(&seg->hdr->ranks[rank].state, (uint32_t)state);
    atomic_fetch_add(&seg->hdr->state_seq, 1);
    futex_wake_shared(&seg->hdr->state_seq);
}
