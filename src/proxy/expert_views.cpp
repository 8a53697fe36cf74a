#include "proxy/expert_views.h"

#include <fmt/format.h>

#include "http/deadline.h"

namespace moe::proxy {

namespace asio = boost::asio;

namespace {

// The answer's body, or why there is none (a message for the page).
asio::awaitable<std::pair<std::optional<Json>, std::string>> ask(const Instance& rank, std::chrono::milliseconds timeout) {
  http::HttpRequest request;
  request.method = "GET";
  request.target = "/admin/expert-state";
  std::string why;
  try {
    const std::optional<http::HttpResponse> r = co_await http::within(timeout, rank.backend().connections->fetch(std::move(request)));
    if (!r) {
      why = fmt::format("{} did not answer within {} ms", rank.name(), timeout.count());
    } else if (r->status != 200) {
      why = fmt::format("{} answered {}", rank.name(), r->status);
    } else {
      Json body = Json::parse(r->body, nullptr, false);
      if (body.is_object()) co_return std::pair{std::optional<Json>(std::move(body)), std::string()};
      why = fmt::format("{} answered a body that is not a JSON object", rank.name());
    }
  } catch (const std::exception& e) {
    why = fmt::format("{}: {}", rank.name(), e.what());
  }
  co_return std::pair{std::optional<Json>(), why};
}

}  // namespace

asio::awaitable<Json> fetch_expert_views(std::vector<InstancePtr> instances, std::map<std::string, bool> up,
                                         std::chrono::milliseconds timeout) {
  Json out = Json::object();
  for (const auto& [group, is_up] : up) {
    if (!is_up) {
      out[group] = {{"error", "the group is down"}};
      continue;
    }
    std::string why = "the group has no ranks";
    for (const InstancePtr& rank : instances) {
      if (rank->group() != group) continue;
      auto [state, error] = co_await ask(*rank, timeout);
      if (state) {
        out[group] = {{"rank", rank->name()}, {"state", std::move(*state)}};
        break;
      }
      why = std::move(error);
    }
    if (!out.contains(group)) out[group] = {{"error", why}};
  }
  co_return out;
}

}  // namespace moe::proxy
