#include "checkpoint/weight_format.h"

#include "core/error.h"

namespace moe {

WeightFormat parse_weight_format(std::string_view text) {
  if (text == "auto") return {};
  if (text == "fp8" || text == "fp8_e4m3") return {WeightFormat::Fp8, GgmlType::F8_E4M3_B128};
  const auto t = parse_type_name(text);
  if (!t || *t == GgmlType::F8_E4M3_B128)
    fail("weight type '{}' is not known (auto, fp8, f32, f16, bf16, q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K, q6_K)",
         text);
  return {WeightFormat::Type, *t};
}

std::string weight_format_name(const WeightFormat& f) {
  switch (f.mode) {
    case WeightFormat::Auto: return "auto";
    case WeightFormat::Fp8: return "fp8";
    case WeightFormat::Type: break;
  }
  return std::string(type_name(f.type));
}

GgmlType storable_type(GgmlType t, int64_t ne0) {
  if (ne0 % traits(t).block_size == 0) return t;
  const GgmlType fallback = t == GgmlType::Q4_K   ? GgmlType::Q5_0
                            : t == GgmlType::Q5_K ? GgmlType::Q5_1
                                                  : GgmlType::Q8_0;
  if (traits(t).block_size == 256 && ne0 % 32 == 0) return fallback;
  return GgmlType::F16;
}

}  // namespace moe
