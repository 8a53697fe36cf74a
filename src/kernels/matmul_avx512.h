#pragma once
// Target attributes for the AVX-512 kernel files (F, BW, VL and VNNI). As with the AVX2
// files (see matmul_avx2.h), every function carries its own attribute instead of a
// file-wide pragma. The set includes AVX2's, so the AVX2 helpers inline into these.
#include <immintrin.h>

#define MOE_AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define MOE_AVX512 __attribute__((target(MOE_AVX512_TARGET)))
#define MOE_AVX512_INLINE __attribute__((target(MOE_AVX512_TARGET), always_inline)) inline
