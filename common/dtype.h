/* dtype.h — element types and bf16/fp16 <-> fp32 conversion on the host. */
#ifndef NL_COMMON_DTYPE_H
#define NL_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum nl_dtype {
    NL_DTYPE_F32 = 0,
    NL_DTYPE_F16,
    NL_DTYPE_BF16,
    NL_DTYPE_I32,
    NL_DTYPE_F8_E4M3, /* OCP e4m3 "FN": no infinities, 0x7f is NaN, max 448 */
} nl_dtype;

static inline size_t nl_dtype_size(nl_dtype t)
{
    return t == NL_DTYPE_F8_E4M3 ? 1 : t == NL_DTYPE_F16 || t == NL_DTYPE_BF16 ? 2 : 4;
}

const char *nl_dtype_name(nl_dtype t);

static inline float nl_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, as torch does; NaN stays NaN. */
static inline uint16_t nl_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float nl_f16_to_f32(uint16_t h);
uint16_t nl_f32_to_f16(float f);

/* e4m3 as the KV cache stores it: round to nearest even, saturating at
 * +-448 (as CUDA's __NV_SATFINITE conversion does, so both backends store
 * the same byte); NaN stays NaN. */
float nl_f8e4m3_to_f32(uint8_t v);
uint8_t nl_f32_to_f8e4m3(float f);

/* Converts n elements of src (of type src_type) to fp32. */
void nl_convert_to_f32(float *dst, const void *src, nl_dtype src_type, size_t n);

#endif
