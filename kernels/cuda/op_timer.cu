/* op_timer.cu — where the GPU time of an eager forward goes, op by op
 * (NANOLLM_PROFILE=ops): an event recorded on the backend's stream at each
 * mark, the time between two marks charged to the first one's tag.
 *
 * The events are created on the first mark, so a run that does not profile
 * never has them.  A mark costs one cudaEventRecord; the intervals include
 * any gap in which the GPU waited for the host to launch the next kernel,
 * which is what an eager step costs, and are read only at collect, after one
 * synchronisation, so the marks do not serialise the step.
 */
#include <stdlib.h>

#include "kernels/cuda/cuda_common.cuh"

struct cuda_op_timer {
    cudaEvent_t events[NL_TIMER_MAX_MARKS + 1]; /* the last ends the last interval */
    int32_t tags[NL_TIMER_MAX_MARKS];
    int32_t n_marks;
};

static nl_status timer_create(cuda_backend *be)
{
    cuda_op_timer *t = (cuda_op_timer *)calloc(1, sizeof *t);
    if (!t) return nl_error(NL_ERR_NOMEM, "cuda op timer");
    be->timer = t;
    for (int i = 0; i <= NL_TIMER_MAX_MARKS; i++)
        NL_CUDA_CHECK(cudaEventCreate(&t->events[i]));
    return NL_OK;
}

void cuda_timer_release(cuda_backend *be)
{
    cuda_op_timer *t = be->timer;
    if (!t) return;
    for (int i = 0; i <= NL_TIMER_MAX_MARKS; i++)
        if (t->events[i]) cudaEventDestroy(t->events[i]);
    free(t);
    be->timer = NULL;
}

nl_status cuda_timer_mark(nl_backend *b, int32_t tag)
{
    cuda_backend *be = cuda_be(b);
    if (!be->timer) NL_TRY(timer_create(be));
    cuda_op_timer *t = be->timer;
    if (t->n_marks == NL_TIMER_MAX_MARKS)
        return nl_error(NL_ERR_INVALID_ARG, "op timer: more than %d marks in one step", NL_TIMER_MAX_MARKS);
    NL_CUDA_CHECK(cudaEventRecord(t->events[t->n_marks], be->stream));
    t->tags[t->n_marks++] = tag;
    return NL_OK;
}

nl_status cuda_timer_collect(nl_backend *b, double *secs, int32_t n_tags)
{
    cuda_backend *be = cuda_be(b);
    cuda_op_timer *t = be->timer;
    if (!t || t->n_marks == 0) return NL_OK;
    int32_t n = t->n_marks;
    t->n_marks = 0;
    NL_CUDA_CHECK(cudaEventRecord(t->events[n], be->stream));
    NL_CUDA_CHECK(cudaEventSynchronize(t->events[n]));
    for (int32_t i = 0; i < n; i++) {
        float ms = 0;
        NL_CUDA_CHECK(cudaEventElapsedTime(&ms, t->events[i], t->events[i + 1]));
        if (t->tags[i] >= 0 && t->tags[i] < n_tags) secs[t->tags[i]] += 1e-3 * ms;
    }
    return NL_OK;
}
