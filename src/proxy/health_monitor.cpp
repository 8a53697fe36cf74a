#include "proxy/health_monitor.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include "http/deadline.h"
#include "http/http_client.h"

namespace moe::proxy {

namespace asio = boost::asio;

namespace {

// A probe reports, it never throws: nullopt when the instance cannot be reached, breaks
// off or answers anything but 200.
asio::awaitable<std::optional<HealthReport>> health_of(http::HttpClient& client) {
  http::HttpRequest request;
  request.method = "GET";
  request.target = "/health";
  std::optional<HealthReport> report;
  try {
    const http::HttpResponse r = co_await client.fetch(std::move(request));
    if (r.status == 200) report = parse_health_report(nlohmann::json::parse(r.body, nullptr, false));
  } catch (const std::exception&) {
  }
  co_return report;
}

asio::awaitable<void> probe(Registry& registry, InstancePtr instance, std::chrono::milliseconds timeout,
                            const ProbeListener& listener) {
  http::HttpClient client(instance->backend().base, http::HttpClientOptions{timeout});
  const std::optional<std::optional<HealthReport>> answered = co_await http::within(timeout, health_of(client));
  const std::optional<HealthReport> report = answered ? *answered : std::nullopt;
  registry.report_probe(*instance, report);
  if (report && listener) listener(*instance, *report);
}

asio::awaitable<void> monitor(Registry& registry, HealthMonitorConfig config, const ProbeListener& listener) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    timer.expires_after(config.interval);
    co_await timer.async_wait(asio::use_awaitable);
    co_await probe_all(registry, registry.all(), config.timeout, listener);
  }
}

}  // namespace

asio::awaitable<void> probe_all(Registry& registry, std::vector<InstancePtr> instances, std::chrono::milliseconds timeout,
                                const ProbeListener& listener) {
  if (instances.empty()) co_return;
  const auto ex = co_await asio::this_coro::executor;
  using Probe = decltype(asio::co_spawn(ex, probe(registry, instances.front(), timeout, listener), asio::deferred));
  std::vector<Probe> probes;
  for (const InstancePtr& i : instances) probes.push_back(asio::co_spawn(ex, probe(registry, i, timeout, listener), asio::deferred));
  co_await asio::experimental::make_parallel_group(std::move(probes))
      .async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
}

HealthMonitor::HealthMonitor(Registry& registry, HealthMonitorConfig config, ProbeListener listener)
    : registry_(registry), config_(config), listener_(std::move(listener)) {
  asio::co_spawn(io_, probe_all(registry_, registry_.all(), config_.timeout, listener_), asio::detached);
  io_.run();
  io_.restart();
  asio::co_spawn(io_, monitor(registry_, config_, listener_), asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

HealthMonitor::~HealthMonitor() {
  io_.stop();
  thread_.join();
}

}  // namespace moe::proxy
