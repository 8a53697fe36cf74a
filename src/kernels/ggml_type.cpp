#include "kernels/ggml_type.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace moe {
namespace {

constexpr std::array<GgmlTypeTraits, 15> kTypes = {{
    {GgmlType::F32, "f32", 1, 4, true},
    {GgmlType::F16, "f16", 1, 2, true},
    {GgmlType::Q4_0, "q4_0", 32, 18, true},
    {GgmlType::Q4_1, "q4_1", 32, 20, true},
    {GgmlType::Q5_0, "q5_0", 32, 22, true},
    {GgmlType::Q5_1, "q5_1", 32, 24, true},
    {GgmlType::Q8_0, "q8_0", 32, 34, true},
    {GgmlType::Q8_1, "q8_1", 32, 36, false},
    {GgmlType::Q2_K, "q2_K", 256, 84, false},
    {GgmlType::Q3_K, "q3_K", 256, 110, false},
    {GgmlType::Q4_K, "q4_K", 256, 144, true},
    {GgmlType::Q5_K, "q5_K", 256, 176, true},
    {GgmlType::Q6_K, "q6_K", 256, 210, true},
    {GgmlType::Q8_K, "q8_K", 256, 292, false},
    {GgmlType::BF16, "bf16", 1, 2, true},
}};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& t : kTypes) {
    if (uint32_t(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeTraits& traits(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  fail("unknown tensor type id {}", uint32_t(type));
}

std::optional<GgmlType> parse_type_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (!t.supported || t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(name[i])) ==
             std::tolower(static_cast<unsigned char>(t.name[i]));
    }
    if (same) return t.type;
  }
  return std::nullopt;
}

}  // namespace moe
