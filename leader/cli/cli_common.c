/* cli_common.c — option parsing shared by the nanollm-launch commands. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "leader/cli/cli.h"

int cli_option(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "nanollm-launch: option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

bool cli_parse_int(const char *name, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "nanollm-launch: %s: '%s' is not an integer in [%lld, %lld]\n", name, text,
                (long long)lo, (long long)hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *name, const char *text, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "nanollm-launch: %s: '%s' is not a number in [%g, %g]\n", name, text, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

void cli_sampling_init(cli_sampling *s)
{
    memset(s, 0, sizeof(*s));
    nl_sampling_params_init(&s->params);
    s->params.stop = s->stop;
}

int cli_sampling_option(int argc, char **argv, int *i, cli_sampling *s)
{
    nl_sampling_params *p = &s->params;
    const char *v;
    int64_t iv;
    double fv;
    int m;
    if (strcmp(argv[*i], "--ignore-eos") == 0) {
        p->ignore_eos = true;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--max-tokens", &v))) {
        if (m < 0 || !cli_parse_int("--max-tokens", v, 1, INT32_MAX / 2, &iv)) return -1;
        p->max_tokens = (int32_t)iv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--temperature", &v))) {
        if (m < 0 || !cli_parse_float("--temperature", v, 0.0, 1e6, &fv)) return -1;
        p->temperature = (float)fv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--top-k", &v))) {
        if (m < 0 || !cli_parse_int("--top-k", v, -1, INT32_MAX, &iv)) return -1;
        p->top_k = (int32_t)iv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--top-p", &v))) {
        if (m < 0 || !cli_parse_float("--top-p", v, 0.0, 1.0, &fv)) return -1;
        if (fv <= 0.0) {
            fprintf(stderr, "nanollm-launch: --top-p: '%s' must be in (0, 1]\n", v);
            return -1;
        }
        p->top_p = (float)fv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--min-p", &v))) {
        if (m < 0 || !cli_parse_float("--min-p", v, 0.0, 1.0, &fv)) return -1;
        p->min_p = (float)fv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--seed", &v))) {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(v, &end, 10);
        if (m < 0 || errno || end == v || *end != '\0' || v[0] == '-') {
            if (m > 0) fprintf(stderr, "nanollm-launch: --seed: '%s' is not a non-negative integer\n", v);
            return -1;
        }
        p->seed = seed;
        p->has_seed = true;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--logprobs", &v))) {
        if (m < 0 || !cli_parse_int("--logprobs", v, 0, 20, &iv)) return -1;
        p->logprobs = (int32_t)iv;
        return 1;
    }
    if ((m = cli_option(argc, argv, i, "--stop", &v))) {
        if (m < 0) return -1;
        if (v[0] == '\0') {
            fprintf(stderr, "nanollm-launch: --stop: the stop string is empty\n");
            return -1;
        }
        if (p->n_stop >= CLI_MAX_STOP) {
            fprintf(stderr, "nanollm-launch: --stop: at most %d stop strings\n", CLI_MAX_STOP);
            return -1;
        }
        s->stop[p->n_stop++] = v;
        return 1;
    }
    return 0;
}

void cli_report(const char *what)
{
    fprintf(stderr, "nanollm-launch: %s: %s\n", what, nl_last_error());
}

int cli_open_engine(const nl_engine_config *config, nl_engine **engine)
{
    nl_status status = nl_engine_open(config, engine);
    if (status == NL_OK) return 0;
    cli_report("opening the engine");
    /* an option or environment value out of range is bad usage, like a bad
     * model file; memory, CUDA and workers are runtime failures */
    return status == NL_ERR_INVALID_ARG || status == NL_ERR_IO || status == NL_ERR_FORMAT ||
                   status == NL_ERR_UNSUPPORTED
               ? 2
               : 1;
}

void cli_demo_note(const nl_engine *engine)
{
    nl_engine_info info;
    nl_engine_get_info(engine, &info);
    if (info.is_demo_model)
        fprintf(stderr, "nanollm-launch: note: no --model given, using the built-in demo model "
                        "(random weights): its text is noise\n");
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
