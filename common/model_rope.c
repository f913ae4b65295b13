/* model_rope.c — rotary inverse frequencies (see header).
 *
 * transformers computes the table in float32 tensors: the exponent 2i/d,
 * the power, its reciprocal and every llama3 step are float32 operations.
 * The same steps in float here give the same table (the power up to the
 * last bit of the platform's pow), so positions rotate as in the
 * reference.
 */
#include "common/model_rope.h"

#include <math.h>

/* Llama 3.1: wavelengths shorter than old_context / high_freq_factor are
 * kept, longer than old_context / low_freq_factor are stretched by factor,
 * and those between are interpolated linearly in old_context / wavelength. */
static float llama3_scale(float inv_freq, const nl_rope_scaling *r)
{
    const float old_context = (float)r->original_max_position_embeddings;
    const float low_wavelen = old_context / r->low_freq_factor;
    const float high_wavelen = old_context / r->high_freq_factor;
    const float wavelen = 6.28318530717958647692f /* 2 pi, as float32 */ / inv_freq;
    if (wavelen < high_wavelen) return inv_freq;
    if (wavelen > low_wavelen) return inv_freq / r->factor;
    const float smooth = (old_context / wavelen - r->low_freq_factor) /
                         (r->high_freq_factor - r->low_freq_factor);
    return (1.0f - smooth) * inv_freq / r->factor + smooth * inv_freq;
}

void model_rope_inv_freq(const nl_model_config *cfg, float *inv_freq)
{
    const int32_t dim = cfg->head_dim;
    for (int32_t i = 0; i < dim / 2; i++) {
        float exponent = (float)(2 * i) / (float)dim;
        float f = 1.0f / (float)pow((double)cfg->rope_theta, (double)exponent);
        inv_freq[i] = cfg->rope_scaling.type == NL_ROPE_LLAMA3 ? llama3_scale(f, &cfg->rope_scaling) : f;
    }
}
