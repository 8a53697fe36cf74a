#pragma once
// Generated Hugging Face checkpoints for the checkpoint tests, and a way to rewrite one
// with a tensor dropped, renamed or reshaped.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "../engine/test_models.h"
#include "checkpoint/hf_export.h"
#include "model/safetensors.h"

namespace moe::testing {

inline std::string write_hf(const GenSpec& spec, const std::string& name, StDtype dtype,
                            uint64_t shard_bytes = uint64_t(1) << 30) {
  const std::string dir = scratch_dir() + "/" + name;
  std::filesystem::remove_all(dir);
  HfExportOptions o;
  o.dtype = dtype;
  o.max_shard_bytes = shard_bytes;
  write_generated_hf(spec, dir, o);
  return dir;
}

// A copy of a checkpoint with its tensors passed through `edit`, which may change the name
// (empty: drop the tensor) or the shape (the bytes are kept, so only to make it wrong), or
// add a copy under another name.
struct StEdit {
  std::string name;
  std::vector<int64_t> shape;
  std::string copy_as;  // also write the tensor under this name
};
inline std::string rewrite_hf(const std::string& dir, const std::string& name,
                              const std::function<void(StEdit&)>& edit) {
  const std::string out = scratch_dir() + "/" + name;
  std::filesystem::remove_all(out);
  std::filesystem::create_directories(out);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    if (std::filesystem::exists(dir + "/" + f)) std::filesystem::copy_file(dir + "/" + f, out + "/" + f);
  const SafetensorsSet st = SafetensorsSet::open(dir);
  SafetensorsWriter w;
  for (const std::string& n : st.names()) {
    const StTensor* t = st.find(n);
    StEdit e{n, t->shape, ""};
    edit(e);
    auto copy = [t](uint8_t* dst, size_t n) {
      std::memset(dst, 0, n);
      std::memcpy(dst, t->data, std::min(n, t->n_bytes));
    };
    if (!e.copy_as.empty()) w.add(e.copy_as, t->dtype, t->shape, copy);
    if (!e.name.empty()) w.add(e.name, t->dtype, e.shape, copy);
  }
  w.write(out + "/model.safetensors");
  return out;
}

}  // namespace moe::testing
