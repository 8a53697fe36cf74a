#pragma once
// The benchmark's results as tables for people and as JSON for scripts.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "results.h"

namespace moe::bench {

void print_report(const Results& r, std::FILE* out);
nlohmann::json to_json(const Results& r);

}  // namespace moe::bench
