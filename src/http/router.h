#pragma once
// Routes by exact path and method. A path that exists under other methods is told apart
// from one that does not, so the server can answer 405 (with Allow) rather than 404.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "http/exchange.h"

namespace moe::http {

using Handler = std::function<asio::awaitable<void>(Exchange&)>;

class Router {
 public:
  // A second handler for the same method and path replaces the first.
  void add(Verb method, std::string path, Handler handler);

  struct Match {
    const Handler* handler = nullptr;  // null: no route for this method and path
    bool path_known = false;           // the path has routes under other methods
    std::string allow;                 // those methods, for the Allow header ("GET, POST")
  };
  Match find(Verb method, std::string_view path) const;

 private:
  std::map<std::string, std::vector<std::pair<Verb, Handler>>, std::less<>> routes_;
};

}  // namespace moe::http
