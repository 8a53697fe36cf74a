#include "disagg/tcp_wire.h"

#include <fmt/format.h>

#include <algorithm>

namespace moe::disagg::wire {

namespace {

constexpr std::array<uint8_t, 4> kRequestMagic = {'M', 'K', 'V', 'Q'};
constexpr std::array<uint8_t, 4> kResponseMagic = {'M', 'K', 'V', 'A'};
constexpr uint16_t kStatusOk = 0;
constexpr uint16_t kStatusError = 1;

// Writes or reads a little-endian integer byte by byte, whatever the host's byte order.
template <class T>
void put(uint8_t*& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) *out++ = uint8_t(uint64_t(value) >> (8 * i));
}

template <class T>
T get(const uint8_t*& in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= uint64_t(*in++) << (8 * i);
  return T(value);
}

// Checks the magic and version every header starts with; empty when they are right.
std::string check_preamble(const uint8_t*& in, const std::array<uint8_t, 4>& magic, const char* what) {
  if (!std::equal(magic.begin(), magic.end(), in)) return fmt::format("not a KV {} (bad magic)", what);
  in += magic.size();
  const auto version = get<uint16_t>(in);
  if (version != kVersion) return fmt::format("KV {} version {} is not supported (expected {})", what, version, kVersion);
  return {};
}

std::string check_size(std::span<const uint8_t> bytes, size_t expected, const char* what) {
  if (bytes.size() == expected) return {};
  return fmt::format("a KV {} is {} bytes, got {}", what, expected, bytes.size());
}

}  // namespace

bool in_region(const Range& r, uint64_t region_bytes) { return r.bytes <= region_bytes && r.offset <= region_bytes - r.bytes; }

std::string describe(const Range& r) { return fmt::format("{} bytes at offset {}", r.bytes, r.offset); }

std::vector<uint8_t> encode_request(uint64_t transfer, std::span<const Range> ranges) {
  std::vector<uint8_t> out(kRequestHeaderBytes + ranges.size() * kRangeBytes);
  uint8_t* p = std::copy(kRequestMagic.begin(), kRequestMagic.end(), out.data());
  put<uint16_t>(p, kVersion);
  put<uint16_t>(p, 0);
  put<uint64_t>(p, transfer);
  put<uint32_t>(p, uint32_t(ranges.size()));
  for (const Range& r : ranges) {
    put<uint64_t>(p, r.offset);
    put<uint64_t>(p, r.bytes);
  }
  return out;
}

Decoded<RequestHeader> decode_request_header(std::span<const uint8_t> bytes) {
  Decoded<RequestHeader> d;
  if (d.error = check_size(bytes, kRequestHeaderBytes, "request header"); !d.ok()) return d;
  const uint8_t* p = bytes.data();
  if (d.error = check_preamble(p, kRequestMagic, "request"); !d.ok()) return d;
  if (get<uint16_t>(p) != 0) {
    d.error = "KV request header has reserved bits set";
    return d;
  }
  d.value.transfer = get<uint64_t>(p);
  d.value.n_ranges = get<uint32_t>(p);
  if (d.value.n_ranges > kMaxRanges) d.error = fmt::format("KV request has {} ranges, more than the {} allowed", d.value.n_ranges, kMaxRanges);
  return d;
}

Decoded<std::vector<Range>> decode_ranges(std::span<const uint8_t> bytes, uint32_t n, uint64_t region_bytes) {
  Decoded<std::vector<Range>> d;
  if (n > kMaxRanges) {
    d.error = fmt::format("KV request has {} ranges, more than the {} allowed", n, kMaxRanges);
    return d;
  }
  if (d.error = check_size(bytes, size_t(n) * kRangeBytes, "range list"); !d.ok()) return d;
  d.value.resize(n);
  const uint8_t* p = bytes.data();
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    Range& r = d.value[i];
    r.offset = get<uint64_t>(p);
    r.bytes = get<uint64_t>(p);
    if (!in_region(r, region_bytes)) {
      d.error = fmt::format("range {} ({}) is outside the region of {} bytes", i, describe(r), region_bytes);
      return d;
    }
    // Both terms are below 2^40 here, so the sum cannot wrap.
    if (r.bytes > kMaxReadBytes || (total += r.bytes) > kMaxReadBytes) {
      d.error = fmt::format("KV request asks for more than {} bytes", kMaxReadBytes);
      return d;
    }
  }
  return d;
}

std::array<uint8_t, kResponseHeaderBytes> encode_response_header(const ResponseHeader& h) {
  std::array<uint8_t, kResponseHeaderBytes> out{};
  uint8_t* p = std::copy(kResponseMagic.begin(), kResponseMagic.end(), out.data());
  put<uint16_t>(p, kVersion);
  put<uint16_t>(p, h.ok ? kStatusOk : kStatusError);
  put<uint64_t>(p, h.transfer);
  put<uint64_t>(p, h.length);
  return out;
}

std::vector<uint8_t> encode_error(uint64_t transfer, std::string_view message) {
  message = message.substr(0, kMaxErrorBytes);
  const auto header = encode_response_header({transfer, false, message.size()});
  std::vector<uint8_t> out(header.size() + message.size());
  std::copy(message.begin(), message.end(), std::copy(header.begin(), header.end(), out.begin()));
  return out;
}

Decoded<ResponseHeader> decode_response_header(std::span<const uint8_t> bytes) {
  Decoded<ResponseHeader> d;
  if (d.error = check_size(bytes, kResponseHeaderBytes, "response header"); !d.ok()) return d;
  const uint8_t* p = bytes.data();
  if (d.error = check_preamble(p, kResponseMagic, "response"); !d.ok()) return d;
  const auto status = get<uint16_t>(p);
  d.value.transfer = get<uint64_t>(p);
  d.value.length = get<uint64_t>(p);
  d.value.ok = status == kStatusOk;
  if (status != kStatusOk && status != kStatusError) {
    d.error = fmt::format("KV response has unknown status {}", status);
  } else if (d.value.ok && d.value.length > kMaxReadBytes) {
    d.error = fmt::format("KV response announces {} bytes, more than the {} allowed", d.value.length, kMaxReadBytes);
  } else if (!d.value.ok && d.value.length > kMaxErrorBytes) {
    d.error = fmt::format("KV error message of {} bytes is longer than the {} allowed", d.value.length, kMaxErrorBytes);
  }
  return d;
}

}  // namespace moe::disagg::wire
