/* log.h — the library's messages: levels, the host's log callback, and the
 * default that prints to stderr.  nanollm.h declares the public setters;
 * library code (leader and workers) calls nl_log().  See nanollm.h for the
 * contract (process-wide, $NANOLLM_LOG_LEVEL, WARN by default).
 */
#ifndef NL_COMMON_LOG_H
#define NL_COMMON_LOG_H

#include <stdbool.h>

#include "common/status.h"

/* Hands the formatted message to the callback when level is enabled. */
void nl_log(nl_log_level level, const char *fmt, ...) NL_PRINTF(2, 3);
bool nl_log_enabled(nl_log_level level);

/* "error", "warn", "info", "debug" (case-insensitive) -> *out; false for
 * anything else. */
bool nl_log_level_parse(const char *name, nl_log_level *out);
const char *nl_log_level_name(nl_log_level level);

#endif
