/* log.c — level, callback and the stderr default (see log.h).
 *
 * The level and the callback are read on every message from any thread,
 * so they live in atomics; the callback and its user pointer change
 * together under a mutex and are read under it, so a message never goes
 * to a new callback with the old user pointer.
 */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static _Atomic int log_level = -1; /* -1: not read from the environment yet */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static nl_log_callback log_cb;
static void *log_user;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *nl_log_level_name(nl_log_level level)
{
    return level >= NL_LOG_ERROR && level <= NL_LOG_DEBUG ? level_names[level] : "?";
}

bool nl_log_level_parse(const char *name, nl_log_level *out)
{
    for (int i = NL_LOG_ERROR; i <= NL_LOG_DEBUG; i++) {
        if (name && strcasecmp(name, level_names[i]) == 0) {
            *out = (nl_log_level)i;
            return true;
        }
    }
    if (name && strcasecmp(name, "warning") == 0) {
        *out = NL_LOG_WARN;
        return true;
    }
    return false;
}

nl_log_level nl_get_log_level(void)
{
    int l = atomic_load(&log_level);
    if (l >= 0) return (nl_log_level)l;
    nl_log_level from_env = NL_LOG_WARN;
    const char *env = getenv("NANOLLM_LOG_LEVEL");
    bool bad = env && !nl_log_level_parse(env, &from_env);
    if (bad) from_env = NL_LOG_WARN;
    int expected = -1;
    bool first = atomic_compare_exchange_strong(&log_level, &expected, (int)from_env);
    /* the level is set now, so this does not come back here */
    if (bad && first) nl_log(NL_LOG_WARN, "NANOLLM_LOG_LEVEL '%s': expected error, warn, info or debug", env);
    return (nl_log_level)atomic_load(&log_level);
}

void nl_set_log_level(nl_log_level level)
{
    if (level < NL_LOG_ERROR) level = NL_LOG_ERROR;
    if (level > NL_LOG_DEBUG) level = NL_LOG_DEBUG;
    atomic_store(&log_level, (int)level);
}

void nl_set_log_callback(nl_log_callback cb, void *user)
{
    pthread_mutex_lock(&log_lock);
    log_cb = cb;
    log_user = user;
    pthread_mutex_unlock(&log_lock);
}

bool nl_log_enabled(nl_log_level level)
{
    return level <= nl_get_log_level();
}

void nl_log(nl_log_level level, const char *fmt, ...)
{
    if (!nl_log_enabled(level)) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Held during the call so the callback's user pointer stays the one
     * it was set with; the callback must not call back into the library. */
    pthread_mutex_lock(&log_lock);
    if (log_cb)
        log_cb(log_user, level, msg);
    else
        fprintf(stderr, "nanollm: %s: %s\n", nl_log_level_name(level), msg);
    pthread_mutex_unlock(&log_lock);
}
