/* metrics.h — the server's Prometheus metrics (GET /metrics).
 *
 * Gauges and counters of the engine (requests running and waiting, KV
 * blocks, prompt/cached/generated tokens) are a snapshot the engine thread
 * publishes after each step; latency histograms (time to first token,
 * inter-token latency, end-to-end latency) and finished-request counters
 * are observed by the engine thread as tokens arrive.  HTTP threads only
 * render.  Every function is thread-safe.
 */
#ifndef NL_SERVER_METRICS_H
#define NL_SERVER_METRICS_H

#include "nanollm.h"

typedef struct metrics metrics;

typedef enum metrics_histogram {
    METRICS_TTFT = 0, /* request arrival -> first generated token     */
    METRICS_ITL,      /* between two consecutive tokens of a request  */
    METRICS_E2E,      /* request arrival -> finished                   */
    METRICS_N_HISTOGRAMS,
} metrics_histogram;

metrics *metrics_create(void);
void metrics_destroy(metrics *m);

void metrics_observe(metrics *m, metrics_histogram h, double seconds);
/* A finished request, by its finish reason. */
void metrics_count_finished(metrics *m, nl_finish_reason reason);
void metrics_set_engine(metrics *m, const nl_engine_stats *stats);
/* The exposition text (malloc'd), labelled with model_name; NULL when out
 * of memory. */
char *metrics_render(metrics *m, const char *model_name);

#endif
