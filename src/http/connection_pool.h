#pragma once
// The kept-alive connections of one HTTP client. A socket must not outlive the io_context
// that runs it, but a client may (a proxy's instance pools outlive its server): so each
// connection is kept with its context, and a context shutting down closes the idle
// connections it runs first.
#include <boost/asio/execution_context.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <memory>
#include <mutex>
#include <vector>

namespace moe::http {

class ConnectionPool : public std::enable_shared_from_this<ConnectionPool> {
 public:
  explicit ConnectionPool(size_t max_idle) : max_idle_(max_idle) {}

  // The most recently returned idle connection run by `context`, or null.
  std::unique_ptr<boost::beast::tcp_stream> take(boost::asio::execution_context& context);
  // Kept for reuse unless max_idle are already; else closed.
  void put(std::unique_ptr<boost::beast::tcp_stream> stream);
  // Closes the idle connections `context` runs.
  void drop(boost::asio::execution_context& context);

 private:
  struct Idle {
    boost::asio::execution_context* context;
    std::unique_ptr<boost::beast::tcp_stream> stream;
  };
  const size_t max_idle_;
  std::mutex mutex_;
  std::vector<Idle> idle_;
  std::vector<boost::asio::execution_context*> watched_;  // contexts that will call drop() as they shut down
};

}  // namespace moe::http
