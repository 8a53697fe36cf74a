#include "kernels/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"

namespace moe {
namespace {

constexpr int64_t kQ8Block = 32;

const kvfmt::Decoders& fastest() {
  static const kvfmt::Decoders chosen = [] {
    const CpuFeatures& f = cpu_features();
    if (f.has_avx2_fma() && f.has_avx512() && f.avx512vnni) return kvfmt::avx512_decoders();
    if (f.has_avx2_fma()) return kvfmt::avx2_decoders();
    return kvfmt::generic_decoders();
  }();
  return chosen;
}

float max_abs(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

void decode_run(const kvfmt::Decoders& dec, KvDtype dtype, const uint8_t* at, int64_t n, float* out) {
  switch (dtype) {
    case KvDtype::f32:
      std::memcpy(out, at, size_t(n) * sizeof(float));
      return;
    case KvDtype::f16:
      return dec.f16(reinterpret_cast<const uint16_t*>(at), n, out);
    case KvDtype::bf16:
      return dec.bf16(reinterpret_cast<const uint16_t*>(at), n, out);
    case KvDtype::fp8_e4m3: {
      float scale;
      std::memcpy(&scale, at, sizeof scale);
      return dec.fp8(at + sizeof scale, n, scale, out);
    }
    case KvDtype::q8_0: {
      uint16_t d;
      std::memcpy(&d, at, sizeof d);
      return dec.q8(reinterpret_cast<const int8_t*>(at + sizeof d), n, fp16_to_f32(d), out);
    }
  }
}

}  // namespace

const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::f32:
      return "f32";
    case KvDtype::f16:
      return "f16";
    case KvDtype::bf16:
      return "bf16";
    case KvDtype::fp8_e4m3:
      return "fp8_e4m3";
    case KvDtype::q8_0:
      return "q8_0";
  }
  return "?";
}

std::optional<KvDtype> parse_kv_dtype(std::string_view s) {
  if (s == "auto") return kKvDtypeAuto;
  if (s == "f32") return KvDtype::f32;
  if (s == "f16") return KvDtype::f16;
  if (s == "bf16") return KvDtype::bf16;
  if (s == "fp8_e4m3" || s == "fp8") return KvDtype::fp8_e4m3;
  if (s == "q8_0") return KvDtype::q8_0;
  return std::nullopt;
}

KvRowFormat::KvRowFormat(KvDtype dtype, std::vector<int64_t> segment_floats) : dtype_(dtype), segments_(std::move(segment_floats)) {
  if (segments_.empty()) fail("kv cache: a row needs at least one segment");
  for (const int64_t n : segments_) {
    if (n <= 0) fail("kv cache: segment of {} floats", n);
    floats_ += n;
  }
  switch (dtype_) {
    case KvDtype::f32:
    case KvDtype::f16:
    case KvDtype::bf16: {
      const int64_t width = dtype_ == KvDtype::f32 ? 4 : 2;
      groups_.push_back({0, floats_, 0});
      bytes_ = floats_ * width;
      break;
    }
    case KvDtype::fp8_e4m3: {
      int64_t f = 0;
      for (const int64_t n : segments_) {
        groups_.push_back({f, n, bytes_});
        bytes_ += int64_t(sizeof(float)) + n;
        f += n;
      }
      break;
    }
    case KvDtype::q8_0: {
      int64_t f = 0;
      for (const int64_t n : segments_) {
        for (int64_t b = 0; b < n; b += kQ8Block) {
          const int64_t len = std::min(kQ8Block, n - b);
          groups_.push_back({f + b, len, bytes_});
          bytes_ += int64_t(sizeof(uint16_t)) + len;
        }
        f += n;
      }
      break;
    }
  }
}

size_t KvRowFormat::group_of(int64_t f) const {
  const auto it = std::upper_bound(groups_.begin(), groups_.end(), f, [](int64_t x, const Group& g) { return x < g.first; });
  return size_t(it - groups_.begin()) - 1;
}

int64_t KvRowFormat::byte_at(int64_t f) const {
  switch (dtype_) {
    case KvDtype::f32:
      return f * 4;
    case KvDtype::f16:
    case KvDtype::bf16:
      return f * 2;
    default:
      return f >= floats_ ? bytes_ : groups_[group_of(f)].byte;
  }
}

bool KvRowFormat::whole_groups(int64_t begin, int64_t n) const {
  if (begin < 0 || n <= 0 || begin + n > floats_) return false;
  if (groups_.size() == 1 && dtype_ != KvDtype::fp8_e4m3 && dtype_ != KvDtype::q8_0) return true;
  const Group& first = groups_[group_of(begin)];
  if (first.first != begin) return false;
  const int64_t end = begin + n;
  return end == floats_ || groups_[group_of(end)].first == end;
}

void KvRowFormat::encode(const float* src, uint8_t* row) const {
  switch (dtype_) {
    case KvDtype::f32:
      std::memcpy(row, src, size_t(floats_) * sizeof(float));
      return;
    case KvDtype::f16:
    case KvDtype::bf16: {
      uint16_t* out = reinterpret_cast<uint16_t*>(row);
      if (dtype_ == KvDtype::f16)
        for (int64_t i = 0; i < floats_; ++i) out[i] = f32_to_fp16(src[i]);
      else
        for (int64_t i = 0; i < floats_; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    case KvDtype::fp8_e4m3:
      for (const Group& g : groups_) {
        const float scale = max_abs(src + g.first, g.n) / kFp8E4m3Max;
        std::memcpy(row + g.byte, &scale, sizeof scale);
        uint8_t* codes = row + g.byte + sizeof scale;
        const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
        for (int64_t i = 0; i < g.n; ++i) codes[i] = f32_to_fp8_e4m3(src[g.first + i] * inv);
      }
      return;
    case KvDtype::q8_0:
      for (const Group& g : groups_) {
        const float d = max_abs(src + g.first, g.n) / 127.0f;
        const uint16_t dh = f32_to_fp16(d);
        std::memcpy(row + g.byte, &dh, sizeof dh);
        int8_t* q = reinterpret_cast<int8_t*>(row + g.byte + sizeof dh);
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int64_t i = 0; i < g.n; ++i) q[i] = int8_t(std::lround(std::clamp(src[g.first + i] * inv, -127.0f, 127.0f)));
      }
      return;
  }
}

void KvRowFormat::decode_using(const kvfmt::Decoders& dec, const uint8_t* row, int64_t begin, int64_t n, float* out) const {
  if (dtype_ == KvDtype::f32 || dtype_ == KvDtype::f16 || dtype_ == KvDtype::bf16) {
    decode_run(dec, dtype_, row + byte_at(begin), n, out);
    return;
  }
  for (size_t gi = group_of(begin); n > 0; ++gi) {
    const Group& g = groups_[gi];
    decode_run(dec, dtype_, row + g.byte, g.n, out);
    out += g.n;
    n -= g.n;
  }
}

void KvRowFormat::decode(const uint8_t* row, int64_t begin, int64_t n, float* out) const {
  decode_using(fastest(), row, begin, n, out);
}

void KvRowFormat::decode_ref(const uint8_t* row, int64_t begin, int64_t n, float* out) const {
  static const kvfmt::Decoders generic = kvfmt::generic_decoders();
  decode_using(generic, row, begin, n, out);
}

void KvRowFormat::decode_with(const char* decoder, const uint8_t* row, int64_t begin, int64_t n, float* out) const {
  const std::string_view name(decoder);
  if (name == "avx512") return decode_using(kvfmt::avx512_decoders(), row, begin, n, out);
  if (name == "avx2") return decode_using(kvfmt::avx2_decoders(), row, begin, n, out);
  if (name == "generic") return decode_using(kvfmt::generic_decoders(), row, begin, n, out);
  fail("kv cache: no decoder '{}'", name);
}

std::vector<const char*> KvRowFormat::decoders_here() {
  const CpuFeatures& f = cpu_features();
  std::vector<const char*> out{"generic"};
  if (f.has_avx2_fma()) out.push_back("avx2");
  if (f.has_avx2_fma() && f.has_avx512() && f.avx512vnni) out.push_back("avx512");
  return out;
}

namespace kvfmt {

Decoders generic_decoders() {
  return Decoders{
      [](const uint16_t* in, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(in[i]);
      },
      [](const uint16_t* in, int64_t n, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
      },
      [](const uint8_t* in, int64_t n, float scale, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = kFp8E4m3ToF32[in[i]] * scale;
      },
      [](const int8_t* in, int64_t n, float d, float* out) {
        for (int64_t i = 0; i < n; ++i) out[i] = float(in[i]) * d;
      },
      "generic"};
}

}  // namespace kvfmt
}  // namespace moe
