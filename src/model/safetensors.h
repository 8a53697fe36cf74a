#pragma once
// Safetensors (Hugging Face checkpoints) reader and writer. The reader maps the file and
// checks the JSON header, every shape, dtype and byte range before a tensor pointer is
// handed out: a corrupt or hostile file gives a moe::Error naming the file and the tensor
// or field, never a crash. See docs/safetensors.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

namespace moe {

class MmapFile;

enum class StDtype {
  F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL, U16, U32, U64
};

std::string_view st_dtype_name(StDtype t);  // as the format spells it: "BF16", "F8_E4M3", ...
size_t st_dtype_size(StDtype t);            // bytes per element
std::optional<StDtype> st_dtype_from_name(std::string_view name);

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;  // row-major as in the file: shape.back() is contiguous
  // Points into the file; only 1-byte aligned in general (the format does not align
  // tensors), so read elements with memcpy.
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;
  uint64_t offset = 0;  // from the start of the data section
  int64_t n_elements() const;
};

// One .safetensors file: 8-byte little-endian header length, JSON header
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, data.
class SafetensorsFile {
 public:
  // Maps and validates the header; throws moe::Error("PATH: ...").
  explicit SafetensorsFile(const std::string& path);
  // Parses bytes already in memory (fuzzing, tests); `name` is used in errors. The bytes
  // must outlive the object.
  SafetensorsFile(std::string name, const uint8_t* data, size_t size);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  size_t data_offset() const { return data_offset_; }  // 8 + the header length

  const std::vector<StTensor>& tensors() const { return tensors_; }  // in data-offset order
  const StTensor* find(std::string_view name) const;                 // nullptr when absent
  // `__metadata__`, in file order.
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // Asks the OS to read the data section ahead (no-op in memory).
  void prefetch() const;

 private:
  void parse();

  std::string path_;
  std::unique_ptr<MmapFile> map_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::vector<StTensor> tensors_;
  std::vector<uint32_t> by_name_;  // indices into tensors_ sorted by name
  std::vector<std::pair<std::string, std::string>> metadata_;
};

// A checkpoint's tensors: one model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
class SafetensorsSet {
 public:
  // `dir` holds model.safetensors.index.json (shards) or exactly one *.safetensors file.
  // Every shard the index names must exist, every tensor in the weight_map must be in the
  // shard it names, and no tensor name may be in two shards. Tensors a shard holds beyond
  // the weight_map are part of the set.
  static SafetensorsSet open(const std::string& dir);

  const StTensor* find(std::string_view name) const;  // nullptr when absent
  // Path of the shard holding the tensor; an error when there is none.
  const std::string& file_of(std::string_view name) const;
  std::vector<std::string> names() const;  // every tensor, sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;  // sum of the tensors' bytes (the index's total_size)

 private:
  struct Entry {
    std::string_view name;  // owned by the StTensor
    const StTensor* tensor;
    uint32_t file;
  };
  void build_index();

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<Entry> index_;  // sorted by name
};

// Writes .safetensors files: header padded with spaces so data starts at a multiple of 8
// bytes, tensors packed in the order added (no holes, as the reference reader requires).
// Data comes from a fill callback at write time so large files stream; the same calls
// always produce the same bytes.
class SafetensorsWriter {
 public:
  using Fill = std::function<void(uint8_t* dst, size_t n_bytes)>;
  void set_metadata(const std::string& key, const std::string& value);  // replaces an old value
  // Without a fill the tensor is zeros. Throws on a duplicate or reserved name, a negative
  // dimension or a size that overflows.
  void add(const std::string& name, StDtype dtype, std::vector<int64_t> shape, Fill fill = {});
  // One file: PATH.tmp, then renamed to PATH.
  void write(const std::string& path) const;
  // Shards of at most max_shard_bytes of tensor data (a larger tensor gets a shard to
  // itself), in the order added: model-0000i-of-0000n.safetensors and
  // model.safetensors.index.json, or model.safetensors alone when one shard is enough.
  // Files of those names left in `dir` by an earlier write are removed.
  void write_sharded(const std::string& dir, uint64_t max_shard_bytes) const;
  std::vector<uint8_t> to_bytes() const;  // one file in memory (tests, fuzz seeds)

 private:
  struct Tensor {
    std::string name;
    StDtype dtype;
    std::vector<int64_t> shape;
    size_t n_bytes;
    Fill fill;
  };
  std::vector<uint8_t> encode_header() const;  // length, JSON and padding

  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<Tensor> tensors_;
  std::unordered_set<std::string> names_;
};

}  // namespace moe
