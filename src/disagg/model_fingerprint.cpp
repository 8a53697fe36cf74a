#include "disagg/model_fingerprint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "model/gguf.h"

namespace moe::disagg {

namespace {

constexpr size_t kSampleBytes = 4096;

void add(XXH3_state_t* st, const void* p, size_t n) { XXH3_64bits_update(st, p, n); }

}  // namespace

std::string model_fingerprint(const GgufFile& file, KvDtype kv_dtype) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const std::string dtype = kv_dtype_name(kv_dtype);
  add(st, dtype.c_str(), dtype.size() + 1);
  for (const GgufTensorInfo& t : file.tensors()) {
    add(st, t.name.data(), t.name.size() + 1);
    const int32_t type = int32_t(t.type);
    add(st, &type, sizeof type);
    add(st, t.ne.data(), t.ne.size() * sizeof(int64_t));
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    if (rows < 1 || t.n_bytes == 0) continue;
    const size_t row_bytes = t.n_bytes / size_t(rows);
    const size_t n = std::min(row_bytes, kSampleBytes);
    add(st, t.row(0), n);
    add(st, t.row(rows - 1) + (row_bytes - n), n);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", h);
}

}  // namespace moe::disagg
