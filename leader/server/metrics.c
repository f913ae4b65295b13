/* metrics.c — counters, gauges and histograms in Prometheus text format
 * (version 0.0.4).  Names follow Prometheus conventions (base units,
 * _total for counters) under the nanollm_ prefix. */
#include "leader/server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds in seconds; +Inf is implicit. */
static const double ttft_buckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                      0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double itl_buckets[] = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                     0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0};
static const double e2e_buckets[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0,
                                     10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0};
#define MAX_BUCKETS 24

typedef struct histogram {
    const char *name, *help;
    const double *bounds;
    int n_bounds;
    uint64_t counts[MAX_BUCKETS]; /* per bucket, not cumulative; [n_bounds] is +Inf */
    double sum;
    uint64_t count;
} histogram;

struct metrics {
    pthread_mutex_t mu;
    histogram hist[METRICS_N_HISTOGRAMS];
    nl_engine_stats engine;
    uint64_t finished[NL_FINISH_ERROR + 1];
};

metrics *metrics_create(void)
{
    metrics *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->hist[METRICS_TTFT] = (histogram){"nanollm_time_to_first_token_seconds",
                                        "Time from request arrival to its first generated token.",
                                        ttft_buckets, sizeof(ttft_buckets) / sizeof(double), {0}, 0, 0};
    m->hist[METRICS_ITL] = (histogram){"nanollm_inter_token_latency_seconds",
                                       "Time between consecutive generated tokens of a request.",
                                       itl_buckets, sizeof(itl_buckets) / sizeof(double), {0}, 0, 0};
    m->hist[METRICS_E2E] = (histogram){"nanollm_e2e_request_latency_seconds",
                                       "Time from request arrival to its end.",
                                       e2e_buckets, sizeof(e2e_buckets) / sizeof(double), {0}, 0, 0};
    return m;
}

void metrics_destroy(metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void metrics_observe(metrics *m, metrics_histogram h, double seconds)
{
    if (h < 0 || h >= METRICS_N_HISTOGRAMS) return;
    if (seconds < 0) seconds = 0;
    pthread_mutex_lock(&m->mu);
    histogram *hg = &m->hist[h];
    int b = 0;
    while (b < hg->n_bounds && seconds > hg->bounds[b]) b++;
    hg->counts[b]++;
    hg->sum += seconds;
    hg->count++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_finished(metrics *m, nl_finish_reason reason)
{
    if (reason < 0 || reason > NL_FINISH_ERROR) return;
    pthread_mutex_lock(&m->mu);
    m->finished[reason]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_engine(metrics *m, const nl_engine_stats *stats)
{
    pthread_mutex_lock(&m->mu);
    m->engine = *stats;
    pthread_mutex_unlock(&m->mu);
}

/* A growing text buffer; a failed allocation poisons it (text NULL). */
typedef struct text_buf {
    char *text;
    size_t len, cap;
    bool failed;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text_buf *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->text ? b->text + b->len : NULL, b->text ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if (b->text && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + (size_t)n + 1) cap *= 2;
        char *p = realloc(b->text, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->text = p;
        b->cap = cap;
    }
}

static void put_metric(text_buf *b, const char *name, const char *type, const char *help,
                       const char *model, double value)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"%s\"} %.17g\n", name, help, name, type, name,
        model, value);
}

char *metrics_render(metrics *m, const char *model_name)
{
    /* The label value escapes backslash, quote and newline. */
    char model[512];
    size_t k = 0;
    for (const char *p = model_name; *p && k + 3 < sizeof(model); p++) {
        if (*p == '\\' || *p == '"') model[k++] = '\\', model[k++] = *p;
        else if (*p == '\n') model[k++] = '\\', model[k++] = 'n';
        else model[k++] = *p;
    }
    model[k] = '\0';

    struct {
        histogram hist[METRICS_N_HISTOGRAMS];
        nl_engine_stats engine;
        uint64_t finished[NL_FINISH_ERROR + 1];
    } snap;
    pthread_mutex_lock(&m->mu);
    memcpy(snap.hist, m->hist, sizeof(snap.hist));
    snap.engine = m->engine;
    memcpy(snap.finished, m->finished, sizeof(snap.finished));
    pthread_mutex_unlock(&m->mu);
    const nl_engine_stats *e = &snap.engine;

    text_buf b = {0};
    put_metric(&b, "nanollm_num_requests_running", "gauge", "Requests being scheduled by the engine.", model,
               e->num_running);
    put_metric(&b, "nanollm_num_requests_waiting", "gauge", "Requests submitted and not yet admitted.", model,
               e->num_waiting);
    put_metric(&b, "nanollm_kv_cache_blocks_used", "gauge", "KV-cache blocks held by requests.", model,
               e->num_kv_blocks - e->num_free_kv_blocks);
    put_metric(&b, "nanollm_kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", model,
               e->num_kv_blocks);
    put_metric(&b, "nanollm_kv_cache_usage_ratio", "gauge", "Share of the KV-cache blocks in use.", model,
               e->num_kv_blocks ? (double)(e->num_kv_blocks - e->num_free_kv_blocks) / e->num_kv_blocks : 0.0);
    put_metric(&b, "nanollm_prefix_cache_queries_total", "counter",
               "Prompt tokens looked up in the prefix cache.", model, (double)e->prompt_tokens);
    put_metric(&b, "nanollm_prefix_cache_hits_total", "counter",
               "Prompt tokens served from the prefix cache.", model, (double)e->cached_tokens);
    put_metric(&b, "nanollm_prefix_cache_hit_rate", "gauge",
               "Prompt tokens served from the prefix cache, over all prompt tokens.", model,
               e->prompt_tokens ? (double)e->cached_tokens / (double)e->prompt_tokens : 0.0);
    put_metric(&b, "nanollm_prompt_tokens_total", "counter", "Prompt tokens submitted.", model,
               (double)e->prompt_tokens);
    put_metric(&b, "nanollm_generation_tokens_total", "counter", "Tokens generated.", model,
               (double)e->output_tokens);
    put_metric(&b, "nanollm_num_preemptions_total", "counter", "Requests preempted for KV-cache room.",
               model, (double)e->preemptions);

    static const char *reasons[] = {"none", "stop", "length", "abort", "error"};
    put(&b, "# HELP nanollm_request_finished_total Requests finished, by finish reason.\n"
            "# TYPE nanollm_request_finished_total counter\n");
    for (int r = NL_FINISH_STOP; r <= NL_FINISH_ERROR; r++)
        put(&b, "nanollm_request_finished_total{model_name=\"%s\",finished_reason=\"%s\"} %llu\n", model,
            reasons[r], (unsigned long long)snap.finished[r]);

    for (int h = 0; h < METRICS_N_HISTOGRAMS; h++) {
        const histogram *hg = &snap.hist[h];
        put(&b, "# HELP %s %s\n# TYPE %s histogram\n", hg->name, hg->help, hg->name);
        uint64_t cum = 0;
        for (int i = 0; i < hg->n_bounds; i++) {
            cum += hg->counts[i];
            put(&b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %llu\n", hg->name, model, hg->bounds[i],
                (unsigned long long)cum);
        }
        cum += hg->counts[hg->n_bounds];
        put(&b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", hg->name, model, (unsigned long long)cum);
        put(&b, "%s_sum{model_name=\"%s\"} %.17g\n", hg->name, model, hg->sum);
        put(&b, "%s_count{model_name=\"%s\"} %llu\n", hg->name, model, (unsigned long long)hg->count);
    }
    if (b.failed) {
        free(b.text);
        return NULL;
    }
    return b.text;
}
