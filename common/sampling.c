/* sampling.c — the public sampling parameters as the sampler sees them. */
#include "common/sampling.h"

nl_sample_row sampling_row_from_params(const nl_sampling_params *params, uint64_t seed,
                                       uint64_t generated)
{
    return (nl_sample_row){
        .temperature = params->temperature,
        .top_p = params->top_p,
        .min_p = params->min_p,
        .top_k = params->top_k,
        .seed = seed,
        .offset = generated,
        .n_logprobs = params->logprobs,
    };
}
