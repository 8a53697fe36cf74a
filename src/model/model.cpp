#include "model/model.h"

#include <algorithm>

#include "core/error.h"
#include "core/huge_pages.h"
#include "kernels/regrouped.h"
#include "model/weight_regroup.h"

namespace moe {

namespace {

// The routed experts' stacked weights (blk.N.ffn_{gate,up,down}_exps.weight).
bool routed_experts(const std::string& tensor) { return tensor.find("_exps.") != std::string::npos; }

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const std::function<void(double)>& progress,
                                   bool read_routed_experts) {
  return from_file(std::make_unique<GgufFile>(path), progress, read_routed_experts);
}

std::unique_ptr<Model> Model::from_file(std::unique_ptr<GgufFile> file, const std::function<void(double)>& progress,
                                        bool read_routed_experts) {
  ModelConfig config = ModelConfig::from_gguf(*file);
  const GgufFile& f = *file;
  std::unique_ptr<Model> model =
      config.arch == Arch::Deepseek2 ? make_deepseek2(std::move(file), config) : make_qwen3_moe(std::move(file), config);

  WeightRegrouper regroup(regroup_here());
  if (weights_move_here()) model->mark_for_regrouping(regroup, read_routed_experts);

  // Read every weight page now, so the first request does not pay for the disk and the
  // user sees progress while a large file comes in. Pages only touched stay out of this
  // process's memory (the page cache holds them for whichever process maps them).
  // Tensors that are moved are read by the move, which comes after, as the last part of the
  // progress.
  if (read_routed_experts) f.prefetch();
  const auto& tensors = f.tensors();
  auto read_in = [&](const GgufTensorInfo& t) {
    return (read_routed_experts || !routed_experts(t.name)) &&
           !regroup.starts_at(t.slices.empty() ? f.tensor_data(t) : t.slices.front());
  };
  uint64_t total = 0, done = 0;
  for (const auto& t : tensors) total += read_in(t) ? t.n_bytes : 0;
  const uint64_t read_bytes = total;
  total += regroup.bytes();
  volatile uint8_t sink = 0;
  for (const auto& t : tensors) {
    if (!read_in(t)) continue;
    const size_t parts = t.slices.empty() ? 1 : t.slices.size();
    for (size_t s = 0; s < parts; ++s) {
      const uint8_t* p = t.slices.empty() ? f.tensor_data(t) : t.slices[s];
      for (size_t off = 0; off < t.n_bytes / parts; off += 4096) sink = sink + p[off];
    }
    done += t.n_bytes;
    if (progress && total > 0) progress(double(done) / double(total));
  }
  if (regroup.bytes() > 0) {
    model->moved_ = regroup.run([&](double f) {
      if (progress) progress((double(read_bytes) + f * double(regroup.bytes())) / double(total));
    });
    model->moved_bytes_ = regroup.bytes();
    model->regrouped_bytes_ = regroup.regrouped_bytes();
  }
  return model;
}

KvStore Model::make_kv_store(int64_t block_size, int64_t n_blocks, KvDtype dtype, bool with_mtp) const {
  if (with_mtp && config_.n_nextn <= 0) fail("{}: the model has no MTP layer", file_->path());
  const int64_t mtp = with_mtp ? config_.n_nextn : 0;
  return KvStore(config_.n_layer + mtp, config_.kv_row_format(dtype), block_size, n_blocks, mtp);
}

}  // namespace moe
