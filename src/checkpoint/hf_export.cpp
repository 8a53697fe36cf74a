#include "checkpoint/hf_export.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "checkpoint/hf_config.h"
#include "checkpoint/hf_tensors.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/fp8.h"
#include "kernels/quant.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer_json_writer.h"

namespace moe {
namespace {

constexpr float kFp8Max = 448.0f;

// f32 rows [row0, row0 + n_rows) of a GGUF tensor (rows over ne[1..]).
std::vector<float> gguf_rows(const GgufFile& f, const GgufTensorInfo& t, int64_t row0, int64_t n_rows) {
  const int64_t n = t.ne[0];
  const size_t rb = row_bytes(t.type, n);
  std::vector<float> out(size_t(n * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(t.type, f.tensor_data(t) + size_t(row0 + r) * rb, out.data() + r * n, n);
  return out;
}

const GgufTensorInfo& need(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (!t) fail("{}: tensor '{}' is missing", f.path(), name);
  return *t;
}

// The values of Hugging Face tensor `i` of a map entry, row-major [hf_shape].
std::vector<float> hf_values(const GgufFile& f, const HfMapEntry& e, size_t i, const ModelConfig& c) {
  const int64_t rows = e.hf_shape[0];
  switch (e.layout) {
    case HfLayout::Direct: return gguf_rows(f, need(f, e.name), 0, e.hf_shape.size() == 1 ? 1 : rows);
    case HfLayout::ExpertStack: return gguf_rows(f, need(f, e.name), int64_t(i) * rows, rows);
    case HfLayout::KvbKeys:
    case HfLayout::KvbValues: break;
  }
  // kv_b_proj: per head, nope key rows (attn_k_b transposed back) then v value rows.
  const std::string prefix = e.name.substr(0, e.name.size() - std::string("attn_k_b.weight").size());
  const int64_t nope = c.qk_nope_dim, v = c.v_head_dim, lora = c.kv_lora_rank;
  const std::vector<float> k = gguf_rows(f, need(f, prefix + "attn_k_b.weight"), 0, c.n_head * lora);
  const std::vector<float> vb = gguf_rows(f, need(f, prefix + "attn_v_b.weight"), 0, c.n_head * v);
  std::vector<float> out(size_t(rows * lora));
  for (int64_t h = 0; h < c.n_head; ++h) {
    for (int64_t i2 = 0; i2 < nope; ++i2)
      for (int64_t r = 0; r < lora; ++r) out[size_t((h * (nope + v) + i2) * lora + r)] = k[size_t((h * lora + r) * nope + i2)];
    for (int64_t j = 0; j < v; ++j)
      std::copy_n(vb.data() + (h * v + j) * lora, lora, out.data() + (h * (nope + v) + nope + j) * lora);
  }
  return out;
}

// Per block of `block` x `block` values: the scale that maps its largest magnitude to 448.
std::vector<float> fp8_scales(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t block) {
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  std::vector<float> amax(size_t(br * bc), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& m = amax[size_t((r / block) * bc + c / block)];
      m = std::max(m, std::abs(x[size_t(r * cols + c)]));
    }
  for (float& m : amax) m = m > 0.0f ? m / kFp8Max : 1.0f;
  return amax;
}

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << j.dump(2) << '\n';
  if (!out) fail("{}: cannot write", path.string());
}

}  // namespace

void export_hf_checkpoint(const GgufFile& f, const std::string& dir, const HfExportOptions& o,
                          const std::function<void(double)>& progress) {
  if (o.dtype != StDtype::BF16 && o.dtype != StDtype::F8_E4M3)
    fail("a checkpoint can be written in BF16 or F8_E4M3, not {}", st_dtype_name(o.dtype));
  ModelConfig c = ModelConfig::from_gguf(f);
  if (c.n_vocab == 0) c.n_vocab = need(f, "token_embd.weight").ne[1];
  const bool fp8 = o.dtype == StDtype::F8_E4M3;
  std::filesystem::create_directories(dir);
  write_json(std::filesystem::path(dir) / "config.json", hf_config_for(f, fp8 ? o.fp8_block : 0));
  if (f.has("tokenizer.ggml.tokens")) write_hf_tokenizer(tokenizer_spec_from_gguf(f), dir);

  const bool tied = f.find_tensor("output.weight") == nullptr;
  const bool bias = f.find_tensor("blk." + std::to_string(c.n_dense_lead) + ".exp_probs_b.bias") != nullptr;
  const std::vector<HfMapEntry> map = hf_tensor_map(c, tied, bias);
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  // Tensors are produced as the shards are written; each one reports as it is done.
  auto done = std::make_shared<size_t>(0);
  size_t n_total = 0;
  for (const HfMapEntry& e : map) n_total += e.layout == HfLayout::KvbValues || (e.optional && !f.find_tensor(e.name)) ? 0 : e.hf_names.size();
  auto report = [&progress, done, n_total] {
    if (progress) progress(double(++*done) / double(n_total));
  };
  for (const HfMapEntry& e : map) {
    if (e.layout == HfLayout::KvbValues) continue;  // written with its keys as kv_b_proj
    if (e.optional && !f.find_tensor(e.name)) continue;
    const bool matrix = e.role == HfRole::Matrix;
    const bool quantize = fp8 && matrix && e.name != "token_embd.weight" && e.name != "output.weight";
    const StDtype dtype = !matrix ? StDtype::F32 : quantize ? StDtype::F8_E4M3 : StDtype::BF16;
    const int64_t rows = e.hf_shape[0], cols = e.hf_shape.size() > 1 ? e.hf_shape[1] : 1;
    for (size_t i = 0; i < e.hf_names.size(); ++i) {
      // An FP8 weight's scales are computed with its codes and handed to the scale tensor,
      // which the writer fills next; computed again only if that order ever changed.
      auto scales = std::make_shared<std::vector<float>>();
      w.add(e.hf_names[i], dtype, e.hf_shape, [&f, &c, &o, &e, i, dtype, rows, cols, report, scales](uint8_t* dst, size_t) {
        const std::vector<float> x = hf_values(f, e, i, c);
        if (dtype == StDtype::F32) {
          std::memcpy(dst, x.data(), x.size() * 4);
        } else if (dtype == StDtype::BF16) {
          for (size_t k = 0; k < x.size(); ++k) {
            const uint16_t b = f32_to_bf16(x[k]);
            std::memcpy(dst + 2 * k, &b, 2);
          }
        } else {
          *scales = fp8_scales(x, rows, cols, o.fp8_block);
          const std::vector<float>& s = *scales;
          const int64_t bc = (cols + o.fp8_block - 1) / o.fp8_block;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t col = 0; col < cols; ++col)
              dst[r * cols + col] = f32_to_fp8_e4m3(x[size_t(r * cols + col)] / s[size_t((r / o.fp8_block) * bc + col / o.fp8_block)]);
        }
        report();
      });
      if (quantize) {
        const std::string scale = e.hf_names[i].substr(0, e.hf_names[i].size() - 7) + ".weight_scale_inv";
        const int64_t br = (rows + o.fp8_block - 1) / o.fp8_block, bc = (cols + o.fp8_block - 1) / o.fp8_block;
        w.add(scale, StDtype::F32, {br, bc}, [&f, &c, &o, &e, i, rows, cols, scales](uint8_t* dst, size_t n) {
          if (scales->empty()) *scales = fp8_scales(hf_values(f, e, i, c), rows, cols, o.fp8_block);
          std::memcpy(dst, scales->data(), n);
          scales->clear();
        });
      }
    }
  }
  w.write_sharded(dir, o.max_shard_bytes);
}

}  // namespace moe
