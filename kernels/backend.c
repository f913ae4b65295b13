/* backend.c — backend helpers that do not depend on which backends were built.
 *
 * Without the CUDA backend there are no CUDA devices; the CUDA build
 * defines nl_cuda_device_count in kernels/cuda instead.
 */
#include "config.h"

#include "kernels/kernels.h"

#ifndef NL_HAVE_CUDA
int nl_cuda_device_count(void)
{
    return 0;
}
#endif
