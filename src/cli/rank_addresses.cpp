#include "cli/rank_addresses.h"

#include <charconv>
#include <vector>

#include "core/error.h"

namespace moe::cli {
namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma = list.find(','); comma != std::string::npos; comma = list.find(',', start)) {
    out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  out.push_back(list.substr(start));
  return out;
}

// The rank's entry of a list given once or once per rank; `single` says which it was.
std::string pick(const std::string& list, int rank, int size, const char* flag, bool& single) {
  const std::vector<std::string> items = split(list);
  single = items.size() == 1;
  if (!single && int(items.size()) != size) {
    if (size == 1) fail("{} '{}': a list of values is for the ranks of an expert-parallel group (--ep N)", flag, list);
    fail("{} '{}': give one value for every rank or {} values, one per rank (got {})", flag, list, size, items.size());
  }
  return single ? items[0] : items[size_t(rank)];
}

int port_of(const std::string& list, int rank, int size, const char* flag) {
  bool single = false;
  const std::string text = pick(list, rank, size, flag, single);
  int port = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || end != text.data() + text.size() || port < 0 || port > 65535) {
    fail("{} must be a port in [0, 65535], got '{}'", flag, text);
  }
  if (single && port != 0) port += rank;
  if (port > 65535) fail("rank {}: {} {} plus the rank is over 65535", rank, flag, text);
  return port;
}

}  // namespace

RankAddresses rank_addresses(const AddressFlags& f, int rank, int size) {
  RankAddresses r;
  bool single = false;
  r.host = pick(f.host, rank, size, "--host", single);
  if (r.host.empty()) fail("--host must not be empty");
  r.port = port_of(f.port, rank, size, "--port");
  if (!f.kv_host.empty()) r.kv_host = pick(f.kv_host, rank, size, "--kv-host", single);
  r.kv_port = port_of(f.kv_port, rank, size, "--kv-port");
  if (!f.kv_events_endpoint.empty()) r.kv_events_endpoint = pick(f.kv_events_endpoint, rank, size, "--kv-events-endpoint", single);
  return r;
}

}  // namespace moe::cli
