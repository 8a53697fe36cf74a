#include "disagg/transfer_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/shared_memory.h"

namespace moe::disagg {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `once` until both min_seconds and min_reps are reached; returns (reps, seconds).
std::pair<int, double> repeat(const TransferBenchOptions& o, const std::function<void()>& once) {
  once();  // warm-up: connections, registrations, page faults
  int reps = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0.0;
  while (reps < o.min_reps || elapsed < o.min_seconds) {
    once();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return {reps, elapsed};
}

TransferBenchRow row(uint64_t bytes, std::string method, std::pair<int, double> r) {
  return TransferBenchRow{bytes, std::move(method), double(bytes) * r.first / r.second / 1e9, r.second / r.first, r.first};
}

// Every other block of the first 2 * bytes of the source, packed into the destination.
std::vector<ReadOp> scattered(uint64_t bytes, uint64_t block) {
  std::vector<ReadOp> ops;
  for (uint64_t done = 0; done < bytes; done += block) {
    const uint64_t n = std::min(block, bytes - done);
    ops.push_back(ReadOp{2 * done, done, n});
  }
  return ops;
}

void read_once(Transport& reader, const nlohmann::json& remote, std::vector<ReadOp> ops) {
  const TransferId id = reader.submit(remote, std::move(ops));
  const TransferStatus st = reader.wait(id, std::chrono::seconds(60));
  reader.forget(id);
  if (st.state != TransferState::kDone) fail("{} read failed: {}", transport_kind_name(reader.kind()), st.error);
}

}  // namespace

TransferMethod parse_transfer_method(const std::string& name) {
  if (name == "ucx-get") return TransferMethod{name, TransportKind::kUcx, false};
  if (name == "ucx" || name == "tcp") return TransferMethod{name, parse_transport_kind(name), true};
  fail("unknown KV transfer method '{}' (expected ucx, ucx-get or tcp)", name);
}

std::vector<TransferBenchRow> run_transfer_bench(const TransferBenchOptions& o,
                                                 const std::function<void(const std::string&)>& progress) {
  const uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  // The source holds twice the largest transfer for the scattered reads.
  const size_t src_bytes = size_t(2 * largest), dst_bytes = size_t(largest);
  // Memory files, as the KV pool is: a same-host reader maps the source.
  SharedMemory src_memory("kv-bench-source", src_bytes), dst_memory("kv-bench-destination", dst_bytes);
  char* src = static_cast<char*>(src_memory.data());
  char* dst = static_cast<char*>(dst_memory.data());
  for (size_t i = 0; i < src_bytes; ++i) src[i] = char(i * 131 + 7);
  std::memset(dst, 0, dst_bytes);

  std::vector<TransferBenchRow> rows;
  for (uint64_t size : o.sizes) {
    progress(fmt::format("memcpy {} KiB", size >> 10));
    rows.push_back(row(size, "memcpy", repeat(o, [&] { std::memcpy(dst, src, size); })));
  }
  for (const TransferMethod& method : o.methods) {
    const std::string& name = method.name;
    const TransportConfig config{method.kind, "127.0.0.1", 0, method.same_host_mapping};
    std::unique_ptr<Transport> server = make_transport(config, MemoryRegion{src, src_bytes, src_memory.fd()});
    std::unique_ptr<Transport> reader = make_transport(config, MemoryRegion{dst, dst_bytes, dst_memory.fd()});
    const nlohmann::json remote = server->endpoint();
    for (uint64_t size : o.sizes) {
      progress(fmt::format("{} {} KiB", name, size >> 10));
      rows.push_back(row(size, name, repeat(o, [&] { read_once(*reader, remote, {ReadOp{0, 0, size}}); })));
      std::memset(dst, 0, size);
      rows.push_back(row(size, name + " blocks", repeat(o, [&] { read_once(*reader, remote, scattered(size, o.block_bytes)); })));
      // The last read must have brought the right bytes: a benchmark of a broken copy is
      // worth nothing.
      for (uint64_t off = 0; off < size; off += o.block_bytes) {
        const uint64_t n = std::min(o.block_bytes, size - off);
        if (std::memcmp(dst + off, src + 2 * off, n) != 0) {
          fail("{} delivered wrong bytes at offset {} of a {} KiB transfer", name, off, size >> 10);
        }
      }
    }
  }
  return rows;
}

}  // namespace moe::disagg
