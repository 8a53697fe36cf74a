#pragma once
// moengine's proxy (proxy::ProxyServer behind an HttpServer, as `moengine proxy` runs it)
// in this process, in front of the stub, with the default policy (cost) and settings;
// optionally with a client polling its GET /dashboard/state as an open dashboard does.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/server.h"
#include "proxy/proxy_server.h"

namespace moe::bench {

class ProxyFront {
 public:
  // Probes every instance once, then listens on a free port of 127.0.0.1; with a
  // dashboard_poll period, a thread of its own GETs /dashboard/state that often.
  ProxyFront(std::vector<proxy::InstanceSpec> instances, int io_threads,
             std::chrono::milliseconds dashboard_poll = std::chrono::milliseconds(0));
  ~ProxyFront();
  ProxyFront(const ProxyFront&) = delete;
  ProxyFront& operator=(const ProxyFront&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }
  // With a dashboard_poll period: whether the poller GETs the state (on from the start).
  void set_polling(bool on) { polling_ = on; }
  size_t polls() const { return polls_; }

 private:
  void poll_dashboard(std::chrono::milliseconds period);

  std::unique_ptr<proxy::ProxyServer> proxy_;  // outlives the server, whose handlers use it
  std::unique_ptr<http::HttpServer> server_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::atomic<bool> polling_{true};
  std::atomic<size_t> polls_{0};
  std::thread poller_;
};

// The stub as `copies` unified instances (u0, u1, ...). Under the cost policy a short
// request runs whole, in one hop, at a unified instance that has nothing else of the
// proxy's in flight; with at least as many copies as requests in flight there always is
// one, so every request is a single hop, as it is through nginx.
std::vector<proxy::InstanceSpec> unified_instances(const std::string& url, int copies);

// The stub as one prefill and one decode instance: every request runs in two legs.
std::vector<proxy::InstanceSpec> pd_instances(const std::string& url);

}  // namespace moe::bench
