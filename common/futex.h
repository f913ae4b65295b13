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

#endif
