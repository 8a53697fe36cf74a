#include "disagg/tcp_transport.h"
#include "disagg/transport.h"
#include "disagg/ucx_transport.h"

namespace moe::disagg {

std::unique_ptr<Transport> make_transport(const TransportConfig& config, MemoryRegion region) {
  if (config.kind == TransportKind::kUcx) return make_ucx_transport(config, region);
  return make_tcp_transport(config, region);
}

}  // namespace moe::disagg
