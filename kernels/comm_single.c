/* comm_single.c — the communicator of a single worker: nothing to combine. */
#include <string.h>

#include "kernels/comm.h"

static nl_status single_all_reduce(nl_comm *c, void *buf, size_t count, nl_dtype dtype)
{
    return NL_OK;
}

/* With one rank the all-gather is the identity, but send and recv are
 * backend memory the host cannot copy; a single-rank caller uses send
 * directly. */
static nl_status single_all_gather(nl_comm *c, const void *send, void *recv, size_t count,
                                   nl_dtype dtype)
{
    if (send != recv)
        return nl_error(NL_ERR_INVALID_ARG, "comm: a single-rank all-gather must be in place");
    return NL_OK;
}

static void single_destroy(nl_comm *c) {}

static const nl_comm_ops single_ops = {
    .all_reduce_sum = single_all_reduce,
    .all_gather = single_all_gather,
    .destroy = single_destroy,
};

nl_comm *nl_comm_single(void)
{
    static nl_comm single = {.ops = &single_ops, .rank = 0, .size = 1};
    return &single;
}
