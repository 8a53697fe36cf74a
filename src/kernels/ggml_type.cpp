#include "kernels/ggml_type.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace moe {
namespace {

constexpr std::array<GgmlTypeTraits, 15> kGgufTypes = {{
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

constexpr std::array<GgmlTypeTraits, 5> kInternalTypes = {{
    {GgmlType::F8_E4M3_B128, "fp8_e4m3", 128, 132, true},
    {GgmlType::Q8_0_R16, "q8_0_r16", 32, 34, true},
    {GgmlType::Q4_K_R16, "q4_K_r16", 256, 144, true},
    {GgmlType::Q6_K_R16, "q6_K_r16", 256, 210, true},
    {GgmlType::Q5_0_R16, "q5_0_r16", 32, 22, true},
}};

// The first known type that matches, GGUF types before internal ones.
template <class Fn>
const GgmlTypeTraits* find_type(Fn match) {
  for (const auto& t : kGgufTypes) {
    if (match(t)) return &t;
  }
  for (const auto& t : kInternalTypes) {
    if (match(t)) return &t;
  }
  return nullptr;
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& t : kGgufTypes) {
    if (uint32_t(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeTraits& traits(GgmlType type) {
  if (const auto* t = find_type([type](const GgmlTypeTraits& t) { return t.type == type; })) return *t;
  fail("unknown tensor type id {}", uint32_t(type));
}

std::optional<GgmlType> parse_type_name(std::string_view name) {
  const auto* t = find_type([name](const GgmlTypeTraits& t) {
    // The regrouped types are layouts chosen at load, never types a user asks for.
    if (!t.supported || is_regrouped(t.type) || t.name.size() != name.size()) return false;
    for (size_t i = 0; i < name.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(name[i])) != std::tolower(static_cast<unsigned char>(t.name[i]))) {
        return false;
      }
    }
    return true;
  });
  if (t == nullptr) return std::nullopt;
  return t->type;
}

}  // namespace moe
