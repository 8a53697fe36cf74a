#pragma once
// Target attributes for the AVX-512 kernel files (F, BW, VL and VNNI). As with the AVX2
// files (see matmul_avx2.h), every function carries its own attribute instead of a
// file-wide pragma. The set includes AVX2's, so the AVX2 helpers inline into these.
#include <immintrin.h>

#define MOE_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define MOE_AVX512 __attribute__((target(MOE_AVX512_TARGET)))
#define MOE_AVX512_INLINE __attribute__((target(MOE_AVX512_TARGET), always_inline)) inline

MOE_AVX512_INLINE __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// acc += w (unsigned bytes) . the four signed codes at p broadcast to every lane: the
// broadcast folded into vpdpbusd as a {1to16} memory operand, which GCC 12 does not emit
// from the intrinsics (one instruction instead of two for each four codes of a token).
MOE_AVX512_INLINE __m512i dpbusd_bcast4(__m512i acc, __m512i w, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}
