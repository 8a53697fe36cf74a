#include "http/router.h"

namespace moe::http {

void Router::add(Verb method, std::string path, Handler handler) {
  auto& methods = routes_[std::move(path)];
  for (auto& [m, h] : methods) {
    if (m == method) {
      h = std::move(handler);
      return;
    }
  }
  methods.emplace_back(method, std::move(handler));
}

Router::Match Router::find(Verb method, std::string_view path) const {
  Match match;
  const auto it = routes_.find(path);
  if (it == routes_.end()) return match;
  match.path_known = true;
  for (const auto& [m, h] : it->second) {
    if (m == method) {
      match.handler = &h;
      return match;
    }
    if (!match.allow.empty()) match.allow += ", ";
    match.allow += std::string(beast::http::to_string(m));
  }
  return match;
}

}  // namespace moe::http
