#pragma once
// GGUF (version 2 and 3) reader and writer. The reader maps the file and checks every
// header field, count, shape and offset before anything uses it: a corrupt or hostile file
// gives a moe::Error naming the file and the field, never a crash.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/ggml_type.h"

namespace moe {

class MmapFile;

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

std::string_view gguf_type_name(GgufValueType t);
// Whether a raw type id read from a file is one of the values above.
bool gguf_type_known(uint32_t id);
// Bytes of one scalar of this type; nullopt for STRING and ARRAY (variable length).
std::optional<size_t> gguf_scalar_size(GgufValueType t);

// An array value keeps its element type; elements are stored in the widest C++ type of
// their kind (nested arrays are allowed by the format and rejected: no model uses them).
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<int64_t> ints;        // every integer type and bool; UINT64 > INT64_MAX is rejected
  std::vector<double> floats;       // FLOAT32, FLOAT64
  std::vector<std::string> strings; // STRING
  size_t size() const;
};

// Which alternative the reader stores: int64_t for every integer type but UINT64 (uint64_t),
// double for FLOAT32/FLOAT64, bool, std::string, GgufArray. The writer also accepts any
// numeric alternative for a numeric type when the value fits it.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray> value;
};

// llama.cpp's general.file_type (llama_ftype) for a file whose weight matrices are mostly
// `t`; q4_K_M for the q4_K / q6_K mix. Throws for a type GGUF files cannot hold.
uint32_t gguf_file_type(GgmlType t, bool q4_k_m = false);

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // dims, ne[0] is the contiguous one (GGUF order)
  uint64_t offset = 0;      // from the start of the data section (0 in an assembled file)
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;  // the tensor's bytes: in the mapped file or, assembled, elsewhere
  // An assembled 3-D tensor whose matrices lie apart (a checkpoint's experts used in place):
  // one pointer per index of the last dimension; empty when the tensor is contiguous.
  std::vector<const uint8_t*> slices;
  int64_t n_elements() const;
  // Row r of the tensor (rows over ne[1..]), wherever its slice lies.
  const uint8_t* row(int64_t r) const;
};

// A tensor of an assembled model file: its bytes live outside any GGUF file.
struct GgufExternalTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // GGUF order
  const uint8_t* data = nullptr;
  std::vector<const uint8_t*> slices;  // or, for a 3-D tensor, one pointer per matrix
};

class GgufWriter;

class GgufFile {
 public:
  // Maps and validates the whole header; throws moe::Error("PATH: ...").
  explicit GgufFile(const std::string& path);
  // Parses bytes already in memory (fuzzing, tests); `name` is used in errors. The bytes
  // must outlive the object.
  GgufFile(std::string name, const uint8_t* data, size_t size);
  // A model file put together in memory from another checkpoint format: the metadata a
  // writer holds (it must have no tensors) and tensors whose bytes `storage` keeps alive.
  // Checked like a parsed file (duplicate names, shapes against types).
  static std::unique_ptr<GgufFile> assemble(std::string name, const GgufWriter& metadata,
                                            std::vector<GgufExternalTensor> tensors,
                                            std::shared_ptr<const void> storage);
  ~GgufFile();
  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  // Where the data section starts (a multiple of alignment()); tensor offsets count from here.
  size_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed access. get_* returns nullopt when the key is absent and throws when it is
  // present with a type that does not convert (message names file, key and both types).
  // Integers convert between widths when the value fits; floats accept integer values.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const GgufArray* get_array(std::string_view key) const;  // nullptr when absent
  // require_*: like get_* but a missing key is an error too.
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  bool require_bool(std::string_view key) const;
  const GgufArray& require_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return t.data; }
  // Asks the OS to read all tensor data ahead (no-op for in-memory files).
  void prefetch() const;

 private:
  GgufFile() = default;
  void parse();

  std::string path_;
  std::unique_ptr<MmapFile> map_;
  std::vector<uint8_t> header_;           // an assembled file's metadata, encoded
  std::shared_ptr<const void> storage_;   // an assembled file's tensor bytes
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  // Indices into kv_ / tensors_ sorted by name: lookups by binary search, and duplicates
  // found while building them.
  std::vector<uint32_t> kv_by_name_;
  std::vector<uint32_t> tensors_by_name_;
};

// Builds a GGUF file. Tensor data is produced by a callback at write time so a writer can
// emit files larger than memory; the same calls always produce the same bytes.
class GgufWriter {
 public:
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);
  void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
  void set_array_f32(const std::string& key, const std::vector<float>& v);
  // Raw value of any type, for tests that build unusual files.
  void set_value(const std::string& key, GgufValue v);

  using Fill = std::function<void(uint8_t* dst, size_t n_bytes)>;
  // ne in GGUF order (ne[0] contiguous); ne[0] must be a multiple of the type's block size.
  // Without a fill the tensor is zeros.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, Fill fill = {});

  void set_alignment(uint32_t alignment);  // also stored as general.alignment
  // Writes PATH.tmp then renames it to PATH; calls progress(done_bytes, total_bytes).
  void write(const std::string& path,
             const std::function<void(uint64_t, uint64_t)>& progress = {}) const;
  // The whole file in memory (tests).
  std::vector<uint8_t> to_bytes() const;
  bool has_tensors() const { return !tensors_.empty(); }

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    size_t n_bytes;
    Fill fill;
  };
  void put(const std::string& key, GgufValue v);
  // Metadata and tensor infos, plus each tensor's offset and the data section's size.
  std::vector<uint8_t> encode_header(std::vector<uint64_t>& offsets, uint64_t& data_bytes) const;

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace moe
