/* futex.h — sleeping on a 32-bit word that several processes share.
 *
 * The rings, the segment's start-up handshake and the CPU all-reduce wait on
 * shared atomics with the futex system call: no busy loop while idle, one syscall to wake.  The
 * words live in a MAP_SHARED mapping, so the process-private futex flags
 * must not be used.  Every wait is bounded so callers can check that their
 * peers are still alive between waits.
 */
#ifndef NL_COMMON_FUTEX_H
#define NL_COMMON_FUTEX_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/status.h"

/* Sleeps while *word == expected, at most timeout_ms; spurious returns are
 * fine, callers re-check their condition. */
static inline void futex_wait_shared(_Atomic uint32_t *word, uint32_t expected, int timeout_ms)
{
    struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static inline void futex_wake_shared(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Waiting with a sleeper count (the rings).  The side that makes a
 * condition true changes *word, then calls futex_wake_counted, which makes
 * the wake syscall only when someone sleeps.  A waiter counts
 * itself in *waiters before its last look at the condition, so a change
 * made after that look finds it counted and wakes it. */
static inline void futex_wake_counted(_Atomic uint32_t *word, _Atomic uint32_t *waiters)
{
    if (atomic_load(waiters) > 0) futex_wake_shared(word);
}

/* A condition another process makes true: 0 while it does not hold. */
typedef int (*futex_cond_fn)(const void *arg);

/* Waits until cond(arg) is nonzero and stores that value in *result: spins
 * tries with a pause between them for the busy case, then sleeps on *word
 * of slice_ms each, asking alive(ctx) (when given) between them; its error
 * ends the wait and is returned. */
static inline nl_status futex_await_counted(_Atomic uint32_t *word, _Atomic uint32_t *waiters,
                                            futex_cond_fn cond, const void *arg, int spins,
                                            int slice_ms, nl_status (*alive)(void *), void *ctx,
                                            int *result)
{
    for (int i = 0; i < spins; i++) {
        if ((*result = cond(arg)) != 0) return NL_OK;
        cpu_relax();
    }
    for (;;) {
        uint32_t seen = atomic_load(word);
        atomic_fetch_add(waiters, 1);
        *result = cond(arg);
        if (*result == 0) futex_wait_shared(word, seen, slice_ms);
        atomic_fetch_sub(waiters, 1);
        if (*result != 0 || (*result = cond(arg)) != 0) return NL_OK;
        if (alive) NL_TRY(alive(ctx));
    }
}

#endif
