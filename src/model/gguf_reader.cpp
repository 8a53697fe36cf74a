// GGUF reader. Model files come from anywhere, so nothing read from the file is trusted:
// every read is bounds-checked, every count is compared with the bytes that are left
// before anything is allocated for it, and every shape, type and offset is checked before
// a tensor pointer is handed out.
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/mmap_file.h"
#include "model/gguf.h"

namespace moe {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF values are read in place as little-endian");

constexpr uint32_t kMaxDims = 4;
// Smallest encodings of a metadata entry (key length, value type, a one-byte value) and of
// a tensor info (name length, n_dims, one dim, type, offset): a count needing more bytes
// than the file has left is a lie, whatever the rest of the file says.
constexpr size_t kMinKvBytes = 8 + 4 + 1;
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
// Even a count that fits the file is only a claim until its entries are read: reserve no
// more than this up front so memory grows with what was actually parsed.
constexpr uint64_t kMaxReserve = 1 << 16;
constexpr uint64_t kInt64Max = uint64_t(std::numeric_limits<int64_t>::max());

std::string field_name(std::string_view what, int64_t index) {
  return index >= 0 ? fmt::format("{}[{}]", what, index) : std::string(what);
}

// Bounds-checked little-endian reads. `where_` names the entry being read (the header, a
// metadata key, a tensor) so that each error says which field of which entry was bad.
class Reader {
 public:
  Reader(const std::string& file, const uint8_t* data, size_t size)
      : file_(file), data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }
  void set_where(std::string where) { where_ = std::move(where); }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: {}: {}", file_, where_, fmt::format(format, std::forward<Args>(args)...));
  }

  const uint8_t* take(size_t n, std::string_view what, int64_t index = -1) {
    if (n > left()) {
      error("truncated at byte {} reading {} (needs {} bytes, {} left)", pos_,
            field_name(what, index), n, left());
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <typename T>
  T read(std::string_view what, int64_t index = -1) {
    T v;
    std::memcpy(&v, take(sizeof(T), what, index), sizeof(T));
    return v;
  }

  std::string read_string(std::string_view what, int64_t index = -1) {
    if (left() < 8) {
      error("truncated at byte {} reading the length of {} (needs 8 bytes, {} left)", pos_,
            field_name(what, index), left());
    }
    const uint64_t len = read<uint64_t>(what, index);
    if (len > left()) {
      error("{} length {} cannot fit in the remaining {} bytes", field_name(what, index), len,
            left());
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

 private:
  const std::string& file_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string where_ = "header";
};

int64_t read_int(Reader& r, GgufValueType t, std::string_view what, int64_t index) {
  switch (t) {
    case GgufValueType::UINT8: return r.read<uint8_t>(what, index);
    case GgufValueType::INT8: return r.read<int8_t>(what, index);
    case GgufValueType::UINT16: return r.read<uint16_t>(what, index);
    case GgufValueType::INT16: return r.read<int16_t>(what, index);
    case GgufValueType::UINT32: return r.read<uint32_t>(what, index);
    case GgufValueType::INT32: return r.read<int32_t>(what, index);
    case GgufValueType::INT64: return r.read<int64_t>(what, index);
    case GgufValueType::UINT64: {
      // GgufArray keeps integers as int64: the one value it cannot hold is refused here.
      const uint64_t u = r.read<uint64_t>(what, index);
      if (u > kInt64Max) {
        r.error(
            "{} is {}, which does not fit in int64 (uint64 arrays above 2^63-1 are not "
            "supported)",
            field_name(what, index), u);
      }
      return int64_t(u);
    }
    default: break;
  }
  r.error("{} has type {}, which is not an integer", field_name(what, index), gguf_type_name(t));
}

bool read_bool(Reader& r, std::string_view what, int64_t index) {
  const uint8_t b = r.read<uint8_t>(what, index);
  if (b > 1) r.error("{} is {}, but a bool must be 0 or 1", field_name(what, index), b);
  return b == 1;
}

GgufArray read_array(Reader& r) {
  GgufArray a;
  const uint32_t elem_id = r.read<uint32_t>("array element type");
  if (elem_id == uint32_t(GgufValueType::ARRAY)) r.error("nested arrays are not supported");
  if (!gguf_type_known(elem_id)) r.error("unknown array element type {}", elem_id);
  a.elem_type = GgufValueType(elem_id);
  const uint64_t count = r.read<uint64_t>("array count");
  const size_t min_bytes = gguf_scalar_size(a.elem_type).value_or(8);  // strings: a length
  if (count > r.left() / min_bytes) {
    r.error("array count {} cannot fit in the remaining {} bytes (each {} takes at least {})",
            count, r.left(), gguf_type_name(a.elem_type), min_bytes);
  }
  const size_t reserve = size_t(std::min(count, kMaxReserve));
  switch (a.elem_type) {
    case GgufValueType::STRING:
      a.strings.reserve(reserve);
      for (uint64_t i = 0; i < count; ++i)
        a.strings.push_back(r.read_string("element", int64_t(i)));
      break;
    case GgufValueType::FLOAT32:
      a.floats.reserve(reserve);
      for (uint64_t i = 0; i < count; ++i) a.floats.push_back(r.read<float>("element", int64_t(i)));
      break;
    case GgufValueType::FLOAT64:
      a.floats.reserve(reserve);
      for (uint64_t i = 0; i < count; ++i)
        a.floats.push_back(r.read<double>("element", int64_t(i)));
      break;
    case GgufValueType::BOOL:
      a.ints.reserve(reserve);
      for (uint64_t i = 0; i < count; ++i) a.ints.push_back(read_bool(r, "element", int64_t(i)));
      break;
    default:
      a.ints.reserve(reserve);
      for (uint64_t i = 0; i < count; ++i) {
        a.ints.push_back(read_int(r, a.elem_type, "element", int64_t(i)));
      }
      break;
  }
  return a;
}

GgufValue read_value(Reader& r, uint32_t type_id) {
  if (!gguf_type_known(type_id)) r.error("unknown value type {}", type_id);
  GgufValue v;
  v.type = GgufValueType(type_id);
  switch (v.type) {
    case GgufValueType::STRING: v.value = r.read_string("string value"); break;
    case GgufValueType::ARRAY: v.value = read_array(r); break;
    case GgufValueType::UINT64: v.value = r.read<uint64_t>("value"); break;
    case GgufValueType::FLOAT32: v.value = double(r.read<float>("value")); break;
    case GgufValueType::FLOAT64: v.value = r.read<double>("value"); break;
    case GgufValueType::BOOL: v.value = read_bool(r, "value", -1); break;
    default: v.value = read_int(r, v.type, "value", -1); break;
  }
  return v;
}

std::string describe_magic(const uint8_t* m) {
  std::string text;
  bool printable = true;
  for (int i = 0; i < 4; ++i) {
    printable = printable && m[i] >= 0x20 && m[i] < 0x7f;
    text += char(m[i]);
  }
  const std::string hex = fmt::format("{:02x} {:02x} {:02x} {:02x}", m[0], m[1], m[2], m[3]);
  return printable ? fmt::format("\"{}\" ({})", text, hex) : hex;
}

std::string describe_type(const GgufValue& v) {
  if (v.type == GgufValueType::ARRAY) {
    if (const auto* a = std::get_if<GgufArray>(&v.value)) {
      return fmt::format("array of {}", gguf_type_name(a->elem_type));
    }
  }
  return std::string(gguf_type_name(v.type));
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64: return true;
    default: return false;
  }
}

// Sorts indices of `items` by name; returns the first pair of indices sharing a name, if any.
template <typename Items, typename Name>
std::optional<std::pair<uint32_t, uint32_t>> index_by_name(const Items& items, Name name,
                                                           std::vector<uint32_t>& index) {
  index.resize(items.size());
  std::iota(index.begin(), index.end(), 0u);
  std::stable_sort(index.begin(), index.end(),
                   [&](uint32_t a, uint32_t b) { return name(items[a]) < name(items[b]); });
  for (size_t i = 1; i < index.size(); ++i) {
    if (name(items[index[i - 1]]) == name(items[index[i]])) {
      return std::pair{index[i - 1], index[i]};
    }
  }
  return std::nullopt;
}

template <typename Items, typename Name>
const typename Items::value_type* lookup(const Items& items, const std::vector<uint32_t>& index,
                                         Name name, std::string_view key) {
  auto it = std::lower_bound(index.begin(), index.end(), key, [&](uint32_t i, std::string_view k) {
    return std::string_view(name(items[i])) < k;
  });
  if (it == index.end() || name(items[*it]) != key) return nullptr;
  return &items[*it];
}

const std::string& kv_name(const std::pair<std::string, GgufValue>& kv) { return kv.first; }
const std::string& tensor_name(const GgufTensorInfo& t) { return t.name; }

}  // namespace

GgufFile::GgufFile(const std::string& path) : path_(path) {
  map_ = std::make_unique<MmapFile>(path);
  data_ = map_->data();
  size_ = map_->size();
  parse();
}

GgufFile::GgufFile(std::string name, const uint8_t* data, size_t size)
    : path_(std::move(name)), data_(data), size_(size) {
  parse();
}

std::unique_ptr<GgufFile> GgufFile::assemble(std::string name, const GgufWriter& metadata,
                                             std::vector<GgufExternalTensor> tensors,
                                             std::shared_ptr<const void> storage) {
  if (metadata.has_tensors()) fail("{}: an assembled model file takes its tensors separately", name);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->header_ = metadata.to_bytes();
  f->data_ = f->header_.data();
  f->size_ = f->header_.size();
  f->parse();
  f->storage_ = std::move(storage);
  for (GgufExternalTensor& x : tensors) {
    GgufTensorInfo t;
    t.name = std::move(x.name);
    t.type = x.type;
    t.ne = std::move(x.ne);
    const auto& tr = traits(t.type);
    if (!x.slices.empty()) x.data = x.slices.front();
    if (t.ne.empty() || t.ne[0] % tr.block_size != 0 || !x.data)
      fail("{}: tensor '{}' has no data or a first dimension that is not whole {} blocks", f->path_, t.name, tr.name);
    if (!x.slices.empty() && (t.ne.size() != 3 || int64_t(x.slices.size()) != t.ne[2]))
      fail("{}: tensor '{}' has {} slices for shape of {} dimensions", f->path_, t.name, x.slices.size(), t.ne.size());
    t.n_bytes = row_bytes(t.type, t.ne[0]) * size_t(t.n_elements() / t.ne[0]);
    t.data = x.data;
    t.slices = std::move(x.slices);
    f->tensors_.push_back(std::move(t));
  }
  if (auto dup = index_by_name(f->tensors_, tensor_name, f->tensors_by_name_))
    fail("{}: duplicate tensor name '{}'", f->path_, f->tensors_[dup->first].name);
  return f;
}

GgufFile::~GgufFile() = default;
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;

void GgufFile::parse() {
  Reader r(path_, data_, size_);
  const uint8_t* magic = r.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    r.error("bad magic {} (expected \"GGUF\"): not a GGUF file", describe_magic(magic));
  }
  version_ = r.read<uint32_t>("version");
  if (version_ == 1) {
    r.error(
        "GGUF version 1 is not supported (only 2 and 3); convert the file with a current "
        "llama.cpp");
  }
  if (version_ == 0x02000000u || version_ == 0x03000000u) {
    r.error(
        "version reads {:#010x}: this looks like a big-endian GGUF file, and only "
        "little-endian files are supported",
        version_);
  }
  if (version_ != 2 && version_ != 3)
    r.error("unsupported GGUF version {} (supported: 2, 3)", version_);

  const uint64_t tensor_count = r.read<uint64_t>("tensor_count");
  const uint64_t kv_count = r.read<uint64_t>("kv_count");
  if (tensor_count > r.left() / kMinTensorInfoBytes || tensor_count > UINT32_MAX) {
    r.error("tensor_count {} cannot fit in the remaining {} bytes", tensor_count, r.left());
  }
  if (kv_count > r.left() / kMinKvBytes || kv_count > UINT32_MAX) {
    r.error("kv_count {} cannot fit in the remaining {} bytes", kv_count, r.left());
  }

  kv_.reserve(size_t(std::min(kv_count, kMaxReserve)));
  for (uint64_t i = 0; i < kv_count; ++i) {
    r.set_where(fmt::format("metadata entry #{}", i));
    std::string key = r.read_string("key");
    r.set_where(fmt::format("metadata '{}'", key));
    const uint32_t type = r.read<uint32_t>("value type");
    GgufValue value = read_value(r, type);
    kv_.emplace_back(std::move(key), std::move(value));
  }
  if (auto dup = index_by_name(kv_, kv_name, kv_by_name_)) {
    fail("{}: duplicate metadata key '{}' (entries #{} and #{})", path_, kv_[dup->first].first,
         std::min(dup->first, dup->second), std::max(dup->first, dup->second));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!is_integer(a->type)) {
      fail("{}: metadata 'general.alignment' has type {}, expected uint32", path_,
           describe_type(*a));
    }
    const bool is_u64 = a->type == GgufValueType::UINT64;
    const int64_t s = is_u64 ? 0 : std::get<int64_t>(a->value);
    const uint64_t v = is_u64 ? std::get<uint64_t>(a->value) : uint64_t(s);
    if ((!is_u64 && s <= 0) || v > UINT32_MAX || !std::has_single_bit(v)) {
      fail("{}: metadata 'general.alignment': {} is not a nonzero power of two", path_,
           is_u64 ? fmt::format("{}", v) : fmt::format("{}", s));
    }
    alignment_ = size_t(v);
  }

  tensors_.reserve(size_t(std::min(tensor_count, kMaxReserve)));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    r.set_where(fmt::format("tensor #{}", i));
    t.name = r.read_string("name");
    r.set_where(fmt::format("tensor '{}'", t.name));
    const uint32_t n_dims = r.read<uint32_t>("n_dims");
    if (n_dims == 0 || n_dims > kMaxDims)
      r.error("n_dims {} is out of range (1 to {})", n_dims, kMaxDims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t n = r.read<uint64_t>("ne", d);
      if (n == 0) r.error("ne[{}] is 0: every dimension must be positive", d);
      if (n > kInt64Max) r.error("ne[{}] is negative ({})", d, int64_t(n));
      t.ne.push_back(int64_t(n));
    }
    int64_t n_elements = 1;
    for (const int64_t n : t.ne) {
      if (n_elements > std::numeric_limits<int64_t>::max() / n) {
        r.error("element count of shape [{}] overflows int64", fmt::join(t.ne, ", "));
      }
      n_elements *= n;
    }
    const uint32_t type_id = r.read<uint32_t>("type");
    const auto traits = ggml_type_traits(type_id);
    if (!traits) r.error("unknown tensor type id {}", type_id);
    t.type = traits->type;
    if (t.ne[0] % traits->block_size != 0) {
      r.error("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], traits->name,
              traits->block_size);
    }
    const uint64_t blocks = uint64_t(n_elements / traits->block_size);
    if (blocks > std::numeric_limits<size_t>::max() / traits->block_bytes) {
      r.error("size of shape [{}] in {} overflows", fmt::join(t.ne, ", "), traits->name);
    }
    t.n_bytes = size_t(blocks) * traits->block_bytes;
    t.offset = r.read<uint64_t>("offset");
    if (t.offset % alignment_ != 0) {
      r.error("offset {} is not a multiple of the alignment {}", t.offset, alignment_);
    }
    tensors_.push_back(std::move(t));
  }
  if (auto dup = index_by_name(tensors_, tensor_name, tensors_by_name_)) {
    fail("{}: duplicate tensor name '{}' (tensors #{} and #{})", path_, tensors_[dup->first].name,
         std::min(dup->first, dup->second), std::max(dup->first, dup->second));
  }

  const size_t infos_end = r.pos();
  data_offset_ = (infos_end + alignment_ - 1) / alignment_ * alignment_;
  if (tensors_.empty()) {
    data_offset_ = std::min(data_offset_, size_);
    return;
  }
  if (data_offset_ > size_) {
    fail(
        "{}: data section: padding the tensor infos (ending at byte {}) to the alignment {} "
        "runs past the end of the file (size {})",
        path_, infos_end, alignment_, size_);
  }
  const uint64_t data_bytes = size_ - data_offset_;
  for (auto& t : tensors_) {
    if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
      fail(
          "{}: tensor '{}': offset {} + {} bytes is past the end of the file (size {}, data "
          "section starts at byte {})",
          path_, t.name, t.offset, t.n_bytes, size_, data_offset_);
    }
    t.data = data_ + data_offset_ + t.offset;
  }
  std::vector<uint32_t> by_offset(tensors_.size());
  std::iota(by_offset.begin(), by_offset.end(), 0u);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [&](uint32_t a, uint32_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto& prev = tensors_[by_offset[i - 1]];
    const auto& cur = tensors_[by_offset[i]];
    if (prev.offset + prev.n_bytes > cur.offset) {
      fail("{}: tensor '{}' (offset {}, {} bytes) overlaps tensor '{}' (offset {}, {} bytes)",
           path_, cur.name, cur.offset, cur.n_bytes, prev.name, prev.offset, prev.n_bytes);
    }
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto* kv = lookup(kv_, kv_by_name_, kv_name, key);
  return kv ? &kv->second : nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  return lookup(tensors_, tensors_by_name_, tensor_name, name);
}

void GgufFile::prefetch() const {
  if (map_ && data_offset_ < size_) map_->prefetch(data_offset_, size_ - data_offset_);
}

namespace {

[[noreturn]] void mismatch(const std::string& path, std::string_view key, const GgufValue& v,
                           std::string_view wanted) {
  fail("{}: metadata '{}' has type {}, which does not convert to {}", path, key, describe_type(v),
       wanted);
}

int64_t as_int(const std::string& path, std::string_view key, const GgufValue& v) {
  if (v.type == GgufValueType::UINT64) {
    const uint64_t u = std::get<uint64_t>(v.value);
    if (u > kInt64Max)
      fail("{}: metadata '{}' is {} (uint64), which does not fit in int64", path, key, u);
    return int64_t(u);
  }
  if (!is_integer(v.type)) mismatch(path, key, v, "int64");
  return std::get<int64_t>(v.value);
}

const GgufValue& required(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find(key);
  if (!v) fail("{}: required metadata key '{}' is missing", f.path(), key);
  return *v;
}

}  // namespace

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  return as_int(path_, key, *v);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type == GgufValueType::FLOAT32 || v->type == GgufValueType::FLOAT64) {
    return std::get<double>(v->value);
  }
  if (v->type == GgufValueType::UINT64) return double(std::get<uint64_t>(v->value));
  if (is_integer(v->type)) return double(std::get<int64_t>(v->value));
  mismatch(path_, key, *v, "float64");
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL) mismatch(path_, key, *v, "bool");
  return std::get<bool>(v->value);
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::STRING) mismatch(path_, key, *v, "string");
  return std::get<std::string>(v->value);
}

const GgufArray* GgufFile::get_array(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (v->type != GgufValueType::ARRAY) mismatch(path_, key, *v, "array");
  return &std::get<GgufArray>(v->value);
}

int64_t GgufFile::require_int(std::string_view key) const {
  return as_int(path_, key, required(*this, key));
}

double GgufFile::require_float(std::string_view key) const {
  required(*this, key);
  return *get_float(key);
}

std::string GgufFile::require_string(std::string_view key) const {
  required(*this, key);
  return *get_string(key);
}

bool GgufFile::require_bool(std::string_view key) const {
  required(*this, key);
  return *get_bool(key);
}

const GgufArray& GgufFile::require_array(std::string_view key) const {
  required(*this, key);
  return *get_array(key);
}

}  // namespace moe
