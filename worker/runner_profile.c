/* runner_profile.c — NANOLLM_PROFILE for a model runner (runner_profile.h). */
#include "worker/runner_profile.h"

#include <string.h>
#include <time.h>

#include "common/log.h"

static const char *const stream_names[STREAM_COUNT] = {"inputs", "takes", "forward", "sampler",
                                                       "two marks", "until next step"};
static const char *const kind_names[PROFILE_KINDS] = {"prefill", "decode (graph)",
                                                      "decode (eager)"};

nl_status runner_profile_parse(const char *value, const nl_backend *be, int32_t rank,
                               runner_profile *out)
{
    memset(out, 0, sizeof *out);
    if (!value) return NL_OK;
    const bool timer = be->ops->timer_mark != NULL;
    const bool skip = strncmp(value, "skip:", 5) == 0;
    out->ops = strcmp(value, "ops") == 0 && timer;
    out->phases = out->ops || strcmp(value, "1") == 0;
    out->stream = (strcmp(value, "stream") == 0 || skip) && timer;
    if (!skip) return NL_OK;
    nl_status st = qwen_parse_left_out(value + 5, &out->left_out);
    if (st != NL_OK) return nl_error_prefix(st, "NANOLLM_PROFILE: ");
    if (rank == 0)
        nl_log(NL_LOG_WARN, "NANOLLM_PROFILE=%s: the forward leaves those ops out, so its "
               "results are wrong; for timing only", value);
    return NL_OK;
}

double runner_profile_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double runner_profile_lap(nl_backend *be, double *mark)
{
    be->ops->synchronize(be);
    double t = runner_profile_now(), d = t - *mark;
    *mark = t;
    return d;
}

void runner_profile_startup(const runner_profile *p, nl_backend *be, int32_t rank,
                            const char *phase, double *mark)
{
    if (!p->phases) return;
    const double d = runner_profile_lap(be, mark);
    /* Asked for with NANOLLM_PROFILE=1, so shown at WARN and above. */
    if (rank == 0) nl_log(NL_LOG_WARN, "profile start-up %-22s %.3f s", phase, d);
}

/* The timer charges a tag outside [0, STREAM_COUNT) to nothing. */
#define STREAM_UNCHARGED (-1)

nl_status runner_profile_step(runner_profile *p, nl_backend *be, bool graph)
{
    if (!p->stream) return NL_OK;
    p->stream_steps += graph;
    return runner_profile_mark(p, be, !graph && p->stream_marks > 0, STREAM_UNCHARGED);
}

nl_status runner_profile_mark(runner_profile *p, nl_backend *be, bool on, int phase)
{
    if (!on) return NL_OK;
    p->stream_marks++;
    return be->ops->timer_mark(be, phase);
}

nl_status runner_profile_collect(runner_profile *p, nl_backend *be, bool force)
{
    if (!p->stream || p->stream_marks == 0) return NL_OK;
    if (!force && p->stream_marks < NL_TIMER_MAX_MARKS - 2 * STREAM_COUNT) return NL_OK;
    p->stream_marks = 0;
    return be->ops->timer_collect(be, p->stream_s, STREAM_COUNT);
}

/* Rank 0's table of each op over the eager forwards of one kind of step. */
static void report_ops(const struct step_profile *k, const char *kind)
{
    double total = 0;
    for (int op = 0; op < QWEN_OP_COUNT; op++) total += k->op_s[op];
    if (total <= 0) return;
    for (int op = 0; op < QWEN_OP_COUNT; op++) {
        if (k->op_s[op] <= 0) continue;
        nl_log(NL_LOG_WARN, "profile ops %-15s %-16s %9.3f ms %9.1f us/step %5.1f%%", kind,
               qwen_op_names[op], 1e3 * k->op_s[op], 1e6 * k->op_s[op] / (double)k->steps,
               100.0 * k->op_s[op] / total);
    }
}

static void report_stream(runner_profile *p, nl_backend *be, int32_t rank)
{
    if (runner_profile_collect(p, be, true) != NL_OK || rank != 0 || p->stream_steps == 0) return;
    for (int k = 0; k < STREAM_COUNT; k++)
        nl_log(NL_LOG_WARN, "profile stream %-16s %9.1f us/step (%lld graph decode steps)",
               stream_names[k], 1e6 * p->stream_s[k] / (double)p->stream_steps,
               (long long)p->stream_steps);
    nl_log(NL_LOG_WARN, "profile stream launches: %lld with the device idle, %lld behind a running "
           "step (%lld of them ended before the launch did); host %.1f us a launch",
           (long long)(p->stream_steps - p->launched_behind), (long long)p->launched_behind,
           (long long)p->launched_late, 1e6 * p->launch_host_s / (double)p->stream_steps);
}

void runner_profile_report(runner_profile *p, nl_backend *be, int32_t rank)
{
    if (p->stream) report_stream(p, be, rank);
    if (!p->phases) return;
    for (int k = 0; k < PROFILE_KINDS; k++) {
        const struct step_profile *s = &p->kind[k];
        if (s->steps == 0) continue;
        nl_log(NL_LOG_WARN,
               "profile rank %d %-15s %7lld steps %9lld tokens: prep %.3f s, forward "
               "%.3f s, sample %.3f s (%.1f us/step)",
               rank, kind_names[k], (long long)s->steps, (long long)s->tokens, s->prep_s,
               s->forward_s, s->sample_s,
               1e6 * (s->prep_s + s->forward_s + s->sample_s) / (double)s->steps);
        if (rank == 0) report_ops(s, kind_names[k]);
    }
}
