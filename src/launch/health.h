#pragma once
// The launcher's one HTTP call: is a server healthy yet?
#include <chrono>
#include <string>

namespace moe::launch {

// The status of GET base_url + "/health", or 0 when it cannot be reached or does not
// answer within `timeout`.
int health_status(const std::string& base_url, std::chrono::milliseconds timeout);

}  // namespace moe::launch
