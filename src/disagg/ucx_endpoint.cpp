#include "disagg/ucx_endpoint.h"

#include <fmt/format.h>
#include <netdb.h>

#include <cstring>

namespace moe::disagg::ucx {

namespace {

constexpr char kBase64Chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_encode(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t b1 = i + 1 < size ? bytes[i + 1] : 0;
    const uint32_t b2 = i + 2 < size ? bytes[i + 2] : 0;
    const uint32_t triple = uint32_t{bytes[i]} << 16 | b1 << 8 | b2;
    out += kBase64Chars[triple >> 18 & 63];
    out += kBase64Chars[triple >> 12 & 63];
    out += i + 1 < size ? kBase64Chars[triple >> 6 & 63] : '=';
    out += i + 2 < size ? kBase64Chars[triple & 63] : '=';
  }
  return out;
}

bool base64_decode(const std::string& text, std::string& out) {
  if (text.size() % 4 != 0) return false;
  const size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  out.clear();
  uint32_t bits = 0;
  int nbits = 0;
  for (size_t i = 0; i < text.size() - padding; ++i) {
    const char* pos = text[i] == '\0' ? nullptr : std::strchr(kBase64Chars, text[i]);
    if (pos == nullptr) return false;
    bits = bits << 6 | uint32_t(pos - kBase64Chars);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out += char(bits >> nbits & 0xff);
    }
  }
  return true;
}

std::string resolve(const std::string& host, uint16_t port, SockAddr& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return gai_strerror(rc);
  std::memcpy(&out.storage, found->ai_addr, found->ai_addrlen);
  out.length = found->ai_addrlen;
  freeaddrinfo(found);
  return {};
}

uint16_t port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
}

std::string RemoteRegion::name() const { return fmt::format("{}:{}", host, port); }

std::string parse_remote(const nlohmann::json& remote, RemoteRegion& out) {
  try {
    if (remote.at("transport").get<std::string>() != "ucx") {
      return fmt::format("ucx: the remote endpoint is not a UCX one: {}", remote.dump());
    }
    out.host = remote.at("host").get<std::string>();
    out.port = remote.at("port").get<uint16_t>();
    out.base = remote.at("base").get<uint64_t>();
    out.bytes = remote.at("bytes").get<uint64_t>();
    out.rkey_text = remote.at("rkey").get<std::string>();
    out.same_host = remote.value("same_host", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    return fmt::format("ucx: bad remote endpoint {}: {}", remote.dump(), e.what());
  }
  if (!base64_decode(out.rkey_text, out.rkey) || out.rkey.empty()) {
    return fmt::format("ucx: bad remote key in the endpoint of {}", out.name());
  }
  return {};
}

namespace {

bool fits(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

}  // namespace

std::string check_bounds(const std::vector<ReadOp>& ops, const RemoteRegion& remote, uint64_t local_bytes) {
  for (const ReadOp& op : ops) {
    if (!fits(op.remote_offset, op.bytes, remote.bytes)) {
      return fmt::format("ucx: read of {} bytes at offset {} lies outside the {}-byte region of {}", op.bytes,
                         op.remote_offset, remote.bytes, remote.name());
    }
    if (!fits(op.local_offset, op.bytes, local_bytes)) {
      return fmt::format("ucx: read of {} bytes from {} to local offset {} lies outside the {}-byte local region",
                         op.bytes, remote.name(), op.local_offset, local_bytes);
    }
  }
  return {};
}

}  // namespace moe::disagg::ucx
