#include "core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace moe {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

}  // namespace

std::shared_ptr<uint8_t> allocate_huge_pages(size_t bytes, const char* what) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), kHugePage);
  void* p = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("out of memory for {} ({} MiB): {}", what, bytes >> 20, std::strerror(errno));
  uint8_t* raw = static_cast<uint8_t*>(p);
  uint8_t* aligned = reinterpret_cast<uint8_t*>(round_up(reinterpret_cast<uintptr_t>(raw), kHugePage));
  madvise(aligned, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(aligned, [raw, size](uint8_t*) { munmap(raw, size + kHugePage); });
}

bool weights_move_here() {
  const char* env = std::getenv("MOENGINE_REGROUP");
  return env == nullptr || std::strcmp(env, "0") != 0;
}

}  // namespace moe
