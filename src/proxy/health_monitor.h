#pragma once
// Active health checks: every instance's GET /health, all at once, every `interval`, on a
// thread of its own (a stuck instance delays no request). An instance that does not answer
// 200 within `timeout` is out of routing until it does; the answers' capacity and load
// fields feed the registry.
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "proxy/registry.h"

namespace moe::proxy {

struct HealthMonitorConfig {
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds timeout{1000};
};

// Told of every answered probe, on the monitor's thread.
using ProbeListener = std::function<void(const Instance&, const HealthReport&)>;

class HealthMonitor {
 public:
  // Probes once before returning, so routing starts from what the instances say.
  HealthMonitor(Registry& registry, HealthMonitorConfig config, ProbeListener listener = {});
  ~HealthMonitor();
  HealthMonitor(const HealthMonitor&) = delete;
  HealthMonitor& operator=(const HealthMonitor&) = delete;

 private:
  Registry& registry_;
  const HealthMonitorConfig config_;
  const ProbeListener listener_;
  boost::asio::io_context io_;
  std::thread thread_;
};

// One round of probes over `instances`, on the caller's executor.
boost::asio::awaitable<void> probe_all(Registry& registry, std::vector<InstancePtr> instances,
                                       std::chrono::milliseconds timeout, const ProbeListener& listener = {});

}  // namespace moe::proxy
