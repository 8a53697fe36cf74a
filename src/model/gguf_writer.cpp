// GGUF writer (always version 3). Values are checked when they are set, so a bad call fails
// at its call site rather than when the file is written; the bytes depend only on the calls.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/tmp_file.h"
#include "model/gguf.h"

namespace moe {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxDims = 4;
constexpr std::string_view kAlignmentKey = "general.alignment";

// resize + memcpy rather than insert(): GCC 12 at -O3 misreads insert() of a few bytes as an
// overflow (-Wstringop-overflow), and the warning would bury real ones.
void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put_le(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put_le<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

template <typename... Args>
[[noreturn]] void key_error(std::string_view key, fmt::format_string<Args...> format,
                            Args&&... args) {
  fail("gguf writer: metadata '{}': {}", key, fmt::format(format, std::forward<Args>(args)...));
}

// 128 bits hold every int64 and uint64, so one range check serves all integer types.
using Wide = __int128;

std::optional<Wide> integer_of(const GgufValue& v) {
  if (const auto* s = std::get_if<int64_t>(&v.value)) return Wide(*s);
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return Wide(*u);
  if (const auto* b = std::get_if<bool>(&v.value)) return Wide(*b ? 1 : 0);
  return std::nullopt;
}

std::optional<double> number_of(const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.value)) return *d;
  if (const auto* s = std::get_if<int64_t>(&v.value)) return double(*s);
  if (const auto* u = std::get_if<uint64_t>(&v.value)) return double(*u);
  return std::nullopt;
}

std::string wide_str(Wide w) {
  return w < 0 ? fmt::format("{}", int64_t(w)) : fmt::format("{}", uint64_t(w));
}

// Checks that `w` fits `t` and appends it in t's width.
void put_integer(std::vector<uint8_t>& out, std::string_view key, GgufValueType t, Wide w) {
  Wide lo = 0;
  Wide hi = 0;
  switch (t) {
    case GgufValueType::UINT8: hi = UINT8_MAX; break;
    case GgufValueType::INT8: lo = INT8_MIN, hi = INT8_MAX; break;
    case GgufValueType::UINT16: hi = UINT16_MAX; break;
    case GgufValueType::INT16: lo = INT16_MIN, hi = INT16_MAX; break;
    case GgufValueType::UINT32: hi = UINT32_MAX; break;
    case GgufValueType::INT32: lo = INT32_MIN, hi = INT32_MAX; break;
    case GgufValueType::UINT64: hi = UINT64_MAX; break;
    case GgufValueType::INT64: lo = INT64_MIN, hi = INT64_MAX; break;
    case GgufValueType::BOOL: hi = 1; break;
    default: key_error(key, "type {} is not an integer type", gguf_type_name(t));
  }
  if (w < lo || w > hi)
    key_error(key, "value {} does not fit in {}", wide_str(w), gguf_type_name(t));
  const size_t n = *gguf_scalar_size(t);
  const uint64_t bits = uint64_t(w);  // two's complement: the low n bytes are the value
  put_bytes(out, &bits, n);
}

void put_float(std::vector<uint8_t>& out, GgufValueType t, double d) {
  if (t == GgufValueType::FLOAT32) {
    put_le<float>(out, float(d));
  } else {
    put_le<double>(out, d);
  }
}

void put_array(std::vector<uint8_t>& out, std::string_view key, const GgufArray& a) {
  const GgufValueType t = a.elem_type;
  if (t == GgufValueType::ARRAY) key_error(key, "nested arrays are not supported");
  if (!gguf_type_known(uint32_t(t))) key_error(key, "unknown array element type {}", uint32_t(t));
  const bool is_float = t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64;
  const bool is_string = t == GgufValueType::STRING;
  // Only the list that matches elem_type may hold elements; anything else is a caller's slip.
  if ((!a.ints.empty() && (is_float || is_string)) || (!a.floats.empty() && !is_float) ||
      (!a.strings.empty() && !is_string)) {
    key_error(key, "array of {} has elements in a list of another kind", gguf_type_name(t));
  }
  put_le<uint32_t>(out, uint32_t(t));
  put_le<uint64_t>(out, a.size());
  if (is_string) {
    for (const auto& s : a.strings) put_string(out, s);
  } else if (is_float) {
    for (const double d : a.floats) put_float(out, t, d);
  } else {
    for (const int64_t i : a.ints) put_integer(out, key, t, i);
  }
}

void put_value(std::vector<uint8_t>& out, std::string_view key, const GgufValue& v) {
  if (!gguf_type_known(uint32_t(v.type))) key_error(key, "unknown value type {}", uint32_t(v.type));
  switch (v.type) {
    case GgufValueType::STRING: {
      const auto* s = std::get_if<std::string>(&v.value);
      if (!s) key_error(key, "a string value must hold a std::string");
      put_string(out, *s);
      return;
    }
    case GgufValueType::ARRAY: {
      const auto* a = std::get_if<GgufArray>(&v.value);
      if (!a) key_error(key, "an array value must hold a GgufArray");
      put_array(out, key, *a);
      return;
    }
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      const auto d = number_of(v);
      if (!d) key_error(key, "a {} value must hold a number", gguf_type_name(v.type));
      put_float(out, v.type, *d);
      return;
    }
    default: {
      const auto w = integer_of(v);
      if (!w) key_error(key, "a {} value must hold an integer or bool", gguf_type_name(v.type));
      put_integer(out, key, v.type, *w);
      return;
    }
  }
}

}  // namespace

void GgufWriter::put(const std::string& key, GgufValue v) {
  std::vector<uint8_t> scratch;
  put_value(scratch, key, v);
  if (key == kAlignmentKey) {
    const auto w = integer_of(v);
    if (v.type == GgufValueType::BOOL || !w || *w <= 0 || *w > UINT32_MAX ||
        !std::has_single_bit(uint64_t(*w))) {
      key_error(key, "the alignment must be a nonzero power of two stored as an integer");
    }
    alignment_ = uint32_t(*w);
  }
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  put(key, {GgufValueType::UINT32, int64_t(v)});
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  put(key, {GgufValueType::INT32, int64_t(v)});
}
void GgufWriter::set_u64(const std::string& key, uint64_t v) {
  put(key, {GgufValueType::UINT64, v});
}
void GgufWriter::set_f32(const std::string& key, float v) {
  put(key, {GgufValueType::FLOAT32, double(v)});
}
void GgufWriter::set_bool(const std::string& key, bool v) { put(key, {GgufValueType::BOOL, v}); }
void GgufWriter::set_string(const std::string& key, const std::string& v) {
  put(key, {GgufValueType::STRING, v});
}

void GgufWriter::set_array_string(const std::string& key, const std::vector<std::string>& v) {
  GgufArray a;
  a.elem_type = GgufValueType::STRING;
  a.strings = v;
  put(key, {GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::set_array_i32(const std::string& key, const std::vector<int32_t>& v) {
  GgufArray a;
  a.elem_type = GgufValueType::INT32;
  a.ints.assign(v.begin(), v.end());
  put(key, {GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::set_array_f32(const std::string& key, const std::vector<float>& v) {
  GgufArray a;
  a.elem_type = GgufValueType::FLOAT32;
  a.floats.assign(v.begin(), v.end());
  put(key, {GgufValueType::ARRAY, std::move(a)});
}

void GgufWriter::set_value(const std::string& key, GgufValue v) { put(key, std::move(v)); }

void GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    fail("gguf writer: alignment {} is not a nonzero power of two", alignment);
  }
  set_u32(std::string(kAlignmentKey), alignment);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            Fill fill) {
  const auto traits = ggml_type_traits(uint32_t(type));
  if (!traits) fail("gguf writer: tensor '{}': unknown tensor type id {}", name, uint32_t(type));
  if (ne.empty() || ne.size() > kMaxDims) {
    fail("gguf writer: tensor '{}': {} dimensions (must be 1 to {})", name, ne.size(), kMaxDims);
  }
  int64_t n = 1;
  for (const int64_t d : ne) {
    if (d <= 0) fail("gguf writer: tensor '{}': dimension {} is not positive", name, d);
    if (n > std::numeric_limits<int64_t>::max() / d) {
      fail("gguf writer: tensor '{}': element count overflows int64", name);
    }
    n *= d;
  }
  if (ne[0] % traits->block_size != 0) {
    fail("gguf writer: tensor '{}': ne[0] = {} is not a multiple of the {} block size {}", name,
         ne[0], traits->name, traits->block_size);
  }
  const size_t n_bytes = size_t(n / traits->block_size) * traits->block_bytes;
  tensors_.push_back({name, type, std::move(ne), n_bytes, std::move(fill)});
}

std::vector<uint8_t> GgufWriter::encode_header(std::vector<uint64_t>& offsets,
                                               uint64_t& data_bytes) const {
  std::vector<std::string_view> names;
  names.reserve(tensors_.size());
  for (const auto& t : tensors_) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  const auto dup = std::adjacent_find(names.begin(), names.end());
  if (dup != names.end()) fail("gguf writer: duplicate tensor name '{}'", *dup);

  offsets.clear();
  data_bytes = 0;
  for (const auto& t : tensors_) {
    offsets.push_back(data_bytes);
    data_bytes = align_up(data_bytes + t.n_bytes, alignment_);
  }

  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put_le<uint32_t>(out, kVersion);
  put_le<uint64_t>(out, tensors_.size());
  put_le<uint64_t>(out, kv_.size());
  for (const auto& [key, value] : kv_) {
    put_string(out, key);
    put_le<uint32_t>(out, uint32_t(value.type));
    put_value(out, key, value);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    put_string(out, t.name);
    put_le<uint32_t>(out, uint32_t(t.ne.size()));
    for (const int64_t d : t.ne) put_le<uint64_t>(out, uint64_t(d));
    put_le<uint32_t>(out, uint32_t(t.type));
    put_le<uint64_t>(out, offsets[i]);
  }
  out.resize(size_t(align_up(out.size(), alignment_)), 0);
  return out;
}

void GgufWriter::write(const std::string& path,
                       const std::function<void(uint64_t, uint64_t)>& progress) const {
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  const std::vector<uint8_t> header = encode_header(offsets, data_bytes);
  const uint64_t total = header.size() + data_bytes;

  TmpFile file(path + ".tmp");
  file.write(header.data(), header.size());
  uint64_t done = header.size();
  if (progress) progress(done, total);
  // One buffer, reused: memory stays at the largest tensor however big the file is.
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    buf.assign(t.n_bytes, 0);
    if (t.fill) t.fill(buf.data(), t.n_bytes);
    file.write(buf.data(), t.n_bytes);
    const uint64_t end = i + 1 < tensors_.size() ? offsets[i + 1] : data_bytes;
    file.write_zeros(end - offsets[i] - t.n_bytes);
    done = header.size() + end;
    if (progress) progress(done, total);
  }
  file.commit(path);
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint64_t> offsets;
  uint64_t data_bytes = 0;
  std::vector<uint8_t> out = encode_header(offsets, data_bytes);
  const size_t data_start = out.size();
  out.resize(data_start + size_t(data_bytes), 0);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    if (t.fill) t.fill(out.data() + data_start + offsets[i], t.n_bytes);
  }
  return out;
}

}  // namespace moe
