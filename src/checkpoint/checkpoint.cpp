#include "checkpoint/checkpoint.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>

#include <cstdlib>
#include <filesystem>

#include "checkpoint/hf_weights.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

// What an assembled model file's tensors point into.
struct HfStorage {
  std::unique_ptr<HfCheckpoint> checkpoint;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> buffers;
};

// Huge pages where the kernel gives them: converting gigabytes of weights page by page
// spends more time in page faults than in the conversion.
uint8_t* allocate(size_t n_bytes, const std::string& name) {
  constexpr size_t kHuge = size_t(2) << 20;
  const bool large = n_bytes >= kHuge;
  const size_t align = large ? kHuge : 64;
  void* p = std::aligned_alloc(align, (n_bytes + align - 1) / align * align);
  if (!p) fail("out of memory for tensor '{}' ({} bytes)", name, n_bytes);
  if (large) madvise(p, (n_bytes + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(p);
}

std::unique_ptr<GgufFile> assemble_hf(const std::string& dir, const WeightFormat& format,
                                      const std::function<void(double)>& progress) {
  auto storage = std::make_shared<HfStorage>();
  storage->checkpoint = open_hf_checkpoint(dir);
  const HfCheckpoint& ck = *storage->checkpoint;
  const GgufWriter metadata = hf_metadata(ck);

  uint64_t total = 0, done = 0;
  for (const HfPlannedTensor& t : ck.plan.tensors) total += uint64_t(t.n_rows()) * uint64_t(t.ne[0]);
  ThreadPool pool(0);
  std::vector<GgufExternalTensor> tensors;
  for (const HfPlannedTensor& t : ck.plan.tensors) {
    const GgmlType type = hf_storage_type(ck.plan, t, format);
    std::vector<const uint8_t*> parts = hf_bytes_in_place(t, type);
    if (parts.empty()) {
      const size_t n_bytes = row_bytes(type, t.ne[0]) * size_t(t.n_rows());
      uint8_t* buf = allocate(n_bytes, t.name);
      storage->buffers.emplace_back(buf, &std::free);
      hf_fill(ck.plan, t, type, buf, pool);
      hf_release_sources(t);
      parts = {buf};
    }
    if (t.layout == HfLayout::ExpertStack && parts.size() > 1) tensors.push_back({t.name, type, t.ne, nullptr, parts});
    else tensors.push_back({t.name, type, t.ne, parts.front(), {}});
    done += uint64_t(t.n_rows()) * uint64_t(t.ne[0]);
    if (progress && total > 0) progress(double(done) / double(total));
  }
  return GgufFile::assemble(dir, metadata, std::move(tensors), std::move(storage));
}

}  // namespace

bool is_hf_checkpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::unique_ptr<HfCheckpoint> open_hf_checkpoint(const std::string& dir) {
  auto ck = std::make_unique<HfCheckpoint>(HfCheckpoint{read_hf_config(dir), SafetensorsSet::open(dir), {}});
  // One MTP layer is read when the checkpoint ships it (some repositories leave it out):
  // after the decoder layers, as llama.cpp's converter numbers it.
  HfModelConfig& m = ck->model;
  const int64_t n_layer = m.config.n_layer;
  if (m.n_mtp_layers == 1 && ck->shards.find("model.layers." + std::to_string(n_layer) + ".eh_proj.weight")) {
    m.config.n_nextn = 1;
    m.metadata.set_u32("deepseek2.block_count", uint32_t(n_layer + 1));
    m.metadata.set_u32("deepseek2.nextn_predict_layers", 1);
  }
  ck->plan = plan_hf_tensors(ck->model, ck->shards);
  return ck;
}

GgufWriter hf_metadata(const HfCheckpoint& ck) {
  GgufWriter w = ck.model.metadata;
  const fs::path tokenizer = fs::path(ck.model.dir) / "tokenizer.json";
  if (!fs::exists(tokenizer)) {
    spdlog::warn("{}: no tokenizer.json: the model runs on token ids only", ck.model.dir);
    return w;
  }
  write_gguf_vocab(w, gguf_vocab_from_spec(read_hf_tokenizer_spec(tokenizer.string()), ck.model.config.n_vocab));
  return w;
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path, const WeightFormat& format,
                                          const std::function<void(double)>& progress) {
  if (is_hf_checkpoint(path)) return assemble_hf(path, format, progress);
  if (format.mode != WeightFormat::Auto)
    fail("{}: --weight-type {} applies to Hugging Face checkpoint directories; a GGUF file keeps its own types "
         "(re-quantize with moengine convert from the checkpoint, or llama-quantize)",
         path, weight_format_name(format));
  return std::make_unique<GgufFile>(path);
}

std::unique_ptr<Model> load_model(const std::string& path, const WeightFormat& format,
                                  const std::function<void(double)>& progress, bool read_routed_experts) {
  // An assembled file's weights were just written, and its progress was that writing.
  const bool assembled = is_hf_checkpoint(path);
  std::unique_ptr<GgufFile> file = open_model_file(path, format, progress);
  return Model::from_file(std::move(file), assembled ? std::function<void(double)>{} : progress, read_routed_experts);
}

}  // namespace moe
