// libFuzzer target for the KV transfer wire format (src/disagg/tcp_wire.h), the bytes a TCP
// transport takes from any peer. The input is a region size (8 bytes, little-endian), then a
// frame that is decoded both as a request (header, then its range list checked against the
// region) and as a response header. Every decode must succeed or give a reason, nothing may
// crash, and what decodes must keep the decoder's promises: ranges inside the region, counts
// and lengths under the caps, and encoding the values back gives the same bytes.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "disagg/tcp_wire.h"

namespace {

namespace wire = moe::disagg::wire;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "kv_wire_fuzz: %s\n", what);
  std::abort();
}

bool same(std::span<const uint8_t> a, std::span<const uint8_t> b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

void request(std::span<const uint8_t> frame, uint64_t region_bytes) {
  const auto header = wire::decode_request_header(frame.first(std::min(frame.size(), wire::kRequestHeaderBytes)));
  if (header.ok()) check(header.value.n_ranges <= wire::kMaxRanges, "a request header over the range cap decoded");
  const std::span<const uint8_t> list = frame.subspan(std::min(frame.size(), wire::kRequestHeaderBytes));
  // With a bad header, the list is still decoded with the count its size suggests.
  const uint32_t n = header.ok() ? header.value.n_ranges : uint32_t(list.size() / wire::kRangeBytes);
  const auto ranges = wire::decode_ranges(list, n, region_bytes);
  if (!ranges.ok()) return;
  uint64_t total = 0;
  for (const wire::Range& r : ranges.value) {
    check(wire::in_region(r, region_bytes), "a range outside the region decoded");
    total += r.bytes;
    check(total <= wire::kMaxReadBytes, "ranges over the byte cap decoded");
  }
  if (header.ok()) check(same(wire::encode_request(header.value.transfer, ranges.value), frame), "a request does not encode back to its bytes");
}

void response(std::span<const uint8_t> frame) {
  const auto header = wire::decode_response_header(frame.first(std::min(frame.size(), wire::kResponseHeaderBytes)));
  if (!header.ok()) return;
  check(header.value.length <= (header.value.ok ? wire::kMaxReadBytes : wire::kMaxErrorBytes), "a response over its length cap decoded");
  check(same(wire::encode_response_header(header.value), frame.first(wire::kResponseHeaderBytes)), "a response header does not encode back to its bytes");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t region_bytes = 0;
  for (int i = 0; i < 8; ++i) region_bytes |= uint64_t(data[i]) << (8 * i);
  const std::span<const uint8_t> frame(data + 8, size - 8);
  request(frame, region_bytes);
  response(frame);
  return 0;
}
