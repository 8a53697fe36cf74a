// Small pieces of the GGUF format that the reader and the writer share.
#include "model/gguf.h"

#include "core/error.h"

namespace moe {

std::string_view gguf_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

bool gguf_type_known(uint32_t id) { return id <= uint32_t(GgufValueType::FLOAT64); }

std::optional<size_t> gguf_scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING:
    case GgufValueType::ARRAY: return std::nullopt;
  }
  return std::nullopt;
}

size_t GgufArray::size() const {
  switch (elem_type) {
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: return floats.size();
    case GgufValueType::STRING: return strings.size();
    default: return ints.size();
  }
}

const uint8_t* GgufTensorInfo::row(int64_t r) const {
  const size_t rb = row_bytes(type, ne[0]);
  if (slices.empty()) return data + size_t(r) * rb;
  return slices[size_t(r / ne[1])] + size_t(r % ne[1]) * rb;
}

int64_t GgufTensorInfo::n_elements() const {
  // The reader has already rejected shapes whose product overflows.
  int64_t n = 1;
  for (const int64_t d : ne) n *= d;
  return n;
}

uint32_t gguf_file_type(GgmlType t, bool q4_k_m) {
  if (q4_k_m) return 15;
  switch (t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q4_K: return 14;
    case GgmlType::Q5_K: return 16;
    case GgmlType::Q6_K: return 18;
    case GgmlType::BF16: return 32;
    default: fail("type {} cannot be the main type of a GGUF file", type_name(t));
  }
}

}  // namespace moe
