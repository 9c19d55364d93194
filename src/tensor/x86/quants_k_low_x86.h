/* quants_k_low_x86.h -- what the AVX2 and AVX-512 row dots of Q2_K, Q3_K
 * and IQ4_XS (quants_k_low_avx2.c, quants_k_low_avx512.c) share: Q3_K's
 * scale unpacking. Included only by files compiled for AVX2 or more. */
#ifndef LOCKSTEP_TENSOR_QUANTS_K_LOW_X86_H
#define LOCKSTEP_TENSOR_QUANTS_K_LOW_X86_H

#include "x86.h"

#include <immintrin.h>
#include <string.h>

/* Q3_K's 16 scales (-32..31) from their 12 packed bytes, as bytes in
 * group order: words 0, 1 take their low bits from the low nibbles of
 * bytes 0..7, words 2, 3 from the high nibbles; word i its high bits from
 * bits 2i, 2i + 1 of bytes 8..11. */
static inline __m128i q3_scales(const uint8_t *packed) {
    uint32_t p[3];
    memcpy(p, packed, sizeof(p));
    __m128i low =
        _mm_and_si128(_mm_setr_epi32((int)p[0], (int)p[1], (int)(p[0] >> 4), (int)(p[1] >> 4)),
                      _mm_set1_epi8(15));
    __m128i high = _mm_srlv_epi32(_mm_set1_epi32((int)p[2]), _mm_setr_epi32(0, 2, 4, 6));
    high = _mm_and_si128(_mm_slli_epi32(high, 4), _mm_set1_epi8(0x30));
    return _mm_sub_epi8(_mm_or_si128(low, high), _mm_set1_epi8(32));
}

#endif
