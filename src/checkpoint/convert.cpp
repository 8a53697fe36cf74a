#include "checkpoint/convert.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_weights.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace moe {

void convert_hf_to_gguf(const std::string& dir, const std::string& out, const WeightFormat& format,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  if (format.mode == WeightFormat::Fp8)
    fail("--type fp8: GGUF has no FP8 block type; choose q8_0 (closest), bf16 or another GGUF type");
  const std::unique_ptr<HfCheckpoint> ck = open_hf_checkpoint(dir);
  GgufWriter w = hf_metadata(*ck);
  ThreadPool pool(0);
  // general.file_type names the type most of the bytes are in.
  GgmlType main_type = GgmlType::F32;
  int64_t largest = -1;
  for (const HfPlannedTensor& t : ck->plan.tensors) {
    const GgmlType type = hf_storage_type(ck->plan, t, format);
    const int64_t n = t.n_rows() * t.ne[0];
    if (t.role == HfRole::Matrix && n > largest) {
      largest = n;
      main_type = type;
    }
    w.add_tensor(t.name, type, t.ne, [&ck, &t, type, &pool](uint8_t* dst, size_t) {
      hf_fill(ck->plan, t, type, dst, pool);
      hf_release_sources(t);
    });
  }
  w.set_u32("general.file_type", gguf_file_type(main_type));
  w.write(out, progress);
}

}  // namespace moe
