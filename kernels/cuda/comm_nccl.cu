/* comm_nccl.cu — kernels/comm.h over NCCL: all-reduce of row-parallel
 * outputs and the all-gather of vocab-parallel logits, both on the
 * backend's stream.
 *
 * NVLink SHARP (NVLS) stays off unless the user set NCCL_NVLS_ENABLE: it
 * reserves a large multicast buffer per communicator and some hosts lend
 * GPUs whose multicast set-up fails.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

extern "C" {
#include "kernels/cuda/comm_nccl.h"
}

#define NL_NCCL_CHECK(call)                                                       \
    do {                                                                          \
        ncclResult_t nl_e_ = (call);                                              \
        if (nl_e_ != ncclSuccess) return NL_CUDA_FAIL(#call, ncclGetErrorString(nl_e_)); \
    } while (0)

typedef struct nccl_comm {
    nl_comm base;
    ncclComm_t comm;
    cudaStream_t stream;
} nccl_comm;

static nl_status nccl_type(nl_dtype t, ncclDataType_t *out)
{
    switch (t) {
    case NL_DTYPE_F32: *out = ncclFloat32; return NL_OK;
    case NL_DTYPE_BF16: *out = ncclBfloat16; return NL_OK;
    case NL_DTYPE_F16: *out = ncclFloat16; return NL_OK;
    case NL_DTYPE_I32: *out = ncclInt32; return NL_OK;
    }
    return nl_error(NL_ERR_INVALID_ARG, "nccl: unknown dtype %d", (int)t);
}

static nl_status nccl_all_reduce(nl_comm *c, void *buf, size_t count, nl_dtype dtype)
{
    nccl_comm *nc = (nccl_comm *)c;
    if (count == 0) return NL_OK;
    ncclDataType_t t;
    NL_TRY(nccl_type(dtype, &t));
    NL_NCCL_CHECK(ncclAllReduce(buf, buf, count, t, ncclSum, nc->comm, nc->stream));
    return NL_OK;
}

static nl_status nccl_all_gather(nl_comm *c, const void *send, void *recv, size_t count,
                                 nl_dtype dtype)
{
    nccl_comm *nc = (nccl_comm *)c;
    if (count == 0) return NL_OK;
    ncclDataType_t t;
    NL_TRY(nccl_type(dtype, &t));
    NL_NCCL_CHECK(ncclAllGather(send, recv, count, t, nc->comm, nc->stream));
    return NL_OK;
}

static void nccl_destroy(nl_comm *c)
{
    nccl_comm *nc = (nccl_comm *)c;
    if (!nc) return;
    if (nc->comm) ncclCommDestroy(nc->comm);
    free(nc);
}

static const nl_comm_ops nccl_ops = {
    .all_reduce_sum = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .destroy = nccl_destroy,
};

extern "C" nl_status nl_comm_nccl_unique_id(void *out)
{
    static_assert(sizeof(ncclUniqueId) == NL_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size");
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    ncclUniqueId id;
    NL_NCCL_CHECK(ncclGetUniqueId(&id));
    memcpy(out, &id, sizeof id);
    return NL_OK;
}

extern "C" nl_status nl_comm_nccl_create(int rank, int size, const void *unique_id, nl_backend *be,
                                         nl_comm **out)
{
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size)
        return nl_error(NL_ERR_INVALID_ARG, "nccl: rank %d of %d", rank, size);
    if (strcmp(be->ops->name, "cuda") != 0)
        return nl_error(NL_ERR_INVALID_ARG, "nccl: backend '%s' is not cuda", be->ops->name);
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    nccl_comm *nc = (nccl_comm *)calloc(1, sizeof *nc);
    if (!nc) return nl_error(NL_ERR_NOMEM, "nccl: communicator");
    nc->base.ops = &nccl_ops;
    nc->base.rank = rank;
    nc->base.size = size;
    nc->stream = (cudaStream_t)nl_backend_cuda_stream(be);
    ncclUniqueId id;
    memcpy(&id, unique_id, sizeof id);
    cudaError_t ce = cudaSetDevice(nl_backend_cuda_device(be));
    if (ce != cudaSuccess) {
        free(nc);
        return NL_CUDA_FAIL("cudaSetDevice", cudaGetErrorString(ce));
    }
    ncclResult_t r = ncclCommInitRank(&nc->comm, size, id, rank);
    if (r != ncclSuccess) {
        free(nc);
        return NL_CUDA_FAIL("ncclCommInitRank", ncclGetErrorString(r));
    }
    *out = &nc->base;
    return NL_OK;
}
