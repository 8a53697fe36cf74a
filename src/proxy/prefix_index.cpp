#include "proxy/prefix_index.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <algorithm>
#include <cstdio>

#include "core/block_hash.h"
#include "http/http_client.h"
#include "kv_events/wire.h"

namespace moe::proxy {

namespace asio = boost::asio;

namespace {

// tcp://0.0.0.0:P or tcp://*:P names no host to connect to: the instance's own is meant.
std::string reachable(const std::string& endpoint, const http::Url& instance) {
  for (const char* any : {"tcp://0.0.0.0:", "tcp://*:"}) {
    const std::string prefix(any);
    if (endpoint.starts_with(prefix)) return "tcp://" + instance.host + ":" + endpoint.substr(prefix.size());
  }
  return endpoint;
}

asio::awaitable<void> fetch(http::Url base, std::string engine_id, kv_events::KvEventSubscriber* subscriber) {
  http::HttpClient client(base, http::HttpClientOptions{std::chrono::seconds(5)});
  http::HttpRequest request;
  request.method = "GET";
  request.target = "/internal/kv/blocks";
  try {
    const http::HttpResponse r = co_await client.fetch(std::move(request));
    if (r.status != 200) co_return;
    const kv_events::NamedSnapshot s = kv_events::decode_snapshot(r.body);
    if (s.engine_id == engine_id) (void)subscriber->resync(engine_id, s.snapshot);
  } catch (const std::exception&) {
    // The subscriber asks again after its retry interval.
  }
}

}  // namespace

PrefixIndex::PrefixIndex() : work_(io_.get_executor()) {
  thread_ = std::thread([this] { io_.run(); });
  subscriber_ = std::make_unique<kv_events::KvEventSubscriber>([this](const std::string& id) { fetch_snapshot(id); });
}

PrefixIndex::~PrefixIndex() {
  subscriber_.reset();
  work_.reset();
  io_.stop();
  thread_.join();
}

void PrefixIndex::fetch_snapshot(const std::string& engine_id) {
  std::lock_guard lock(mu_);
  const auto it = by_engine_.find(engine_id);
  if (it == by_engine_.end()) return;
  asio::co_spawn(io_, fetch(it->second, engine_id, subscriber_.get()), asio::detached);
}

void PrefixIndex::on_probe(const Instance& instance, const HealthReport& report) {
  if (report.kv_events.empty() || report.engine_id.empty()) return;
  const std::string endpoint = reachable(report.kv_events, instance.backend().base);
  {
    std::lock_guard lock(mu_);
    Source& s = by_instance_[instance.name()];
    if (s.engine_id == report.engine_id && s.endpoint == endpoint) return;
    if (!s.engine_id.empty() && s.engine_id != report.engine_id) by_engine_.erase(s.engine_id);
    s = Source{report.engine_id, endpoint, instance.backend().base};
    by_engine_[report.engine_id] = instance.backend().base;
  }
  try {
    subscriber_->add_instance(report.engine_id, endpoint);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "proxy: cannot subscribe to the KV events of %s at %s: %s\n", instance.name().c_str(), endpoint.c_str(),
                 e.what());
  }
}

nlohmann::json PrefixIndex::describe(const std::string& instance) const {
  Source source;
  {
    std::lock_guard lock(mu_);
    const auto it = by_instance_.find(instance);
    if (it == by_instance_.end()) return nullptr;
    source = it->second;
  }
  return {{"engine_id", source.engine_id},
          {"endpoint", source.endpoint},
          {"synced", subscriber_->synced(source.engine_id)},
          {"blocks", subscriber_->n_blocks(source.engine_id)}};
}

std::map<std::string, int64_t> PrefixIndex::matched_tokens(std::span<const int32_t> prompt) const {
  std::map<std::string, std::string> engines;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, source] : by_instance_) engines[name] = source.engine_id;
  }
  const auto now = std::chrono::steady_clock::now();
  std::map<int32_t, std::vector<uint64_t>> hashes;  // by block size: hashed once for all instances
  std::map<std::string, int64_t> out;
  for (const auto& [name, engine_id] : engines) {
    const int32_t block_size = subscriber_->block_size(engine_id);
    if (block_size <= 0) continue;
    auto [it, added] = hashes.try_emplace(block_size);
    if (added) it->second = prompt_block_hashes(prompt, size_t(block_size));
    size_t blocks = subscriber_->matched_blocks(engine_id, it->second);
    {
      std::lock_guard lock(mu_);
      if (const auto r = routed_.find(name); r != routed_.end()) {
        const size_t noted = routed_blocks(r->second, it->second, now);
        // Once the instance's events cover the noted blocks they speak for them: a later
        // eviction must not be hidden by the note.
        if (noted > 0 && blocks >= noted) {
          for (size_t b = 0; b < noted; ++b) r->second.until.erase(it->second[b]);
        }
        blocks = std::max(blocks, noted);
      }
    }
    out[name] = int64_t(blocks) * block_size;
  }
  return out;
}

size_t PrefixIndex::routed_blocks(const Routed& r, const std::vector<uint64_t>& hashes, std::chrono::steady_clock::time_point now) {
  // Each block's hash covers every block before it, so the held prefix ends at the first
  // block not held.
  size_t n = 0;
  for (const uint64_t h : hashes) {
    const auto it = r.until.find(h);
    if (it == r.until.end() || it->second <= now) break;
    ++n;
  }
  return n;
}

void PrefixIndex::note_routed(const std::string& instance, std::span<const int32_t> prompt) {
  std::string engine_id;
  {
    std::lock_guard lock(mu_);
    const auto it = by_instance_.find(instance);
    if (it == by_instance_.end()) return;
    engine_id = it->second.engine_id;
  }
  const int32_t block_size = subscriber_->block_size(engine_id);
  if (block_size <= 0) return;
  std::vector<uint64_t> hashes = prompt_block_hashes(prompt, size_t(block_size));
  if (hashes.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  const auto until = now + kRoutedFor;
  std::lock_guard lock(mu_);
  Routed& r = routed_[instance];
  while (!r.queue.empty() && r.queue.front().first <= now) {
    for (const uint64_t h : r.queue.front().second) {
      if (const auto it = r.until.find(h); it != r.until.end() && it->second <= now) r.until.erase(it);
    }
    r.queue.pop_front();
  }
  for (const uint64_t h : hashes) r.until[h] = until;
  r.queue.emplace_back(until, std::move(hashes));
}

}  // namespace moe::proxy
