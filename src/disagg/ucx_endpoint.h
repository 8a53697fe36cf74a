#pragma once
// The UCX transport's view of a peer: the endpoint JSON another UCX transport advertises
// (host, port, region base and size, packed remote key in base64, the same-host advert), the socket address it
// names, and the bounds every read must keep. Pure helpers, apart from name resolution.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "disagg/transport.h"

namespace moe::disagg::ucx {

std::string base64_encode(const void* data, size_t size);
// Returns false on anything but padded base64.
bool base64_decode(const std::string& text, std::string& out);

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

// Returns the error text, empty on success.
std::string resolve(const std::string& host, uint16_t port, SockAddr& out);
uint16_t port_of(const sockaddr_storage& addr);

// The peer as another transport's endpoint() describes it.
struct RemoteRegion {
  std::string host;
  uint16_t port = 0;
  uint64_t base = 0;
  uint64_t bytes = 0;
  std::string rkey_text;  // base64, as advertised: the key of the unpacked-rkey cache
  std::string rkey;       // packed bytes
  nlohmann::json same_host;  // same_host_advert() of the peer, null when it has none
  std::string name() const;
};

// Returns the error text, empty on success.
std::string parse_remote(const nlohmann::json& remote, RemoteRegion& out);

// Returns the error text, empty when every op lies inside both regions.
std::string check_bounds(const std::vector<ReadOp>& ops, const RemoteRegion& remote, uint64_t local_bytes);

}  // namespace moe::disagg::ucx
