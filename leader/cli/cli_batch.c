/* cli_batch.c — `nanollm-launch batch --input IN.jsonl --output OUT.jsonl
 * [--resume] [sampling options]`: an offline job over a JSONL file (the
 * line formats are in cli_batch.h, their parsing and output in
 * cli_batch_line.c and cli_batch_output.c).
 *
 * Memory stays bounded whatever the input's size: input lines are read
 * only while fewer than BATCH_WINDOW_PER_SEQ * max_num_seqs are in flight,
 * each request's buffers grow with what it generated, and an output line is
 * built in the final callback, after which the request is released.
 *
 * Output: one line per input line, in input order, written as soon as the
 * lines before it are written; each write(2) holds only whole lines, so the
 * file is valid JSONL at every moment (a reader never sees half a record
 * unless the process is killed mid-write, and --resume drops such a tail).
 * A bad line gets an error line and never spoils the others.  On Ctrl-C
 * (or SIGTERM) the job stops after the step in flight and every unfinished
 * line, read or not yet read, gets an error line marked incomplete; exit
 * 130.  A dead worker does the same with its message; exit 1.  A second
 * Ctrl-C ends the process at once (launch_main.c's handler).
 *
 * --resume keeps the output's leading lines that hold final results (it
 * checks that each one's id is its input line's), drops the rest, and runs
 * the remaining input lines.  --input and --output naming the same file
 * (also through a link) is refused before anything is written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "leader/cli/cli.h"
#include "leader/cli/cli_batch.h"

#define BATCH_WINDOW_PER_SEQ 4
#define BATCH_WINDOW_MIN 64

/* ---- signals -------------------------------------------------------------- */

static volatile sig_atomic_t batch_signal;
static struct sigaction batch_old_int, batch_old_term;

/* The first Ctrl-C asks the job to stop cleanly; the previous handlers
 * come back, so a second one ends the process at once. */
static void batch_on_signal(int sig)
{
    batch_signal = sig;
    sigaction(SIGINT, &batch_old_int, NULL);
    sigaction(SIGTERM, &batch_old_term, NULL);
}

static void batch_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = batch_on_signal;
    sigemptyset(&sa.sa_mask);
    batch_signal = 0;
    sigaction(SIGINT, &sa, &batch_old_int);
    sigaction(SIGTERM, &sa, &batch_old_term);
}

static void batch_signals_restore(void)
{
    sigaction(SIGINT, &batch_old_int, NULL);
    sigaction(SIGTERM, &batch_old_term, NULL);
}

/* ---- the job ---------------------------------------------------------------- */

typedef struct batch_slot {
    batch_meta meta;
    int32_t max_tokens;
    char *out;            /* the output line once known                  */
    size_t out_len;
} batch_slot;

typedef struct batch_job {
    nl_engine *engine;
    bool has_tokenizer;
    const cli_sampling *defaults;
    FILE *in;
    const char *in_path, *out_path;
    int out_fd;
    batch_slot *slots;    /* [window]: line k in slots[k % window]       */
    int64_t window;
    int64_t next_read;    /* lines read (and submitted or refused)        */
    int64_t next_write;   /* lines written                                */
    bool eof;
    char *buf;
    size_t buf_cap;
    char *wbuf;           /* lines being written together                 */
    size_t wbuf_len, wbuf_cap;
    int rc;               /* 2 once writing failed                        */
    /* figures */
    int64_t n_rejected, prompt_tokens, cached_tokens, output_tokens;
    int64_t total_lines;  /* -1 when unknown (a pipe)                     */
    int64_t budget_tokens; /* max_tokens still possible for lines read   */
    int64_t read_max_tokens; /* sum of max_tokens over lines read         */
    int64_t done_lines;
    double start, last_draw;
    bool draw;
} batch_job;

static batch_slot *slot_of(batch_job *j, int64_t line)
{
    return &j->slots[line % j->window];
}

static void set_output(batch_job *j, int64_t line, char *out, size_t len)
{
    batch_slot *s = slot_of(j, line);
    if (!out) { /* out of memory: still one line, so the file stays aligned */
        static const char oom[] = "{\"finish_reason\":\"error\",\"error\":\"out of memory for the output line\","
                                  "\"incomplete\":true}\n";
        out = strdup(oom);
        len = out ? sizeof oom - 1 : 0;
    }
    s->out = out;
    s->out_len = len;
    j->done_lines++;
}

/* The final callback: on the stepping thread (this one), once per request. */
static void on_final(void *user, const nl_result *r)
{
    batch_job *j = user;
    int64_t line = (int64_t)(intptr_t)r->user;
    batch_slot *s = slot_of(j, line);
    batch_failure failure = r->finish_reason == NL_FINISH_ERROR ? BATCH_ENGINE_FAILED : BATCH_INTERRUPTED;
    size_t len = 0;
    char *out = batch_output_line(&s->meta, line, r, failure, NULL, j->engine, j->has_tokenizer, &len);
    j->prompt_tokens += r->prompt_tokens;
    j->cached_tokens += r->cached_tokens;
    j->budget_tokens -= s->max_tokens - r->n_tokens;
    set_output(j, line, out, len);
    nl_engine_release(j->engine, r->request_id);
}

static void on_stream(void *user, uint64_t id, const int32_t *new_ids, int32_t n_new, const char *text_delta,
                      size_t text_len, bool finished)
{
    (void)id; (void)new_ids; (void)text_delta; (void)text_len; (void)finished;
    batch_job *j = user;
    j->output_tokens += n_new;
}

static void fmt_time(char *buf, size_t cap, double s)
{
    if (s < 0 || s > 1e7) {
        snprintf(buf, cap, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

/* The bar follows generated tokens against an estimate of all the tokens
 * the job will generate: what is done, plus the max_tokens still open for
 * lines read, plus the lines not read yet at the average max_tokens so far. */
static void draw_progress(batch_job *j, bool final)
{
    double now = cli_now();
    if (!j->draw || (!final && now - j->last_draw < 0.1)) return;
    j->last_draw = now;
    double expected = (double)j->output_tokens + (double)j->budget_tokens;
    if (j->total_lines > j->next_read && j->next_read > 0)
        expected += (double)(j->total_lines - j->next_read) * (double)j->read_max_tokens / (double)j->next_read;
    double frac = expected > 0 ? (double)j->output_tokens / expected : 0.0;
    if (final) frac = 1.0;
    if (frac > 1) frac = 1;
    const int width = 30;
    char bar[64];
    int filled = (int)(frac * width);
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    double dt = now - j->start;
    char elapsed[32], eta[32], total[32];
    fmt_time(elapsed, sizeof elapsed, dt);
    fmt_time(eta, sizeof eta, frac > 0.001 ? dt * (1 - frac) / frac : -1);
    if (j->total_lines >= 0) snprintf(total, sizeof total, "%lld", (long long)j->total_lines);
    else snprintf(total, sizeof total, "?");
    fprintf(stderr, "\r[%s] %3.0f%% %lld/%s lines, %lld tok, %.0f tok/s, %s elapsed, ETA %s ", bar, 100 * frac,
            (long long)j->next_write, total, (long long)j->output_tokens,
            dt > 0 ? (double)j->output_tokens / dt : 0.0, elapsed, eta);
    if (final) fputc('\n', stderr);
}

static bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Writes the lines that are ready, in order, in one write. */
static void flush_ready(batch_job *j)
{
    j->wbuf_len = 0;
    int64_t first = j->next_write;
    while (j->next_write < j->next_read && slot_of(j, j->next_write)->out) {
        batch_slot *s = slot_of(j, j->next_write);
        if (j->wbuf_len + s->out_len > j->wbuf_cap) {
            size_t cap = j->wbuf_cap ? j->wbuf_cap : 1 << 16;
            while (cap < j->wbuf_len + s->out_len) cap *= 2;
            char *p = realloc(j->wbuf, cap);
            if (!p) break; /* write what fits; the rest next time */
            j->wbuf = p;
            j->wbuf_cap = cap;
        }
        memcpy(j->wbuf + j->wbuf_len, s->out, s->out_len);
        j->wbuf_len += s->out_len;
        free(s->out);
        s->out = NULL;
        batch_meta_free(&s->meta);
        j->next_write++;
    }
    if (j->next_write == first || j->rc != 0) return;
    if (!write_all(j->out_fd, j->wbuf, j->wbuf_len)) {
        fprintf(stderr, "\nnanollm-launch: batch: writing %s failed: %m\n", j->out_path);
        j->rc = 2;
    }
}

/* Reads the next input line into j->buf; false at the end (or an error,
 * then j->rc is set). */
static bool read_line(batch_job *j, size_t *len)
{
    ssize_t n = getline(&j->buf, &j->buf_cap, j->in);
    if (n < 0) {
        if (ferror(j->in)) {
            fprintf(stderr, "\nnanollm-launch: batch: reading %s failed: %m\n", j->in_path);
            j->rc = 2;
        }
        return false;
    }
    if (n > 0 && j->buf[n - 1] == '\n') j->buf[--n] = '\0';
    if (n > 0 && j->buf[n - 1] == '\r') j->buf[--n] = '\0';
    *len = (size_t)n;
    return true;
}

/* Reads and submits lines while the window has room. */
static void admit(batch_job *j)
{
    while (!j->eof && j->rc == 0 && !batch_signal && j->next_read - j->next_write < j->window) {
        size_t len;
        if (!read_line(j, &len)) {
            j->eof = true;
            break;
        }
        int64_t line = j->next_read++;
        batch_request rq;
        batch_request_parse(&rq, j->defaults, j->buf, len, line);
        batch_slot *s = slot_of(j, line);
        s->max_tokens = rq.meta.max_tokens;
        j->read_max_tokens += rq.meta.max_tokens;
        if (!rq.error &&
            nl_engine_submit_user(j->engine, &rq.prompt, &rq.params, (void *)(intptr_t)line, NULL) != NL_OK)
            rq.error = strdup(nl_last_error());
        s->meta = batch_request_take_meta(&rq);
        if (rq.error) {
            size_t out_len = 0;
            char *out = batch_output_line(&s->meta, line, NULL, BATCH_REFUSED, rq.error, j->engine,
                                          j->has_tokenizer, &out_len);
            j->n_rejected++;
            set_output(j, line, out, out_len);
        } else {
            j->budget_tokens += s->max_tokens;
        }
        batch_request_free(&rq);
    }
}

/* After Ctrl-C or an engine failure: every line without an output, read or
 * not, gets an incomplete error line. */
static void fail_the_rest(batch_job *j, batch_failure failure, const char *message)
{
    for (int64_t line = j->next_write; line < j->next_read; line++) {
        batch_slot *s = slot_of(j, line);
        if (s->out) continue;
        size_t len = 0;
        char *out = batch_output_line(&s->meta, line, NULL, failure, message, j->engine, j->has_tokenizer, &len);
        set_output(j, line, out, len);
    }
    flush_ready(j);
    /* Lines never read: their ids, and the same message.  A terminal or a
     * pipe that never ends is not read to its end. */
    bool regular = j->total_lines >= 0;
    while (regular && !j->eof && j->rc == 0) {
        size_t len;
        if (!read_line(j, &len)) break;
        int64_t line = j->next_read++;
        batch_request rq;
        batch_request_parse(&rq, j->defaults, j->buf, len, line);
        batch_slot *s = slot_of(j, line);
        s->meta = batch_request_take_meta(&rq);
        batch_request_free(&rq);
        size_t out_len = 0;
        char *out = batch_output_line(&s->meta, line, NULL, failure, message, j->engine, j->has_tokenizer,
                                      &out_len);
        set_output(j, line, out, out_len);
        flush_ready(j);
    }
}

/* Counts the lines of a regular file (for the progress bar), with pread so
 * the stream's position stays; -1 for anything else. */
static int64_t count_lines(FILE *f)
{
    struct stat st;
    int fd = fileno(f);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
    static char buf[1 << 16];
    int64_t lines = 0;
    off_t off = 0;
    ssize_t n;
    char last = '\n';
    while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + n - p))); p++) lines++;
        last = buf[n - 1];
        off += n;
    }
    return lines + (last != '\n');
}

/* ---- --resume and the same-file check ---------------------------------------- */

static bool same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Keeps the output's leading final lines; checks each against its input
 * line and skips those input lines.  Returns 0, or the exit code. */
static int resume_prepare(batch_job *j, FILE *out, int64_t *kept_lines, off_t *kept_bytes)
{
    *kept_lines = 0;
    *kept_bytes = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, out)) > 0) {
        if (line[n - 1] != '\n') break; /* cut mid-line: a kill during a write */
        json_t *o = json_loadb(line, (size_t)n - 1, 0, NULL);
        json_t *out_id = NULL;
        bool final = o && batch_output_is_final(o, &out_id);
        if (!final) {
            json_decref(o);
            break;
        }
        size_t in_len;
        if (!read_line(j, &in_len)) {
            fprintf(stderr, "nanollm-launch: batch: --resume: %s has more results than %s has lines (%lld)\n",
                    j->out_path, j->in_path, (long long)*kept_lines);
            json_decref(o);
            rc = 2;
            break;
        }
        batch_request rq;
        batch_request_parse(&rq, j->defaults, j->buf, in_len, *kept_lines);
        bool match = json_equal(rq.meta.id, out_id);
        if (!match) {
            char *want = json_dumps(rq.meta.id, JSON_ENCODE_ANY), *got = json_dumps(out_id, JSON_ENCODE_ANY);
            fprintf(stderr,
                    "nanollm-launch: batch: --resume: %s line %lld is for id %s, but %s line %lld has id %s; "
                    "is it the output of another input?\n",
                    j->out_path, (long long)*kept_lines + 1, got ? got : "?", j->in_path,
                    (long long)*kept_lines + 1, want ? want : "?");
            free(want);
            free(got);
            rc = 2;
        }
        batch_request_free(&rq);
        json_decref(o);
        if (!match) break;
        (*kept_lines)++;
        *kept_bytes += n;
    }
    free(line);
    return rc;
}

static int open_output(batch_job *j, bool resume, int64_t *skipped)
{
    *skipped = 0;
    if (strcmp(j->out_path, "-") == 0) {
        if (resume) {
            fprintf(stderr, "nanollm-launch: batch: --resume needs an output file, not stdout\n");
            return 2;
        }
        j->out_fd = STDOUT_FILENO;
        return 0;
    }
    if (resume) {
        FILE *old = fopen(j->out_path, "r");
        if (old) {
            off_t keep = 0;
            int rc = resume_prepare(j, old, skipped, &keep);
            fclose(old);
            if (rc != 0) return rc;
            j->out_fd = open(j->out_path, O_WRONLY | O_CLOEXEC);
            if (j->out_fd < 0 || ftruncate(j->out_fd, keep) != 0 || lseek(j->out_fd, keep, SEEK_SET) < 0) {
                fprintf(stderr, "nanollm-launch: batch: cannot reopen output %s: %m\n", j->out_path);
                return 2;
            }
            return 0;
        }
        if (errno != ENOENT) {
            fprintf(stderr, "nanollm-launch: batch: cannot read output %s to resume: %m\n", j->out_path);
            return 2;
        }
    }
    j->out_fd = open(j->out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (j->out_fd < 0) {
        fprintf(stderr, "nanollm-launch: batch: cannot create output %s: %m\n", j->out_path);
        return 2;
    }
    return 0;
}

/* Steps until every line is written, Ctrl-C, or an engine failure. */
static int run_job(batch_job *j)
{
    nl_engine_set_final_callback(j->engine, on_final, j);
    nl_engine_set_stream_callback(j->engine, on_stream, j);
    int rc = 0;
    for (;;) {
        admit(j);
        flush_ready(j);
        if (j->rc != 0 || batch_signal) break;
        if (!nl_engine_has_unfinished(j->engine)) {
            if (j->eof && j->next_write == j->next_read) break;
            continue; /* the window has room again */
        }
        if (nl_engine_step(j->engine) != NL_OK) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%s", nl_last_error());
            if (j->draw) fputc('\n', stderr);
            cli_report("batch");
            /* the engine ended every request with the message */
            flush_ready(j);
            fail_the_rest(j, BATCH_ENGINE_FAILED, msg);
            rc = 1;
            break;
        }
        draw_progress(j, false);
    }
    if (batch_signal && rc == 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "interrupted by %s before this line finished",
                 batch_signal == SIGTERM ? "SIGTERM" : "SIGINT");
        if (j->draw) fputc('\n', stderr);
        fprintf(stderr, "nanollm-launch: batch: %s; the unfinished lines are marked incomplete in %s "
                        "(run again with --resume to finish them)\n",
                msg, j->out_path);
        fail_the_rest(j, BATCH_INTERRUPTED, msg);
        rc = 130;
    }
    if (rc == 0) draw_progress(j, true);
    if (j->rc != 0) rc = j->rc;
    return rc;
}

enum { OPT_INPUT = CLI_OWN, OPT_OUTPUT, OPT_RESUME };

static const struct option batch_options[] = {
    CLI_SAMPLING_OPTIONS,
    {"input", required_argument, NULL, OPT_INPUT},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"resume", no_argument, NULL, OPT_RESUME},
    {NULL, 0, NULL, 0},
};

const cli_command cli_batch_command = {
    .name = "batch",
    .options = batch_options,
    .help =
    "usage: nanollm-launch batch --input IN.jsonl --output OUT.jsonl [--resume] [sampling options]\n"
    "\n"
    "Runs every line of IN.jsonl and writes one output line per input line, in input order,\n"
    "each as soon as the lines before it are done.  A line is a native request (prompt,\n"
    "prompt_token_ids or messages, and optionally id and sampling fields) or an OpenAI batch\n"
    "request ({custom_id, method, url: /v1/completions or /v1/chat/completions, body}); a bad\n"
    "line gets an error record and never spoils the others.  On Ctrl-C or a dead worker the\n"
    "unfinished lines get error records marked incomplete; --resume keeps the finished lines\n"
    "of OUT.jsonl and runs the rest.  '-' is stdin or stdout.  Sampling options are the\n"
    "defaults for fields a line leaves out.\n"
    "\n" CLI_SAMPLING_HELP,
};

int cli_batch(const nl_engine_config *config, int argc, char **argv)
{
    cli_sampling defaults;
    cli_sampling_init(&defaults);
    const char *in_path = NULL, *out_path = NULL;
    bool resume = false;
    cli_parser p;
    if (!cli_parser_init(&p, &cli_batch_command, config, argc, argv)) return 1;
    const char *v;
    int c;
    while ((c = cli_next(&p, &v)) != CLI_DONE && c != CLI_EXIT) {
        int s = cli_sampling_option(&p, c, v, &defaults);
        if (s == CLI_EXIT) break;
        if (s) continue;
        if (c == OPT_INPUT) in_path = v;
        else if (c == OPT_OUTPUT) out_path = v;
        else if (c == OPT_RESUME) resume = true;
        else if (c == CLI_POSITIONAL) cli_usage_error(&p, "unexpected argument '%s'", v);
        else cli_usage_error(&p, "option %d has no handler", c);
        if (p.exit) break;
    }
    if (c == CLI_DONE && (!in_path || !out_path))
        cli_usage_error(&p, "--input IN.jsonl and --output OUT.jsonl are required");
    nl_engine_config engine_config = p.config;
    cli_parser_free(&p);
    if (c != CLI_DONE || p.exit) return p.exit;
    config = &engine_config;
    if (strcmp(in_path, "-") != 0 && strcmp(out_path, "-") != 0 && same_file(in_path, out_path)) {
        fprintf(stderr, "nanollm-launch: batch: --input %s and --output %s are the same file; writing the "
                        "output would destroy the input\n", in_path, out_path);
        return 2;
    }

    batch_job j;
    memset(&j, 0, sizeof j);
    j.defaults = &defaults;
    j.in_path = in_path;
    j.out_path = out_path;
    j.out_fd = -1;
    j.in = strcmp(in_path, "-") == 0 ? stdin : fopen(in_path, "r");
    if (!j.in) {
        fprintf(stderr, "nanollm-launch: batch: cannot open input %s: %m\n", in_path);
        return 2;
    }
    j.total_lines = count_lines(j.in);
    int64_t skipped = 0;
    int rc = open_output(&j, resume, &skipped);
    if (rc != 0) goto close_files;
    if (skipped > 0)
        fprintf(stderr, "nanollm-launch: batch: --resume: %lld lines already done in %s\n", (long long)skipped,
                out_path);

    rc = cli_open_engine(config, &j.engine);
    if (rc != 0) goto close_files;
    cli_demo_note(j.engine);
    nl_engine_info info;
    nl_engine_get_info(j.engine, &info);
    j.has_tokenizer = info.has_tokenizer;
    j.window = (int64_t)config->max_num_seqs * BATCH_WINDOW_PER_SEQ;
    if (j.window < BATCH_WINDOW_MIN) j.window = BATCH_WINDOW_MIN;
    j.slots = calloc((size_t)j.window, sizeof(batch_slot));
    if (!j.slots) {
        fprintf(stderr, "nanollm-launch: batch: out of memory for %lld lines in flight\n", (long long)j.window);
        rc = 1;
        goto close_engine;
    }
    /* line numbers (ids of lines without one) count from the input's start */
    j.next_read = j.next_write = skipped;
    j.start = cli_now();
    j.draw = isatty(STDERR_FILENO);
    batch_signals_install();
    rc = run_job(&j);
    batch_signals_restore();
    double seconds = cli_now() - j.start;
    fprintf(stderr,
            "batch: %lld requests (%lld rejected), %lld prompt tokens (%lld cached), %lld output tokens, %.2f s, "
            "%.1f output tok/s\n",
            (long long)(j.next_write - skipped), (long long)j.n_rejected, (long long)j.prompt_tokens,
            (long long)j.cached_tokens, (long long)j.output_tokens, seconds,
            seconds > 0 ? (double)j.output_tokens / seconds : 0.0);
close_engine:
    nl_engine_close(j.engine);
    if (j.slots)
        for (int64_t k = 0; k < j.window; k++) {
            free(j.slots[k].out);
            batch_meta_free(&j.slots[k].meta);
        }
    free(j.slots);
close_files:
    free(j.buf);
    free(j.wbuf);
    if (j.in && j.in != stdin) fclose(j.in);
    if (j.out_fd >= 0 && j.out_fd != STDOUT_FILENO && close(j.out_fd) != 0 && rc == 0) {
        fprintf(stderr, "nanollm-launch: batch: writing %s failed: %m\n", out_path);
        rc = 2;
    }
    return rc;
}
