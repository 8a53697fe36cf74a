#include "cli/token_ids_arg.h"

#include <sstream>

#include "core/error.h"

namespace moe::cli {

std::vector<int32_t> parse_token_ids(const std::string& s, const std::string& flag, std::optional<int64_t> n_vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      fail("{}: '{}' is not an integer", flag, item);
    }
    if (item.find_first_not_of(" ", used) != std::string::npos) fail("{}: '{}' is not an integer", flag, item);
    if (n_vocab && (v < 0 || v >= *n_vocab)) fail("{}: token id {} is outside the vocabulary (0..{})", flag, v, *n_vocab - 1);
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) fail("{}: no token ids given", flag);
  return ids;
}

}  // namespace moe::cli
