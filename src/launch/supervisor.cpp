#include "launch/supervisor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "launch/child_process.h"
#include "launch/commands.h"
#include "launch/health.h"
#include "launch/log_watch.h"
#include "launch/stop_signals.h"

namespace moe::launch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kTick{50};
constexpr milliseconds kHealthTimeout{1000};
constexpr int kTailLines = 20;

// SIGINT or SIGTERM: stop everything, and return.
struct StopRequested {
  int signal;
};

template <typename... Args>
void note(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "launch: {}\n", fmt::format(format, std::forward<Args>(args)...));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The binary children run: this one, by /proc/self/exe so that a rebuild while it runs
// cannot mix versions; its real path is the name they are shown under.
const char* const kSelf = "/proc/self/exe";
std::string self_path() {
  std::error_code ec;
  const fs::path p = fs::read_symlink(kSelf, ec);
  return ec ? "moengine" : p.string();
}

std::vector<std::string> with_binary(std::vector<std::string> args) {
  args.insert(args.begin(), self_path());
  return args;
}

// --log-dir as given, else moengine-run/<local time>, with -2, -3 ... when taken.
// Written by the launcher when it starts the proxy, with the instances' URLs then known.
constexpr const char* kInstancesFile = "proxy-instances.yaml";
// Written by the launcher from the topology's hosts, for ssh and mpirun's ssh.
constexpr const char* kSshConfig = "ssh_config";

std::string run_dir_name(const std::string& log_dir) {
  if (!log_dir.empty()) return log_dir;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  const std::string base = std::string("moengine-run/") + stamp;
  std::string dir = base;
  for (int i = 2; fs::exists(dir); ++i) dir = fmt::format("{}-{}", base, i);
  return dir;
}

// One rank a supervised process serves (a plain instance and the proxy have one).
struct RankState {
  std::string name;
  std::string address;
  int port = 0;  // asked for; once it listens, the port it got (a restart asks for it again)
  bool listening = false;
  bool up = false;

  std::string url() const { return instance_url(address, port); }
};

// One supervised process: an engine instance, the mpirun of an expert-parallel group, or
// the proxy.
struct Member {
  std::string name;
  std::string role;                    // prefill, decode, both, or proxy
  const InstanceSpec* spec = nullptr;  // null for the proxy
  std::string log;
  std::vector<RankState> ranks;
  ChildProcess child;
  pid_t pid = -1;  // kept after the child is reaped, for messages
  std::optional<ReadyLineWatch> watch;
  Clock::time_point started;
  bool spawned = false;
  bool up = false;
  int restarts = 0;

  std::vector<int> ports() const {
    std::vector<int> p;
    for (const RankState& r : ranks) p.push_back(r.port);
    return p;
  }
};

class Supervisor {
 public:
  Supervisor(const Topology& t, const LaunchOptions& o) : t_(t), run_dir_(absolute(run_dir_name(o.log_dir))) {
    instances_.reserve(t.instances.size());
    for (const InstanceSpec& s : t.instances) {
      Member& m = instances_.emplace_back();
      m.name = s.name;
      m.role = role_name(s.role);
      m.spec = &s;
      m.log = (fs::path(run_dir_) / (s.name + ".log")).string();
      for (const RankSpec& r : s.ranks) m.ranks.push_back({r.name, r.address, r.port});
    }
    proxy_.name = "proxy";
    proxy_.role = "proxy";
    proxy_.log = (fs::path(run_dir_) / "proxy.log").string();
    proxy_.ranks.push_back({"proxy", t.proxy.host, t.proxy.port});
  }

  void run() {
    try {
      start();
      supervise();
    } catch (const StopRequested& s) {
      note("{} received, stopping", s.signal == SIGINT ? "SIGINT" : "SIGTERM");
      stop_all();
      note("stopped");
    } catch (...) {
      stop_all();
      throw;
    }
  }

 private:
  static std::string absolute(const std::string& dir) { return fs::absolute(dir).lexically_normal().string(); }

  void start() {
    std::error_code ec;
    fs::create_directories(run_dir_, ec);
    if (ec) fail("cannot create the log folder {}: {}", run_dir_, ec.message());
    note("logs in {}/", run_dir_);
    context_.self = self_path();
    context_.model_path = prepare_model();
    context_.served_name = served_model_name(t_.model, context_.model_path);
    context_.ssh_config = (fs::path(run_dir_) / kSshConfig).string();
    context_.as_root = ::geteuid() == 0;
    context_.cores = std::max(1u, std::thread::hardware_concurrency());
    if (const std::string config = ssh_config_text(t_); !config.empty()) std::ofstream(context_.ssh_config) << config;
    for (Member& m : instances_) {
      note("starting {} ({}{}) ...", m.name, m.role, m.spec->group() ? fmt::format(", {} ranks", m.spec->ep) : "");
      spawn(m);
    }
    await_all_up();
    note("starting the proxy ...");
    spawn(proxy_);
    await_all_up();
    print_endpoints();
  }

  // Until every process started so far answers /health; a death is fatal while starting.
  void await_all_up() {
    do wait_or_stop(kTick);
    while (!step(false));
  }

  [[noreturn]] void supervise() {
    for (;;) {
      wait_or_stop(milliseconds(100));
      step(true);
    }
  }

  void wait_or_stop(milliseconds timeout) {
    if (const int sig = wait_stop_signal(timeout)) throw StopRequested{sig};
  }

  std::string prepare_model() {
    const ModelSpec& m = t_.model;
    if (!m.generate) {
      if (!fs::exists(m.path)) fail("{}: model: {} does not exist", m.where, m.path);
      return m.path;
    }
    const std::string path = generated_model_path(*m.generate);
    if (fs::exists(path)) {
      note("model {}", path);
      return path;
    }
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) fail("{}: cannot create the model cache folder {}: {}", m.where, fs::path(path).parent_path().string(), ec.message());
    // Written in a folder of its own and moved, so that a launch stopped half-way (or one
    // running at the same time) never leaves a partial file under the final name, nor
    // gen-model's own temporary files behind.
    const fs::path work = fs::path(path).parent_path() / fmt::format(".partial-{}", ::getpid());
    struct RemoveWork {
      fs::path dir;
      ~RemoveWork() {
        std::error_code ignored;
        fs::remove_all(dir, ignored);
      }
    } remove_work{work};
    fs::create_directories(work, ec);
    if (ec) fail("{}: cannot create {}: {}", m.where, work.string(), ec.message());
    const std::string part = (work / fs::path(path).filename()).string();
    const std::string log = (fs::path(run_dir_) / "gen-model.log").string();
    note("generating the model into {} ...", path);
    const auto started = Clock::now();
    ChildProcess gen(kSelf, with_binary(gen_model_args(*m.generate, part)), log);
    std::optional<ExitStatus> st;
    while (!st) {
      wait_or_stop(kTick);
      st = gen.poll();
    }
    if (!st->ok()) {
      fail("generating the model failed: gen-model {}. Last lines of {}:\n{}", st->describe(), log, log_tail(log, kTailLines));
    }
    fs::rename(part, path, ec);
    if (ec) fail("cannot move the generated model to {}: {}", path, ec.message());
    note("model generated in {:.1f} s", seconds_since(started));
    return path;
  }

  // The program to run and its argv.
  std::pair<std::string, std::vector<std::string>> command(const Member& m) const {
    if (m.spec) {
      std::vector<std::string> argv = process_argv(t_, *m.spec, context_, m.ports(), m.restarts);
      if (argv[0] == context_.self) return {kSelf, argv};
      const std::string purpose = m.spec->group() ? fmt::format("{} (ep {})", m.name, m.spec->ep) : fmt::format("{} on another host", m.name);
      return {find_program(argv[0], purpose), argv};
    }
    std::vector<std::vector<std::string>> urls;
    for (const Member& i : instances_) {
      std::vector<std::string> u;
      for (const RankState& r : i.ranks) u.push_back(r.url());
      urls.push_back(std::move(u));
    }
    const std::string file = (fs::path(run_dir_) / kInstancesFile).string();
    std::ofstream(file) << proxy_instances_file(t_.instances, urls);
    return {kSelf, with_binary(proxy_args(t_.proxy, file, context_.model_path))};
  }

  void spawn(Member& m) {
    if (m.restarts > 0) std::ofstream(m.log, std::ios::app) << fmt::format("==== launch: restart {} ====\n", m.restarts);
    m.watch.emplace(m.log, file_size_or_zero(m.log));
    const auto [program, argv] = command(m);
    m.child = ChildProcess(program, argv, m.log);
    m.pid = m.child.pid();
    m.started = Clock::now();
    m.spawned = true;
    m.up = false;
    for (RankState& r : m.ranks) r.listening = r.up = false;
  }

  // One look at every process started so far: deaths are handled (a restart, or a
  // failure), starting ones whose ranks all answer /health are marked up. True when all are up.
  bool step(bool may_restart) {
    bool all_up = true;
    for (Member* m : started()) {
      if (const std::optional<ExitStatus> st = m->child.poll()) on_exit(*m, *st, may_restart);
      if (!m->up && !check_up(*m)) all_up = false;
    }
    return all_up;
  }

  std::vector<Member*> started() {
    std::vector<Member*> all;
    for (Member& m : instances_) all.push_back(&m);
    if (proxy_.spawned) all.push_back(&proxy_);
    return all;
  }

  bool check_up(Member& m) {
    for (const ReadyLine& line : m.watch->poll()) {
      if (line.rank >= int(m.ranks.size())) continue;
      RankState& r = m.ranks[size_t(line.rank)];
      r.port = line.port;
      r.listening = true;
    }
    bool all = true;
    for (RankState& r : m.ranks) {
      if (!r.up && r.listening && health_status(r.url(), kHealthTimeout) == 200) r.up = true;
      all = all && r.up;
    }
    if (all) {
      m.up = true;
      std::vector<std::string> urls;
      for (const RankState& r : m.ranks) urls.push_back(r.url());
      note("{} ready {}in {:.1f} s on {} (pid {})", m.name, m.restarts > 0 ? "again " : "", seconds_since(m.started),
           fmt::join(urls, ", "), m.pid);
      return true;
    }
    if (seconds_since(m.started) > t_.ready_timeout_s) {
      std::vector<std::string> waiting;
      for (const RankState& r : m.ranks)
        if (!r.up) waiting.push_back(r.name);
      fail("{} (pid {}) was not ready within {} s (timeouts.ready_s in {}; not ready: {}); everything was stopped. Last lines of "
           "{}:\n{}",
           m.name, m.pid, t_.ready_timeout_s, t_.file, fmt::join(waiting, ", "), m.log, log_tail(m.log, kTailLines));
    }
    return false;
  }

  void on_exit(Member& m, const ExitStatus& st, bool may_restart) {
    std::string what = fmt::format("{} (pid {}) {}", m.name, m.pid, st.describe());
    // A group ends when one rank does: mpirun names it.
    if (m.spec && m.spec->group()) {
      const std::string lost = find_line(m.log, m.watch->start(), "noticed that process rank");
      if (!lost.empty()) what += fmt::format(" (mpirun: {})", lost.substr(lost.find_first_not_of(' ')));
    }
    std::string why;
    if (!may_restart) why = "while starting";
    else if (!m.spec) why = "and nothing is served without the proxy";
    else if (m.spec->restart == RestartPolicy::kNever) why = "and its restart policy is never";
    else if (m.restarts >= m.spec->max_restarts) why = fmt::format("after {} restarts (max_restarts {})", m.restarts, m.spec->max_restarts);
    if (!why.empty()) {
      fail("{} {}; everything was stopped. Last lines of {}:\n{}", what, why, m.log, log_tail(m.log, kTailLines));
    }
    ++m.restarts;
    note("{}; restarting it on port{} {} (restart {} of {})", what, m.ranks.size() > 1 ? "s" : "", fmt::join(m.ports(), ", "),
         m.restarts, m.spec->max_restarts);
    spawn(m);
  }

  // The proxy first, so that no request reaches an instance that is going away.
  void stop_all() {
    stop({&proxy_}, "the proxy");
    std::vector<Member*> instances;
    for (Member& m : instances_) instances.push_back(&m);
    stop(instances, "the instances");
  }

  // SIGTERM, a bounded wait, then SIGKILL; a second SIGINT or SIGTERM cuts the wait short.
  void stop(const std::vector<Member*>& group, const std::string& what) {
    auto any_running = [&] {
      for (const Member* m : group) {
        if (m->child.running()) return true;
      }
      return false;
    };
    if (!any_running()) return;
    note("stopping {} ...", what);
    for (const Member* m : group) m->child.terminate();
    const auto deadline = Clock::now() + std::chrono::duration<double>(t_.stop_timeout_s);
    bool hurry = false;
    while (any_running() && Clock::now() < deadline && !hurry) {
      hurry = wait_stop_signal(milliseconds(20)) != 0;
      for (Member* m : group) (void)m->child.poll();
    }
    for (Member* m : group) {
      if (!m->child.running()) continue;
      if (hurry) note("killing {} (pid {})", m->name, m->pid);
      else note("{} (pid {}) did not stop within {} s; killing it", m->name, m->pid, t_.stop_timeout_s);
      m->child.kill_and_reap();
    }
  }

  void print_endpoints() const {
    std::vector<std::array<std::string, 6>> rows{{"NAME", "ROLE", "HOST", "URL", "PID", "LOG"}};
    for (const Member& m : instances_) {
      for (size_t r = 0; r < m.ranks.size(); ++r) {
        const HostSpec* host = t_.host_of(m.spec->ranks[r]);
        rows.push_back({m.ranks[r].name, m.role, host ? host->name : "-", m.ranks[r].url(), std::to_string(m.pid), m.log});
      }
    }
    rows.push_back({proxy_.name, proxy_.role, "-", proxy_.ranks[0].url(), std::to_string(proxy_.pid), proxy_.log});
    std::array<size_t, 6> width{};
    for (const auto& r : rows) {
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    }
    for (const auto& r : rows) {
      fmt::print("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", r[0], width[0], r[1], width[1], r[2], width[2], r[3], width[3], r[4],
                 width[4], r[5]);
    }
    fmt::print("launch: dashboard on {}/dashboard\n", proxy_.ranks[0].url());
    fmt::print("launch: ready on {}\n", proxy_.ranks[0].url());
    std::fflush(stdout);
  }

  const Topology& t_;
  std::string run_dir_;
  ProcessContext context_;
  std::vector<Member> instances_;
  Member proxy_;
};

}  // namespace

void run_topology(const Topology& t, const LaunchOptions& options) {
  block_stop_signals();
  Supervisor(t, options).run();
}

std::string dry_run(const Topology& t, const LaunchOptions& options) {
  const std::string dir = fs::absolute(run_dir_name(options.log_dir)).lexically_normal().string();
  std::string out = fmt::format("# logs would go to {}/\n", dir);
  ProcessContext c;
  c.self = self_path();
  c.model_path = t.model.path;
  if (t.model.generate) {
    c.model_path = generated_model_path(*t.model.generate);
    if (fs::exists(c.model_path)) out += fmt::format("# model {} (generated before)\n", c.model_path);
    else out += shell_line(with_binary(gen_model_args(*t.model.generate, c.model_path))) + "\n";
  }
  c.served_name = served_model_name(t.model, c.model_path);
  c.ssh_config = (fs::path(dir) / kSshConfig).string();
  c.as_root = ::geteuid() == 0;
  c.cores = std::max(1u, std::thread::hardware_concurrency());
  auto quoted = [&](const std::string& file, const std::string& text) {
    out += fmt::format("# {} would hold:\n", file);
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) out += "#   " + line + "\n";
  };
  if (const std::string config = ssh_config_text(t); !config.empty()) quoted(c.ssh_config, config);
  std::vector<std::vector<std::string>> urls;
  for (const InstanceSpec& s : t.instances) {
    std::vector<int> ports;
    std::vector<std::string> u;
    for (const RankSpec& r : s.ranks) {
      ports.push_back(r.port);
      u.push_back(r.port > 0 ? instance_url(r.address, r.port) : fmt::format("<URL of {}>", r.name));
    }
    out += shell_line(process_argv(t, s, c, ports, 0)) + "\n";
    urls.push_back(std::move(u));
  }
  const std::string file = (fs::path(dir) / kInstancesFile).string();
  quoted(file, proxy_instances_file(t.instances, urls));
  out += shell_line(with_binary(proxy_args(t.proxy, file, c.model_path))) + "\n";
  return out;
}

}  // namespace moe::launch
