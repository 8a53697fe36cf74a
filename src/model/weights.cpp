#include "model/weights.h"

#include <fmt/ranges.h>

#include "core/error.h"
#include "model/gguf.h"

namespace moe {

QMatrix Tensor::matrix() const {
  if (ne.size() > 2 && ne[2] != 1) fail("tensor '{}' is {}-D where a matrix was expected", name, ne.size());
  return QMatrix{type, ne.size() > 1 ? ne[1] : 1, ne[0], data, row_bytes(type, ne[0])};
}

QMatrix Tensor::slice(int64_t i) const {
  const size_t rb = row_bytes(type, ne[0]);
  if (!slices.empty()) return QMatrix{type, ne[1], ne[0], slices[size_t(i)], rb};
  return QMatrix{type, ne[1], ne[0], data + size_t(i) * size_t(ne[1]) * rb, rb};
}

const float* Tensor::f32() const {
  if (type != GgmlType::F32) fail("tensor '{}' is {}, expected f32", name, type_name(type));
  return reinterpret_cast<const float*>(data);
}

bool TensorTable::has(const std::string& name) const { return file_.find_tensor(name) != nullptr; }

Tensor TensorTable::optional(const std::string& name, std::vector<int64_t> shape) const {
  const GgufTensorInfo* info = file_.find_tensor(name);
  if (!info) return {};
  std::vector<int64_t> ne = info->ne;
  while (ne.size() < shape.size()) ne.push_back(1);
  while (shape.size() < ne.size()) shape.push_back(1);
  if (ne != shape) {
    fail("{}: tensor '{}' has shape [{}], expected [{}]", file_.path(), name, fmt::join(info->ne, ", "),
         fmt::join(shape, ", "));
  }
  if (!traits(info->type).supported) {
    fail("{}: tensor '{}' has type {}, which moengine does not compute with (supported: f32, f16, bf16, "
         "q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K, q6_K)",
         file_.path(), name, type_name(info->type));
  }
  bytes_used_ += info->n_bytes;
  return Tensor{name, info->type, info->ne, file_.tensor_data(*info), info->slices};
}

Tensor TensorTable::require(const std::string& name, std::vector<int64_t> shape) const {
  Tensor t = optional(name, shape);
  if (!t) fail("{}: tensor '{}' is missing", file_.path(), name);
  return t;
}

}  // namespace moe
