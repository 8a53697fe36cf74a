#pragma once
// The TCP transport's wire format, as pure functions over bytes so that the decoders can be
// fuzzed without sockets. Integers are little-endian.
//
//   request   "MKVQ" | version u16 | reserved u16 (0) | transfer u64 | n_ranges u32
//             then n_ranges x (offset u64, bytes u64): ranges of the server's region
//   response  "MKVA" | version u16 | status u16 | transfer u64 | length u64
//             status 0: the bytes of every range in request order follow (length = their sum)
//             status 1: an error message of `length` bytes follows; the server then closes
//
// One connection carries one request at a time; the transfer number lets the reader check
// that an answer belongs to the request it sent.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moe::disagg::wire {

constexpr uint16_t kVersion = 1;
constexpr size_t kRequestHeaderBytes = 20;
constexpr size_t kRangeBytes = 16;
constexpr size_t kResponseHeaderBytes = 24;

// Bounds that keep a hostile or confused peer from making the other side allocate or wait
// for absurd amounts: 2^20 ranges is a 16 MiB request, far above what coalesced KV block
// lists need.
constexpr uint32_t kMaxRanges = 1u << 20;
constexpr uint64_t kMaxReadBytes = uint64_t(1) << 40;
constexpr size_t kMaxErrorBytes = 4096;

struct Range {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct RequestHeader {
  uint64_t transfer = 0;
  uint32_t n_ranges = 0;
};

struct ResponseHeader {
  uint64_t transfer = 0;
  bool ok = true;       // false: an error message follows
  uint64_t length = 0;  // bytes that follow
};

// A decoded value, or why the bytes are not one.
template <class T>
struct Decoded {
  T value{};
  std::string error;
  bool ok() const { return error.empty(); }
};

// Whether [offset, offset + bytes) lies within a region of region_bytes bytes (no overflow).
bool in_region(const Range& r, uint64_t region_bytes);
// "4096 bytes at offset 65536", for error messages.
std::string describe(const Range& r);

// Expects ranges.size() <= kMaxRanges.
std::vector<uint8_t> encode_request(uint64_t transfer, std::span<const Range> ranges);
// `bytes` must be the kRequestHeaderBytes of a request header.
Decoded<RequestHeader> decode_request_header(std::span<const uint8_t> bytes);
// The n * kRangeBytes that follow a request header: every range must lie within a region of
// region_bytes bytes and together they must stay under kMaxReadBytes.
Decoded<std::vector<Range>> decode_ranges(std::span<const uint8_t> bytes, uint32_t n, uint64_t region_bytes);

std::array<uint8_t, kResponseHeaderBytes> encode_response_header(const ResponseHeader& h);
// A whole error answer: header and message, the message cut to kMaxErrorBytes.
std::vector<uint8_t> encode_error(uint64_t transfer, std::string_view message);
// `bytes` must be the kResponseHeaderBytes of a response header.
Decoded<ResponseHeader> decode_response_header(std::span<const uint8_t> bytes);

}  // namespace moe::disagg::wire
