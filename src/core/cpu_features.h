#pragma once
// What the CPU we run on can do; kernels pick their implementation from this once.
#include <string>

namespace moe {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx_vnni = false;

  bool has_avx2_fma() const { return avx2 && fma && f16c; }
  bool has_avx512() const { return avx512f && avx512bw && avx512vl; }
  std::string describe() const;
};

// Detected once; setting MOENGINE_CPU=generic|avx2|avx512 (AVX-512 without BF16) caps what is reported, so the
// slower paths can be run and compared on a machine that has the faster ones.
const CpuFeatures& cpu_features();

}  // namespace moe
