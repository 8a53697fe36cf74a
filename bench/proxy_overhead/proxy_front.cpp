#include "proxy_front.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "core/error.h"

namespace moe::bench {

namespace {

proxy::InstanceSpec instance(std::string name, const std::string& url, proxy::InstanceRole role) {
  proxy::InstanceSpec s;
  s.name = std::move(name);
  s.url = url;
  s.role = role;
  return s;
}

}  // namespace

ProxyFront::ProxyFront(std::vector<proxy::InstanceSpec> instances, int io_threads, std::chrono::milliseconds dashboard_poll) {
  proxy::ProxyConfig config;
  config.instances = std::move(instances);
  proxy_ = std::make_unique<proxy::ProxyServer>(std::move(config));
  http::ServerConfig sc;
  sc.port = 0;
  sc.io_threads = io_threads;
  server_ = std::make_unique<http::HttpServer>(sc, proxy_->router(), &proxy::ProxyServer::http_error);
  server_->start();
  if (dashboard_poll.count() > 0) poller_ = std::thread([this, dashboard_poll] { poll_dashboard(dashboard_poll); });
}

ProxyFront::~ProxyFront() {
  if (poller_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    poller_.join();
  }
  server_->stop();
}

void ProxyFront::poll_dashboard(std::chrono::milliseconds period) {
  namespace asio = boost::asio;
  std::unique_lock lock(mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
    if (!polling_) continue;
    lock.unlock();
    asio::io_context io;
    http::HttpClient client(http::parse_url(url()), http::HttpClientOptions{std::chrono::seconds(10)});
    int status = 0;
    std::exception_ptr failure;
    auto get = [&]() -> asio::awaitable<void> {
      http::HttpRequest req;
      req.method = "GET";
      req.target = "/dashboard/state";
      status = (co_await client.fetch(std::move(req))).status;
    };
    asio::co_spawn(io, get(), [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);
    if (status != 200) fail("GET /dashboard/state answered {}", status);
    ++polls_;
    lock.lock();
  }
}

std::vector<proxy::InstanceSpec> unified_instances(const std::string& url, int copies) {
  std::vector<proxy::InstanceSpec> out;
  for (int i = 0; i < copies; ++i) out.push_back(instance("u" + std::to_string(i), url, proxy::InstanceRole::both));
  return out;
}

std::vector<proxy::InstanceSpec> pd_instances(const std::string& url) {
  return {instance("p0", url, proxy::InstanceRole::prefill), instance("d0", url, proxy::InstanceRole::decode)};
}

}  // namespace moe::bench
