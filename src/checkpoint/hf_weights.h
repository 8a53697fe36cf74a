#pragma once
// The bytes of a planned tensor in the type it is stored in: taken in place from the
// mapped checkpoint where the type is the checkpoint's own, copied (stacked experts), kept
// as FP8 blocks, or decoded and re-quantized.
#include <cstdint>
#include <vector>

#include "checkpoint/hf_tensors.h"
#include "checkpoint/weight_format.h"

namespace moe {

class ThreadPool;

// The type the tensor is stored in under `format`.
GgmlType hf_storage_type(const HfPlan& plan, const HfPlannedTensor& t, const WeightFormat& format);

// The checkpoint's own bytes when they already are the tensor in `type` (same type, rows
// in order, aligned for the type): one pointer, or one per expert for stacked experts;
// empty otherwise.
std::vector<const uint8_t*> hf_bytes_in_place(const HfPlannedTensor& t, GgmlType type);

// Writes the tensor in `type` into dst (row_bytes(type, ne[0]) * n_rows() bytes).
void hf_fill(const HfPlan& plan, const HfPlannedTensor& t, GgmlType type, uint8_t* dst, ThreadPool& pool);

// Lets the kernel drop the pages of sources the tensor was copied out of: a converted
// checkpoint should not stay resident twice.
void hf_release_sources(const HfPlannedTensor& t);

}  // namespace moe
