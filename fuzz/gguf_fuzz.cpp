// libFuzzer target for the GGUF reader. Any input must either parse or throw moe::Error.
// A file that parses must be safe to read in full (ASan sees every byte we hand out), its
// lookups must agree with its lists, and writing it back out and reading that again must
// give the same metadata and tensors: the reader and the writer agree on the format.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "model/gguf.h"

namespace {

using moe::GgufArray;
using moe::GgufFile;
using moe::GgufValue;

volatile uint64_t g_sink;

[[noreturn]] void broken(const char* what, const std::string& detail) {
  std::fprintf(stderr, "gguf_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

uint64_t touch(const std::string& s) {
  uint64_t h = s.size();
  for (const char c : s) h = h * 131 + uint8_t(c);
  return h;
}

uint64_t touch(const GgufValue& v) {
  uint64_t h = uint64_t(v.type);
  if (const auto* a = std::get_if<GgufArray>(&v.value)) {
    for (const int64_t i : a->ints) h += uint64_t(i);
    for (const double d : a->floats) h += uint64_t(d == d);
    for (const auto& s : a->strings) h += touch(s);
    return h + a->size();
  }
  if (const auto* s = std::get_if<std::string>(&v.value)) return h + touch(*s);
  return h + v.value.index();
}

// Every getter either answers or throws moe::Error; none may crash.
void exercise_getters(const GgufFile& f, const std::string& key) {
  auto quietly = [](auto&& call) {
    try {
      call();
    } catch (const moe::Error&) {
    }
  };
  quietly([&] { g_sink = g_sink + f.get_int(key).value_or(0); });
  quietly([&] { g_sink = g_sink + uint64_t(f.get_float(key).value_or(0) != 0); });
  quietly([&] { g_sink = g_sink + f.get_bool(key).value_or(false); });
  quietly([&] { g_sink = g_sink + f.get_string(key).value_or("").size(); });
  quietly([&] { g_sink = g_sink + f.require_array(key).size(); });
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type != b.type || a.value.index() != b.value.index()) return false;
  if (const auto* d = std::get_if<double>(&a.value))
    return same_bits(*d, std::get<double>(b.value));
  if (const auto* x = std::get_if<GgufArray>(&a.value)) {
    const auto& y = std::get<GgufArray>(b.value);
    if (x->elem_type != y.elem_type || x->ints != y.ints || x->strings != y.strings) return false;
    if (x->floats.size() != y.floats.size()) return false;
    for (size_t i = 0; i < x->floats.size(); ++i) {
      if (!same_bits(x->floats[i], y.floats[i])) return false;
    }
    return true;
  }
  if (const auto* s = std::get_if<std::string>(&a.value))
    return *s == std::get<std::string>(b.value);
  if (const auto* i = std::get_if<int64_t>(&a.value)) return *i == std::get<int64_t>(b.value);
  if (const auto* u = std::get_if<uint64_t>(&a.value)) return *u == std::get<uint64_t>(b.value);
  return std::get<bool>(a.value) == std::get<bool>(b.value);
}

void round_trip(const GgufFile& f) {
  std::vector<uint8_t> bytes;
  try {
    moe::GgufWriter w;
    for (const auto& [key, value] : f.metadata()) w.set_value(key, value);
    for (const auto& t : f.tensors()) {
      w.add_tensor(t.name, t.type, t.ne,
                   [&f, &t](uint8_t* dst, size_t n) { std::memcpy(dst, f.tensor_data(t), n); });
    }
    bytes = w.to_bytes();
  } catch (const moe::Error& e) {
    broken("the writer refused what the reader accepted", e.what());
  }
  try {
    const GgufFile g("round-trip", bytes.data(), bytes.size());
    if (g.alignment() != f.alignment()) broken("round trip", "alignment changed");
    if (g.metadata().size() != f.metadata().size()) broken("round trip", "metadata count changed");
    for (size_t i = 0; i < f.metadata().size(); ++i) {
      if (g.metadata()[i].first != f.metadata()[i].first ||
          !same_value(g.metadata()[i].second, f.metadata()[i].second)) {
        broken("round trip changed metadata", f.metadata()[i].first);
      }
    }
    if (g.tensors().size() != f.tensors().size()) broken("round trip", "tensor count changed");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const auto& a = f.tensors()[i];
      const auto& b = g.tensors()[i];
      if (a.name != b.name || a.type != b.type || a.ne != b.ne || a.n_bytes != b.n_bytes ||
          std::memcmp(f.tensor_data(a), g.tensor_data(b), a.n_bytes) != 0) {
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
    const GgufFile f("fuzz", data, size);
    uint64_t h = f.version() + f.alignment() + f.data_offset();
    for (const auto& [key, value] : f.metadata()) {
      if (f.find(key) != &value) broken("find() disagrees with metadata()", key);
      h += touch(key) + touch(value);
      exercise_getters(f, key);
    }
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) broken("find_tensor() disagrees with tensors()", t.name);
      const uint8_t* p = f.tensor_data(t);
      for (size_t i = 0; i < t.n_bytes; ++i) h += p[i];
      h += uint64_t(t.n_elements());
    }
    g_sink = g_sink + h;
    round_trip(f);
  } catch (const moe::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
