#include "core/npy.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace moe {
namespace {

template <typename T>
void convert(const std::string& bytes, std::vector<float>& out) {
  const size_t n = bytes.size() / sizeof(T);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    out[i] = float(v);
  }
}

std::string field(const std::string& header, const std::string& key, const std::string& path) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) fail("{}: npy header has no '{}'", path, key);
  const size_t colon = header.find(':', k);
  if (colon == std::string::npos) fail("{}: malformed npy header", path);
  return header.substr(colon + 1);
}

}  // namespace

void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
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
  std::ofstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for writing", path);
  const char magic[] = "\x93NUMPY\x01\x00";
  f.write(magic, 8);
  const uint16_t len = uint16_t(header.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data), std::streamsize(count * 4));
  if (!f) fail("{}: write failed", path);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open", path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("{}: not a .npy file", path);
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint16_t l;
    f.read(reinterpret_cast<char*>(&l), 2);
    header_len = l;
  } else {
    f.read(reinterpret_cast<char*>(&header_len), 4);
  }
  if (!f || header_len > 65536) fail("{}: bad npy header length", path);
  std::string header(header_len, '\0');
  if (!f.read(header.data(), header_len)) fail("{}: truncated npy header", path);
  const std::string descr_rest = field(header, "descr", path);
  const size_t q1 = descr_rest.find('\'');
  const size_t q2 = descr_rest.find('\'', q1 + 1);
  if (q1 == std::string::npos || q2 == std::string::npos) fail("{}: malformed npy descr", path);
  const std::string descr = descr_rest.substr(q1 + 1, q2 - q1 - 1);
  if (field(header, "fortran_order", path).find("True") < field(header, "fortran_order", path).find(',')) {
    fail("{}: Fortran-ordered arrays are not supported", path);
  }
  const std::string shape_rest = field(header, "shape", path);
  const size_t open = shape_rest.find('('), close = shape_rest.find(')');
  if (open == std::string::npos || close == std::string::npos) fail("{}: malformed npy shape", path);
  NpyArray a;
  int64_t count = 1;
  std::stringstream dims(shape_rest.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    const int64_t d = std::stoll(item);
    if (d < 0) fail("{}: negative dimension in npy shape", path);
    a.shape.push_back(d);
    count *= d;
  }
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t elem = 0;
  if (descr == "<f4") elem = 4;
  else if (descr == "<f8") elem = 8;
  else if (descr == "<i4" || descr == "<u4") elem = 4;
  else if (descr == "<i8" || descr == "<u8") elem = 8;
  else fail("{}: npy dtype '{}' is not supported (f4, f8, i4, i8, u4, u8, little-endian)", path, descr);
  if (bytes.size() != size_t(count) * elem) {
    fail("{}: npy data has {} bytes, the shape needs {}", path, bytes.size(), size_t(count) * elem);
  }
  if (descr == "<f4") convert<float>(bytes, a.data);
  else if (descr == "<f8") convert<double>(bytes, a.data);
  else if (descr == "<i4") convert<int32_t>(bytes, a.data);
  else if (descr == "<u4") convert<uint32_t>(bytes, a.data);
  else if (descr == "<i8") convert<int64_t>(bytes, a.data);
  else convert<uint64_t>(bytes, a.data);
  return a;
}

}  // namespace moe
