/* status.h — internal error reporting.
 *
 * Library code returns an nl_status and records a message for the caller with
 * nl_error(); the message is thread-local and read back with nl_last_error().
 * Messages name the thing that was wrong: the file, the field, the value and
 * the limit it broke.
 */
#ifndef NL_COMMON_STATUS_H
#define NL_COMMON_STATUS_H

#include "nanollm.h"

#if defined(__GNUC__)
#define NL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define NL_PRINTF(a, b)
#endif

/* The longest message kept, its NUL included; a longer one is cut at a
 * UTF-8 character boundary. */
#define NL_ERROR_MAX 1024

/* Records a formatted message and returns status, so that a failure reads
 * `return nl_error(NL_ERR_FORMAT, "%s: ...", path);`. */
nl_status nl_error(nl_status status, const char *fmt, ...) NL_PRINTF(2, 3);

/* Prepends context ("loading model: ") to the current message. */
nl_status nl_error_prefix(nl_status status, const char *fmt, ...) NL_PRINTF(2, 3);

void nl_error_clear(void);

/* Propagates a failure unchanged. */
#define NL_TRY(expr)                                                          \
    do {                                                                      \
        nl_status nl_try_status_ = (expr);                                    \
        if (nl_try_status_ != NL_OK) return nl_try_status_;                   \
    } while (0)

#endif
