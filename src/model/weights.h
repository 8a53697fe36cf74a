#pragma once
// Typed views of a GGUF file's tensors, with shapes checked against the model config.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ggml_type.h"
#include "kernels/matmul.h"

namespace moe {

class GgufFile;

struct Tensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is contiguous
  const uint8_t* data = nullptr;
  std::vector<const uint8_t*> slices;  // 3-D tensors whose matrices lie apart (see GgufTensorInfo)

  explicit operator bool() const { return data != nullptr; }
  // The tensor as a matrix of ne[1] rows (2-D tensors only).
  QMatrix matrix() const;
  // Slice i of a 3-D tensor [ne0, ne1, ne2] as a matrix of ne1 rows.
  QMatrix slice(int64_t i) const;
  // F32 data (norms, biases); errors if the tensor is of another type.
  const float* f32() const;
};

// Looks tensors up by name and checks their shapes; every error names the file.
class TensorTable {
 public:
  explicit TensorTable(const GgufFile& file) : file_(file) {}
  Tensor require(const std::string& name, std::vector<int64_t> shape) const;
  Tensor optional(const std::string& name, std::vector<int64_t> shape) const;  // empty if absent
  bool has(const std::string& name) const;
  uint64_t bytes_used() const { return bytes_used_; }

 private:
  const GgufFile& file_;
  mutable uint64_t bytes_used_ = 0;
};

inline std::string layer_tensor(int64_t layer, const char* name) {
  return "blk." + std::to_string(layer) + "." + name;
}

}  // namespace moe
