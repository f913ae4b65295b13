/* engine_results.c — how requests end and what the caller gets back:
 * finishing (with the result filled), abort, the result of a finished
 * request, the result so far of a running one (peek), and release, which
 * frees a request whatever its state. */
#include "common/status.h"
#include "leader/engine/engine_state.h"

request *engine_find_request(const nl_engine *e, uint64_t id)
{
    int64_t v;
    return u64map_get(&e->requests, id, &v) ? (request *)(uintptr_t)v : NULL;
}

void engine_finish_request(nl_engine *e, request *r, nl_finish_reason reason)
{
    scheduler_finish(e->sch, &r->seq, reason);
    request_fill_result(r);
}

nl_status nl_engine_abort(nl_engine *e, uint64_t request_id)
{
    request *r = engine_find_request(e, request_id);
    if (!r) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown", (unsigned long long)request_id);
    if (r->seq.status != SEQ_FINISHED) engine_finish_request(e, r, NL_FINISH_ABORT);
    return NL_OK;
}

nl_status nl_engine_get_result(nl_engine *e, uint64_t request_id, const nl_result **out)
{
    *out = NULL;
    request *r = engine_find_request(e, request_id);
    if (!r) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    if (r->seq.status != SEQ_FINISHED)
        return nl_error(NL_ERR_NOT_FOUND, "request %llu: still running", (unsigned long long)request_id);
    *out = &r->result;
    return NL_OK;
}

nl_status nl_engine_peek(nl_engine *e, uint64_t request_id, const nl_result **out)
{
    *out = NULL;
    request *r = engine_find_request(e, request_id);
    if (!r) return nl_error(NL_ERR_NOT_FOUND, "request %llu: unknown or released", (unsigned long long)request_id);
    if (r->seq.status != SEQ_FINISHED) request_fill_result(r);
    *out = &r->result;
    return NL_OK;
}

void nl_engine_release(nl_engine *e, uint64_t request_id)
{
    request *r = engine_find_request(e, request_id);
    if (!r) return;
    if (r->seq.status != SEQ_FINISHED) scheduler_finish(e->sch, &r->seq, NL_FINISH_ABORT);
    u64map_remove(&e->requests, request_id);
    request_destroy(r);
}
