#pragma once
// The UCX transport: the region is registered once (ucp_mem_map) and readers fetch it with
// one-sided gets (ucp_get_nbx); UCX picks shared memory on one host and TCP or RDMA across.
#include <memory>

#include "disagg/transport.h"

namespace moe::disagg {

std::unique_ptr<Transport> make_ucx_transport(const TransportConfig& config, MemoryRegion region);

}  // namespace moe::disagg
