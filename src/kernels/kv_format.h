#pragma once
// How a KV cache row is stored: its dtype and byte layout. A row holds a position's cache
// floats (MLA: latent then rope key; GQA: every kv head's key, then every kv head's value),
// split into segments -- a head's key or value, MLA's latent or rope part -- that attention
// reads whole.
//
// f32, f16, bf16: the values in order, nothing else.
// fp8_e4m3: per segment, an f32 scale then one E4M3 code per value (value = code * scale,
//   scale = the segment's largest magnitude / 448). One scale per head and position: the
//   scale follows each head's own range as it is written, nothing has to be calibrated, and
//   it costs 4 bytes per 128 values.
// q8_0: llama.cpp's blocks of 32: an f16 scale d then 32 int8 (value = q * d, d = largest
//   magnitude / 127), blocks laid from each segment's start; a segment whose size is not a
//   multiple of 32 ends with a shorter block.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe {

enum class KvDtype { f32, f16, bf16, fp8_e4m3, q8_0 };

const char* kv_dtype_name(KvDtype d);
// "f32", "f16", "bf16", "fp8_e4m3" (also "fp8"), "q8_0"; "auto" gives kKvDtypeAuto.
std::optional<KvDtype> parse_kv_dtype(std::string_view s);
// What `auto` means: bf16 (docs/engine.md says why).
inline constexpr KvDtype kKvDtypeAuto = KvDtype::bf16;
inline constexpr const char* kKvDtypeChoices = "auto, f32, f16, bf16, fp8_e4m3, q8_0";

namespace kvfmt {
// Converters of one run of stored values to f32, per instruction set.
struct Decoders {
  void (*f16)(const uint16_t* in, int64_t n, float* out);
  void (*bf16)(const uint16_t* in, int64_t n, float* out);
  void (*fp8)(const uint8_t* in, int64_t n, float scale, float* out);
  void (*q8)(const int8_t* in, int64_t n, float d, float* out);
  const char* name;
};
Decoders generic_decoders();
Decoders avx2_decoders();
Decoders avx512_decoders();
}  // namespace kvfmt

class KvRowFormat {
 public:
  // segment_floats: the sizes of the row's segments, in order (each > 0).
  KvRowFormat(KvDtype dtype, std::vector<int64_t> segment_floats);

  KvDtype dtype() const { return dtype_; }
  int64_t floats() const { return floats_; }
  int64_t bytes() const { return bytes_; }
  const std::vector<int64_t>& segments() const { return segments_; }

  // Where float `f` starts in the row. For fp8 and q8_0, f must begin a group (a segment,
  // a q8_0 block); a group's payload comes after its scale.
  int64_t byte_at(int64_t f) const;
  // Whether floats [begin, begin + n) can be decoded alone: whole groups.
  bool whole_groups(int64_t begin, int64_t n) const;

  // The whole row, f32 in, stored bytes out (round to nearest even; fp8 saturates at 448).
  void encode(const float* src, uint8_t* row) const;
  // Floats [begin, begin + n) of a stored row; whole_groups(begin, n) must hold. The
  // fastest decoder this CPU has; every decoder gives the same floats as decode_ref.
  void decode(const uint8_t* row, int64_t begin, int64_t n, float* out) const;
  void decode_ref(const uint8_t* row, int64_t begin, int64_t n, float* out) const;

  // The decoders, for tests of each path this CPU can run: "generic", "avx2", "avx512".
  static std::vector<const char*> decoders_here();
  void decode_with(const char* decoder, const uint8_t* row, int64_t begin, int64_t n, float* out) const;

 private:
  // A run of values under one scale (fp8: a segment; q8_0: a block; others: the row).
  struct Group {
    int64_t first = 0, n = 0;  // floats
    int64_t byte = 0;          // where its scale (if any) starts
  };
  size_t group_of(int64_t f) const;
  void decode_using(const kvfmt::Decoders& dec, const uint8_t* row, int64_t begin, int64_t n, float* out) const;

  KvDtype dtype_;
  std::vector<int64_t> segments_;
  std::vector<Group> groups_;
  int64_t floats_ = 0, bytes_ = 0;
};


}  // namespace moe
