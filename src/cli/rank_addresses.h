#pragma once
// The addresses of one rank of an expert-parallel group, from serve's flags: each of
// --host, --port, --kv-host, --kv-port and --kv-events-endpoint is given once for the whole
// group or once per rank, comma-separated, so that one mpirun command line starts ranks
// that listen on their own hosts' addresses. A single port P other than 0 gives rank r the
// port P + r (ranks sharing a host must not collide); 0 picks a free one on every rank.
#include <string>

namespace moe::cli {

struct RankAddresses {
  std::string host;
  int port = 0;
  std::string kv_host;  // empty: as host
  int kv_port = 0;
  std::string kv_events_endpoint;  // empty: none
};

struct AddressFlags {
  std::string host, port, kv_host, kv_port, kv_events_endpoint;
};

// Throws moe::Error naming the flag when a list's length is neither 1 nor `size`, a port is
// not a number in [0, 65535], or a port plus the rank goes past it.
RankAddresses rank_addresses(const AddressFlags& flags, int rank, int size);

}  // namespace moe::cli
