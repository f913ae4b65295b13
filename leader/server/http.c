/* http.c — routing, authentication, bodies and the waits of each request
 * (see http.h). */
#define _GNU_SOURCE
#include "leader/server/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "leader/server/request.h"
#include "leader/server/response.h"

#define HTTP_WAIT_SLICE_S 0.1  /* how often a waiting request looks at its socket */
/* An idle keep-alive connection is closed after this; long enough that a
 * long generation (no bytes while a whole response is computed) is never cut. */
#define HTTP_IDLE_TIMEOUT_S 3600
#define HTTP_MAX_CONNECTIONS 1024 /* a thread each */

struct http_server {
    struct MHD_Daemon *daemon;
    engine_loop *loop;
    metrics *metrics;
    char *api_key;
    char *model;
    size_t max_body;
    uint16_t port;
    int64_t started;
    atomic_int busy;
    atomic_bool draining;  /* quiesced: shutting down                 */
    atomic_bool stopping;  /* closing every connection now             */
    atomic_uint_fast64_t next_id;
};

/* Per request: the body as it arrives. */
typedef struct conn_ctx {
    http_server *srv;
    char *body;
    size_t len, cap;
    bool too_large;
    bool http11;  /* may be sent an interim 1xx response */
} conn_ctx;

/* ---- plain responses ----------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, char *body)
{
    if (!body) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        body = strdup("{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                      "\"param\": null, \"code\": null}}");
        if (!body) return MHD_NO;
        type = "application/json";
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, json_t *o)
{
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return reply(c, status, "application/json", body);
}

static enum MHD_Result reply_error(struct MHD_Connection *c, const api_error *err)
{
    return reply(c, (unsigned)err->status, "application/json", api_error_body(err));
}

static enum MHD_Result reply_errorf(struct MHD_Connection *c, int status, const char *type, const char *code,
                                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result reply_errorf(struct MHD_Connection *c, int status, const char *type, const char *code,
                                    const char *fmt, ...)
{
    api_error err;
    char msg[sizeof(err.message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    api_error_set(&err, status, type, "", code, "%s", msg);
    return reply_error(c, &err);
}

/* ---- the client's socket ------------------------------------------------------------ */

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

/* Watches one request's client for going away.
 *
 * A peer's FIN (POLLRDHUP) alone does not say it: a client that shut down
 * only its writing side after the request (shutdown(SHUT_WR), `nc -N`)
 * still reads, and its response must come.  What tells a closed socket
 * from a half-closed one is writing to it: a closed one answers with a
 * reset, which the next look sees as POLLERR/POLLHUP.  A stream writes
 * every chunk anyway.  A request that has written nothing yet writes one
 * interim "100 Continue", which an HTTP/1.1 client reads past (RFC 9110
 * 15.2: it must accept 1xx responses it did not ask for); an HTTP/1.0
 * client must not get one, so there a FIN is left alone and a client that
 * closed is noticed when its response is written. */
typedef struct client_watch {
    int fd;          /* -1: unknown, never gone              */
    bool may_probe;  /* nothing of the response written yet, HTTP/1.1 */
} client_watch;

static bool client_gone(client_watch *w)
{
    if (w->fd < 0) return false;
    struct pollfd p = {.fd = w->fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
    if (!(p.revents & POLLRDHUP) || !w->may_probe) return false;
    w->may_probe = false;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return send(w->fd, probe, sizeof(probe) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
}

/* ---- authentication --------------------------------------------------------------- */

/* Compares in time that depends only on the key's length, never on how
 * much of a guess was right. */
static bool key_equal(const char *given, const char *key)
{
    size_t n = strlen(key), m = strlen(given);
    volatile unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

static bool authorized(http_server *srv, struct MHD_Connection *c)
{
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    return key_equal(h, srv->api_key);
}

/* ---- generation: waiting and streaming ------------------------------------------------ */

/* A growing output buffer. */
typedef struct out_buf {
    char *data;
    size_t len, cap;
} out_buf;

static bool out_append(out_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return false;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

static bool out_take(out_buf *b, char *s)
{
    bool ok = s && out_append(b, s, strlen(s));
    free(s);
    return ok;
}

typedef struct sse_stream {
    http_server *srv;
    server_job *job;
    client_watch watch;    /* may_probe false: the headers are out     */
    out_buf out;
    size_t sent;           /* bytes of out already handed to MHD       */
    size_t text_offset;    /* completions' logprobs text_offset        */
    bool ended;            /* [DONE] is in out                         */
    bool failed;
} sse_stream;

/* Turns one update into SSE events; the last one ends the stream. */
static void sse_emit(sse_stream *s, job_update *u)
{
    server_job *job = s->job;
    const char *model = s->srv->model;
    bool ok = true;
    if (u->text_len > 0 || u->logprobs)
        ok = out_take(&s->out, response_chunk(job, model, u->text, u->text_len, u->logprobs, NL_FINISH_NONE,
                                              &s->text_offset));
    if (ok && u->state == JOB_DONE) {
        if (u->finish == NL_FINISH_ERROR) {
            ok = out_take(&s->out, response_error_event(&u->error));
        } else {
            ok = out_take(&s->out, response_chunk(job, model, NULL, 0, NULL, u->finish, &s->text_offset));
            if (ok && job->req.include_usage) ok = out_take(&s->out, response_usage_chunk(job, model, u));
        }
        if (ok) ok = out_append(&s->out, RESPONSE_DONE_EVENT, strlen(RESPONSE_DONE_EVENT));
        s->ended = true;
    }
    if (!ok) s->failed = true;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    sse_stream *s = cls;
    for (;;) {
        if (s->failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (s->sent < s->out.len) {
            size_t n = s->out.len - s->sent;
            if (n > max) n = max;
            memcpy(buf, s->out.data + s->sent, n);
            s->sent += n;
            if (s->sent == s->out.len) s->sent = s->out.len = 0;
            return (ssize_t)n;
        }
        if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        /* Looked at before every wait, not only after an idle one: a stream
         * that always has news would otherwise notice a closed client only
         * when a write fails.  (sse_free cancels the job.) */
        if (atomic_load(&s->srv->stopping) || client_gone(&s->watch)) return MHD_CONTENT_READER_END_WITH_ERROR;
        job_update u;
        if (server_job_take(s->job, HTTP_WAIT_SLICE_S, &u)) {
            sse_emit(s, &u);
            job_update_clear(&u);
        }
    }
}

static void sse_free(void *cls)
{
    sse_stream *s = cls;
    if (!s->ended) engine_loop_cancel(s->srv->loop, s->job);
    server_job_unref(s->job);
    free(s->out.data);
    free(s);
}

static enum MHD_Result start_stream(http_server *srv, struct MHD_Connection *c, server_job *job, job_update *first,
                                    int fd)
{
    sse_stream *s = calloc(1, sizeof(*s));
    if (!s) {
        engine_loop_cancel(srv->loop, job);
        server_job_unref(job);
        return reply(c, 500, NULL, NULL);
    }
    s->srv = srv;
    s->job = job;
    s->watch = (client_watch){.fd = fd, .may_probe = false};
    if (job->req.kind == API_CHAT && !out_take(&s->out, response_role_chunk(job, srv->model))) s->failed = true;
    sse_emit(s, first);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, s, sse_free);
    if (!r) {
        sse_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

/* Waits for the next update of job; false when the client went away or
 * the server stops (the job is then cancelled). */
static bool wait_update(http_server *srv, server_job *job, client_watch *watch, job_update *u)
{
    for (;;) {
        /* Before every wait: while tokens keep coming the wait never idles. */
        if (client_gone(watch) || atomic_load(&srv->stopping)) {
            engine_loop_cancel(srv->loop, job);
            return false;
        }
        if (server_job_take(job, HTTP_WAIT_SLICE_S, u)) return true;
    }
}

static enum MHD_Result handle_job(http_server *srv, struct MHD_Connection *c, api_kind kind, conn_ctx *ctx)
{
    api_request req;
    api_error err;
    if (!api_request_parse(kind, ctx->body ? ctx->body : "", ctx->len, srv->model, &req, &err))
        return reply_error(c, &err);
    server_job *job = server_job_create(&req);
    if (!job) return reply(c, 500, NULL, NULL);
    uint64_t serial = atomic_fetch_add(&srv->next_id, 1);
    snprintf(job->id, sizeof(job->id), "%s-%016llx", kind == API_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)serial);
    job->created = (int64_t)time(NULL);
    job->t_arrival = server_now();
    if (!engine_loop_submit(srv->loop, job, &err)) {
        server_job_unref(job);
        return reply_error(c, &err);
    }
    int fd = conn_fd(c);
    client_watch watch = {.fd = fd, .may_probe = ctx->http11};
    job_update u;
    do {
        if (!wait_update(srv, job, &watch, &u)) {
            server_job_unref(job);
            return MHD_NO;
        }
        if (u.state == JOB_QUEUED) job_update_clear(&u);
    } while (u.state == JOB_QUEUED);
    if (u.state == JOB_REFUSED) {
        enum MHD_Result ok = reply_error(c, &u.error);
        job_update_clear(&u);
        server_job_unref(job);
        return ok;
    }
    if (kind == API_TOKENIZE || kind == API_DETOKENIZE) {
        enum MHD_Result ok = reply_json(c, 200, json_incref(u.reply));
        job_update_clear(&u);
        server_job_unref(job);
        return ok;
    }
    if (job->req.stream) {
        enum MHD_Result ok = start_stream(srv, c, job, &u, fd);
        job_update_clear(&u);
        return ok;
    }
    /* A whole response: gather everything until the end. */
    out_buf text = {0};
    json_t *entries = json_array();
    for (;;) {
        if (u.text) out_append(&text, u.text, u.text_len);
        if (u.logprobs) json_array_extend(entries, u.logprobs);
        if (u.state == JOB_DONE) break;
        job_update_clear(&u);
        if (!wait_update(srv, job, &watch, &u)) {
            free(text.data);
            json_decref(entries);
            server_job_unref(job);
            return MHD_NO;
        }
    }
    enum MHD_Result ok;
    if (u.finish == NL_FINISH_ERROR || (u.finish == NL_FINISH_ABORT && u.error.status))
        ok = reply_error(c, &u.error);
    else
        ok = reply(c, 200, "application/json", response_body(job, srv->model, text.data, text.len, entries, &u));
    free(text.data);
    json_decref(entries);
    job_update_clear(&u);
    server_job_unref(job);
    return ok;
}

/* ---- the other routes -------------------------------------------------------------- */

static enum MHD_Result handle_models(http_server *srv, struct MHD_Connection *c)
{
    const nl_engine_info *info = engine_loop_info(srv->loop);
    return reply_json(c, 200,
                      json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:i}]}", "object", "list", "data", "id", srv->model,
                                "object", "model", "created", (json_int_t)srv->started, "owned_by", "nanollm",
                                "max_model_len", info->max_model_len));
}

static enum MHD_Result handle_health(http_server *srv, struct MHD_Connection *c)
{
    char why[640];
    if (!engine_loop_healthy(srv->loop, why, sizeof(why)))
        return reply_errorf(c, 503, "service_unavailable", "engine_failed", "the engine has failed: %s", why);
    if (atomic_load(&srv->draining))
        return reply_errorf(c, 503, "service_unavailable", "shutting_down", "the server is shutting down");
    return reply_json(c, 200, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result handle_metrics(http_server *srv, struct MHD_Connection *c)
{
    return reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", metrics_render(srv->metrics, srv->model));
}

typedef struct route {
    const char *method, *path;
    int kind; /* an api_kind, or one of the GET routes below */
} route;

enum { ROUTE_MODELS = 100, ROUTE_HEALTH, ROUTE_METRICS };

static const route routes[] = {
    {"POST", "/v1/completions", API_COMPLETIONS}, {"POST", "/v1/chat/completions", API_CHAT},
    {"POST", "/tokenize", API_TOKENIZE},          {"POST", "/detokenize", API_DETOKENIZE},
    {"GET", "/v1/models", ROUTE_MODELS},          {"GET", "/health", ROUTE_HEALTH},
    {"GET", "/metrics", ROUTE_METRICS},
};

static enum MHD_Result dispatch(http_server *srv, struct MHD_Connection *c, const char *url, const char *method,
                                conn_ctx *ctx)
{
    const route *found = NULL;
    bool path_known = false;
    for (size_t k = 0; k < sizeof(routes) / sizeof(routes[0]); k++) {
        if (strcmp(url, routes[k].path) != 0) continue;
        path_known = true;
        if (strcmp(method, routes[k].method) == 0) found = &routes[k];
    }
    if (found && found->kind == ROUTE_HEALTH) return handle_health(srv, c);
    if (!authorized(srv, c))
        return reply_errorf(c, 401, "invalid_request_error", "invalid_api_key",
                            "missing or incorrect API key: send 'Authorization: Bearer <key>'");
    if (!found) {
        if (path_known)
            return reply_errorf(c, 405, "invalid_request_error", "method_not_allowed",
                                "%s is not allowed on %s", method, url);
        return reply_errorf(c, 404, "invalid_request_error", "not_found", "no route %s %s", method, url);
    }
    if (ctx->too_large)
        return reply_errorf(c, 413, "invalid_request_error", "request_too_large",
                            "the request body is larger than the limit of %zu bytes", srv->max_body);
    switch (found->kind) {
    case ROUTE_MODELS: return handle_models(srv, c);
    case ROUTE_METRICS: return handle_metrics(srv, c);
    default: return handle_job(srv, c, (api_kind)found->kind, ctx);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **con_cls)
{
    http_server *srv = cls;
    conn_ctx *ctx = *con_cls;
    if (!ctx) {
        ctx = calloc(1, sizeof(*ctx));
        if (!ctx) return MHD_NO;
        ctx->srv = srv;
        ctx->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        *con_cls = ctx;
        atomic_fetch_add(&srv->busy, 1);
        return MHD_YES;
    }
    if (*upload_size > 0) {
        /* Past the limit the body is still read, so the client gets the 413
         * instead of a connection reset in the middle of its upload. */
        size_t n = *upload_size;
        *upload_size = 0;
        if (ctx->too_large || ctx->len + n > srv->max_body) {
            ctx->too_large = true;
            free(ctx->body);
            ctx->body = NULL;
            ctx->len = ctx->cap = 0;
            return MHD_YES;
        }
        if (ctx->len + n + 1 > ctx->cap) {
            size_t cap = ctx->cap ? ctx->cap : 4096;
            while (cap < ctx->len + n + 1) cap *= 2;
            char *p = realloc(ctx->body, cap);
            if (!p) return MHD_NO;
            ctx->body = p;
            ctx->cap = cap;
        }
        memcpy(ctx->body + ctx->len, upload_data, n);
        ctx->len += n;
        ctx->body[ctx->len] = '\0';
        return MHD_YES;
    }
    return dispatch(srv, c, url, method, ctx);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    http_server *srv = cls;
    conn_ctx *ctx = *con_cls;
    if (!ctx) return;
    free(ctx->body);
    free(ctx);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->busy, 1);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && msg[n - 1] == '\n') msg[--n] = '\0';
    fprintf(stderr, "nanollm-launch: serve: http: %s\n", msg);
}

/* ---- life --------------------------------------------------------------------------- */

bool http_start(const http_options *opt, engine_loop *loop, metrics *m, http_server **out, char *why,
                size_t why_len)
{
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(opt->host, NULL, &hints, &ai);
    if (gai != 0 || !ai) {
        snprintf(why, why_len, "--host %s: %s", opt->host, gai ? gai_strerror(gai) : "no address");
        return false;
    }
    struct sockaddr_storage addr;
    memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons(opt->port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons(opt->port);

    http_server *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        snprintf(why, why_len, "out of memory");
        return false;
    }
    srv->loop = loop;
    srv->metrics = m;
    srv->api_key = opt->api_key ? strdup(opt->api_key) : NULL;
    srv->model = strdup(opt->model_name);
    srv->max_body = opt->max_body;
    srv->started = (int64_t)time(NULL);
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) r = (uint64_t)time(NULL);
    atomic_init(&srv->next_id, r);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    srv->daemon = MHD_start_daemon(flags, opt->port, NULL, NULL, on_request, srv,
                                   MHD_OPTION_EXTERNAL_LOGGER, on_log, srv,
                                   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                   MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                   MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
                                   MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
                                   MHD_OPTION_END);
    if (!srv->daemon || !srv->model) {
        snprintf(why, why_len, "cannot listen on %s port %u (in use, or not an address of this machine?)",
                 opt->host, (unsigned)opt->port);
        http_stop(srv);
        return false;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : opt->port;
    *out = srv;
    return true;
}

uint16_t http_port(const http_server *srv)
{
    return srv->port;
}

void http_quiesce(http_server *srv)
{
    atomic_store(&srv->draining, true);
    MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

int32_t http_busy(http_server *srv)
{
    return atomic_load(&srv->busy);
}

void http_stop(http_server *srv)
{
    if (!srv) return;
    atomic_store(&srv->stopping, true);
    if (srv->daemon) MHD_stop_daemon(srv->daemon);
    free(srv->api_key);
    free(srv->model);
    free(srv);
}
