#include "proxy_front.h"

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

ProxyFront::ProxyFront(std::vector<proxy::InstanceSpec> instances, int io_threads) {
  proxy::ProxyConfig config;
  config.instances = std::move(instances);
  proxy_ = std::make_unique<proxy::ProxyServer>(std::move(config));
  http::ServerConfig sc;
  sc.port = 0;
  sc.io_threads = io_threads;
  server_ = std::make_unique<http::HttpServer>(sc, proxy_->router(), &proxy::ProxyServer::http_error);
  server_->start();
}

ProxyFront::~ProxyFront() { server_->stop(); }

std::vector<proxy::InstanceSpec> unified_instances(const std::string& url, int copies) {
  std::vector<proxy::InstanceSpec> out;
  for (int i = 0; i < copies; ++i) out.push_back(instance("u" + std::to_string(i), url, proxy::InstanceRole::both));
  return out;
}

std::vector<proxy::InstanceSpec> pd_instances(const std::string& url) {
  return {instance("p0", url, proxy::InstanceRole::prefill), instance("d0", url, proxy::InstanceRole::decode)};
}

}  // namespace moe::bench
