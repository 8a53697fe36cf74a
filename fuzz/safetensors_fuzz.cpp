// libFuzzer target for the safetensors reader. Any input must either parse or throw
// moe::Error. A file that parses must be safe to read in full (ASan sees every byte we hand
// out), its tensors must be in offset order without overlaps and agree with find(), and
// writing it back out and reading that again must give the same tensors and metadata.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "model/safetensors.h"

namespace {

using moe::SafetensorsFile;
using moe::StTensor;

volatile uint64_t g_sink;

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "safetensors_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

uint64_t touch(const std::string& s) {
  uint64_t h = s.size();
  for (const char c : s) h = h * 131 + uint8_t(c);
  return h;
}

void check_tensors(const SafetensorsFile& f, const uint8_t* data, size_t size) {
  uint64_t h = 0;
  const StTensor* last = nullptr;
  const StTensor* last_filled = nullptr;  // empty tensors may sit anywhere
  for (const StTensor& t : f.tensors()) {
    if (f.find(t.name) != &t) broken("find() disagrees with tensors()", t.name);
    if (uint64_t(t.n_elements()) * moe::st_dtype_size(t.dtype) != t.n_bytes) {
      broken("n_bytes disagrees with shape and dtype", t.name);
    }
    if (t.data < data || t.n_bytes > size_t(data + size - t.data)) {
      broken("tensor outside the input", t.name);
    }
    if (last && t.offset < last->offset) broken("tensors() not in offset order", t.name);
    if (t.n_bytes > 0) {
      if (last_filled && last_filled->offset + last_filled->n_bytes > t.offset) {
        broken("overlapping tensors accepted", t.name);
      }
      for (size_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
      last_filled = &t;
    }
    last = &t;
    h += touch(t.name) + uint64_t(t.dtype);
  }
  for (const auto& [key, value] : f.metadata()) h += touch(key) + touch(value);
  g_sink = g_sink + h;
}

void round_trip(const SafetensorsFile& f) {
  std::vector<uint8_t> bytes;
  try {
    moe::SafetensorsWriter w;
    for (const auto& [key, value] : f.metadata()) w.set_metadata(key, value);
    for (const StTensor& t : f.tensors()) {
      w.add(t.name, t.dtype, t.shape,
            [&t](uint8_t* dst, size_t n) { std::memcpy(dst, t.data, n); });
    }
    bytes = w.to_bytes();
  } catch (const moe::Error& e) {
    broken("the writer refused what the reader accepted", e.what());
  }
  try {
    const SafetensorsFile g("round-trip", bytes.data(), bytes.size());
    if (g.metadata() != f.metadata()) broken("round trip", "metadata changed");
    if (g.tensors().size() != f.tensors().size()) broken("round trip", "tensor count changed");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const StTensor& a = f.tensors()[i];
      const StTensor& b = g.tensors()[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.n_bytes != b.n_bytes ||
          (a.n_bytes > 0 && std::memcmp(a.data, b.data, a.n_bytes) != 0)) {
        broken("round trip changed tensor", a.name);
      }
    }
  } catch (const moe::Error& e) {
    broken("the reader refused what the writer wrote", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const SafetensorsFile f("fuzz", data, size);
    check_tensors(f, data, size);
    round_trip(f);
  } catch (const moe::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
