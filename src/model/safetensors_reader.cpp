// Safetensors reader. Checkpoints come from anywhere, so nothing in the file is trusted: the
// JSON header is read with a SAX handler that accepts only the format's own shape (no DOM,
// so memory stays proportional to what the header really describes, and duplicate keys,
// which a DOM would silently collapse, are seen), and every shape, dtype and byte range is
// checked against the file before a tensor pointer is handed out.
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "core/mmap_file.h"
#include "model/safetensors.h"

namespace moe {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the header length is read in place as little-endian");

// The reference implementation's limit too: real headers are a few MiB at most.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;
constexpr uint64_t kInt64Max = uint64_t(std::numeric_limits<int64_t>::max());
// Error messages quote the JSON parser, which quotes the input: keep them readable.
constexpr size_t kMaxQuoted = 300;

struct DtypeInfo {
  StDtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeInfo, 15> kDtypes{{
    {StDtype::F64, "F64", 8},
    {StDtype::F32, "F32", 4},
    {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2},
    {StDtype::F8_E4M3, "F8_E4M3", 1},
    {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::I64, "I64", 8},
    {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},
    {StDtype::I8, "I8", 1},
    {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1},
    {StDtype::U16, "U16", 2},
    {StDtype::U32, "U32", 4},
    {StDtype::U64, "U64", 8},
}};

const DtypeInfo& info(StDtype t) {
  for (const auto& d : kDtypes) {
    if (d.dtype == t) return d;
  }
  fail("safetensors: invalid StDtype {}", int(t));
}

std::string clip(std::string s) {
  if (s.size() > kMaxQuoted) s = s.substr(0, kMaxQuoted) + "...";
  return s;
}

// One tensor entry while its fields are being read.
struct RawTensor {
  StTensor t;
  bool has_dtype = false, has_shape = false, has_offsets = false;
  std::vector<uint64_t> offsets;
};

// Accepts exactly {"name": {"dtype": str, "shape": [uint...], "data_offsets": [uint, uint]},
// "__metadata__": {str: str}} and throws moe::Error at the first thing that is not that.
// Each tensor is checked as soon as its entry closes.
class HeaderHandler {
 public:
  using json = nlohmann::json;

  HeaderHandler(const std::string& path, uint64_t data_bytes)
      : path_(path), data_bytes_(data_bytes) {}

  std::vector<RawTensor> entries;
  std::vector<std::pair<std::string, std::string>> metadata;

  bool null() { return unexpected("null"); }
  bool boolean(bool v) { return unexpected(v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) {
    if (v >= 0) return number_unsigned(json::number_unsigned_t(v));
    return unexpected(fmt::format("{}", v));
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (state_ == State::Shape) {
      StTensor& t = entries.back().t;
      if (v > kInt64Max) {
        tensor_error("shape[{}] is {}, larger than 2^63-1", t.shape.size(), v);
      }
      t.shape.push_back(int64_t(v));
      return true;
    }
    if (state_ == State::Offsets) {
      RawTensor& e = entries.back();
      if (e.offsets.size() == 2) {
        tensor_error("data_offsets must be two integers [begin, end], found more than two");
      }
      e.offsets.push_back(v);
      return true;
    }
    return unexpected(fmt::format("{}", v));
  }
  bool number_float(json::number_float_t, const json::string_t& text) {
    return unexpected(clip(text));
  }
  bool string(json::string_t& v) {
    if (state_ == State::Entry && field_ == Field::Dtype) {
      const auto dtype = st_dtype_from_name(v);
      if (!dtype) {
        std::vector<std::string_view> names;
        for (const auto& d : kDtypes) names.push_back(d.name);
        tensor_error("unknown dtype '{}' (supported: {})", clip(v), fmt::join(names, ", "));
      }
      entries.back().t.dtype = *dtype;
      return true;
    }
    if (state_ == State::Metadata) {
      metadata.back().second = std::move(v);
      return true;
    }
    return unexpected("a string");
  }
  bool binary(json::binary_t&) { return unexpected("binary data"); }

  bool start_object(std::size_t) {
    if (state_ == State::Top) {
      state_ = State::Root;
    } else if (state_ == State::Root && key_ == "__metadata__") {
      if (seen_metadata_) fail("{}: duplicate key '__metadata__'", path_);
      seen_metadata_ = true;
      state_ = State::Metadata;
    } else if (state_ == State::Root) {
      entries.emplace_back();
      entries.back().t.name = std::move(key_);
      state_ = State::Entry;
    } else {
      return unexpected("an object");
    }
    return true;
  }
  bool key(json::string_t& k) {
    if (state_ == State::Root) {
      key_ = std::move(k);
    } else if (state_ == State::Metadata) {
      metadata.emplace_back(std::move(k), std::string());
    } else {
      RawTensor& e = entries.back();
      bool* seen = nullptr;
      if (k == "dtype") {
        field_ = Field::Dtype, seen = &e.has_dtype;
      } else if (k == "shape") {
        field_ = Field::Shape, seen = &e.has_shape;
      } else if (k == "data_offsets") {
        field_ = Field::Offsets, seen = &e.has_offsets;
      } else {
        tensor_error("unknown field '{}' (expected dtype, shape and data_offsets)", clip(k));
      }
      if (*seen) tensor_error("duplicate field '{}'", k);
      *seen = true;
    }
    return true;
  }
  bool end_object() {
    if (state_ == State::Entry) finish_entry();
    state_ = state_ == State::Root ? State::Done : State::Root;
    return true;
  }
  bool start_array(std::size_t) {
    if (state_ == State::Entry && field_ == Field::Shape) {
      state_ = State::Shape;
    } else if (state_ == State::Entry && field_ == Field::Offsets) {
      state_ = State::Offsets;
    } else {
      return unexpected("an array");
    }
    return true;
  }
  bool end_array() {
    if (state_ == State::Offsets && entries.back().offsets.size() != 2) {
      tensor_error("data_offsets must be two integers [begin, end], found {}",
                   entries.back().offsets.size());
    }
    state_ = State::Entry;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string_view what = ex.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag: users need the rest only.
    if (const size_t tag = what.find("] "); what.starts_with("[json.") && tag != what.npos) {
      what.remove_prefix(tag + 2);
    }
    fail("{}: header is not valid JSON: {}", path_, clip(std::string(what)));
  }

 private:
  enum class State { Top, Root, Entry, Metadata, Shape, Offsets, Done };
  enum class Field { Dtype, Shape, Offsets };

  template <typename... Args>
  [[noreturn]] void tensor_error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{}: tensor '{}': {}", path_, clip(entries.back().t.name),
         fmt::format(format, std::forward<Args>(args)...));
  }

  // A JSON value where the format has none of its kind; `found` describes it.
  [[noreturn]] bool unexpected(const std::string& found) const {
    switch (state_) {
      case State::Top: fail("{}: header must be a JSON object, found {}", path_, found);
      case State::Root:
        if (key_ == "__metadata__") {
          fail("{}: __metadata__ must be an object of strings, found {}", path_, found);
        }
        fail("{}: tensor '{}': entry must be a JSON object, found {}", path_, clip(key_), found);
      case State::Metadata:
        fail(
            "{}: __metadata__ '{}': value must be a string (__metadata__ must be an object of "
            "strings), found {}",
            path_, clip(metadata.back().first), found);
      case State::Shape:
        tensor_error("shape[{}] must be a non-negative integer, found {}",
                     entries.back().t.shape.size(), found);
      case State::Offsets:
        tensor_error("data_offsets[{}] must be a non-negative integer, found {}",
                     entries.back().offsets.size(), found);
      default: break;
    }
    // A field's value, inside a tensor entry.
    switch (field_) {
      case Field::Dtype: tensor_error("dtype must be a string, found {}", found);
      case Field::Shape:
        tensor_error("shape must be an array of non-negative integers, found {}", found);
      case Field::Offsets: break;
    }
    tensor_error("data_offsets must be two integers [begin, end], found {}", found);
  }

  void finish_entry() {
    RawTensor& e = entries.back();
    for (const auto& [seen, name] : {std::pair{e.has_dtype, "dtype"},
                                     {e.has_shape, "shape"},
                                     {e.has_offsets, "data_offsets"}}) {
      if (!seen) tensor_error("missing field '{}'", name);
    }
    StTensor& t = e.t;
    uint64_t n = 1;
    for (const int64_t d : t.shape) {
      if (d != 0 && n > kInt64Max / uint64_t(d)) {
        tensor_error("element count of shape [{}] overflows int64", fmt::join(t.shape, ", "));
      }
      n *= uint64_t(d);
    }
    const size_t elem = st_dtype_size(t.dtype);
    if (n > std::numeric_limits<size_t>::max() / elem) {
      tensor_error("byte size of shape [{}] in {} overflows", fmt::join(t.shape, ", "),
                   st_dtype_name(t.dtype));
    }
    const uint64_t bytes = n * elem;
    const uint64_t begin = e.offsets[0], end = e.offsets[1];
    if (begin > end) tensor_error("data_offsets [{}, {}]: begin is after end", begin, end);
    if (end - begin != bytes) {
      tensor_error("data_offsets [{}, {}] hold {} bytes, but shape [{}] of {} needs {}", begin, end,
                   end - begin, fmt::join(t.shape, ", "), st_dtype_name(t.dtype), bytes);
    }
    if (end > data_bytes_) {
      tensor_error("data_offsets [{}, {}] run past the end of the data section ({} bytes)", begin,
                   end, data_bytes_);
    }
    t.offset = begin;
    t.n_bytes = size_t(bytes);
    e.offsets = {};
  }

  const std::string& path_;
  uint64_t data_bytes_;
  State state_ = State::Top;
  Field field_ = Field::Dtype;
  std::string key_;  // the top-level key whose value comes next
  bool seen_metadata_ = false;
};

}  // namespace

std::string_view st_dtype_name(StDtype t) { return info(t).name; }
size_t st_dtype_size(StDtype t) { return info(t).size; }

std::optional<StDtype> st_dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  map_ = std::make_unique<MmapFile>(path);
  data_ = map_->data();
  size_ = map_->size();
  parse();
}

SafetensorsFile::SafetensorsFile(std::string name, const uint8_t* data, size_t size)
    : path_(std::move(name)), data_(data), size_(size) {
  parse();
}

SafetensorsFile::~SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;

void SafetensorsFile::parse() {
  if (size_ < 8) {
    fail("{}: file is {} bytes, shorter than the 8-byte header length: not a safetensors file",
         path_, size_);
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data_, 8);
  if (header_bytes == 0) fail("{}: header length is 0", path_);
  if (header_bytes > kMaxHeaderBytes) {
    fail("{}: header length {} is over the 100 MiB limit: not a safetensors file", path_,
         header_bytes);
  }
  if (header_bytes > size_ - 8) {
    fail("{}: header length {} is larger than the file after its first 8 bytes ({})", path_,
         header_bytes, size_ - 8);
  }
  data_offset_ = 8 + size_t(header_bytes);

  HeaderHandler h(path_, size_ - data_offset_);
  const char* json = reinterpret_cast<const char*>(data_ + 8);
  nlohmann::json::sax_parse(json, json + header_bytes, &h);

  tensors_.reserve(h.entries.size());
  for (RawTensor& e : h.entries) {
    e.t.data = data_ + data_offset_ + e.t.offset;
    tensors_.push_back(std::move(e.t));
  }
  metadata_ = std::move(h.metadata);

  std::stable_sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) {
    return std::pair(a.offset, a.n_bytes) < std::pair(b.offset, b.n_bytes);
  });
  // Empty tensors hold no bytes and so overlap nothing, wherever they point.
  const StTensor* last = nullptr;
  for (const StTensor& t : tensors_) {
    if (t.n_bytes == 0) continue;
    if (last && last->offset + last->n_bytes > t.offset) {
      fail("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' (data_offsets [{}, {}])",
           path_, clip(t.name), t.offset, t.offset + t.n_bytes, clip(last->name), last->offset,
           last->offset + last->n_bytes);
    }
    last = &t;
  }

  by_name_.resize(tensors_.size());
  std::iota(by_name_.begin(), by_name_.end(), 0u);
  std::sort(by_name_.begin(), by_name_.end(),
            [&](uint32_t a, uint32_t b) { return tensors_[a].name < tensors_[b].name; });
  for (size_t i = 1; i < by_name_.size(); ++i) {
    if (tensors_[by_name_[i - 1]].name == tensors_[by_name_[i]].name) {
      fail("{}: duplicate tensor name '{}'", path_, clip(tensors_[by_name_[i]].name));
    }
  }
  std::vector<std::string_view> keys;
  for (const auto& kv : metadata_) keys.push_back(kv.first);
  std::sort(keys.begin(), keys.end());
  if (const auto dup = std::adjacent_find(keys.begin(), keys.end()); dup != keys.end()) {
    fail("{}: __metadata__: duplicate key '{}'", path_, clip(std::string(*dup)));
  }
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it =
      std::lower_bound(by_name_.begin(), by_name_.end(), name,
                       [&](uint32_t i, std::string_view k) { return tensors_[i].name < k; });
  if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
  return &tensors_[*it];
}

void SafetensorsFile::prefetch() const {
  if (map_ && data_offset_ < size_) map_->prefetch(data_offset_, size_ - data_offset_);
}

namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";

nlohmann::json read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail("{}: cannot stat: {}", path, ec.message());
  if (size > kMaxHeaderBytes) {
    fail("{}: {} bytes is over the 100 MiB limit for an index", path, size);
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path, clip(e.what()));
  }
}

}  // namespace

SafetensorsSet SafetensorsSet::open(const std::string& dir) {
  SafetensorsSet set;
  set.dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir);
  const std::string index_path = (fs::path(dir) / kIndexName).string();

  if (!fs::exists(index_path, ec)) {
    std::vector<std::string> found;
    for (const auto& f : fs::directory_iterator(dir, ec)) {
      if (f.is_regular_file(ec) && f.path().extension() == ".safetensors") {
        found.push_back(f.path().filename().string());
      }
    }
    if (ec) fail("{}: cannot list: {}", dir, ec.message());
    std::sort(found.begin(), found.end());
    if (found.empty()) fail("{}: no {} and no *.safetensors file", dir, kIndexName);
    if (found.size() > 1) {
      fail("{}: several .safetensors files ({}) and no {} to say how they fit together", dir,
           fmt::join(found, ", "), kIndexName);
    }
    set.files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / found[0]).string()));
    set.build_index();
    return set;
  }

  const nlohmann::json index = read_index(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail("{}: must be a JSON object with a \"weight_map\" object", index_path);
  }
  // Shard file -> one tensor the index puts there (named when the shard is missing).
  std::vector<std::pair<std::string, std::string>> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      fail("{}: weight_map '{}' is not a shard file name", index_path, tensor);
    }
    const std::string& file = shard.get_ref<const std::string&>();
    if (file.empty() || file.find('/') != file.npos || file == "." || file == "..") {
      fail("{}: weight_map '{}': shard '{}' is not a file name in {}", index_path, tensor,
           clip(file), dir);
    }
    shards.emplace_back(file, tensor);
  }
  std::stable_sort(shards.begin(), shards.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  shards.erase(std::unique(shards.begin(), shards.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               shards.end());
  for (const auto& [file, tensor] : shards) {
    const fs::path p = fs::path(dir) / file;
    if (!fs::exists(p, ec)) {
      fail("{}: shard file {} is missing (the weight_map puts tensor '{}' there)", index_path,
           p.string(), tensor);
    }
    set.files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
  }
  set.build_index();
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    const std::string& file = shard.get_ref<const std::string&>();
    const StTensor* t = set.find(tensor);
    const std::string where = (fs::path(dir) / file).string();
    if (!t || set.file_of(tensor) != where) {
      fail("{}: tensor '{}' is listed in shard {}, which does not contain it{}", index_path, tensor,
           where, t ? fmt::format(" (it is in {})", set.file_of(tensor)) : "");
    }
  }
  return set;
}

void SafetensorsSet::build_index() {
  for (uint32_t f = 0; f < files_.size(); ++f) {
    for (const StTensor& t : files_[f]->tensors()) index_.push_back({t.name, &t, f});
  }
  std::stable_sort(index_.begin(), index_.end(),
                   [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < index_.size(); ++i) {
    if (index_[i - 1].name == index_[i].name) {
      fail("{}: tensor '{}' is in two shards: {} and {}", dir_, clip(std::string(index_[i].name)),
           files_[index_[i - 1].file]->path(), files_[index_[i].file]->path());
    }
  }
}

const StTensor* SafetensorsSet::find(std::string_view name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), name,
                                   [](const Entry& e, std::string_view k) { return e.name < k; });
  return it != index_.end() && it->name == name ? it->tensor : nullptr;
}

const std::string& SafetensorsSet::file_of(std::string_view name) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), name,
                                   [](const Entry& e, std::string_view k) { return e.name < k; });
  if (it == index_.end() || it->name != name) fail("{}: no tensor '{}'", dir_, name);
  return files_[it->file]->path();
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const Entry& e : index_) out.emplace_back(e.name);
  return out;
}

uint64_t SafetensorsSet::total_bytes() const {
  uint64_t total = 0;
  for (const Entry& e : index_) total += e.tensor->n_bytes;
  return total;
}

}  // namespace moe
