#pragma once
// A short hash that tells two instances whether they run the same model, checked before
// one reads the other's KV: KV made by other weights would decode into plausible garbage.
#include <string>

#include "kernels/kv_format.h"

namespace moe {
class GgufFile;
}

namespace moe::disagg {

// 16 hex digits: XXH3-64 over every tensor's name, type and shape, over sampled bytes of
// its data (the first and the last row, up to 4 KiB each), and over the KV cache's dtype,
// so it costs milliseconds even for a model of hundreds of GB while any re-quantization,
// resize or reseed of the weights, or another KV dtype, changes it. Metadata (names, chat
// template) does not count.
std::string model_fingerprint(const GgufFile& file, KvDtype kv_dtype);

}  // namespace moe::disagg
