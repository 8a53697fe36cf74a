#pragma once
// NumPy .npy files (format 1.0, little-endian, C order): the exchange format for logits
// dumps and load traces.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);
// The bytes of that file.
std::string npy_f32_bytes(const std::vector<int64_t>& shape, const float* data);

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // converted to f32 from f4/f8/i4/i8/u4/u8 files
};
NpyArray read_npy(const std::string& path);
// The same from a file's bytes (untrusted: every size is checked before use); errors name
// `source`.
NpyArray parse_npy(std::string_view bytes, const std::string& source);

}  // namespace moe
