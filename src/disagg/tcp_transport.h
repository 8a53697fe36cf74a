#pragma once
// The TCP transport: a plain socket protocol on Asio, for where UCX cannot be used.
#include <chrono>
#include <memory>

#include "disagg/transport.h"

namespace moe::disagg {

// How long opening a connection may take, and how long a transfer (or a request being served)
// may go without moving a byte, before it fails: a peer that vanishes must fail its transfers,
// not hang them.
struct TcpTimeouts {
  std::chrono::milliseconds connect{5000};
  std::chrono::milliseconds stall{10000};
};

std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config, MemoryRegion region, TcpTimeouts timeouts = {});

}  // namespace moe::disagg
