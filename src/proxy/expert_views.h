#pragma once
// The dashboard's expert view of each expert-parallel group: the group's
// GET /admin/expert-state (docs/api.md), asked of its ranks in order until one answers.
// Every rank holds the same group-wide figures, so one answer is the group's. A group the
// registry has down is not asked.
#include <boost/asio/awaitable.hpp>
#include <chrono>

#include "proxy/merge.h"
#include "proxy/registry.h"

namespace moe::proxy {

// {group: {"rank": instance name, "state": ...} or {"error": why}}, for each group of
// `instances`; `up` is the registry's Snapshot::groups.
boost::asio::awaitable<Json> fetch_expert_views(std::vector<InstancePtr> instances, std::map<std::string, bool> up,
                                                std::chrono::milliseconds timeout);

}  // namespace moe::proxy
