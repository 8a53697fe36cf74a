#include "disagg/ucx_transport.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "disagg/same_host.h"
#include "disagg/ucx_endpoint.h"
#include "disagg/ucx_setup.h"

namespace moe::disagg {
namespace {

using namespace ucx;

// A posted get cannot be cancelled (ucp_request_cancel only withdraws tag receives), so
// cancel() waits out the gets in flight: capping their number and size bounds that wait,
// and what one huge batch holds of UCX's resources.
constexpr size_t kMaxGetsInFlight = 64;
constexpr uint64_t kMaxGetBytes = uint64_t{8} << 20;
// The worker's event fd signals arrivals but not every chance to go on sending (a full
// shared-memory FIFO draining), so the progress thread never sleeps long.
constexpr int kPollTimeoutMs = 10;
// Copies from a mapped same-host peer run on the progress thread, this many bytes per turn,
// so that cancels and other transfers are not kept waiting behind a long copy.
constexpr uint64_t kCopyBytesPerTurn = uint64_t{8} << 20;
// A same-host read this small is copied inside submit(), on the caller's thread: handing it
// to the progress thread and back costs two wake-ups, longer than the copy itself.
constexpr uint64_t kInlineCopyBytes = uint64_t{4} << 20;

class UcxTransport;
struct Transfer;

// One ucp_get_nbx; its address is the request's user data.
struct Get {
  Transfer* transfer = nullptr;
  ReadOp op;
};

// Cuts reads into gets of at most kMaxGetBytes.
std::vector<Get> split(const std::vector<ReadOp>& ops, Transfer* transfer) {
  std::vector<Get> out;
  out.reserve(ops.size());
  for (ReadOp op : ops) {
    while (op.bytes > kMaxGetBytes) {
      out.push_back({transfer, {op.remote_offset, op.local_offset, kMaxGetBytes}});
      op.remote_offset += kMaxGetBytes;
      op.local_offset += kMaxGetBytes;
      op.bytes -= kMaxGetBytes;
    }
    out.push_back({transfer, op});
  }
  return out;
}

// A connected reader-side endpoint to one peer, shared by the transfers reading from it.
// Destroyed on the progress thread once the peer is dropped and no transfer uses it.
struct Peer {
  UcxTransport* owner = nullptr;
  std::string name;  // "host:port"
  ucp_ep_h ep = nullptr;  // null when the peer is mapped
  std::shared_ptr<SameHostPeer> mapped;
  nlohmann::json same_host;  // the advert it was opened with
  std::unordered_map<std::string, ucp_rkey_h> rkeys;  // by the advertised base64 text
  ucs_status_t failure = UCS_OK;                      // set by the error handler
  // Completes the gets still in flight as cancelled; the peer takes no more.
  void close();
  ~Peer() { close(); }
};

struct Transfer {
  TransferId id = 0;
  RemoteRegion remote;
  std::vector<Get> gets;  // not resized once started: requests point into it
  TransferCallback on_done;
  std::string error;  // why it fails: set at submit, on connecting, or by a failed get

  std::shared_ptr<Peer> peer;
  ucp_rkey_h rkey = nullptr;
  size_t next = 0;  // the first get not posted yet
  size_t in_flight = 0;
  uint64_t landed = 0;
  uint64_t reported = 0;  // landed bytes published to poll()
  bool cancelled = false;
};

struct Command {
  enum Kind { kStart, kCancel } kind;
  TransferId id = 0;
  std::unique_ptr<Transfer> transfer;  // with kStart
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(const TransportConfig& config, MemoryRegion region)
      : config_(config),
        region_(region),
        map_same_host_(config.same_host_mapping && ucx_tls_allows_shared_memory(std::getenv("UCX_TLS"))) {
    prepare_ucx_process();
    std::promise<std::string> started;
    std::future<std::string> result = started.get_future();
    thread_ = std::thread([this, &started] { run(started); });
    const std::string error = result.get();
    if (!error.empty()) {
      thread_.join();
      throw Error(error);
    }
  }

  ~UcxTransport() override {
    {
      // Signalled under the lock: the progress thread destroys the worker once it sees
      // stopping_ and has nothing left to do.
      std::lock_guard lock(mutex_);
      stopping_ = true;
      ucp_worker_signal(worker_);
    }
    thread_.join();
  }

  TransportKind kind() const override { return TransportKind::kUcx; }
  nlohmann::json endpoint() const override { return endpoint_; }

  TransferId submit(const nlohmann::json& remote, std::vector<ReadOp> ops, TransferCallback on_done) override {
    auto transfer = std::make_unique<Transfer>();
    transfer->on_done = std::move(on_done);
    transfer->error = parse_remote(remote, transfer->remote);
    if (transfer->error.empty()) {
      ops = coalesce(std::move(ops));
      transfer->error = check_bounds(ops, transfer->remote, region_.bytes);
      if (transfer->error.empty()) transfer->gets = split(ops, transfer.get());
    }
    std::unique_lock lock(mutex_);
    const TransferId id = ++last_id_;
    transfer->id = id;
    if (std::shared_ptr<SameHostPeer> mapped = inline_copy_source(*transfer)) {
      statuses_[id] = TransferStatus{};
      lock.unlock();
      copy_inline(*transfer, *mapped);
      return id;
    }
    statuses_[id] = TransferStatus{};
    commands_.push_back({Command::kStart, id, std::move(transfer)});
    ucp_worker_signal(worker_);
    return id;
  }

  TransferStatus poll(TransferId id) override {
    std::lock_guard lock(mutex_);
    return status_locked(id);
  }

  TransferStatus wait(TransferId id, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    done_.wait_for(lock, timeout, [&] { return status_locked(id).state != TransferState::kPending; });
    return status_locked(id);
  }

  void cancel(TransferId id) override {
    std::unique_lock lock(mutex_);
    if (status_locked(id).state != TransferState::kPending) return;
    commands_.push_back({Command::kCancel, id, nullptr});
    ucp_worker_signal(worker_);  // under the lock, like every signal: see the destructor
    done_.wait(lock, [&] { return status_locked(id).state != TransferState::kPending; });
  }

  void forget(TransferId id) override {
    std::lock_guard lock(mutex_);
    auto it = statuses_.find(id);
    if (it != statuses_.end() && it->second.state != TransferState::kPending) statuses_.erase(it);
  }

  // For Peer::close, on the progress thread.
  void close_peer(Peer& peer) {
    if (peer.ep == nullptr) return;
    // The endpoint first: the gets it completes may still use the keys.
    close_ep(peer.ep);
    peer.ep = nullptr;
    if (peer.failure == UCS_OK) peer.failure = UCS_ERR_CANCELED;
    for (auto& [text, rkey] : peer.rkeys) ucp_rkey_destroy(rkey);
    peer.rkeys.clear();
  }

 private:
  // Under mutex_: the mapped peer to copy `t` from inside submit(), or null.
  std::shared_ptr<SameHostPeer> inline_copy_source(const Transfer& t) const {
    if (!t.error.empty() || t.gets.empty()) return nullptr;
    uint64_t bytes = 0;
    for (const Get& get : t.gets) bytes += get.op.bytes;
    if (bytes > kInlineCopyBytes) return nullptr;
    auto it = mapped_.find(t.remote.name());
    if (it == mapped_.end() || it->second.first != t.remote.same_host) return nullptr;
    return it->second.second;
  }

  void copy_inline(Transfer& t, const SameHostPeer& mapped) {
    char* local = static_cast<char*>(region_.base);
    uint64_t bytes = 0;
    for (const Get& get : t.gets) {
      std::memcpy(local + get.op.local_offset, mapped.data() + get.op.remote_offset, get.op.bytes);
      bytes += get.op.bytes;
    }
    const TransferStatus status{TransferState::kDone, {}, bytes};
    // The callback first, as finish() does: once wait() or cancel() returns, it has run.
    if (t.on_done) t.on_done(t.id, status);
    {
      std::lock_guard lock(mutex_);
      statuses_[t.id] = status;
    }
    done_.notify_all();
  }

  TransferStatus status_locked(TransferId id) const {
    auto it = statuses_.find(id);
    if (it == statuses_.end()) return {TransferState::kFailed, fmt::format("ucx: unknown transfer {}", id), 0};
    return it->second;
  }

  // ---- the progress thread ----

  void run(std::promise<std::string>& started) {
    std::string error;
    try {
      start_ucx();
    } catch (const Error& e) {
      error = e.what();
    }
    if (!error.empty()) {
      stop_ucx();
      started.set_value(error);
      return;
    }
    started.set_value({});
    serve();
    stop_ucx();
  }

  void start_ucx() {
    init_context();
    init_worker();
    register_region();
    listen();
  }

  void init_context() {
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "cannot read the UCX configuration");
    apply_ucx_defaults(config);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    params.name = "moengine-kv";
    const ucs_status_t status = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    check(status, "cannot initialize");
  }

  void init_worker() {
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context_, &params, &worker_), "cannot create a worker");
    check(ucp_worker_get_efd(worker_, &event_fd_), "cannot get the worker's event fd");
  }

  void register_region() {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = region_.base;
    params.length = region_.bytes;
    check(ucp_mem_map(context_, &params, &memh_), fmt::format("cannot register {} bytes", region_.bytes));
    void* packed = nullptr;
    size_t packed_size = 0;
    check(ucp_rkey_pack(context_, memh_, &packed, &packed_size), "cannot pack the remote key");
    rkey_text_ = base64_encode(packed, packed_size);
    ucp_rkey_buffer_release(packed);
  }

  void listen() {
    const std::string where = fmt::format("{}:{}", config_.host, config_.port);
    SockAddr addr;
    if (std::string error = resolve(config_.host, config_.port, addr); !error.empty()) {
      fail("ucx: cannot listen on {}: {}", where, error);
    }
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr.storage);
    params.sockaddr.addrlen = addr.length;
    params.conn_handler.cb = [](ucp_conn_request_h request, void* self) {
      static_cast<UcxTransport*>(self)->accept(request);
    };
    params.conn_handler.arg = this;
    const ucs_status_t status = ucp_listener_create(worker_, &params, &listener_);
    if (status == UCS_ERR_BUSY) fail("ucx: cannot listen on {}: the address is in use", where);
    check(status, fmt::format("cannot listen on {}", where));
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    check(ucp_listener_query(listener_, &attr), fmt::format("cannot query the listener on {}", where));
    endpoint_ = {{"transport", "ucx"},
                 {"host", config_.host},
                 {"port", port_of(attr.sockaddr)},
                 {"base", reinterpret_cast<uint64_t>(region_.base)},
                 {"bytes", uint64_t{region_.bytes}},
                 {"rkey", rkey_text_}};
    if (nlohmann::json advert = same_host_advert(region_); !advert.is_null()) endpoint_["same_host"] = std::move(advert);
  }

  static void check(ucs_status_t status, const std::string& what) {
    if (status != UCS_OK) fail("ucx: {}: {}", what, ucs_status_string(status));
  }

  void stop_ucx() {
    peers_.clear();
    for (ucp_ep_h ep : served_eps_) close_ep(ep);
    served_eps_.clear();
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
    while (!closing_.empty()) {
      ucp_worker_progress(worker_);
      reap_closed();
    }
    if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  void serve() {
    for (;;) {
      const bool stopping = run_commands();
      while (ucp_worker_progress(worker_) != 0) {
      }
      drop_failed();
      drop_exited();
      advance_transfers();
      reap_closed();
      if (stopping && transfers_.empty()) return;
      sleep_until_event();
    }
  }

  // Returns whether the transport is shutting down.
  bool run_commands() {
    std::deque<Command> commands;
    bool stopping;
    {
      std::lock_guard lock(mutex_);
      commands.swap(commands_);
      stopping = stopping_;
    }
    for (Command& command : commands) {
      if (command.kind == Command::kStart) {
        start(std::move(command.transfer));
      } else if (auto it = transfers_.find(command.id); it != transfers_.end()) {
        it->second->cancelled = true;
      }
    }
    if (stopping) {
      // Closing an endpoint completes its gets at once (as cancelled): shutting down does
      // not wait on a peer that is slow or gone.
      for (auto& [id, transfer] : transfers_) {
        transfer->cancelled = true;
        if (transfer->peer) transfer->peer->close();
      }
      peers_.clear();
    }
    return stopping;
  }

  void sleep_until_event() {
    if (copying_ || ucp_worker_arm(worker_) == UCS_ERR_BUSY) return;
    {
      std::lock_guard lock(mutex_);
      if (!commands_.empty()) return;
    }
    pollfd fd{event_fd_, POLLIN, 0};
    ::poll(&fd, 1, kPollTimeoutMs);
  }

  void start(std::unique_ptr<Transfer> transfer) {
    Transfer& t = *transfer;
    if (t.error.empty() && !t.gets.empty()) connect(t);
    transfers_.emplace(t.id, std::move(transfer));
  }

  void connect(Transfer& t) {
    const std::string name = t.remote.name();
    std::shared_ptr<Peer>& peer = peers_[name];
    // Another process on that address now (the peer restarted): its region is another one.
    if (peer && peer->same_host != t.remote.same_host) {
      peer.reset();
      std::lock_guard lock(mutex_);
      mapped_.erase(name);
    }
    if (!peer) {
      peer = open_peer(t.remote, t.error);
      if (!peer) {
        peers_.erase(name);
        return;
      }
    }
    t.peer = peer;
    if (peer->mapped) return;
    auto [it, added] = peer->rkeys.try_emplace(t.remote.rkey_text, nullptr);
    if (added) {
      const ucs_status_t status = ucp_ep_rkey_unpack(peer->ep, t.remote.rkey.data(), &it->second);
      if (status != UCS_OK) {
        peer->rkeys.erase(it);
        t.error = fmt::format("ucx: cannot unpack the remote key of {}: {}", name, ucs_status_string(status));
        return;
      }
    }
    t.rkey = it->second;
  }

  // Returns null, with `error` set, when the endpoint cannot even be created; a peer that
  // does not answer fails later, through the error handler.
  std::shared_ptr<Peer> open_peer(const RemoteRegion& remote, std::string& error) {
    auto peer = std::make_shared<Peer>();
    peer->owner = this;
    peer->name = remote.name();
    peer->same_host = remote.same_host;
    if (map_same_host_ && !remote.same_host.is_null()) {
      std::string why;
      peer->mapped = SameHostPeer::open(remote.same_host, remote.bytes, why);
      if (peer->mapped) {
        std::lock_guard lock(mutex_);
        mapped_[peer->name] = {remote.same_host, peer->mapped};
        return peer;
      }
      if (why != "another host") {
        std::fprintf(stderr, "ucx: reading from %s through UCX, not its mapped memory: %s\n", peer->name.c_str(),
                     why.c_str());
      }
    }
    SockAddr addr;
    if (std::string why = resolve(remote.host, remote.port, addr); !why.empty()) {
      error = fmt::format("ucx: cannot resolve {}: {}", peer->name, why);
      return nullptr;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr.storage);
    params.sockaddr.addrlen = addr.length;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
      auto* p = static_cast<Peer*>(arg);
      p->failure = status;
      p->owner->failed_ = true;
    };
    params.err_handler.arg = peer.get();
    const ucs_status_t status = ucp_ep_create(worker_, &params, &peer->ep);
    if (status != UCS_OK) {
      peer->ep = nullptr;
      error = fmt::format("ucx: cannot connect to {}: {}", peer->name, ucs_status_string(status));
      return nullptr;
    }
    return peer;
  }

  // Drops failed endpoints from the cache so the next transfer reconnects; transfers that
  // still hold one finish once UCX has completed their gets with the error.
  void drop_failed() {
    if (!failed_) return;
    failed_ = false;
    std::erase_if(peers_, [](const auto& entry) { return entry.second->failure != UCS_OK; });
    std::erase_if(served_eps_, [this](ucp_ep_h ep) {
      if (!failed_served_.contains(ep)) return false;
      close_ep(ep);
      return true;
    });
    failed_served_.clear();
  }

  // A mapped peer that exited leaves the cache, and its memory goes once the transfers
  // still copying from it are done.
  void drop_exited() {
    std::erase_if(peers_, [this](const auto& entry) {
      if (!entry.second->mapped || !entry.second->mapped->exited()) return false;
      std::lock_guard lock(mutex_);
      mapped_.erase(entry.first);
      return true;
    });
  }

  void advance_transfers() {
    std::vector<std::pair<TransferId, uint64_t>> progress;
    copying_ = false;
    for (auto it = transfers_.begin(); it != transfers_.end();) {
      Transfer& t = *it->second;
      if (t.peer && t.peer->mapped) {
        copy_mapped(t);
      } else {
        post_gets(t);
      }
      if (t.in_flight == 0 && (stopped(t) || t.next == t.gets.size())) {
        finish(t);
        it = transfers_.erase(it);
        continue;
      }
      if (t.landed != t.reported) progress.emplace_back(t.id, t.reported = t.landed);
      ++it;
    }
    if (progress.empty()) return;
    std::lock_guard lock(mutex_);
    for (auto [id, bytes] : progress) statuses_[id].bytes = bytes;
  }

  bool stopped(const Transfer& t) const {
    return t.cancelled || !t.error.empty() || t.peer == nullptr || t.peer->failure != UCS_OK;
  }

  void copy_mapped(Transfer& t) {
    const char* remote = t.peer->mapped->data();
    char* local = static_cast<char*>(region_.base);
    uint64_t copied = 0;
    while (!stopped(t) && t.next < t.gets.size() && copied < kCopyBytesPerTurn) {
      const ReadOp& op = t.gets[t.next++].op;
      std::memcpy(local + op.local_offset, remote + op.remote_offset, op.bytes);
      copied += op.bytes;
    }
    t.landed += copied;
    copying_ |= !stopped(t) && t.next < t.gets.size();
  }

  void post_gets(Transfer& t) {
    while (!stopped(t) && t.next < t.gets.size() && t.in_flight < kMaxGetsInFlight) {
      Get& get = t.gets[t.next++];
      const ReadOp& op = get.op;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
      param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
        const Get& done = *static_cast<const Get*>(user_data);
        Transfer& owner = *done.transfer;
        ucp_request_free(request);
        --owner.in_flight;
        if (status == UCS_OK) {
          owner.landed += done.op.bytes;
        } else if (owner.error.empty()) {
          owner.error = get_error(owner, status);
        }
      };
      param.user_data = &get;
      param.memh = memh_;
      void* local = static_cast<char*>(region_.base) + op.local_offset;
      const ucs_status_ptr_t request =
          ucp_get_nbx(t.peer->ep, local, op.bytes, t.remote.base + op.remote_offset, t.rkey, &param);
      if (request == nullptr) {
        t.landed += op.bytes;
      } else if (UCS_PTR_IS_ERR(request)) {
        t.error = get_error(t, UCS_PTR_STATUS(request));
      } else {
        ++t.in_flight;
      }
    }
  }

  static std::string get_error(const Transfer& t, ucs_status_t status) {
    // The endpoint's failure says why (unreachable, reset); the gets only see it as theirs.
    if (t.peer->failure != UCS_OK) status = t.peer->failure;
    return fmt::format("ucx: reading from {} failed: {}", t.peer->name, ucs_status_string(status));
  }

  void finish(Transfer& t) {
    TransferStatus status{TransferState::kDone, {}, t.landed};
    if (t.cancelled) {
      status.state = TransferState::kCancelled;
    } else if (!t.error.empty() || (t.peer && t.peer->failure != UCS_OK)) {
      status.state = TransferState::kFailed;
      status.error = t.error.empty() ? get_error(t, t.peer->failure) : t.error;
    }
    // The callback first: once wait() or cancel() returns, it has run.
    if (t.on_done) t.on_done(t.id, status);
    {
      std::lock_guard lock(mutex_);
      statuses_[t.id] = status;
    }
    done_.notify_all();
  }

  // The writer side of a reader's connection: it serves the reader's gets (or, where the
  // transport cannot do one-sided reads, the messages that emulate them).
  void accept(ucp_conn_request_h request) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* self, ucp_ep_h ep, ucs_status_t) {
      auto* transport = static_cast<UcxTransport*>(self);
      transport->failed_served_.insert(ep);
      transport->failed_ = true;
    };
    params.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    if (ucp_ep_create(worker_, &params, &ep) == UCS_OK) served_eps_.insert(ep);
  }

  void close_ep(ucp_ep_h ep) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    const ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(request)) closing_.push_back(request);
  }

  void reap_closed() {
    std::erase_if(closing_, [](void* request) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
      ucp_request_free(request);
      return true;
    });
  }

  const TransportConfig config_;
  const MemoryRegion region_;
  const bool map_same_host_;
  nlohmann::json endpoint_;  // set before the constructor returns, constant after
  std::thread thread_;

  // Shared with the callers, under mutex_.
  std::mutex mutex_;
  std::condition_variable done_;
  std::deque<Command> commands_;
  std::unordered_map<TransferId, TransferStatus> statuses_;
  // The mapped same-host peers by "host:port", with the advert each was opened with: what
  // submit() copies small reads from. Written by the progress thread.
  std::unordered_map<std::string, std::pair<nlohmann::json, std::shared_ptr<SameHostPeer>>> mapped_;
  TransferId last_id_ = 0;
  bool stopping_ = false;

  // The progress thread's alone, but for signalling worker_ (set before the constructor
  // returns).
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  ucp_mem_h memh_ = nullptr;
  std::string rkey_text_;
  ucp_listener_h listener_ = nullptr;
  std::map<TransferId, std::unique_ptr<Transfer>> transfers_;
  std::unordered_map<std::string, std::shared_ptr<Peer>> peers_;
  std::unordered_set<ucp_ep_h> served_eps_;
  std::unordered_set<ucp_ep_h> failed_served_;
  bool failed_ = false;   // an error handler ran since the last drop_failed
  bool copying_ = false;  // a copy from a mapped peer is left for the next turn
  std::vector<void*> closing_;
};

void Peer::close() { owner->close_peer(*this); }

}  // namespace

std::unique_ptr<Transport> make_ucx_transport(const TransportConfig& config, MemoryRegion region) {
  return std::make_unique<UcxTransport>(config, region);
}

}  // namespace moe::disagg
