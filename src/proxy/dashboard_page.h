#pragma once
// The dashboard's page (src/proxy/dashboard.html, embedded at build time): plain HTML, SVG
// and script, nothing fetched but the proxy's own GET /dashboard/state.
#include <string_view>

namespace moe::proxy {

std::string_view dashboard_page();

}  // namespace moe::proxy
