#pragma once
// The dashboard's page (src/dashboard/dashboard.html, embedded at build time): plain HTML,
// SVG and script, nothing fetched but the server's own GET /dashboard/state (the proxy's,
// or a lone instance's; the page draws the sections the state has).
#include <string_view>

namespace moe::dashboard {

std::string_view dashboard_page();

}  // namespace moe::dashboard
