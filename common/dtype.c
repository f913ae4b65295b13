/* dtype.c — host-side element conversions. */
#include "common/dtype.h"

#include <math.h>

const char *nl_dtype_name(nl_dtype t)
{
    switch (t) {
    case NL_DTYPE_F32: return "F32";
    case NL_DTYPE_F16: return "F16";
    case NL_DTYPE_BF16: return "BF16";
    case NL_DTYPE_I32: return "I32";
    case NL_DTYPE_F8_E4M3: return "F8_E4M3";
    }
    return "?";
}

float nl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t nl_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) /* subnormal: round to a multiple of 2^-24 */
        return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
    uint32_t e = ((u >> 23) & 0xff) - 112, m = u & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float nl_f8e4m3_to_f32(uint8_t v)
{
    unsigned exp = (v >> 3) & 0xf, man = v & 7;
    float a;
    if (exp == 15 && man == 7) a = NAN;
    else if (exp == 0) a = ldexpf((float)man, -9);           /* subnormal: man / 8 * 2^-6 */
    else a = ldexpf((float)(8 + man), (int)exp - 10);         /* (1 + man / 8) * 2^(exp - 7) */
    return (v & 0x80) ? -a : a;
}

uint8_t nl_f32_to_f8e4m3(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    float a = fabsf(f);
    if (isnan(f)) return (uint8_t)(sign | 0x7f);
    if (a >= 448.0f) return (uint8_t)(sign | 0x7e);
    if (a < 0.015625f) /* below 2^-6: a multiple of 2^-9 (8 rounds up to 2^-6 itself) */
        return (uint8_t)(sign | (uint32_t)nearbyintf(a * 512.0f));
    memcpy(&u, &a, sizeof u);
    uint32_t exp = ((u >> 23) & 0xff) - 120, man = u & 0x7fffff; /* e4m3 bias 7 */
    uint32_t q = (exp << 3) | (man >> 20), rest = man & 0xfffff;
    if (rest > 0x80000 || (rest == 0x80000 && (q & 1))) q++; /* a carry moves the exponent */
    return (uint8_t)(sign | (q > 0x7e ? 0x7e : q));
}

/* src may be unaligned: nothing in a safetensors file aligns a tensor's
 * data, so every element is loaded with memcpy (which compiles to a plain
 * load where alignment does not matter). */
void nl_convert_to_f32(float *dst, const void *src, nl_dtype src_type, size_t n)
{
    const uint8_t *p = src;
    uint16_t h;
    int32_t k;
    switch (src_type) {
    case NL_DTYPE_F32: memcpy(dst, src, n * sizeof(float)); break;
    case NL_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, sizeof h);
            dst[i] = nl_bf16_to_f32(h);
        }
        break;
    case NL_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, p + 2 * i, sizeof h);
            dst[i] = nl_f16_to_f32(h);
        }
        break;
    case NL_DTYPE_I32:
        for (size_t i = 0; i < n; i++) {
            memcpy(&k, p + 4 * i, sizeof k);
            dst[i] = (float)k;
        }
        break;
    case NL_DTYPE_F8_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = nl_f8e4m3_to_f32(p[i]);
        break;
    }
}
