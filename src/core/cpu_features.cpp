#include "core/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace moe {
namespace {

bool os_saves_avx_state(uint64_t mask) {
  uint32_t eax, edx;
  __asm__("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  const uint64_t xcr0 = (uint64_t(edx) << 32) | eax;
  return (xcr0 & mask) == mask;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  const bool ymm_ok = osxsave && os_saves_avx_state(0x6);
  const bool zmm_ok = osxsave && os_saves_avx_state(0xe6);
  f.fma = ymm_ok && (c & bit_FMA);
  f.f16c = ymm_ok && (c & bit_F16C);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm_ok && (b & bit_AVX2);
    f.avx512f = zmm_ok && (b & bit_AVX512F);
    f.avx512bw = zmm_ok && (b & bit_AVX512BW);
    f.avx512vl = zmm_ok && (b & bit_AVX512VL);
    f.avx512vnni = zmm_ok && (c & bit_AVX512VNNI);
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx_vnni = ymm_ok && (a & (1u << 4));
    f.avx512bf16 = zmm_ok && (a & (1u << 5));
  }
  if (const char* cap = std::getenv("MOENGINE_CPU")) {
    const bool generic = std::strcmp(cap, "generic") == 0;
    const bool avx2 = std::strcmp(cap, "avx2") == 0;
    if (std::strcmp(cap, "avx512") == 0) f.avx512bf16 = false;
    if (generic || avx2) {
      f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = false;
    }
    if (generic) f.avx2 = f.fma = f.f16c = f.avx_vnni = false;
  }
  return f;
}

}  // namespace

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx_vnni, "avx-vnni");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vnni, "avx512-vnni");
  add(avx512bf16, "avx512-bf16");
  return s.empty() ? "generic x86-64" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace moe
