#include "checkpoint/hf_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/quant.h"

namespace moe {
namespace {

constexpr int64_t kFp8Block = 128;  // values per fp8_e4m3 block of the engine's type

std::optional<GgmlType> float_type(StDtype d) {
  switch (d) {
    case StDtype::F32: return GgmlType::F32;
    case StDtype::F16: return GgmlType::F16;
    case StDtype::BF16: return GgmlType::BF16;
    default: return std::nullopt;
  }
}

// FP8 rows whose 128-value chunks each fall in one scale block keep their codes exactly.
bool fp8_exact(const HfPlan& plan, const HfPlannedTensor& t) {
  return t.dtype() == StDtype::F8_E4M3 && t.layout != HfLayout::KvbKeys && t.ne[0] % kFp8Block == 0 &&
         plan.fp8_block_cols % kFp8Block == 0;
}

void fill_fp8_rows(const HfPlan& plan, const HfPlannedTensor& t, uint8_t* dst, int64_t r0, int64_t r1) {
  const int64_t n = t.ne[0], chunks = n / kFp8Block;
  const size_t rb = row_bytes(GgmlType::F8_E4M3_B128, n);
  for (int64_t r = r0; r < r1; ++r) {
    const HfRowRef ref = hf_row_source(plan, t, r);
    const StTensor& w = *ref.source->tensor;
    const int64_t scale_cols = ref.source->scale->shape[1];
    const uint8_t* codes = w.data + size_t(ref.row * n);
    uint8_t* out = dst + size_t(r) * rb;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k = (ref.row / plan.fp8_block_rows) * scale_cols + c * kFp8Block / plan.fp8_block_cols;
      std::memcpy(out, ref.source->scale->data + size_t(k) * 4, 4);
      std::memcpy(out + 4, codes + c * kFp8Block, kFp8Block);
      // NaN codes would compute as 480 on the SIMD path: a checkpoint holding one is broken.
      for (int64_t i = 0; i < kFp8Block; ++i)
        if ((out[4 + i] & 0x7F) == 0x7F)
          fail("tensor '{}' ({}) holds an FP8 NaN code at row {}, column {}", ref.source->name, t.name, ref.row,
               c * kFp8Block + i);
      out += 4 + kFp8Block;
    }
  }
}

void fill_rows(const HfPlan& plan, const HfPlannedTensor& t, GgmlType type, uint8_t* dst, int64_t r0, int64_t r1) {
  const int64_t n = t.ne[0];
  const size_t rb = row_bytes(type, n);
  const bool copy = float_type(t.dtype()) == type;
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = r0; r < r1; ++r) {
    const HfRowRef ref = hf_row_source(plan, t, r);
    if (copy) {
      std::memcpy(dst + size_t(r) * rb, ref.source->tensor->data + size_t(ref.row) * rb, rb);
      continue;
    }
    hf_decode_row(plan, *ref.source, ref.row, 0, n, row.data());
    quantize_row(type, row.data(), dst + size_t(r) * rb, n);
  }
}

// attn_k_b of one head: kv_b_proj's key rows [nope][kv_lora], transposed.
void fill_keys_head(const HfPlan& plan, const HfPlannedTensor& t, GgmlType type, uint8_t* dst, int64_t head) {
  const int64_t nope = plan.kv_nope, lora = plan.kv_lora;
  std::vector<float> keys(static_cast<size_t>(nope * lora)), row(static_cast<size_t>(nope));
  for (int64_t i = 0; i < nope; ++i)
    hf_decode_row(plan, t.sources[0], head * (nope + plan.kv_v) + i, 0, lora, keys.data() + i * lora);
  const size_t rb = row_bytes(type, nope);
  for (int64_t r = 0; r < lora; ++r) {
    for (int64_t i = 0; i < nope; ++i) row[size_t(i)] = keys[size_t(i * lora + r)];
    quantize_row(type, row.data(), dst + size_t(head * lora + r) * rb, nope);
  }
}

}  // namespace

GgmlType hf_storage_type(const HfPlan& plan, const HfPlannedTensor& t, const WeightFormat& format) {
  if (t.role != HfRole::Matrix) return GgmlType::F32;
  const int64_t ne0 = t.ne[0];
  switch (format.mode) {
    case WeightFormat::Type: return storable_type(format.type, ne0);
    case WeightFormat::Fp8:
      // What cannot keep its codes loses as little as it can: bf16 rounds only the scale.
      if (fp8_exact(plan, t)) return GgmlType::F8_E4M3_B128;
      if (t.dtype() == StDtype::F8_E4M3) return GgmlType::BF16;
      [[fallthrough]];
    case WeightFormat::Auto:
      if (auto f = float_type(t.dtype())) return *f;
      return storable_type(GgmlType::Q8_0, ne0);
  }
  return GgmlType::F32;
}

std::vector<const uint8_t*> hf_bytes_in_place(const HfPlannedTensor& t, GgmlType type) {
  if ((t.layout != HfLayout::Direct && t.layout != HfLayout::ExpertStack) || float_type(t.dtype()) != type) return {};
  std::vector<const uint8_t*> parts;
  for (const HfSource& s : t.sources) {
    // Safetensors does not align tensors; the kernels read elements of their own size.
    if (uintptr_t(s.tensor->data) % st_dtype_size(s.tensor->dtype) != 0) return {};
    parts.push_back(s.tensor->data);
  }
  return parts;
}

void hf_fill(const HfPlan& plan, const HfPlannedTensor& t, GgmlType type, uint8_t* dst, ThreadPool& pool) {
  if (type == GgmlType::F8_E4M3_B128 && !fp8_exact(plan, t))
    fail("tensor '{}' cannot keep its FP8 codes (its scale blocks do not align with 128-value rows)", t.name);
  if (t.layout == HfLayout::KvbKeys) {
    pool.parallel_for(t.ne[2], 1, [&](int64_t b, int64_t e) {
      for (int64_t h = b; h < e; ++h) fill_keys_head(plan, t, type, dst, h);
    });
    return;
  }
  pool.parallel_for(t.n_rows(), 16, [&](int64_t b, int64_t e) {
    if (type == GgmlType::F8_E4M3_B128) fill_fp8_rows(plan, t, dst, b, e);
    else fill_rows(plan, t, type, dst, b, e);
  });
}

void hf_release_sources(const HfPlannedTensor& t) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  auto release = [&](const StTensor* s) {
    if (!s || s->n_bytes == 0) return;
    const uintptr_t begin = (uintptr_t(s->data) + page - 1) / page * page;
    const uintptr_t end = (uintptr_t(s->data) + s->n_bytes) / page * page;
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  };
  for (const HfSource& s : t.sources) {
    release(s.tensor);
    release(s.scale);
  }
}

}  // namespace moe
