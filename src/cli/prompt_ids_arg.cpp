#include "cli/prompt_ids_arg.h"

#include <sstream>

#include "core/error.h"

namespace moe::cli {

std::vector<int32_t> parse_prompt_ids(const std::string& s, int64_t n_vocab) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      fail("--prompt-ids: '{}' is not an integer", item);
    }
    if (item.find_first_not_of(" ", used) != std::string::npos) fail("--prompt-ids: '{}' is not an integer", item);
    if (v < 0 || v >= n_vocab) fail("--prompt-ids: token id {} is outside the vocabulary (0..{})", v, n_vocab - 1);
    ids.push_back(int32_t(v));
  }
  if (ids.empty()) fail("--prompt-ids: no token ids given");
  return ids;
}

}  // namespace moe::cli
