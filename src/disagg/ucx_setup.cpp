#include "disagg/ucx_setup.h"

#include <ucs/debug/log_def.h>

#include <array>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace moe::disagg::ucx {

namespace {

// Settings UCX's defaults get wrong for us; values the user set through the UCX_* variable
// win. UCX 1.13 matches transport settings by their name without the transport's prefix
// ("KEEPIDLE", not "TCP_KEEPIDLE") and applies none to its connection managers.
struct UcxDefault {
  const char* name;  // for ucp_config_modify
  const char* env;   // the variable that sets it
  const char* value;
};
constexpr std::array<UcxDefault, 5> kUcxDefaults = {{
    // Shared memory is left out of endpoints that handle peer failure (ours) unless it
    // claims to handle it too; it does, through UCP's keepalive below. Without it readers
    // on the same host go through TCP on loopback, several times slower.
    {"MM_ERROR_HANDLING", "UCX_MM_ERROR_HANDLING", "y"},
    {"KEEPALIVE_INTERVAL", "UCX_KEEPALIVE_INTERVAL", "1s"},
    // A peer host that vanished otherwise stalls a transfer for half a minute (TCP probes
    // after 10 s idle, 9 times 2 s apart).
    {"KEEPIDLE", "UCX_TCP_KEEPIDLE", "2s"},
    {"KEEPINTVL", "UCX_TCP_KEEPINTVL", "1s"},
    {"KEEPCNT", "UCX_TCP_KEEPCNT", "3"},
}};

// UCX 1.13 applies no ucp_config_modify setting to its connection managers: they read the
// environment when a worker starts. Without these, an instance restarted on its port
// cannot listen until the old connections leave TIME_WAIT (a minute), and reaching a host
// that is down fails only after the kernel's SYN retries (two minutes); one retry gives up
// after 3 s. Set once, before any worker, and never over the user's values.
void set_connection_manager_defaults() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    setenv("UCX_TCP_CM_SYN_CNT", "1", 0);
  });
}

// UCX logs to stdout by default, where `moengine serve` prints its ready line for the
// scripts and tests that start it: send UCX's messages to stderr, marked as UCX's.
ucs_log_func_rc_t log_to_stderr(const char* file, unsigned line, const char*, ucs_log_level_t level,
                                const ucs_log_component_config_t*, const char* message, va_list ap) {
  char text[1024];
  std::vsnprintf(text, sizeof text, message, ap);
  std::fprintf(stderr, "ucx %s: %s (%s:%u)\n", ucs_log_level_names[level], text, file, line);
  return UCS_LOG_FUNC_RC_STOP;
}

void log_ucx_to_stderr() {
  static std::once_flag once;
  std::call_once(once, [] { ucs_log_push_handler(log_to_stderr); });
}

}  // namespace

void prepare_ucx_process() {
  set_connection_manager_defaults();
  log_ucx_to_stderr();
}

void apply_ucx_defaults(ucp_config_t* config) {
  for (const UcxDefault& setting : kUcxDefaults) {
    if (std::getenv(setting.env) == nullptr) ucp_config_modify(config, setting.name, setting.value);
  }
}

}  // namespace moe::disagg::ucx
