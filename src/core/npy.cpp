#include "core/npy.h"

#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moe {
namespace {

template <typename T>
void convert(std::string_view bytes, std::vector<float>& out) {
  const size_t n = bytes.size() / sizeof(T);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = float(v);
  }
}

std::string field(const std::string& header, const std::string& key, const std::string& source) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail("{}: npy header has no '{}'", source, key);
  const size_t colon = header.find(':', k);
  if (colon == std::string::npos) fail("{}: malformed npy header", source);
  return header.substr(colon + 1);
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

}  // namespace

std::string npy_f32_bytes(const std::vector<int64_t>& shape, const float* data) {
  std::ostringstream dict;
  dict << "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict << shape[i] << (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) dict << ' ';
    count *= shape[i];
  }
  dict << "), }";
  std::string header = dict.str();
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  out.append(reinterpret_cast<const char*>(&len), 2);
  out += header;
  out.append(reinterpret_cast<const char*>(data), size_t(count) * 4);
  return out;
}

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  const std::string bytes = npy_f32_bytes(shape, data);
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for writing", path);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) fail("{}: write failed", path);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return parse_npy(bytes, path);
}

NpyArray parse_npy(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8 || bytes.substr(0, 6) != std::string_view("\x93NUMPY", 6)) fail("{}: not a .npy file", source);
  const int major = uint8_t(bytes[6]);
  if (major < 1 || major > 3) fail("{}: npy format version {} is not supported (1 to 3)", source, major);
  const size_t len_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + len_bytes) fail("{}: truncated npy header", source);
  uint32_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= uint32_t(uint8_t(bytes[8 + i])) << (8 * i);
  if (header_len > 65536) fail("{}: bad npy header length {}", source, header_len);
  if (bytes.size() < 8 + len_bytes + header_len) fail("{}: truncated npy header", source);
  const std::string header(bytes.substr(8 + len_bytes, header_len));
  const std::string_view payload = bytes.substr(8 + len_bytes + header_len);

  const std::string descr_rest = field(header, "descr", source);
  const size_t q1 = descr_rest.find('\'');
  const size_t q2 = q1 == std::string::npos ? q1 : descr_rest.find('\'', q1 + 1);
  if (q2 == std::string::npos) fail("{}: malformed npy descr", source);
  const std::string descr = descr_rest.substr(q1 + 1, q2 - q1 - 1);
  size_t elem = 0;
  if (descr == "<f4" || descr == "<i4" || descr == "<u4") elem = 4;
  else if (descr == "<f8" || descr == "<i8" || descr == "<u8") elem = 8;
  else fail("{}: npy dtype '{}' is not supported (f4, f8, i4, i8, u4, u8, little-endian)", source, descr);
  const std::string order = trimmed(field(header, "fortran_order", source));
  if (order.rfind("True", 0) == 0) fail("{}: Fortran-ordered arrays are not supported", source);
  if (order.rfind("False", 0) != 0) fail("{}: malformed npy fortran_order", source);

  const std::string shape_rest = field(header, "shape", source);
  const size_t open = shape_rest.find('('), close = shape_rest.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open) fail("{}: malformed npy shape", source);
  NpyArray a;
  int64_t count = 1;
  const std::string dims_text = shape_rest.substr(open + 1, close - open - 1);
  std::stringstream dims(dims_text);
  std::string item;
  while (std::getline(dims, item, ',')) {
    const std::string text = trimmed(item);
    if (text.empty()) continue;
    int64_t d = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (ec != std::errc() || end != text.data() + text.size()) fail("{}: npy shape has a bad dimension '{}'", source, text);
    if (d < 0) fail("{}: negative dimension in npy shape", source);
    a.shape.push_back(d);
    if (__builtin_mul_overflow(count, d, &count)) fail("{}: npy shape ({}) is too large", source, dims_text);
  }
  int64_t need = 0;
  if (__builtin_mul_overflow(count, int64_t(elem), &need)) fail("{}: npy shape ({}) is too large", source, dims_text);
  if (payload.size() != uint64_t(need)) fail("{}: npy data has {} bytes, the shape needs {}", source, payload.size(), need);
  if (descr == "<f4") convert<float>(payload, a.data);
  else if (descr == "<f8") convert<double>(payload, a.data);
  else if (descr == "<i4") convert<int32_t>(payload, a.data);
  else if (descr == "<u4") convert<uint32_t>(payload, a.data);
  else if (descr == "<i8") convert<int64_t>(payload, a.data);
  else convert<uint64_t>(payload, a.data);
  return a;
}

}  // namespace moe
