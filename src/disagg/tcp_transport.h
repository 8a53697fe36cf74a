#pragma once
// The TCP transport: a plain socket protocol on Asio, for where UCX cannot be used.
#include <memory>

#include "disagg/transport.h"

namespace moe::disagg {

std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config, MemoryRegion region);

}  // namespace moe::disagg
